// The int8 kernel for 4-bit weights (kev/quant.h): int8 activations, exact int32 sums.
//
// Why: the fused bf16 kernels expand every code to a bf16 weight (a table lookup per
// 32 weights, ~0.4 instructions a weight) and were compute-bound at 5x the streaming
// time of a decode step. Here the codes stay bytes: a 64-byte line of the interleaved
// layout (16 rows x 8 columns) becomes two vpdpbusd operands with three or four
// instructions, and each vpdpbusd does 64 multiply-adds for one activation row against
// 4 broadcast activation bytes. Per 16 rows x 32 columns and activation row:
//
//   S   = init + sum over the slice of u8(code) * q      (8 vpdpbusd, exact int32)
//   acc = fma(float(S) * dx', d, acc)                    (d: the 16 rows' block scales)
//   acc = fma(m, sum(q) * dx, acc)                       (Q4_1 only)
//
// with init = -offset * sum(q) undoing the unsigned code offset, and dx' = dx * unit.
// The 16 lanes of acc are 16 output rows, so results are stored without reductions.
// Q8_0's byte codes (value + 128, offset 128) skip the expansion: a slice is 8 lines
// read as they are, llama.cpp's Q8_0 x Q8_0 with the same exact sums. Q4_K's codes are
// nibbles like Q4_1's; its block scales d * sc and mins -(dmin * m) are formed from the
// two levels in the epilogue (exact in fp32), 16 rows at a time. Q5_K's codes are bytes
// (0..31, plus 128) read as Q8_0's, with Q4_K's two-level epilogue. Q6_K's (-32..31, plus
// 128) too, but its scale d * sc changes every 16 columns: a slice's lines 0-3 (columns
// 0-15) and 4-7 (16-31) are summed apart, each half from its own init, and scaled in turn
// (the low half first), as llama.cpp sums Q6_K x Q8_K per 16.
//
// Prefill (32 rows or more) on CPUs with AMX-INT8 takes the sums from the tile unit, 16
// activation rows at a time, and scales them with the same epilogue (scale_slice).
// Measured with kev-bench q4kernel (9728 x 896, 2 threads): 256 rows 5.5-6.5 ms on AMX
// against 7.6-8.7 on VNNI (dequantizing to bf16 for oneDNN, the row layout's path, 3.9-4.3,
// but with bf16 activations, so other numbers than decoding).
// A scalar twin (groups_scalar) does the same arithmetic without SIMD.
#include "kev/quant.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "half.h"
#include "kev/error.h"
#include "kev/cpu_kernels.h"
#include "model/linear_bf16.h"
#include "model/with_rows.h"
// GCC 12 warns inside its own _mm512_reduce_* helpers (a known false positive).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

namespace kev {

namespace {

// How many 256-byte slices of codes ahead the decode kernels prefetch.
constexpr int kPrefetchSlices = 4;

#define KEV_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")))

// How a format's codes enter as unsigned bytes: value = (u8[code] - offset) * unit
// (the 16 bytes repeated in each 128-bit lane, vpshufb's table).
struct CodeBytes {
    std::uint8_t u8[64];
    std::int32_t offset;
    float unit;
};

// How codes are held in the interleaved layout: nibbles that are the values (Q4_0/Q4_1,
// through the offset; Q4_K, whose block scales and mins are two-level), nibbles that
// index NF4's byte table, or whole bytes (Q8_0: the signed value plus 128, so a
// 32-column slice of 16 rows is 512 bytes, 8 lines; Q5_K the same with two-level scales).
enum CodeKind { kNibbles, kNibblesK, kNf4Codes, kBytes, kBytesK, kBytes16 };
constexpr bool byte_kind(int kind) { return kind == kBytes || kind == kBytesK || kind == kBytes16; }
constexpr bool two_level_kind(int kind) { return kind == kNibblesK || kind == kBytesK; }
constexpr std::int64_t slice_bytes(int kind) { return byte_kind(kind) ? 512 : 256; }

CodeBytes code_bytes(const QuantMatrix& w) {
    CodeBytes c{};
    const bool nf4 = w.format == QuantFormat::NF4;
    c.offset = nf4 ? 127 : w.format == QuantFormat::Q4_0 ? 8 : w.byte_codes() ? 128 : 0;
    c.unit = nf4 ? 1.0f / 127.0f : 1.0f;
    for (int i = 0; i < 64; ++i)
        c.u8[i] = static_cast<std::uint8_t>(nf4 ? std::lrint(w.lut[i % 16] * 127.0f) + 127 : i % 16);
    return c;
}

// Activations quantized per row and 32-column slice: q [M][K] int8, and per slice
// dx' = scale * unit, init = -offset * sum(q), and sum(q) * scale (for mins); init_lo the
// same over the slice's first 16 columns (Q6_K's halves).
struct Int8Acts {
    std::vector<std::int8_t> q;
    std::vector<float> dxu, sdx;
    std::vector<std::int32_t> init, init_lo;

    void resize(std::int64_t M, std::int64_t K) {
        q.resize(static_cast<std::size_t>(M * K));  // AMX passes read only whole 16-row groups within M
        dxu.resize(static_cast<std::size_t>(M * K / 32));
        sdx.resize(dxu.size());
        init.resize(dxu.size());
        init_lo.resize(dxu.size());
    }
    // Slice i's numbers from its absmax and the sum of its codes. A slice holding a NaN
    // or an infinity gets a NaN scale, so the rows it feeds come out NaN, as a float
    // multiply would give (the generator reports non-finite logits), not quietly finite.
    void set_slice(std::int64_t i, float amax, std::int32_t sum, std::int32_t sum_lo, const CodeBytes& cb) {
        const float dx = std::isfinite(amax) ? amax / 127.0f : std::numeric_limits<float>::quiet_NaN();
        // The codes of such a slice are whatever a NaN converts to, and their sum can be far
        // outside a slice's range (-offset * sum would overflow): it is not used.
        if (!std::isfinite(amax)) sum = sum_lo = 0;
        dxu[i] = dx * cb.unit;
        sdx[i] = static_cast<float>(sum) * dx;
        init[i] = -cb.offset * sum;
        init_lo[i] = -cb.offset * sum_lo;
    }
};

template <bool kBf16>
KEV_VNNI inline void load32(const void* src, std::int64_t at, __m512& v0, __m512& v1) {
    if constexpr (kBf16) {
        const __m512i h = _mm512_loadu_si512(static_cast<const std::uint16_t*>(src) + at);
        v0 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(h)), 16));
        v1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(h, 1)), 16));
    } else {
        v0 = _mm512_loadu_ps(static_cast<const float*>(src) + at);
        v1 = _mm512_loadu_ps(static_cast<const float*>(src) + at + 16);
    }
}

template <bool kBf16>
KEV_VNNI void quantize_slices(const void* x, std::int64_t i0, std::int64_t i1, const CodeBytes& cb, Int8Acts& a) {
    for (std::int64_t i = i0; i < i1; ++i) {
        __m512 v0, v1;
        load32<kBf16>(x, i * 32, v0, v1);
        float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
        if (_mm512_cmp_ps_mask(v0, v0, _CMP_UNORD_Q) | _mm512_cmp_ps_mask(v1, v1, _CMP_UNORD_Q))  // max drops NaNs
            amax = std::numeric_limits<float>::quiet_NaN();
        const float inv = amax > 0.0f && std::isfinite(amax) ? 127.0f / amax : 0.0f;
        const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, _mm512_set1_ps(inv)));  // nearest, ties to even
        const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, _mm512_set1_ps(inv)));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(a.q.data() + i * 32), _mm512_cvtepi32_epi8(q0));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(a.q.data() + i * 32 + 16), _mm512_cvtepi32_epi8(q1));
        a.set_slice(i, amax, _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1)), _mm512_reduce_add_epi32(q0), cb);
    }
}

// acc + u8 x s8 dot products of w's lanes with the 4 bytes at x repeated: vpdpbusd with
// the activation quad broadcast from memory inside the instruction (GCC emits a separate
// vpbroadcastd for _mm512_set1_epi32, one more instruction per 64 multiply-adds).
KEV_VNNI inline __m512i dpbusd_bcast(__m512i acc, __m512i w, const std::int32_t* x) {
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*x));
    return acc;
}

// Where results go: fp32 or bf16 rows of ld values, plus an fp32 bias when not null.
// Adding the bias and rounding to bf16 here spares two passes over [M, O] per call.
struct Out {
    float* f32 = nullptr;
    std::uint16_t* bf16 = nullptr;
    const float* bias = nullptr;
    std::int64_t ld = 0;
};

// 16 results of row `row` from column col: + bias, then stored (bf16: float_to_bf16 of
// half.h, 16 at a time: nearest even, a NaN kept quiet).
KEV_VNNI inline void store16(const Out& y, std::int64_t row, std::int64_t col, __m512 v) {
    if (y.bias) v = _mm512_add_ps(v, _mm512_loadu_ps(y.bias + col));
    if (y.f32) return _mm512_storeu_ps(y.f32 + row * y.ld + col, v);
    const __m512i u = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
    const __m512i nan = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    r = _mm512_mask_mov_epi32(r, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), nan);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y.bf16 + row * y.ld + col), _mm512_cvtepi32_epi16(r));
}

// Quad c (columns 8c .. 8c + 7) of a slice as two vpdpbusd operands (16 outputs x 4
// columns each): the low and the high nibbles of line c, through the format's byte table
// for NF4; for byte codes, lines 2c and 2c + 1 as they are.
template <int kKind>
KEV_VNNI inline void expand_line(const std::uint8_t* slice, int c, __m512i table, __m512i& lo, __m512i& hi) {
    if constexpr (byte_kind(kKind)) {
        lo = _mm512_loadu_si512(slice + 128 * c);
        hi = _mm512_loadu_si512(slice + 128 * c + 64);
        return;
    }
    const __m512i nibble = _mm512_set1_epi8(0x0f);
    const __m512i v = _mm512_loadu_si512(slice + 64 * c);
    lo = _mm512_and_si512(v, nibble);
    hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), nibble);
    if constexpr (kKind == kNf4Codes) {
        lo = _mm512_shuffle_epi8(table, lo);
        hi = _mm512_shuffle_epi8(table, hi);
    }
}

// Q4_K's scales and mins of slice g of group R, 16 rows at a time: d * sc and
// -(dmin * m), exact in fp32 (11 + 6 significant bits), as the row kernels compute them.
// Tables in the int8 layout: d, dmin [group][256 columns][16]; sc, m [group][block][16].
struct TwoLevel {
    const std::uint16_t* d;     // fp16 bits
    const std::uint8_t* sc;
    const std::uint16_t* dmin;  // fp16 bits
    const std::uint8_t* m;
};
inline TwoLevel two_level(const QuantMatrix& w, std::int64_t R, std::int64_t g, std::int64_t r0) {
    const std::int64_t bpr = w.blocks_per_row();
    const std::size_t top = static_cast<std::size_t>((R * (bpr / 8) + g / 8) * 16 + r0);
    const std::size_t sub = static_cast<std::size_t>((R * bpr + g) * 16 + r0);
    return {w.scales.data() + top, w.sub_scales.data() + sub, w.mins.data() + top, w.sub_mins.data() + sub};
}

// Quads c0 .. c1 - 1 of a slice (its codes at `slice`, the activations' slice at x, rows
// K apart) added into s.
template <int MB, int kKind>
KEV_VNNI inline void quad_sums(const std::uint8_t* slice, int c0, int c1, __m512i table, const std::int8_t* x,
                               std::int64_t K, __m512i (&s)[MB]) {
    for (int c = c0; c < c1; ++c) {
        __m512i lo, hi;
        expand_line<kKind>(slice, c, table, lo, hi);
        for (int m = 0; m < MB; ++m) {
            const std::int32_t* xm = reinterpret_cast<const std::int32_t*>(x + m * K + 8 * c);
            s[m] = dpbusd_bcast(s[m], lo, xm);
            s[m] = dpbusd_bcast(s[m], hi, xm + 1);
        }
    }
}

// Q6_K's d of slice g's super-block and sc of its half `half`, rows r0.. of group R, in the
// int8 layout: d [group][256 columns][16] (fp16 bits), sc [group][16 columns][16] (int8).
struct HalfScales {
    const std::uint16_t* d;
    const std::int8_t* sc;
};
inline HalfScales half_scales(const QuantMatrix& w, std::int64_t R, std::int64_t g, int half, std::int64_t r0) {
    const std::size_t top = static_cast<std::size_t>((R * (w.cols / 256) + g / 8) * 16 + r0);
    const std::size_t sub = static_cast<std::size_t>((R * (w.cols / 16) + 2 * g + half) * 16 + r0);
    return {w.scales.data() + top, reinterpret_cast<const std::int8_t*>(w.sub_scales.data()) + sub};
}

// Q6_K: the float steps of half `half` of slice g, as scale_slice's (d * sc exact).
template <int MB>
KEV_VNNI inline void scale_half(const QuantMatrix& w, const Int8Acts& a, const __m512i (&s)[MB], std::int64_t R,
                                std::int64_t g, int half, std::int64_t s0, __m512 (&acc)[MB]) {
    const std::int64_t G = w.cols / 32;
    const HalfScales h = half_scales(w, R, g, half, 0);
    const __m512 d = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h.d))),
                                   _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h.sc)))));
    for (int m = 0; m < MB; ++m) {
        const __m512 t = _mm512_mul_ps(_mm512_cvtepi32_ps(s[m]), _mm512_set1_ps(a.dxu[s0 + m * G + g]));
        acc[m] = _mm512_fmadd_ps(t, d, acc[m]);
    }
}

// The float steps of slice g of group R for MB activation rows, from their exact sums s
// (init included): the one epilogue of the VNNI and AMX paths, hence the same bits.
template <int MB, bool kMins, bool kTwoLevel = false>
KEV_VNNI inline void scale_slice(const QuantMatrix& w, const Int8Acts& a, const __m512i (&s)[MB], std::int64_t R,
                                 std::int64_t g, std::int64_t s0, __m512 (&acc)[MB]) {
    const std::int64_t G = w.cols / 32;
    const std::int64_t sc = (R * w.blocks_per_row() + (w.block == 64 ? g >> 1 : g)) * 16;
    __m512 d, mn = _mm512_setzero_ps();
    if constexpr (kTwoLevel) {
        const TwoLevel t = two_level(w, R, g, 0);
        d = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(t.d))),
                          _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(t.sc)))));
        mn = _mm512_sub_ps(_mm512_setzero_ps(),
                           _mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(t.dmin))),
                                         _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(t.m))))));
    } else {
        d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.scales.data() + sc)));
        if constexpr (kMins) mn = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.mins.data() + sc)));
    }
    for (int m = 0; m < MB; ++m) {
        const __m512 t = _mm512_mul_ps(_mm512_cvtepi32_ps(s[m]), _mm512_set1_ps(a.dxu[s0 + m * G + g]));
        acc[m] = _mm512_fmadd_ps(t, d, acc[m]);
    }
    if constexpr (kMins)
        for (int m = 0; m < MB; ++m) acc[m] = _mm512_fmadd_ps(mn, _mm512_set1_ps(a.sdx[s0 + m * G + g]), acc[m]);
}

// Output groups [R0, R1) for activation rows [0, MB) of `a` starting at row m0.
template <int MB, int kKind, bool kMins>
KEV_VNNI void groups(const QuantMatrix& w, const CodeBytes& cb, const Int8Acts& a, std::int64_t m0, const Out& y,
                     std::int64_t R0, std::int64_t R1) {
    const std::int64_t K = w.cols, G = K / 32;
    const __m512i table = _mm512_loadu_si512(cb.u8);
    const std::int8_t* xq = a.q.data() + m0 * K;
    const std::int64_t s0 = m0 * G;  // first slice index of row m0
    for (std::int64_t R = R0; R < R1; ++R) {
        __m512 acc[MB];
        for (int m = 0; m < MB; ++m) acc[m] = _mm512_setzero_ps();
        constexpr std::int64_t SB = slice_bytes(kKind);
        const std::uint8_t* lines = w.codes.data() + R * G * SB;
        for (std::int64_t g = 0; g < G; ++g, lines += SB) {
            // The codes stream from memory: fetch the slice kPrefetchSlices ahead (0.5B
            // 4-bit pack, 2 runs each: 1 card 59-61 tok/s against 50-54 without, 16 cards
            // 266-322 against 242-246).
            for (int c = 0; c < SB / 64; ++c)
                _mm_prefetch(reinterpret_cast<const char*>(lines) + kPrefetchSlices * SB + 64 * c, _MM_HINT_T0);
            __m512i s[MB];
            if constexpr (kKind == kBytes16) {  // Q6_K: columns 0-15, then 16-31
                for (int half = 0; half < 2; ++half) {
                    for (int m = 0; m < MB; ++m) {
                        const std::int64_t i = s0 + m * G + g;
                        s[m] = _mm512_set1_epi32(half ? a.init[i] - a.init_lo[i] : a.init_lo[i]);
                    }
                    quad_sums<MB, kKind>(lines, 2 * half, 2 * half + 2, table, xq + g * 32, K, s);
                    scale_half<MB>(w, a, s, R, g, half, s0, acc);
                }
                continue;
            }
            for (int m = 0; m < MB; ++m) s[m] = _mm512_set1_epi32(a.init[s0 + m * G + g]);
            quad_sums<MB, kKind>(lines, 0, 4, table, xq + g * 32, K, s);
            scale_slice<MB, kMins, two_level_kind(kKind)>(w, a, s, R, g, s0, acc);
        }
        for (int m = 0; m < MB; ++m) store16(y, m0 + m, R * 16, acc[m]);
    }
}

#undef KEV_VNNI

// ---------------------------------------------------------------------------
// AVX2 (+ FMA, F16C): the same sums without VNNI, the way llama.cpp multiplies Q4_0 by
// Q8_0 on AVX2: vpmaddubsw (u8 x s8, adjacent pairs summed into int16) then vpmaddwd
// with ones (pairs of those into int32). Q4_0/Q4_1 codes are at most 15, so a pair is at
// most 2 x 15 x 127 and never saturates; NF4's bytes reach 254, so NF4 enters signed:
// |w| times x with w's sign (vpsignb), at most 2 x 127 x 127, and the sum starts at 0
// instead of -127 sum(q): the same exact int32 as VNNI's. A ymm holds half a line (8
// rows x 4 columns), so a 16-row group is two halves; the float steps per row are
// scale_slice's, lane for lane, hence the same bits as the VNNI, AMX and scalar paths.
#define KEV_AVX2I __attribute__((target("avx2,fma,f16c")))

template <bool kBf16>
KEV_AVX2I void quantize_slices_avx2(const void* x, std::int64_t i0, std::int64_t i1, const CodeBytes& cb, Int8Acts& a) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    alignas(32) std::int32_t q[32];
    for (std::int64_t i = i0; i < i1; ++i) {
        __m256 v[4];
        for (int k = 0; k < 4; ++k) {
            if constexpr (kBf16) {
                const __m128i h = _mm_loadu_si128(
                    reinterpret_cast<const __m128i*>(static_cast<const std::uint16_t*>(x) + i * 32 + 8 * k));
                v[k] = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
            } else {
                v[k] = _mm256_loadu_ps(static_cast<const float*>(x) + i * 32 + 8 * k);
            }
        }
        __m256 mx = _mm256_andnot_ps(sign, v[0]);
        int unordered = _mm256_movemask_ps(_mm256_cmp_ps(v[0], v[0], _CMP_UNORD_Q));
        for (int k = 1; k < 4; ++k) {
            mx = _mm256_max_ps(mx, _mm256_andnot_ps(sign, v[k]));
            unordered |= _mm256_movemask_ps(_mm256_cmp_ps(v[k], v[k], _CMP_UNORD_Q));
        }
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        float amax = _mm_cvtss_f32(_mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1)));
        if (unordered) amax = std::numeric_limits<float>::quiet_NaN();  // max drops NaNs
        const float inv = amax > 0.0f && std::isfinite(amax) ? 127.0f / amax : 0.0f;
        for (int k = 0; k < 4; ++k)
            _mm256_store_si256(reinterpret_cast<__m256i*>(q + 8 * k),
                               _mm256_cvtps_epi32(_mm256_mul_ps(v[k], _mm256_set1_ps(inv))));  // nearest even
        std::int32_t sum = 0, sum_lo = 0;
        for (int j = 0; j < 32; ++j) {
            const auto b = static_cast<std::int8_t>(q[j]);
            a.q[static_cast<std::size_t>(i * 32 + j)] = b;
            sum += b;
            if (j == 15) sum_lo = sum;
        }
        a.set_slice(i, amax, sum, sum_lo, cb);
    }
}

// 8 results of row `row` from column col, as store16.
KEV_AVX2I inline void store8(const Out& y, std::int64_t row, std::int64_t col, __m256 v) {
    if (y.bias) v = _mm256_add_ps(v, _mm256_loadu_ps(y.bias + col));
    if (y.f32) return _mm256_storeu_ps(y.f32 + row * y.ld + col, v);
    const __m256i u = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
    const __m256i nan = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
    r = _mm256_blendv_epi8(r, nan, _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0xD8);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y.bf16 + row * y.ld + col), _mm256_castsi256_si128(packed));
}

// acc + the u8 x s8 dot products of w's lanes with x's: AVX-VNNI's vpdpbusd on ymm (VEX),
// written out so that the compiler never emits an AVX-VNNI instruction on its own in
// these functions, which also run on AVX2 CPUs without it.
KEV_AVX2I inline __m256i dpbusd256(__m256i acc, __m256i w, __m256i x) {
    __asm__("%{vex%} vpdpbusd %2, %1, %0" : "+x"(acc) : "x"(w), "x"(x));
    return acc;
}

// Output groups [R0, R1) for activation rows [0, MB) of `a` starting at row m0.
// kVnni: AVX-VNNI (Intel client CPUs since Alder Lake, which lack AVX-512): the codes
// enter unsigned as on AVX-512 VNNI (nibbles, NF4's byte table, bytes as stored) and one
// vpdpbusd does a half line's 32 multiply-adds into int32, where AVX2 needs vpmaddubsw,
// vpmaddwd and vpaddd; the sums start at init (-offset * sum(q)) as VNNI's do. Both are
// the same exact int32, so the same bits.
template <int MB, int kKind, bool kMins, bool kVnni = false>
KEV_AVX2I void groups_avx2(const QuantMatrix& w, const CodeBytes& cb, const Int8Acts& a, std::int64_t m0, const Out& y,
                           std::int64_t R0, std::int64_t R1) {
    const std::int64_t K = w.cols, G = K / 32;
    // AVX2: codes enter signed (NF4's table, bytes); AVX-VNNI: unsigned, as stored
    constexpr bool kSigned = !kVnni && (kKind == kNf4Codes || byte_kind(kKind));
    // 4-bit codes on vpmaddubsw: each int16 of a product is two codes (0-15) times two
    // int8 activations (|x| <= 128), at most 3840, so a group's 8 products add in int16
    // (at most 30720, no wrap) and widen to int32 once (one vpmaddwd where there were 8):
    // the same exact sums, so the same bits.
    constexpr bool kSum16 = !kVnni && !kSigned && !byte_kind(kKind) && kKind != kBytes16;
    constexpr std::int64_t SB = slice_bytes(kKind);
    const __m256i nibble = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1), bias128 = _mm256_set1_epi8(-128);
    alignas(32) std::int8_t signed_table[32];
    for (int i = 0; i < 32; ++i)
        signed_table[i] = static_cast<std::int8_t>(kVnni ? cb.u8[i % 16] : cb.u8[i % 16] - cb.offset);
    const __m256i table = _mm256_load_si256(reinterpret_cast<const __m256i*>(signed_table));
    const std::int8_t* xq = a.q.data() + m0 * K;
    const std::int64_t s0 = m0 * G;
    // The codes stream from memory, and each group's are read twice (rows 0-7, then 8-15,
    // the second time from cache). One cursor walks them half a slice a step in both
    // passes, half a group's codes plus kPrefetchSlices ahead, so the stream goes on while
    // the second pass computes; prefetching a whole slice in the first pass only left the
    // memory idle in the second. kev-bench pack, the 0.5B model's Q4_0, an AVX2-only AMD
    // EPYC (Zen 3), 2 threads, six alternations: one card 59.8-70.0 tok/s against
    // 47.9-60.8, four cards 107-161 against 110-148 (ahead in 5 of 6), 16 cards level.
    const char* ahead = reinterpret_cast<const char*>(w.codes.data() + R0 * G * SB) + G * SB / 2 + kPrefetchSlices * SB;
    for (std::int64_t R = R0; R < R1; ++R) {
        for (int h = 0; h < 2; ++h) {  // rows 8h .. 8h + 7 of the group
            __m256 acc[MB];
            for (int m = 0; m < MB; ++m) acc[m] = _mm256_setzero_ps();
            const std::uint8_t* lines = w.codes.data() + R * G * SB + 32 * h;
            for (std::int64_t g = 0; g < G; ++g, lines += SB) {
                for (int c = 0; c < SB / 128; ++c) _mm_prefetch(ahead + 64 * c, _MM_HINT_T0);
                ahead += SB / 2;
                __m256i s[MB];
                for (int m = 0; m < MB; ++m) {
                    const std::int64_t i = s0 + m * G + g;
                    s[m] = _mm256_set1_epi32(kSigned                        ? 0
                                             : kVnni && kKind == kBytes16 ? a.init_lo[i]  // Q6_K: columns 0-15 first
                                                                          : a.init[i]);
                }
                __m256i s16[MB];  // kSum16: the group's pair sums, widened once after the 4 columns
                if constexpr (kSum16)
                    for (int m = 0; m < MB; ++m) s16[m] = _mm256_setzero_si256();
                for (int c = 0; c < 4; ++c) {
                    if (kKind == kBytes16 && c == 2) {  // Q6_K: columns 0-15 done, scaled by their d * sc
                        const HalfScales hs = half_scales(w, R, g, 0, 8 * h);
                        const __m256 d0 = _mm256_mul_ps(
                            _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(hs.d))),
                            _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(hs.sc)))));
                        for (int m = 0; m < MB; ++m) {
                            const __m256 t = _mm256_mul_ps(_mm256_cvtepi32_ps(s[m]), _mm256_set1_ps(a.dxu[s0 + m * G + g]));
                            acc[m] = _mm256_fmadd_ps(t, d0, acc[m]);
                            const std::int64_t i = s0 + m * G + g;
                            s[m] = kVnni ? _mm256_set1_epi32(a.init[i] - a.init_lo[i]) : _mm256_setzero_si256();
                        }
                    }
                    __m256i lo, hi;
                    if constexpr (byte_kind(kKind) && kVnni) {  // the stored byte: value + 128
                        lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(lines + 128 * c));
                        hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(lines + 128 * c + 64));
                    } else if constexpr (byte_kind(kKind)) {  // the signed byte: stored value - 128
                        lo = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(lines + 128 * c)), bias128);
                        hi = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(lines + 128 * c + 64)),
                                              bias128);
                    } else {
                        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(lines + 64 * c));
                        lo = _mm256_and_si256(v, nibble);
                        hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), nibble);
                    }
                    __m256i ulo = lo, uhi = hi;
                    if constexpr (kKind == kNf4Codes) {
                        lo = _mm256_shuffle_epi8(table, lo);  // AVX2: signed values; AVX-VNNI: the bytes
                        hi = _mm256_shuffle_epi8(table, hi);
                    }
                    if constexpr (kSigned) {  // |w| unsigned (|-128| = 128 as a byte), x takes w's sign
                        ulo = _mm256_abs_epi8(lo);
                        uhi = _mm256_abs_epi8(hi);
                    }
                    for (int m = 0; m < MB; ++m) {
                        const std::int8_t* xm = xq + m * K + g * 32 + 8 * c;
                        std::int32_t qlo, qhi;
                        std::memcpy(&qlo, xm, 4);
                        std::memcpy(&qhi, xm + 4, 4);
                        __m256i xlo = _mm256_set1_epi32(qlo), xhi = _mm256_set1_epi32(qhi);
                        if constexpr (kVnni) {
                            s[m] = dpbusd256(dpbusd256(s[m], lo, xlo), hi, xhi);
                            continue;
                        }
                        if constexpr (kSigned) {
                            xlo = _mm256_sign_epi8(xlo, lo);
                            xhi = _mm256_sign_epi8(xhi, hi);
                        }
                        if constexpr (kSum16) {
                            s16[m] = _mm256_add_epi16(
                                s16[m], _mm256_add_epi16(_mm256_maddubs_epi16(ulo, xlo), _mm256_maddubs_epi16(uhi, xhi)));
                            // Column by column: without this, GCC reassociates the group's 32
                            // int16 sums into one tree, computes every product first and keeps
                            // 24 of them on the stack (llvm-mca, Zen 3: 50 cycles a slice, the
                            // load/store pipes full; 35.5 with it). The sums are exact either way.
                            // kev-bench q4kernel, Q4_0 9728 x 896, 2 threads, Zen 3: 128 rows
                            // 114-160 G multiply-adds a second against 87-121, 16 rows 108-157
                            // against 68-83.
                            __asm__("" : "+x"(s16[m]));
                            continue;
                        }
                        s[m] = _mm256_add_epi32(s[m], _mm256_madd_epi16(_mm256_maddubs_epi16(ulo, xlo), ones));
                        s[m] = _mm256_add_epi32(s[m], _mm256_madd_epi16(_mm256_maddubs_epi16(uhi, xhi), ones));
                        __asm__("" : "+x"(s[m]));  // column by column, as kSum16's
                    }
                }
                if constexpr (kSum16)
                    for (int m = 0; m < MB; ++m) s[m] = _mm256_add_epi32(s[m], _mm256_madd_epi16(s16[m], ones));
                const std::int64_t sc = (R * w.blocks_per_row() + (w.block == 64 ? g >> 1 : g)) * 16 + 8 * h;
                __m256 d, mn = _mm256_setzero_ps();
                if constexpr (kKind == kBytes16) {  // the second half's d * sc
                    const HalfScales hs = half_scales(w, R, g, 1, 8 * h);
                    d = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(hs.d))),
                                      _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(hs.sc)))));
                } else if constexpr (two_level_kind(kKind)) {
                    const TwoLevel t = two_level(w, R, g, 8 * h);
                    d = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(t.d))),
                                      _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(t.sc)))));
                    mn = _mm256_sub_ps(
                        _mm256_setzero_ps(),
                        _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(t.dmin))),
                                      _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(t.m))))));
                } else {
                    d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w.scales.data() + sc)));
                    if constexpr (kMins) mn = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w.mins.data() + sc)));
                }
                for (int m = 0; m < MB; ++m) {
                    const __m256 t = _mm256_mul_ps(_mm256_cvtepi32_ps(s[m]), _mm256_set1_ps(a.dxu[s0 + m * G + g]));
                    acc[m] = _mm256_fmadd_ps(t, d, acc[m]);
                }
                if constexpr (kMins)
                    for (int m = 0; m < MB; ++m)
                        acc[m] = _mm256_fmadd_ps(mn, _mm256_set1_ps(a.sdx[s0 + m * G + g]), acc[m]);
            }
            for (int m = 0; m < MB; ++m) store8(y, m0 + m, R * 16 + 8 * h, acc[m]);
        }
    }
}

// groups_avx2 for w's format.
template <int MB, bool kVnni>
void avx2_groups(const QuantMatrix& w, const CodeBytes& cb, const Int8Acts& a, std::int64_t m0, const Out& y,
                 std::int64_t R0, std::int64_t R1) {
    switch (w.format) {
        case QuantFormat::NF4: return groups_avx2<MB, kNf4Codes, false, kVnni>(w, cb, a, m0, y, R0, R1);
        case QuantFormat::Q4_K: return groups_avx2<MB, kNibblesK, true, kVnni>(w, cb, a, m0, y, R0, R1);
        case QuantFormat::Q5_K: return groups_avx2<MB, kBytesK, true, kVnni>(w, cb, a, m0, y, R0, R1);
        case QuantFormat::Q6_K: return groups_avx2<MB, kBytes16, false, kVnni>(w, cb, a, m0, y, R0, R1);
        default: break;
    }
    if (w.byte_codes()) groups_avx2<MB, kBytes, false, kVnni>(w, cb, a, m0, y, R0, R1);
    else if (!w.mins.empty()) groups_avx2<MB, kNibbles, true, kVnni>(w, cb, a, m0, y, R0, R1);
    else groups_avx2<MB, kNibbles, false, kVnni>(w, cb, a, m0, y, R0, R1);
}

#undef KEV_AVX2I

// The same arithmetic without SIMD (CPUs without VNNI; tests compare the two bit for
// bit): x*inv rounded to nearest even, exact int32 sums, fmaf's single rounding.
void quantize_slices_scalar(const float* x, std::int64_t i0, std::int64_t i1, const CodeBytes& cb, Int8Acts& a) {
    for (std::int64_t i = i0; i < i1; ++i) {
        const float* v = x + i * 32;
        float amax = 0.0f;
        for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(v[j]));
        for (int j = 0; j < 32; ++j)
            if (std::isnan(v[j])) amax = v[j];  // std::max may drop a NaN
        const float inv = amax > 0.0f && std::isfinite(amax) ? 127.0f / amax : 0.0f;
        std::int32_t sum = 0, sum_lo = 0;
        for (int j = 0; j < 32; ++j) {
            const auto q = static_cast<std::int8_t>(std::lrint(v[j] * inv));
            a.q[static_cast<std::size_t>(i * 32 + j)] = q;
            sum += q;
            if (j == 15) sum_lo = sum;
        }
        a.set_slice(i, amax, sum, sum_lo, cb);
    }
}

void groups_scalar(const QuantMatrix& w, const CodeBytes& cb, const Int8Acts& a, std::int64_t M, const Out& y,
                   std::int64_t R0, std::int64_t R1) {
    const std::int64_t K = w.cols, G = K / 32, bpr = w.blocks_per_row();
    const std::int64_t per_block = std::max<std::int64_t>(1, w.block / 32);  // single-level tables only (Q6_K: 16)
    const bool bytes = w.byte_codes(), q6k = w.format == QuantFormat::Q6_K;
    const std::int64_t SB = bytes ? 512 : 256;
    for (std::int64_t R = R0; R < R1; ++R) {
        for (std::int64_t m = 0; m < M; ++m) {
            float acc[16] = {};
            for (std::int64_t g = 0; g < G; ++g) {
                const std::uint8_t* lines = w.codes.data() + (R * G + g) * SB;
                const std::int8_t* xq = a.q.data() + m * K + g * 32;
                const std::int64_t sc = (R * bpr + g / per_block) * 16, slice = m * G + g;
                for (int r = 0; r < 16; ++r) {
                    std::int32_t sum = q6k ? a.init_lo[slice] : a.init[slice];
                    for (int c = 0; c < 4; ++c) {
                        if (q6k && c == 2) {  // Q6_K: columns 0-15 scaled by their d * sc, then 16-31
                            const HalfScales hs = half_scales(w, R, g, 0, r);
                            acc[r] = std::fmaf(static_cast<float>(sum) * a.dxu[slice],
                                               fp16_to_float(*hs.d) * static_cast<float>(*hs.sc), acc[r]);
                            sum = a.init[slice] - a.init_lo[slice];
                        }
                        for (int t = 0; t < 4; ++t) {
                            if (bytes) {  // lines 2c and 2c + 1: columns 8c + t and 8c + 4 + t
                                sum += lines[128 * c + 4 * r + t] * xq[8 * c + t] +
                                       lines[128 * c + 64 + 4 * r + t] * xq[8 * c + 4 + t];
                                continue;
                            }
                            const std::uint8_t byte = lines[64 * c + 4 * r + t];
                            sum += cb.u8[byte & 0x0f] * xq[8 * c + t] + cb.u8[byte >> 4] * xq[8 * c + 4 + t];
                        }
                    }
                    const float t = static_cast<float>(sum) * a.dxu[slice];
                    float d, mn;
                    if (q6k) {
                        const HalfScales hs = half_scales(w, R, g, 1, r);
                        d = fp16_to_float(*hs.d) * static_cast<float>(*hs.sc);
                        mn = 0.0f;
                    } else if (!w.sub_scales.empty()) {  // Q4_K, Q5_K: d * sc, -(dmin * m)
                        const TwoLevel k = two_level(w, R, g, r);
                        d = fp16_to_float(*k.d) * static_cast<float>(*k.sc);
                        mn = -(fp16_to_float(*k.dmin) * static_cast<float>(*k.m));
                    } else {
                        d = fp16_to_float(w.scales[sc + r]);
                        mn = w.mins.empty() ? 0.0f : fp16_to_float(w.mins[sc + r]);
                    }
                    acc[r] = std::fmaf(t, d, acc[r]);
                    if (!w.mins.empty()) acc[r] = std::fmaf(mn, a.sdx[slice], acc[r]);
                }
            }
            for (int r = 0; r < 16; ++r) {
                const std::int64_t o = R * 16 + r;
                const float v = y.bias ? acc[r] + y.bias[o] : acc[r];
                if (y.f32) y.f32[m * y.ld + o] = v;
                else y.bf16[m * y.ld + o] = float_to_bf16(v);
            }
        }
    }
}

// ---------------------------------------------------------------------------
// AMX-INT8, for many activation rows (prefill). The same sums 16 activation rows at a
// time: per group and slice, the B tile is the 8 expanded vectors (16 outputs x 4
// columns each, 8 rows of 64 bytes), the A tile 16 activation rows of 32 int8 read in
// place, and one tdpbsud (signed A x unsigned B) gives C[m][o] = sum u8(code) * q,
// exact. The scaling is groups()'s, step for step, so both give the same bits.
//
// Measured here, the tile unit stalls when it reads memory the vector units have just
// written, and the other way round: a thread therefore expands a chunk of groups into
// a buffer first and multiplies every pass of 16 rows from it, and the scaling of a
// slice runs two slices behind its multiply (four C tiles in turn).
#define KEV_AMX_INT8 __attribute__((target("amx-tile,amx-int8,avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")))

constexpr int kAmxDepth = 4;  // C tiles 2-5

const AmxTileConfig& int8_tile_config() {
    static const AmxTileConfig cfg = [] {
        AmxTileConfig c;
        c.rows[0] = 16, c.colsb[0] = 32;  // A: activation rows x 32 int8
        c.rows[1] = 8, c.colsb[1] = 64;   // B: column quads x (16 outputs x 4 bytes)
        for (int t = 2; t < 2 + kAmxDepth; ++t) c.rows[t] = 16, c.colsb[t] = 64;  // C: rows x 16 int32
        return c;
    }();
    return cfg;
}

// Groups [R0, R1) expanded to B tiles: bx[(R - R0) * G + g] holds 512 bytes.
template <int kKind>
KEV_AMX_INT8 void amx_expand(const QuantMatrix& w, const CodeBytes& cb, std::int64_t R0, std::int64_t R1,
                             std::uint8_t* bx) {
    const __m512i table = _mm512_loadu_si512(cb.u8);
    constexpr std::int64_t SB = slice_bytes(kKind);
    const std::uint8_t* lines = w.codes.data() + R0 * (w.cols / 32) * SB;
    const std::int64_t slices = (R1 - R0) * (w.cols / 32);
    for (std::int64_t i = 0; i < slices; ++i, lines += SB, bx += 512) {
        for (int l = 0; l < 4; ++l) {
            __m512i lo, hi;
            expand_line<kKind>(lines, l, table, lo, hi);
            _mm512_storeu_si512(bx + 128 * l, lo);
            _mm512_storeu_si512(bx + 128 * l + 64, hi);
        }
    }
}

// C tile 2 + k = A (16 activation rows x 32 int8 at xq, row stride K) x B (at b), to c.
// (The tile intrinsics paste their tile number into the instruction: literals only.)
#define KEV_AMX_MULTIPLY(T)          \
    _tile_zero(T);                   \
    _tile_loadd(0, xq, K);           \
    _tile_loadd(1, b, 64);           \
    _tile_dpbsud(T, 0, 1);           \
    _tile_stored(T, c, 64)
KEV_AMX_INT8 inline void amx_multiply(int k, const std::int8_t* xq, std::int64_t K, const std::uint8_t* b,
                                      std::int32_t* c) {
    switch (k) {
        case 0: KEV_AMX_MULTIPLY(2); break;
        case 1: KEV_AMX_MULTIPLY(3); break;
        case 2: KEV_AMX_MULTIPLY(4); break;
        default: KEV_AMX_MULTIPLY(5); break;
    }
}
#undef KEV_AMX_MULTIPLY

// Activation rows [m0, m0 + 16) x groups [R0, R1), from their expanded tiles bx.
template <bool kMins, bool kTwoLevel>
KEV_AMX_INT8 void groups_amx(const QuantMatrix& w, const Int8Acts& a, std::int64_t m0, const Out& y, std::int64_t R0,
                             std::int64_t R1, const std::uint8_t* bx) {
    _tile_loadconfig(&int8_tile_config());
    const std::int64_t K = w.cols, G = K / 32;
    alignas(64) std::int32_t c[kAmxDepth][256];
    const std::int8_t* xq = a.q.data() + m0 * K;
    const std::int64_t s0 = m0 * G;
    for (std::int64_t R = R0; R < R1; ++R) {
        const std::uint8_t* b = bx + (R - R0) * G * 512;
        __m512 acc[16];
        for (auto& v : acc) v = _mm512_setzero_ps();
        for (std::int64_t g = 0; g < G + 2; ++g) {
            if (g < G) amx_multiply(static_cast<int>(g % kAmxDepth), xq + g * 32, K, b + g * 512, c[g % kAmxDepth]);
            if (g >= 2) {
                const std::int32_t* cg = c[(g - 2) % kAmxDepth];
                __m512i s[16];
                for (int m = 0; m < 16; ++m)
                    s[m] = _mm512_add_epi32(_mm512_load_si512(cg + 16 * m), _mm512_set1_epi32(a.init[s0 + m * G + g - 2]));
                scale_slice<16, kMins, kTwoLevel>(w, a, s, R, g - 2, s0, acc);
            }
        }
        for (int m = 0; m < 16; ++m) store16(y, m0 + m, R * 16, acc[m]);
    }
    _tile_release();
}

#undef KEV_AMX_INT8

constexpr std::int64_t kRowsPerPass = 8;  // VNNI: 8 int32 + 8 fp32 accumulators in registers
constexpr std::int64_t kRowsPerPassAvx2 = 4;  // AVX2 has 16 registers, not 32
// From this many rows a call goes to AMX in passes of 16 (what is left, to VNNI).
constexpr std::int64_t kAmxMinRows = 32;

}  // namespace

bool quant_int8_available() {
    static const bool on = [] {
        const char* e = std::getenv("KEV_Q4_INT8");
        return !(e && std::string(e) == "0");
    }();
    return on;
}

bool quant_int8_kernel_supported(Int8Kernel kernel) {
    switch (kernel) {
        case Int8Kernel::Scalar: return true;
        case Int8Kernel::Avx2: return cpu_has_avx2_fma();
        case Int8Kernel::AvxVnni: return cpu_has_avx_vnni();
        case Int8Kernel::Vnni: return cpu_has_avx512_vnni();
        case Int8Kernel::Amx: return cpu_has_amx_int8();
    }
    return false;
}

namespace {
std::atomic<bool>& avx_vnni_allowed() {
    static std::atomic<bool> on{[] {
        const char* e = std::getenv("KEV_Q4_INT8_AVXVNNI");
        return !(e && std::string(e) == "0");
    }()};
    return on;
}
}  // namespace

void set_quant_int8_avx_vnni(bool allowed) { avx_vnni_allowed() = allowed; }

// The widest path under the kernel-family ceiling (kev/cpu_kernels.h). Amx means VNNI
// for calls under kAmxMinRows rows and tiles for prompts. AVX-VNNI belongs to the avx2
// family: a ceiling of avx2 on an AVX-512 CPU that has it runs it.
Int8Kernel quant_int8_kernel() {
    static const bool amx_allowed = [] {
        const char* e = std::getenv("KEV_Q4_INT8_AMX");
        return !(e && std::string(e) == "0");
    }();
    const Isa limit = isa_limit();
    if (limit == Isa::Amx && amx_allowed && quant_int8_kernel_supported(Int8Kernel::Amx)) return Int8Kernel::Amx;
    if (static_cast<int>(limit) >= static_cast<int>(Isa::Avx512) && quant_int8_kernel_supported(Int8Kernel::Vnni))
        return Int8Kernel::Vnni;
    if (static_cast<int>(limit) >= static_cast<int>(Isa::Avx2) && avx_vnni_allowed() &&
        quant_int8_kernel_supported(Int8Kernel::AvxVnni))
        return Int8Kernel::AvxVnni;
    if (static_cast<int>(limit) >= static_cast<int>(Isa::Avx2) && quant_int8_kernel_supported(Int8Kernel::Avx2))
        return Int8Kernel::Avx2;
    return Int8Kernel::Scalar;
}

const char* quant_int8_prompt_kernel() { return to_string(quant_int8_kernel()); }

const char* to_string(Int8Kernel kernel) {
    switch (kernel) {
        case Int8Kernel::Scalar: return "int8 scalar";
        case Int8Kernel::Avx2: return "int8 avx2";
        case Int8Kernel::AvxVnni: return "int8 avx-vnni";
        case Int8Kernel::Vnni: return "int8 avx512-vnni";
        case Int8Kernel::Amx: return "int8 avx512-vnni + amx";
    }
    return "?";
}

QuantMatrix prepare_quant(QuantMatrix q, at::ScalarType activations) {
    const bool half = activations == at::kBFloat16 || activations == at::kHalf;
    if (!half || q.interleaved || !quant_int8_available() || q.rows % 16 != 0 ||
        q.cols % 32 != 0)
        return q;
    return interleave_rows16(q);
}

at::Tensor quant_int8_linear(const at::Tensor& x_in, const QuantMatrix& w, const at::Tensor& bias, Int8Kernel kernel) {
    if (!w.interleaved || x_in.dim() != 2 || x_in.size(1) != w.cols || !x_in.device().is_cpu())
        throw Error(ErrorCode::InvalidArgument, "quant_int8_linear: x must be [M, cols] on the CPU and w interleaved");
    if (!quant_int8_kernel_supported(kernel))
        throw Error(ErrorCode::Unsupported, std::string("this CPU cannot run the ") + to_string(kernel) + " 4-bit kernel");
    const std::int64_t M = x_in.size(0), K = w.cols, O = w.rows, G = K / 32;
    const bool bf16_out = x_in.scalar_type() == at::kBFloat16;
    at::Tensor y = at::empty({M, O}, bf16_out ? at::kBFloat16 : at::kFloat);  // [M, O]
    if (M == 0) return y.to(x_in.scalar_type());
    // The bias in fp32 (exact from bf16 / fp16), widened here: a libtorch conversion cost
    // a few microseconds a call, as much as a small decode product's sums.
    std::vector<float> b32;  // [O]
    if (bias.defined()) {
        const at::Tensor bc = bias.contiguous();
        if (bc.numel() != O) throw Error(ErrorCode::InvalidArgument, "quant_int8_linear: the bias has not one value per output");
        b32.resize(static_cast<std::size_t>(O));
        switch (bc.scalar_type()) {
            case at::kFloat: std::memcpy(b32.data(), bc.data_ptr<float>(), b32.size() * sizeof(float)); break;
            case at::kBFloat16: {
                const at::BFloat16* bp = bc.data_ptr<at::BFloat16>();
                for (std::int64_t o = 0; o < O; ++o) b32[static_cast<std::size_t>(o)] = static_cast<float>(bp[o]);
                break;
            }
            case at::kHalf: {
                const at::Half* bp = bc.data_ptr<at::Half>();
                for (std::int64_t o = 0; o < O; ++o) b32[static_cast<std::size_t>(o)] = static_cast<float>(bp[o]);
                break;
            }
            default: {
                const at::Tensor f = bc.to(at::kFloat);
                std::memcpy(b32.data(), f.data_ptr<float>(), b32.size() * sizeof(float));
            }
        }
    }
    Out yp;
    if (bf16_out) yp.bf16 = reinterpret_cast<std::uint16_t*>(y.data_ptr<at::BFloat16>());
    else yp.f32 = y.data_ptr<float>();
    yp.bias = b32.empty() ? nullptr : b32.data();
    yp.ld = O;
    const CodeBytes cb = code_bytes(w);
    const bool simd512 = kernel == Int8Kernel::Vnni || kernel == Int8Kernel::Amx;
    const bool avx_vnni = kernel == Int8Kernel::AvxVnni;
    const bool avx2 = kernel == Int8Kernel::Avx2 || avx_vnni;  // AVX-VNNI: the AVX2 kernel's shape
    // Activations to int8, slice by slice; threads share the work only for prompts
    // (decode calls have at most 16 x 152 slices).
    Int8Acts a;
    a.resize(M, K);
    const bool bf16_in = (simd512 || avx2) && x_in.scalar_type() == at::kBFloat16;
    const at::Tensor x = bf16_in ? x_in.contiguous() : x_in.to(at::kFloat).contiguous();  // [M, K]
    at::parallel_for(0, M * G, 4096, [&](std::int64_t i0, std::int64_t i1) {
        if (simd512 && bf16_in) quantize_slices<true>(x.data_ptr<at::BFloat16>(), i0, i1, cb, a);
        else if (simd512) quantize_slices<false>(x.data_ptr<float>(), i0, i1, cb, a);
        else if (avx2 && bf16_in) quantize_slices_avx2<true>(x.data_ptr<at::BFloat16>(), i0, i1, cb, a);
        else if (avx2) quantize_slices_avx2<false>(x.data_ptr<float>(), i0, i1, cb, a);
        else quantize_slices_scalar(x.data_ptr<float>(), i0, i1, cb, a);
    });
    const bool nf4 = w.format == QuantFormat::NF4, bytes = w.byte_codes(), mins = !w.mins.empty();
    const bool q4k = w.format == QuantFormat::Q4_K, q5k = w.format == QuantFormat::Q5_K, q6k = w.format == QuantFormat::Q6_K;
    // AMX takes whole passes of 16 rows; VNNI passes of 8 take the rest.
    // (Q6_K's half-slice sums are not the tile's whole-slice products: VNNI passes only.)
    const std::int64_t amx_rows = kernel == Int8Kernel::Amx && M >= kAmxMinRows && !q6k ? M / 16 * 16 : 0;
    const std::int64_t per_pass = avx2 ? kRowsPerPassAvx2 : kRowsPerPass;
    auto vnni_passes = [&](std::int64_t from, std::int64_t R0, std::int64_t R1) {
        for (std::int64_t m0 = from; m0 < M; m0 += per_pass) {
            if (avx2) {
                with_rows<kRowsPerPassAvx2>(std::min(per_pass, M - m0), [&](auto mb) {
                    constexpr int MB = decltype(mb)::value;
                    if (avx_vnni) avx2_groups<MB, true>(w, cb, a, m0, yp, R0, R1);
                    else avx2_groups<MB, false>(w, cb, a, m0, yp, R0, R1);
                });
                continue;
            }
            with_rows<kRowsPerPass>(std::min(kRowsPerPass, M - m0), [&](auto mb) {
                constexpr int MB = decltype(mb)::value;
                if (nf4) groups<MB, kNf4Codes, false>(w, cb, a, m0, yp, R0, R1);
                else if (q4k) groups<MB, kNibblesK, true>(w, cb, a, m0, yp, R0, R1);
                else if (q5k) groups<MB, kBytesK, true>(w, cb, a, m0, yp, R0, R1);
                else if (q6k) groups<MB, kBytes16, false>(w, cb, a, m0, yp, R0, R1);
                else if (bytes) groups<MB, kBytes, false>(w, cb, a, m0, yp, R0, R1);
                else if (mins) groups<MB, kNibbles, true>(w, cb, a, m0, yp, R0, R1);
                else groups<MB, kNibbles, false>(w, cb, a, m0, yp, R0, R1);
            });
        }
    };
    // Groups per task: a few hundred KB of codes, fewer when many rows share the call.
    const std::int64_t grain = std::max<std::int64_t>(1, (1 << 18) / (8 * K) / ((M + per_pass - 1) / per_pass));
    at::parallel_for(0, O / 16, grain, [&](std::int64_t R0, std::int64_t R1) {
        if (!simd512 && !avx2) return groups_scalar(w, cb, a, M, yp, R0, R1);
        if (amx_rows > 0) {
            // Chunks of groups expanded once (~256 KB), then every pass over them.
            const std::int64_t chunk = std::max<std::int64_t>(1, (1 << 18) / (G * 512));
            std::vector<std::uint8_t> bx(static_cast<std::size_t>(std::min(chunk, R1 - R0) * G * 512));
            for (std::int64_t R = R0; R < R1; R += chunk) {
                const std::int64_t Rn = std::min(R1, R + chunk);
                if (nf4) amx_expand<kNf4Codes>(w, cb, R, Rn, bx.data());
                else if (bytes) amx_expand<kBytes>(w, cb, R, Rn, bx.data());
                else amx_expand<kNibbles>(w, cb, R, Rn, bx.data());
                for (std::int64_t m0 = 0; m0 < amx_rows; m0 += 16) {
                    if (q4k || q5k) groups_amx<true, true>(w, a, m0, yp, R, Rn, bx.data());
                    else if (mins) groups_amx<true, false>(w, a, m0, yp, R, Rn, bx.data());
                    else groups_amx<false, false>(w, a, m0, yp, R, Rn, bx.data());
                }
                vnni_passes(amx_rows, R, Rn);
            }
            return;
        }
        // One pass per 8 (AVX2: 4) rows; with more than one, group by group so the
        // group's codes (16 x K / 2 bytes) stay in cache between passes.
        const std::int64_t step = M <= per_pass ? R1 - R0 : 1;
        for (std::int64_t R = R0; R < R1; R += step) vnni_passes(0, R, R + step);
    });
    return bf16_out || x_in.scalar_type() == at::kFloat ? y : y.to(x_in.scalar_type());
}

}  // namespace kev
