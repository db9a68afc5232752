// The sums of 16 fp32 lanes, several accumulators at a time, by the one halving tree of
// the fixed-order kernels (linear_dense.h) and of GCC's _mm512_reduce_add_ps:
//
//   s8[j] = lane[j] + lane[j + 8]; s4[j] = s8[j] + s8[j + 4];
//   s = (s4[0] + s4[2]) + (s4[1] + s4[3])
//
// Reducing 2 or 4 accumulators together shares the shuffles: at 896 inputs a lone
// reduction cost about a third as many instructions as the dot product it ends. The
// additions are the same ones in the same order, so an output's bits do not depend on
// how many accumulators were reduced with it (tst_linear checks the kernels alone and in
// packs against the scalar twin).
#pragma once

// GCC 12 warns inside its own _mm512_setzero_ps and _mm512_permute_ps, whose "undefined"
// source operand is never read (known false positives); silenced for this header only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

namespace kev {

// How far ahead of its loads the AVX-512 FMA tiles prefetch a weight row, in bytes (the
// others prefetch along one cursor, kStreamPrefetchBytes, or not at all). Measured on a
// 272 MB matrix (the 0.5B model's head), 2 threads, one activation row, vdpbf16ps when
// it read two rows at a time: 15.9 GB/s without, 20.2 with 512 bytes (the probe read 21
// GB/s); 256 and 1024 do less.
constexpr int kWeightPrefetchBytes = 512;

// How far ahead the AVX2 tiles and the vdpbf16ps rows of 3-4 activation rows prefetch
// their weights, in bytes, along the span of rows a tile reads (its rows are adjacent in
// the weight). Prefetching each row 512 bytes ahead (the AVX-512 FMA tiles' scheme) kept
// about 1 KB in flight per thread, and a decode step streams its weights from memory:
// with one row, the 0.5B model in bf16 decoded at 12.8-13.8 tok/s with that, against
// 16-21 with one cursor 1-4 KB ahead (2 threads, an AVX2-only AMD EPYC, Zen 3; llama.cpp
// 17.6-19.0 in the same runs). 2048 is the middle of that plateau.
constexpr std::int64_t kStreamPrefetchBytes = 2048;

// The narrowest targets the sums need (AVX-512F adds and shuffles; AVX for the ymm
// form), so that every kernel inlines them: a function inlines only into callers whose
// targets include its own, and one of avx2 and fma was called through the PLT from the
// vdpbf16ps kernel (avx512f and avx512bf16), once per output, 4-5% of a decode step.
#define KEV_LANES512 __attribute__((target("avx512f")))
#define KEV_LANES256 __attribute__((target("avx")))

// The last two levels inside each 128-bit block of v (which holds s4 there): lane 4b of
// the result is that block's sum.
KEV_LANES512 inline __m512 block_sums512(__m512 v) {
    v = _mm512_add_ps(v, _mm512_permute_ps(v, _MM_SHUFFLE(1, 0, 3, 2)));     // s4[j] + s4[j + 2]
    return _mm512_add_ps(v, _mm512_permute_ps(v, _MM_SHUFFLE(2, 3, 0, 1)));  // + the neighbour
}

// [a.s8 | b.s8]: the first level for two accumulators.
KEV_LANES512 inline __m512 halves512(__m512 a, __m512 b) {
    return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
}

// out[n] = tree(acc[n]) for N = 1, 2 or 4 zmm accumulators of 16 lanes.
template <int N>
KEV_LANES512 inline void lane_sums512(const __m512* acc, float* out) {
    static_assert(N == 1 || N == 2 || N == 4, "1, 2 or 4 accumulators");
    alignas(64) float t[16];
    if constexpr (N == 1) {
        out[0] = _mm512_reduce_add_ps(acc[0]);
        return;
    } else if constexpr (N == 2) {
        const __m512 s8 = halves512(acc[0], acc[1]);  // blocks: a(0, 1), b(2, 3)
        const __m512 s4 = _mm512_add_ps(s8, _mm512_shuffle_f32x4(s8, s8, _MM_SHUFFLE(2, 3, 0, 1)));
        _mm512_store_ps(t, block_sums512(s4));
        out[0] = t[0];
        out[1] = t[8];
    } else {
        const __m512 s01 = halves512(acc[0], acc[1]), s23 = halves512(acc[2], acc[3]);
        const __m512 s4 = _mm512_add_ps(_mm512_shuffle_f32x4(s01, s23, _MM_SHUFFLE(2, 0, 2, 0)),
                                        _mm512_shuffle_f32x4(s01, s23, _MM_SHUFFLE(3, 1, 3, 1)));
        _mm512_store_ps(t, block_sums512(s4));
        for (int n = 0; n < 4; ++n) out[n] = t[4 * n];
    }
}

// out[n] = tree of the 16 lanes held as lo[n] (lanes 0-7) and hi[n] (lanes 8-15), for
// N = 1 or 2.
template <int N>
KEV_LANES256 inline void lane_sums256(const __m256* lo, const __m256* hi, float* out) {
    static_assert(N == 1 || N == 2, "1 or 2 accumulators");
    alignas(32) float t[8];
    const __m256 a = _mm256_add_ps(lo[0], hi[0]);                 // a.s8
    const __m256 b = N == 2 ? _mm256_add_ps(lo[1], hi[1]) : a;    // b.s8
    __m256 v = _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20),  // [a.s4 | b.s4]
                             _mm256_permute2f128_ps(a, b, 0x31));
    v = _mm256_add_ps(v, _mm256_permute_ps(v, _MM_SHUFFLE(1, 0, 3, 2)));
    v = _mm256_add_ps(v, _mm256_permute_ps(v, _MM_SHUFFLE(2, 3, 0, 1)));
    _mm256_store_ps(t, v);
    out[0] = t[0];
    if constexpr (N == 2) out[1] = t[4];
}

#undef KEV_LANES512
#undef KEV_LANES256

}  // namespace kev

#pragma GCC diagnostic pop
