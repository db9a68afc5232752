// Decoders for ggml's block formats, written from the format descriptions:
//   Q4_0  [d:f16][16 bytes of nibbles]            x = (q - 8) * d
//   Q4_1  [d:f16][m:f16][16 bytes of nibbles]     x = q * d + m
//   Q5_0  [d:f16][qh:u32][16 bytes]               x = (q5 - 16) * d
//   Q5_1  [d:f16][m:f16][qh:u32][16 bytes]        x = q5 * d + m
//   Q8_0  [d:f16][32 x int8]                      x = q * d
// In the 32-element formats, byte j holds element j in its low nibble and element
// j + 16 in its high nibble. K-quants (Q4_K, Q5_K, Q6_K) work on 256-element super-blocks.
#include <cstdint>
#include <cstring>

#include "half.h"
#include "kev/error.h"
#include "kev/gguf.h"

namespace kev {

namespace {

void q4_0(const std::uint8_t* b, float* y) {
    const float d = fp16_to_float(load_u16(b));
    const std::uint8_t* qs = b + 2;
    for (int j = 0; j < 16; ++j) {
        y[j] = (static_cast<int>(qs[j] & 0x0f) - 8) * d;
        y[j + 16] = (static_cast<int>(qs[j] >> 4) - 8) * d;
    }
}

void q4_1(const std::uint8_t* b, float* y) {
    const float d = fp16_to_float(load_u16(b));
    const float m = fp16_to_float(load_u16(b + 2));
    const std::uint8_t* qs = b + 4;
    for (int j = 0; j < 16; ++j) {
        y[j] = static_cast<float>(qs[j] & 0x0f) * d + m;
        y[j + 16] = static_cast<float>(qs[j] >> 4) * d + m;
    }
}

void q5(const std::uint8_t* qh_p, const std::uint8_t* qs, float d, float m, int offset, float* y) {
    std::uint32_t qh;
    std::memcpy(&qh, qh_p, 4);
    for (int j = 0; j < 16; ++j) {
        const int hi0 = ((qh >> j) & 1u) << 4;
        const int hi1 = ((qh >> (j + 16)) & 1u) << 4;
        y[j] = static_cast<float>(((qs[j] & 0x0f) | hi0) - offset) * d + m;
        y[j + 16] = static_cast<float>(((qs[j] >> 4) | hi1) - offset) * d + m;
    }
}

void q8_0(const std::uint8_t* b, float* y) {
    const float d = fp16_to_float(load_u16(b));
    const auto* qs = reinterpret_cast<const std::int8_t*>(b + 2);
    for (int j = 0; j < 32; ++j) y[j] = qs[j] * d;
}

// Q4_K: [d:f16][dmin:f16][scales:12 bytes of packed 6-bit scale/min pairs][qs:128]
void scale_min_k4(int j, const std::uint8_t* q, std::uint8_t* sc, std::uint8_t* mn) {
    if (j < 4) {
        *sc = q[j] & 63;
        *mn = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
        *mn = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

void q4_k(const std::uint8_t* b, float* y) {
    const float d = fp16_to_float(load_u16(b));
    const float dmin = fp16_to_float(load_u16(b + 2));
    const std::uint8_t* scales = b + 4;
    const std::uint8_t* q = b + 16;
    int is = 0;
    for (int j = 0; j < 256; j += 64) {
        std::uint8_t sc, mn;
        scale_min_k4(is + 0, scales, &sc, &mn);
        const float d1 = d * sc, m1 = dmin * mn;
        scale_min_k4(is + 1, scales, &sc, &mn);
        const float d2 = d * sc, m2 = dmin * mn;
        for (int l = 0; l < 32; ++l) *y++ = d1 * (q[l] & 0x0f) - m1;
        for (int l = 0; l < 32; ++l) *y++ = d2 * (q[l] >> 4) - m2;
        q += 32;
        is += 2;
    }
}

// Q5_K: [d:f16][dmin:f16][scales:12][qh:32][qs:128]. Per 64 columns c: two blocks of 32,
// low nibbles of qs[32c ..] then high nibbles, the fifth bit of column l of the pair at
// bits 2c and 2c + 1 of qh[l]; x = d * sc * q - dmin * m as Q4_K.
void q5_k(const std::uint8_t* b, float* y) {
    const float d = fp16_to_float(load_u16(b));
    const float dmin = fp16_to_float(load_u16(b + 2));
    const std::uint8_t* scales = b + 4;
    const std::uint8_t* qh = b + 16;
    const std::uint8_t* q = b + 48;
    for (int c = 0; c < 4; ++c, q += 32) {
        std::uint8_t sc, mn;
        scale_min_k4(2 * c, scales, &sc, &mn);
        const float d1 = d * sc, m1 = dmin * mn;
        scale_min_k4(2 * c + 1, scales, &sc, &mn);
        const float d2 = d * sc, m2 = dmin * mn;
        for (int l = 0; l < 32; ++l) *y++ = d1 * ((q[l] & 0x0f) | ((qh[l] >> (2 * c)) & 1) << 4) - m1;
        for (int l = 0; l < 32; ++l) *y++ = d2 * ((q[l] >> 4) | ((qh[l] >> (2 * c + 1)) & 1) << 4) - m2;
    }
}

// Q6_K: [ql:128][qh:64][scales:16 x int8][d:f16]
void q6_k(const std::uint8_t* b, float* y) {
    const std::uint8_t* ql = b;
    const std::uint8_t* qh = b + 128;
    const auto* sc = reinterpret_cast<const std::int8_t*>(b + 192);
    const float d = fp16_to_float(load_u16(b + 208));
    for (int n = 0; n < 256; n += 128) {
        for (int l = 0; l < 32; ++l) {
            const int is = l / 16;
            const int q1 = static_cast<int>((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
            const int q2 = static_cast<int>((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
            const int q3 = static_cast<int>((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            const int q4 = static_cast<int>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            y[l] = d * sc[is + 0] * q1;
            y[l + 32] = d * sc[is + 2] * q2;
            y[l + 64] = d * sc[is + 4] * q3;
            y[l + 96] = d * sc[is + 6] * q4;
        }
        y += 128;
        ql += 64;
        qh += 32;
        sc += 8;
    }
}

}  // namespace

void ggml_dequantize(GgmlType type, const std::uint8_t* src, float* dst, std::int64_t n) {
    std::int64_t be = 0, bb = 0;
    if (!ggml_block_layout(type, &be, &bb)) {
        throw Error(ErrorCode::Unsupported, std::string("cannot decode ggml type ") + to_string(type));
    }
    if (n % be != 0) {
        throw Error(ErrorCode::InvalidArgument, std::string("element count is not a multiple of the ") +
                                                    to_string(type) + " block size");
    }
    const std::int64_t blocks = n / be;
    switch (type) {
        case GgmlType::F32: std::memcpy(dst, src, static_cast<std::size_t>(n) * 4); return;
        case GgmlType::F16:
            for (std::int64_t i = 0; i < n; ++i) dst[i] = fp16_to_float(load_u16(src + 2 * i));
            return;
        case GgmlType::BF16:
            for (std::int64_t i = 0; i < n; ++i) dst[i] = bf16_to_float(load_u16(src + 2 * i));
            return;
        default: break;
    }
    for (std::int64_t blk = 0; blk < blocks; ++blk) {
        const std::uint8_t* b = src + blk * bb;
        float* y = dst + blk * be;
        switch (type) {
            case GgmlType::Q4_0: q4_0(b, y); break;
            case GgmlType::Q4_1: q4_1(b, y); break;
            case GgmlType::Q5_0: q5(b + 2, b + 6, fp16_to_float(load_u16(b)), 0.f, 16, y); break;
            case GgmlType::Q5_1:
                q5(b + 4, b + 8, fp16_to_float(load_u16(b)), fp16_to_float(load_u16(b + 2)), 0, y);
                break;
            case GgmlType::Q8_0: q8_0(b, y); break;
            case GgmlType::Q4_K: q4_k(b, y); break;
            case GgmlType::Q5_K: q5_k(b, y); break;
            case GgmlType::Q6_K: q6_k(b, y); break;
            default: throw Error(ErrorCode::Unsupported, std::string("cannot decode ggml type ") + to_string(type));
        }
    }
}

std::int64_t ggml_count_nonfinite_scales(GgmlType type, const std::uint8_t* src, std::int64_t n) {
    std::int64_t be = 0, bb = 0;
    if (!ggml_block_layout(type, &be, &bb) || n % be != 0) return 0;
    const std::int64_t blocks = n / be;
    // fp16/bf16 are non-finite when every exponent bit is set.
    auto bad_f16 = [&](std::int64_t at) { return (load_u16(src + at) & 0x7c00u) == 0x7c00u; };
    auto bad_bf16 = [&](std::int64_t at) { return (load_u16(src + at) & 0x7f80u) == 0x7f80u; };
    std::int64_t bad = 0;
    switch (type) {
        case GgmlType::F32:
            for (std::int64_t i = 0; i < n; ++i) {
                std::uint32_t u;
                std::memcpy(&u, src + 4 * i, 4);
                bad += (u & 0x7f800000u) == 0x7f800000u;
            }
            return bad;
        case GgmlType::F16:
            for (std::int64_t i = 0; i < n; ++i) bad += bad_f16(2 * i);
            return bad;
        case GgmlType::BF16:
            for (std::int64_t i = 0; i < n; ++i) bad += bad_bf16(2 * i);
            return bad;
        default: break;
    }
    // Offsets of the fp16 scales inside one block (ggml's block_* structs).
    std::int64_t first = 0, second = -1;
    switch (type) {
        case GgmlType::Q4_0: case GgmlType::Q5_0: case GgmlType::Q8_0: break;          // d
        case GgmlType::Q4_1: case GgmlType::Q5_1: case GgmlType::Q4_K: case GgmlType::Q5_K:
            second = 2;  // d, m (dmin)
            break;
        case GgmlType::Q6_K: first = 208; break;                                      // ql, qh, scales, d
        default: return 0;
    }
    for (std::int64_t b = 0; b < blocks; ++b) {
        const std::int64_t at = b * bb;
        bad += bad_f16(at + first);
        if (second >= 0) bad += bad_f16(at + second);
    }
    return bad;
}

}  // namespace kev
