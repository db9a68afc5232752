// Contiguous ranges of cache slots handed out and given back: the planner's card regions
// and the KV cache's windowed rings (kv_cache.h) take their places from one of these.
//
//   allocate(4) -> 0, allocate(3) -> 4, release(0, 4), allocate(2) -> 0 (first fit),
//   release(4, 7): the free ranges at the tail go back to it.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace kev {

class RegionPool {
public:
    // Slots [0, start) are held outside the pool (a pack's first layout).
    explicit RegionPool(std::int64_t start = 0) : tail_(start), high_water_(start) {}

    // The first free range of `size` slots: its begin, or -1 when it would have to reach
    // past `limit` slots (0: no limit).
    std::int64_t allocate(std::int64_t size, std::int64_t limit = 0);
    // Gives [begin, end) back; neighbouring free ranges are joined, the tail shrinks.
    void release(std::int64_t begin, std::int64_t end);

    // One past the last slot in use now.
    std::int64_t tail() const { return tail_; }
    // The most slots ever in use at once: what storage for the pool must hold.
    std::int64_t high_water() const { return high_water_; }

private:
    std::vector<std::pair<std::int64_t, std::int64_t>> free_;  // free ranges below tail_, by begin
    std::int64_t tail_ = 0;
    std::int64_t high_water_ = 0;
};

}  // namespace kev
