#include "kev/planner.h"

#include <algorithm>
#include <string>

#include "kev/error.h"

namespace kev {
namespace {

[[noreturn]] void invalid(const std::string& message) {
    throw Error(ErrorCode::InvalidArgument, message);
}

}  // namespace

const char* to_string(FinishReason reason) {
    switch (reason) {
        case FinishReason::EndOfSequence: return "end of sequence";
        case FinishReason::StopString: return "stop string";
        case FinishReason::MaxTokens: return "max tokens";
        case FinishReason::Cancelled: return "cancelled";
        case FinishReason::NonFinite: return "non-finite logits";
        case FinishReason::ContextFull: return "context full";
        case FinishReason::Failed: return "failed";
    }
    return "finished";
}

std::vector<std::uint8_t> step_slot_mask(const StepPlan& step) {
    if (step.kind != StepKind::Decode) {
        invalid("step_slot_mask is for decode steps; the prefill's mask is prefill_slot_mask(pack)");
    }
    const std::int64_t kv = step.kv_len;
    std::vector<std::uint8_t> grid(step.rows.size() * static_cast<std::size_t>(kv), 0);
    for (std::size_t i = 0; i < step.rows.size(); ++i) {
        const StepRow& r = step.rows[i];
        if (r.slot >= kv || r.read_begin < step.shared_length || r.read_begin > r.slot) {
            invalid("step_slot_mask: row " + std::to_string(i) + " reads slots [" +
                    std::to_string(r.read_begin) + ", " + std::to_string(r.slot) +
                    "], not within [shared, kv_len = " + std::to_string(kv) + ")");
        }
        std::uint8_t* row = grid.data() + static_cast<std::int64_t>(i) * kv;
        std::fill(row, row + step.shared_length, std::uint8_t{1});
        std::fill(row + r.read_begin, row + r.slot + 1, std::uint8_t{1});
    }
    return grid;
}

Planner::Planner(const PackPlan& pack, PlannerOptions options)
    : shared_length_(pack.shared_length), prefill_kv_len_(pack.prefill_kv_len()) {
    if (pack.cards() == 0) invalid("planner: the pack has no cards");
    shared_tokens_.assign(pack.tokens.begin(), pack.tokens.begin() + pack.shared_length);
    for (std::int32_t c = 0; c < pack.cards(); ++c) {
        const PackSegment& seg = pack.card(c);
        Layout l;
        l.prompt_length = seg.length();
        l.slot_begin = seg.slot_begin;
        l.slot_end = seg.slot_end;
        l.decode_slots = seg.decode_slots;
        l.max_new_tokens = seg.max_new_tokens;
        l.output_row = pack.output_rows[static_cast<std::size_t>(c)];
        l.last_prompt_token = pack.tokens[static_cast<std::size_t>(l.output_row)];
        layout_.push_back(l);
        prompts_.emplace_back(pack.tokens.begin() + seg.row_begin, pack.tokens.begin() + seg.row_end);
    }
    progress_.resize(layout_.size());
    active_ = static_cast<std::int32_t>(layout_.size());
    for (const TokenId t : options.end_of_sequence) {
        if (t < 0) invalid("planner: end-of-sequence id " + std::to_string(t) + " is negative");
        if (static_cast<std::size_t>(t) >= is_eos_.size()) is_eos_.resize(static_cast<std::size_t>(t) + 1, false);
        is_eos_[static_cast<std::size_t>(t)] = true;
    }
}

void Planner::check_card(std::int32_t card, const char* what) const {
    if (card < 0 || card >= cards()) {
        invalid(std::string(what) + ": card index " + std::to_string(card) + " outside [0, " +
                std::to_string(cards()) + ")");
    }
}

const CardProgress& Planner::card(std::int32_t c) const {
    check_card(c, "planner");
    return progress_[static_cast<std::size_t>(c)];
}

void Planner::finish(std::int32_t card, FinishReason reason) {
    CardProgress& p = progress_[static_cast<std::size_t>(card)];
    if (!p.active) return;
    p.active = false;
    p.finish = reason;
    --active_;
    newly_finished_.push_back(card);
}

StepRow Planner::decode_row(std::int32_t card) const {
    const Layout& l = layout_[static_cast<std::size_t>(card)];
    const CardProgress& p = progress_[static_cast<std::size_t>(card)];
    // Generated token g is fed back right after the prompt and the g tokens before it.
    const auto g = static_cast<std::int64_t>(p.generated.size()) - 1;
    StepRow r;
    r.card = card;
    r.token = p.generated.back();
    r.position = shared_length_ + l.prompt_length + g;
    r.slot = l.slot_begin + l.prompt_length + g;
    r.read_begin = l.slot_begin;
    return r;
}

StepPlan Planner::next_step() {
    for (std::int32_t c = 0; c < cards(); ++c) {
        if (progress_[static_cast<std::size_t>(c)].cancel_requested) finish(c, FinishReason::Cancelled);
    }
    StepPlan step;
    step.index = next_index_;
    step.kind = next_index_ == 0 ? StepKind::Prefill : StepKind::Decode;
    step.shared_length = shared_length_;
    for (std::int32_t c = 0; c < cards(); ++c) {
        if (!progress_[static_cast<std::size_t>(c)].active) continue;
        if (step.kind == StepKind::Prefill) {
            const Layout& l = layout_[static_cast<std::size_t>(c)];
            StepRow r;
            r.card = c;
            r.token = l.last_prompt_token;
            r.position = shared_length_ + l.prompt_length - 1;
            r.slot = l.slot_begin + l.prompt_length - 1;
            r.read_begin = l.slot_begin;
            r.output_row = l.output_row;
            step.rows.push_back(r);
        } else {
            StepRow r = decode_row(c);
            r.output_row = static_cast<std::int64_t>(step.rows.size());
            step.rows.push_back(r);
            step.kv_len = std::max(step.kv_len, r.slot + 1);
        }
    }
    if (step.kind == StepKind::Prefill) step.kv_len = prefill_kv_len_;
    return step;
}

void Planner::accept(const StepPlan& step, const std::vector<SampleResult>& samples) {
    // Check everything first: on an error nothing has changed.
    if (step.index != next_index_) {
        invalid("planner: results for step " + std::to_string(step.index) + " but step " +
                std::to_string(next_index_) + " is the one in flight");
    }
    if (samples.size() != step.rows.size()) {
        invalid("planner: " + std::to_string(samples.size()) + " samples for a step of " +
                std::to_string(step.rows.size()) + " rows");
    }
    for (std::size_t i = 0; i < samples.size(); ++i) {
        check_card(step.rows[i].card, "planner");
        if (!samples[i].non_finite && samples[i].token < 0) {
            invalid("planner: card " + std::to_string(step.rows[i].card) + " sampled token id " +
                    std::to_string(samples[i].token));
        }
    }

    for (std::size_t i = 0; i < samples.size(); ++i) {
        const std::int32_t c = step.rows[i].card;
        CardProgress& p = progress_[static_cast<std::size_t>(c)];
        if (!p.active) continue;
        const SampleResult& s = samples[i];
        if (s.non_finite) {
            finish(c, FinishReason::NonFinite);
            continue;
        }
        const auto t = static_cast<std::size_t>(s.token);
        if (t < is_eos_.size() && is_eos_[t]) {
            finish(c, FinishReason::EndOfSequence);
            continue;
        }
        p.generated.push_back(s.token);
        const Layout& l = layout_[static_cast<std::size_t>(c)];
        const auto g = static_cast<std::int64_t>(p.generated.size());
        if (g >= l.max_new_tokens) {
            finish(c, FinishReason::MaxTokens);
        } else if (g > l.decode_slots) {
            // Feeding this token back would need a slot (and a position) past the
            // model's context: the region was cut to fit it.
            finish(c, FinishReason::ContextFull);
        }
    }
    ++next_index_;
}

void Planner::request_cancel(std::int32_t card) {
    check_card(card, "cancel");
    CardProgress& p = progress_[static_cast<std::size_t>(card)];
    if (p.active) p.cancel_requested = true;
}

void Planner::request_cancel_all() {
    for (std::int32_t c = 0; c < cards(); ++c) request_cancel(c);
}

void Planner::report_stop_string(std::int32_t card) {
    check_card(card, "stop string");
    finish(card, FinishReason::StopString);
}

std::vector<std::int32_t> Planner::take_finished() {
    std::vector<std::int32_t> out;
    out.swap(newly_finished_);
    return out;
}

std::pair<std::int64_t, std::int64_t> Planner::region(std::int32_t card) const {
    check_card(card, "region");
    const Layout& l = layout_[static_cast<std::size_t>(card)];
    return {l.slot_begin, l.slot_end};
}

std::vector<TokenId> Planner::history(std::int32_t card) const {
    check_card(card, "history");
    const auto& prompt = prompts_[static_cast<std::size_t>(card)];
    const auto& generated = progress_[static_cast<std::size_t>(card)].generated;
    std::vector<TokenId> h;
    h.reserve(shared_tokens_.size() + prompt.size() + generated.size());
    h.insert(h.end(), shared_tokens_.begin(), shared_tokens_.end());
    h.insert(h.end(), prompt.begin(), prompt.end());
    h.insert(h.end(), generated.begin(), generated.end());
    return h;
}

}  // namespace kev
