// Large CPU buffers kept for reuse while a forward or a run is under way.
//
// Each layer of a prompt's forward asks for the same few buffers (5-40 MB each for 16
// cards of a 0.5B model) and frees them before the next layer asks again. Served fresh
// by malloc, such a buffer is new pages every time, each faulted in and cleared by the
// kernel: 16-30% of a 16-card bf16 prefill's samples on a Zen 3 VM. While a
// BufferPoolScope is open anywhere in the process, libtorch's CPU allocations of 64 KiB
// and more are served from blocks freed earlier within the scope, so their pages are
// touched once. When the last scope closes, every kept block goes back to the system.
//
// The switch (KEV_BUFFER_POOL in the environment, read at first use, or
// set_buffer_pool_mode()):
//   on      the default;
//   off     allocation exactly as libtorch does it (nothing of the pool is installed);
//   poison  on for buffers of every size, and each one handed out within a scope,
//           fresh or kept, filled with 0xff bytes, a NaN in every float type: a kernel
//           that reads memory it did not write then shows up in the bit-equality tests
//           instead of reading a stale buffer's values.
// The pool changes where a result is stored, never how it is computed.
#pragma once

#include <cstdint>
#include <string>

namespace kev {

enum class BufferPoolMode { Off, On, Poison };
const char* to_string(BufferPoolMode mode);
// "off", "on", "poison"; throws InvalidArgument for anything else.
BufferPoolMode parse_buffer_pool_mode(const std::string& name);
// Process-wide; takes effect at the next allocation (a block already kept is still
// given back when the last scope closes).
void set_buffer_pool_mode(BufferPoolMode mode);
BufferPoolMode buffer_pool_mode();

// Opens the pool for the lifetime of the object; scopes nest and may be opened on any
// thread (Model::forward opens one, the generator one for the whole run, so a run's
// steps reuse each other's buffers).
class BufferPoolScope {
public:
    BufferPoolScope();
    ~BufferPoolScope();
    BufferPoolScope(const BufferPoolScope&) = delete;
    BufferPoolScope& operator=(const BufferPoolScope&) = delete;
};

struct BufferPoolStats {
    int open_scopes = 0;
    std::int64_t kept_bytes = 0;      // freed blocks held for reuse now
    std::int64_t lent_bytes = 0;      // pool blocks in use now
    std::int64_t reused = 0;          // allocations served by a kept block, since start
    std::int64_t fresh = 0;           // pool allocations that took new memory, since start
};
BufferPoolStats buffer_pool_stats();

}  // namespace kev
