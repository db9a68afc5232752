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
    int kernel_threads = 0;        // threads Kev's own kernels run on: should equal cpu_threads
                                   // (1 would mean the engine was built without OpenMP)
    bool cuda_available = false;   // libtorch has CUDA and a device is present
    int cuda_device_count = 0;
};

EngineInfo engine_info();

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
