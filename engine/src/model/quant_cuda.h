// The CUDA form of quant_linear (quant_cuda.cpp): x [M, cols] on CUDA, q's blocks on
// CUDA; the fp32 result. Throws Unsupported in a build without the CUDA kernels.
#pragma once

#include <ATen/core/Tensor.h>

#include "kev/quant.h"

namespace kev {

at::Tensor quant_cuda_linear(const at::Tensor& x, const QuantMatrix& q, const at::Tensor& bias);

}  // namespace kev
