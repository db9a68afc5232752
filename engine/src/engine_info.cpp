#include "kev/engine_info.h"

#include <cstdlib>

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/Version.h>
#include <torch/cuda.h>
#include <torch/version.h>

namespace kev {

EngineInfo engine_info() {
    EngineInfo info;
    info.kev_version = KEV_VERSION;
    info.torch_version = TORCH_VERSION;
    info.cpu_capability = at::get_cpu_capability();
    info.cpu_threads = at::get_num_threads();
    info.cuda_available = torch::cuda::is_available();
    info.cuda_device_count = info.cuda_available ? static_cast<int>(torch::cuda::device_count()) : 0;
    return info;
}

std::string builtin_model_path() {
    if (const char* env = std::getenv("KEV_BUILTIN_MODEL"); env && *env) return env;
    return KEV_BUILTIN_MODEL_PATH;
}

const char* to_string(Device device) {
    switch (device) {
        case Device::Cpu: return "cpu";
        case Device::Cuda: return "cuda";
    }
    return "?";
}

}  // namespace kev
