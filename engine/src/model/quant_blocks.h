// A 4-bit block's scale and offset as floats, for every format (kev/quant.h). NF4, Q4_0
// and Q4_1 keep them as fp16 per block. Q4_K keeps its file's two levels: fp16 d and
// dmin per 256 columns and 6-bit factors per 32-column block, and a block's scale is
// d * sc and its offset -(dmin * m), both exact in fp32 (11 + 6 significant bits), so
// lut[q] * scale + offset is ggml's d1 * q - m1 to the last bit. Q6_K keeps fp16 d per
// 256 columns and a signed 8-bit sc per 16-column block: its scale d * sc is exact too
// (11 + 7 bits), and so is a weight q * d * sc (|q| <= 32: 5 more bits, or a power of 2).
// Q5_K keeps Q4_K's tables; its weight q * scale + offset (q <= 31) rounds once.
#pragma once

#include <cstdint>

#include "half.h"
#include "kev/quant.h"

namespace kev {

// A two-level block's factor: Q4_K's 6-bit sc, Q6_K's signed byte.
inline float sub_scale(const QuantMatrix& q, std::size_t j) {
    const std::uint8_t b = q.sub_scales[j];
    return q.format == QuantFormat::Q6_K ? static_cast<float>(static_cast<std::int8_t>(b)) : static_cast<float>(b);
}

// log2 of the blocks per 256-column super-block of a two-level format (8 for Q4_K, 16 for
// Q6_K): a shift, not a division, in the kernels' per-block step.
inline int super_shift(const QuantMatrix& q) { return q.block == 16 ? 4 : 3; }

// s: the block's index in the row layout (row * blocks_per_row + block).
inline float block_scale(const QuantMatrix& q, std::int64_t s) {
    if (q.sub_scales.empty()) return fp16_to_float(q.scales[static_cast<std::size_t>(s)]);
    return fp16_to_float(q.scales[static_cast<std::size_t>(s >> super_shift(q))]) *
           sub_scale(q, static_cast<std::size_t>(s));
}

inline float block_offset(const QuantMatrix& q, std::int64_t s) {
    if (q.mins.empty()) return 0.0f;
    if (q.sub_mins.empty()) return fp16_to_float(q.mins[static_cast<std::size_t>(s)]);
    return -(fp16_to_float(q.mins[static_cast<std::size_t>(s >> super_shift(q))]) *
             static_cast<float>(q.sub_mins[static_cast<std::size_t>(s)]));
}

}  // namespace kev
