#include "kev/kv_cache.h"

#include <algorithm>
#include <limits>
#include <new>

#include <ATen/ATen.h>

#include "kev/error.h"
#include "model/torch_util.h"

namespace kev {

KvCache::KvCache(const ModelConfig& config, std::int64_t slots, Device device, DType dtype) : slots_(slots) {
    if (slots <= 0) throw Error(ErrorCode::InvalidArgument, "KV cache: slot count must be positive, got " + std::to_string(slots));
    const auto opts = tensor_options(device, dtype);
    try {
        positions_.assign(static_cast<std::size_t>(slots), -1);
        for (std::int64_t l = 0; l < config.num_layers; ++l) {
            windowed_.push_back(config.layer_windowed(l) ? 1 : 0);
            keys_.push_back(at::zeros({config.num_kv_heads, slots, config.head_dim}, opts));
            values_.push_back(at::zeros({config.num_kv_heads, slots, config.head_dim}, opts));
        }
    } catch (const std::bad_alloc&) {
        throw Error(ErrorCode::OutOfMemory, "KV cache of " + std::to_string(slots) + " slots could not be allocated");
    } catch (const c10::Error& e) {
        keys_.clear();
        values_.clear();
        throw Error(ErrorCode::OutOfMemory, "KV cache of " + std::to_string(slots) + " slots (" +
                                                std::to_string(bytes_per_slot(config, dtype) * slots >> 20) +
                                                " MiB) could not be allocated: " + e.what_without_backtrace());
    }
}

std::int64_t KvCache::bytes_per_slot(const ModelConfig& config, DType dtype) {
    return 2 * config.num_layers * config.kv_size() * dtype_bytes(dtype);
}

std::int64_t KvCache::bytes() const {
    std::int64_t total = 0;
    for (const auto& t : keys_) total += static_cast<std::int64_t>(t.nbytes());
    for (const auto& t : values_) total += static_cast<std::int64_t>(t.nbytes());
    return total;
}

void KvCache::copy_slots(std::int64_t src_begin, std::int64_t dst_begin, std::int64_t count) {
    if (count < 0 || src_begin < 0 || dst_begin < 0 || src_begin > slots_ - count || dst_begin > slots_ - count)
        throw Error(ErrorCode::InvalidArgument, "KV cache: copy of " + std::to_string(count) + " slots from " +
                                                    std::to_string(src_begin) + " to " + std::to_string(dst_begin) +
                                                    " is outside the " + std::to_string(slots_) + " slots");
    if (count == 0 || src_begin == dst_begin) return;
    if (keeps_windows()) throw Error(ErrorCode::Unsupported, "KV cache: slots cannot move while windowed layers keep rings");
    for (auto* side : {&keys_, &values_}) {
        for (auto& t : *side) {
            // clone: the ranges may overlap.
            t.narrow(1, dst_begin, count).copy_(t.narrow(1, src_begin, count).clone());
        }
    }
    const std::vector<std::int64_t> moved(positions_.begin() + src_begin, positions_.begin() + src_begin + count);
    std::copy(moved.begin(), moved.end(), positions_.begin() + dst_begin);
}

void KvCache::grow(std::int64_t slots) {
    if (slots <= slots_) return;
    std::vector<at::Tensor> keys, values;
    try {
        for (auto* side : {&keys_, &values_}) {
            auto& out = side == &keys_ ? keys : values;
            for (const at::Tensor& t : *side) {
                if (ringed(static_cast<std::int64_t>(out.size()))) {  // its rings grow with map_region
                    out.push_back(t);
                    continue;
                }
                at::Tensor bigger = at::zeros({t.size(0), slots, t.size(2)}, t.options());
                bigger.narrow(1, 0, slots_).copy_(t);
                out.push_back(std::move(bigger));
            }
        }
    } catch (const std::bad_alloc&) {
        throw Error(ErrorCode::OutOfMemory, "KV cache could not grow to " + std::to_string(slots) + " slots");
    } catch (const c10::Error& e) {
        throw Error(ErrorCode::OutOfMemory, "KV cache could not grow to " + std::to_string(slots) + " slots: " +
                                                e.what_without_backtrace());
    }
    keys_ = std::move(keys);
    values_ = std::move(values);
    positions_.resize(static_cast<std::size_t>(slots), -1);
    slots_ = slots;
}

void KvCache::poison_slots(std::int64_t begin, std::int64_t end) {
    if (begin < 0 || end < begin || end > slots_)
        throw Error(ErrorCode::InvalidArgument, "KV cache: poisoning slots [" + std::to_string(begin) + ", " +
                                                    std::to_string(end) + ") is outside the " +
                                                    std::to_string(slots_) + " slots");
    constexpr float nan = std::numeric_limits<float>::quiet_NaN();
    for (std::int64_t l = 0; l < layers(); ++l) {
        if (!ringed(l)) {
            keys_[l].narrow(1, begin, end - begin).fill_(nan);
            values_[l].narrow(1, begin, end - begin).fill_(nan);
            continue;
        }
        for (const auto& [b, ring] : rings_) {  // the rings of regions inside [begin, end)
            if (ring.begin < begin || ring.end > end) continue;
            keys_[l].narrow(1, ring.base, ring.size).fill_(nan);
            values_[l].narrow(1, ring.base, ring.size).fill_(nan);
        }
    }
}

void KvCache::clear_slots(std::int64_t begin, std::int64_t end) {
    if (begin < 0 || end < begin || end > slots_)
        throw Error(ErrorCode::InvalidArgument, "KV cache: clear of slots [" + std::to_string(begin) + ", " +
                                                    std::to_string(end) + ") is outside the " +
                                                    std::to_string(slots_) + " slots");
    if (keeps_windows()) throw Error(ErrorCode::Unsupported, "KV cache: slots cannot be cleared while windowed layers keep rings");
    for (auto* side : {&keys_, &values_})
        for (auto& t : *side) t.narrow(1, begin, end - begin).zero_();
    std::fill(positions_.begin() + begin, positions_.begin() + end, -1);
}

void KvCache::set_slot_position(std::int64_t slot, std::int64_t position) {
    positions_[static_cast<std::size_t>(slot)] = position;
    if (keeps_windows()) {
        auto it = rings_.upper_bound(slot);
        if (it != rings_.begin() && slot < (--it)->second.end)
            it->second.last = std::max(it->second.last, slot - it->second.begin);
    }
}

void KvCache::keep_windows(std::int64_t ring_slots) {
    if (ring_slots < 1) throw Error(ErrorCode::InvalidArgument, "KV cache: rings need at least one slot");
    if (std::find(windowed_.begin(), windowed_.end(), 1) == windowed_.end())
        throw Error(ErrorCode::InvalidArgument, "KV cache: the model has no windowed layers to keep windows of");
    if (keeps_windows() || std::any_of(positions_.begin(), positions_.end(), [](std::int64_t p) { return p >= 0; }))
        throw Error(ErrorCode::InvalidArgument, "KV cache: windows are kept from a fresh cache on");
    ring_slots_ = ring_slots;
    for (std::int64_t l = 0; l < layers(); ++l) {
        if (!ringed(l)) continue;
        keys_[l] = at::zeros({keys_[l].size(0), 0, keys_[l].size(2)}, keys_[l].options());
        values_[l] = at::zeros({values_[l].size(0), 0, values_[l].size(2)}, values_[l].options());
    }
}

void KvCache::map_region(std::int64_t begin, std::int64_t end) {
    if (!keeps_windows()) return;
    if (begin < 0 || end <= begin || end > slots_)
        throw Error(ErrorCode::InvalidArgument, "KV cache: region [" + std::to_string(begin) + ", " +
                                                    std::to_string(end) + ") is outside the " +
                                                    std::to_string(slots_) + " slots");
    for (auto it = rings_.begin(); it != rings_.end();) {  // regions it overlaps are gone
        if (it->second.begin < end && begin < it->second.end) {
            pool_.release(it->second.base, it->second.base + it->second.size);
            it = rings_.erase(it);
        } else {
            ++it;
        }
    }
    Ring ring;
    ring.begin = begin;
    ring.end = end;
    ring.size = std::min(end - begin, ring_slots_);
    ring.base = pool_.allocate(ring.size);
    if (pool_.high_water() > pool_slots_) {
        const std::int64_t slots = std::max(pool_.high_water(), pool_slots_ + pool_slots_ / 2);
        try {
            for (std::int64_t l = 0; l < layers(); ++l) {
                if (!ringed(l)) continue;
                for (at::Tensor* t : {&keys_[l], &values_[l]}) {
                    at::Tensor bigger = at::zeros({t->size(0), slots, t->size(2)}, t->options());
                    bigger.narrow(1, 0, pool_slots_).copy_(*t);
                    *t = std::move(bigger);
                }
            }
        } catch (const std::exception& e) {
            pool_.release(ring.base, ring.base + ring.size);
            throw Error(ErrorCode::OutOfMemory, "KV cache: the windowed layers' rings could not grow to " +
                                                    std::to_string(slots) + " slots: " + e.what());
        }
        pool_slots_ = slots;
    }
    rings_[begin] = ring;
}

void KvCache::unmap_region(std::int64_t begin, std::int64_t end) {
    const auto it = rings_.find(begin);
    if (it == rings_.end() || it->second.end != end) return;
    pool_.release(it->second.base, it->second.base + it->second.size);
    rings_.erase(it);
}

const KvCache::Ring* KvCache::ring_of(std::int64_t slot) const {
    auto it = rings_.upper_bound(slot);
    if (it == rings_.begin()) return nullptr;
    --it;
    return slot < it->second.end ? &it->second : nullptr;
}

std::vector<std::int64_t> KvCache::storage_slots(std::int64_t layer, const std::vector<std::int64_t>& slots) const {
    if (!ringed(layer)) return slots;
    std::vector<std::int64_t> out;
    out.reserve(slots.size());
    for (std::int64_t s : slots) {
        const Ring* ring = ring_of(s);
        if (!ring)
            throw Error(ErrorCode::InvalidArgument, "KV cache: slot " + std::to_string(s) +
                                                        " is in no region with a ring for the windowed layers");
        out.push_back(ring->ring_slot(s));
    }
    return out;
}

bool KvCache::holds(std::int64_t slot) const {
    if (!keeps_windows()) return true;
    const Ring* ring = ring_of(slot);
    return ring && ring->holds(slot);
}

std::int64_t KvCache::bytes_in_use(std::int64_t slots) const {
    std::int64_t full = 0, ringed_layers = 0;
    for (std::int64_t l = 0; l < layers(); ++l) (ringed(l) ? ringed_layers : full) += 1;
    const at::Tensor& k = keys_.front();
    const std::int64_t per_layer_slot = 2 * k.size(0) * k.size(2) * static_cast<std::int64_t>(k.element_size());
    std::int64_t ring_slots_mapped = 0;
    for (const auto& entry : rings_) ring_slots_mapped += entry.second.size;
    return per_layer_slot * (full * slots + ringed_layers * ring_slots_mapped);
}

}  // namespace kev
