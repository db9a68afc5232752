// The planner decides what each card feeds at every step; it runs nothing.
//
// Like vLLM's scheduler, it is apart from the runner: the runner asks for a StepPlan,
// runs one forward for it, samples one token per row with each card's Sampler, and
// hands the plain results back. The planner then records the tokens and finishes the
// cards that are done. The whole generation loop is:
//
//   Planner planner(pack, {eos ids});
//   while (!planner.done()) {
//       StepPlan step = planner.next_step();      // applies pending cancels first
//       if (step.rows.empty()) break;
//       logits = step.kind == StepKind::Prefill
//                    ? forward(pack rows, prefill_slot_mask(pack)) at rows[i].output_row
//                    : forward(rows' token/position/slot, step_slot_mask(step));
//       for each row i: samples[i] = sampler[rows[i].card].sample(logits[i], ...);
//       planner.accept(step, samples);
//       for each card whose text now holds a stop string: planner.report_stop_string(card);
//       for each card in planner.take_finished(): stream its finish reason, reuse its region
//   }
//
// Step 0 is the prefill (the whole PackPlan in one forward, logits at each card's last
// prompt row); every later step is a decode step with one row per active card, in card
// order. A card's generated token g (0-based) is fed back at
//   position = shared_length + prompt_length + g,  slot = region begin + prompt_length + g,
// i.e. appended right after its prompt inside its own cache region (see pack_plan.h).
// Which cards are active depends only on each card's own tokens and on requests about
// that card: cancelling or finishing one card never changes another card's rows.
//
// Not thread-safe: the worker thread owns the planner. A UI's cancel arrives as an
// atomic flag the worker reads between steps and turns into request_cancel().
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "kev/pack_plan.h"
#include "kev/sampling.h"

namespace kev {

enum class FinishReason {
    EndOfSequence,  // the card sampled one of the end-of-sequence ids
    StopString,     // the caller found one of the card's stop strings in its text
    MaxTokens,      // max_new_tokens generated
    Cancelled,      // the user stopped the card (or the run)
    NonFinite,      // its logits held a NaN or an infinity
    ContextFull,    // the next token would not fit in the model's context
    Failed,         // a server's request for this card failed (CardResult::error says why)
};

const char* to_string(FinishReason reason);

enum class StepKind { Prefill, Decode };

// One row of a step: what one active card feeds.
struct StepRow {
    std::int32_t card = 0;
    TokenId token = 0;            // the input token
    std::int64_t position = 0;    // its RoPE position
    std::int64_t slot = 0;        // the cache slot its key/value is written to
    // The row reads the shared context's slots [0, shared_length) and its own slots
    // [read_begin, slot] (its region up to itself); nothing else.
    std::int64_t read_begin = 0;
    // Prefill: the pack row whose logits are this card's (PackPlan::output_rows).
    // Decode: the index of this row in the step.
    std::int64_t output_row = 0;
};

struct StepPlan {
    std::int64_t index = 0;       // 0 = prefill, then 1, 2, ...
    StepKind kind = StepKind::Prefill;
    std::vector<StepRow> rows;    // active cards, in card order
    std::int64_t shared_length = 0;
    // Slots the forward must cover: 1 + the largest slot any row reads (for the prefill,
    // PackPlan::prefill_kv_len()). A finished card's region beyond it is not read.
    std::int64_t kv_len = 0;
};

// The decode step's mask over cache slots: row-major [rows * kv_len], 1 where row i may
// read the slot (the shared context and its own region up to itself). For a prefill
// step use prefill_slot_mask(pack) instead; this throws InvalidArgument for it.
//
//   shared = slots 0-1; card 0 region 2-7 (prompt 2-4); card 1 region 8-12 (prompt 8-9).
//   Step 2: card 0 feeds slot 6, card 1 feeds slot 11:
//
//   slot:   0 1 2 3 4 5 6 7 8 9 10 11
//   card 0  x x x x x x x . . . .  .
//   card 1  x x . . . . . . x x x  x
std::vector<std::uint8_t> step_slot_mask(const StepPlan& step);

// A card as the planner sees it.
struct CardProgress {
    bool active = true;
    std::optional<FinishReason> finish;  // set once, when the card finishes
    std::vector<TokenId> generated;      // sampled tokens; an end-of-sequence id is not kept
    bool cancel_requested = false;       // applied at the next step boundary
};

struct PlannerOptions {
    std::vector<TokenId> end_of_sequence;  // any of these ends a card (EndOfSequence)
};

class Planner {
public:
    // Copies what it needs from `pack` (layout, prompts, limits).
    Planner(const PackPlan& pack, PlannerOptions options);

    std::int32_t cards() const { return static_cast<std::int32_t>(progress_.size()); }
    const CardProgress& card(std::int32_t c) const;
    bool done() const { return active_ == 0; }
    std::int32_t active_cards() const { return active_; }

    // The next step: the prefill first, then decode steps. Applies pending cancels before
    // choosing the rows. Empty rows when every card has finished. Calling it again before
    // accept() plans the same step again (nothing is consumed).
    StepPlan next_step();

    // Takes the step's results: samples[i] belongs to step.rows[i]. Records the tokens,
    // finishes cards on an end-of-sequence id, max tokens, non-finite logits or a full
    // context. A sample for a card that finished meanwhile (a stop string reported
    // between next_step and accept) is ignored. Throws InvalidArgument (state unchanged)
    // for a step other than the one next_step() planned, a wrong number of samples, or a
    // negative token id.
    void accept(const StepPlan& step, const std::vector<SampleResult>& samples);

    // Asks a card to stop; it leaves the active set at the next step boundary (its token
    // of the step in flight is still accepted). No effect on a finished card.
    void request_cancel(std::int32_t card);
    void request_cancel_all();
    // The caller's detokenizer found one of the card's stop strings in its text: the card
    // finishes now (StopString). No effect on a finished card.
    void report_stop_string(std::int32_t card);

    // Cards finished since the last call, in the order they finished: their answers are
    // complete and their cache regions are no longer read or grown.
    std::vector<std::int32_t> take_finished();
    // A card's cache region [first, second): reusable once the card has finished.
    std::pair<std::int64_t, std::int64_t> region(std::int32_t card) const;

    // What the repetition penalty looks at for a card: shared context + prompt +
    // generated, as if the card ran alone.
    std::vector<TokenId> history(std::int32_t card) const;

private:
    struct Layout {
        std::int64_t prompt_length = 0;
        std::int64_t slot_begin = 0;
        std::int64_t slot_end = 0;
        std::int64_t decode_slots = 0;
        std::int64_t max_new_tokens = 0;
        std::int64_t output_row = 0;
        TokenId last_prompt_token = 0;
    };

    void check_card(std::int32_t card, const char* what) const;
    void finish(std::int32_t card, FinishReason reason);
    StepRow decode_row(std::int32_t card) const;

    std::vector<TokenId> shared_tokens_;
    std::vector<std::vector<TokenId>> prompts_;
    std::vector<Layout> layout_;
    std::vector<CardProgress> progress_;
    std::vector<std::int32_t> newly_finished_;
    std::vector<bool> is_eos_;  // indexed by token id
    std::int64_t shared_length_ = 0;
    std::int64_t prefill_kv_len_ = 0;
    std::int64_t next_index_ = 0;  // the step next_step() plans
    std::int32_t active_ = 0;
};

}  // namespace kev
