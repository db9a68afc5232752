#include "kev/prefix_cache.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <unordered_map>

#include <ATen/ATen.h>

#include "kev/error.h"
#include "kev/model.h"
#include "model/torch_util.h"

namespace kev {
namespace {

std::uint64_t mix(std::uint64_t h, std::uint64_t v) {
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h * 0x100000001b3ull;
}

std::uint64_t state_hash(const PrefixState& s) {
    std::uint32_t bits = 0;
    static_assert(sizeof(bits) == sizeof(s.lora_scale));
    std::memcpy(&bits, &s.lora_scale, sizeof bits);
    return mix(static_cast<std::uint64_t>(s.lora) + 1, bits);
}

}  // namespace

struct PrefixCache::Impl {
    struct Block {
        std::vector<TokenId> prefix;  // every token up to the block's end, from position 0
        PrefixState state;
        at::Tensor kv;                // [layers, 2, KVH, kBlockTokens, D]
        std::uint64_t last_use = 0;
    };
    // By the hash of (state, prefix); a bucket's blocks are told apart by their prefix.
    std::unordered_map<std::uint64_t, std::vector<Block>> blocks;
    std::int64_t budget = 0;
    std::int64_t bytes = 0;
    std::int64_t count = 0;
    std::int64_t reused = 0;
    std::int64_t evicted = 0;
    std::uint64_t tick = 0;
    // Every block by its last use (a tick, unique) -> its bucket: the eviction order, so
    // an eviction takes the oldest without a scan.
    std::map<std::uint64_t, std::uint64_t> by_use;
    // The bound model.
    const Model* model = nullptr;
    DType dtype = DType::F32;
    std::int64_t layers = 0, kv_heads = 0, head_dim = 0;
    std::shared_ptr<const LoraAdapter> adapter;  // held: a new adapter never has its address

    // The block ending at position (i + 1) * kBlockTokens of `tokens`, or null.
    Block* find(const std::vector<TokenId>& tokens, const PrefixState& state, std::uint64_t hash, std::int64_t i) {
        auto it = blocks.find(hash);
        if (it == blocks.end()) return nullptr;
        const auto end = tokens.begin() + (i + 1) * kBlockTokens;
        for (Block& b : it->second) {
            if (b.state == state && static_cast<std::int64_t>(b.prefix.size()) == (i + 1) * kBlockTokens &&
                std::equal(tokens.begin(), end, b.prefix.begin()))
                return &b;
        }
        return nullptr;
    }

    // Hash of the prefix ending with block i, given the hash of the one before it.
    static std::uint64_t next_hash(std::uint64_t h, const std::vector<TokenId>& tokens, std::int64_t i) {
        for (std::int64_t t = i * kBlockTokens; t < (i + 1) * kBlockTokens; ++t)
            h = mix(h, static_cast<std::uint32_t>(tokens[static_cast<std::size_t>(t)]));
        return h;
    }

    // Marks `b` (in bucket `hash`) as the most recently used block.
    void touch(Block& b, std::uint64_t hash) {
        if (b.last_use != 0) by_use.erase(b.last_use);
        b.last_use = ++tick;
        by_use.emplace(b.last_use, hash);
    }

    void evict_to(std::int64_t limit) {
        while (bytes > limit && !by_use.empty()) {
            const auto oldest = by_use.begin();
            auto& bucket = blocks[oldest->second];
            const auto it = std::find_if(bucket.begin(), bucket.end(),
                                         [&](const Block& b) { return b.last_use == oldest->first; });
            if (it != bucket.end()) {
                bytes -= static_cast<std::int64_t>(it->kv.nbytes());
                bucket.erase(it);
                --count;
                ++evicted;
            }
            if (bucket.empty()) blocks.erase(oldest->second);
            by_use.erase(oldest);
        }
    }
};

PrefixCache::PrefixCache(std::int64_t budget_bytes) : impl_(std::make_unique<Impl>()) {
    impl_->budget = std::max<std::int64_t>(0, budget_bytes);
}

PrefixCache::~PrefixCache() = default;

void PrefixCache::bind(const Model& model) {
    Impl& m = *impl_;
    const ModelConfig& c = model.config();
    if (m.model == &model && m.dtype == model.dtype() && m.layers == c.num_layers && m.kv_heads == c.num_kv_heads &&
        m.head_dim == c.head_dim && m.adapter == model.lora())
        return;
    clear();
    m.adapter = model.lora();
    m.model = &model;
    m.dtype = model.dtype();
    m.layers = c.num_layers;
    m.kv_heads = c.num_kv_heads;
    m.head_dim = c.head_dim;
}

void PrefixCache::clear() {
    impl_->blocks.clear();
    impl_->by_use.clear();
    impl_->bytes = 0;
    impl_->count = 0;
}

void PrefixCache::set_budget(std::int64_t budget_bytes) {
    impl_->budget = std::max<std::int64_t>(0, budget_bytes);
    impl_->evict_to(impl_->budget);
}

PrefixCacheStats PrefixCache::stats() const {
    PrefixCacheStats s;
    s.blocks = impl_->count;
    s.bytes = impl_->bytes;
    s.budget_bytes = impl_->budget;
    s.reused_tokens = impl_->reused;
    s.evicted_blocks = impl_->evicted;
    return s;
}

namespace {

// Where every layer keeps `slots`: the slots, or (windowed layers in rings) ring slots.
class StorageIndex {
public:
    StorageIndex(const KvCache& cache, const std::vector<std::int64_t>& slots) : cache_(cache) {
        const at::TensorOptions opts = at::TensorOptions().dtype(at::kLong);
        const at::Device dev = cache.keys(0).device();
        plain_ = at::tensor(slots, opts).to(dev);
        for (std::int64_t l = 0; l < cache.layers() && !ringed_.defined(); ++l)
            if (cache.ringed(l)) ringed_ = at::tensor(cache.storage_slots(l, slots), opts).to(dev);
    }
    const at::Tensor& operator()(std::int64_t layer) const { return cache_.ringed(layer) ? ringed_ : plain_; }

private:
    const KvCache& cache_;
    at::Tensor plain_, ringed_;
};

}  // namespace

std::int64_t PrefixCache::match(const std::vector<TokenId>& tokens, const PrefixState& state, std::int64_t limit) {
    Impl& m = *impl_;
    limit = std::min<std::int64_t>(limit, static_cast<std::int64_t>(tokens.size()));
    std::uint64_t h = state_hash(state);
    std::int64_t i = 0;
    for (; (i + 1) * kBlockTokens <= limit; ++i) {
        h = Impl::next_hash(h, tokens, i);
        Impl::Block* b = m.find(tokens, state, h, i);
        if (!b) break;
        m.touch(*b, h);
    }
    return i * kBlockTokens;
}

void PrefixCache::restore(const std::vector<TokenId>& tokens, const PrefixState& state, std::int64_t from,
                          std::int64_t to, KvCache& cache, const PrefixLayout& layout) {
    Impl& m = *impl_;
    if (from < 0 || to < from || to > static_cast<std::int64_t>(tokens.size()))
        throw Error(ErrorCode::InvalidArgument, "prefix cache: positions [" + std::to_string(from) + ", " +
                                                    std::to_string(to) + ") are not inside the tokens");
    if (cache.layers() != m.layers) throw Error(ErrorCode::InvalidArgument, "prefix cache: the cache is another model's");
    std::uint64_t h = state_hash(state);
    for (std::int64_t i = 0; i * kBlockTokens < to; ++i) {
        h = Impl::next_hash(h, tokens, i);
        const std::int64_t lo = std::max(from, i * kBlockTokens), hi = std::min(to, (i + 1) * kBlockTokens);
        if (lo >= hi) continue;
        const Impl::Block* b = m.find(tokens, state, h, i);
        if (!b) {
            throw Error(ErrorCode::InvalidArgument, "prefix cache: positions up to " + std::to_string(to) +
                                                        " are not stored for these tokens");
        }
        std::vector<std::int64_t> slots;
        for (std::int64_t p = lo; p < hi; ++p) {
            slots.push_back(layout.slot(p));
            if (slots.back() < 0 || slots.back() >= cache.slots())
                throw Error(ErrorCode::InvalidArgument, "prefix cache: slot " + std::to_string(slots.back()) +
                                                            " is outside the cache");
        }
        // Positions in order: a windowed layer's ring ends up with the last ones.
        for (std::size_t j = 0; j < slots.size(); ++j)
            cache.set_slot_position(slots[j], lo + static_cast<std::int64_t>(j));
        const StorageIndex index(cache, slots);
        const at::Tensor part = b->kv.narrow(3, lo - i * kBlockTokens, hi - lo);  // [layers, 2, KVH, n, D]
        for (std::int64_t l = 0; l < m.layers; ++l) {
            cache.keys(l).index_copy_(1, index(l), part[l][0]);
            cache.values(l).index_copy_(1, index(l), part[l][1]);
        }
        m.reused += hi - lo;
    }
}

void PrefixCache::store(const std::vector<TokenId>& tokens, std::int64_t valid, const PrefixState& state,
                        const KvCache& cache, const PrefixLayout& layout) {
    Impl& m = *impl_;
    if (m.budget <= 0 || m.model == nullptr) return;
    valid = std::min<std::int64_t>(valid, static_cast<std::int64_t>(tokens.size()));
    if (cache.layers() != m.layers) throw Error(ErrorCode::InvalidArgument, "prefix cache: the cache is another model's");
    std::uint64_t h = state_hash(state);
    for (std::int64_t i = 0; (i + 1) * kBlockTokens <= valid; ++i) {
        h = Impl::next_hash(h, tokens, i);
        if (Impl::Block* b = m.find(tokens, state, h, i)) {
            m.touch(*b, h);
            continue;
        }
        std::vector<std::int64_t> slots;
        for (std::int64_t p = i * kBlockTokens; p < (i + 1) * kBlockTokens; ++p) slots.push_back(layout.slot(p));
        // A windowed layer's ring may have moved past the block: then neither it nor any
        // block after it (they follow from it) can be stored.
        if (!std::all_of(slots.begin(), slots.end(), [&cache](std::int64_t s) { return cache.holds(s); })) break;
        const StorageIndex index(cache, slots);
        std::vector<at::Tensor> layers;
        for (std::int64_t l = 0; l < m.layers; ++l)
            layers.push_back(at::stack({cache.keys(l).index_select(1, index(l)), cache.values(l).index_select(1, index(l))}));
        Impl::Block b;
        b.prefix.assign(tokens.begin(), tokens.begin() + (i + 1) * kBlockTokens);
        b.state = state;
        b.kv = at::stack(layers);  // [layers, 2, KVH, kBlockTokens, D]
        m.bytes += static_cast<std::int64_t>(b.kv.nbytes());
        ++m.count;
        std::vector<Impl::Block>& bucket = m.blocks[h];
        bucket.push_back(std::move(b));
        m.touch(bucket.back(), h);
    }
    m.evict_to(m.budget);
}

}  // namespace kev
