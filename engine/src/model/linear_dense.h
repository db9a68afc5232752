// The fixed-order dense kernels: y[M, O] = x[M, I] W[O, I]^T (+ b) for fp32, bf16 and
// fp16 weights, one arithmetic on three instruction sets.
//
// Why: libtorch's GEMM (MKL/oneDNN) blocks the reduction differently for different
// numbers of rows, so a row's result moved in the last bits with the pack around it
// (issue: --verify-isolation failed on an AVX2 CPU). Here every output is computed the
// same way whatever M, the thread split or the instruction set:
//
//   lane[j] = 0                                   j = 0..15
//   for i = 0, 1, ..., I-1:  lane[L(i)] = fma(x[m, i], float(w[o, i]), lane[L(i)])
//     L(i) = i % 16 for fp32 and fp16 weights, and for the inputs past the last whole
//     16 (the tail) of every dtype;
//     L(i) = (i % 2 ? 8 : 0) + (i % 16) / 2 for bf16 weights in whole 16s: even inputs
//     in lanes 0-7, odd ones in lanes 8-15. Sixteen bf16 weights are one 32-byte load
//     that becomes two fp32 vectors with one shift (even) and one mask (odd), where the
//     in-order lanes cost a widening shuffle and a shift per 8 weights; the SIMD forms
//     read x with each 16 permuted the same way once per call.
//   s = ((lane[0..7] + lane[8..15]) -> 4 -> 2 -> 1)   a fixed halving tree:
//       s8[j] = lane[j] + lane[j+8]; s4[j] = s8[j] + s8[j+4]; s2[j] = s4[j] + s4[j+2];
//       s = s2[0] + s2[1]
//   y[m, o] = round_to_y_dtype(s + float(b[o]))   (no bias: s)
//
// Activations enter as fp32 (bf16/fp16 converted exactly), weights are widened exactly
// (bf16 by a 16-bit shift or mask, fp16 by F16C), every multiply-add is one fused rounding. The
// AVX-512 kernel keeps the 16 lanes in one register, AVX2 in two, the scalar twin in an
// array: the three give the same bits (tst_linear checks it), and a row's result never
// depends on the other rows (a tile of rows only shares weight loads).
#pragma once

#include <ATen/core/Tensor.h>

#include "kev/cpu_kernels.h"

namespace kev {

// CPU tensors, x [M, I] and weight [O, I] of a float dtype, weight contiguous.
bool dense_kernel_applies(const at::Tensor& x, const at::Tensor& weight);
// The widest dense family under the ceiling (Avx512, Avx2 or Scalar; AMX has none).
Isa dense_kernel_isa();
const char* dense_kernel_name();
// y has x's dtype. isa must be Scalar, Avx2 or Avx512 and supported (else Unsupported).
at::Tensor dense_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, Isa isa);

}  // namespace kev
