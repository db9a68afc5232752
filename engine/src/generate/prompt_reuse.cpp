#include "generate/prompt_reuse.h"

namespace kev {

PromptReuse::PromptReuse(PrefixCache* cache, const Model& model, const PackPlan& plan, const std::vector<LoraUse>& lora,
                         LoraMode lora_mode)
    : cache_(cache), lora_mode_(lora_mode), shared_length_(plan.shared_length),
      shared_(plan.tokens.begin(), plan.tokens.begin() + plan.shared_length) {
    if (cache_) cache_->bind(model);
    // The shared context's keys and values are computed with the first card's LoRA use
    // (prepare_tokens shares it only between cards that agree).
    shared_state_ = state_of(lora.empty() ? LoraUse{} : lora.front());
    for (std::int32_t c = 0; c < plan.cards(); ++c) {
        const PackSegment& seg = plan.card(c);
        std::vector<TokenId> tokens = shared_;
        tokens.insert(tokens.end(), plan.tokens.begin() + seg.row_begin, plan.tokens.begin() + seg.row_end);
        add_card(std::move(tokens), shared_length_ > 0, lora[static_cast<std::size_t>(c)]);
    }
}

PrefixState PromptReuse::state_of(const LoraUse& u) const {
    PrefixState st;
    if (u.enabled) {
        st.lora = lora_mode_ == LoraMode::Merged ? PrefixState::Lora::Merged : PrefixState::Lora::PerRow;
        st.lora_scale = u.scale;
    }
    return st;
}

void PromptReuse::add_card(std::vector<TokenId> tokens, bool shares, const LoraUse& lora) {
    cards_.push_back({std::move(tokens), shares, state_of(lora)});
}

void PromptReuse::drop_last_card() { cards_.pop_back(); }

void PromptReuse::wire(PlannerOptions& options, KvCache& kv) {
    if (!cache_) return;
    const std::int64_t found = cache_->match(shared_, shared_state_, shared_length_);
    cache_->restore(shared_, shared_state_, 0, found, kv, {shared_length_, 0});
    options.shared_done = found;
    options.on_admit = [this, &kv](std::int32_t card, std::int64_t region_begin, std::int64_t) -> std::int64_t {
        const Card& k = cards_[static_cast<std::size_t>(card)];
        const std::int64_t own_start = k.shares ? shared_length_ : 0;
        // Its last prompt token is always computed: its logits are the first answer's.
        const std::int64_t stored = cache_->match(k.tokens, k.state, static_cast<std::int64_t>(k.tokens.size()) - 1);
        if (stored <= own_start) return 0;
        cache_->restore(k.tokens, k.state, own_start, stored, kv, {own_start, region_begin});
        return stored - own_start;
    };
}

void PromptReuse::store(std::int32_t c, const Planner& planner, const KvCache& kv) {
    const CardProgress& p = planner.card(c);
    const std::int64_t begin = planner.region(c).first;
    if (!cache_ || begin < 0 || p.finish == FinishReason::NonFinite) return;
    const Card& k = cards_[static_cast<std::size_t>(c)];
    const std::int64_t own_start = k.shares ? shared_length_ : 0;
    std::vector<TokenId> tokens(k.tokens.begin(), k.tokens.begin() + own_start + p.prompt_done);
    if (p.prompt_done == static_cast<std::int64_t>(k.tokens.size()) - own_start)
        tokens.insert(tokens.end(), p.generated.begin(), p.generated.begin() + p.answer_fed);
    // A card that read none of its own prompt holds only the shared context computed so far.
    const std::int64_t valid = p.prompt_done > 0 || !k.shares ? static_cast<std::int64_t>(tokens.size())
                                                              : std::min(planner.shared_done(), own_start);
    cache_->store(tokens, valid, k.state, kv, {own_start, begin});
}

void PromptReuse::keep_up(const StepPlan& step, const Planner& planner, const KvCache& kv) {
    if (!cache_) return;
    constexpr std::int64_t block = PrefixCache::kBlockTokens;
    std::int32_t last = PackPlan::kSharedSegment - 1;  // rows come grouped by card
    for (const StepRow& r : step.rows) {
        if (r.card == last) continue;
        last = r.card;
        if (r.card == PackPlan::kSharedSegment) {
            if (planner.shared_done() / block > shared_blocks_stored_) {
                cache_->store(shared_, planner.shared_done(), shared_state_, kv, {shared_length_, 0});
                shared_blocks_stored_ = planner.shared_done() / block;
            }
            continue;
        }
        Card& k = cards_[static_cast<std::size_t>(r.card)];
        const CardProgress& p = planner.card(r.card);
        const std::int64_t own_start = k.shares ? shared_length_ : 0;
        const std::int64_t computed = own_start + p.prompt_done + p.answer_fed;
        if (computed / block > k.blocks_stored && p.finish != FinishReason::NonFinite) {
            store(r.card, planner, kv);
            k.blocks_stored = computed / block;
        }
    }
}

}  // namespace kev
