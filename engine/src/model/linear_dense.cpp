// The fixed-order dense kernels (linear_dense.h): the arithmetic is written there; this
// file has its three instruction-set forms.
//
// Tiles of MR activation rows x NR weight rows share their loads: per 16 inputs, NR
// weight vectors and MR activation vectors feed MR x NR fused multiply-adds, each into
// its own accumulator (one output of one row), so tiling changes the speed, never a
// result. Threads split the outputs in blocks of 64 rows, whose weights stay in cache
// while every activation row passes over them (prompts); a decode call streams each
// weight once.
#include "model/linear_dense.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/Half.h>

#include "half.h"
#include "kev/error.h"
#include "model/lane_sums.h"
// GCC 12 warns inside its own _mm512_setzero_ps (a known false positive).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

namespace kev {

namespace {

enum class W { F32, BF16, F16 };

template <W T>
inline float widen(const void* w, std::int64_t i) {
    if constexpr (T == W::F32) return static_cast<const float*>(w)[i];
    else if constexpr (T == W::BF16) return bf16_to_float(static_cast<const std::uint16_t*>(w)[i]);
    else return fp16_to_float(static_cast<const std::uint16_t*>(w)[i]);
}

// Where results go: y [M, ld] of dtype dt, plus an fp32 bias when not null.
struct Store {
    void* y = nullptr;
    at::ScalarType dt = at::kFloat;
    std::int64_t ld = 0;
    const float* bias = nullptr;
};

// Inlined into the tiles: called out of line, the store of each output took ~8% of a
// 128-row prompt's samples and the 4-card prefill ran 77-86 tok/s against 97-108 inlined
// (AVX2-only AMD EPYC, Zen 3, three alternations).
__attribute__((always_inline)) inline void put(const Store& s, std::int64_t m, std::int64_t o, float v) {
    if (s.bias) v += s.bias[o];
    const std::int64_t at = m * s.ld + o;
    if (s.dt == at::kFloat) static_cast<float*>(s.y)[at] = v;
    else if (s.dt == at::kBFloat16) static_cast<std::uint16_t*>(s.y)[at] = float_to_bf16(v);
    else static_cast<std::uint16_t*>(s.y)[at] = c10::Half(v).x;
}

// The inputs past the last whole 16 (lane i - from), then the halving tree: shared by
// every path, so the tail and the sum are the same code everywhere.
template <W T>
inline float tail_and_tree(float* lane, const float* x, const void* w, std::int64_t wrow, std::int64_t from,
                           std::int64_t I) {
    for (std::int64_t i = from; i < I; ++i) lane[i - from] = std::fma(x[i], widen<T>(w, wrow + i), lane[i - from]);
    float s8[8], s4[4];
    for (int j = 0; j < 8; ++j) s8[j] = lane[j] + lane[j + 8];
    for (int j = 0; j < 4; ++j) s4[j] = s8[j] + s8[j + 4];
    const float s2a = s4[0] + s4[2], s2b = s4[1] + s4[3];
    return s2a + s2b;
}

// Bytes of one weight of type T.
template <W T>
constexpr std::int64_t weight_bytes() {
    return T == W::F32 ? 4 : 2;
}

// The lane of input j of a whole 16 (linear_dense.h): bf16 even inputs in lanes 0-7,
// odd ones in 8-15; every other dtype in order.
template <W T>
constexpr int lane_of(int j) {
    if constexpr (T == W::BF16) return (j % 2 ? 8 : 0) + j / 2;
    else return j;
}

// ---- scalar twin --------------------------------------------------------------------
template <W T>
void rows_scalar(const float* x, std::int64_t M, std::int64_t I, const void* w, const Store& st, std::int64_t o0,
                 std::int64_t o1) {
    const std::int64_t full = I / 16 * 16;
    for (std::int64_t o = o0; o < o1; ++o) {
        for (std::int64_t m = 0; m < M; ++m) {
            const float* xr = x + m * I;
            float lane[16] = {};
            for (std::int64_t i = 0; i < full; i += 16)
                for (int j = 0; j < 16; ++j)
                    lane[lane_of<T>(j)] = std::fma(xr[i + j], widen<T>(w, o * I + i + j), lane[lane_of<T>(j)]);
            put(st, m, o, tail_and_tree<T>(lane, xr, w, o * I, full, I));
        }
    }
}

// ---- AVX-512: 16 lanes in one register ----------------------------------------------
#define KEV_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))

// Weights w[i .. i + 16) in their lanes. bf16: the 32 bytes in both halves (a broadcast
// load), the low half shifted (even inputs), the high half masked (odd inputs).
template <W T>
KEV_AVX512 inline __m512 load16(const void* w, std::int64_t i) {
    if constexpr (T == W::F32) {
        return _mm512_loadu_ps(static_cast<const float*>(w) + i);
    } else {
        const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const std::uint16_t*>(w) + i));
        if constexpr (T == W::BF16) {
            const __m512i both = _mm512_broadcast_i64x4(h);
            return _mm512_castsi512_ps(
                _mm512_mask_and_epi32(_mm512_slli_epi32(both, 16), 0xFF00, both, _mm512_set1_epi32(~0xFFFF)));
        } else {
            return _mm512_cvtph_ps(h);
        }
    }
}

template <W T>
inline void prefetch_weights(const void* w, std::int64_t i) {
    _mm_prefetch(static_cast<const char*>(w) + i * weight_bytes<T>() + kWeightPrefetchBytes, _MM_HINT_T0);
}

template <W T, int MR, int NR>
KEV_AVX512 void tile512(const float* x, std::int64_t I, const void* w, std::int64_t m0, std::int64_t o0,
                        const Store& st) {
    __m512 acc[MR][NR];
    for (int m = 0; m < MR; ++m)
        for (int n = 0; n < NR; ++n) acc[m][n] = _mm512_setzero_ps();
    const std::int64_t full = I / 16 * 16;
    const float* xr = x + m0 * I;
    for (std::int64_t i = 0; i < full; i += 16) {
        __m512 wv[NR];
        for (int n = 0; n < NR; ++n) {
            wv[n] = load16<T>(w, (o0 + n) * I + i);
            prefetch_weights<T>(w, (o0 + n) * I + i);
        }
        for (int m = 0; m < MR; ++m) {
            const __m512 xv = _mm512_loadu_ps(xr + m * I + i);
            for (int n = 0; n < NR; ++n) acc[m][n] = _mm512_fmadd_ps(xv, wv[n], acc[m][n]);
        }
    }
    if (full == I) {  // no tail: the tree on the registers, NR outputs at a time
        for (int m = 0; m < MR; ++m) {
            float s[NR];
            lane_sums512<NR>(acc[m], s);
            for (int n = 0; n < NR; ++n) put(st, m0 + m, o0 + n, s[n]);
        }
        return;
    }
    alignas(64) float lane[16];
    for (int m = 0; m < MR; ++m)
        for (int n = 0; n < NR; ++n) {
            _mm512_store_ps(lane, acc[m][n]);
            put(st, m0 + m, o0 + n, tail_and_tree<T>(lane, xr + m * I, w, (o0 + n) * I, full, I));
        }
}
#undef KEV_AVX512

// ---- AVX2: 16 lanes in two registers -------------------------------------------------
#define KEV_AVX2 __attribute__((target("avx2,fma,f16c")))

// Lanes 8h .. 8h + 7 of the whole 16 at w[i]. bf16: the 16 weights are one load; half 0
// (even inputs) is a shift, half 1 (odd inputs) a mask.
template <W T>
KEV_AVX2 inline __m256 load8(const void* w, std::int64_t i, int h) {
    if constexpr (T == W::F32) {
        return _mm256_loadu_ps(static_cast<const float*>(w) + i + 8 * h);
    } else if constexpr (T == W::BF16) {
        const __m256i all = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const std::uint16_t*>(w) + i));
        return _mm256_castsi256_ps(h == 0 ? _mm256_slli_epi32(all, 16) : _mm256_and_si256(all, _mm256_set1_epi32(~0xFFFF)));
    } else {
        return _mm256_cvtph_ps(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const std::uint16_t*>(w) + i + 8 * h)));
    }
}

// v kept in a register. Without this GCC folds each activation load into the FMAs
// that use it, so a 3 x 2 tile loaded x twice: 16 loads for 12 FMAs, which bounds the
// tile by its loads (one AVX2 core, fp32 tiles of 64 outputs, 896 inputs: 46-47 GFLOP/s
// with the loads folded, 67-73 with x in a register; the same bits, only fewer loads).
KEV_AVX2 inline __m256 in_register(__m256 v) {
    __asm__("" : "+x"(v));
    return v;
}

// Tried and dropped (an AVX2-only AMD EPYC, Zen 3, 2 threads): a 4 x 3 tile in two
// passes over each chunk of the inputs, lanes 0-7 then 8-15 (the same bits, 12
// accumulators where 4 x 3 in one pass needs 24 of the 16 registers). On weights in
// cache (kev-bench linear, best of 4 alternations, the 0.5B model's shapes) it was
// 1.05-1.32x the 3 x 2 tile at 4 rows and 0.86-0.95x at 128; in the whole model at 4
// cards, whose weights stream from memory, decode ran 47.9-51.8 tok/s against 53.3-56.7
// with 3 x 2 (four alternations), also with its prefetch spread over both passes.
template <W T, int MR, int NR>
KEV_AVX2 void tile256(const float* x, std::int64_t I, const void* w, std::int64_t m0, std::int64_t o0,
                      const Store& st) {
    __m256 acc[MR][NR][2];
    for (int m = 0; m < MR; ++m)
        for (int n = 0; n < NR; ++n) acc[m][n][0] = acc[m][n][1] = _mm256_setzero_ps();
    const std::int64_t full = I / 16 * 16;
    const float* xr = x + m0 * I;
    // The tile's NR weight rows are one contiguous span, read kStep bytes an iteration:
    // one cursor walks it kStreamPrefetchBytes ahead, into the next tile's rows at the end.
    constexpr std::int64_t kStep = NR * 16 * weight_bytes<T>();
    const char* ahead = static_cast<const char*>(w) + o0 * I * weight_bytes<T>() + kStreamPrefetchBytes;
    for (std::int64_t i = 0; i < full; i += 16, ahead += kStep) {
        for (std::int64_t b = 0; b < kStep; b += 64) _mm_prefetch(ahead + b, _MM_HINT_T0);
        for (int h = 0; h < 2; ++h) {
            __m256 wv[NR];
            for (int n = 0; n < NR; ++n) wv[n] = load8<T>(w, (o0 + n) * I + i, h);
            for (int m = 0; m < MR; ++m) {
                const __m256 xv = in_register(_mm256_loadu_ps(xr + m * I + i + 8 * h));
                for (int n = 0; n < NR; ++n) acc[m][n][h] = _mm256_fmadd_ps(xv, wv[n], acc[m][n][h]);
            }
        }
    }
    if (full == I) {  // no tail: the tree on the registers, NR outputs at a time
        for (int m = 0; m < MR; ++m) {
            __m256 lo[NR], hi[NR];
            for (int n = 0; n < NR; ++n) lo[n] = acc[m][n][0], hi[n] = acc[m][n][1];
            float s[NR];
            lane_sums256<NR>(lo, hi, s);
            for (int n = 0; n < NR; ++n) put(st, m0 + m, o0 + n, s[n]);
        }
        return;
    }
    alignas(32) float lane[16];
    for (int m = 0; m < MR; ++m)
        for (int n = 0; n < NR; ++n) {
            _mm256_store_ps(lane, acc[m][n][0]);
            _mm256_store_ps(lane + 8, acc[m][n][1]);
            put(st, m0 + m, o0 + n, tail_and_tree<T>(lane, xr + m * I, w, (o0 + n) * I, full, I));
        }
}
#undef KEV_AVX2

// Rows [m0, m0 + MR) against outputs [ob, oe): whole NR-tiles, then single outputs.
template <W T, bool k512, int MR>
void row_tiles(const float* x, std::int64_t I, const void* w, std::int64_t m0, std::int64_t ob, std::int64_t oe,
               const Store& st) {
    // One or two activation rows (decode) read one weight row at a time: one sequential
    // stream per thread, which the hardware prefetcher follows. A decode step streams its
    // weights from memory, where two or four interleaved rows are slower (kev-bench pack,
    // the 0.5B model, Zen 4, 2 threads, alternating: bf16 on AVX2, one card, 31-41 ms a
    // step against 44-47 for two rows; fp32 on AVX-512, 56-76 against 84-90 for four, two
    // cards 67-78 against 83-84). Wider tiles serve more rows, where the weights are reused
    // from cache. NR changes only which outputs share a pass, never an output's bits.
    constexpr int NR = MR <= 2 ? 1 : k512 ? 4 : 2;
    std::int64_t o = ob;
    for (; o + NR <= oe; o += NR) {
        if constexpr (k512) tile512<T, MR, NR>(x, I, w, m0, o, st);
        else tile256<T, MR, NR>(x, I, w, m0, o, st);
    }
    for (; o < oe; ++o) {
        if constexpr (k512) tile512<T, MR, 1>(x, I, w, m0, o, st);
        else tile256<T, MR, 1>(x, I, w, m0, o, st);
    }
}

template <W T, bool k512>
void rows_simd(const float* x, std::int64_t M, std::int64_t I, const void* w, const Store& st, std::int64_t ob,
               std::int64_t oe) {
    constexpr std::int64_t kMr = k512 ? 4 : 3;
    std::int64_t m = 0;
    for (; m + kMr <= M; m += kMr) row_tiles<T, k512, kMr>(x, I, w, m, ob, oe, st);
    switch (M - m) {
        case 1: row_tiles<T, k512, 1>(x, I, w, m, ob, oe, st); break;
        case 2: row_tiles<T, k512, 2>(x, I, w, m, ob, oe, st); break;
        case 3:
            if constexpr (k512) row_tiles<T, k512, 3>(x, I, w, m, ob, oe, st);
            break;
        default: break;
    }
}

// bf16 rows [0, rows) of w [rows, I] widened to fp32 in their lanes' order (each whole
// 16: the even inputs, then the odd ones; the tail in order), which is x's order in the
// SIMD forms: the fp32 tiles then run the bf16 arithmetic, the same bits.
__attribute__((target("avx2,fma,f16c"))) void widen_bf16_rows(const std::uint16_t* w, std::int64_t rows,
                                                                std::int64_t I, float* out) {
    const std::int64_t full = I / 16 * 16;
    const __m256i odd = _mm256_set1_epi32(~0xFFFF);
    for (std::int64_t r = 0; r < rows; ++r) {
        const std::uint16_t* src = w + r * I;
        float* dst = out + r * I;
        for (std::int64_t i = 0; i < full; i += 16) {
            const __m256i all = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
            _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(all, 16)));
            _mm256_storeu_ps(dst + i + 8, _mm256_castsi256_ps(_mm256_and_si256(all, odd)));
        }
        for (std::int64_t i = full; i < I; ++i) dst[i] = bf16_to_float(src[i]);
    }
}

std::int64_t dtype_size(at::ScalarType t) { return t == at::kFloat ? 4 : 2; }

// AVX-512 calls of at least two row tiles (8 rows) widen each task's bf16 weights once
// into fp32, kept in cache while every row passes over them, and run the fp32 tiles: the
// widening leaves the inner loop, where it took a quarter of the vector instructions
// (kev-bench linear, 128 rows: 1.6-1.9x on an Intel Xeon). With one tile the weights are
// widened once either way, and the extra store and load would cost. (Tried and dropped
// there: widened blocks cut to ~256 KB for long rows, the inputs cut into chunks with the
// lanes kept in memory, the next block's raw weights prefetched from the tiles.)
// AVX2 does not widen: with the activations held in registers (in_register) its bf16
// tiles beat the widened fp32 ones on an AVX2-only AMD EPYC (Zen 3), the bf16 block being
// half the bytes in L2 (kev-bench linear, 2 threads, medians of 4 alternations, GFLOP/s,
// bf16 tiles against widened on the 0.5B model's shapes: 128 rows 100-135 against 82-99;
// 16 rows, the down projection 93 against 70, the others within the noise, 77-81 against
// 71-84). On an Intel Xeon (Sapphire Rapids, 2 threads), where widening won 1.2-1.7x
// before the activations were held in registers, re-measured with them held: the bf16
// tiles 72-84 GFLOP/s at 16 and 128 rows on the four shapes, widened 55-92, slower on
// 11 of 16, level on 1 (two alternations).
constexpr std::int64_t kWidenOnceRows512 = 8;

void widened_rows512(const float* x, std::int64_t M, std::int64_t I, const void* w, const Store& st, std::int64_t ob,
                  std::int64_t oe) {
    thread_local std::vector<float> wide;
    const std::int64_t rows = oe - ob;
    wide.resize(static_cast<std::size_t>(rows * I));
    widen_bf16_rows(static_cast<const std::uint16_t*>(w) + ob * I, rows, I, wide.data());
    Store block = st;  // outputs [ob, oe) as 0 .. rows
    block.y = static_cast<char*>(st.y) + ob * dtype_size(st.dt);
    if (st.bias) block.bias = st.bias + ob;
    rows_simd<W::F32, true>(x, M, I, wide.data(), block, 0, rows);
}

template <W T>
void run(Isa isa, const float* x, std::int64_t M, std::int64_t I, const void* w, std::int64_t O, const Store& st) {
    constexpr std::int64_t kBlock = 64;  // outputs per task: 64 x I weights stay in cache
    const std::int64_t blocks = (O + kBlock - 1) / kBlock;
    at::parallel_for(0, blocks, 1, [&](std::int64_t b0, std::int64_t b1) {
        for (std::int64_t b = b0; b < b1; ++b) {
            const std::int64_t ob = b * kBlock, oe = std::min(O, ob + kBlock);
            if constexpr (T == W::BF16) {
                if (isa == Isa::Avx512 && M >= kWidenOnceRows512) {
                    widened_rows512(x, M, I, w, st, ob, oe);
                    continue;
                }
            }
            if (isa == Isa::Avx512) rows_simd<T, true>(x, M, I, w, st, ob, oe);
            else if (isa == Isa::Avx2) rows_simd<T, false>(x, M, I, w, st, ob, oe);
            else rows_scalar<T>(x, M, I, w, st, ob, oe);
        }
    });
}

// x [M, I] fp32 with each whole 16 of a row in the bf16 lane order (even inputs, then
// odd ones), the tail as it is: the SIMD forms load it straight into their lanes.
// bf16 activations (the usual case) are widened and put in that order in one
// vectorized pass (the weights' widening); others are converted, then reordered.
at::Tensor lanes_of_bf16(const at::Tensor& x_in) {
    const std::int64_t M = x_in.size(0), I = x_in.size(1), full = I / 16 * 16;
    at::Tensor out = at::empty({M, I}, x_in.options().dtype(at::kFloat));
    float* dst = out.data_ptr<float>();
    if (x_in.scalar_type() == at::kBFloat16) {
        const at::Tensor x = x_in.contiguous();
        const auto* src = reinterpret_cast<const std::uint16_t*>(x.data_ptr<at::BFloat16>());
        at::parallel_for(0, M, std::max<std::int64_t>(1, 65536 / std::max<std::int64_t>(I, 1)),
                         [&](std::int64_t m0, std::int64_t m1) { widen_bf16_rows(src + m0 * I, m1 - m0, I, dst + m0 * I); });
        return out;
    }
    const at::Tensor x = x_in.to(at::kFloat).contiguous();
    const float* src = x.data_ptr<float>();
    for (std::int64_t m = 0; m < M; ++m) {
        const float* s = src + m * I;
        float* d = dst + m * I;
        for (std::int64_t i = 0; i < full; i += 16)
            for (int j = 0; j < 16; ++j) d[i + lane_of<W::BF16>(j)] = s[i + j];
        for (std::int64_t i = full; i < I; ++i) d[i] = s[i];
    }
    return out;
}

bool float_dtype(at::ScalarType t) { return t == at::kFloat || t == at::kBFloat16 || t == at::kHalf; }

}  // namespace

bool dense_kernel_applies(const at::Tensor& x, const at::Tensor& weight) {
    return x.device().is_cpu() && weight.device().is_cpu() && x.dim() == 2 && weight.dim() == 2 &&
           x.size(1) == weight.size(1) && float_dtype(x.scalar_type()) && float_dtype(weight.scalar_type()) &&
           weight.is_contiguous();
}

Isa dense_kernel_isa() {
    const Isa limit = isa_limit();
    if (static_cast<int>(limit) >= static_cast<int>(Isa::Avx512) && cpu_has_avx512()) return Isa::Avx512;
    if (static_cast<int>(limit) >= static_cast<int>(Isa::Avx2) && cpu_has_avx2_fma()) return Isa::Avx2;
    return Isa::Scalar;
}

const char* dense_kernel_name() { return to_string(dense_kernel_isa()); }

at::Tensor dense_linear(const at::Tensor& x_in, const at::Tensor& weight, const at::Tensor& bias, Isa isa) {
    if (!dense_kernel_applies(x_in, weight))
        throw Error(ErrorCode::InvalidArgument, "dense_linear: x [M, I] and a contiguous weight [O, I] on the CPU");
    if (isa == Isa::Amx) isa = Isa::Avx512;
    if ((isa == Isa::Avx512 && !cpu_has_avx512()) || (isa == Isa::Avx2 && !cpu_has_avx2_fma()))
        throw Error(ErrorCode::Unsupported, std::string("this CPU cannot run the ") + to_string(isa) + " dense kernel");
    const std::int64_t M = x_in.size(0), I = x_in.size(1), O = weight.size(0);
    at::Tensor y = at::empty({M, O}, x_in.options());  // [M, O]
    if (M == 0 || O == 0) return y;
    // [M, I] fp32 (exact for bf16 / fp16); for bf16 weights on SIMD, in their lanes' order
    const at::Tensor x = weight.scalar_type() == at::kBFloat16 && isa != Isa::Scalar
                             ? lanes_of_bf16(x_in)
                             : x_in.to(at::kFloat).contiguous();
    const at::Tensor b = bias.defined() ? bias.to(at::kFloat).contiguous() : at::Tensor();
    Store st{y.data_ptr(), y.scalar_type(), O, b.defined() ? b.data_ptr<float>() : nullptr};
    const float* xp = x.data_ptr<float>();
    switch (weight.scalar_type()) {
        case at::kBFloat16: run<W::BF16>(isa, xp, M, I, weight.data_ptr(), O, st); break;
        case at::kHalf: run<W::F16>(isa, xp, M, I, weight.data_ptr(), O, st); break;
        default: run<W::F32>(isa, xp, M, I, weight.data_ptr(), O, st); break;
    }
    return y;
}

}  // namespace kev
