// The byte kernels: y = x W^T for matrices whose codes are whole bytes (Q8_0, kev/quant.h).
#pragma once

#include <ATen/core/Tensor.h>

#include "kev/quant.h"

namespace kev {

// x [M, cols] (1 <= M <= kQuantGemvMaxRows, any float dtype, CPU), w byte-coded in row
// layout; y [M, rows] fp32 (+ bias). `kernel` must be one this CPU runs.
at::Tensor byte_gemv(const at::Tensor& x, const QuantMatrix& w, const at::Tensor& bias, QuantKernel kernel);

}  // namespace kev
