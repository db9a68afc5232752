// Dense fp16 / bf16 linear layers on CUDA by Kev's tensor-core tiles
// (engine/src/cuda/linear_kernels.cu), when chosen (kev/weights.h: CudaDenseForm), and
// the choice of both CUDA forms (dense and 4-bit).
#include "model/linear_cuda.h"

#include <atomic>
#include <cstdlib>
#include <string>

#include <ATen/ATen.h>

#include "kev/error.h"
#include "kev/quant.h"

#include "cuda/plugin.h"
#include "cuda_runtime.h"

namespace kev {

// The forms chosen (kev/quant.h, kev/weights.h): "tiles" in the environment at start,
// or a setter (the benchmarks compare both in one process).
namespace {
bool tiles_asked(const char* variable) {
    const char* e = std::getenv(variable);
    return e && std::string(e) == "tiles";
}
std::atomic<bool> q4_tiles{tiles_asked("KEV_CUDA_Q4")};
std::atomic<bool> dense_tiles{tiles_asked("KEV_CUDA_DENSE")};
}  // namespace

CudaQ4Form cuda_q4_form() { return q4_tiles.load() ? CudaQ4Form::Tiles : CudaQ4Form::Fma; }
void set_cuda_q4_form(CudaQ4Form form) { q4_tiles.store(form == CudaQ4Form::Tiles); }
CudaDenseForm cuda_dense_form() { return dense_tiles.load() ? CudaDenseForm::Tiles : CudaDenseForm::Torch; }
void set_cuda_dense_form(CudaDenseForm form) { dense_tiles.store(form == CudaDenseForm::Tiles); }

bool cuda_dense_tiles_apply(const at::Tensor& x, const at::Tensor& weight) {
    return quant_cuda_kernels_built() && cuda_dense_form() == CudaDenseForm::Tiles && x.is_cuda() &&
           weight.is_cuda() && x.dim() == 2 && weight.dim() == 2 && x.size(1) == weight.size(1) &&
           weight.size(1) % 16 == 0 && weight.size(0) > 0 && x.scalar_type() == weight.scalar_type() &&
           (x.scalar_type() == at::kHalf || x.scalar_type() == at::kBFloat16);
}

at::Tensor cuda_dense_tiles(const at::Tensor& x_in, const at::Tensor& weight_in, const at::Tensor& bias) {
#if defined(KEV_CUDA_KERNELS)
    const cuda::Plugin* plugin = cuda_plugin();
    if (plugin == nullptr) throw Error(ErrorCode::Unsupported, "dense CUDA tiles: " + cuda_runtime_status());
    const at::Tensor x = x_in.contiguous(), w = weight_in.contiguous();
    const std::int64_t M = x.size(0), N = w.size(0), K = w.size(1);
    const at::TensorOptions f32 = x.options().dtype(at::kFloat);
    at::Tensor y = at::empty({M, N}, f32);
    const std::int64_t np = plugin->dense_tile_partials_floats(N, K, M);
    at::Tensor partials = np > 0 ? at::empty({np}, f32) : at::Tensor();
    const at::Tensor b = bias.defined() ? bias.to(at::kFloat).contiguous() : bias;
    const char* err = plugin->dense_linear_tiles(
        w.data_ptr(), N, K, x.data_ptr(), x.scalar_type() == at::kHalf ? cuda::Act::F16 : cuda::Act::BF16, M,
        b.defined() ? b.data_ptr<float>() : nullptr, y.data_ptr<float>(),
        partials.defined() ? partials.data_ptr<float>() : nullptr, plugin->current_stream(x.device().index()));
    if (err) throw Error(ErrorCode::Unsupported, std::string("dense CUDA kernel: ") + err);
    return y;
#else
    (void)x_in;
    (void)weight_in;
    (void)bias;
    throw Error(ErrorCode::Unsupported, "dense CUDA tiles: this build has no CUDA kernels");
#endif
}

}  // namespace kev
