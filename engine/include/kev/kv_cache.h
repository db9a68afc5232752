// The key/value cache: per layer, keys and values of every cache *slot*.
//
// A slot is a physical row of the cache, not a RoPE position: several sequences
// (question cards) share one cache, each owning its own slots, and a token's
// position (what RoPE sees) restarts per sequence while its slot does not.
// Keys are stored already rotated (RoPE applied at the token's position), so a
// slot's content never depends on where it sits.
//
//   slot      :  0  1  2  3 | 4  5  6 | 7 ...
//   sequence  :  a  a  a  a | b  b  b | free
//   position  :  0  1  2  3 | 0  1  2 |
//
// Allocated once, in the model's device and dtype; the forward writes each row's
// key/value into the slot the batch names. Which slots a row may read is the
// batch's attention mask (see model.h), not the cache's business.
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

#include "kev/config.h"
#include "kev/engine_info.h"
#include "kev/weights.h"

namespace kev {

class KvCache {
public:
    // Throws OutOfMemory (naming the size) when the allocation fails, InvalidArgument
    // for slots <= 0.
    KvCache(const ModelConfig& config, std::int64_t slots, Device device, DType dtype);

    std::int64_t slots() const { return slots_; }
    std::int64_t layers() const { return static_cast<std::int64_t>(keys_.size()); }
    std::int64_t bytes() const;
    // Bytes one slot takes over all layers (keys and values).
    static std::int64_t bytes_per_slot(const ModelConfig& config, DType dtype);

    at::Tensor& keys(std::int64_t layer) { return keys_[layer]; }      // [KVH, slots, D]
    at::Tensor& values(std::int64_t layer) { return values_[layer]; }  // [KVH, slots, D]
    const at::Tensor& keys(std::int64_t layer) const { return keys_[layer]; }
    const at::Tensor& values(std::int64_t layer) const { return values_[layer]; }

    // Copies slots [src_begin, src_begin + count) to [dst_begin, dst_begin + count) in
    // every layer (e.g. to compact a finished sequence's hole, or to fork a shared
    // context). Ranges may overlap. Throws InvalidArgument when out of range.
    void copy_slots(std::int64_t src_begin, std::int64_t dst_begin, std::int64_t count);
    // Zeroes slots [begin, end): not needed for correctness (masked slots are never
    // read), useful to make stale data obvious when debugging.
    void clear_slots(std::int64_t begin, std::int64_t end);

    // Grows the cache to `slots` slots (no effect when it has as many already), keeping
    // every slot's content: a live pack's cache grows as cards join. Throws OutOfMemory
    // (naming the size; the cache is then unchanged) when the allocation fails.
    void grow(std::int64_t slots);
    // Fills slots [begin, end) with NaN in every layer: a freed region poisoned so that a
    // read after free shows in the logits (tests). Throws InvalidArgument out of range.
    void poison_slots(std::int64_t begin, std::int64_t end);

    // The RoPE position of the token stored in each slot (-1: never written), kept by the
    // forward as it writes and moved by copy_slots: sliding-window layers read a slot only
    // when its position is within the window of the reading row's.
    const std::vector<std::int64_t>& slot_positions() const { return positions_; }
    void set_slot_position(std::int64_t slot, std::int64_t position) { positions_[static_cast<std::size_t>(slot)] = position; }

private:
    std::int64_t slots_ = 0;
    std::vector<std::int64_t> positions_;  // [slots]
    std::vector<at::Tensor> keys_;    // [layers] of [KVH, slots, D]
    std::vector<at::Tensor> values_;  // [layers] of [KVH, slots, D]
};

}  // namespace kev
