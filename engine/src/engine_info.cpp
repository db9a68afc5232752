#include "kev/engine_info.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <vector>
#include <dlfcn.h>

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/Version.h>
#include <torch/cuda.h>
#include <torch/version.h>

#include "cuda_runtime.h"

namespace kev {

// ATen's parallel_for is a header template whose threads come from `#pragma omp
// parallel`: compiled without OpenMP it runs on the calling thread alone, and every
// kernel of Kev's with it.
int kernel_threads() {
    const int n = at::get_num_threads();
    std::vector<std::atomic<bool>> seen(static_cast<std::size_t>(std::max(1, n)));
    at::parallel_for(0, std::int64_t{64} * n, 1, [&](std::int64_t, std::int64_t) {
        const int t = at::get_thread_num();
        if (t >= 0 && t < n) seen[static_cast<std::size_t>(t)].store(true);
    });
    int used = 0;
    for (const auto& s : seen) used += s.load() ? 1 : 0;
    return used;
}

EngineInfo engine_info() {
    EngineInfo info;
    info.kev_version = KEV_VERSION;
    info.torch_version = TORCH_VERSION;
    info.cpu_capability = at::get_cpu_capability();
    info.cpu_threads = at::get_num_threads();
    // libtorch's CUDA library is opened here, the first time (cuda_runtime.h): without
    // it libtorch knows no CUDA device.
    info.cuda_available = load_cuda_runtime() && torch::cuda::is_available();
    info.cuda_device_count = info.cuda_available ? static_cast<int>(torch::cuda::device_count()) : 0;
    info.cuda_libraries = cuda_runtime_status();
    return info;
}

std::optional<DeviceMemory> cuda_memory() {
    if (!load_cuda_runtime() || !torch::cuda::is_available()) return std::nullopt;
    // cudaMemGetInfo from the CUDA runtime libtorch already loaded: looked up at run time
    // so the engine builds without CUDA headers (see the top-level CMakeLists.txt).
    using MemGetInfo = int (*)(std::size_t*, std::size_t*);
    auto fn = reinterpret_cast<MemGetInfo>(::dlsym(RTLD_DEFAULT, "cudaMemGetInfo"));
    if (!fn) return std::nullopt;
    std::size_t free_bytes = 0, total_bytes = 0;
    if (fn(&free_bytes, &total_bytes) != 0 || total_bytes == 0) return std::nullopt;
    return DeviceMemory{static_cast<long long>(total_bytes - free_bytes), static_cast<long long>(total_bytes)};
}

std::string builtin_model_path() {
    if (const char* env = std::getenv("KEV_BUILTIN_MODEL"); env && *env) return env;
    return KEV_BUILTIN_MODEL_PATH;
}

std::string demo_adapter_path() {
    if (const char* env = std::getenv("KEV_DEMO_ADAPTER"); env && *env) return env;
    return KEV_DEMO_ADAPTER_PATH;
}

const char* to_string(Device device) {
    switch (device) {
        case Device::Cpu: return "cpu";
        case Device::Cuda: return "cuda";
    }
    return "?";
}

}  // namespace kev
