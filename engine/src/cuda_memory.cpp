// libtorch's CUDA allocator figures (kev/engine_info.h), read through Kev's CUDA module
// (cuda/plugin.h): only builds with the CUDA kernels have them.
#include "kev/engine_info.h"

#include <algorithm>

#include "cuda/plugin.h"
#include "cuda_runtime.h"

namespace kev {

std::optional<CudaAllocatorMemory> cuda_allocator_memory() {
    if (!engine_info().cuda_available) return std::nullopt;
    const cuda::Plugin* plugin = cuda_plugin();
    if (plugin == nullptr) return std::nullopt;
    cuda::AllocatorStats stats;
    plugin->allocator_stats(0, &stats);
    CudaAllocatorMemory m;
    m.allocated_bytes = stats.allocated;
    m.reserved_bytes = stats.reserved;
    m.peak_allocated_bytes = stats.peak_allocated;
    m.peak_reserved_bytes = stats.peak_reserved;
    return m;
}

void reset_cuda_peak_memory() {
    if (!engine_info().cuda_available) return;
    if (const cuda::Plugin* plugin = cuda_plugin()) plugin->reset_peak_stats(0);
}

std::optional<VramBreakdown> vram_breakdown(long long weight_bytes, long long kv_cache_bytes) {
    const auto a = cuda_allocator_memory();
    const auto d = cuda_memory();
    if (!a || !d) return std::nullopt;
    VramBreakdown v;
    v.weights = weight_bytes;
    v.kv_cache = kv_cache_bytes;
    v.activations = std::max(0LL, a->allocated_bytes - weight_bytes - kv_cache_bytes);
    v.reserved_unused = std::max(0LL, a->reserved_bytes - a->allocated_bytes);
    v.device_used = d->used_bytes;
    v.device_total = d->total_bytes;
    return v;
}

}  // namespace kev
