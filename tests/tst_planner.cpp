// The planner: step layout (positions, slots, masks), finish reasons, cancellation,
// and the whole plan -> mask -> planner -> sampler loop driven by a toy "model" whose
// next token is a hash of exactly what a row's mask lets it read: a card packed with
// others must produce what it produces alone. Pure: no model, no tensors.
#include <QtTest>

#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <vector>

#include "kev/error.h"
#include "kev/pack_plan.h"
#include "kev/planner.h"
#include "kev/sampling.h"

using kev::CardPrompt;
using kev::FinishReason;
using kev::PackPlan;
using kev::Planner;
using kev::SampleResult;
using kev::SamplingSettings;
using kev::StepKind;
using kev::StepPlan;
using kev::TokenId;

namespace {

constexpr TokenId kEos = 0;
constexpr TokenId kStop = 13;  // the toy "text" holds a stop string once this token appears
constexpr std::size_t kVocab = 40;

std::vector<TokenId> ids(std::int64_t n, TokenId first = 10) {
    std::vector<TokenId> v;
    for (std::int64_t i = 0; i < n; ++i) v.push_back(first + static_cast<TokenId>(i));
    return v;
}

PackPlan pack(const std::vector<CardPrompt>& cards, const std::vector<TokenId>& shared,
              std::int64_t context_length = 100) {
    kev::PackLimits l;
    l.context_length = context_length;
    return kev::build_pack_plan(cards, shared, l);
}

kev::PlannerOptions eosOptions(std::vector<TokenId> eos) {
    kev::PlannerOptions o;
    o.end_of_sequence = std::move(eos);
    return o;
}

std::vector<SampleResult> tokens(std::initializer_list<TokenId> t) {
    std::vector<SampleResult> out;
    for (TokenId x : t) out.push_back({x, false});
    return out;
}

QString errorOf(const std::function<void()>& f) {
    try {
        f();
    } catch (const kev::Error& e) {
        return QString::fromStdString(e.what());
    }
    return QStringLiteral("NO ERROR");
}

// ---- The toy model -----------------------------------------------------------------

// A cache that stores, per slot, the token and position written there.
struct ToyCache {
    std::vector<std::optional<std::pair<TokenId, std::int64_t>>> slots;
    std::vector<bool> freed;  // the slot was part of a region given back
};

// "Logits" that depend only on the (position, token) pairs a row may read, like
// attention with RoPE: any leak from another card, or a wrong position, changes them.
std::vector<float> toy_logits(const ToyCache& cache, const std::uint8_t* mask_row, std::int64_t kv_len) {
    std::map<std::int64_t, TokenId> seen;  // position -> token, ordered
    for (std::int64_t s = 0; s < kv_len; ++s) {
        if (!mask_row[s]) continue;
        const auto& entry = cache.slots[static_cast<std::size_t>(s)];
        if (!entry) return std::vector<float>(kVocab, std::numeric_limits<float>::quiet_NaN());
        seen[entry->second] = entry->first;
    }
    std::uint64_t h = 1469598103934665603ull;
    for (const auto& [pos, tok] : seen) {
        h = (h ^ static_cast<std::uint64_t>(pos)) * 1099511628211ull;
        h = (h ^ static_cast<std::uint64_t>(tok)) * 1099511628211ull;
    }
    std::mt19937_64 rng(h);
    std::vector<float> logits(kVocab);
    for (float& l : logits) l = static_cast<float>(rng() % 1000) / 100.0f;
    return logits;
}

struct ToyResult {
    std::vector<std::vector<TokenId>> generated;
    std::vector<FinishReason> reasons;
    std::int64_t cache_slots = 0;  // the planner's high-water mark
    std::int64_t max_prompt_rows_beside_answers = 0;
    std::int64_t reused_slots = 0;  // writes into slots of a freed region
};

// Called before each next_step with the step's index: may add cards (pushing their
// samplers) or cancel some.
using ToyHook = std::function<void(Planner&, std::int64_t, std::vector<kev::Sampler>&)>;

// Runs the whole loop over a pack. Checks on the way that every slot is written once
// between frees, inside its card's region, that each card's slots are consecutive from
// its region's start, and that every row reads exactly its card's span. Regions the
// planner frees are emptied: a row reading one later gets NaN logits (NonFinite).
void run_toy(const std::vector<CardPrompt>& cards, const std::vector<TokenId>& shared,
             const std::vector<SamplingSettings>& settings, std::int64_t context_length,
             ToyResult& out, const ToyHook& hook = {}, kev::PlannerOptions options = {}) {
    const PackPlan p = pack(cards, shared, context_length);
    options.end_of_sequence = {kEos};
    Planner planner(p, options);
    std::vector<kev::Sampler> samplers;
    for (const SamplingSettings& s : settings) samplers.emplace_back(s);
    ToyCache cache;
    std::map<std::int32_t, std::int64_t> next_slot;  // per card, its next slot to write
    out = ToyResult{};

    auto write = [&](const kev::StepRow& r) {
        QVERIFY(r.read.reads(r.slot));
        if (r.card != PackPlan::kSharedSegment && !next_slot.count(r.card)) {
            // A card's first row. Slots the planner freed and gave to it in one step are
            // not reported freed (take_freed): what was there is gone all the same.
            const auto region = planner.region(r.card);
            next_slot[r.card] = region.first;
            for (std::int64_t s = region.first; s < region.second; ++s) {
                if (!cache.slots[static_cast<std::size_t>(s)]) continue;
                cache.slots[static_cast<std::size_t>(s)].reset();
                cache.freed[static_cast<std::size_t>(s)] = true;
            }
        }
        QVERIFY2(!cache.slots[static_cast<std::size_t>(r.slot)], "a slot was written twice");
        if (r.card == PackPlan::kSharedSegment) {
            QVERIFY(r.slot < p.shared_length);
            QCOMPARE(r.position, r.slot);
            QVERIFY(r.read.shared_end == 0 && r.read.begin == 0 && r.read.end == r.slot + 1);
        } else {
            const auto region = planner.region(r.card);
            QVERIFY(r.slot >= region.first && r.slot < region.second);
            auto it = next_slot.find(r.card);
            QCOMPARE(r.slot, it->second);
            ++it->second;
            QCOMPARE(r.read.begin, region.first);
            QCOMPARE(r.read.end, r.slot + 1);
            QVERIFY(r.read.shared_end == 0 || r.read.shared_end == p.shared_length);
            QCOMPARE(r.position, r.read.shared_end + (r.slot - region.first));
        }
        cache.slots[static_cast<std::size_t>(r.slot)] = std::make_pair(r.token, r.position);
        if (cache.freed[static_cast<std::size_t>(r.slot)]) ++out.reused_slots;
    };

    for (std::int64_t guard = 0;; ++guard) {
        QVERIFY(guard < 2000);
        if (hook) hook(planner, guard, samplers);
        if (QTest::currentTestFailed()) return;
        if (planner.done()) break;
        const StepPlan step = planner.next_step();
        QCOMPARE(step.index, guard);
        if (options.max_cache_slots > 0) QVERIFY(planner.cache_slots() <= options.max_cache_slots);
        const auto slots = static_cast<std::size_t>(std::max<std::int64_t>(planner.cache_slots(), p.cache_slots));
        cache.slots.resize(slots);
        cache.freed.resize(slots, false);
        for (const auto& [begin, end] : planner.take_freed()) {
            for (std::int64_t s = begin; s < end; ++s) {
                cache.slots[static_cast<std::size_t>(s)].reset();
                cache.freed[static_cast<std::size_t>(s)] = true;
            }
        }
        if (step.rows.empty()) break;
        std::int64_t answering = 0;
        std::map<std::int32_t, std::int64_t> region_prompt_rows;
        for (const kev::StepRow& r : step.rows) {
            write(r);
            answering += r.prompt ? 0 : 1;
            if (r.prompt && options.region_rows > 0)
                QVERIFY2(++region_prompt_rows[r.card] <= options.region_rows, "a region read more prompt rows than allowed");
        }
        if (QTest::currentTestFailed()) return;
        if (answering > 0) {
            out.max_prompt_rows_beside_answers = std::max(out.max_prompt_rows_beside_answers, step.prompt_rows);
            // The chunk beside answering cards: as asked, or 3/4 as many rows as they have (at least 4).
            const std::int64_t bound = options.prompt_rows_beside_answers > 0 ? options.prompt_rows_beside_answers
                                                                               : std::max(kev::kMinPromptChunk, answering * 3 / 4);
            QVERIFY2(step.prompt_rows <= bound, "a step carried more prompt rows beside answering cards than allowed");
        }
        const std::vector<std::uint8_t> mask = kev::step_slot_mask(step);
        const std::int64_t kv = step.kv_len;
        std::vector<SampleResult> samples;
        for (const kev::StepOutput& o : step.outputs) {
            std::vector<float> logits = toy_logits(cache, mask.data() + o.row * kv, kv);
            samples.push_back(samplers[static_cast<std::size_t>(o.card)].sample(logits.data(), logits.size(),
                                                                                 planner.history(o.card)));
        }
        planner.accept(step, samples);
        for (const kev::StepOutput& o : step.outputs) {
            const kev::CardProgress& c = planner.card(o.card);
            if (c.active && c.generated.back() == kStop) planner.report_stop_string(o.card);
        }
    }
    out.cache_slots = planner.cache_slots();
    for (std::int32_t c = 0; c < planner.cards(); ++c) {
        out.generated.push_back(planner.card(c).generated);
        QVERIFY(planner.card(c).finish.has_value());
        out.reasons.push_back(*planner.card(c).finish);
    }
}

}  // namespace

class TestPlanner : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void prefillThenDecodeAppendsInsideEachRegion() {
        // Shared 2; card 0: prompt 3, 3 new -> region [2, 8); card 1: prompt 2, 3 new -> [8, 13).
        const PackPlan p = pack({{ids(3), 3}, {ids(2, 20), 3}}, {1, 2});
        Planner planner(p, eosOptions({kEos}));
        QCOMPARE(planner.region(0), std::make_pair(std::int64_t(2), std::int64_t(8)));
        QCOMPARE(planner.region(1), std::make_pair(std::int64_t(8), std::int64_t(13)));

        // The first step is the whole pack, row for row as the PackPlan lays it out, and
        // its mask is the pack's prefill mask: one rule, from the same spans.
        StepPlan s0 = planner.next_step();
        QCOMPARE(s0.index, std::int64_t(0));
        QVERIFY(s0.kind == StepKind::Prefill);
        QCOMPARE(s0.rows.size(), std::size_t(p.rows()));
        QCOMPARE(s0.prompt_rows, p.rows());
        for (std::int64_t r = 0; r < p.rows(); ++r) {
            QCOMPARE(s0.rows[r].token, p.tokens[r]);
            QCOMPARE(s0.rows[r].position, p.positions[r]);
            QCOMPARE(s0.rows[r].slot, p.slots[r]);
            QCOMPARE(s0.rows[r].card, p.segments[r]);
            QCOMPARE(s0.rows[r].read.begin, kev::read_span(p, r).begin);
            QCOMPARE(s0.rows[r].read.end, kev::read_span(p, r).end);
            QCOMPARE(s0.rows[r].read.shared_end, kev::read_span(p, r).shared_end);
        }
        QCOMPARE(s0.outputs.size(), std::size_t(2));
        QCOMPARE(s0.outputs[0].row, p.output_rows[0]);
        QCOMPARE(s0.outputs[1].row, p.output_rows[1]);
        QCOMPARE(s0.kv_len, p.prefill_kv_len());
        QCOMPARE(kev::step_slot_mask(s0), kev::prefill_slot_mask(p));
        planner.accept(s0, tokens({5, 6}));

        StepPlan s1 = planner.next_step();
        QVERIFY(s1.kind == StepKind::Decode);
        QCOMPARE(s1.outputs.size(), std::size_t(2));
        QCOMPARE(s1.outputs[1].row, std::int64_t(1));
        QCOMPARE(s1.index, std::int64_t(1));
        QCOMPARE(s1.rows[0].token, TokenId(5));
        QCOMPARE(s1.rows[0].position, std::int64_t(5));  // 2 shared + 3 prompt
        QCOMPARE(s1.rows[0].slot, std::int64_t(5));
        QCOMPARE(s1.rows[1].token, TokenId(6));
        QCOMPARE(s1.rows[1].position, std::int64_t(4));  // 2 shared + 2 prompt
        QCOMPARE(s1.rows[1].slot, std::int64_t(10));
        QCOMPARE(s1.rows[1].read.begin, std::int64_t(8));
        QCOMPARE(s1.rows[1].read.shared_end, std::int64_t(2));
        QCOMPARE(s1.kv_len, std::int64_t(11));
        planner.accept(s1, tokens({7, 8}));

        // The picture in planner.h.
        StepPlan s2 = planner.next_step();
        QCOMPARE(s2.rows[0].slot, std::int64_t(6));
        QCOMPARE(s2.rows[1].slot, std::int64_t(11));
        QCOMPARE(s2.kv_len, std::int64_t(12));
        QCOMPARE(QString::fromStdString(kev::mask_picture(kev::step_slot_mask(s2), 2, 12)),
                 QStringLiteral("xxxxxxx.....\n"
                                "xx......xxxx\n"));
        planner.accept(s2, tokens({9, 10}));

        QVERIFY(planner.done());
        QCOMPARE(planner.card(0).generated, (std::vector<TokenId>{5, 7, 9}));
        QVERIFY(planner.card(0).finish == FinishReason::MaxTokens);
        QCOMPARE(planner.take_finished(), (std::vector<std::int32_t>{0, 1}));
        QVERIFY(planner.take_finished().empty());
        QVERIFY(planner.next_step().rows.empty());
        QCOMPARE(planner.history(1), (std::vector<TokenId>{1, 2, 20, 21, 6, 8, 10}));
    }

    void everyFinishReason() {
        // 0: EOS; 1: max tokens (2); 2: stop string; 3: non-finite; 4: context full
        // (context 8, prompt 6: one slot to feed back, so 2 tokens); 5: cancelled.
        const PackPlan p = pack({{ids(2), 10}, {ids(2), 2}, {ids(2), 10}, {ids(2), 10}, {ids(6), 10}, {ids(2), 10}},
                                {}, 8);
        QCOMPARE(p.card(4).decode_slots, std::int64_t(2));
        Planner planner(p, eosOptions({kEos, 39}));
        StepPlan s = planner.next_step();
        std::vector<SampleResult> r = tokens({5, 5, 5, 5, 5, 5});
        r[3] = SampleResult{-1, true};
        planner.accept(s, r);
        QVERIFY(planner.card(3).finish == FinishReason::NonFinite);
        QVERIFY(planner.card(3).generated.empty());
        planner.report_stop_string(2);
        planner.request_cancel(5);
        QVERIFY(planner.card(5).active);  // not before the step boundary

        s = planner.next_step();
        QCOMPARE(s.rows.size(), std::size_t(3));  // cards 0, 1, 4
        QCOMPARE(s.outputs.size(), std::size_t(3));
        QCOMPARE(s.rows[2].card, 4);
        planner.accept(s, tokens({39, 6, 6}));
        QVERIFY(planner.card(0).finish == FinishReason::EndOfSequence);
        QCOMPARE(planner.card(0).generated, std::vector<TokenId>{5});  // the EOS id is not kept
        QVERIFY(planner.card(1).finish == FinishReason::MaxTokens);
        QVERIFY(planner.card(4).active);
        s = planner.next_step();
        QCOMPARE(s.rows.size(), std::size_t(1));
        QCOMPARE(s.rows[0].position, std::int64_t(7));  // the context's last position
        planner.accept(s, tokens({6}));
        QVERIFY(planner.card(4).finish == FinishReason::ContextFull);
        QCOMPARE(planner.card(4).generated.size(), std::size_t(3));
        QVERIFY(planner.done());
        QCOMPARE(planner.take_finished(), (std::vector<std::int32_t>{3, 2, 5, 0, 1, 4}));
        QVERIFY(planner.card(2).finish == FinishReason::StopString);
        QVERIFY(planner.card(5).finish == FinishReason::Cancelled);
        QCOMPARE(QString::fromLatin1(kev::to_string(FinishReason::ContextFull)), QStringLiteral("context full"));
    }

    void cancelTakesEffectAtTheNextStepBoundary() {
        const PackPlan p = pack({{ids(2), 10}, {ids(2), 10}, {ids(2), 10}}, {});
        Planner planner(p, kev::PlannerOptions{});
        planner.accept(planner.next_step(), tokens({1, 1, 1}));
        StepPlan s = planner.next_step();
        planner.request_cancel(1);  // while the step is in flight: its token still counts
        planner.accept(s, tokens({2, 2, 2}));
        QCOMPARE(planner.card(1).generated.size(), std::size_t(2));
        s = planner.next_step();
        QCOMPARE(s.rows.size(), std::size_t(2));
        QCOMPARE(s.rows[0].card, 0);
        QCOMPARE(s.rows[1].card, 2);
        QVERIFY(planner.card(1).finish == FinishReason::Cancelled);
        planner.request_cancel(1);  // finished: nothing happens
        planner.request_cancel_all();
        planner.accept(s, tokens({3, 3}));
        QVERIFY(planner.next_step().rows.empty());
        QVERIFY(planner.done());
        QCOMPARE(planner.card(0).generated.size(), std::size_t(3));
        QVERIFY(planner.card(0).finish == FinishReason::Cancelled);
        QVERIFY(errorOf([&] { planner.request_cancel(3); }).contains("card index 3 outside [0, 3)"));
    }

    void acceptRefusesResultsThatDoNotMatchAndChangesNothing() {
        const PackPlan p = pack({{ids(2), 10}, {ids(2), 10}}, {});
        Planner planner(p, kev::PlannerOptions{});
        const StepPlan s0 = planner.next_step();
        QVERIFY(errorOf([&] { planner.accept(s0, tokens({1})); }).contains("1 samples for a step of 2 outputs"));
        QVERIFY(errorOf([&] { planner.accept(s0, tokens({1, -4})); }).contains("sampled token id -4"));
        QVERIFY(planner.card(0).generated.empty());
        planner.accept(s0, tokens({1, 1}));
        QVERIFY(errorOf([&] { planner.accept(s0, tokens({1, 1})); }).contains("results for step 0 but step 1"));
        QCOMPARE(planner.card(0).generated.size(), std::size_t(1));
        // Asking again before accept plans the same step.
        const StepPlan a = planner.next_step();
        const StepPlan b = planner.next_step();
        QCOMPARE(a.index, b.index);
        QCOMPARE(a.rows[1].slot, b.rows[1].slot);
    }

    // A stop string reported between next_step and accept: the sample is dropped.
    void sampleForACardFinishedMeanwhileIsIgnored() {
        const PackPlan p = pack({{ids(2), 10}, {ids(2), 10}}, {});
        Planner planner(p, kev::PlannerOptions{});
        const StepPlan s0 = planner.next_step();
        planner.report_stop_string(0);
        planner.accept(s0, tokens({4, 4}));
        QVERIFY(planner.card(0).generated.empty());
        QCOMPARE(planner.card(1).generated.size(), std::size_t(1));
    }

    // The loop with the toy model: random packs, with and without shared context, each
    // card with its own seeded sampler or greedy. Packed == alone, token for token and
    // reason for reason.
    void packedEqualsAloneWithAToyModel() {
        std::mt19937 rng(7);
        auto uniform = [&rng](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
        int reasons_seen[6] = {};
        for (int trial = 0; trial < 60; ++trial) {
            const int n = uniform(1, 16);
            const std::int64_t context = uniform(16, 40);
            const std::vector<TokenId> shared = trial % 2 ? ids(uniform(1, 6), 30) : std::vector<TokenId>{};
            std::vector<CardPrompt> cards;
            std::vector<SamplingSettings> settings;
            for (int c = 0; c < n; ++c) {
                std::vector<TokenId> prompt;
                for (int t = uniform(1, 8); t > 0; --t) prompt.push_back(static_cast<TokenId>(uniform(1, 39)));
                cards.push_back({prompt, uniform(1, 30)});
                SamplingSettings s;
                if (uniform(0, 2) > 0) s.temperature = 0.5f + 0.1f * static_cast<float>(uniform(0, 10));
                if (uniform(0, 3) == 0) s.repetition_penalty = 1.3f;
                if (uniform(0, 3) == 0) s.top_k = uniform(1, 10);
                s.seed = static_cast<std::uint64_t>(uniform(0, 1 << 30));
                settings.push_back(s);
            }
            ToyResult packed;
            run_toy(cards, shared, settings, context, packed);
            if (QTest::currentTestFailed()) return;
            for (int c = 0; c < n; ++c) {
                ToyResult alone;
                run_toy({cards[c]}, shared, {settings[c]}, context, alone);
                if (QTest::currentTestFailed()) return;
                QCOMPARE(packed.generated[c], alone.generated[0]);
                QVERIFY(packed.reasons[c] == alone.reasons[0]);
                ++reasons_seen[static_cast<int>(alone.reasons[0])];
                if (!shared.empty()) {
                    // The shared context + question as one prompt, alone, with no shared
                    // context: the same positions and tokens, so the same answer.
                    CardPrompt joined = cards[c];
                    joined.tokens.insert(joined.tokens.begin(), shared.begin(), shared.end());
                    ToyResult single;
                    run_toy({joined}, {}, {settings[c]}, context, single);
                    if (QTest::currentTestFailed()) return;
                    QCOMPARE(single.generated[0], alone.generated[0]);
                }
            }
        }
        // The trials reach the natural endings (not only max tokens).
        QVERIFY(reasons_seen[static_cast<int>(FinishReason::EndOfSequence)] > 0);
        QVERIFY(reasons_seen[static_cast<int>(FinishReason::MaxTokens)] > 0);
        QVERIFY(reasons_seen[static_cast<int>(FinishReason::StopString)] > 0);
        QVERIFY(reasons_seen[static_cast<int>(FinishReason::ContextFull)] > 0);
        // An empty slot inside a mask would have given NaN logits.
        QCOMPARE(reasons_seen[static_cast<int>(FinishReason::NonFinite)], 0);
    }

    // Cancelling one card mid-run leaves every other card's answer unchanged; the
    // cancelled card's answer is a prefix of what it would have said.
    void cancellingOneCardChangesNoOther() {
        std::mt19937 rng(11);
        auto uniform = [&rng](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
        for (int trial = 0; trial < 30; ++trial) {
            const int n = uniform(2, 10);
            std::vector<CardPrompt> cards;
            std::vector<SamplingSettings> settings;
            for (int c = 0; c < n; ++c) {
                cards.push_back({ids(uniform(1, 6), static_cast<TokenId>(uniform(1, 30))), uniform(5, 25)});
                SamplingSettings s;
                s.temperature = 0.8f;
                s.seed = static_cast<std::uint64_t>(trial * 100 + c);
                settings.push_back(s);
            }
            const std::vector<TokenId> shared = trial % 2 ? ids(3, 35) : std::vector<TokenId>{};
            ToyResult full;
            run_toy(cards, shared, settings, 64, full);
            const int victim = uniform(0, n - 1);
            const std::int64_t at = uniform(1, 6);
            ToyResult cancelled;
            run_toy(cards, shared, settings, 64, cancelled,
                    [&](Planner& planner, std::int64_t step, std::vector<kev::Sampler>&) {
                        if (step == at) planner.request_cancel(victim);
                    });
            if (QTest::currentTestFailed()) return;
            for (int c = 0; c < n; ++c) {
                if (c == victim) continue;
                QCOMPARE(cancelled.generated[c], full.generated[c]);
                QVERIFY(cancelled.reasons[c] == full.reasons[c]);
            }
            const auto& cut = cancelled.generated[victim];
            const auto& whole = full.generated[victim];
            QVERIFY(cut.size() <= whole.size());
            QVERIFY(std::equal(cut.begin(), cut.end(), whole.begin()));
            if (cancelled.reasons[victim] == FinishReason::Cancelled) {
                QCOMPARE(cut.size(), std::size_t(at));  // tokens of steps 0 .. at-1
            } else {
                QCOMPARE(cut, whole);  // it had finished on its own before the cancel
            }
        }
    }

    // A card joins a running pack: it reads its prompt in chunks beside the answering
    // card (which keeps getting its row every step), then answers; rows and masks as drawn.
    void joiningCardReadsItsPromptInChunksBesideAnsweringCards() {
        // Shared 2; card 0: prompt 3, 6 new -> region [2, 11).
        const PackPlan p = pack({{ids(3), 6}}, {1, 2});
        kev::PlannerOptions o = eosOptions({kEos});
        o.prompt_rows_beside_answers = 2;
        Planner planner(p, o);
        planner.accept(planner.next_step(), tokens({5}));
        // Card 1 shares the context: prompt 5, 2 new -> region [11, 18), positions from 2.
        QCOMPARE(planner.add_card({ids(5, 20), 2}, true), 1);
        QVERIFY(planner.card(1).phase == kev::CardPhase::Waiting);
        QCOMPARE(planner.region(1), std::make_pair(std::int64_t(-1), std::int64_t(-1)));

        StepPlan s1 = planner.next_step();
        QCOMPARE(planner.region(1), std::make_pair(std::int64_t(11), std::int64_t(18)));
        QCOMPARE(planner.cache_slots(), std::int64_t(18));
        QVERIFY(s1.kind == StepKind::Mixed);
        QCOMPARE(s1.rows.size(), std::size_t(3));
        QCOMPARE(s1.prompt_rows, std::int64_t(2));
        QCOMPARE(s1.outputs.size(), std::size_t(1));  // card 1 has not read its prompt yet
        QCOMPARE(s1.outputs[0].card, 0);
        QCOMPARE(s1.rows[1].card, 1);
        QCOMPARE(s1.rows[1].position, std::int64_t(2));
        QCOMPARE(s1.rows[2].slot, std::int64_t(12));
        planner.accept(s1, tokens({6}));
        QCOMPARE(planner.card(1).prompt_done, std::int64_t(2));
        planner.accept(planner.next_step(), tokens({7}));

        // The last token of its prompt: card 1 samples its first token from that row.
        StepPlan s3 = planner.next_step();
        QCOMPARE(s3.rows.size(), std::size_t(2));
        QCOMPARE(s3.outputs.size(), std::size_t(2));
        QCOMPARE(s3.outputs[1].card, 1);
        QCOMPARE(s3.outputs[1].row, std::int64_t(1));
        QCOMPARE(s3.kv_len, std::int64_t(16));
        QCOMPARE(QString::fromStdString(kev::mask_picture(kev::step_slot_mask(s3), 2, 16)),
                 QStringLiteral("xxxxxxxx........\n"
                                "xx.........xxxxx\n"));
        planner.accept(s3, tokens({8, 30}));
        StepPlan s4 = planner.next_step();
        QVERIFY(s4.kind == StepKind::Decode);
        QCOMPARE(s4.rows[1].token, TokenId(30));
        QCOMPARE(s4.rows[1].position, std::int64_t(7));  // 2 shared + 5 prompt
        QCOMPARE(s4.rows[1].slot, std::int64_t(16));
        planner.accept(s4, tokens({9, 31}));
        QVERIFY(planner.card(1).finish == FinishReason::MaxTokens);
        QCOMPARE(planner.history(1), (std::vector<TokenId>{1, 2, 20, 21, 22, 23, 24, 30, 31}));
        // A card that does not share the context reads from position 0 and never the
        // shared slots.
        QCOMPARE(planner.add_card({ids(2, 25), 3}, false), 2);
        StepPlan s5 = planner.next_step();
        QCOMPARE(s5.rows.back().position, std::int64_t(1));
        QCOMPARE(s5.rows.back().read.shared_end, std::int64_t(0));
        QCOMPARE(planner.history(2), (std::vector<TokenId>{25, 26}));
    }

    // region_rows (windows kept in rings): no step carries more prompt rows of one region
    // than that, the shared context's included, while the others read theirs beside it;
    // every prompt row is still read once, in order.
    void regionRowsBoundEachRegionsRowsPerStep() {
        // Shared 7; card 0 prompt 8, card 1 prompt 2, card 2 prompt 5.
        const PackPlan p = pack({{ids(8), 2}, {ids(2, 30), 2}, {ids(5, 40), 2}}, ids(7, 50));
        kev::PlannerOptions o = eosOptions({kEos});
        o.region_rows = 3;
        Planner planner(p, o);
        std::map<std::int32_t, std::vector<std::int64_t>> read;  // region -> prompt positions, in order
        for (int guard = 0; !planner.done() && guard < 50; ++guard) {
            const StepPlan s = planner.next_step();
            std::map<std::int32_t, std::int64_t> rows;
            for (const auto& r : s.rows) {
                if (!r.prompt) continue;
                QVERIFY2(++rows[r.card] <= 3, qPrintable(QString("step %1: region %2").arg(s.index).arg(r.card)));
                read[r.card].push_back(r.position);
            }
            planner.accept(s, std::vector<SampleResult>(s.outputs.size(), SampleResult{100 + static_cast<TokenId>(s.index), false}));
        }
        QVERIFY(planner.done());
        auto run = [](std::int64_t from, std::int64_t n) {
            std::vector<std::int64_t> v;
            for (std::int64_t i = 0; i < n; ++i) v.push_back(from + i);
            return v;
        };
        QCOMPARE(read[kev::PackPlan::kSharedSegment], run(0, 7));
        QCOMPARE(read[0], run(7, 8));
        QCOMPARE(read[1], run(7, 2));
        QCOMPARE(read[2], run(7, 5));
    }

    // Regions of finished cards go back to a pool; a card that does not fit waits for one.
    void freedRegionsAreReusedAndWaitingCardsGetRoom() {
        // Card 0: prompt 2, 2 new -> [0, 4); card 1: prompt 2, 6 new -> [4, 12).
        const PackPlan p = pack({{ids(2), 2}, {ids(2, 20), 6}}, {});
        kev::PlannerOptions o = eosOptions({kEos});
        o.max_cache_slots = 12;
        Planner planner(p, o);
        planner.accept(planner.next_step(), tokens({5, 5}));
        QCOMPARE(planner.add_card({ids(3, 25), 1}, false), 2);  // region of 4: no room yet
        StepPlan s1 = planner.next_step();
        QVERIFY(planner.card(2).phase == kev::CardPhase::Waiting);
        QCOMPARE(s1.rows.size(), std::size_t(2));
        planner.accept(s1, tokens({6, 6}));
        QVERIFY(planner.card(0).finish == FinishReason::MaxTokens);
        QVERIFY(planner.take_freed().empty());  // freed at the next step, not before
        StepPlan s2 = planner.next_step();
        // Card 0's [0, 4) went straight to card 2: nothing is left freed.
        QVERIFY(planner.take_freed().empty());
        QCOMPARE(planner.region(2), std::make_pair(std::int64_t(0), std::int64_t(4)));
        QCOMPARE(planner.cache_slots(), std::int64_t(12));
        QCOMPARE(s2.rows.size(), std::size_t(4));  // card 1's token, card 2's prompt
        planner.accept(s2, tokens({7, 8}));
        QVERIFY(planner.card(2).finish == FinishReason::MaxTokens);
        // Freed regions join: [0, 4) and then card 1's [4, 12) make one region of 12.
        planner.request_cancel(1);
        QCOMPARE(planner.add_card({ids(8, 25), 4}, false), 3);
        StepPlan s3 = planner.next_step();
        QCOMPARE(planner.region(3), std::make_pair(std::int64_t(0), std::int64_t(12)));
        QVERIFY(planner.take_freed().empty());  // all of it card 3's at once
        QCOMPARE(s3.rows.size(), std::size_t(8));
    }

    void addCardRefusesWhatCanNeverRunAndChangesNothing() {
        const PackPlan p = pack({{ids(2), 4}}, {1, 2, 3}, 20);
        kev::PlannerOptions o = eosOptions({kEos});
        o.max_cache_slots = 16;
        o.vocab_size = 40;
        Planner planner(p, o);
        QVERIFY(errorOf([&] { planner.add_card({{}, 4}, true); }).contains("card 2 has an empty prompt"));
        QVERIFY(errorOf([&] { planner.add_card({ids(2), 0}, true); }).contains("max new tokens must be at least 1"));
        QVERIFY(errorOf([&] { planner.add_card({ids(18), 4}, true); })
                    .contains("18 tokens long (+ 3 of shared context), more than the model's context of 20"));
        QVERIFY(errorOf([&] { planner.add_card({{1, 40}, 4}, false); }).contains("token 1 has id 40"));
        QVERIFY(errorOf([&] { planner.add_card({ids(10), 4}, false); }).contains("needs 14 cache slots"));
        QCOMPARE(planner.cards(), 1);
        QCOMPARE(planner.add_card({ids(10), 3}, false), 1);  // 13 slots beside the shared 3: fits
    }

    // Random live schedules: cards join a running pack at random steps (sharing the
    // context or not), some are cancelled, some of those come back edited at once, a
    // follow-up continues a card's conversation once it has answered, prompts are read in
    // chunks of random size, and a tight cache makes cards wait for freed regions. Every card's answer is the one it
    // gives alone (a cancelled card's is a prefix of it); freed regions are emptied, so a
    // row reading one after it was freed would give NaN logits and a NonFinite ending.
    void randomLiveSchedulesGiveEveryCardItsAloneAnswer() {
        std::mt19937 rng(23);
        auto uniform = [&rng](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
        std::int64_t joined = 0, waited = 0, reused = 0, cancelled = 0, chunked_steps = 0, sharing_joins = 0;
        std::int64_t edits = 0, follow_ups = 0;
        for (int trial = 0; trial < 200; ++trial) {
            const std::int64_t context = uniform(20, 48);
            const std::vector<TokenId> shared = trial % 3 ? ids(uniform(1, 6), 30) : std::vector<TokenId>{};
            const int total = uniform(1, 16);
            const int initial = uniform(1, total);
            struct Card {
                CardPrompt prompt;
                SamplingSettings settings;
                bool shares = false;
                std::int64_t join_at = 0;     // step before which it is added (initial cards: 0)
                std::int64_t cancel_at = -1;  // step before which it is cancelled (-1: never)
            };
            std::vector<Card> cards;
            for (int c = 0; c < total; ++c) {
                Card k;
                for (int t = uniform(1, 10); t > 0; --t) k.prompt.tokens.push_back(static_cast<TokenId>(uniform(1, 39)));
                k.prompt.max_new_tokens = uniform(1, 20);
                if (uniform(0, 2) > 0) k.settings.temperature = 0.5f + 0.1f * static_cast<float>(uniform(0, 10));
                if (uniform(0, 3) == 0) k.settings.repetition_penalty = 1.3f;
                k.settings.seed = static_cast<std::uint64_t>(uniform(0, 1 << 30));
                k.shares = !shared.empty() && (c < initial || uniform(0, 1) == 1);
                k.join_at = c < initial ? 0 : uniform(1, 25);
                if (uniform(0, 4) == 0) k.cancel_at = k.join_at + uniform(0, 12);
                cards.push_back(k);
            }
            // Edits: a card stopped at a step comes back at that step with its last prompt
            // token changed (the user edited it while it ran, then pressed Run).
            for (int c = 0; c < total && cards.size() < 16; ++c) {
                if (cards[static_cast<std::size_t>(c)].cancel_at < 0 || uniform(0, 1) == 0) continue;
                Card e = cards[static_cast<std::size_t>(c)];
                e.prompt.tokens.back() = static_cast<TokenId>(e.prompt.tokens.back() % 39 + 1);
                e.join_at = std::max<std::int64_t>(1, e.cancel_at);
                e.cancel_at = -1;
                cards.push_back(e);
                ++edits;
            }
            const int scheduled = static_cast<int>(cards.size());
            // A follow-up: once card `source` has answered, a card continues its conversation
            // (its prompt, its answer and a new turn) while the pack still runs.
            const int source = cards.size() < 16 && uniform(0, 1) ? uniform(0, total - 1) : -1;
            std::vector<TokenId> turn;
            for (int t = uniform(1, 4); t > 0; --t) turn.push_back(static_cast<TokenId>(uniform(1, 39)));
            const std::int64_t follow_tokens = uniform(1, 10);
            std::vector<CardPrompt> first;
            std::vector<SamplingSettings> first_settings;
            std::int64_t largest = 0;
            for (int c = 0; c < scheduled; ++c) {
                const Card& k = cards[static_cast<std::size_t>(c)];
                const auto sh = static_cast<std::int64_t>(k.shares ? shared.size() : 0);
                const auto len = static_cast<std::int64_t>(k.prompt.tokens.size());
                largest = std::max(largest, len + std::min(k.prompt.max_new_tokens, context - sh - len));
                if (c < initial) {
                    first.push_back(k.prompt);
                    first_settings.push_back(k.settings);
                }
            }
            kev::PlannerOptions options;
            options.prompt_rows = uniform(0, 1) ? 0 : uniform(1, 12);
            options.prompt_rows_beside_answers = uniform(0, 8);  // 0: 3/4 as many as the answering cards
            if (uniform(0, 1)) {
                options.max_cache_slots = std::max(pack(first, shared, context).cache_slots,
                                                   static_cast<std::int64_t>(shared.size()) + largest) + uniform(0, 10);
            }
            options.region_rows = uniform(0, 2) ? 0 : uniform(1, 6);  // windows kept in rings
            std::vector<std::int32_t> index(static_cast<std::size_t>(scheduled), -1);
            for (int c = 0; c < initial; ++c) index[static_cast<std::size_t>(c)] = c;
            ToyResult live;
            run_toy(first, shared, first_settings, context, live,
                    [&](Planner& planner, std::int64_t step, std::vector<kev::Sampler>& samplers) {
                        for (int c = initial; c < scheduled; ++c) {
                            const Card& k = cards[static_cast<std::size_t>(c)];
                            if (k.join_at != step) continue;
                            index[static_cast<std::size_t>(c)] = planner.add_card(k.prompt, k.shares);
                            samplers.emplace_back(k.settings);
                            ++joined;
                            sharing_joins += k.shares ? 1 : 0;
                        }
                        const std::int32_t from = source >= 0 ? index[static_cast<std::size_t>(source)] : -1;
                        if (from >= 0 && cards.size() == static_cast<std::size_t>(scheduled) &&
                            planner.card(from).finish && *planner.card(from).finish != FinishReason::Cancelled) {
                            Card f = cards[static_cast<std::size_t>(source)];
                            const std::vector<TokenId>& answer = planner.card(from).generated;
                            f.prompt.tokens.insert(f.prompt.tokens.end(), answer.begin(), answer.end());
                            f.prompt.tokens.insert(f.prompt.tokens.end(), turn.begin(), turn.end());
                            // Within the context, and within a tight cache's whole size.
                            const auto sh = static_cast<std::int64_t>(f.shares ? shared.size() : 0);
                            std::int64_t room = context - sh - static_cast<std::int64_t>(f.prompt.tokens.size());
                            if (options.max_cache_slots > 0)
                                room = std::min(room, options.max_cache_slots - static_cast<std::int64_t>(shared.size()) -
                                                          static_cast<std::int64_t>(f.prompt.tokens.size()));
                            f.prompt.max_new_tokens = std::min(follow_tokens, room);
                            f.join_at = step;
                            f.cancel_at = -1;
                            cards.push_back(f);  // added once, whether it fits or not
                            if (f.prompt.max_new_tokens >= 1) {
                                index.push_back(planner.add_card(f.prompt, f.shares));
                                samplers.emplace_back(f.settings);
                                ++follow_ups;
                            } else {
                                index.push_back(-1);
                            }
                        }
                        for (int c = 0; c < scheduled; ++c) {
                            const std::int32_t i = index[static_cast<std::size_t>(c)];
                            if (i < 0) continue;
                            if (cards[static_cast<std::size_t>(c)].cancel_at == step) planner.request_cancel(i);
                            if (planner.card(i).phase == kev::CardPhase::Waiting) ++waited;
                        }
                    },
                    options);
            if (QTest::currentTestFailed()) return;
            reused += live.reused_slots;
            if (live.max_prompt_rows_beside_answers > 0) ++chunked_steps;

            for (std::size_t c = 0; c < cards.size(); ++c) {
                const Card& k = cards[c];
                const std::int32_t i = index[c];
                if (i < 0) continue;  // its join step came after the run had ended
                ToyResult alone;
                run_toy({k.prompt}, k.shares ? shared : std::vector<TokenId>{}, {k.settings}, context, alone);
                if (QTest::currentTestFailed()) return;
                const auto& got = live.generated[static_cast<std::size_t>(i)];
                const FinishReason why = live.reasons[static_cast<std::size_t>(i)];
                QVERIFY(why != FinishReason::NonFinite);
                if (why == FinishReason::Cancelled) {
                    ++cancelled;
                    QVERIFY(got.size() <= alone.generated[0].size());
                    QVERIFY(std::equal(got.begin(), got.end(), alone.generated[0].begin()));
                } else {
                    QCOMPARE(got, alone.generated[0]);
                    QVERIFY(why == alone.reasons[0]);
                }
            }
        }
        // The schedules reach what they are meant to: joins (sharing the context too),
        // prompts read beside answering cards, waits for room, reuse and cancels.
        QVERIFY(joined > 300);
        QVERIFY(sharing_joins > 50);
        QVERIFY(chunked_steps > 50);
        QVERIFY(waited > 0);
        QVERIFY(reused > 0);
        QVERIFY(cancelled > 20);
        QVERIFY(edits > 10);
        QVERIFY(follow_ups > 20);
        qInfo("200 schedules: %lld joins, %lld edits, %lld follow-ups, %lld cancelled", static_cast<long long>(joined),
              static_cast<long long>(edits), static_cast<long long>(follow_ups), static_cast<long long>(cancelled));
    }
};

QTEST_GUILESS_MAIN(TestPlanner)
#include "tst_planner.moc"
