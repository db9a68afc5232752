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
#include "kev/quant.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "half.h"
#include "kev/error.h"
// GCC 12 warns inside its own _mm512_reduce_* helpers (a known false positive).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

namespace kev {

namespace {

#define KEV_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")))

// How a format's codes enter as unsigned bytes: value = (u8[code] - offset) * unit
// (the 16 bytes repeated in each 128-bit lane, vpshufb's table).
struct CodeBytes {
    std::uint8_t u8[64];
    std::int32_t offset;
    float unit;
};

CodeBytes code_bytes(const QuantMatrix& w) {
    CodeBytes c{};
    const bool nf4 = w.format == QuantFormat::NF4;
    c.offset = nf4 ? 127 : w.format == QuantFormat::Q4_0 ? 8 : 0;
    c.unit = nf4 ? 1.0f / 127.0f : 1.0f;
    for (int i = 0; i < 64; ++i)
        c.u8[i] = static_cast<std::uint8_t>(nf4 ? std::lrint(w.lut[i % 16] * 127.0f) + 127 : i % 16);
    return c;
}

// Activations quantized per row and 32-column slice: q [M][K] int8, and per slice
// dx' = scale * unit, init = -offset * sum(q), and sum(q) * scale (for mins).
struct Int8Acts {
    std::vector<std::int8_t> q;
    std::vector<float> dxu, sdx;
    std::vector<std::int32_t> init;

    void resize(std::int64_t M, std::int64_t K) {
        q.resize(static_cast<std::size_t>(M * K));
        dxu.resize(static_cast<std::size_t>(M * K / 32));
        sdx.resize(dxu.size());
        init.resize(dxu.size());
    }
    // Slice i's numbers from its absmax and the sum of its codes.
    void set_slice(std::int64_t i, float amax, std::int32_t sum, const CodeBytes& cb) {
        const float dx = amax / 127.0f;
        dxu[i] = dx * cb.unit;
        sdx[i] = static_cast<float>(sum) * dx;
        init[i] = -cb.offset * sum;
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
KEV_VNNI void quantize_rows(const void* x, std::int64_t M, std::int64_t K, const CodeBytes& cb, Int8Acts& a) {
    const std::int64_t G = K / 32;
    a.resize(M, K);
    for (std::int64_t i = 0; i < M * G; ++i) {
        __m512 v0, v1;
        load32<kBf16>(x, i * 32, v0, v1);
        const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
        const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
        const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, _mm512_set1_ps(inv)));  // nearest, ties to even
        const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, _mm512_set1_ps(inv)));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(a.q.data() + i * 32), _mm512_cvtepi32_epi8(q0));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(a.q.data() + i * 32 + 16), _mm512_cvtepi32_epi8(q1));
        a.set_slice(i, amax, _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1)), cb);
    }
}

// acc + u8 x s8 dot products of w's lanes with the 4 bytes at x repeated: vpdpbusd with
// the activation quad broadcast from memory inside the instruction (GCC emits a separate
// vpbroadcastd for _mm512_set1_epi32, one more instruction per 64 multiply-adds).
KEV_VNNI inline __m512i dpbusd_bcast(__m512i acc, __m512i w, const std::int32_t* x) {
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*x));
    return acc;
}

// Output groups [R0, R1) for activation rows [0, MB) of `a` starting at row m0.
template <int MB, bool kNf4, bool kMins>
KEV_VNNI void groups(const QuantMatrix& w, const CodeBytes& cb, const Int8Acts& a, std::int64_t m0, float* y,
                     std::int64_t R0, std::int64_t R1) {
    const std::int64_t K = w.cols, G = K / 32, O = w.rows, bpr = w.blocks_per_row();
    const int block_shift = w.block == 64 ? 1 : 0;  // slice -> block (a shift, not a division per slice)
    const __m512i nibble = _mm512_set1_epi8(0x0f);
    const __m512i table = _mm512_loadu_si512(cb.u8);
    const std::int8_t* xq = a.q.data() + m0 * K;
    const std::int64_t s0 = m0 * G;  // first slice index of row m0
    for (std::int64_t R = R0; R < R1; ++R) {
        __m512 acc[MB];
        for (int m = 0; m < MB; ++m) acc[m] = _mm512_setzero_ps();
        const std::uint8_t* lines = w.codes.data() + R * G * 256;
        for (std::int64_t g = 0; g < G; ++g, lines += 256) {
            const std::int64_t sc = (R * bpr + (g >> block_shift)) * 16;
            const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.scales.data() + sc)));
            __m512i s[MB];
            for (int m = 0; m < MB; ++m) s[m] = _mm512_set1_epi32(a.init[s0 + m * G + g]);
            for (int c = 0; c < 4; ++c) {
                const __m512i v = _mm512_loadu_si512(lines + 64 * c);
                __m512i lo = _mm512_and_si512(v, nibble);
                __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), nibble);
                if constexpr (kNf4) {
                    lo = _mm512_shuffle_epi8(table, lo);
                    hi = _mm512_shuffle_epi8(table, hi);
                }
                for (int m = 0; m < MB; ++m) {
                    const std::int32_t* xm = reinterpret_cast<const std::int32_t*>(xq + m * K + g * 32 + 8 * c);
                    s[m] = dpbusd_bcast(s[m], lo, xm);
                    s[m] = dpbusd_bcast(s[m], hi, xm + 1);
                }
            }
            for (int m = 0; m < MB; ++m) {
                const __m512 t = _mm512_mul_ps(_mm512_cvtepi32_ps(s[m]), _mm512_set1_ps(a.dxu[s0 + m * G + g]));
                acc[m] = _mm512_fmadd_ps(t, d, acc[m]);
            }
            if constexpr (kMins) {
                const __m512 mn = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.mins.data() + sc)));
                for (int m = 0; m < MB; ++m) acc[m] = _mm512_fmadd_ps(mn, _mm512_set1_ps(a.sdx[s0 + m * G + g]), acc[m]);
            }
        }
        for (int m = 0; m < MB; ++m) _mm512_storeu_ps(y + (m0 + m) * O + R * 16, acc[m]);
    }
}

#undef KEV_VNNI

// The same arithmetic without SIMD (CPUs without VNNI; tests compare the two bit for
// bit): x*inv rounded to nearest even, exact int32 sums, fmaf's single rounding.
void quantize_rows_scalar(const float* x, std::int64_t M, std::int64_t K, const CodeBytes& cb, Int8Acts& a) {
    const std::int64_t G = K / 32;
    a.resize(M, K);
    for (std::int64_t i = 0; i < M * G; ++i) {
        const float* v = x + i * 32;
        float amax = 0.0f;
        for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(v[j]));
        const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
        std::int32_t sum = 0;
        for (int j = 0; j < 32; ++j) {
            const auto q = static_cast<std::int8_t>(std::lrint(v[j] * inv));
            a.q[static_cast<std::size_t>(i * 32 + j)] = q;
            sum += q;
        }
        a.set_slice(i, amax, sum, cb);
    }
}

void groups_scalar(const QuantMatrix& w, const CodeBytes& cb, const Int8Acts& a, std::int64_t M, float* y,
                   std::int64_t R0, std::int64_t R1) {
    const std::int64_t K = w.cols, G = K / 32, O = w.rows, bpr = w.blocks_per_row(), per_block = w.block / 32;
    for (std::int64_t R = R0; R < R1; ++R) {
        for (std::int64_t m = 0; m < M; ++m) {
            float acc[16] = {};
            for (std::int64_t g = 0; g < G; ++g) {
                const std::uint8_t* lines = w.codes.data() + (R * G + g) * 256;
                const std::int8_t* xq = a.q.data() + m * K + g * 32;
                const std::int64_t sc = (R * bpr + g / per_block) * 16, slice = m * G + g;
                for (int r = 0; r < 16; ++r) {
                    std::int32_t sum = a.init[slice];
                    for (int c = 0; c < 4; ++c) {
                        for (int t = 0; t < 4; ++t) {
                            const std::uint8_t byte = lines[64 * c + 4 * r + t];
                            sum += cb.u8[byte & 0x0f] * xq[8 * c + t] + cb.u8[byte >> 4] * xq[8 * c + 4 + t];
                        }
                    }
                    const float t = static_cast<float>(sum) * a.dxu[slice];
                    acc[r] = std::fmaf(t, fp16_to_float(w.scales[sc + r]), acc[r]);
                    if (!w.mins.empty()) acc[r] = std::fmaf(fp16_to_float(w.mins[sc + r]), a.sdx[slice], acc[r]);
                }
            }
            std::copy(acc, acc + 16, y + m * O + R * 16);
        }
    }
}

// MB, the format's NF4-ness and its mins are template parameters; pick them at run time.
template <int N, typename Fn>
void with_rows(std::int64_t mb, Fn&& fn) {
    if constexpr (N >= 1) {
        if (mb == N) return fn(std::integral_constant<int, N>{});
        with_rows<N - 1>(mb, fn);
    }
}

constexpr std::int64_t kRowsPerPass = 8;  // 8 int32 + 8 fp32 accumulators in registers

}  // namespace

bool quant_int8_available() {
    static const bool available = [] {
        const char* e = std::getenv("KEV_Q4_INT8");
        if (e && std::string(e) == "0") return false;
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
    }();
    return available;
}

QuantMatrix prepare_quant(QuantMatrix q, at::ScalarType activations) {
    const bool half = activations == at::kBFloat16 || activations == at::kHalf;
    if (!half || q.interleaved || !quant_int8_available() || q.rows % 16 != 0 || q.cols % 32 != 0) return q;
    return interleave_rows16(q);
}

at::Tensor quant_int8_linear(const at::Tensor& x_in, const QuantMatrix& w, const at::Tensor& bias, bool vnni) {
    if (!w.interleaved || x_in.dim() != 2 || x_in.size(1) != w.cols || !x_in.device().is_cpu())
        throw Error(ErrorCode::InvalidArgument, "quant_int8_linear: x must be [M, cols] on the CPU and w interleaved");
    if (vnni && !quant_int8_available()) throw Error(ErrorCode::Unsupported, "the int8 4-bit kernel needs AVX512-VNNI");
    const std::int64_t M = x_in.size(0), K = w.cols, O = w.rows;
    at::Tensor y = at::empty({M, O}, at::kFloat);  // [M, O]
    if (M == 0) return y.to(x_in.scalar_type());
    const CodeBytes cb = code_bytes(w);
    Int8Acts a;
    if (vnni && x_in.scalar_type() == at::kBFloat16) {
        const at::Tensor x = x_in.contiguous();
        quantize_rows<true>(x.data_ptr<at::BFloat16>(), M, K, cb, a);
    } else {
        const at::Tensor x = x_in.to(at::kFloat).contiguous();
        if (vnni) quantize_rows<false>(x.data_ptr<float>(), M, K, cb, a);
        else quantize_rows_scalar(x.data_ptr<float>(), M, K, cb, a);
    }
    float* yp = y.data_ptr<float>();
    const bool nf4 = w.format == QuantFormat::NF4, mins = !w.mins.empty();
    // Groups per task: a few hundred KB of codes, fewer when many rows share the call.
    const std::int64_t grain = std::max<std::int64_t>(1, (1 << 18) / (8 * K) / ((M + kRowsPerPass - 1) / kRowsPerPass));
    at::parallel_for(0, O / 16, grain, [&](std::int64_t R0, std::int64_t R1) {
        if (!vnni) return groups_scalar(w, cb, a, M, yp, R0, R1);
        // One pass per 8 activation rows; with more than one pass, group by group so the
        // group's codes (16 x K / 2 bytes) stay in cache between passes.
        const std::int64_t step = M <= kRowsPerPass ? R1 - R0 : 1;
        for (std::int64_t R = R0; R < R1; R += step) {
            for (std::int64_t m0 = 0; m0 < M; m0 += kRowsPerPass) {
                with_rows<kRowsPerPass>(std::min(kRowsPerPass, M - m0), [&](auto mb) {
                    constexpr int MB = decltype(mb)::value;
                    if (nf4) groups<MB, true, false>(w, cb, a, m0, yp, R, R + step);
                    else if (mins) groups<MB, false, true>(w, cb, a, m0, yp, R, R + step);
                    else groups<MB, false, false>(w, cb, a, m0, yp, R, R + step);
                });
            }
        }
    });
    if (bias.defined()) y.add_(bias.to(at::kFloat));
    return x_in.scalar_type() == at::kFloat ? y : y.to(x_in.scalar_type());
}

}  // namespace kev
