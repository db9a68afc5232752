// libkev_cuda.so (cuda/plugin.h): the kernels and libtorch's CUDA calls behind one table.
#include "cuda/plugin.h"

#include <ATen/Context.h>
#include <c10/cuda/CUDAStream.h>  // first: it brings the CUDA runtime's types the allocator's header uses
#include <c10/cuda/CUDACachingAllocator.h>

namespace {

void* current_stream(int device) {
    return static_cast<void*>(c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device)).stream());
}

// The caching allocator has no device table until libtorch's CUDA state is set up (the
// first CUDA tensor does it); asked before, it throws "Invalid device argument" (seen on
// an H200 when the VRAM figures were read before the model was loaded).
void cuda_ready() { at::globalContext().lazyInitDevice(c10::DeviceType::CUDA); }

void allocator_stats(int device, kev::cuda::AllocatorStats* out) {
    cuda_ready();
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(device));
    const auto all = static_cast<std::size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    out->allocated = stats.allocated_bytes[all].current;
    out->reserved = stats.reserved_bytes[all].current;
    out->peak_allocated = stats.allocated_bytes[all].peak;
    out->peak_reserved = stats.reserved_bytes[all].peak;
}

void reset_peak_stats(int device) {
    cuda_ready();
    c10::cuda::CUDACachingAllocator::resetPeakStats(static_cast<c10::DeviceIndex>(device));
}

const kev::cuda::Plugin plugin{current_stream,
                               kev::cuda::q4_partials_floats,
                               kev::cuda::q4_linear,
                               kev::cuda::dense_tile_partials_floats,
                               kev::cuda::dense_linear_tiles,
                               allocator_stats,
                               reset_peak_stats};

}  // namespace

extern "C" __attribute__((visibility("default"))) const kev::cuda::Plugin* kev_cuda_plugin() { return &plugin; }
