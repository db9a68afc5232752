// The packed prefill: N question cards (and an optional shared context) laid out
// as ONE sequence of rows, plus where every row lives in the KV cache.
//
// A PackPlan is a plain value, like llama.cpp's llama_batch: parallel vectors with
// one entry per packed row, filled by one builder (build_pack_plan) and only read
// afterwards, by the forward, the planner and the pack view. No tensors inside.
//
//   row          :  0  1  2 | 3  4  5  6 | 7  8  9 | 10 11 12 13 14
//   segment      :  S  S  S | 0  0  0  0 | 1  1  1 |  2  2  2  2  2   (S = shared context)
//   position     :  0  1  2 | 3  4  5  6 | 3  4  5 |  3  4  5  6  7   <- restart per card,
//                                                                        after the shared context
// Without a shared context the positions of every card start at 0.
//
// Cache slot != position. The position is what RoPE sees; the slot is the physical
// cache row the token's key/value is written to. The shared context is stored once,
// first; then every card owns one contiguous REGION sized prompt + decode reserve,
// so that the tokens it generates later are appended right after its prompt,
// inside its own region, without moving anything:
//
//   slot:  0 .. L-1 | L ..                       | L+R0 ..                  | ...
//          shared   | card 0 region              | card 1 region            |
//          s s s    | p p p p  d d d d d d       | p p p  d d d d d d d     |
//                   |<- P0 ->|<- D0 reserve ---->|<-P1->|<- D1 reserve --->|
//
//   L = shared context length (0 if none), P_c = card c's prompt length,
//   D_c = its decode reserve, R_c = P_c + D_c its region. Card c's generated token g
//   (0-based) is fed back at slot L + R0 + ... + R(c-1) + P_c + g, position L + P_c + g.
//
//   D_c = min(max_new_tokens_c, context_length - L - P_c): one slot per token that can
//   be fed back (the last token sampled is never fed, so max_new_tokens - 1 would do;
//   the spare slot keeps the arithmetic plain).
//
// A card's region is read only by that card; a finished card's region is never read
// or grown again and can be reused.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kev {

using TokenId = std::int32_t;  // same alias as kev/tokenizer.h

// THE isolation rule, written once. Every row a forward computes (a prompt token, a
// shared-context token, a fed-back answer token) reads exactly the cache slots
//   [0, shared_end)   the shared context, when its card shares it (0 otherwise), and
//   [begin, end)      its own card's slots, from the card's first up to itself.
// The planner gives every row its span; the forward reads those slots and no other
// (model.h's ForwardBatch::reads); the dense reference mask, the pack view's picture
// and the tests' grids are all drawn from the same spans (span_mask).
struct ReadSpan {
    std::int64_t shared_end = 0;
    std::int64_t begin = 0;
    std::int64_t end = 0;

    bool reads(std::int64_t slot) const { return (slot >= 0 && slot < shared_end) || (slot >= begin && slot < end); }
};

// The spans as a dense, row-major [spans * kv_len] grid, 1 where the row reads the slot.
// Throws InvalidArgument for a span that is not ordered inside [0, kv_len).
std::vector<std::uint8_t> span_mask(const std::vector<ReadSpan>& spans, std::int64_t kv_len);

// One question card's input to the builder: its prompt, already chat-formatted and
// tokenized by the caller, and how many tokens it may generate.
struct CardPrompt {
    std::vector<TokenId> tokens;
    std::int64_t max_new_tokens = 256;
};

// Checked by the builder before anything is laid out (a run that cannot fit is
// refused up front, never an out-of-memory crash halfway).
struct PackLimits {
    std::int64_t context_length = 0;    // the model's max positions; required (> 0)
    std::int64_t vocab_size = 0;        // token ids must be < this; 0 = not checked
    std::int64_t max_prefill_rows = 0;  // S of the prefill forward; 0 = no limit
    std::int64_t max_cache_slots = 0;   // slots the KV cache may have; 0 = no limit
};

// One contiguous run of rows (the shared context or one card) and its cache region.
struct PackSegment {
    std::int32_t segment = 0;             // PackPlan::kSharedSegment, or the card index
    std::int64_t row_begin = 0;           // rows [row_begin, row_end) of the prefill
    std::int64_t row_end = 0;
    std::int64_t position_offset = 0;     // position of the segment's first row
    std::int64_t slot_begin = 0;          // cache region [slot_begin, slot_end)
    std::int64_t slot_end = 0;
    std::int64_t decode_slots = 0;        // reserve after the prompt (0 for the shared context)
    std::int64_t max_new_tokens = 0;      // as asked by the card (0 for the shared context)

    std::int64_t length() const { return row_end - row_begin; }
};

struct PackPlan {
    // Segment id of the shared context. The value is the one model.h's
    // build_attention_mask uses for "readable by every segment", so `segments` can be
    // handed to it as is.
    static constexpr std::int32_t kSharedSegment = -2;

    // Per packed row [S]:
    std::vector<TokenId> tokens;
    std::vector<std::int64_t> positions;  // RoPE position
    std::vector<std::int32_t> segments;   // kSharedSegment or card index
    std::vector<std::int64_t> slots;      // cache slot the row's key/value is written to

    // The shared context (if any) first, then one entry per card, in row order.
    std::vector<PackSegment> segment_table;
    // Per card: the row of its last prompt token, whose logits start its answer.
    std::vector<std::int64_t> output_rows;

    std::int64_t shared_length = 0;  // rows (and slots) of the shared context, 0 if none
    std::int64_t cache_slots = 0;    // slots the whole pack needs, decode reserves included
    std::int64_t context_length = 0;

    std::int64_t rows() const { return static_cast<std::int64_t>(tokens.size()); }
    std::int32_t cards() const { return static_cast<std::int32_t>(output_rows.size()); }
    // Card c's segment; throws InvalidArgument for an index outside [0, cards()).
    const PackSegment& card(std::int32_t c) const;
    // Slots the prefill forward attends over: up to the last prompt slot written.
    std::int64_t prefill_kv_len() const;
};

// Builds the plan. Throws kev::Error, naming the card at fault:
//   InvalidArgument  no cards; a card with an empty prompt; max_new_tokens < 1; a token
//                    id out of range; a card (with the shared context) longer than the
//                    context length; a shared context that fills the context alone;
//                    context_length <= 0.
//   OutOfMemory      more prefill rows or cache slots than `limits` allow.
PackPlan build_pack_plan(const std::vector<CardPrompt>& cards,
                         const std::vector<TokenId>& shared_context,
                         const PackLimits& limits);

// The read span of a prefill row: a shared-context row reads the shared context up to
// itself; a card's row reads the shared context and its own prompt up to itself.
ReadSpan read_span(const PackPlan& plan, std::int64_t row);
// read_span of every row, in row order.
std::vector<ReadSpan> read_spans(const PackPlan& plan);

// The isolation rule over the prefill rows (read_span, seen from rows instead of slots).
// Row i may attend to row j when
//   j <= i and (j is in i's segment, or j is in the shared context).
// Card rows therefore see their own prefix and the whole shared context; shared rows
// see the shared prefix only; no card ever sees another card.
//
//   shared S = rows 0-1, card 0 = rows 2-4, card 1 = rows 5-6
//
//          j: 0 1 2 3 4 5 6
//   row 0 S   x . . . . . .
//   row 1 S   x x . . . . .
//   row 2 0   x x x . . . .
//   row 3 0   x x x x . . .
//   row 4 0   x x x x x . .
//   row 5 1   x x . . . x .
//   row 6 1   x x . . . x x
bool may_attend(const PackPlan& plan, std::int64_t row_i, std::int64_t row_j);

// The rule above as a dense, row-major [S * S] grid (1 = may attend). For the pack
// view and the tests; the forward wants the slot version below.
std::vector<std::uint8_t> dense_row_mask(const PackPlan& plan);

// The prefill mask over cache slots: row-major [S * prefill_kv_len()], 1 where the
// slot holds a row that row i may attend to (span_mask of the rows' read_span). Decode
// reserves between the cards' prompts are never read. Equal to model.h's
// build_attention_mask fed with the plan's segments, positions and slots.
std::vector<std::uint8_t> prefill_slot_mask(const PackPlan& plan);

// A grid as text, one line per row, 'x' = 1 and '.' = 0, lines ended by '\n'
// (what the tests compare against hand-drawn grids, and handy in a debugger).
std::string mask_picture(const std::vector<std::uint8_t>& grid, std::int64_t rows,
                         std::int64_t cols);

}  // namespace kev
