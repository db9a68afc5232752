// The fixed order of the CUDA 4-bit product, written once for both sides: the CUDA
// kernels (engine/src/cuda/linear_kernels.cu) and their CPU twin (quant_cuda.cpp) call these
// functions, so the twin computes the kernels' bits and a GPU check can compare them
// exactly. No torch, no CUDA headers: plain arithmetic on floats and bit patterns.
//
// One output y[m][n] of y = x W^T, W in 4-bit blocks (kev/quant.h, row layout):
//   y = 0
//   for each slice of kSliceCols columns, in column order:
//       a = 0
//       for each block b of the slice:
//           s = 0;  for each element j of b, in column order:  s = fma(lut[q_j], x_j, s)
//           a = fma(s, d_b, a)
//           Q4_1 only: sx = 0; for each j: sx = sx + x_j;  a = fma(m_b, sx, a)
//       y = y + a
//   y = y + bias[n]   (when there is a bias)
// Every step depends on row m of x and row n of W only: not on how many rows share the
// call, nor on how the grid is cut (a decode call gives each slice its own thread block
// and adds the slices' sums in a second pass, a prompt call adds them in one thread:
// the same adds in the same order), so a card computes the same bits alone or in any
// pack, in a prompt or a decode step.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define KEV_HD __host__ __device__ __forceinline__
#define KEV_UNROLL _Pragma("unroll")
#else
#define KEV_HD inline
#define KEV_UNROLL
#endif

namespace kev::q4order {

// Columns per slice: the unit a decode call splits the reduction into (fixed by the
// format, never by the number of rows).
constexpr int kSliceCols = 256;

KEV_HD float bits_to_float(std::uint32_t bits) {
#if defined(__CUDA_ARCH__)
    return __uint_as_float(bits);
#else
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
#endif
}

// IEEE binary16 bits -> float, exactly (normals, subnormals, inf, nan).
KEV_HD float half_bits_to_float(std::uint16_t h) {
    const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
    std::uint32_t exp = (h >> 10) & 0x1fu;
    std::uint32_t man = h & 0x3ffu;
    std::uint32_t bits;
    if (exp == 0x1fu) {
        bits = sign | 0x7f800000u | (man << 13);
    } else if (exp != 0) {
        bits = sign | ((exp + 112u) << 23) | (man << 13);
    } else if (man == 0) {
        bits = sign;
    } else {
        // Subnormal: shift the mantissa up until its leading 1 is the implicit bit.
        exp = 113u;
        while ((man & 0x400u) == 0) {
            man <<= 1;
            --exp;
        }
        bits = sign | (exp << 23) | ((man & 0x3ffu) << 13);
    }
    return bits_to_float(bits);
}

KEV_HD float bf16_bits_to_float(std::uint16_t b) {
    return bits_to_float(static_cast<std::uint32_t>(b) << 16);
}

// Element j (0..31) of a 32-element group of codes (16 bytes): ggml's packing, byte j
// holds element j in its low nibble and element j + 16 in its high nibble.
KEV_HD int code_of(const std::uint8_t* group, int j) {
    return j < 16 ? (group[j] & 0x0f) : (group[j - 16] >> 4);
}

// The block's weights before scaling: wv[j] = lut[q_j] for its `block` elements (a
// multiple of 32); `codes` points at the block's block/2 bytes.
KEV_HD void block_values(const std::uint8_t* codes, const float* lut, float* wv, int block) {
    for (int g = 0; g < block; g += 32) {
        KEV_UNROLL
        for (int j = 0; j < 32; ++j) wv[g + j] = lut[code_of(codes + g / 2, j)];
    }
}

// The same from a 32-element group held as four little-endian 32-bit words (how the
// kernels keep the codes in registers): element j is byte j % 16's low (j < 16) or
// high nibble.
KEV_HD void group_values(const std::uint32_t words[4], const float* lut, float* wv) {
    KEV_UNROLL
    for (int j = 0; j < 16; ++j) {
        const std::uint32_t byte = (words[j / 4] >> (8 * (j % 4))) & 0xffu;
        wv[j] = lut[byte & 0x0fu];
        wv[j + 16] = lut[byte >> 4];
    }
}

// s = sum of wv[j] * x[j] over the block, as an fma chain in column order.
KEV_HD float block_dot(const float* wv, const float* x, int block) {
    float s = 0.0f;
    KEV_UNROLL
    for (int j = 0; j < block; ++j) s = fmaf(wv[j], x[j], s);
    return s;
}

// The activations' sum over one block, for Q4_1's offset term: plain adds in column order.
KEV_HD float block_x_sum(const float* x, int block) {
    float sx = 0.0f;
    for (int j = 0; j < block; ++j) sx = sx + x[j];
    return sx;
}

// acc after one block: its scaled sum, and for Q4_1 the offset times the block's x sum.
KEV_HD float accumulate(float acc, float s, float d, bool has_min, float m, float sx) {
    acc = fmaf(s, d, acc);
    return has_min ? fmaf(m, sx, acc) : acc;
}

// One whole output, in the order above: row n's codes (cols/2 bytes), its scales and
// mins (cols/block each; mins null but for Q4_1) and row m of x as floats. The CPU
// twin of the kernels.
KEV_HD float output(const std::uint8_t* codes, const std::uint16_t* scales, const std::uint16_t* mins,
                    const float* lut, const float* x, std::int64_t cols, int block) {
    float wv[64];
    float y = 0.0f;
    for (std::int64_t c0 = 0; c0 < cols; c0 += kSliceCols) {
        const std::int64_t c1 = c0 + kSliceCols < cols ? c0 + kSliceCols : cols;
        float a = 0.0f;
        for (std::int64_t c = c0; c < c1; c += block) {
            const std::int64_t b = c / block;
            block_values(codes + c / 2, lut, wv, block);
            const float s = block_dot(wv, x + c, block);
            const float m = mins ? half_bits_to_float(mins[b]) : 0.0f;
            a = accumulate(a, s, half_bits_to_float(scales[b]), mins != nullptr, m, mins ? block_x_sum(x + c, block) : 0.0f);
        }
        y = y + a;
    }
    return y;
}

}  // namespace kev::q4order
