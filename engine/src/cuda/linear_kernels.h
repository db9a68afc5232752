// Kev's CUDA kernels for linear layers, their launchers: plain C++ (no torch, no CUDA
// headers), so the torch side (model/quant_cuda.cpp, model/linear_cuda.cpp) and the .cu
// file share one small interface. Built only when CMake finds nvcc (KEV_CUDA_KERNELS);
// model/q4_order.h says what the fixed-order 4-bit kernel computes, bit for bit.
#pragma once

#include <cstdint>

namespace kev::cuda {

enum class Act : int { F32 = 0, F16 = 1, BF16 = 2 };  // the activations' element type

// A 4-bit matrix in device memory, row layout (kev/quant.h).
struct Q4View {
    const std::uint8_t* codes = nullptr;    // [rows * cols / 2]
    const std::uint16_t* scales = nullptr;  // [rows * cols / block] fp16 bits
    const std::uint16_t* mins = nullptr;    // the same, Q4_1 only; else null
    std::int64_t rows = 0;
    std::int64_t cols = 0;  // a multiple of block
    int block = 32;         // 32 or 64
    float lut[16] = {};
};

// y [M, rows] (fp32, device) = x [M, cols] (device, type `act`) W^T (+ bias, fp32 [rows]
// or null), on `stream` (a cudaStream_t), by the fixed-order kernel (model/q4_order.h)
// or, with `tiles`, the tensor-core form: for fp16 / bf16 activations, per 4-bit block
// a 64 x 64 tile of (x rows) x (weight rows) multiplied by WMMA from the activations as
// they are and the codes' values in the activations' type (Q4_0/Q4_1 codes are small
// integers: exact; NF4's codebook rounded once), the block's fp32 sums then scaled in
// fp32, blocks and slices added in the same fixed order. Either way every output
// depends on its own row of x and of W only, so rows alone == rows in any pack; only
// the fixed-order kernel equals the CPU twin to the bit (the tensor cores sum in their
// own order). `partials` holds q4_partials_floats(w, M, tiles) floats (may be null when
// that is 0). Returns null, or what went wrong (a CUDA error's text).
std::int64_t q4_partials_floats(const Q4View& w, std::int64_t M, bool tiles);
const char* q4_linear(const Q4View& w, const void* x, Act act, std::int64_t M, const float* bias, float* y,
                      float* partials, void* stream, bool tiles);

// Dense fp16 / bf16 weights by the same tensor-core tiles (no scales): y [M, rows] fp32
// = x [M, cols] W^T (+ bias), W [rows, cols] in the activations' type, cols a multiple
// of 16; WMMA sums per 256-column slice, the slices added in order, so rows alone ==
// rows in any pack (cuBLAS chooses its kernel, and its reduction order, by the shape).
// Opt-in (KEV_CUDA_DENSE=tiles) until a GPU check has measured it.
std::int64_t dense_tile_partials_floats(std::int64_t rows, std::int64_t cols, std::int64_t M);
const char* dense_linear_tiles(const void* w, std::int64_t rows, std::int64_t cols, const void* x, Act act,
                               std::int64_t M, const float* bias, float* y, float* partials, void* stream);

// Rows of x up to which q4_linear splits each row's reduction over thread blocks (the
// decode form); more rows run one thread per output. Both compute the same bits.
constexpr std::int64_t kQ4SplitMaxRows = 16;

}  // namespace kev::cuda
