// 8-lane pieces of the AVX2 row kernels (attention, the SiLU gate): kev_exp (rowwise.h)
// and the exact widening of 8 fp32 / bf16 / fp16 elements.
#pragma once

#include <type_traits>

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <immintrin.h>

namespace kev {

// 8 elements of p widened to fp32 (exact for each type).
template <typename T>
__attribute__((target("avx2,fma,f16c"))) inline __m256 load8(const T* p) {
    if constexpr (std::is_same_v<T, float>) {
        return _mm256_loadu_ps(p);
    } else {
        const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
        if constexpr (std::is_same_v<T, c10::BFloat16>) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
        else return _mm256_cvtph_ps(h);
    }
}

// kev_exp on 8 lanes: the same operations in the same order (no FMA), so the same bits.
__attribute__((target("avx2,fma"))) inline __m256 exp8(__m256 x) {
    x = _mm256_min_ps(_mm256_set1_ps(88.0f), _mm256_max_ps(_mm256_set1_ps(-87.0f), x));  // std::min/max's NaN rule
    __m256 n = _mm256_add_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)), _mm256_set1_ps(12582912.0f));
    n = _mm256_sub_ps(n, _mm256_set1_ps(12582912.0f));
    __m256 r = _mm256_sub_ps(x, _mm256_mul_ps(n, _mm256_set1_ps(0.693359375f)));
    r = _mm256_sub_ps(r, _mm256_mul_ps(n, _mm256_set1_ps(-2.12194440e-4f)));
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    for (float c : {1.3981999507e-3f, 8.3334519073e-3f, 4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f})
        p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(c));
    p = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(p, _mm256_mul_ps(r, r)), r), _mm256_set1_ps(1.0f));
    const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
}

}  // namespace kev
