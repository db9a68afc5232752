// A 4-bit block's scale and offset as floats, for every format (kev/quant.h). NF4, Q4_0
// and Q4_1 keep them as fp16 per block. Q4_K keeps its file's two levels: fp16 d and
// dmin per 256 columns and 6-bit factors per 32-column block, and a block's scale is
// d * sc and its offset -(dmin * m), both exact in fp32 (11 + 6 significant bits), so
// lut[q] * scale + offset is ggml's d1 * q - m1 to the last bit.
#pragma once

#include <cstdint>

#include "half.h"
#include "kev/quant.h"

namespace kev {

// s: the block's index in the row layout (row * blocks_per_row + block).
inline float block_scale(const QuantMatrix& q, std::int64_t s) {
    if (q.sub_scales.empty()) return fp16_to_float(q.scales[static_cast<std::size_t>(s)]);
    return fp16_to_float(q.scales[static_cast<std::size_t>(s >> 3)]) * static_cast<float>(q.sub_scales[static_cast<std::size_t>(s)]);
}

inline float block_offset(const QuantMatrix& q, std::int64_t s) {
    if (q.mins.empty()) return 0.0f;
    if (q.sub_mins.empty()) return fp16_to_float(q.mins[static_cast<std::size_t>(s)]);
    return -(fp16_to_float(q.mins[static_cast<std::size_t>(s >> 3)]) * static_cast<float>(q.sub_mins[static_cast<std::size_t>(s)]));
}

}  // namespace kev
