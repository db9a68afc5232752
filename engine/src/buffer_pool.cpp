// The CPU buffer pool (kev/buffer_pool.h): an allocator installed in libtorch's place the
// first time a scope opens with the pool on, which outside scopes and below 64 KiB
// allocates as libtorch's own does (c10::alloc_cpu, freed by c10::free_cpu once
// release() has found the block is not one of the pool's).
//
// Within a scope a large request takes the smallest kept block that fits it with at most
// an eighth to spare (a forward's buffers repeat their sizes layer after layer and step
// after step), else new memory. Every pool block, whoever frees it and on whatever
// thread, comes back through release(): kept while a scope is open and the kept bytes
// stay under a cap, else freed. Pool blocks have their data as their context, like
// libtorch's, so they are plain data pointers to every caller.
#include "kev/buffer_pool.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>

#include "kev/error.h"

namespace kev {

namespace {

constexpr std::size_t kSmallest = 64 * 1024;        // below this malloc's heap does well
constexpr std::size_t kPage = 4096;
constexpr std::int64_t kKeptCap = std::int64_t{1} << 30;  // never hold more than 1 GiB unused

BufferPoolMode mode_from_env() {
    const char* e = std::getenv("KEV_BUFFER_POOL");
    if (!e || !*e) return BufferPoolMode::On;
    try {
        return parse_buffer_pool_mode(e);
    } catch (const Error& bad) {
        throw Error(ErrorCode::InvalidArgument, std::string("KEV_BUFFER_POOL: ") + bad.what());
    }
}

std::atomic<BufferPoolMode>& mode_switch() {
    static std::atomic<BufferPoolMode> mode{mode_from_env()};
    return mode;
}

void release(void* p);

class Pool final : public c10::Allocator {
public:
    c10::DataPtr allocate(std::size_t n) override {
        const c10::Device cpu(c10::DeviceType::CPU);
        const BufferPoolMode mode = mode_switch().load(std::memory_order_relaxed);
        // Poison lends every size, so that tests on tiny models reach the pool too.
        const bool lend = mode == BufferPoolMode::Poison || (mode == BufferPoolMode::On && n >= kSmallest);
        void* p = lend && n > 0 ? take(n) : nullptr;
        if (!p) p = c10::alloc_cpu(n);
        else if (mode == BufferPoolMode::Poison) std::memset(p, 0xff, n);
        // One deleter for all (raw_deleter()'s contract): release() frees what it did not lend.
        return {p, p, &release, cpu};
    }

    c10::DeleterFnPtr raw_deleter() const override { return &release; }

    void copy_data(void* dest, const void* src, std::size_t count) const override {
        default_copy_data(dest, src, count);
    }

    // A block of at least n bytes from the kept ones or new memory; null when no scope is open.
    void* take(std::size_t n) {
        const std::size_t want = (n + kPage - 1) / kPage * kPage;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            if (open_ == 0) return nullptr;
            auto it = kept_.lower_bound(want);
            if (it != kept_.end() && it->first <= want + want / 8) {
                void* p = it->second;
                const std::size_t size = it->first;
                kept_.erase(it);
                kept_bytes_ -= static_cast<std::int64_t>(size);
                lent_.emplace(p, size);
                lent_blocks_.fetch_add(1, std::memory_order_relaxed);
                lent_bytes_ += static_cast<std::int64_t>(size);
                ++reused_;
                return p;
            }
        }
        void* p = c10::alloc_cpu(want);  // throws on exhaustion, as libtorch's does
        std::lock_guard<std::mutex> lock(mutex_);
        lent_.emplace(p, want);
        lent_blocks_.fetch_add(1, std::memory_order_relaxed);
        lent_bytes_ += static_cast<std::int64_t>(want);
        ++fresh_;
        return p;
    }

    void give_back(void* p) {
        // Every tensor's memory comes back through here: with no pool block out (outside
        // runs, or the pool off) none of it can be the pool's, and no lock is taken.
        if (lent_blocks_.load(std::memory_order_relaxed) == 0) {
            c10::free_cpu(p);
            return;
        }
        {
            std::lock_guard<std::mutex> lock(mutex_);
            const auto it = lent_.find(p);
            if (it != lent_.end()) {
                const std::size_t size = it->second;
                lent_.erase(it);
                lent_blocks_.fetch_sub(1, std::memory_order_relaxed);
                lent_bytes_ -= static_cast<std::int64_t>(size);
                if (open_ > 0 && kept_bytes_ + static_cast<std::int64_t>(size) <= kKeptCap) {
                    kept_.emplace(size, p);
                    kept_bytes_ += static_cast<std::int64_t>(size);
                    return;
                }
            }
        }
        c10::free_cpu(p);
    }

    void open() {
        std::lock_guard<std::mutex> lock(mutex_);
        ++open_;
    }

    void close() {
        std::vector<void*> out;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            if (--open_ > 0) return;
            out.reserve(kept_.size());
            for (const auto& [size, p] : kept_) out.push_back(p);
            kept_.clear();
            kept_bytes_ = 0;
        }
        for (void* p : out) c10::free_cpu(p);
    }

    BufferPoolStats stats() {
        std::lock_guard<std::mutex> lock(mutex_);
        BufferPoolStats s;
        s.open_scopes = open_;
        s.kept_bytes = kept_bytes_;
        s.lent_bytes = lent_bytes_;
        s.reused = reused_;
        s.fresh = fresh_;
        return s;
    }

private:
    std::mutex mutex_;
    int open_ = 0;
    std::multimap<std::size_t, void*> kept_;        // size -> block
    std::unordered_map<void*, std::size_t> lent_;   // block -> size
    // lent_.size(), readable without the lock. A block being freed was lent before its
    // tensor reached the freeing thread, which saw the count raised with the tensor.
    std::atomic<std::int64_t> lent_blocks_{0};
    std::int64_t kept_bytes_ = 0, lent_bytes_ = 0, reused_ = 0, fresh_ = 0;
};

// Never destroyed: tensors freed during static destruction still come back to it.
Pool& pool() {
    static Pool* p = new Pool;
    return *p;
}

void release(void* p) { pool().give_back(p); }

// Installed once, at the first scope opened with the pool on; from then on it is
// libtorch's CPU allocator (with the pool off it allocates as libtorch's does).
void install() {
    static std::once_flag once;
    std::call_once(once, [] { c10::SetCPUAllocator(&pool(), /*priority=*/1); });
}

}  // namespace

const char* to_string(BufferPoolMode mode) {
    switch (mode) {
    case BufferPoolMode::Off: return "off";
    case BufferPoolMode::On: return "on";
    case BufferPoolMode::Poison: return "poison";
    }
    return "?";
}

BufferPoolMode parse_buffer_pool_mode(const std::string& name) {
    if (name == "off" || name == "0") return BufferPoolMode::Off;
    if (name == "on" || name == "1") return BufferPoolMode::On;
    if (name == "poison") return BufferPoolMode::Poison;
    throw Error(ErrorCode::InvalidArgument, "unknown buffer pool mode '" + name + "' (expected off, on or poison)");
}

void set_buffer_pool_mode(BufferPoolMode mode) { mode_switch().store(mode); }
BufferPoolMode buffer_pool_mode() { return mode_switch().load(); }

BufferPoolScope::BufferPoolScope() {
    if (buffer_pool_mode() != BufferPoolMode::Off) install();
    pool().open();
}

BufferPoolScope::~BufferPoolScope() { pool().close(); }

BufferPoolStats buffer_pool_stats() { return pool().stats(); }

}  // namespace kev
