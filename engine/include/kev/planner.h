// The planner decides what each card feeds at every step; it runs nothing.
//
// Like vLLM's scheduler, it is apart from the runner: the runner asks for a StepPlan,
// runs one forward over its rows, samples one token for each of its outputs with that
// card's Sampler, and hands the plain results back. The planner records the tokens and
// finishes the cards that are done. Cards may join (add_card) and leave (cancel) between
// any two steps. The whole generation loop is:
//
//   Planner planner(pack, {eos ids});
//   while (!planner.done()) {
//       (add_card for cards that join the running pack)
//       StepPlan step = planner.next_step();  // applies cancels, frees and admits first
//       logits = forward(step.rows: token, position, slot, read span) at each output's row
//       for each output o: samples[o] = sampler[o.card].sample(logits[o], ...);
//       planner.accept(step, samples);
//       for each card whose text now holds a stop string: planner.report_stop_string(card);
//       for each card in planner.take_finished(): stream its finish reason
//   }
//
// EVERY step is planned here, the prefill included. A step's rows are
//   - chunks of prompts not yet read (the shared context's first, then the cards' in
//     card order), bounded by a row budget: unbounded (PlannerOptions::prompt_rows = 0)
//     while no card is answering, `prompt_rows_beside_answers` while some are (by
//     default three quarters as many as the answering cards), so an answering card waits
//     at most one chunk's time for its next token;
//   - one row per answering card: its last sampled token, fed back.
// A card whose chunk reaches the end of its prompt samples its first token from that
// chunk's last row; an answering card samples from its row. Rows carry their read span
// (pack_plan.h's ReadSpan: the one isolation rule), so a row reads the same slots whether
// its card runs alone, in a pack from the start, joined at step 37, or read its prompt in
// one chunk or ten.
//
// The cache: the shared context in slots [0, L); every card owns one region of prompt +
// answer reserve, taken from a pool when the card is admitted (first fit among regions
// freed by finished cards, else the end of the cache) and given back at the step after it
// finishes. A card's generated token g is fed back at
//   position = shared + prompt_length + g,  slot = region begin + prompt_length + g,
// (shared = L when the card shares the context, else 0). A card that does not fit yet
// waits (phase Waiting) until enough is freed.
//
// Which rows a card gets depends only on its own tokens and on requests about that card:
// cancelling, finishing or adding one card never changes another card's results.
//
// Not thread-safe: the worker thread owns the planner. A UI's cancel arrives as an
// atomic flag the worker reads between steps and turns into request_cancel().
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "kev/pack_plan.h"
#include "kev/region_pool.h"
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

// Prefill: prompt rows only; Decode: fed-back answer tokens only; Mixed: both (a card
// reading its prompt beside answering cards).
enum class StepKind { Prefill, Decode, Mixed };

const char* to_string(StepKind kind);

// One row of a step's forward.
struct StepRow {
    std::int32_t card = 0;        // the card, or PackPlan::kSharedSegment for the shared context
    TokenId token = 0;            // the input token
    std::int64_t position = 0;    // its RoPE position
    std::int64_t slot = 0;        // the cache slot its key/value is written to
    ReadSpan read;                // the slots it reads (its own slot included)
    bool prompt = false;          // a prompt token (not a fed-back answer token)
};

// A card that samples its next token from the logits of `row` (a row of the step).
struct StepOutput {
    std::int32_t card = 0;
    std::int64_t row = 0;
};

struct StepPlan {
    std::int64_t index = 0;       // 0, 1, 2, ...
    StepKind kind = StepKind::Prefill;
    std::vector<StepRow> rows;    // the shared context's chunk first, then by card
    std::vector<StepOutput> outputs;  // in card order
    // Slots the forward must cover: 1 + the largest slot any row reads.
    std::int64_t kv_len = 0;
    std::int64_t prompt_rows = 0; // rows with prompt == true
};

// The step's rows as a dense mask over cache slots: span_mask of their read spans,
// row-major [rows * kv_len]. The reference path of the forward and the tests' pictures.
//
//   shared = slots 0-1; card 0 region 2-7 (prompt 2-4); card 1 region 8-12 (prompt 8-9).
//   A decode step: card 0 feeds slot 6, card 1 feeds slot 11:
//
//   slot:   0 1 2 3 4 5 6 7 8 9 10 11
//   card 0  x x x x x x x . . . .  .
//   card 1  x x . . . . . . x x x  x
std::vector<std::uint8_t> step_slot_mask(const StepPlan& step);

enum class CardPhase {
    Waiting,   // added, no cache region yet
    Prompt,    // reading its prompt (prompt_done tokens so far)
    Answer,    // sampling its answer
    Finished,
};

// A card as the planner sees it.
struct CardProgress {
    bool active = true;                  // not finished
    CardPhase phase = CardPhase::Prompt;
    std::int64_t prompt_done = 0;        // prompt tokens in the cache
    std::int64_t reused = 0;             // of which found already computed (PlannerOptions::on_admit)
    std::int64_t answer_fed = 0;         // generated tokens fed back (their keys are in the cache)
    std::optional<FinishReason> finish;  // set once, when the card finishes
    std::vector<TokenId> generated;      // sampled tokens; an end-of-sequence id is not kept
    bool cancel_requested = false;       // applied at the next step boundary
};

constexpr std::int64_t kMinPromptChunk = 4;

struct PlannerOptions {
    std::vector<TokenId> end_of_sequence;  // any of these ends a card (EndOfSequence)
    // Prompt rows one step may carry while no card is answering (0 = no limit: the
    // whole pack in one forward).
    std::int64_t prompt_rows = 0;
    // Prompt rows one step may carry beside answering cards; 0 (the default): three
    // quarters as many as there are answering cards, at least kMinPromptChunk. A step's
    // rows then grow by 75% at most, and so (a step of a few rows being bound by its rows'
    // arithmetic or by the weights it reads) does an answering card's wait for its next
    // token: kev-bench live measured the longest step at 1.4-1.8x the steady one with
    // 8 cards answering (the joining rows' attention and the step's fixed costs come on
    // top; as many rows as answering cards measured 1.9-2.2x in 4-bit).
    std::int64_t prompt_rows_beside_answers = 0;
    // Slots the cache may have (0 = no limit): a joining card waits until a region fits.
    std::int64_t max_cache_slots = 0;
    std::int64_t vocab_size = 0;           // joining cards' ids must be below it (0 = not checked)
    // Shared-context tokens already in slots [0, shared_done) before the first step (a
    // prefix cache restored them): they are not read again.
    std::int64_t shared_done = 0;
    // Called when a card gets its region (the pack's cards at construction, joining cards
    // when admitted): how many leading tokens of its prompt are already in the region
    // (a prefix cache copied them there). Clamped to [0, prompt length - 1]: the last
    // prompt token is always computed, its logits start the answer.
    std::function<std::int64_t(std::int32_t card, std::int64_t region_begin, std::int64_t region_end)> on_admit;
    // Prompt rows of one region (the shared context, or one card) a step may carry (0 = no
    // limit). A cache that keeps only the window of windowed layers (KvCache::keep_windows)
    // holds window + this - 1 positions per region: a step's rows must not overwrite what
    // its first row still reads.
    std::int64_t region_rows = 0;
};

class Planner {
public:
    // Copies what it needs from `pack` (layout, prompts, limits): its cards keep the
    // regions the pack gave them.
    Planner(const PackPlan& pack, PlannerOptions options);

    // A card joins; it is read from the next step on. `shares_context`: its prompt
    // follows the pack's shared context (which it then reads, at positions after it);
    // false: its prompt stands alone from position 0. Returns its index (cards() - 1).
    // Throws InvalidArgument (empty prompt, max_new_tokens < 1, an id outside the
    // vocabulary, longer than the context) or OutOfMemory (its region can never fit in
    // max_cache_slots), naming the card; nothing changes then.
    std::int32_t add_card(const CardPrompt& card, bool shares_context);

    std::int32_t cards() const { return static_cast<std::int32_t>(progress_.size()); }
    const CardProgress& card(std::int32_t c) const;
    bool done() const { return active_ == 0; }
    std::int32_t active_cards() const { return active_; }
    std::int64_t shared_length() const { return shared_length_; }

    // The next step. Applies pending cancels, frees the regions of cards finished before
    // it and admits waiting cards that now fit, then chooses the rows. Empty rows when
    // every card has finished. Calling it again before accept() plans the same step
    // again (nothing is consumed).
    StepPlan next_step();

    // Takes the step's results: samples[i] belongs to step.outputs[i]. Records the prompt
    // rows read and the tokens; finishes cards on an end-of-sequence id, max tokens,
    // non-finite logits or a full context. A sample for a card that finished meanwhile (a
    // stop string reported between next_step and accept) is ignored. Throws
    // InvalidArgument (state unchanged) for a step other than the one next_step()
    // planned, a wrong number of samples, or a negative token id.
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
    // Regions given back to the pool by the last next_step(), [first, second) each, less
    // what a card admitted in that step was given: no row reads them until a card admitted
    // later writes them (tests poison them).
    std::vector<std::pair<std::int64_t, std::int64_t>> take_freed();
    // A card's cache region [first, second); {-1, -1} while it waits.
    std::pair<std::int64_t, std::int64_t> region(std::int32_t card) const;
    // Slots the cache must have for every step planned so far (it never shrinks).
    std::int64_t cache_slots() const { return pool_.high_water(); }
    // Slots held now: the shared context and the regions of unfinished cards.
    std::int64_t slots_in_use() const;
    // Shared-context tokens in the cache.
    std::int64_t shared_done() const { return shared_done_; }
    // Whether a card reads the shared context.
    bool shares_context(std::int32_t card) const;

    // What the repetition penalty looks at for a card: shared context (when it shares
    // it) + prompt + generated, as if the card ran alone.
    std::vector<TokenId> history(std::int32_t card) const;

private:
    struct Layout {
        std::vector<TokenId> prompt;
        std::int64_t shared = 0;        // shared-context slots it reads (0 or shared_length_)
        std::int64_t slot_begin = -1;   // its region, -1 while waiting
        std::int64_t slot_end = -1;
        std::int64_t decode_slots = 0;
        std::int64_t max_new_tokens = 0;
        bool released = false;          // its region is back in the pool
    };

    void check_card(std::int32_t card, const char* what) const;
    void finish(std::int32_t card, FinishReason reason);
    std::int64_t allocate(std::int64_t size);
    void release(std::int64_t begin, std::int64_t end);
    void admitted(std::int32_t card);
    std::int64_t region_size(const Layout& l) const { return static_cast<std::int64_t>(l.prompt.size()) + l.decode_slots; }

    PlannerOptions options_;
    std::vector<TokenId> shared_tokens_;
    std::int64_t shared_length_ = 0;
    std::int64_t shared_done_ = 0;      // shared-context tokens in the cache
    std::int64_t context_length_ = 0;
    std::vector<Layout> layout_;
    std::vector<CardProgress> progress_;
    std::vector<std::int32_t> newly_finished_;
    std::vector<std::pair<std::int64_t, std::int64_t>> freed_;
    std::vector<bool> is_eos_;  // indexed by token id
    RegionPool pool_;              // the card regions after the pack's first layout
    std::int64_t next_index_ = 0;  // the step next_step() plans
    std::int32_t active_ = 0;
};

}  // namespace kev
