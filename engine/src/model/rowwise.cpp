// Row-by-row kernels of the forward's non-linear part (rowwise.h). Plain C++ on
// purpose: every sum runs in one written order (8 partial sums and a fixed tree where a
// row is long), so the result is a function of the row alone, on any CPU.
#include "model/rowwise.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include "kev/cpu_kernels.h"
#include "kev/error.h"
#include "model/exp8.h"

namespace kev {

namespace {

template <typename T>
inline float wide(T v) {
    return static_cast<float>(v);
}
template <typename T>
inline T narrow_to(float v) {
    return static_cast<T>(v);  // fp32: itself; bf16 / fp16: round to nearest even (c10)
}


// out[k] = kev_exp(-g[k]) for 8 elements, by exp8 (the same bits).
template <typename T>
__attribute__((target("avx2,fma"))) void negated_exp8(const T* g, float* out) {
    alignas(32) float v[8];
    for (int k = 0; k < 8; ++k) v[k] = wide(g[k]);
    const __m256 x = _mm256_xor_ps(_mm256_load_ps(v), _mm256_set1_ps(-0.0f));  // -g, a sign flip
    _mm256_storeu_ps(out, exp8(x));
}

// fp32 rounded to the element type as narrow_to does (bf16: nearest even, a NaN becomes
// c10's 0x7FC0), for the AVX2 forms of the row kernels; loads widen by exp8.h's load8.
// fp32 and bf16 only.
// v rounded to bf16, as 8 int32 lanes holding the 16 bits.
__attribute__((target("avx2,fma"))) inline __m256i bf16_bits8(__m256 v) {
    const __m256i u = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
    return _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7fc0), _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
}

// v rounded to T and widened back: narrow_to then wide, on 8 lanes.
template <typename T>
__attribute__((target("avx2,fma"))) inline __m256 round8(__m256 v) {
    if constexpr (std::is_same_v<T, float>) return v;
    else return _mm256_castsi256_ps(_mm256_slli_epi32(bf16_bits8(v), 16));
}

template <typename T>
__attribute__((target("avx2,fma"))) inline void store8(T* p, __m256 v) {
    if constexpr (std::is_same_v<T, float>) {
        _mm256_storeu_ps(p, v);
    } else {
        const __m256i b = bf16_bits8(v);
        const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(b), _mm256_extracti128_si256(b, 1));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(p), packed);
    }
}

// silu(g) * up for 8 elements of a row: the scalar loop's operations on 8 lanes (exp8 is
// kev_exp; the division, the roundings and the product are IEEE's), so the same bits.
// n8 groups of 8 elements of one row.
template <typename T>
__attribute__((target("avx2,fma,f16c"))) void silu_gate8(const T* g, const T* up, T* out, std::int64_t n8) {
    for (std::int64_t k = 0; k < n8; ++k, g += 8, up += 8, out += 8) {
        const __m256 gv = load8(g);
        const __m256 ex = exp8(_mm256_xor_ps(gv, _mm256_set1_ps(-0.0f)));  // kev_exp(-g)
        const __m256 act = round8<T>(_mm256_div_ps(gv, _mm256_add_ps(_mm256_set1_ps(1.0f), ex)));
        store8(out, _mm256_mul_ps(act, load8(up)));
    }
}

// sum over i of a[i] * b[i], 8 partial sums (lane i % 8) and a fixed tree.
template <typename A, typename B>
inline float dot(const A* a, const B* b, std::int64_t n) {
    float p[8] = {};
    std::int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; ++j) p[j] += wide(a[i + j]) * wide(b[i + j]);
    for (int j = 0; i < n; ++i, ++j) p[j] += wide(a[i]) * wide(b[i]);
    const float q0 = p[0] + p[4], q1 = p[1] + p[5], q2 = p[2] + p[6], q3 = p[3] + p[7];
    return (q0 + q2) + (q1 + q3);
}

}  // namespace

float kev_exp(float x) {
    // Clamped so 2^n stays a normal float; exp(-87) is 1.6e-38, as good as zero for the
    // softmax and the SiLU it serves. std::max/min keep a NaN.
    x = std::min(std::max(x, -87.0f), 88.0f);
    float n = x * 1.44269504088896341f + 12582912.0f;  // round(x / ln 2) by the 1.5 * 2^23 trick
    n -= 12582912.0f;
    float r = x - n * 0.693359375f;  // ln 2 in two parts (Cody-Waite)
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;
    const std::int32_t bits = (static_cast<std::int32_t>(n) + 127) << 23;
    float scale;
    std::memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

at::Tensor rms_norm_rows(const at::Tensor& x_in, const at::Tensor& weight, double eps, bool fp32_product) {
    const at::Tensor x = x_in.contiguous();
    const std::int64_t C = x.size(-1), N = C ? x.numel() / C : 0;
    if (weight.numel() != C) throw Error(ErrorCode::InvalidArgument, "rms_norm_rows: weight and row lengths differ");
    at::Tensor out = at::empty_like(x);
    const at::Tensor w = weight.to(fp32_product ? at::kFloat : x.scalar_type()).contiguous();
    const float e = static_cast<float>(eps);
    with_row_dtype(x.scalar_type(), [&](auto* tag) {
        using T = std::remove_pointer_t<decltype(tag)>;
        const T* xp = x.data_ptr<T>();
        T* op = out.data_ptr<T>();
        at::parallel_for(0, N, std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(C, 1)),
                         [&](std::int64_t r0, std::int64_t r1) {
            for (std::int64_t r = r0; r < r1; ++r) {
                const T* row = xp + r * C;
                const float var = dot(row, row, C) / static_cast<float>(C);
                const float rs = 1.0f / std::sqrt(var + e);
                T* o = op + r * C;
                if (fp32_product) {  // Gemma: (x * rs * w) in fp32, rounded once
                    const float* wp = w.data_ptr<float>();
                    for (std::int64_t i = 0; i < C; ++i) o[i] = narrow_to<T>(wide(row[i]) * rs * wp[i]);
                } else {  // the normalised row rounded to the dtype, then the weight
                    const T* wp = w.data_ptr<T>();
                    for (std::int64_t i = 0; i < C; ++i) o[i] = narrow_to<T>(wide(wp[i]) * wide(narrow_to<T>(wide(row[i]) * rs)));
                }
            }
        });
    });
    return out;
}

RopeTable rope_table(const std::vector<std::int64_t>& positions, const at::Tensor& inv_freq, const RopeLong& extra) {
    const at::Tensor f = inv_freq.to(at::kCPU, at::kFloat).contiguous();  // [R/2]
    const at::Tensor fl = extra.long_inv_freq.defined() ? extra.long_inv_freq.to(at::kCPU, at::kFloat).contiguous() : f;
    if (fl.numel() != f.numel()) throw Error(ErrorCode::InvalidArgument, "rope_table: the long table's size differs");
    RopeTable t;
    t.half = f.numel();
    const float af = extra.attention_factor;
    const bool two = extra.long_inv_freq.defined();
    const std::int64_t S = static_cast<std::int64_t>(positions.size());
    t.cos.resize(static_cast<std::size_t>(S * t.half));
    t.sin.resize(t.cos.size());
    for (std::int64_t s = 0; s < S; ++s) {
        const float* fp = (two && positions[s] >= extra.long_from ? fl : f).data_ptr<float>();
        for (std::int64_t i = 0; i < t.half; ++i) {
            const float angle = static_cast<float>(positions[s]) * fp[i];  // fp32, as transformers
            t.cos[s * t.half + i] = static_cast<float>(std::cos(static_cast<double>(angle))) * af;
            t.sin[s * t.half + i] = static_cast<float>(std::sin(static_cast<double>(angle))) * af;
        }
    }
    return t;
}

void apply_rope_rows(at::Tensor& x, const RopeTable& t) {
    const std::int64_t S = x.size(0), heads = x.size(1), D = x.size(2), half = t.half;
    if (x.stride(2) != 1 || 2 * half > D || static_cast<std::int64_t>(t.cos.size()) != S * half)
        throw Error(ErrorCode::InvalidArgument, "apply_rope_rows: x [S, heads, D] does not fit the table");
    const std::int64_t s0 = x.stride(0), s1 = x.stride(1);
    with_row_dtype(x.scalar_type(), [&](auto* tag) {
        using T = std::remove_pointer_t<decltype(tag)>;
        T* xp = x.data_ptr<T>();
        at::parallel_for(0, S, std::max<std::int64_t>(1, 4096 / std::max<std::int64_t>(heads * D, 1)),
                         [&](std::int64_t r0, std::int64_t r1) {
            for (std::int64_t s = r0; s < r1; ++s) {
                const float* cs = t.cos.data() + s * half;
                const float* sn = t.sin.data() + s * half;
                for (std::int64_t h = 0; h < heads; ++h) {
                    T* v = xp + s * s0 + h * s1;
                    for (std::int64_t i = 0; i < half; ++i) {
                        const float c = wide(narrow_to<T>(cs[i])), si = wide(narrow_to<T>(sn[i]));
                        const float x1 = wide(v[i]), x2 = wide(v[i + half]);
                        const float a1 = wide(narrow_to<T>(x1 * c)), b1 = wide(narrow_to<T>(-x2 * si));
                        const float a2 = wide(narrow_to<T>(x2 * c)), b2 = wide(narrow_to<T>(x1 * si));
                        v[i] = narrow_to<T>(a1 + b1);
                        v[i + half] = narrow_to<T>(a2 + b2);
                    }
                }
            }
        });
    });
}

bool row_kernels_avx2() {
    return static_cast<int>(isa_limit()) >= static_cast<int>(Isa::Avx2) && cpu_has_avx2_fma();
}

at::Tensor silu_gate_rows(const at::Tensor& gu_in) {
    const at::Tensor gu = gu_in.contiguous();
    const std::int64_t S = gu.size(0), I = gu.size(1) / 2;
    at::Tensor out = at::empty({S, I}, gu.options());  // [S, I]
    with_row_dtype(gu.scalar_type(), [&](auto* tag) {
        using T = std::remove_pointer_t<decltype(tag)>;
        const T* gp = gu.data_ptr<T>();
        T* op = out.data_ptr<T>();
        const bool avx2 = row_kernels_avx2();
        // fp16 takes the scalar loop's exp by 8s only (c10's fp16 rounding of a NaN is not
        // the instruction's); fp32 and bf16 run whole on 8 lanes.
        constexpr bool whole8 = !std::is_same_v<T, c10::Half>;
        at::parallel_for(0, S * I, 8192, [&](std::int64_t e0, std::int64_t e1) {
            float ex[8];  // kev_exp(-g), 8 at a time within a row
            for (std::int64_t r = e0 / I; r * I < e1; ++r) {  // the rows the range touches
                const std::int64_t i1 = std::min(e1 - r * I, I);
                const T* g = gp + r * 2 * I;
                T* o = op + r * I;
                std::int64_t i = std::max<std::int64_t>(e0 - r * I, 0);
                if constexpr (whole8) {
                    if (avx2) {
                        const std::int64_t n8 = (i1 - i) / 8;
                        silu_gate8(g + i, g + I + i, o + i, n8);
                        i += 8 * n8;
                    }
                }
                for (; i < i1; i += 8) {
                    const std::int64_t n = std::min<std::int64_t>(8, i1 - i);
                    if (avx2 && n == 8) negated_exp8(g + i, ex);
                    else
                        for (std::int64_t k = 0; k < n; ++k) ex[k] = kev_exp(-wide(g[i + k]));
                    for (std::int64_t k = 0; k < n; ++k) {
                        const float gv = wide(g[i + k]);
                        const T act = narrow_to<T>(gv / (1.0f + ex[k]));
                        o[i + k] = narrow_to<T>(wide(act) * wide(g[I + i + k]));
                    }
                }
            }
        });
    });
    return out;
}

void write_cache_rows(const at::Tensor& x, at::Tensor& cache, const std::vector<std::int64_t>& slots) {
    if (x.dim() != 3 || cache.dim() != 3)
        throw Error(ErrorCode::InvalidArgument, "write_cache_rows: x [S, KVH, D] and a cache [KVH, slots, D]");
    const std::int64_t S = x.size(0), KVH = x.size(1), D = x.size(2);
    if (cache.size(0) != KVH || cache.size(2) != D || !cache.is_contiguous() ||
        x.stride(2) != 1 || x.scalar_type() != cache.scalar_type() || static_cast<std::int64_t>(slots.size()) != S)
        throw Error(ErrorCode::InvalidArgument, "write_cache_rows: x [S, KVH, D] and a contiguous cache [KVH, slots, D] of its dtype");
    const std::int64_t n = cache.size(1);
    const std::size_t es = x.element_size(), bytes = static_cast<std::size_t>(D) * es;
    const char* xp = static_cast<const char*>(x.data_ptr());
    char* cp = static_cast<char*>(cache.data_ptr());
    for (std::int64_t s = 0; s < S; ++s) {
        const std::int64_t slot = slots[static_cast<std::size_t>(s)];
        if (slot < 0 || slot >= n) throw Error(ErrorCode::InvalidArgument, "write_cache_rows: slot outside the cache");
        for (std::int64_t h = 0; h < KVH; ++h)
            std::memcpy(cp + static_cast<std::size_t>((h * n + slot) * D) * es,
                        xp + static_cast<std::size_t>(s * x.stride(0) + h * x.stride(1)) * es, bytes);
    }
}

at::Tensor gelu_tanh_gate_rows(const at::Tensor& gu_in) {
    const at::Tensor gu = gu_in.contiguous();
    const std::int64_t S = gu.size(0), I = gu.size(1) / 2;
    at::Tensor out = at::empty({S, I}, gu.options());  // [S, I]
    const float beta = static_cast<float>(M_SQRT2 * M_2_SQRTPI * 0.5), kappa = 0.044715f;
    with_row_dtype(gu.scalar_type(), [&](auto* tag) {
        using T = std::remove_pointer_t<decltype(tag)>;
        const T* gp = gu.data_ptr<T>();
        T* op = out.data_ptr<T>();
        at::parallel_for(0, S * I, 8192, [&](std::int64_t e0, std::int64_t e1) {
            for (std::int64_t e = e0; e < e1; ++e) {
                const std::int64_t r = e / I, i = e % I;
                const float g = wide(gp[r * 2 * I + i]);
                const float inner = beta * (g + kappa * (g * g * g));
                const T act = narrow_to<T>(0.5f * g * (1.0f + std::tanh(inner)));
                op[e] = narrow_to<T>(wide(act) * wide(gp[r * 2 * I + I + i]));
            }
        });
    });
    return out;
}

void softcap_rows(at::Tensor& x, double cap) {
    if (x.scalar_type() != at::kFloat || !x.is_contiguous())
        throw Error(ErrorCode::InvalidArgument, "softcap_rows: a contiguous fp32 tensor");
    float* p = x.data_ptr<float>();
    const float c = static_cast<float>(cap);
    at::parallel_for(0, x.numel(), 16384, [&](std::int64_t e0, std::int64_t e1) {
        for (std::int64_t e = e0; e < e1; ++e) p[e] = std::tanh(p[e] / c) * c;
    });
}

at::Tensor add_scaled_rows(const at::Tensor& y_in, const at::Tensor& update_in, const at::Tensor& scale_in) {
    const at::Tensor y = y_in.contiguous();
    const at::Tensor u = update_in.to(y.scalar_type()).contiguous();
    const at::Tensor s = scale_in.to(at::kFloat).contiguous();  // [S, 1]
    const std::int64_t S = y.size(0), O = y.size(1);
    at::Tensor out = at::empty_like(y);
    with_row_dtype(y.scalar_type(), [&](auto* tag) {
        using T = std::remove_pointer_t<decltype(tag)>;
        const T* yp = y.data_ptr<T>();
        const T* upp = u.data_ptr<T>();
        const float* sp = s.data_ptr<float>();
        T* op = out.data_ptr<T>();
        at::parallel_for(0, S * O, 16384, [&](std::int64_t e0, std::int64_t e1) {
            for (std::int64_t e = e0; e < e1; ++e) {
                const float prod = wide(upp[e]) * sp[e / O];
                op[e] = narrow_to<T>(wide(yp[e]) + prod);
            }
        });
    });
    return out;
}

}  // namespace kev
