// libtorch's CUDA library, opened at run time (see kev_torch_cpu in the top-level
// CMakeLists.txt): the engine links libtorch's CPU part only, so a process that never
// uses a GPU never loads cuBLAS, cuDNN and the rest.
#pragma once

#include <string>

namespace kev {

namespace cuda {
struct Plugin;
}

// Opens libtorch_cuda.so (and, in builds with Kev's CUDA kernels, libkev_cuda.so) the
// first time it is called, where NVIDIA's driver (libcuda.so.1) is present; later calls
// return the first answer. True when libtorch's CUDA library is loaded, which says
// nothing yet of a device: torch::cuda::is_available() answers that (engine_info()).
bool load_cuda_runtime();

// What load_cuda_runtime() did, in words ("not tried" before it is called).
std::string cuda_runtime_status();

// Kev's CUDA kernels and calls (cuda/plugin.h); null where the build has none or they
// could not be opened (cuda_runtime_status() says why).
const cuda::Plugin* cuda_plugin();

// open_cuda_libraries_without_driver() and cuda_kernels_loaded(): kev/engine_info.h.

}  // namespace kev
