// Dense fp16 / bf16 linear layers on CUDA by Kev's tensor-core tiles (linear_cuda.cpp).
#pragma once

#include <ATen/core/Tensor.h>

#include "kev/weights.h"

namespace kev {

// Whether the tiles take y = x W^T for these operands now: the form chosen, a build
// with the CUDA kernels, x [M, K] and W [N, K] on CUDA in one half dtype, K % 16 == 0.
bool cuda_dense_tiles_apply(const at::Tensor& x, const at::Tensor& weight);
// The product with fp32 sums (+ bias), [M, N] fp32.
at::Tensor cuda_dense_tiles(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);

}  // namespace kev
