// A bf16 matrix-vector kernel for decode steps (few rows of activations, a large
// weight matrix): y[M, O] = x[M, I] W[O, I]^T (+ b), bf16 in and out, fp32 sums.
//
// Why: a decode step is memory-bound, and libtorch 2.11's bf16 linear for M = 1 on
// CPU runs at a fraction of the memory bandwidth (measured: no faster than fp32 with
// half the bytes). This kernel streams each weight row once for all M rows of x with
// AVX512-BF16 dot products (vdpbf16ps), threads splitting the output rows.
#pragma once

#include <ATen/core/Tensor.h>

namespace kev {

// True when the CPU has AVX512-BF16 and the shapes suit the kernel: x [M, I] with
// M <= kMaxRows, I a multiple of 32, bf16 contiguous CPU tensors.
constexpr std::int64_t kBf16GemvMaxRows = 16;
bool bf16_gemv_applies(const at::Tensor& x, const at::Tensor& weight);

// Requires bf16_gemv_applies(x, weight). bias may be undefined.
at::Tensor bf16_gemv(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);

}  // namespace kev
