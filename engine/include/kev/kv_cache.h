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
//
// Windowed layers (sliding-window attention) can keep only the window of each region
// (keep_windows): a region of the slot space above (the shared context, a card) is then
// stored, in those layers, in a ring of min(region size, ring_slots) slots of their own,
// slot s of the region at ring slot (s - region begin) mod ring size. Rings are written
// in order, so a ring holds the region's last ring-size slots: everything a window of
// W <= ring_slots - rows + 1 still reads after a forward that wrote `rows` of them.
//
//   region 40..1039 (1,000 tokens), window 64, 16 rows a step: ring of 79 slots
//   full layers: slots 40..1039         windowed layers: ring slots 0..78, the last 79
//   positions written, offset o at o mod 79
//
// The slot numbers the batch names stay the same; the cache maps them.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include <ATen/core/Tensor.h>

#include "kev/config.h"
#include "kev/engine_info.h"
#include "kev/region_pool.h"
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
    // Also marks the slot written in its ring (rings are written in order).
    void set_slot_position(std::int64_t slot, std::int64_t position);

    // --- windows kept (windowed layers in rings) ---
    // From now on, windowed layers keep each mapped region in a ring of at most
    // `ring_slots` slots (see above). Call on a fresh cache of a model with windowed
    // layers; throws InvalidArgument otherwise or for ring_slots < 1.
    void keep_windows(std::int64_t ring_slots);
    bool keeps_windows() const { return ring_slots_ > 0; }
    std::int64_t ring_slots() const { return ring_slots_; }
    // Whether layer l is stored in rings.
    bool ringed(std::int64_t layer) const { return ring_slots_ > 0 && windowed_[static_cast<std::size_t>(layer)]; }
    // Gives slots [begin, end) a ring (their region: the shared context, a card). A mapped
    // region that overlaps it is dropped first (the planner gives freed slots to the next
    // card before the run loop hears they were freed). Throws InvalidArgument out of range,
    // OutOfMemory when the rings cannot grow.
    void map_region(std::int64_t begin, std::int64_t end);
    // Drops the ring of exactly [begin, end), if it has one.
    void unmap_region(std::int64_t begin, std::int64_t end);

    struct Ring {
        std::int64_t begin = 0, end = 0;  // the region's slots
        std::int64_t base = 0, size = 0;  // its ring: ring slots [base, base + size)
        std::int64_t last = -1;           // the highest offset written (-1: none)
        bool wraps() const { return end - begin > size; }
        std::int64_t ring_slot(std::int64_t slot) const { return base + (slot - begin) % size; }
        // Whether slot's key is still in the ring (written, not overwritten since).
        bool holds(std::int64_t slot) const { return slot - begin <= last && last - (slot - begin) < size; }
    };
    // The ring of the region holding `slot`, or null (no rings, or not mapped).
    const Ring* ring_of(std::int64_t slot) const;
    // Where layer `layer` keeps each of `slots`: the slots themselves, or ring slots.
    // Throws InvalidArgument for a ringed layer and a slot outside every mapped region.
    std::vector<std::int64_t> storage_slots(std::int64_t layer, const std::vector<std::int64_t>& slots) const;
    // Whether every layer still holds slot's key and value (a ring may have moved on).
    bool holds(std::int64_t slot) const;
    // Bytes the cache uses for `slots` slots of full layers and the rings mapped now.
    std::int64_t bytes_in_use(std::int64_t slots) const;

private:
    std::int64_t slots_ = 0;
    std::vector<std::int64_t> positions_;  // [slots]
    std::vector<at::Tensor> keys_;    // [layers] of [KVH, slots, D]
    std::vector<at::Tensor> values_;  // [layers] of [KVH, slots, D]
    // Windows kept: ringed layers' tensors are [KVH, ring pool slots, D].
    std::vector<std::uint8_t> windowed_;  // [layers]
    std::int64_t ring_slots_ = 0;
    std::int64_t pool_slots_ = 0;
    RegionPool pool_;
    std::map<std::int64_t, Ring> rings_;  // by region begin
};

}  // namespace kev
