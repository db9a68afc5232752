// The 4-bit multiply (kev/quant.h). Decoding is memory-bound: a step streams every
// weight once, so for the decode shapes (M <= 16 rows, one per active card) the codes
// are read once per call and expanded in registers, never to memory, and each
// expanded weight vector is used for all M rows before the next one is made:
//
//   for each output row o (split across threads):
//     for each block b of row o:      scaled table t = lut * d_b (+ m_b), 16 values
//       for each 32-code group:       w = t[codes]  (one permute per 32 weights)
//         for m in 0..M:              acc[m] += w . x[m]
//     y[m, o] = sum(acc[m])
//
// Three paths, chosen at run time: AVX-512 (for half activations: bf16 weights and
// activations, vdpbf16ps, 32 multiply-adds per instruction with fp32 accumulation; for
// fp32 activations: fp32 FMAs), AVX2 (fp32, 8 lanes) and scalar. KEV_Q4_KERNEL forces
// one so the tests can check that they agree. Prompts run through the same kernels in
// passes of 16 rows: a row is computed alike at prefill and decode, alone or packed.
//
// Byte-coded matrices (Q8_0) take the byte kernels of linear_q8.cpp through quant_gemv.
//
// Matrices in the interleaved layout (prepare_quant: half activations on a CPU with
// VNNI, the usual case for the app's 4-bit) go to the int8 kernel instead, for every
// number of rows (linear_q4_int8.cpp); everything below serves the row layout.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "half.h"
#include "kev/error.h"
#include "kev/quant.h"
#include "kev/cpu_kernels.h"
#include "model/linear_bf16.h"
#include "model/linear_q8.h"
#include "model/quant_blocks.h"
#include "model/quant_cuda.h"
#include "model/with_rows.h"
// GCC 12 warns inside its own _mm512_reduce_add_ps and _mm512_broadcast_i64x4, whose
// "undefined" source operand is never read (known false positives).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

namespace kev {

namespace {

// ---------------------------------------------------------------------------
// AVX-512 building blocks (bf16 activations). A block's 16 code values scaled (and
// offset) into bf16, repeated in both halves of the register for the 32-lane permute;
// and 32 weights (16 bytes of codes, ggml's nibble order) looked up in that table.
#define KEV_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,f16c")))
KEV_AVX512_BF16 inline __m512i block_table(const QuantMatrix& w, __m512 lut, std::int64_t at) {
    __m512 t = _mm512_mul_ps(lut, _mm512_set1_ps(block_scale(w, at)));
    if (!w.mins.empty()) t = _mm512_add_ps(t, _mm512_set1_ps(block_offset(w, at)));
    return _mm512_broadcast_i64x4((__m256i)_mm512_cvtneps_pbh(t));
}

KEV_AVX512_BF16 inline __m512bh expand32(const std::uint8_t* codes, __m512i table) {
    const __m256i c = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes)));
    const __m256i nibble = _mm256_set1_epi16(0x0f);
    const __m512i idx =
        _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(c, nibble)), _mm256_srli_epi16(c, 4), 1);
    return (__m512bh)_mm512_permutexvar_epi16(idx, table);
}

// AVX-512: x in bf16 [M, cols]; y fp32 [M, ldy].
template <int MB>
KEV_AVX512_BF16 void rows_avx512(const QuantMatrix& w, const std::uint16_t* x, std::int64_t ldx, float* y,
                                 std::int64_t ldy, std::int64_t o0, std::int64_t o1) {
    const __m512 lut = _mm512_loadu_ps(w.lut.data());
    const std::int64_t bpr = w.blocks_per_row(), B = w.block;
    for (std::int64_t o = o0; o < o1; ++o) {
        __m512 acc[MB];
        for (int m = 0; m < MB; ++m) acc[m] = _mm512_setzero_ps();
        const std::uint8_t* codes = w.codes.data() + o * (w.cols / 2);
        for (std::int64_t b = 0; b < bpr; ++b) {
            const __m512i table = block_table(w, lut, o * bpr + b);
            for (std::int64_t i = b * B; i < (b + 1) * B; i += 32) {
                const __m512bh wv = expand32(codes + i / 2, table);
                for (int m = 0; m < MB; ++m)
                    acc[m] = _mm512_dpbf16_ps(acc[m], wv, (__m512bh)_mm512_loadu_si512(x + m * ldx + i));
            }
        }
        for (int m = 0; m < MB; ++m) y[m * ldy + o] = _mm512_reduce_add_ps(acc[m]);
    }
}

// Two output rows at a time, up to 8 rows of x: each x vector loaded once for both
// weight rows (16 accumulators), halving the activation reads that bound M >= 4.
template <int MB>
KEV_AVX512_BF16 void row_pairs_avx512(const QuantMatrix& w, const std::uint16_t* x, std::int64_t ldx, float* y,
                                      std::int64_t ldy, std::int64_t o0, std::int64_t o1) {
    const __m512 lut = _mm512_loadu_ps(w.lut.data());
    const std::int64_t bpr = w.blocks_per_row(), B = w.block, half = w.cols / 2;
    std::int64_t o = o0;
    for (; o + 2 <= o1; o += 2) {
        __m512 acc0[MB], acc1[MB];
        for (int m = 0; m < MB; ++m) acc0[m] = acc1[m] = _mm512_setzero_ps();
        const std::uint8_t* c0 = w.codes.data() + o * half;
        const std::uint8_t* c1 = c0 + half;
        for (std::int64_t b = 0; b < bpr; ++b) {
            const __m512i t0 = block_table(w, lut, o * bpr + b);
            const __m512i t1 = block_table(w, lut, (o + 1) * bpr + b);
            for (std::int64_t g = 0; g < B; g += 32) {
                const std::int64_t i = b * B + g;
                const __m512bh w0 = expand32(c0 + i / 2, t0);
                const __m512bh w1 = expand32(c1 + i / 2, t1);
                for (int m = 0; m < MB; ++m) {
                    const __m512bh xv = (__m512bh)_mm512_loadu_si512(x + m * ldx + i);
                    acc0[m] = _mm512_dpbf16_ps(acc0[m], w0, xv);
                    acc1[m] = _mm512_dpbf16_ps(acc1[m], w1, xv);
                }
            }
        }
        for (int m = 0; m < MB; ++m) {
            y[m * ldy + o] = _mm512_reduce_add_ps(acc0[m]);
            y[m * ldy + o + 1] = _mm512_reduce_add_ps(acc1[m]);
        }
    }
    if (o < o1) rows_avx512<MB>(w, x, ldx, y, ldy, o, o1);
}

// AMX: output blocks [ob0, ob1) of 16 rows for up to 16 rows of bf16 activations (xp in
// the tile unit's B layout). Each 16x32 block of weights is dequantized once into a
// 1 KB bf16 tile (the table lookups of rows_avx512) and multiplied with every activation
// row in one tile instruction: the work per weight no longer grows with the rows.
__attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512bf16,f16c"))) void amx_q4_blocks(
    const QuantMatrix& w, const std::uint16_t* xp, std::int64_t M, const std::uint16_t* bias, std::uint16_t* y,
    std::int64_t ob0, std::int64_t ob1) {
    amx_load_tile_config();
    const __m512 lut = _mm512_loadu_ps(w.lut.data());
    const std::int64_t bpr = w.blocks_per_row(), B = w.block, half = w.cols / 2, k_blocks = w.cols / 32;
    alignas(64) std::uint16_t a[16 * 32];
    alignas(64) float c[16 * 16];
    for (std::int64_t ob = ob0; ob < ob1; ++ob) {
        const std::int64_t o_first = ob * 16;
        _tile_zero(0);
        for (std::int64_t kb = 0; kb < k_blocks; ++kb) {
            const std::int64_t i = kb * 32, blk = i / B;
            for (std::int64_t r = 0; r < 16; ++r) {
                const std::int64_t o = o_first + r;
                const __m512i table = block_table(w, lut, o * bpr + blk);
                _mm512_store_si512(a + r * 32, (__m512i)expand32(w.codes.data() + o * half + i / 2, table));
            }
            _tile_loadd(4, a, 64);
            _tile_loadd(6, xp + kb * 512, 64);
            _tile_dpbf16ps(0, 4, 6);
        }
        _tile_stored(0, c, 64);
        amx_store_tile(c, M, bias ? bias + o_first : nullptr, y + o_first, w.rows);
    }
    _tile_release();
}

// AVX-512 with fp32 activations (an fp32 working dtype): the same loop with the table
// in fp32 and two 16-lane FMAs per 32 weights, so a row's result does not depend on
// the rounding of bf16 and agrees with the dense fp32 path to float accuracy.
template <int MB>
__attribute__((target("avx512f,avx512bw,avx512vl,f16c"))) void rows_avx512_f32(
    const QuantMatrix& w, const float* x, std::int64_t ldx, float* y, std::int64_t ldy, std::int64_t o0,
    std::int64_t o1) {
    const __m512 lut = _mm512_loadu_ps(w.lut.data());
    const __m512i nibble = _mm512_set1_epi32(0x0f);
    const std::int64_t bpr = w.blocks_per_row(), B = w.block;
    const bool has_min = !w.mins.empty();
    for (std::int64_t o = o0; o < o1; ++o) {
        __m512 acc[MB];
        for (int m = 0; m < MB; ++m) acc[m] = _mm512_setzero_ps();
        const std::uint8_t* codes = w.codes.data() + o * (w.cols / 2);
        for (std::int64_t b = 0; b < bpr; ++b) {
            __m512 t = _mm512_mul_ps(lut, _mm512_set1_ps(block_scale(w, o * bpr + b)));
            if (has_min) t = _mm512_add_ps(t, _mm512_set1_ps(block_offset(w, o * bpr + b)));
            for (std::int64_t g = 0; g < B; g += 32) {
                const std::int64_t i = b * B + g;
                const __m512i c = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + i / 2)));
                const __m512 w_lo = _mm512_permutexvar_ps(_mm512_and_si512(c, nibble), t);  // elements 0-15
                const __m512 w_hi = _mm512_permutexvar_ps(_mm512_srli_epi32(c, 4), t);      // elements 16-31
                for (int m = 0; m < MB; ++m) {
                    acc[m] = _mm512_fmadd_ps(w_lo, _mm512_loadu_ps(x + m * ldx + i), acc[m]);
                    acc[m] = _mm512_fmadd_ps(w_hi, _mm512_loadu_ps(x + m * ldx + i + 16), acc[m]);
                }
            }
        }
        for (int m = 0; m < MB; ++m) y[m * ldy + o] = _mm512_reduce_add_ps(acc[m]);
    }
}

#undef KEV_AVX512_BF16

// ---------------------------------------------------------------------------
// AVX2: x in fp32 [M, cols]; 8 rows of x at a time (16 ymm registers in all).

// 8 weights from 8 codes: two 8-entry permutes, picked by the code's bit 3.
__attribute__((target("avx2,fma"))) inline __m256 expand(__m256i code, __m256 t_lo, __m256 t_hi) {
    const __m256 sel = _mm256_castsi256_ps(_mm256_slli_epi32(code, 28));
    return _mm256_blendv_ps(_mm256_permutevar8x32_ps(t_lo, code), _mm256_permutevar8x32_ps(t_hi, code), sel);
}

template <int MB>
__attribute__((target("avx2,fma,f16c"))) void rows_avx2(const QuantMatrix& w, const float* x, std::int64_t ldx,
                                                        float* y, std::int64_t ldy, std::int64_t o0, std::int64_t o1) {
    const __m256 lut_lo = _mm256_loadu_ps(w.lut.data());
    const __m256 lut_hi = _mm256_loadu_ps(w.lut.data() + 8);
    const __m256i nibble = _mm256_set1_epi32(0x0f);
    const std::int64_t bpr = w.blocks_per_row(), B = w.block;
    const bool has_min = !w.mins.empty();
    for (std::int64_t o = o0; o < o1; ++o) {
        __m256 acc[MB];
        for (int m = 0; m < MB; ++m) acc[m] = _mm256_setzero_ps();
        const std::uint8_t* codes = w.codes.data() + o * (w.cols / 2);
        for (std::int64_t b = 0; b < bpr; ++b) {
            const __m256 d = _mm256_set1_ps(block_scale(w, o * bpr + b));
            const __m256 mn = _mm256_set1_ps(has_min ? block_offset(w, o * bpr + b) : 0.0f);
            const __m256 t_lo = _mm256_fmadd_ps(lut_lo, d, mn);
            const __m256 t_hi = _mm256_fmadd_ps(lut_hi, d, mn);
            for (std::int64_t g = 0; g < B; g += 32) {
                const std::int64_t i = b * B + g;
                const std::uint8_t* c = codes + i / 2;
                for (int h = 0; h < 2; ++h) {  // bytes 0-7, then 8-15
                    const __m256i bytes =
                        _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(c + 8 * h)));
                    const __m256 w_lo = expand(_mm256_and_si256(bytes, nibble), t_lo, t_hi);  // elements 8h..8h+7
                    const __m256 w_hi = expand(_mm256_srli_epi32(bytes, 4), t_lo, t_hi);       // elements 16+8h..
                    for (int m = 0; m < MB; ++m) {
                        const float* xm = x + m * ldx + i;
                        acc[m] = _mm256_fmadd_ps(w_lo, _mm256_loadu_ps(xm + 8 * h), acc[m]);
                        acc[m] = _mm256_fmadd_ps(w_hi, _mm256_loadu_ps(xm + 16 + 8 * h), acc[m]);
                    }
                }
            }
        }
        for (int m = 0; m < MB; ++m) {
            const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(acc[m]), _mm256_extractf128_ps(acc[m], 1));
            const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
            y[m * ldy + o] = _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
        }
    }
}

// ---------------------------------------------------------------------------
// Scalar: x in fp32 [M, cols].
void rows_scalar(const QuantMatrix& w, const float* x, std::int64_t ldx, std::int64_t M, float* y, std::int64_t ldy,
                 std::int64_t o0, std::int64_t o1) {
    const std::int64_t bpr = w.blocks_per_row(), B = w.block;
    float wb[64];
    float acc[kQuantGemvMaxRows];
    for (std::int64_t o = o0; o < o1; ++o) {
        std::fill_n(acc, M, 0.0f);
        for (std::int64_t b = 0; b < bpr; ++b) {
            const float d = block_scale(w, o * bpr + b);
            const float mn = block_offset(w, o * bpr + b);
            const std::uint8_t* c = w.codes.data() + (o * w.cols + b * B) / 2;
            for (std::int64_t g = 0; g < B; g += 32) {
                for (int j = 0; j < 16; ++j) {
                    wb[g + j] = w.lut[c[g / 2 + j] & 0x0f] * d + mn;
                    wb[g + j + 16] = w.lut[c[g / 2 + j] >> 4] * d + mn;
                }
            }
            for (std::int64_t m = 0; m < M; ++m) {
                const float* xm = x + m * ldx + b * B;
                float s = 0.0f;
                for (std::int64_t j = 0; j < B; ++j) s += wb[j] * xm[j];
                acc[m] += s;
            }
        }
        for (std::int64_t m = 0; m < M; ++m) y[m * ldy + o] = acc[m];
    }
}

}  // namespace

const char* to_string(QuantKernel kernel) {
    switch (kernel) {
        case QuantKernel::Avx512: return "avx512";
        case QuantKernel::Avx2: return "avx2";
        case QuantKernel::Scalar: return "scalar";
    }
    return "?";
}

bool quant_kernel_supported(QuantKernel kernel) {
    switch (kernel) {
        case QuantKernel::Avx512: return cpu_has_avx512_bf16();  // its bf16-activation loop needs vdpbf16ps
        case QuantKernel::Avx2: return cpu_has_avx2_fma();
        case QuantKernel::Scalar: return true;
    }
    return false;
}

QuantKernel quant_kernel() {
    static const QuantKernel forced = [] {
        const char* e = std::getenv("KEV_Q4_KERNEL");
        const std::string want = e ? e : "";
        if (want.empty()) return QuantKernel::Avx512;  // no force: the widest allowed
        const QuantKernel k = want == "avx512" ? QuantKernel::Avx512 : want == "avx2" ? QuantKernel::Avx2
                              : want == "scalar" ? QuantKernel::Scalar
                                                 : throw Error(ErrorCode::InvalidArgument,
                                                               "KEV_Q4_KERNEL=" + want + ": use avx512, avx2 or scalar");
        if (!quant_kernel_supported(k))
            throw Error(ErrorCode::Unsupported, "KEV_Q4_KERNEL=" + want + ": this CPU cannot run that kernel");
        return k;
    }();
    const Isa limit = isa_limit();
    if (forced == QuantKernel::Avx512 && static_cast<int>(limit) >= static_cast<int>(Isa::Avx512) &&
        quant_kernel_supported(QuantKernel::Avx512))
        return QuantKernel::Avx512;
    if (forced != QuantKernel::Scalar && static_cast<int>(limit) >= static_cast<int>(Isa::Avx2) &&
        quant_kernel_supported(QuantKernel::Avx2))
        return QuantKernel::Avx2;
    return QuantKernel::Scalar;
}

at::Tensor quant_gemv(const at::Tensor& x_in, const QuantMatrix& w, const at::Tensor& bias, QuantKernel kernel) {
    if (x_in.dim() != 2 || x_in.size(1) != w.cols || x_in.size(0) < 1 || x_in.size(0) > kQuantGemvMaxRows ||
        !x_in.device().is_cpu())
        throw Error(ErrorCode::InvalidArgument, "quant_gemv: x must be [1..16, cols] on the CPU");
    if (w.interleaved) throw Error(ErrorCode::InvalidArgument, "quant_gemv: the fused kernels read the row layout");
    if (!quant_kernel_supported(kernel))
        throw Error(ErrorCode::Unsupported, std::string("this CPU cannot run the ") + to_string(kernel) + " 4-bit kernel");
    if (w.byte_codes()) {
        const at::Tensor y = byte_gemv(x_in, w, bias, kernel);
        return x_in.scalar_type() == at::kFloat ? y : y.to(x_in.scalar_type());
    }
    const std::int64_t M = x_in.size(0), I = w.cols, O = w.rows;
    at::Tensor y = at::empty({M, O}, at::kFloat);  // [M, O] fp32 accumulators
    float* yp = y.data_ptr<float>();
    // Enough output rows per task that a thread streams a few hundred KB of codes.
    const std::int64_t grain = std::max<std::int64_t>(8, (1 << 18) / (I / 2 + 1));
    if (kernel == QuantKernel::Avx512 && x_in.scalar_type() != at::kFloat) {
        const at::Tensor x = x_in.to(at::kBFloat16).contiguous();  // [M, I]
        const auto* xp = reinterpret_cast<const std::uint16_t*>(x.data_ptr<at::BFloat16>());
        at::parallel_for(0, O, grain, [&](std::int64_t o0, std::int64_t o1) {
            if (M <= 2) {
                with_rows<2>(M, [&](auto mb) { rows_avx512<decltype(mb)::value>(w, xp, I, yp, O, o0, o1); });
                return;
            }
            for (std::int64_t m = 0; m < M; m += 8) {
                with_rows<8>(std::min<std::int64_t>(8, M - m), [&](auto mb) {
                    row_pairs_avx512<decltype(mb)::value>(w, xp + m * I, I, yp + m * O, O, o0, o1);
                });
            }
        });
    } else {
        const at::Tensor x = x_in.to(at::kFloat).contiguous();  // [M, I]
        const float* xp = x.data_ptr<float>();
        at::parallel_for(0, O, grain, [&](std::int64_t o0, std::int64_t o1) {
            if (kernel == QuantKernel::Scalar) return rows_scalar(w, xp, I, M, yp, O, o0, o1);
            if (kernel == QuantKernel::Avx512) {
                return with_rows<kQuantGemvMaxRows>(
                    M, [&](auto mb) { rows_avx512_f32<decltype(mb)::value>(w, xp, I, yp, O, o0, o1); });
            }
            for (std::int64_t m = 0; m < M; m += 8) {
                with_rows<8>(std::min<std::int64_t>(8, M - m),
                             [&](auto mb) { rows_avx2<decltype(mb)::value>(w, xp + m * I, I, yp + m * O, O, o0, o1); });
            }
        });
    }
    if (bias.defined()) y.add_(bias.to(at::kFloat));
    return x_in.scalar_type() == at::kFloat ? y : y.to(x_in.scalar_type());
}

namespace {

// The AMX path serves decode shapes with bf16 activations when the CPU has AMX and the
// output rows come in whole 16-row blocks; KEV_Q4_AMX=0 turns it off (to compare).
// Measured (kev-bench q4kernel, 9728x896, machine busy): 0.95 / 1.00 / 1.02 ms at 1 / 4 /
// 16 rows, against 0.81 / 4.1 / 8.1 ms for the fused AVX-512 kernel. It also serves one
// row, slightly slower there, so a card alone and in a pack runs the same arithmetic.
bool amx_q4_applies(const QuantMatrix& w) {
    static const bool enabled = [] {
        const char* e = std::getenv("KEV_Q4_AMX");
        return !(e && std::string(e) == "0") && amx_ready();
    }();
    return enabled && isa_limit() == Isa::Amx && !w.byte_codes() && w.rows % 16 == 0 && w.cols % 32 == 0;
}

at::Tensor amx_q4_gemv(const at::Tensor& x_in, const QuantMatrix& w, const at::Tensor& bias) {
    const at::Tensor x = x_in.contiguous();  // [M, I] bf16
    const std::int64_t M = x.size(0);
    at::Tensor y = at::empty({M, w.rows}, x.options());
    const std::vector<std::uint16_t> xp =
        amx_pack_activations(reinterpret_cast<const std::uint16_t*>(x.data_ptr<at::BFloat16>()), M, w.cols);
    const at::Tensor b = bias.defined() ? bias.to(at::kBFloat16).contiguous() : bias;
    const auto* bp = b.defined() ? reinterpret_cast<const std::uint16_t*>(b.data_ptr<at::BFloat16>()) : nullptr;
    auto* yp = reinterpret_cast<std::uint16_t*>(y.data_ptr<at::BFloat16>());
    // Blocks per task: a few hundred KB of codes.
    const std::int64_t grain = std::max<std::int64_t>(1, (1 << 18) / (16 * w.cols / 2));
    at::parallel_for(0, w.rows / 16, grain,
                     [&](std::int64_t b0, std::int64_t b1) { amx_q4_blocks(w, xp.data(), M, bp, yp, b0, b1); });
    return y;
}

}  // namespace

at::Tensor quant_linear(const at::Tensor& x, const QuantMatrix& w, const at::Tensor& bias) {
    if (x.device().is_cpu() == w.on_cuda())
        throw Error(ErrorCode::InvalidArgument, std::string("4-bit linear: activations on ") +
                                                    (x.device().is_cpu() ? "the CPU" : "CUDA") + ", weights on " +
                                                    (w.on_cuda() ? "CUDA" : "the CPU"));
    // x may carry leading batch dimensions; the kernel sees [M, cols].
    const auto lead = x.sizes().slice(0, x.dim() - 1).vec();
    const at::Tensor x2 = x.reshape({-1, w.cols});  // [M, I]
    std::vector<std::int64_t> shape = lead;
    shape.push_back(w.rows);
    if (w.on_cuda()) {
        // One fixed order for every M (kev/quant.h): fp32 sums, rounded once to x's dtype.
        const at::Tensor y = quant_cuda_linear(x2, w, bias);
        return (x.scalar_type() == at::kFloat ? y : y.to(x.scalar_type())).view(shape);
    }
    const std::int64_t M = x2.size(0);
    // Every path below computes a row the same way whatever M (batch invariance): the
    // kernel is chosen by the layout, the activations' dtype and the CPU, never by the
    // number of rows, and the fused kernels take any M in passes of up to 16 rows.
    const QuantKernel kernel = quant_kernel();
    const bool bf16 = x2.scalar_type() == at::kBFloat16 && kernel == QuantKernel::Avx512;
    at::Tensor y;
    if (w.interleaved) {
        y = quant_int8_linear(x2, w, bias, quant_int8_kernel());
    } else if (M == 0) {
        y = at::empty({0, w.rows}, x2.options());
    } else {
        std::vector<at::Tensor> parts;
        for (std::int64_t m0 = 0; m0 < M; m0 += kQuantGemvMaxRows) {
            const at::Tensor xm = x2.narrow(0, m0, std::min(kQuantGemvMaxRows, M - m0));
            parts.push_back(bf16 && amx_q4_applies(w) ? amx_q4_gemv(xm, w, bias) : quant_gemv(xm, w, bias, kernel));
        }
        y = parts.size() == 1 ? parts[0] : at::cat(parts, 0);
    }
    return y.view(shape);
}

}  // namespace kev
