// What this build of the engine is and what it can run on.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace kev {

enum class Device { Cpu, Cuda };

struct EngineInfo {
    std::string kev_version;
    std::string torch_version;     // the libtorch the engine was built against
    std::string cpu_capability;    // the widest SIMD kernels libtorch dispatches to
    int cpu_threads = 0;           // intra-op threads libtorch uses
    bool cuda_available = false;   // libtorch has CUDA and a device is present
    int cuda_device_count = 0;
    // Whether libtorch's CUDA libraries were opened, and why not (they are opened only
    // where NVIDIA's driver is present; the engine links libtorch's CPU part alone).
    std::string cuda_libraries;
};

EngineInfo engine_info();

// engine_info() opens libtorch's CUDA libraries, the first time, where NVIDIA's driver is
// present (EngineInfo::cuda_libraries says what it did). This opens them without that
// check, for tests of the opening itself: they load without a driver, only a device
// needs one. True when libtorch's CUDA library is loaded.
bool open_cuda_libraries_without_driver();
// Whether Kev's CUDA module (libkev_cuda.so, in builds with the CUDA kernels) is loaded
// with every entry of its table.
bool cuda_kernels_loaded();

// How many threads one parallel loop of Kev's own kernels runs on, counted by running
// one: it should equal EngineInfo::cpu_threads (1 means the engine was built without
// OpenMP). Apart from engine_info() because it starts threads for the calling thread.
int kernel_threads();

// Memory of the current CUDA device as the driver reports it (all processes, not only
// Kev's tensors). Empty when CUDA is absent or the runtime cannot be asked.
struct DeviceMemory {
    long long used_bytes = 0;
    long long total_bytes = 0;
};
std::optional<DeviceMemory> cuda_memory();

// libtorch's CUDA caching allocator on device 0: the bytes Kev's tensors hold
// (allocated) and the bytes the allocator holds from the driver (reserved, what
// nvidia-smi counts for this process beside the CUDA context), with their peaks. The
// same numbers torch.cuda.memory_allocated() / memory_reserved() give in Python. Empty
// when there is no CUDA device or the build has no CUDA headers (KEV_CUDA_KERNELS).
struct CudaAllocatorMemory {
    long long allocated_bytes = 0;
    long long reserved_bytes = 0;
    long long peak_allocated_bytes = 0;
    long long peak_reserved_bytes = 0;
};
std::optional<CudaAllocatorMemory> cuda_allocator_memory();
void reset_cuda_peak_memory();  // no-op where cuda_allocator_memory() is empty

// The VRAM gauge's figures: Kev's weights and KV cache (counted by Kev), activations
// and scratch (the rest of what the allocator hands out), the allocator's reserve not
// in use, and the device's used and total bytes as the driver (nvidia-smi) counts them.
struct VramBreakdown {
    long long weights = 0, kv_cache = 0, activations = 0, reserved_unused = 0;
    long long device_used = 0, device_total = 0;
};
std::optional<VramBreakdown> vram_breakdown(long long weight_bytes, long long kv_cache_bytes);

// The built-in model (SmolLM2-135M-Instruct, Q4_1 GGUF) placed by packaging/setup.sh.
// The environment variable KEV_BUILTIN_MODEL overrides the configured location.
std::string builtin_model_path();

// The demo LoRA adapter for the built-in model (resources/adapters/smollm2-135m-capitals:
// answers in capital letters). The environment variable KEV_DEMO_ADAPTER overrides it.
std::string demo_adapter_path();

const char* to_string(Device device);

}  // namespace kev
