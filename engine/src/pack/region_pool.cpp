#include "kev/region_pool.h"

#include <algorithm>

namespace kev {

std::int64_t RegionPool::allocate(std::int64_t size, std::int64_t limit) {
    for (auto it = free_.begin(); it != free_.end(); ++it) {
        if (it->second - it->first < size) continue;
        const std::int64_t begin = it->first;
        if (it->second - it->first == size) free_.erase(it);
        else it->first += size;
        return begin;
    }
    if (limit > 0 && tail_ + size > limit) return -1;
    const std::int64_t begin = tail_;
    tail_ += size;
    high_water_ = std::max(high_water_, tail_);
    return begin;
}

void RegionPool::release(std::int64_t begin, std::int64_t end) {
    auto it = std::lower_bound(free_.begin(), free_.end(), std::make_pair(begin, end));
    it = free_.insert(it, {begin, end});
    if (it + 1 != free_.end() && it->second == (it + 1)->first) {  // join the next
        it->second = (it + 1)->second;
        free_.erase(it + 1);
    }
    if (it != free_.begin() && (it - 1)->second == it->first) {  // join the previous
        (it - 1)->second = it->second;
        it = free_.erase(it) - 1;
    }
    if (it->second == tail_) {  // the end of the pool: give it back to the tail
        tail_ = it->first;
        free_.erase(it);
    }
}

}  // namespace kev
