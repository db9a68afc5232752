#include "kev/sampling.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <sstream>

#include "kev/error.h"

namespace kev {
namespace {

[[noreturn]] void invalid(const std::string& message) {
    throw Error(ErrorCode::InvalidArgument, message);
}

std::string num(double v) {
    std::ostringstream s;
    s << v;
    return s.str();
}

// The order every stage agrees on: larger logit first, then lower id. Sorting by the
// logit (not by a rounded probability) keeps ties exact.
struct MoreLikely {
    const float* logits;
    bool operator()(TokenId a, TokenId b) const {
        const float la = logits[a];
        const float lb = logits[b];
        return la > lb || (la == lb && a < b);
    }
};

// The largest logit (NaNs ignored). Eight independent running maxima instead of
// max_element's one branchy chain: several times faster over a 150k vocabulary.
float max_logit(const float* logits, std::size_t vocab) {
    float lanes[8];
    std::fill(lanes, lanes + 8, logits[0]);
    std::size_t i = 0;
    for (; i + 8 <= vocab; i += 8) {
        for (std::size_t j = 0; j < 8; ++j) lanes[j] = lanes[j] < logits[i + j] ? logits[i + j] : lanes[j];
    }
    float m = logits[0];
    for (const float l : lanes) m = m < l ? l : m;
    for (; i < vocab; ++i) m = m < logits[i] ? logits[i] : m;
    return m;
}

// exp(logit - max): the softmax numerator, 1 for the most likely token. In float
// (fast over a whole vocabulary); every sum of weights is in double.
float weight(float logit, float max) { return std::exp(logit - max); }

// One token in the fast path: logit and weight next to the id, so that selecting
// reads contiguous memory instead of jumping around the logits.
struct Cand {
    float logit;
    float w;
    TokenId id;
};

bool more_likely(const Cand& a, const Cand& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

// Weighted quickselect over pool[first, last), whose candidates all come after
// pool[0, first) in the sorted order; `base` is the mass of pool[0, first).
// Rearranges the range so that pool[0, L) holds the L most likely candidates and
// pool[L - 1] is the L-th most likely, where L is the length of the shortest prefix of
// the sorted order whose mass reaches `target` (>= target, or > target when `strict`).
// Returns L, or 0 when the range does not reach it. Expected O(last - first): no full
// sort of the vocabulary, whatever the distribution.
std::size_t select_by_mass(std::vector<Cand>& pool, std::size_t first, std::size_t last, double base,
                           double target, bool strict) {
    const auto reached = [&](double mass) { return strict ? mass > target : mass >= target; };
    std::size_t lo = first;
    std::size_t hi = last;
    if (reached(base)) return 0;
    while (hi - lo > 16) {
        // Median of three as the pivot, moved to the end while partitioning.
        std::size_t a = lo, b = lo + (hi - lo) / 2, c = hi - 1;
        if (more_likely(pool[b], pool[a])) std::swap(a, b);
        if (more_likely(pool[c], pool[b])) std::swap(b, c);
        if (more_likely(pool[b], pool[a])) std::swap(a, b);
        std::swap(pool[b], pool[hi - 1]);
        const Cand pivot = pool[hi - 1];
        const auto split = std::partition(pool.begin() + static_cast<std::ptrdiff_t>(lo),
                                          pool.begin() + static_cast<std::ptrdiff_t>(hi - 1),
                                          [&pivot](const Cand& x) { return more_likely(x, pivot); });
        const auto m = static_cast<std::size_t>(split - pool.begin());
        std::swap(pool[m], pool[hi - 1]);
        double upper = 0.0;
        for (std::size_t i = lo; i < m; ++i) upper += pool[i].w;
        if (reached(base + upper)) {
            hi = m;
            continue;
        }
        base += upper;
        if (reached(base + pivot.w)) return m + 1;
        base += pivot.w;
        lo = m + 1;
    }
    std::sort(pool.begin() + static_cast<std::ptrdiff_t>(lo), pool.begin() + static_cast<std::ptrdiff_t>(hi),
              more_likely);
    for (std::size_t i = lo; i < hi; ++i) {
        base += pool[i].w;
        if (reached(base)) return i + 1;
    }
    return 0;
}

void keep_prefix(Candidates& c, std::size_t n) {
    c.ids.resize(n);
    c.weights.resize(n);
}

}  // namespace

void SamplingSettings::validate() const {
    if (temperature) {
        const float t = *temperature;
        if (std::isnan(t)) invalid("temperature is not a number");
        if (t < 0.0f) invalid("temperature " + num(t) + " is negative (0 is greedy)");
        if (t > kMaxTemperature) {
            invalid("temperature " + num(t) + " is above the maximum of " + num(kMaxTemperature));
        }
        if (t > 0.0f && t < kMinPositiveTemperature) {
            invalid("temperature " + num(t) + " is too small to compute with: use 0 for greedy or at least " +
                    num(kMinPositiveTemperature));
        }
    }
    if (top_k < 0) invalid("top-k " + std::to_string(top_k) + " is negative (0 turns it off)");
    if (!(top_p > 0.0f && top_p <= 1.0f)) {
        invalid("top-p " + num(top_p) + " is outside (0, 1] (1 turns it off)");
    }
    if (!(min_p >= 0.0f && min_p < 1.0f)) {
        invalid("min-p " + num(min_p) + " is outside [0, 1) (0 turns it off)");
    }
    if (!(repetition_penalty > 0.0f) || !std::isfinite(repetition_penalty)) {
        invalid("repetition penalty " + num(repetition_penalty) +
                " must be a positive number (1 turns it off)");
    }
    if (max_new_tokens < 1) {
        invalid("max new tokens must be at least 1, got " + std::to_string(max_new_tokens));
    }
    for (std::size_t i = 0; i < stop_strings.size(); ++i) {
        if (stop_strings[i].empty()) {
            invalid("stop string " + std::to_string(i + 1) + " is empty (it would stop at once)");
        }
    }
}

bool all_finite(const float* logits, std::size_t vocab) {
    // A NaN or an infinity has every exponent bit set. Tested in blocks without an early
    // exit inside, so that the compiler vectorizes the test (a card's row is 50-150k logits).
    constexpr std::size_t kBlock = 2048;
    for (std::size_t i = 0; i < vocab; i += kBlock) {
        const std::size_t end = std::min(vocab, i + kBlock);
        std::uint32_t special = 0;
        for (std::size_t j = i; j < end; ++j) {
            std::uint32_t bits;
            std::memcpy(&bits, logits + j, sizeof bits);
            special |= static_cast<std::uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
        }
        if (special) return false;
    }
    return true;
}

void apply_repetition_penalty(float* logits, std::size_t vocab, const TokenId* history,
                              std::size_t history_len, float penalty) {
    if (penalty == 1.0f || history_len == 0) return;
    // Each distinct token once, however often it occurs (as HF's gather/scatter).
    std::vector<TokenId> seen(history, history + history_len);
    std::sort(seen.begin(), seen.end());
    seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
    for (const TokenId t : seen) {
        if (t < 0 || static_cast<std::size_t>(t) >= vocab) continue;
        float& l = logits[t];
        l = l < 0.0f ? l * penalty : l / penalty;
    }
}

void apply_temperature(float* logits, std::size_t vocab, float temperature) {
    if (!(temperature > 0.0f)) invalid("apply_temperature: temperature must be positive, got " + num(temperature));
    // Divided (not multiplied by the inverse) to round exactly as the reference does.
    for (std::size_t i = 0; i < vocab; ++i) logits[i] /= temperature;
}

TokenId argmax(const float* logits, std::size_t vocab) {
    if (vocab == 0) invalid("argmax over an empty vocabulary");
    // The first of equal maxima: the lowest id.
    const float m = max_logit(logits, vocab);
    const float* first = std::find(logits, logits + vocab, m);
    return first == logits + vocab ? 0 : static_cast<TokenId>(first - logits);
}

double Candidates::total() const {
    return std::accumulate(weights.begin(), weights.end(), 0.0);
}

Candidates sorted_candidates(const float* logits, std::size_t vocab) {
    if (vocab == 0) invalid("sampling over an empty vocabulary");
    Candidates c;
    c.ids.resize(vocab);
    std::iota(c.ids.begin(), c.ids.end(), TokenId{0});
    std::sort(c.ids.begin(), c.ids.end(), MoreLikely{logits});
    const float m = max_logit(logits, vocab);
    c.weights.reserve(vocab);
    for (const TokenId t : c.ids) c.weights.push_back(weight(logits[t], m));
    return c;
}

void apply_top_k(Candidates& c, std::int32_t top_k) {
    if (top_k > 0 && static_cast<std::size_t>(top_k) < c.size()) {
        keep_prefix(c, static_cast<std::size_t>(top_k));
    }
}

void apply_top_p(Candidates& c, float top_p) {
    if (top_p >= 1.0f || c.size() == 0) return;
    const double threshold = static_cast<double>(top_p) * c.total();
    double cum = 0.0;
    for (std::size_t i = 0; i < c.size(); ++i) {
        cum += c.weights[i];
        if (cum >= threshold) {
            keep_prefix(c, i + 1);
            return;
        }
    }
}

void apply_min_p(Candidates& c, float min_p) {
    if (min_p <= 0.0f || c.size() == 0) return;
    const double threshold = static_cast<double>(min_p) * c.weights[0];
    std::size_t n = 1;
    while (n < c.size() && c.weights[n] >= threshold) ++n;
    keep_prefix(c, n);
}

TokenId draw(const Candidates& c, double u) {
    if (c.size() == 0) invalid("draw from no candidates");
    const double target = u * c.total();
    double cum = 0.0;
    for (std::size_t i = 0; i < c.size(); ++i) {
        cum += c.weights[i];
        if (cum > target) return c.ids[i];
    }
    return c.ids.back();
}

SampleResult sample_token(float* logits, std::size_t vocab, const SamplingSettings& settings,
                          const TokenId* history, std::size_t history_len, double u) {
    if (vocab == 0) invalid("sampling over an empty vocabulary");
    if (!all_finite(logits, vocab)) return SampleResult{-1, true};
    apply_repetition_penalty(logits, vocab, history, history_len, settings.repetition_penalty);
    const float temperature = settings.temperature_or_default();
    if (temperature == 0.0f) return SampleResult{argmax(logits, vocab), false};
    apply_temperature(logits, vocab, temperature);

    // The same stages as sorted_candidates -> apply_top_k -> apply_top_p -> apply_min_p
    // -> draw, without sorting: every stage keeps a prefix of the sorted order, so each
    // can be found by selection (nth_element, select_by_mass) in expected O(V).
    const float m = max_logit(logits, vocab);
    // Reused between calls on a thread: [V] candidates are 1.8 MB for a 150k vocabulary.
    thread_local std::vector<Cand> pool;
    pool.resize(vocab);
    for (std::size_t i = 0; i < vocab; ++i) {
        pool[i] = Cand{logits[i], weight(logits[i], m), static_cast<TokenId>(i)};
    }
    // Head and tail: the weights >= kHead are a prefix of the sorted order (weights grow
    // with the logit). An LM's mass sits in a head of a few hundred tokens, so the
    // selections below usually never touch the tail; when they must, they still work.
    constexpr float kHead = 1e-4f;
    std::size_t head = static_cast<std::size_t>(
        std::partition(pool.begin(), pool.end(), [](const Cand& c) { return c.w >= kHead; }) - pool.begin());

    const std::size_t k = settings.top_k > 0 ? static_cast<std::size_t>(settings.top_k) : vocab;
    if (k < vocab) {
        // nth_element within the part that holds the k-th candidate.
        const auto from = pool.begin() + static_cast<std::ptrdiff_t>(k <= head ? 0 : head);
        const auto to = pool.begin() + static_cast<std::ptrdiff_t>(k <= head ? head : vocab);
        std::nth_element(from, pool.begin() + static_cast<std::ptrdiff_t>(k), to, more_likely);
        pool.resize(k);
        head = std::min(head, k);
    }
    double mass_k = 0.0;  // the mass top-p is measured against: what top-k kept
    for (const Cand& c : pool) mass_k += c.w;
    if (settings.min_p > 0.0f) {
        // Weights are relative to the most likely token's (1), so min-p is a threshold;
        // remove_if keeps the head before the tail.
        const double threshold = settings.min_p;
        const auto drop = [threshold](const Cand& c) { return c.w < threshold; };
        head -= static_cast<std::size_t>(std::count_if(pool.begin(), pool.begin() + static_cast<std::ptrdiff_t>(head), drop));
        pool.erase(std::remove_if(pool.begin(), pool.end(), drop), pool.end());
    }
    // The shortest sorted prefix reaching `target`, head first.
    const auto select = [&head](double target, bool strict) {
        const std::size_t in_head = select_by_mass(pool, 0, head, 0.0, target, strict);
        if (in_head > 0) return in_head;
        double head_mass = 0.0;
        for (std::size_t i = 0; i < head; ++i) head_mass += pool[i].w;
        return select_by_mass(pool, head, pool.size(), head_mass, target, strict);
    };
    if (settings.top_p < 1.0f) {
        const std::size_t kept = select(settings.top_p * mass_k, false);
        if (kept > 0) {
            pool.resize(kept);
            head = std::min(head, kept);
        }
    }
    double mass = 0.0;
    for (const Cand& c : pool) mass += c.w;

    const std::size_t n = select(u * mass, true);
    if (n > 0) return SampleResult{pool[n - 1].id, false};
    // Rounding left the target unreached: the least likely candidate, as draw() does.
    return SampleResult{std::max_element(pool.begin(), pool.end(), more_likely)->id, false};
}

std::vector<std::pair<TokenId, float>> top_logprobs(const float* logits, std::size_t vocab,
                                                    std::int32_t k) {
    if (k <= 0 || vocab == 0) return {};
    return summarize_logits(logits, vocab, k).top;
}

LogitSummary summarize_logits(const float* logits, std::size_t vocab, std::int32_t top_k) {
    if (vocab == 0) invalid("a distribution over an empty vocabulary");
    const float m = max_logit(logits, vocab);
    const std::size_t k = std::min(vocab, static_cast<std::size_t>(std::max<std::int32_t>(0, top_k)));
    // The k most likely ids, most likely first (MoreLikely: higher logit, then lower id),
    // kept while the one pass goes by: a new id enters only when it beats the last, which
    // after the first few hundred ids is rare, so this costs little beside the exp.
    std::vector<TokenId> best;
    best.reserve(k + 1);
    const MoreLikely more_likely{logits};
    double s = 0.0;  // sum of w_i
    double t = 0.0;  // sum of w_i * (l_i - m)
    for (std::size_t i = 0; i < vocab; ++i) {
        const float w = weight(logits[i], m);
        // w == 0 for -infinity and lowest(): skipped, as 0 * -inf would be NaN.
        if (w > 0.0f) {
            s += w;
            t += static_cast<double>(w) * (static_cast<double>(logits[i]) - m);
        }
        const auto id = static_cast<TokenId>(i);
        if (k > 0 && (best.size() < k || more_likely(id, best.back()))) {
            best.insert(std::upper_bound(best.begin(), best.end(), id, more_likely), id);
            if (best.size() > k) best.pop_back();
        }
    }
    LogitSummary out;
    out.log_z = static_cast<double>(m) + std::log(s);
    // Rounding can leave a hair below zero for a one-token distribution.
    out.entropy = std::max(0.0, std::log(s) - t / s);
    out.top.reserve(best.size());
    for (const TokenId id : best)
        out.top.emplace_back(id, static_cast<float>(static_cast<double>(logits[id]) - out.log_z));
    return out;
}

Sampler::Sampler(SamplingSettings settings) : settings_(std::move(settings)) {
    settings_.validate();
    if (settings_.seed) {
        seed_ = *settings_.seed;
    } else {
        std::random_device rd;
        seed_ = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
    }
    rng_.seed(seed_);
}

double Sampler::next_uniform() {
    // The top 53 bits of one draw, scaled to [0, 1): exact and the same in every
    // standard library (uniform_real_distribution is not).
    return static_cast<double>(rng_() >> 11) * 0x1.0p-53;
}

SampleResult Sampler::sample(float* logits, std::size_t vocab, const TokenId* history,
                             std::size_t history_len) {
    // One number per token, drawn first, whatever the settings or the logits: the
    // stream position depends only on how many tokens this card has produced.
    const double u = next_uniform();
    return sample_token(logits, vocab, settings_, history, history_len, u);
}

}  // namespace kev
