#include "model/linear_bf16.h"

#include <cstdint>
#include <cstring>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
// GCC 12 warns inside its own _mm512_reduce_add_ps (a known false positive).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

namespace kev {

namespace {

bool cpu_has_avx512bf16() {
    static const bool has = [] {
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16");
    }();
    return has;
}

// fp32 -> bf16, round to nearest even (as c10::BFloat16 does).
inline std::uint16_t to_bf16(float f) {
    std::uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40);  // NaN stays NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return static_cast<std::uint16_t>(u >> 16);
}

inline float from_bf16(std::uint16_t h) {
    const std::uint32_t u = static_cast<std::uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

// Rows [o_begin, o_end) of y for up to 4 rows of x (MB) at a time, 4 weight rows per
// pass: 16 accumulators, each weight vector loaded once and used MB times.
template <int MB>
__attribute__((target("avx512f,avx512bf16,avx512bw,avx512vl"))) void gemv_rows(
    const std::uint16_t* x, std::int64_t ldx, const std::uint16_t* w, std::int64_t I, const std::uint16_t* bias,
    std::uint16_t* y, std::int64_t ldy, std::int64_t o_begin, std::int64_t o_end) {
    std::int64_t o = o_begin;
    for (; o + 4 <= o_end; o += 4) {
        __m512 acc[MB][4];
        for (int m = 0; m < MB; ++m)
            for (int r = 0; r < 4; ++r) acc[m][r] = _mm512_setzero_ps();
        const std::uint16_t* w0 = w + o * I;
        for (std::int64_t i = 0; i < I; i += 32) {
            __m512bh wv[4];
            for (int r = 0; r < 4; ++r) wv[r] = (__m512bh)_mm512_loadu_si512(w0 + r * I + i);
            for (int m = 0; m < MB; ++m) {
                const __m512bh xv = (__m512bh)_mm512_loadu_si512(x + m * ldx + i);
                for (int r = 0; r < 4; ++r) acc[m][r] = _mm512_dpbf16_ps(acc[m][r], wv[r], xv);
            }
        }
        for (int m = 0; m < MB; ++m)
            for (int r = 0; r < 4; ++r) {
                float s = _mm512_reduce_add_ps(acc[m][r]);
                if (bias) s += from_bf16(bias[o + r]);
                y[m * ldy + o + r] = to_bf16(s);
            }
    }
    for (; o < o_end; ++o) {  // a tail of fewer than 4 rows
        for (int m = 0; m < MB; ++m) {
            __m512 acc = _mm512_setzero_ps();
            for (std::int64_t i = 0; i < I; i += 32)
                acc = _mm512_dpbf16_ps(acc, (__m512bh)_mm512_loadu_si512(w + o * I + i),
                                       (__m512bh)_mm512_loadu_si512(x + m * ldx + i));
            float s = _mm512_reduce_add_ps(acc);
            if (bias) s += from_bf16(bias[o]);
            y[m * ldy + o] = to_bf16(s);
        }
    }
}

}  // namespace

bool bf16_gemv_applies(const at::Tensor& x, const at::Tensor& weight) {
    return cpu_has_avx512bf16() && x.device().is_cpu() && x.scalar_type() == at::kBFloat16 &&
           weight.scalar_type() == at::kBFloat16 && weight.device().is_cpu() && x.dim() == 2 && weight.dim() == 2 &&
           x.size(0) >= 1 && x.size(0) <= kBf16GemvMaxRows && x.size(1) == weight.size(1) && x.size(1) % 32 == 0 &&
           weight.is_contiguous();
}

at::Tensor bf16_gemv(const at::Tensor& x_in, const at::Tensor& weight, const at::Tensor& bias) {
    const at::Tensor x = x_in.contiguous();
    const std::int64_t M = x.size(0), I = x.size(1), O = weight.size(0);
    at::Tensor y = at::empty({M, O}, x.options());
    const auto* xp = reinterpret_cast<const std::uint16_t*>(x.data_ptr<at::BFloat16>());
    const auto* wp = reinterpret_cast<const std::uint16_t*>(weight.data_ptr<at::BFloat16>());
    const at::Tensor b = bias.defined() ? bias.contiguous() : bias;
    const auto* bp = b.defined() ? reinterpret_cast<const std::uint16_t*>(b.data_ptr<at::BFloat16>()) : nullptr;
    auto* yp = reinterpret_cast<std::uint16_t*>(y.data_ptr<at::BFloat16>());
    // Grain: enough rows per task that a thread streams a few hundred KB.
    const std::int64_t grain = std::max<std::int64_t>(16, (1 << 18) / (2 * I)) / 4 * 4;
    at::parallel_for(0, O, grain, [&](std::int64_t o0, std::int64_t o1) {
        for (std::int64_t m = 0; m < M; m += 4) {
            const std::int64_t mb = std::min<std::int64_t>(4, M - m);
            const std::uint16_t* xm = xp + m * I;
            std::uint16_t* ym = yp + m * O;
            switch (mb) {
                case 1: gemv_rows<1>(xm, I, wp, I, bp, ym, O, o0, o1); break;
                case 2: gemv_rows<2>(xm, I, wp, I, bp, ym, O, o0, o1); break;
                case 3: gemv_rows<3>(xm, I, wp, I, bp, ym, O, o0, o1); break;
                default: gemv_rows<4>(xm, I, wp, I, bp, ym, O, o0, o1); break;
            }
        }
    });
    return y;
}

}  // namespace kev
