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
};

EngineInfo engine_info();

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

// The built-in model (SmolLM2-135M-Instruct, Q4_1 GGUF) placed by packaging/setup.sh.
// The environment variable KEV_BUILTIN_MODEL overrides the configured location.
std::string builtin_model_path();

// The demo LoRA adapter for the built-in model (resources/adapters/smollm2-135m-capitals:
// answers in capital letters). The environment variable KEV_DEMO_ADAPTER overrides it.
std::string demo_adapter_path();

const char* to_string(Device device);

}  // namespace kev
