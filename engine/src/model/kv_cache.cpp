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
    for (auto* side : {&keys_, &values_})
        for (auto& t : *side) t.narrow(1, begin, end - begin).fill_(std::numeric_limits<float>::quiet_NaN());
}

void KvCache::clear_slots(std::int64_t begin, std::int64_t end) {
    if (begin < 0 || end < begin || end > slots_)
        throw Error(ErrorCode::InvalidArgument, "KV cache: clear of slots [" + std::to_string(begin) + ", " +
                                                    std::to_string(end) + ") is outside the " +
                                                    std::to_string(slots_) + " slots");
    for (auto* side : {&keys_, &values_})
        for (auto& t : *side) t.narrow(1, begin, end - begin).zero_();
    std::fill(positions_.begin() + begin, positions_.begin() + end, -1);
}

}  // namespace kev
