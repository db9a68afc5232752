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
};

// Runs the whole loop over a pack. `hook(planner, step)` runs before each next_step.
// Checks on the way that every slot is written once, inside its card's region, and
// that each card's slots are consecutive from its region's start.
void run_toy(const std::vector<CardPrompt>& cards, const std::vector<TokenId>& shared,
             const std::vector<SamplingSettings>& settings, std::int64_t context_length,
             ToyResult& out, const std::function<void(Planner&, std::int64_t)>& hook = {}) {
    const PackPlan p = pack(cards, shared, context_length);
    Planner planner(p, kev::PlannerOptions{{kEos}});
    std::vector<kev::Sampler> samplers;
    for (const SamplingSettings& s : settings) samplers.emplace_back(s);
    ToyCache cache;
    cache.slots.resize(static_cast<std::size_t>(p.cache_slots));
    std::vector<std::int64_t> next_slot(cards.size());
    for (std::size_t c = 0; c < cards.size(); ++c) next_slot[c] = p.card(static_cast<std::int32_t>(c)).slot_begin;

    auto write = [&](TokenId token, std::int64_t position, std::int64_t slot, std::int32_t segment) {
        QVERIFY2(!cache.slots[static_cast<std::size_t>(slot)], "a slot was written twice");
        if (segment != PackPlan::kSharedSegment) {
            const auto region = planner.region(segment);
            QVERIFY(slot >= region.first && slot < region.second);
            QCOMPARE(slot, next_slot[static_cast<std::size_t>(segment)]);
            ++next_slot[static_cast<std::size_t>(segment)];
        }
        cache.slots[static_cast<std::size_t>(slot)] = std::make_pair(token, position);
    };

    for (std::int64_t guard = 0; !planner.done(); ++guard) {
        QVERIFY(guard < 1000);
        if (hook) hook(planner, guard);
        const StepPlan step = planner.next_step();
        if (step.rows.empty()) break;
        std::vector<std::uint8_t> mask;
        std::int64_t kv = 0;
        if (step.kind == StepKind::Prefill) {
            for (std::int64_t r = 0; r < p.rows(); ++r) write(p.tokens[r], p.positions[r], p.slots[r], p.segments[r]);
            mask = kev::prefill_slot_mask(p);
            kv = p.prefill_kv_len();
        } else {
            for (const kev::StepRow& r : step.rows) write(r.token, r.position, r.slot, r.card);
            mask = kev::step_slot_mask(step);
            kv = step.kv_len;
        }
        if (QTest::currentTestFailed()) return;
        QCOMPARE(kv, step.kv_len);
        std::vector<SampleResult> samples;
        for (const kev::StepRow& r : step.rows) {
            std::vector<float> logits = toy_logits(cache, mask.data() + r.output_row * kv, kv);
            samples.push_back(samplers[static_cast<std::size_t>(r.card)].sample(logits.data(), logits.size(),
                                                                                 planner.history(r.card)));
        }
        planner.accept(step, samples);
        for (const kev::StepRow& r : step.rows) {
            const kev::CardProgress& c = planner.card(r.card);
            if (c.active && c.generated.back() == kStop) planner.report_stop_string(r.card);
        }
    }
    out = ToyResult{};
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
        Planner planner(p, kev::PlannerOptions{{kEos}});
        QCOMPARE(planner.region(0), std::make_pair(std::int64_t(2), std::int64_t(8)));
        QCOMPARE(planner.region(1), std::make_pair(std::int64_t(8), std::int64_t(13)));

        StepPlan s0 = planner.next_step();
        QCOMPARE(s0.index, std::int64_t(0));
        QVERIFY(s0.kind == StepKind::Prefill);
        QCOMPARE(s0.rows.size(), std::size_t(2));
        QCOMPARE(s0.rows[0].output_row, p.output_rows[0]);
        QCOMPARE(s0.rows[1].output_row, p.output_rows[1]);
        QCOMPARE(s0.rows[1].token, TokenId(21));
        QCOMPARE(s0.rows[1].position, std::int64_t(3));
        QCOMPARE(s0.rows[1].slot, std::int64_t(9));
        QCOMPARE(s0.kv_len, p.prefill_kv_len());
        QCOMPARE(errorOf([&] { kev::step_slot_mask(s0); }).contains("prefill_slot_mask"), true);
        planner.accept(s0, tokens({5, 6}));

        StepPlan s1 = planner.next_step();
        QVERIFY(s1.kind == StepKind::Decode);
        QCOMPARE(s1.index, std::int64_t(1));
        QCOMPARE(s1.rows[0].token, TokenId(5));
        QCOMPARE(s1.rows[0].position, std::int64_t(5));  // 2 shared + 3 prompt
        QCOMPARE(s1.rows[0].slot, std::int64_t(5));
        QCOMPARE(s1.rows[1].token, TokenId(6));
        QCOMPARE(s1.rows[1].position, std::int64_t(4));  // 2 shared + 2 prompt
        QCOMPARE(s1.rows[1].slot, std::int64_t(10));
        QCOMPARE(s1.rows[1].read_begin, std::int64_t(8));
        QCOMPARE(s1.rows[1].output_row, std::int64_t(1));
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
        Planner planner(p, kev::PlannerOptions{{kEos, 39}});
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
        QVERIFY(errorOf([&] { planner.accept(s0, tokens({1})); }).contains("1 samples for a step of 2 rows"));
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
            run_toy(cards, shared, settings, 64, cancelled, [&](Planner& planner, std::int64_t step) {
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
};

QTEST_GUILESS_MAIN(TestPlanner)
#include "tst_planner.moc"
