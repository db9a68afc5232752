// bf16 linear kernels: y[M, O] = x[M, I] W[O, I]^T (+ b), bf16 in and out, fp32 sums.
//
// Why: a decode step is memory-bound, and libtorch 2.11's bf16 linear on CPU runs at a
// fraction of the memory bandwidth (measured here: 1.5-4 GB/s at 1-16 rows, against
// 12-16 GB/s for these kernels on one core). Two kernels, threads splitting the output
// rows:
//   - AMX (tile multiply, 16x16x32 per instruction): the weight is read in place, each
//     weight tile once per 16 activation rows, so 1 and 16 rows cost the same;
//   - AVX512-BF16 (vdpbf16ps), for CPUs without AMX: compute-bound past a few rows
//     (measured ~16 GFLOP/s per core here), so only for decode shapes.
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

#include "kev/cpu_kernels.h"

namespace kev {

// Whether the bf16 kernels of this file take x [M, I] and weight [O, I]: bf16 CPU
// tensors, I a multiple of 32, a contiguous weight.
bool bf16_kernel_applies(const at::Tensor& x, const at::Tensor& weight);

// AMX building blocks, shared with the 4-bit kernel (linear_q4.cpp). A tile is 16 rows
// of 32 bf16 (64 bytes); tiles 0-7 are configured 16 x 64 bytes by amx_load_tile_config,
// which every thread calls before its first tile instruction.
bool amx_ready();  // CPU has AMX-BF16 and the OS granted the tile state
// The 64-byte operand of ldtilecfg (palette 1): bytes per row and rows of tiles 0-15.
// Keep it in static storage: GCC does not see ldtilecfg read a local one.
struct alignas(64) AmxTileConfig {
    std::uint8_t palette = 1;
    std::uint8_t start_row = 0;
    std::uint8_t reserved[14] = {};
    std::uint16_t colsb[16] = {};
    std::uint8_t rows[16] = {};
};
void amx_load_tile_config();
// x [M, I] (I a multiple of 32) -> the B operand: [ceil(M/16)][I/32][16 pairs][16 rows][2].
std::vector<std::uint16_t> amx_pack_activations(const std::uint16_t* x, std::int64_t M, std::int64_t I);
// A C tile [16 outputs][16 rows] fp32 -> `rows` rows of 16 bf16 outputs at y (row stride
// ldy), plus the bf16 bias of those 16 outputs when bias is not null.
void amx_store_tile(const float* c, std::int64_t rows, const std::uint16_t* bias, std::uint16_t* y, std::int64_t ldy);

// y = x W^T (+ bias) with `kernel` (Amx or Avx512Bf16, available, and
// bf16_kernel_applies). bias may be undefined. Every row is computed alike whatever M:
// AMX pads a partial 16-row block with zeros; vdpbf16ps handles rows in groups of up to 4
// with one fixed order per row.
// `out` is the result's dtype: bf16 (rounded once) or fp32 (the sums as they are).
at::Tensor bf16_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, Bf16Kernel kernel,
                       at::ScalarType out = at::kBFloat16);

}  // namespace kev
