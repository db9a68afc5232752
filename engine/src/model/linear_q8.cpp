// The byte kernels (model/linear_q8.h): Q8_0 matrices kept as the file has them, a signed
// byte per weight and an fp16 scale d per 32; Q6_K's signed bytes with a two-level scale
// per 16 and Q5_K's bytes 0..31 with Q4_K's two-level scale and offset per 32 (kev/quant.h). Decoding streams every weight once, so the
// codes are read once per call and widened in registers, never to memory:
//
//   for each output row o (split across threads):
//     for each block b of row o:             d = the block's scale
//       for each 16 (AVX-512) or 8 (AVX2) codes:   w = float(q) * d   (exact in fp32)
//         for m in 0..M:                     acc[m] += w * x[m]     (one FMA per lane)
//     y[m, o] = sum of acc[m]'s lanes
//
// A weight q * d has at most 8 + 11 significant bits, so w is the file's weight to the
// bit, and the only rounding is the fp32 sum, in one order per output row whatever M or
// the thread split: a card computes the same bits alone or in any pack. Activations are
// read as fp32 (bf16 and fp16 widen exactly). Paths: AVX-512F (16 lanes), AVX2 + FMA (8
// lanes), scalar; KEV_Q4_KERNEL picks among them as for the 4-bit kernels.
//
// These serve fp32 activations (and matrices whose rows do not come in groups of 16).
// Half activations take the int8 kernel (linear_q4_int8.cpp) where it runs: measured with
// kev-bench q4kernel on the built-in model's head (49152 x 576, 2 threads, AVX-512 VNNI),
// 0.47 / 0.51 / 2.1 ms at 1 / 4 / 16 rows there against 2.0 / 1.6 / 9.5 ms here.
#include "model/linear_q8.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "kev/error.h"
#include "model/quant_blocks.h"
#include "model/with_rows.h"
// GCC 12 warns inside its own _mm512_reduce_add_ps (a false positive).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

namespace kev {

namespace {

const std::int8_t* row_codes(const QuantMatrix& w, std::int64_t o) {
    return reinterpret_cast<const std::int8_t*>(w.codes.data()) + o * w.cols;
}

// kMin: the format has block offsets (Q5_K: w = q * scale + offset, the product exact and
// the sum rounded once, as ggml decodes it); without them w = q * scale as before.
template <int MB, bool kMin>
__attribute__((target("avx512f,avx512bw,avx512vl"))) void rows_avx512(const QuantMatrix& w, const float* x,
                                                                       std::int64_t ldx, float* y, std::int64_t ldy,
                                                                       std::int64_t o0, std::int64_t o1) {
    const std::int64_t bpr = w.blocks_per_row(), B = w.block;
    for (std::int64_t o = o0; o < o1; ++o) {
        __m512 acc[MB];
        for (int m = 0; m < MB; ++m) acc[m] = _mm512_setzero_ps();
        const std::int8_t* c = row_codes(w, o);
        for (std::int64_t b = 0; b < bpr; ++b) {
            const __m512 d = _mm512_set1_ps(block_scale(w, o * bpr + b));
            const __m512 off = _mm512_set1_ps(kMin ? block_offset(w, o * bpr + b) : 0.0f);
            for (std::int64_t i = b * B; i < (b + 1) * B; i += 16) {
                const __m512i q = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(c + i)));
                const __m512 wv = kMin ? _mm512_fmadd_ps(_mm512_cvtepi32_ps(q), d, off) : _mm512_mul_ps(_mm512_cvtepi32_ps(q), d);
                for (int m = 0; m < MB; ++m) acc[m] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(x + m * ldx + i), acc[m]);
            }
        }
        for (int m = 0; m < MB; ++m) y[m * ldy + o] = _mm512_reduce_add_ps(acc[m]);
    }
}

template <int MB, bool kMin>
__attribute__((target("avx2,fma"))) void rows_avx2(const QuantMatrix& w, const float* x, std::int64_t ldx, float* y,
                                                   std::int64_t ldy, std::int64_t o0, std::int64_t o1) {
    const std::int64_t bpr = w.blocks_per_row(), B = w.block;
    for (std::int64_t o = o0; o < o1; ++o) {
        __m256 acc[MB];
        for (int m = 0; m < MB; ++m) acc[m] = _mm256_setzero_ps();
        const std::int8_t* c = row_codes(w, o);
        for (std::int64_t b = 0; b < bpr; ++b) {
            const __m256 d = _mm256_set1_ps(block_scale(w, o * bpr + b));
            const __m256 off = _mm256_set1_ps(kMin ? block_offset(w, o * bpr + b) : 0.0f);
            for (std::int64_t i = b * B; i < (b + 1) * B; i += 8) {
                const __m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(c + i)));
                const __m256 wv = kMin ? _mm256_fmadd_ps(_mm256_cvtepi32_ps(q), d, off) : _mm256_mul_ps(_mm256_cvtepi32_ps(q), d);
                for (int m = 0; m < MB; ++m) acc[m] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + m * ldx + i), acc[m]);
            }
        }
        for (int m = 0; m < MB; ++m) {
            const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(acc[m]), _mm256_extractf128_ps(acc[m], 1));
            const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
            y[m * ldy + o] = _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
        }
    }
}

// The portable path: per block, the products in column order, then added to the row's sum.
void rows_scalar(const QuantMatrix& w, const float* x, std::int64_t ldx, std::int64_t M, float* y, std::int64_t ldy,
                 std::int64_t o0, std::int64_t o1) {
    const std::int64_t bpr = w.blocks_per_row(), B = w.block;
    const bool has_min = !w.mins.empty();  // Q5_K: w = q * scale + offset
    float acc[kQuantGemvMaxRows];
    for (std::int64_t o = o0; o < o1; ++o) {
        std::fill_n(acc, M, 0.0f);
        const std::int8_t* c = row_codes(w, o);
        for (std::int64_t b = 0; b < bpr; ++b) {
            const float d = block_scale(w, o * bpr + b), off = block_offset(w, o * bpr + b);
            for (std::int64_t m = 0; m < M; ++m) {
                const float* xm = x + m * ldx + b * B;
                float s = 0.0f;
                for (std::int64_t j = 0; j < B; ++j) {
                    const float q = static_cast<float>(c[b * B + j]);
                    s += (has_min ? std::fma(q, d, off) : q * d) * xm[j];
                }
                acc[m] += s;
            }
        }
        for (std::int64_t m = 0; m < M; ++m) y[m * ldy + o] = acc[m];
    }
}

}  // namespace

at::Tensor byte_gemv(const at::Tensor& x_in, const QuantMatrix& w, const at::Tensor& bias, QuantKernel kernel) {
    if (!w.byte_codes() || w.interleaved || w.on_cuda() || w.block % 16 != 0)
        throw Error(ErrorCode::InvalidArgument, "byte_gemv: a byte-coded matrix in row layout on the CPU");
    if (x_in.dim() != 2 || x_in.size(1) != w.cols || x_in.size(0) < 1 || x_in.size(0) > kQuantGemvMaxRows ||
        !x_in.device().is_cpu())
        throw Error(ErrorCode::InvalidArgument, "byte_gemv: x must be [1..16, cols] on the CPU");
    if (!quant_kernel_supported(kernel))
        throw Error(ErrorCode::Unsupported, std::string("this CPU cannot run the ") + to_string(kernel) + " byte kernel");
    const std::int64_t M = x_in.size(0), I = w.cols, O = w.rows;
    const at::Tensor x = x_in.to(at::kFloat).contiguous();  // [M, I], exact for bf16 / fp16
    const float* xp = x.data_ptr<float>();
    at::Tensor y = at::empty({M, O}, at::kFloat);
    float* yp = y.data_ptr<float>();
    // Enough output rows per task that a thread streams a few hundred KB of codes.
    const std::int64_t grain = std::max<std::int64_t>(8, (1 << 18) / (I + 1));
    const bool has_min = !w.mins.empty();
    at::parallel_for(0, O, grain, [&](std::int64_t o0, std::int64_t o1) {
        switch (kernel) {
            case QuantKernel::Scalar: return rows_scalar(w, xp, I, M, yp, O, o0, o1);
            case QuantKernel::Avx512:
                return with_rows<kQuantGemvMaxRows>(M, [&](auto mb) {
                    if (has_min) rows_avx512<decltype(mb)::value, true>(w, xp, I, yp, O, o0, o1);
                    else rows_avx512<decltype(mb)::value, false>(w, xp, I, yp, O, o0, o1);
                });
            case QuantKernel::Avx2:
                for (std::int64_t m = 0; m < M; m += 8) {
                    with_rows<8>(std::min<std::int64_t>(8, M - m), [&](auto mb) {
                        if (has_min) rows_avx2<decltype(mb)::value, true>(w, xp + m * I, I, yp + m * O, O, o0, o1);
                        else rows_avx2<decltype(mb)::value, false>(w, xp + m * I, I, yp + m * O, O, o0, o1);
                    });
                }
                return;
        }
    });
    if (bias.defined()) y.add_(bias.to(at::kFloat));
    return y;
}

}  // namespace kev
