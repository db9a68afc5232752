// libtorch's CUDA allocator figures (kev/engine_info.h). Its header needs the CUDA
// toolkit's, so this reads them only in builds with the CUDA kernels.
#include "kev/engine_info.h"

#include <algorithm>

#if defined(KEV_CUDA_KERNELS)
#include <ATen/Context.h>
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace kev {

#if defined(KEV_CUDA_KERNELS)
namespace {
// The caching allocator has no device table until libtorch's CUDA state is set up (the
// first CUDA tensor does it); asked before, it throws "Invalid device argument" (seen on
// an H200 when the VRAM figures were read before the model was loaded).
void cuda_ready() { at::globalContext().lazyInitDevice(c10::DeviceType::CUDA); }
}  // namespace
#endif

std::optional<CudaAllocatorMemory> cuda_allocator_memory() {
#if defined(KEV_CUDA_KERNELS)
    if (!engine_info().cuda_available) return std::nullopt;
    cuda_ready();
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(0);
    const auto all = static_cast<std::size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    CudaAllocatorMemory m;
    m.allocated_bytes = stats.allocated_bytes[all].current;
    m.reserved_bytes = stats.reserved_bytes[all].current;
    m.peak_allocated_bytes = stats.allocated_bytes[all].peak;
    m.peak_reserved_bytes = stats.reserved_bytes[all].peak;
    return m;
#else
    return std::nullopt;
#endif
}

void reset_cuda_peak_memory() {
#if defined(KEV_CUDA_KERNELS)
    if (engine_info().cuda_available) {
        cuda_ready();
        c10::cuda::CUDACachingAllocator::resetPeakStats(0);
    }
#endif
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
