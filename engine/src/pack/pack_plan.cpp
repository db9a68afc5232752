#include "kev/pack_plan.h"

#include <algorithm>
#include <string>

#include "kev/error.h"

namespace kev {
namespace {

[[noreturn]] void invalid(const std::string& message) {
    throw Error(ErrorCode::InvalidArgument, message);
}

void check_ids(const std::vector<TokenId>& tokens, std::int64_t vocab_size,
               const std::string& where) {
    for (std::size_t i = 0; i < tokens.size(); ++i) {
        const TokenId t = tokens[i];
        if (t < 0 || (vocab_size > 0 && t >= vocab_size)) {
            invalid(where + ": token " + std::to_string(i) + " has id " + std::to_string(t) +
                    ", outside the vocabulary [0, " +
                    (vocab_size > 0 ? std::to_string(vocab_size) : std::string("...")) + ")");
        }
    }
}

std::string card_name(std::size_t c) { return "card " + std::to_string(c + 1); }

}  // namespace

const PackSegment& PackPlan::card(std::int32_t c) const {
    if (c < 0 || c >= cards()) {
        invalid("card index " + std::to_string(c) + " outside the pack's " + std::to_string(cards()) + " cards");
    }
    return segment_table[static_cast<std::size_t>(c + (shared_length > 0 ? 1 : 0))];
}

std::int64_t PackPlan::prefill_kv_len() const {
    // The last prompt row written has the largest slot of the prefill.
    return slots.empty() ? 0 : slots.back() + 1;
}

PackPlan build_pack_plan(const std::vector<CardPrompt>& cards,
                         const std::vector<TokenId>& shared_context,
                         const PackLimits& limits) {
    const std::int64_t ctx = limits.context_length;
    if (ctx <= 0) invalid("the model's context length must be positive, got " + std::to_string(ctx));
    if (cards.empty()) invalid("empty pack: there is no question card to answer");

    const auto shared = static_cast<std::int64_t>(shared_context.size());
    if (shared >= ctx) {
        invalid("the shared context is " + std::to_string(shared) +
                " tokens long, which leaves no room for a question in the model's context of " +
                std::to_string(ctx) + " tokens");
    }
    check_ids(shared_context, limits.vocab_size, "the shared context");

    // Validate everything and size the regions before laying anything out.
    std::int64_t rows = shared;
    std::int64_t slots = shared;
    std::vector<std::int64_t> reserves(cards.size());
    for (std::size_t c = 0; c < cards.size(); ++c) {
        const auto prompt = static_cast<std::int64_t>(cards[c].tokens.size());
        if (prompt == 0) invalid(card_name(c) + " has an empty prompt");
        if (cards[c].max_new_tokens < 1) {
            invalid(card_name(c) + ": max new tokens must be at least 1, got " +
                    std::to_string(cards[c].max_new_tokens));
        }
        if (shared + prompt > ctx) {
            invalid(card_name(c) + " is " + std::to_string(prompt) + " tokens long" +
                    (shared > 0 ? " (+ " + std::to_string(shared) + " of shared context)" : "") +
                    ", more than the model's context of " + std::to_string(ctx) + " tokens");
        }
        check_ids(cards[c].tokens, limits.vocab_size, card_name(c));
        reserves[c] = std::min(cards[c].max_new_tokens, ctx - shared - prompt);
        rows += prompt;
        slots += prompt + reserves[c];
    }
    if (limits.max_prefill_rows > 0 && rows > limits.max_prefill_rows) {
        throw Error(ErrorCode::OutOfMemory,
                    "the pack is " + std::to_string(rows) + " tokens long; at most " +
                        std::to_string(limits.max_prefill_rows) +
                        " fit in one prefill here: remove or shorten a card");
    }
    if (limits.max_cache_slots > 0 && slots > limits.max_cache_slots) {
        throw Error(ErrorCode::OutOfMemory,
                    "the pack needs " + std::to_string(slots) +
                        " cache slots (prompts + max new tokens); the memory available holds " +
                        std::to_string(limits.max_cache_slots) +
                        ": lower max new tokens or remove a card");
    }

    PackPlan plan;
    plan.shared_length = shared;
    plan.cache_slots = slots;
    plan.context_length = ctx;
    plan.tokens.reserve(static_cast<std::size_t>(rows));
    plan.positions.reserve(static_cast<std::size_t>(rows));
    plan.segments.reserve(static_cast<std::size_t>(rows));
    plan.slots.reserve(static_cast<std::size_t>(rows));
    plan.output_rows.reserve(cards.size());

    // Appends one segment whose rows go to consecutive slots starting at slot_begin.
    auto append = [&plan](std::int32_t segment, const std::vector<TokenId>& tokens,
                          std::int64_t position_offset, std::int64_t slot_begin,
                          std::int64_t decode_slots, std::int64_t max_new_tokens) {
        PackSegment seg;
        seg.segment = segment;
        seg.row_begin = plan.rows();
        seg.position_offset = position_offset;
        seg.slot_begin = slot_begin;
        seg.decode_slots = decode_slots;
        seg.max_new_tokens = max_new_tokens;
        const auto n = static_cast<std::int64_t>(tokens.size());
        for (std::int64_t t = 0; t < n; ++t) {
            plan.tokens.push_back(tokens[static_cast<std::size_t>(t)]);
            plan.positions.push_back(position_offset + t);
            plan.segments.push_back(segment);
            plan.slots.push_back(slot_begin + t);
        }
        seg.row_end = plan.rows();
        seg.slot_end = slot_begin + n + decode_slots;
        plan.segment_table.push_back(seg);
        return seg;
    };

    if (shared > 0) append(PackPlan::kSharedSegment, shared_context, 0, 0, 0, 0);
    std::int64_t slot = shared;
    for (std::size_t c = 0; c < cards.size(); ++c) {
        const PackSegment seg = append(static_cast<std::int32_t>(c), cards[c].tokens, shared, slot,
                                       reserves[c], cards[c].max_new_tokens);
        plan.output_rows.push_back(seg.row_end - 1);
        slot = seg.slot_end;
    }
    return plan;
}

std::vector<std::uint8_t> span_mask(const std::vector<ReadSpan>& spans, std::int64_t kv_len) {
    if (kv_len < 0) invalid("span_mask: kv_len " + std::to_string(kv_len) + " is negative");
    std::vector<std::uint8_t> grid(spans.size() * static_cast<std::size_t>(kv_len), 0);
    for (std::size_t i = 0; i < spans.size(); ++i) {
        const ReadSpan& r = spans[i];
        if (r.shared_end < 0 || r.shared_end > r.begin || r.begin > r.end || r.end > kv_len) {
            invalid("span_mask: row " + std::to_string(i) + " reads [0, " + std::to_string(r.shared_end) + ") and [" +
                    std::to_string(r.begin) + ", " + std::to_string(r.end) + "), not ordered inside [0, " +
                    std::to_string(kv_len) + ")");
        }
        std::uint8_t* row = grid.data() + i * static_cast<std::size_t>(kv_len);
        std::fill(row, row + r.shared_end, std::uint8_t{1});
        std::fill(row + r.begin, row + r.end, std::uint8_t{1});
    }
    return grid;
}

ReadSpan read_span(const PackPlan& plan, std::int64_t row) {
    if (row < 0 || row >= plan.rows()) {
        invalid("read_span: row " + std::to_string(row) + " outside the pack's " + std::to_string(plan.rows()) + " rows");
    }
    const std::int32_t seg = plan.segments[static_cast<std::size_t>(row)];
    const std::int64_t own = plan.slots[static_cast<std::size_t>(row)];
    if (seg == PackPlan::kSharedSegment) return {0, 0, own + 1};
    return {plan.shared_length, plan.card(seg).slot_begin, own + 1};
}

bool may_attend(const PackPlan& plan, std::int64_t row_i, std::int64_t row_j) {
    if (row_i < 0 || row_j < 0 || row_i >= plan.rows() || row_j >= plan.rows()) {
        invalid("may_attend: row " + std::to_string(row_i) + " or " + std::to_string(row_j) +
                " outside the pack's " + std::to_string(plan.rows()) + " rows");
    }
    // Rows and slots correspond one to one: row j is read when its slot is.
    return read_span(plan, row_i).reads(plan.slots[static_cast<std::size_t>(row_j)]);
}

std::vector<std::uint8_t> dense_row_mask(const PackPlan& plan) {
    const std::int64_t s = plan.rows();
    std::vector<std::uint8_t> grid(static_cast<std::size_t>(s * s), 0);
    for (std::int64_t i = 0; i < s; ++i) {
        const ReadSpan span = read_span(plan, i);
        for (std::int64_t j = 0; j < s; ++j) grid[static_cast<std::size_t>(i * s + j)] = span.reads(plan.slots[j]);
    }
    return grid;
}

std::vector<ReadSpan> read_spans(const PackPlan& plan) {
    std::vector<ReadSpan> spans;
    spans.reserve(static_cast<std::size_t>(plan.rows()));
    for (std::int64_t r = 0; r < plan.rows(); ++r) spans.push_back(read_span(plan, r));
    return spans;
}

std::vector<std::uint8_t> prefill_slot_mask(const PackPlan& plan) {
    return span_mask(read_spans(plan), plan.prefill_kv_len());
}

std::string mask_picture(const std::vector<std::uint8_t>& grid, std::int64_t rows,
                         std::int64_t cols) {
    if (rows < 0 || cols < 0 || static_cast<std::int64_t>(grid.size()) != rows * cols) {
        invalid("mask_picture: a grid of " + std::to_string(grid.size()) + " cells is not " +
                std::to_string(rows) + " x " + std::to_string(cols));
    }
    std::string out;
    out.reserve(static_cast<std::size_t>(rows * (cols + 1)));
    for (std::int64_t i = 0; i < rows; ++i) {
        for (std::int64_t j = 0; j < cols; ++j) {
            out.push_back(grid[static_cast<std::size_t>(i * cols + j)] ? 'x' : '.');
        }
        out.push_back('\n');
    }
    return out;
}

}  // namespace kev
