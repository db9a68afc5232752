// Keys and values computed in earlier runs, kept for the next: a card whose prompt starts
// with tokens some card already read (the same board re-run after one edit, Duplicate,
// Sweep, Replay, a follow-up turn, the shared context) copies their keys and values into
// its region instead of computing them again.
//
// Like vLLM's automatic prefix caching: the cache holds fixed blocks of kBlockTokens
// positions, each identified by EVERYTHING before and in it (the whole token prefix from
// position 0, compared in full, not only by hash) and by the state that computed it (the
// LoRA adapter's use: off, per row at a scale, merged at a scale). A block is reused only
// for the same prefix and state, so a reused key is the key the card would compute: the
// kernels are batch-invariant, the bits are the same (tests compare them).
//
//   prompt A:  | b0 | b1 | b2 | b3 |..   stored after A's run
//   prompt B:  | b0 | b1 | b2'| ...      B's first 32 positions are copied, the rest computed
//
// Bounded by a byte budget, least recently used blocks evicted first (a lookup touches a
// prefix's blocks from the first, so a block is never fresher than its parent). It serves
// one model: bind() clears it when another model (or the same one reloaded, or another
// adapter attached) comes; its owner (kev::Session) calls clear() on such changes too.
// Not thread-safe: the run that uses it owns it while it runs.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kev/kv_cache.h"
#include "kev/pack_plan.h"

namespace kev {

class Model;

// What computed a block besides its tokens.
struct PrefixState {
    enum class Lora : std::uint8_t { Off, PerRow, Merged };
    Lora lora = Lora::Off;
    float lora_scale = 0.0f;  // 0 when off

    bool operator==(const PrefixState& o) const { return lora == o.lora && lora_scale == o.lora_scale; }
};

// Where a sequence's positions live in a run's cache: positions [0, shared) in slots
// [0, shared) (the shared context), positions from `shared` on in the card's region.
struct PrefixLayout {
    std::int64_t shared = 0;
    std::int64_t region_begin = 0;
    std::int64_t slot(std::int64_t position) const {
        return position < shared ? position : region_begin + (position - shared);
    }
};

struct PrefixCacheStats {
    std::int64_t blocks = 0;
    std::int64_t bytes = 0;
    std::int64_t budget_bytes = 0;
    std::int64_t reused_tokens = 0;   // positions copied into runs, since the cache was made
    std::int64_t evicted_blocks = 0;
};

class PrefixCache {
public:
    static constexpr std::int64_t kBlockTokens = 16;

    // budget_bytes <= 0: no block is kept.
    explicit PrefixCache(std::int64_t budget_bytes);
    ~PrefixCache();
    PrefixCache(const PrefixCache&) = delete;
    PrefixCache& operator=(const PrefixCache&) = delete;

    // The model the next lookups are for: another model (address, dtype, shape) or another
    // attached LoRA adapter than the last one empties the cache.
    void bind(const Model& model);
    void clear();
    void set_budget(std::int64_t budget_bytes);  // evicts down to it
    PrefixCacheStats stats() const;

    // How many leading positions of `tokens` are stored under `state`, in whole blocks,
    // at most `limit`. Touches the blocks it matches.
    std::int64_t match(const std::vector<TokenId>& tokens, const PrefixState& state, std::int64_t limit);
    // Copies the stored keys and values of positions [from, to) of `tokens` into `cache`
    // at layout.slot(position), and records the slots' positions. Requires to <= what
    // match() returned for the same tokens and state. Throws InvalidArgument otherwise.
    void restore(const std::vector<TokenId>& tokens, const PrefixState& state, std::int64_t from, std::int64_t to,
                 KvCache& cache, const PrefixLayout& layout);
    // Stores the whole blocks of tokens[0, valid) not stored yet, read from `cache` at
    // layout.slot(position); then evicts down to the budget.
    void store(const std::vector<TokenId>& tokens, std::int64_t valid, const PrefixState& state, const KvCache& cache,
               const PrefixLayout& layout);

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace kev
