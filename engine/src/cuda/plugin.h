// The engine's way into CUDA where Kev's CUDA kernels are built: libkev_cuda.so, a module
// beside libkev_engine.so, holds the kernels (linear_kernels.h) and the few calls into
// libtorch's CUDA library the engine makes. The engine links none of it: it opens the
// module, after libtorch's CUDA library, the first time CUDA is asked about on a machine
// with NVIDIA's driver (cuda_runtime.h), and calls it through this table. No CUDA or
// torch header here, so the engine builds against libtorch's CPU headers alone.
#pragma once

#include <cstdint>

#include "cuda/linear_kernels.h"

namespace kev::cuda {

// libtorch's caching allocator on one device, in bytes.
struct AllocatorStats {
    long long allocated = 0, reserved = 0, peak_allocated = 0, peak_reserved = 0;
};

struct Plugin {
    // The cudaStream_t libtorch is running on for this device.
    void* (*current_stream)(int device);
    std::int64_t (*q4_partials_floats)(const Q4View& w, std::int64_t M, bool tiles);
    const char* (*q4_linear)(const Q4View& w, const void* x, Act act, std::int64_t M, const float* bias, float* y,
                             float* partials, void* stream, bool tiles);
    std::int64_t (*dense_tile_partials_floats)(std::int64_t rows, std::int64_t cols, std::int64_t M);
    const char* (*dense_linear_tiles)(const void* w, std::int64_t rows, std::int64_t cols, const void* x, Act act,
                                      std::int64_t M, const float* bias, float* y, float* partials, void* stream);
    // Both set up libtorch's CUDA state first (the allocator has no device table before).
    void (*allocator_stats)(int device, AllocatorStats* out);
    void (*reset_peak_stats)(int device);
};

// The module's one exported symbol: extern "C" const Plugin* kev_cuda_plugin().
inline constexpr const char* kPluginSymbol = "kev_cuda_plugin";
inline constexpr const char* kPluginFile = "libkev_cuda.so";

}  // namespace kev::cuda
