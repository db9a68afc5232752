// libtorch's CUDA library and Kev's CUDA module, opened on demand (cuda_runtime.h).
#include "cuda_runtime.h"

#include <atomic>
#include <mutex>
#include <dlfcn.h>

#include <ATen/Context.h>

#include "cuda/plugin.h"
#include "kev/engine_info.h"

namespace kev {

namespace {

// Written under runtime_mutex(); tried, loaded and plugin are also read without it (the
// GPU's linear layers ask for the plugin on every call).
struct Runtime {
    std::atomic<bool> tried{false};
    std::atomic<bool> loaded{false};
    std::string status = "not tried";
    std::atomic<const cuda::Plugin*> plugin{nullptr};
};

std::mutex& runtime_mutex() {
    static std::mutex m;
    return m;
}

Runtime& runtime() {
    static Runtime r;
    return r;
}

// The folder of the shared object that holds this address.
std::string folder_of(const void* address) {
    Dl_info info{};
    if (::dladdr(address, &info) == 0 || info.dli_fname == nullptr) return {};
    const std::string path = info.dli_fname;
    const auto slash = path.rfind('/');
    return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
}

std::string last_dl_error() {
    const char* e = ::dlerror();
    return e ? e : "unknown error";
}

void open_libraries(Runtime& r, bool check_driver) {
    // Without NVIDIA's driver no device can run: do not load some 350 MB of libraries
    // to learn it. (The driver library stays loaded; libtorch's CUDA runtime opens it anyway.)
    if (check_driver && ::dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL) == nullptr) {
        r.status = "no NVIDIA driver (libcuda.so.1 not found): libtorch's CUDA libraries not loaded";
        return;
    }
    // libtorch_cuda.so sits beside libtorch_cpu.so, which holds at::globalContext. Global,
    // as the torch package loads it: it registers its CUDA kernels with libtorch_cpu's
    // dispatcher as it loads.
    const std::string torch_dir = folder_of(reinterpret_cast<const void*>(&at::globalContext));
    const std::string torch_cuda = torch_dir + "/libtorch_cuda.so";
    if (::dlopen(torch_cuda.c_str(), RTLD_NOW | RTLD_GLOBAL) == nullptr) {
        r.status = "libtorch's CUDA library could not be opened: " + last_dl_error();
        return;
    }
    r.loaded = true;
    r.status = "libtorch's CUDA library loaded";
#if defined(KEV_CUDA_KERNELS)
    const std::string module = folder_of(reinterpret_cast<const void*>(&load_cuda_runtime)) + "/" + cuda::kPluginFile;
    void* handle = ::dlopen(module.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
        r.status += "; Kev's CUDA kernels could not be opened: " + last_dl_error();
        return;
    }
    using Entry = const cuda::Plugin* (*)();
    auto entry = reinterpret_cast<Entry>(::dlsym(handle, cuda::kPluginSymbol));
    if (entry == nullptr) {
        r.status += std::string("; ") + cuda::kPluginFile + " has no " + cuda::kPluginSymbol;
        return;
    }
    r.plugin = entry();
    r.status += std::string(", with Kev's CUDA kernels (") + cuda::kPluginFile + ")";
#endif
}

}  // namespace

bool load_cuda_runtime() {
    Runtime& r = runtime();
    if (r.tried) return r.loaded;
    std::lock_guard<std::mutex> lock(runtime_mutex());
    if (!r.tried) {
        open_libraries(r, true);
        r.tried = true;  // last: readers without the lock then see the whole answer
    }
    return r.loaded;
}

bool open_cuda_libraries_without_driver() {
    std::lock_guard<std::mutex> lock(runtime_mutex());
    Runtime& r = runtime();
    if (!r.loaded) {
        open_libraries(r, false);
        r.tried = true;
    }
    return r.loaded;
}

std::string cuda_runtime_status() {
    std::lock_guard<std::mutex> lock(runtime_mutex());
    return runtime().status;
}

const cuda::Plugin* cuda_plugin() { return runtime().plugin; }

bool cuda_kernels_loaded() {
    const cuda::Plugin* p = cuda_plugin();
    return p != nullptr && p->current_stream && p->q4_partials_floats && p->q4_linear &&
           p->dense_tile_partials_floats && p->dense_linear_tiles && p->allocator_stats && p->reset_peak_stats;
}

}  // namespace kev
