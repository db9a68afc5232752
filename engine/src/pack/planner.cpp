#include "kev/planner.h"

#include <algorithm>
#include <limits>
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

const char* to_string(StepKind kind) {
    switch (kind) {
        case StepKind::Prefill: return "prefill";
        case StepKind::Decode: return "decode";
        case StepKind::Mixed: return "mixed";
    }
    return "step";
}

std::vector<std::uint8_t> step_slot_mask(const StepPlan& step) {
    std::vector<ReadSpan> spans;
    spans.reserve(step.rows.size());
    for (const StepRow& r : step.rows) {
        if (!r.read.reads(r.slot)) invalid("step_slot_mask: row at slot " + std::to_string(r.slot) + " does not read itself");
        spans.push_back(r.read);
    }
    return span_mask(spans, step.kv_len);
}

Planner::Planner(const PackPlan& pack, PlannerOptions options)
    : options_(std::move(options)), shared_length_(pack.shared_length), context_length_(pack.context_length) {
    if (pack.cards() == 0) invalid("planner: the pack has no cards");
    if (options_.prompt_rows < 0) invalid("planner: prompt_rows must not be negative");
    if (options_.prompt_rows_beside_answers < 0) invalid("planner: prompt_rows_beside_answers must not be negative");
    shared_tokens_.assign(pack.tokens.begin(), pack.tokens.begin() + pack.shared_length);
    for (std::int32_t c = 0; c < pack.cards(); ++c) {
        const PackSegment& seg = pack.card(c);
        Layout l;
        l.prompt.assign(pack.tokens.begin() + seg.row_begin, pack.tokens.begin() + seg.row_end);
        l.shared = shared_length_;
        l.slot_begin = seg.slot_begin;
        l.slot_end = seg.slot_end;
        l.decode_slots = seg.decode_slots;
        l.max_new_tokens = seg.max_new_tokens;
        layout_.push_back(std::move(l));
    }
    progress_.resize(layout_.size());
    active_ = static_cast<std::int32_t>(layout_.size());
    pool_ = RegionPool(pack.cache_slots);
    if (options_.shared_done < 0 || options_.shared_done > shared_length_)
        invalid("planner: shared_done " + std::to_string(options_.shared_done) + " is outside the shared context");
    shared_done_ = options_.shared_done;
    for (std::int32_t c = 0; c < cards(); ++c) admitted(c);
    for (const TokenId t : options_.end_of_sequence) {
        if (t < 0) invalid("planner: end-of-sequence id " + std::to_string(t) + " is negative");
        if (static_cast<std::size_t>(t) >= is_eos_.size()) is_eos_.resize(static_cast<std::size_t>(t) + 1, false);
        is_eos_[static_cast<std::size_t>(t)] = true;
    }
}

std::int32_t Planner::add_card(const CardPrompt& card, bool shares_context) {
    const std::string name = "card " + std::to_string(cards() + 1);
    const auto prompt = static_cast<std::int64_t>(card.tokens.size());
    const std::int64_t shared = shares_context ? shared_length_ : 0;
    if (prompt == 0) invalid(name + " has an empty prompt");
    if (card.max_new_tokens < 1)
        invalid(name + ": max new tokens must be at least 1, got " + std::to_string(card.max_new_tokens));
    if (shared + prompt > context_length_) {
        invalid(name + " is " + std::to_string(prompt) + " tokens long" +
                (shared > 0 ? " (+ " + std::to_string(shared) + " of shared context)" : "") +
                ", more than the model's context of " + std::to_string(context_length_) + " tokens");
    }
    for (std::size_t i = 0; i < card.tokens.size(); ++i) {
        const TokenId t = card.tokens[i];
        if (t < 0 || (options_.vocab_size > 0 && t >= options_.vocab_size))
            invalid(name + ": token " + std::to_string(i) + " has id " + std::to_string(t) + ", outside the vocabulary");
    }
    Layout l;
    l.prompt = card.tokens;
    l.shared = shared;
    l.decode_slots = std::min(card.max_new_tokens, context_length_ - shared - prompt);
    l.max_new_tokens = card.max_new_tokens;
    if (options_.max_cache_slots > 0 && shared_length_ + region_size(l) > options_.max_cache_slots) {
        throw Error(ErrorCode::OutOfMemory, name + " needs " + std::to_string(region_size(l)) +
                                                " cache slots (prompt + max new tokens); the memory available holds " +
                                                std::to_string(options_.max_cache_slots - shared_length_) +
                                                " beside the shared context: lower max new tokens or shorten it");
    }
    layout_.push_back(std::move(l));
    CardProgress p;
    p.phase = CardPhase::Waiting;
    progress_.push_back(p);
    ++active_;
    return cards() - 1;
}

void Planner::admitted(std::int32_t card) {
    if (!options_.on_admit) return;
    const Layout& l = layout_[static_cast<std::size_t>(card)];
    CardProgress& p = progress_[static_cast<std::size_t>(card)];
    const std::int64_t found = options_.on_admit(card, l.slot_begin, l.slot_end);
    p.reused = p.prompt_done = std::clamp<std::int64_t>(found, 0, static_cast<std::int64_t>(l.prompt.size()) - 1);
}

std::int64_t Planner::slots_in_use() const {
    std::int64_t n = shared_length_;
    for (std::int32_t c = 0; c < cards(); ++c) {
        const Layout& l = layout_[static_cast<std::size_t>(c)];
        if (progress_[static_cast<std::size_t>(c)].active && l.slot_begin >= 0) n += l.slot_end - l.slot_begin;
    }
    return n;
}

bool Planner::shares_context(std::int32_t card) const {
    check_card(card, "shares_context");
    return layout_[static_cast<std::size_t>(card)].shared > 0;
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
    p.phase = CardPhase::Finished;
    p.finish = reason;
    --active_;
    newly_finished_.push_back(card);
}

std::int64_t Planner::allocate(std::int64_t size) {
    const std::int64_t begin = pool_.allocate(size, options_.max_cache_slots);
    if (begin < 0) return begin;
    // Slots freed by this step and given to a card at once are that card's (a prefix cache
    // may have copied its prompt there already): no longer reported as freed.
    std::vector<std::pair<std::int64_t, std::int64_t>> still_free;
    for (const auto& [b, e] : freed_) {
        if (b < begin) still_free.emplace_back(b, std::min(e, begin));
        if (e > begin + size) still_free.emplace_back(std::max(b, begin + size), e);
    }
    freed_ = std::move(still_free);
    return begin;
}

void Planner::release(std::int64_t begin, std::int64_t end) {
    freed_.emplace_back(begin, end);
    pool_.release(begin, end);
}

StepPlan Planner::next_step() {
    for (std::int32_t c = 0; c < cards(); ++c) {
        if (progress_[static_cast<std::size_t>(c)].cancel_requested) finish(c, FinishReason::Cancelled);
    }
    // Regions of finished cards go back to the pool (nothing reads them any more), then
    // waiting cards are admitted in the order they came, while they fit.
    for (std::int32_t c = 0; c < cards(); ++c) {
        Layout& l = layout_[static_cast<std::size_t>(c)];
        if (progress_[static_cast<std::size_t>(c)].active || l.released || l.slot_begin < 0) continue;
        release(l.slot_begin, l.slot_end);
        l.released = true;
    }
    for (std::int32_t c = 0; c < cards(); ++c) {
        CardProgress& p = progress_[static_cast<std::size_t>(c)];
        if (p.phase != CardPhase::Waiting) continue;
        Layout& l = layout_[static_cast<std::size_t>(c)];
        const std::int64_t begin = allocate(region_size(l));
        if (begin < 0) break;
        l.slot_begin = begin;
        l.slot_end = begin + region_size(l);
        p.phase = CardPhase::Prompt;
        admitted(c);
    }

    StepPlan step;
    step.index = next_index_;
    std::int64_t answering = 0;
    for (const CardProgress& p : progress_) answering += p.phase == CardPhase::Answer ? 1 : 0;
    std::int64_t budget = options_.prompt_rows > 0 ? options_.prompt_rows : std::numeric_limits<std::int64_t>::max();
    if (answering > 0) {
        budget = options_.prompt_rows_beside_answers > 0 ? options_.prompt_rows_beside_answers
                                                         : std::max(kMinPromptChunk, answering * 3 / 4);
    }
    auto add_row = [&step](std::int32_t card, TokenId token, std::int64_t position, std::int64_t slot, ReadSpan read,
                           bool prompt) {
        step.rows.push_back({card, token, position, slot, read, prompt});
        step.kv_len = std::max(step.kv_len, read.end);
        step.prompt_rows += prompt ? 1 : 0;
    };
    // The shared context first: cards that share it read it once it is whole (in this
    // step's rows or before).
    const std::int64_t region_rows =
        options_.region_rows > 0 ? options_.region_rows : std::numeric_limits<std::int64_t>::max();
    const std::int64_t shared_chunk = std::min({shared_length_ - shared_done_, budget, region_rows});
    for (std::int64_t t = shared_done_; t < shared_done_ + shared_chunk; ++t)
        add_row(PackPlan::kSharedSegment, shared_tokens_[static_cast<std::size_t>(t)], t, t, {0, 0, t + 1}, true);
    budget -= shared_chunk;
    const bool shared_ready = shared_done_ + shared_chunk == shared_length_;
    std::int64_t answer_rows = 0;
    for (std::int32_t c = 0; c < cards(); ++c) {
        const CardProgress& p = progress_[static_cast<std::size_t>(c)];
        const Layout& l = layout_[static_cast<std::size_t>(c)];
        const auto prompt = static_cast<std::int64_t>(l.prompt.size());
        if (p.phase == CardPhase::Answer) {
            // Generated token g is fed back right after the prompt and the g tokens before it.
            const auto g = static_cast<std::int64_t>(p.generated.size()) - 1;
            const std::int64_t slot = l.slot_begin + prompt + g;
            step.outputs.push_back({c, static_cast<std::int64_t>(step.rows.size())});
            add_row(c, p.generated.back(), l.shared + prompt + g, slot, {l.shared, l.slot_begin, slot + 1}, false);
            ++answer_rows;
        } else if (p.phase == CardPhase::Prompt && budget > 0 && (l.shared == 0 || shared_ready)) {
            const std::int64_t n = std::min({prompt - p.prompt_done, budget, region_rows});
            for (std::int64_t t = p.prompt_done; t < p.prompt_done + n; ++t) {
                const std::int64_t slot = l.slot_begin + t;
                add_row(c, l.prompt[static_cast<std::size_t>(t)], l.shared + t, slot, {l.shared, l.slot_begin, slot + 1},
                        true);
            }
            budget -= n;
            if (p.prompt_done + n == prompt) step.outputs.push_back({c, static_cast<std::int64_t>(step.rows.size()) - 1});
        }
    }
    step.kind = step.prompt_rows == 0 ? StepKind::Decode : answer_rows == 0 ? StepKind::Prefill : StepKind::Mixed;
    return step;
}

void Planner::accept(const StepPlan& step, const std::vector<SampleResult>& samples) {
    // Check everything first: on an error nothing has changed.
    if (step.index != next_index_) {
        invalid("planner: results for step " + std::to_string(step.index) + " but step " +
                std::to_string(next_index_) + " is the one in flight");
    }
    if (samples.size() != step.outputs.size()) {
        invalid("planner: " + std::to_string(samples.size()) + " samples for a step of " +
                std::to_string(step.outputs.size()) + " outputs");
    }
    for (const StepRow& r : step.rows) {
        if (r.card != PackPlan::kSharedSegment) check_card(r.card, "planner");
    }
    for (std::size_t i = 0; i < samples.size(); ++i) {
        check_card(step.outputs[i].card, "planner");
        if (!samples[i].non_finite && samples[i].token < 0) {
            invalid("planner: card " + std::to_string(step.outputs[i].card) + " sampled token id " +
                    std::to_string(samples[i].token));
        }
    }

    for (const StepRow& r : step.rows) {
        if (!r.prompt) ++progress_[static_cast<std::size_t>(r.card)].answer_fed;
        else if (r.card == PackPlan::kSharedSegment) ++shared_done_;
        else ++progress_[static_cast<std::size_t>(r.card)].prompt_done;
    }
    for (std::size_t i = 0; i < samples.size(); ++i) {
        const std::int32_t c = step.outputs[i].card;
        CardProgress& p = progress_[static_cast<std::size_t>(c)];
        if (!p.active) continue;
        p.phase = CardPhase::Answer;
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

std::vector<std::pair<std::int64_t, std::int64_t>> Planner::take_freed() {
    std::vector<std::pair<std::int64_t, std::int64_t>> out;
    out.swap(freed_);
    return out;
}

std::pair<std::int64_t, std::int64_t> Planner::region(std::int32_t card) const {
    check_card(card, "region");
    const Layout& l = layout_[static_cast<std::size_t>(card)];
    return {l.slot_begin, l.slot_end};
}

std::vector<TokenId> Planner::history(std::int32_t card) const {
    check_card(card, "history");
    const Layout& l = layout_[static_cast<std::size_t>(card)];
    const auto& generated = progress_[static_cast<std::size_t>(card)].generated;
    std::vector<TokenId> h;
    h.reserve(static_cast<std::size_t>(l.shared) + l.prompt.size() + generated.size());
    if (l.shared > 0) h.insert(h.end(), shared_tokens_.begin(), shared_tokens_.end());
    h.insert(h.end(), l.prompt.begin(), l.prompt.end());
    h.insert(h.end(), generated.begin(), generated.end());
    return h;
}

}  // namespace kev
