// 4-bit on CUDA: moving blocks to the device, calling the kernels of
// engine/src/cuda/linear_kernels.cu (built when CMake finds nvcc), and their CPU twin.
#include <cstring>
#include <string>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "kev/engine_info.h"
#include "kev/error.h"
#include "kev/quant.h"
#include "model/q4_order.h"
#include "model/quant_cuda.h"

#include "cuda/plugin.h"
#include "cuda_runtime.h"

namespace kev {

bool quant_cuda_kernels_built() {
#if defined(KEV_CUDA_KERNELS)
    return true;
#else
    return false;
#endif
}

QuantMatrix quant_to_cuda(QuantMatrix q) {
    if (!quant_cuda_kernels_built())
        throw Error(ErrorCode::Unsupported,
                    "4-bit on CUDA: this build has no CUDA kernels (nvcc was not found when it was configured)");
    if (!engine_info().cuda_available)
        throw Error(ErrorCode::Unsupported, "4-bit on CUDA: this libtorch has no CUDA or no CUDA device is present (" +
                                                cuda_runtime_status() + ")");
    if (cuda_plugin() == nullptr) throw Error(ErrorCode::Unsupported, "4-bit on CUDA: " + cuda_runtime_status());
    if (q.on_cuda()) return q;
    if (q.format == QuantFormat::Q4_K || q.byte_codes())
        throw Error(ErrorCode::Unsupported, std::string("4-bit on CUDA: ") + to_string(q.format) +
                                                " blocks have no CUDA kernel (the loader makes NF4 of them)");
    if (q.block != 32 && q.block != 64)
        throw Error(ErrorCode::Unsupported, "4-bit on CUDA: blocks of " + std::to_string(q.block) + " elements");
    QuantMatrix h = row_layout(q);
    const at::TensorOptions cuda = at::TensorOptions().device(at::kCUDA, 0);
    auto upload = [&](const void* data, std::int64_t n, at::ScalarType type) {
        at::Tensor host = at::empty({n}, at::TensorOptions().dtype(type));
        if (n > 0) std::memcpy(host.data_ptr(), data, static_cast<std::size_t>(host.nbytes()));
        return host.to(cuda);
    };
    auto blocks = std::make_shared<QuantCudaBlocks>();
    blocks->codes = upload(h.codes.data(), static_cast<std::int64_t>(h.codes.size()), at::kByte);
    blocks->scales = upload(h.scales.data(), static_cast<std::int64_t>(h.scales.size()), at::kShort);
    if (!h.mins.empty()) blocks->mins = upload(h.mins.data(), static_cast<std::int64_t>(h.mins.size()), at::kShort);
    QuantMatrix out;  // metadata only; the bytes now live on the device
    out.format = h.format;
    out.rows = h.rows;
    out.cols = h.cols;
    out.block = h.block;
    out.lut = h.lut;
    out.cuda = std::move(blocks);
    return out;
}

at::Tensor quant_linear_fixed_order(const at::Tensor& x_in, const QuantMatrix& q_in, const at::Tensor& bias) {
    if (x_in.dim() != 2 || x_in.size(1) != q_in.cols)
        throw Error(ErrorCode::InvalidArgument, "quant_linear_fixed_order: x must be [M, cols]");
    if (q_in.format == QuantFormat::Q4_K || q_in.byte_codes())
        throw Error(ErrorCode::InvalidArgument, std::string("quant_linear_fixed_order: the CUDA kernels' twin has no ") +
                                                    to_string(q_in.format) + " form");
    const QuantMatrix q = row_layout(q_in);
    const at::Tensor x = x_in.to(at::kCPU).to(at::kFloat).contiguous();  // exact for every float dtype
    const std::int64_t M = x.size(0), N = q.rows, I = q.cols, bpr = q.blocks_per_row();
    at::Tensor y = at::empty({M, N}, at::kFloat);
    const at::Tensor b = bias.defined() ? bias.to(at::kCPU).to(at::kFloat).contiguous() : bias;
    const float* xp = x.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    at::parallel_for(0, N, 16, [&](std::int64_t n0, std::int64_t n1) {
        for (std::int64_t n = n0; n < n1; ++n) {
            const std::uint16_t* mins = q.mins.empty() ? nullptr : q.mins.data() + n * bpr;
            for (std::int64_t m = 0; m < M; ++m) {
                float v = q4order::output(q.codes.data() + n * I / 2, q.scales.data() + n * bpr, mins, q.lut.data(),
                                          xp + m * I, I, static_cast<int>(q.block));
                if (b.defined()) v = v + b.data_ptr<float>()[n];
                yp[m * N + n] = v;
            }
        }
    });
    return y;
}

// y = x W^T (+ bias) for x [M, cols] on CUDA and q on CUDA; fp32 result (the caller
// rounds it to the activations' dtype). Called by quant_linear (linear_q4.cpp).
at::Tensor quant_cuda_linear(const at::Tensor& x_in, const QuantMatrix& q, const at::Tensor& bias) {
#if defined(KEV_CUDA_KERNELS)
    if (!q.on_cuda()) throw Error(ErrorCode::InvalidArgument, "4-bit on CUDA: the weight's blocks are in host memory");
    const cuda::Plugin* plugin = cuda_plugin();
    if (plugin == nullptr) throw Error(ErrorCode::Unsupported, "4-bit on CUDA: " + cuda_runtime_status());
    const at::ScalarType st = x_in.scalar_type();
    const at::Tensor x = (st == at::kFloat || st == at::kHalf || st == at::kBFloat16 ? x_in : x_in.to(at::kFloat))
                             .contiguous();
    const std::int64_t M = x.size(0);
    cuda::Q4View v;
    v.codes = q.cuda->codes.data_ptr<std::uint8_t>();
    v.scales = reinterpret_cast<const std::uint16_t*>(q.cuda->scales.data_ptr<std::int16_t>());
    v.mins = q.cuda->mins.defined() ? reinterpret_cast<const std::uint16_t*>(q.cuda->mins.data_ptr<std::int16_t>())
                                    : nullptr;
    v.rows = q.rows;
    v.cols = q.cols;
    v.block = static_cast<int>(q.block);
    for (int i = 0; i < 16; ++i) v.lut[i] = q.lut[static_cast<std::size_t>(i)];
    const cuda::Act act = x.scalar_type() == at::kHalf ? cuda::Act::F16
                          : x.scalar_type() == at::kBFloat16 ? cuda::Act::BF16
                                                             : cuda::Act::F32;
    const at::TensorOptions f32 = x.options().dtype(at::kFloat);
    at::Tensor y = at::empty({M, q.rows}, f32);
    const bool tiles = act != cuda::Act::F32 && cuda_q4_form() == CudaQ4Form::Tiles;
    const std::int64_t np = plugin->q4_partials_floats(v, M, tiles);
    at::Tensor partials = np > 0 ? at::empty({np}, f32) : at::Tensor();
    const at::Tensor b = bias.defined() ? bias.to(at::kFloat).contiguous() : bias;
    const char* err = plugin->q4_linear(v, x.data_ptr(), act, M, b.defined() ? b.data_ptr<float>() : nullptr,
                                        y.data_ptr<float>(), partials.defined() ? partials.data_ptr<float>() : nullptr,
                                        plugin->current_stream(x.device().index()), tiles);
    if (err) throw Error(ErrorCode::Unsupported, std::string("4-bit CUDA kernel: ") + err);
    return y;
#else
    (void)x_in;
    (void)q;
    (void)bias;
    throw Error(ErrorCode::Unsupported, "4-bit on CUDA: this build has no CUDA kernels");
#endif
}

}  // namespace kev
