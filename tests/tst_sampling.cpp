// Sampling: settings validation, each pipeline stage on hand-made logits with given
// uniform numbers, the fast path against the reference stages, seeded per-card
// samplers, and KEV_TEMPERATURE. Pure: no model.
#include <QtTest>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "kev/error.h"
#include "kev/sampling.h"

using kev::SamplingSettings;
using kev::TokenId;

namespace {

QString errorOf(const std::function<void()>& f, kev::ErrorCode code) {
    try {
        f();
    } catch (const kev::Error& e) {
        if (e.code() != code) return QStringLiteral("WRONG CODE: ") + e.what();
        return QString::fromStdString(e.what());
    }
    return QStringLiteral("NO ERROR");
}

#define KEV_EXPECT_INVALID(call, fragment)                                                   \
    do {                                                                                     \
        const QString msg_ = errorOf([&] { (void)(call); }, kev::ErrorCode::InvalidArgument); \
        QVERIFY2(msg_.contains(QStringLiteral(fragment)),                                    \
                 qPrintable(QStringLiteral("expected \"%1\" in: %2").arg(fragment, msg_)));  \
    } while (0)

// Logits whose softmax is exactly `probs` (up to rounding).
std::vector<float> logits_of(const std::vector<double>& probs) {
    std::vector<float> l;
    for (double p : probs) l.push_back(static_cast<float>(std::log(p)));
    return l;
}

// probs 0.1, 0.4, 0.2, 0.3: sorted order is ids 1, 3, 2, 0.
const std::vector<double> kProbs{0.1, 0.4, 0.2, 0.3};

SamplingSettings sampled(float temperature = 1.0f) {
    SamplingSettings s;
    s.temperature = temperature;
    return s;
}

TokenId sample(std::vector<float> logits, const SamplingSettings& s, double u,
               const std::vector<TokenId>& history = {}) {
    const kev::SampleResult r = kev::sample_token(logits.data(), logits.size(), s, history.data(),
                                                  history.size(), u);
    return r.non_finite ? -2 : r.token;
}

// The reference pipeline, stage by stage.
TokenId reference(std::vector<float> logits, const SamplingSettings& s, double u) {
    kev::apply_temperature(logits.data(), logits.size(), *s.temperature);
    kev::Candidates c = kev::sorted_candidates(logits.data(), logits.size());
    kev::apply_top_k(c, s.top_k);
    kev::apply_top_p(c, s.top_p);
    kev::apply_min_p(c, s.min_p);
    return kev::draw(c, u);
}

std::vector<TokenId> run(kev::Sampler& s, int n, const std::vector<float>& logits) {
    std::vector<TokenId> out;
    for (int i = 0; i < n; ++i) {
        std::vector<float> scratch = logits;
        out.push_back(s.sample(scratch.data(), scratch.size(), nullptr, 0).token);
    }
    return out;
}

}  // namespace

class TestSampling : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void settingsValidation() {
        SamplingSettings ok;
        ok.validate();
        ok.temperature = 2.0f;
        ok.top_k = 40;
        ok.top_p = 1.0f;
        ok.min_p = 0.05f;
        ok.repetition_penalty = 1.1f;
        ok.stop_strings = {"\n\n"};
        ok.validate();
        auto with = [](const std::function<void(SamplingSettings&)>& change) {
            SamplingSettings s;
            change(s);
            return s;
        };
        const float nan = std::numeric_limits<float>::quiet_NaN();
        KEV_EXPECT_INVALID(with([](auto& s) { s.temperature = -0.1f; }).validate(), "temperature -0.1 is negative");
        KEV_EXPECT_INVALID(with([&](auto& s) { s.temperature = nan; }).validate(), "temperature is not a number");
        KEV_EXPECT_INVALID(with([](auto& s) { s.temperature = 11.0f; }).validate(), "above the maximum of 10");
        KEV_EXPECT_INVALID(with([](auto& s) { s.temperature = 1e-6f; }).validate(), "too small");
        KEV_EXPECT_INVALID(with([](auto& s) { s.top_k = -1; }).validate(), "top-k -1 is negative");
        KEV_EXPECT_INVALID(with([](auto& s) { s.top_p = 0.0f; }).validate(), "top-p 0 is outside (0, 1]");
        KEV_EXPECT_INVALID(with([](auto& s) { s.top_p = 1.5f; }).validate(), "top-p 1.5 is outside");
        KEV_EXPECT_INVALID(with([&](auto& s) { s.top_p = nan; }).validate(), "top-p nan");
        KEV_EXPECT_INVALID(with([](auto& s) { s.min_p = 1.0f; }).validate(), "min-p 1 is outside [0, 1)");
        KEV_EXPECT_INVALID(with([](auto& s) { s.min_p = -0.1f; }).validate(), "min-p -0.1");
        KEV_EXPECT_INVALID(with([](auto& s) { s.repetition_penalty = 0.0f; }).validate(), "repetition penalty 0");
        KEV_EXPECT_INVALID(with([](auto& s) { s.repetition_penalty = INFINITY; }).validate(), "repetition penalty inf");
        KEV_EXPECT_INVALID(with([](auto& s) { s.max_new_tokens = 0; }).validate(), "max new tokens must be at least 1");
        KEV_EXPECT_INVALID(with([](auto& s) { s.stop_strings = {"a", ""}; }).validate(), "stop string 2 is empty");
        KEV_EXPECT_INVALID(kev::Sampler(with([](auto& s) { s.top_k = -3; })), "top-k -3");
    }

    void greedyTakesTheLargestLowestIdOnTies() {
        const std::vector<float> l{1.0f, 3.0f, 3.0f, 2.0f};
        QCOMPARE(kev::argmax(l.data(), l.size()), TokenId(1));
        SamplingSettings greedy;  // temperature unset: the default, greedy
        QCOMPARE(kev::kDefaultTemperature, 0.0f);
        for (double u : {0.0, 0.5, 0.999}) QCOMPARE(sample(l, greedy, u), TokenId(1));
        // Greedy ignores the truncation settings.
        greedy.top_k = 1;
        greedy.top_p = 0.1f;
        QCOMPARE(sample(l, greedy, 0.7), TokenId(1));
    }

    void candidatesAreSortedWithTiesByLowestId() {
        const std::vector<float> l{0.5f, 2.0f, 0.5f, 2.0f, 1.0f};
        const kev::Candidates c = kev::sorted_candidates(l.data(), l.size());
        QCOMPARE(c.ids, (std::vector<TokenId>{1, 3, 4, 0, 2}));
        QCOMPARE(c.weights[0], 1.0);
        QVERIFY(std::abs(c.weights[2] - std::exp(-1.0)) < 1e-6);
    }

    void drawWalksTheSortedCumulativeMass() {
        const std::vector<float> l = logits_of(kProbs);
        const kev::Candidates c = kev::sorted_candidates(l.data(), l.size());
        // Cumulative mass in order 1, 3, 2, 0: 0.4, 0.7, 0.9, 1.0.
        QCOMPARE(kev::draw(c, 0.0), TokenId(1));
        QCOMPARE(kev::draw(c, 0.39), TokenId(1));
        QCOMPARE(kev::draw(c, 0.41), TokenId(3));
        QCOMPARE(kev::draw(c, 0.89), TokenId(2));
        QCOMPARE(kev::draw(c, 0.95), TokenId(0));
        QCOMPARE(kev::draw(c, 0.9999999), TokenId(0));
        QCOMPARE(sample(l, sampled(), 0.41), TokenId(3));
        QCOMPARE(sample(l, sampled(), 0.95), TokenId(0));
    }

    void topKKeepsTheKMostLikely() {
        const std::vector<float> l = logits_of(kProbs);
        SamplingSettings s = sampled();
        s.top_k = 2;  // keeps 1 (0.4) and 3 (0.3): renormalised 4/7, 3/7
        QCOMPARE(sample(l, s, 0.5), TokenId(1));   // 0.5 < 4/7 = 0.571
        QCOMPARE(sample(l, s, 0.6), TokenId(3));
        QCOMPARE(sample(l, s, 0.999), TokenId(3));
        s.top_k = 1;
        QCOMPARE(sample(l, s, 0.999), TokenId(1));
        s.top_k = 100;  // more than the vocabulary: everything
        QCOMPARE(sample(l, s, 0.95), TokenId(0));
    }

    void topPKeepsTheSmallestSetReachingTheMass() {
        const std::vector<float> l = logits_of(kProbs);
        SamplingSettings s = sampled();
        s.top_p = 0.65f;  // 0.4 + 0.3 >= 0.65: keeps 1, 3
        QCOMPARE(sample(l, s, 0.999), TokenId(3));
        s.top_p = 0.75f;  // needs 2 as well
        QCOMPARE(sample(l, s, 0.999), TokenId(2));
        QCOMPARE(sample(l, s, 0.5), TokenId(3));   // 0.5 * 0.9 = 0.45 > 0.4
        s.top_p = 0.1f;   // the most likely alone
        QCOMPARE(sample(l, s, 0.999), TokenId(1));
        kev::Candidates c = kev::sorted_candidates(l.data(), l.size());
        kev::apply_top_p(c, 0.75f);
        QCOMPARE(c.ids, (std::vector<TokenId>{1, 3, 2}));
    }

    void minPDropsTokensFarBelowTheBest() {
        const std::vector<float> l = logits_of(kProbs);
        SamplingSettings s = sampled();
        s.min_p = 0.6f;  // threshold 0.24: keeps 0.4 and 0.3
        QCOMPARE(sample(l, s, 0.999), TokenId(3));
        s.min_p = 0.45f;  // threshold 0.18: keeps 0.2 too
        QCOMPARE(sample(l, s, 0.999), TokenId(2));
        s.min_p = 0.99f;
        QCOMPARE(sample(l, s, 0.999), TokenId(1));
        kev::Candidates c = kev::sorted_candidates(l.data(), l.size());
        kev::apply_min_p(c, 0.6f);
        QCOMPARE(c.ids, (std::vector<TokenId>{1, 3}));
    }

    void stagesComposeInOrder() {
        // top-k 3 keeps 1, 3, 2 (mass 0.9); top-p 0.7 of that is 0.63: keeps 1, 3;
        // min-p 0.8 (threshold 0.32) then keeps 1 only.
        const std::vector<float> l = logits_of(kProbs);
        SamplingSettings s = sampled();
        s.top_k = 3;
        s.top_p = 0.7f;
        QCOMPARE(sample(l, s, 0.999), TokenId(3));
        s.min_p = 0.8f;
        QCOMPARE(sample(l, s, 0.999), TokenId(1));
    }

    void temperatureIsAppliedExactlyOnce() {
        // logits 0, 2 at T = 2 -> 0, 1: p(1) = e / (1 + e) = 0.731. Applied twice it would
        // be 0, 0.5: p(1) = 0.622. u = 0.68 tells them apart.
        std::vector<float> l{0.0f, 2.0f};
        const SamplingSettings s = sampled(2.0f);
        QCOMPARE(sample(l, s, 0.68), TokenId(1));
        kev::sample_token(l.data(), l.size(), s, nullptr, 0, 0.5);
        QCOMPARE(l[1], 1.0f);  // the scratch logits were divided once
        std::vector<float> twice{0.0f, 0.5f};
        QCOMPARE(sample(twice, sampled(1.0f), 0.68), TokenId(0));
        // A low temperature sharpens, a high one flattens.
        QCOMPARE(sample({0.0f, 2.0f}, sampled(0.1f), 0.999), TokenId(1));
        QCOMPARE(sample({0.0f, 2.0f}, sampled(10.0f), 0.6), TokenId(0));
    }

    void repetitionPenaltyFollowsHuggingFace() {
        std::vector<float> l{2.0f, -2.0f, 1.0f, 0.5f};
        const std::vector<TokenId> history{0, 1, 1, 7, -1};  // repeats counted once, 7 and -1 ignored
        kev::apply_repetition_penalty(l.data(), l.size(), history.data(), history.size(), 2.0f);
        QCOMPARE(l, (std::vector<float>{1.0f, -4.0f, 1.0f, 0.5f}));
        // In the pipeline: token 0 was the best (2.0); penalised to 1.0 it falls behind token 2.
        SamplingSettings greedy;
        greedy.repetition_penalty = 2.0f;
        QCOMPARE(sample({2.0f, -2.0f, 1.5f, 0.5f}, greedy, 0.0, {0}), TokenId(2));
        greedy.repetition_penalty = 1.0f;
        QCOMPARE(sample({2.0f, -2.0f, 1.5f, 0.5f}, greedy, 0.0, {0}), TokenId(0));
    }

    void nonFiniteLogitsAreReported() {
        const float nan = std::numeric_limits<float>::quiet_NaN();
        const float inf = std::numeric_limits<float>::infinity();
        QVERIFY(kev::all_finite(std::vector<float>{1, 2}.data(), 2));
        for (float bad : {nan, inf, -inf}) {
            std::vector<float> l{1.0f, bad, 0.5f};
            QVERIFY(!kev::all_finite(l.data(), l.size()));
            for (float t : {0.0f, 1.0f}) {
                const kev::SampleResult r = kev::sample_token(l.data(), l.size(), sampled(t), nullptr, 0, 0.3);
                QVERIFY(r.non_finite);
            }
        }
        // Rows of a real vocabulary's length (tested block by block): the bad value found
        // wherever it is, the extreme finite ones (the largest, the smallest subnormal,
        // -0) passed.
        std::vector<float> row(49157);
        for (std::size_t i = 0; i < row.size(); ++i) row[i] = static_cast<float>(i % 97) * 0.25f - 12.0f;
        row[5] = std::numeric_limits<float>::max();
        row[6] = -std::numeric_limits<float>::max();
        row[7] = std::numeric_limits<float>::denorm_min();
        row[8] = -0.0f;
        QVERIFY(kev::all_finite(row.data(), row.size()));
        for (float bad : {nan, inf, -inf}) {
            for (std::size_t at : {std::size_t{0}, std::size_t{2047}, std::size_t{2048}, std::size_t{30001}, row.size() - 1}) {
                std::vector<float> l = row;
                l[at] = bad;
                QVERIFY2(!kev::all_finite(l.data(), l.size()), qPrintable(QStringLiteral("bad value at %1").arg(at)));
                QVERIFY(kev::all_finite(l.data(), at));  // the part before it
            }
        }
    }

    void topLogprobs() {
        const std::vector<float> l{0.0f, std::log(3.0f), -100.0f};
        const auto top = kev::top_logprobs(l.data(), l.size(), 2);
        QCOMPARE(top.size(), std::size_t(2));
        QCOMPARE(top[0].first, TokenId(1));
        QCOMPARE(top[1].first, TokenId(0));
        QVERIFY(std::abs(top[0].second - std::log(0.75f)) < 1e-5f);
        QVERIFY(std::abs(top[1].second - std::log(0.25f)) < 1e-5f);
        QCOMPARE(kev::top_logprobs(l.data(), l.size(), 10).size(), std::size_t(3));
        QVERIFY(kev::top_logprobs(l.data(), l.size(), 0).empty());
    }

    // The top-k kept in summarize_logits' one pass is the full sort's first k (higher
    // logit first, a tie to the lower id), on rows full of ties, for every k up to 100.
    void topKInOnePassEqualsASort() {
        std::mt19937 rng(11);
        std::uniform_int_distribution<int> level(-20, 20);  // few distinct values: many ties
        for (int trial = 0; trial < 40; ++trial) {
            std::vector<float> l(trial % 2 ? 4096 : 97);
            for (float& x : l) x = 0.25f * static_cast<float>(level(rng));
            std::vector<TokenId> ids(l.size());
            std::iota(ids.begin(), ids.end(), TokenId{0});
            std::stable_sort(ids.begin(), ids.end(), [&](TokenId a, TokenId b) { return l[a] > l[b]; });
            for (const int k : {1, 5, 20, 100}) {
                const kev::LogitSummary s = kev::summarize_logits(l.data(), l.size(), k);
                QCOMPARE(s.top.size(), std::min(l.size(), static_cast<std::size_t>(k)));
                for (std::size_t i = 0; i < s.top.size(); ++i) {
                    QCOMPARE(s.top[i].first, ids[i]);
                    QVERIFY(std::abs(s.top[i].second - static_cast<float>(l[ids[i]] - s.log_z)) < 1e-6f);
                }
                QCOMPARE(kev::top_logprobs(l.data(), l.size(), k), s.top);
            }
        }
    }

    // Entropy and log-partition of the raw distribution (the comparison view's colours):
    // a known distribution, the uniform one, a single certain token, masked padding.
    void logitSummary() {
        // p = (0.5, 0.25, 0.25): H = 1.5 ln 2; shifting every logit changes log_z only.
        for (const float shift : {0.0f, 40.0f, -70.0f}) {
            std::vector<float> l{std::log(2.0f) + shift, shift, shift};
            const kev::LogitSummary s = kev::summarize_logits(l.data(), l.size());
            QVERIFY2(std::abs(s.entropy - 1.5 * std::log(2.0)) < 1e-6, qPrintable(QString::number(s.entropy)));
            // The chosen token's log-probability, as the generator computes it.
            QVERIFY(std::abs((l[0] - s.log_z) - std::log(0.5)) < 1e-5);
            QVERIFY(std::abs((l[2] - s.log_z) - std::log(0.25)) < 1e-5);
        }
        // Uniform over V: H = ln V, the most there is.
        const std::vector<float> flat(1000, 3.0f);
        const kev::LogitSummary u = kev::summarize_logits(flat.data(), flat.size());
        QVERIFY(std::abs(u.entropy - std::log(1000.0)) < 1e-6);
        QVERIFY(std::abs(u.log_z - (3.0 + std::log(1000.0))) < 1e-6);
        // One token far ahead: no uncertainty, its log-probability 0.
        const std::vector<float> sure{0.0f, 200.0f, 0.0f};
        const kev::LogitSummary one = kev::summarize_logits(sure.data(), sure.size());
        QVERIFY(one.entropy >= 0.0 && one.entropy < 1e-9);
        QVERIFY(std::abs(sure[1] - one.log_z) < 1e-9);
        // Padding masked with lowest() and -infinity weighs nothing (no NaN).
        std::vector<float> masked{0.0f, 0.0f, std::numeric_limits<float>::lowest(),
                                  -std::numeric_limits<float>::infinity()};
        const kev::LogitSummary m = kev::summarize_logits(masked.data(), masked.size());
        QVERIFY(std::abs(m.entropy - std::log(2.0)) < 1e-9);
        QVERIFY(std::abs(m.log_z - std::log(2.0)) < 1e-9);
        // Agrees with the top-K log-probabilities on random logits.
        std::mt19937 rng(5);
        std::normal_distribution<float> n(0.0f, 3.0f);
        std::vector<float> r(5000);
        for (float& x : r) x = n(rng);
        const kev::LogitSummary rs = kev::summarize_logits(r.data(), r.size());
        double h = 0.0;
        for (const float x : r) {
            const double lp = x - rs.log_z;
            h -= std::exp(lp) * lp;
        }
        QVERIFY(std::abs(rs.entropy - h) < 1e-6);
        for (const auto& [id, lp] : kev::top_logprobs(r.data(), r.size(), 5))
            QVERIFY(std::abs((r[static_cast<std::size_t>(id)] - rs.log_z) - lp) < 1e-5);
        KEV_EXPECT_INVALID(kev::summarize_logits(r.data(), 0), "empty vocabulary");
    }

    // The fast path (partial sorts) picks exactly what the reference stages pick, on
    // random logits full of ties and random settings.
    void fastPathEqualsReferenceStages() {
        std::mt19937_64 rng(99);
        std::normal_distribution<float> normal(0.0f, 1.0f);
        std::uniform_real_distribution<double> unit(0.0, 1.0);
        int mismatches = 0;
        const int trials = 3000;
        for (int trial = 0; trial < trials; ++trial) {
            const std::size_t vocab = 1 + rng() % (trial % 10 == 0 ? 5000 : 300);
            const float scale = 0.5f + 8.0f * static_cast<float>(unit(rng));
            std::vector<float> l(vocab);
            for (float& x : l) x = std::round(normal(rng) * scale * 4.0f) / 4.0f;  // ties
            // Peaked like an LM (a few tokens far ahead: most of the vocabulary is tail).
            if (trial % 3 == 0) {
                for (int peaks = 1 + static_cast<int>(rng() % 3); peaks > 0; --peaks) l[rng() % vocab] += 25.0f;
            }
            // A long tail that holds much of the mass, each token light (below the fast
            // path's head threshold): the draw often has to go through it.
            if (trial % 7 == 1) {
                l.resize(5000 + rng() % 20000);
                for (float& x : l) x = std::round(normal(rng) * 1.2f) / 4.0f;
                l[rng() % l.size()] = 10.5f;
            }
            SamplingSettings s = sampled(static_cast<float>(0.2 + 1.8 * unit(rng)));
            if (rng() % 2) s.top_k = static_cast<std::int32_t>(1 + rng() % 60);
            if (rng() % 2) s.top_p = static_cast<float>(0.05 + 0.95 * unit(rng));
            if (rng() % 3 == 0) s.min_p = static_cast<float>(0.3 * unit(rng));
            const double u = unit(rng);
            if (sample(l, s, u) != reference(l, s, u)) ++mismatches;
        }
        QCOMPARE(mismatches, 0);
    }

    void samplerStreamIsPinnedAndLibraryIndependent() {
        // std::mt19937_64 with the default seed: the standard fixes its 10000th output.
        SamplingSettings s;
        s.seed = 5489u;
        kev::Sampler sampler(s);
        for (int i = 0; i < 9999; ++i) sampler.next_uniform();
        const double expected = static_cast<double>(9981545732273789042ull >> 11) * 0x1.0p-53;
        QCOMPARE(sampler.next_uniform(), expected);
    }

    void sameSeedSameDrawsWhateverElseRuns() {
        const std::vector<float> l = logits_of({0.05, 0.1, 0.15, 0.2, 0.25, 0.25});
        SamplingSettings s = sampled(1.0f);
        s.seed = 42u;
        kev::Sampler alone(s);
        const std::vector<TokenId> expected = run(alone, 40, l);

        // The same card in a "pack": other samplers (one with the same seed, others not,
        // one greedy) draw in between, and its own greedy settings change nothing else.
        kev::Sampler card(s);
        SamplingSettings other = sampled(0.7f);
        other.seed = 7u;
        kev::Sampler neighbour(other);
        SamplingSettings greedy;
        greedy.seed = 42u;
        kev::Sampler greedy_neighbour(greedy);
        kev::Sampler twin(s);
        std::vector<TokenId> packed, twin_tokens;
        for (int i = 0; i < 40; ++i) {
            run(neighbour, 1 + i % 3, l);
            packed.push_back(run(card, 1, l)[0]);
            run(greedy_neighbour, 1, l);
            twin_tokens.push_back(run(twin, 1, l)[0]);
        }
        QCOMPARE(packed, expected);
        QCOMPARE(twin_tokens, expected);
        // Not a constant answer, and another seed gives another one.
        QVERIFY(std::count(expected.begin(), expected.end(), expected[0]) < 40);
        s.seed = 43u;
        kev::Sampler different(s);
        QVERIFY(run(different, 40, l) != expected);
    }

    void oneDrawPerTokenEvenWhenGreedyOrNonFinite() {
        SamplingSettings g;
        g.seed = 5u;
        kev::Sampler greedy(g);
        kev::Sampler reference(g);
        std::vector<float> l{1.0f, 2.0f};
        greedy.sample(l.data(), l.size(), nullptr, 0);
        std::vector<float> bad{1.0f, std::numeric_limits<float>::quiet_NaN()};
        QVERIFY(greedy.sample(bad.data(), bad.size(), nullptr, 0).non_finite);
        reference.next_uniform();
        reference.next_uniform();
        QCOMPARE(greedy.next_uniform(), reference.next_uniform());
    }

    void unseededSamplerReportsItsSeed() {
        const std::vector<float> l = logits_of({0.2, 0.2, 0.2, 0.2, 0.2});
        kev::Sampler a(sampled(1.0f));
        SamplingSettings replay = sampled(1.0f);
        replay.seed = a.seed();
        kev::Sampler b(replay);
        QCOMPARE(run(a, 30, l), run(b, 30, l));
    }

    void stopStringsAreHeldBackUntilDecided() {
        kev::StopStringMatcher m({"\n\nUser:"});
        QCOMPARE(QString::fromStdString(m.feed("Hi").text), QStringLiteral("Hi"));
        QCOMPARE(QString::fromStdString(m.feed(".\n\nUs").text), QStringLiteral("."));
        const kev::StopStringMatcher::Result r = m.feed("er: x");
        QVERIFY(r.stopped);
        QVERIFY(r.text.empty());
        QVERIFY(m.stopped());
        QVERIFY(m.feed("more").text.empty());

        kev::StopStringMatcher two({"END", "\n"});
        const auto first = two.feed("a\nbEND");
        QVERIFY(first.stopped);
        QCOMPARE(first.text, std::string("a"));

        kev::StopStringMatcher not_quite({"abc"});
        QCOMPARE(not_quite.feed("xab").text, std::string("x"));
        QCOMPARE(not_quite.feed("d").text, std::string("abd"));
        QCOMPARE(not_quite.feed("ab").text, std::string(""));
        QCOMPARE(not_quite.flush(), std::string("ab"));  // the card ended another way

        kev::StopStringMatcher overlap({"aab"});
        QCOMPARE(overlap.feed("aa").text, std::string(""));
        const auto o = overlap.feed("aab");
        QVERIFY(o.stopped);
        QCOMPARE(o.text, std::string("aa"));

        kev::StopStringMatcher utf8({"\xe3\x80\x82\n"});  // "。\n"
        QCOMPARE(utf8.feed("\xe4\xbd\xa0\xe3\x80\x82").text, std::string("\xe4\xbd\xa0"));
        QVERIFY(utf8.feed("\n").stopped);

        kev::StopStringMatcher none({});
        QCOMPARE(none.feed("abc").text, std::string("abc"));
    }

    // Random texts over a tiny alphabet, random stop strings, random splits into deltas.
    // The card stops after the first delta that makes the text contain a stop string;
    // what was shown is then exactly the text before the earliest such occurrence.
    void stopStringsOnRandomSplits() {
        std::mt19937 rng(5);
        auto word = [&rng](int lo, int hi) {
            std::string w;
            for (int n = std::uniform_int_distribution<int>(lo, hi)(rng); n > 0; --n) w.push_back("abc"[rng() % 3]);
            return w;
        };
        int stopped_trials = 0;
        for (int trial = 0; trial < 2000; ++trial) {
            const std::string text = word(0, 30);
            std::vector<std::string> stops;
            for (int n = 1 + static_cast<int>(rng() % 3); n > 0; --n) stops.push_back(word(2, 5));
            kev::StopStringMatcher m(stops);
            std::string shown, expected;
            bool stopped = false;
            for (std::size_t i = 0; i < text.size() && !stopped;) {
                const std::size_t n = std::min<std::size_t>(text.size() - i, rng() % 4);
                const auto r = m.feed(std::string_view(text).substr(i, n));
                shown += r.text;
                stopped = r.stopped;
                i += n;
                std::size_t first = std::string::npos;
                for (const auto& s : stops) first = std::min(first, text.substr(0, i).find(s));
                QCOMPARE(stopped, first != std::string::npos);
                if (stopped) expected = text.substr(0, first);
                // What is shown is always a prefix of the text.
                QVERIFY(text.compare(0, shown.size(), shown) == 0);
            }
            if (!stopped) {
                shown += m.flush();
                expected = text;
            } else {
                ++stopped_trials;
            }
            QCOMPARE(shown, expected);
        }
        QVERIFY(stopped_trials > 100);
    }

    void temperatureDefaultsParse() {
        QVERIFY(kev::parse_temperature_defaults("").values.empty());
        QVERIFY(kev::parse_temperature_defaults("  ").values.empty());
        QCOMPARE(kev::parse_temperature_defaults("0.7").values, std::vector<float>{0.7f});
        QCOMPARE(kev::parse_temperature_defaults(" 0.2, 0.7 ,1,0").values,
                 (std::vector<float>{0.2f, 0.7f, 1.0f, 0.0f}));
        QCOMPARE(kev::parse_temperature_defaults("2e-1").values, std::vector<float>{0.2f});
        KEV_EXPECT_INVALID(kev::parse_temperature_defaults("abc"), "KEV_TEMPERATURE=\"abc\": value 1 (\"abc\") is not a number");
        KEV_EXPECT_INVALID(kev::parse_temperature_defaults("0.7,"), "value 2 is empty");
        KEV_EXPECT_INVALID(kev::parse_temperature_defaults(",0.7"), "value 1 is empty");
        KEV_EXPECT_INVALID(kev::parse_temperature_defaults("0.7,,1"), "value 2 is empty");
        KEV_EXPECT_INVALID(kev::parse_temperature_defaults("0.5;0.7"), "is not a number");
        KEV_EXPECT_INVALID(kev::parse_temperature_defaults("0,7x"), "value 2 (\"7x\") is not a number");
        KEV_EXPECT_INVALID(kev::parse_temperature_defaults("1 2"), "is not a number");
        KEV_EXPECT_INVALID(kev::parse_temperature_defaults("nan"), "is not a number");
        KEV_EXPECT_INVALID(kev::parse_temperature_defaults("inf"), "is not a number");
        KEV_EXPECT_INVALID(kev::parse_temperature_defaults("0.5,-1"), "value 2 (-1) is outside [0, 10]");
        KEV_EXPECT_INVALID(kev::parse_temperature_defaults("11"), "is outside [0, 10]");
        KEV_EXPECT_INVALID(kev::parse_temperature_defaults("1e-9"), "too small");
    }

    void temperatureDefaultsPerCard() {
        const kev::TemperatureDefaults one = kev::parse_temperature_defaults("0.3");
        QCOMPARE(one.for_card(5, 8), std::optional<float>(0.3f));
        const kev::TemperatureDefaults list = kev::parse_temperature_defaults("0.1,0.2,0.3");
        QCOMPARE(list.for_card(1, 3), std::optional<float>(0.2f));
        KEV_EXPECT_INVALID(list.for_card(0, 4), "KEV_TEMPERATURE lists 3 temperatures but there are 4 cards");
        QCOMPARE(kev::TemperatureDefaults{}.for_card(0, 2), std::optional<float>());
    }

    void explicitTemperatureWinsAndNothingIsAppliedTwice() {
        std::vector<SamplingSettings> cards(3);
        cards[0].temperature = 1.5f;
        auto temps = [](const std::vector<SamplingSettings>& c) {
            std::vector<float> t;
            for (const auto& s : c) t.push_back(*s.temperature);
            return t;
        };
        std::vector<SamplingSettings> a = cards;
        kev::resolve_temperatures(a, kev::parse_temperature_defaults("0.3"));
        QCOMPARE(temps(a), (std::vector<float>{1.5f, 0.3f, 0.3f}));
        // Resolving again (even with other defaults) changes nothing: each card has one
        // temperature, and the sampler divides by it once (temperatureIsAppliedExactlyOnce).
        kev::resolve_temperatures(a, kev::parse_temperature_defaults("0.9"));
        QCOMPARE(temps(a), (std::vector<float>{1.5f, 0.3f, 0.3f}));
        std::vector<SamplingSettings> b = cards;
        kev::resolve_temperatures(b, kev::parse_temperature_defaults("0.1, 0.2, 0.3"));
        QCOMPARE(temps(b), (std::vector<float>{1.5f, 0.2f, 0.3f}));
        std::vector<SamplingSettings> c = cards;
        kev::resolve_temperatures(c, {});
        QCOMPARE(temps(c), (std::vector<float>{1.5f, kev::kDefaultTemperature, kev::kDefaultTemperature}));
        std::vector<SamplingSettings> d = cards;
        KEV_EXPECT_INVALID(kev::resolve_temperatures(d, kev::parse_temperature_defaults("0.1,0.2")),
                           "lists 2 temperatures but there are 3 cards");
        QVERIFY(!d[1].temperature);  // unchanged on failure
    }

    void temperatureDefaultsFromTheEnvironment() {
        qputenv("KEV_TEMPERATURE", "0.25, 0.5");
        QCOMPARE(kev::temperature_defaults_from_env().values, (std::vector<float>{0.25f, 0.5f}));
        qputenv("KEV_TEMPERATURE", "hot");
        KEV_EXPECT_INVALID(kev::temperature_defaults_from_env(), "KEV_TEMPERATURE=\"hot\"");
        qunsetenv("KEV_TEMPERATURE");
        QVERIFY(kev::temperature_defaults_from_env().values.empty());
    }
};

QTEST_GUILESS_MAIN(TestSampling)
#include "tst_sampling.moc"
