// The prefix cache's side of one run: what every card's computed keys and values are
// stored under (its tokens from position 0, the shared context's first when it reads it,
// and the LoRA state that computes them), which stored blocks a card starts from when it
// gets its region, and what a finished card leaves for later runs. The run loop only
// tells it about cards (added, admitted, finished); without a PrefixCache it copies and
// stores nothing.
#pragma once

#include <cstdint>
#include <vector>

#include "kev/generator.h"
#include "kev/kv_cache.h"
#include "kev/pack_plan.h"
#include "kev/planner.h"
#include "kev/prefix_cache.h"

namespace kev {

class PromptReuse {
public:
    // `cache` may be null. The pack's cards are added here (its shared context read by
    // every card when it has one); `lora_mode` is how the run applies the adapter (a
    // merged adapter's keys are not a per-row adapter's).
    PromptReuse(PrefixCache* cache, const Model& model, const PackPlan& plan, const std::vector<LoraUse>& lora,
                LoraMode lora_mode);

    // A card joining the run (the next index): its whole prompt from position 0.
    void add_card(std::vector<TokenId> tokens, bool shares, const LoraUse& lora);
    void drop_last_card();  // the one just added was refused

    // Before the planner starts: copies the shared context's stored blocks into `kv`
    // (PlannerOptions::shared_done says how many tokens) and has the planner ask, as it
    // gives each card its region, how many of its prompt tokens are stored
    // (PlannerOptions::on_admit, which copies them). `kv` must outlive the run.
    void wire(PlannerOptions& options, KvCache& kv);

    // Card `c` finished: the prompt it read and the answer it fed back go to the cache,
    // before its region is freed.
    void store(std::int32_t c, const Planner& planner, const KvCache& kv);

    // After each step, where windowed layers keep only rings (KvCache::keep_windows): the
    // blocks the step completed (the shared context's, each card's) are stored now, while
    // the rings still hold them; at the end they would be gone.
    void keep_up(const StepPlan& step, const Planner& planner, const KvCache& kv);

    std::int64_t cache_bytes() const { return cache_ ? cache_->stats().bytes : 0; }

private:
    struct Card {
        std::vector<TokenId> tokens;  // from position 0
        bool shares = false;
        PrefixState state;
        std::int64_t blocks_stored = 0;  // keep_up: whole blocks stored so far
    };
    PrefixState state_of(const LoraUse& u) const;

    PrefixCache* cache_ = nullptr;
    LoraMode lora_mode_ = LoraMode::Off;
    std::int64_t shared_length_ = 0;
    std::vector<TokenId> shared_;
    PrefixState shared_state_;
    std::int64_t shared_blocks_stored_ = 0;
    std::vector<Card> cards_;
};

}  // namespace kev
