#include "model/linear_bf16.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>


#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "half.h"
#include "model/lane_sums.h"
// GCC 12 warns inside its own _mm512_reduce_add_ps (a known false positive).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>


namespace kev {

namespace {

// Where results go: bf16 (rounded to nearest even) or fp32 (the head's logits).
struct Bf16Out {
    std::uint16_t* h = nullptr;
    float* f = nullptr;
    Bf16Out at(std::int64_t i) const { return {h ? h + i : nullptr, f ? f + i : nullptr}; }
    void put(std::int64_t i, float v) const {
        if (f) f[i] = v;
        else h[i] = float_to_bf16(v);
    }
};

// Rows [o_begin, o_end) of y for up to 4 rows of x (MB) at a time, NR weight rows per
// pass: MB x NR accumulators, each weight vector loaded once and used MB times. Each
// output is one accumulator and one sum whatever MB and NR, so NR and the prefetch
// change the speed only, never a bit.
//
// A decode step streams its weights from memory, and the hardware prefetcher follows one
// sequential stream per thread best:
// - one or two activation rows read one weight row at a time, with no software prefetch.
//   Zen 4, 2 threads, the 988 MB of Qwen2.5-0.5B's linears in a decode step's order: 33-35
//   ms a pass against 47 for two rows with a 512-byte prefetch per row (33 for reading
//   the bytes alone). In the model (kev-bench pack, alternating): one card 31.6-36.0 ms a
//   step against 50.0-58.0, two cards 36.5-41.5 against 52.1-52.6;
// - three or four rows read two weight rows (8 accumulators), with one cursor prefetching
//   kStreamPrefetchBytes ahead along their span (kCursor). Four cards, alternating: 67-81
//   tok/s against 49-61 for four rows with the per-row prefetch, 66-69 for one row.
template <int MB, int NR, bool kCursor>
__attribute__((target("avx512f,avx512bf16,avx512bw,avx512vl"))) void gemv_rows(
    const std::uint16_t* x, std::int64_t ldx, const std::uint16_t* w, std::int64_t I, const std::uint16_t* bias,
    Bf16Out y, std::int64_t ldy, std::int64_t o_begin, std::int64_t o_end) {
    std::int64_t o = o_begin;
    for (; o + NR <= o_end; o += NR) {
        __m512 acc[MB][NR];
        for (int m = 0; m < MB; ++m)
            for (int r = 0; r < NR; ++r) acc[m][r] = _mm512_setzero_ps();
        const std::uint16_t* w0 = w + o * I;
        // The NR rows are one contiguous span, read NR x 64 bytes an iteration.
        const char* ahead = reinterpret_cast<const char*>(w0) + kStreamPrefetchBytes;
        for (std::int64_t i = 0; i < I; i += 32) {
            if (kCursor) {
                for (int r = 0; r < NR; ++r) _mm_prefetch(ahead + 64 * r, _MM_HINT_T0);
                ahead += 64 * NR;
            }
            __m512bh wv[NR];
            for (int r = 0; r < NR; ++r) wv[r] = (__m512bh)_mm512_loadu_si512(w0 + r * I + i);
            for (int m = 0; m < MB; ++m) {
                const __m512bh xv = (__m512bh)_mm512_loadu_si512(x + m * ldx + i);
                for (int r = 0; r < NR; ++r) acc[m][r] = _mm512_dpbf16_ps(acc[m][r], wv[r], xv);
            }
        }
        for (int m = 0; m < MB; ++m) {
            float s[NR];
            lane_sums512<NR>(acc[m], s);  // the tree of _mm512_reduce_add_ps, NR at a time
            for (int r = 0; r < NR; ++r) y.put(m * ldy + o + r, bias ? s[r] + bf16_to_float(bias[o + r]) : s[r]);
        }
    }
    for (; o < o_end; ++o) {  // a tail of fewer than NR rows
        for (int m = 0; m < MB; ++m) {
            __m512 acc = _mm512_setzero_ps();
            for (std::int64_t i = 0; i < I; i += 32)
                acc = _mm512_dpbf16_ps(acc, (__m512bh)_mm512_loadu_si512(w + o * I + i),
                                       (__m512bh)_mm512_loadu_si512(x + m * ldx + i));
            float s = _mm512_reduce_add_ps(acc);
            if (bias) s += bf16_to_float(bias[o]);
            y.put(m * ldy + o, s);
        }
    }
}

// ---- AMX ----------------------------------------------------------------------------
// The weight is the A operand: a tile is 16 output rows x 32 inputs, which is the
// row-major [O, I] layout itself read with a stride of I, so weights need no repacking
// and no second copy. The activations are the B operand, repacked per call into the
// pair-interleaved layout the tile unit wants: xp[row block][k block][32 x 16 rows x 2].
// C tiles hold 16 outputs x 16 activation rows in fp32. A tile multiply does 16x16x32
// multiply-adds, so at decode shapes the step is bound by streaming the weights only,
// whatever the number of rows (1..16).
using TileConfig = AmxTileConfig;

constexpr std::int64_t kTileRows = 16;  // outputs per A tile, activation rows per B tile
constexpr std::int64_t kTileK = 32;     // bf16 inputs per tile row

// x [M, I] -> xp [ceil(M / 16)][I / 32][16 pairs][16 rows][2], zero-padded rows.
std::vector<std::uint16_t> pack_activations_impl(const std::uint16_t* x, std::int64_t M, std::int64_t I) {
    const std::int64_t row_blocks = (M + kTileRows - 1) / kTileRows, k_blocks = I / kTileK;
    std::vector<std::uint16_t> xp(static_cast<std::size_t>(row_blocks * k_blocks * 512), 0);
    for (std::int64_t m = 0; m < M; ++m) {
        const std::int64_t rb = m / kTileRows, n = m % kTileRows;
        const std::uint16_t* xr = x + m * I;
        for (std::int64_t kb = 0; kb < k_blocks; ++kb) {
            std::uint16_t* t = xp.data() + (rb * k_blocks + kb) * 512 + n * 2;
            for (std::int64_t p = 0; p < kTileK / 2; ++p) {
                t[p * 32] = xr[kb * kTileK + 2 * p];
                t[p * 32 + 1] = xr[kb * kTileK + 2 * p + 1];
            }
        }
    }
    return xp;
}

// C tile [16 outputs][16 rows] fp32 -> `rows` rows of y (leading dimension ldy): a
// column gather per activation row, plus the bias, rounded to bf16 (nearest even).
__attribute__((target("avx512f,avx512bf16,avx512bw,avx512vl"))) void store_tile_impl(
    const float* c, std::int64_t rows, const std::uint16_t* bias, Bf16Out y, std::int64_t ldy) {
    const __m512i column = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                              _mm512_set1_epi32(kTileRows));
    __m512 b = _mm512_setzero_ps();
    if (bias)
        b = _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(bias))), 16));
    for (std::int64_t n = 0; n < rows; ++n) {
        const __m512 v = _mm512_add_ps(_mm512_i32gather_ps(column, c + n, 4), b);
        if (y.f) _mm512_storeu_ps(y.f + n * ldy, v);
        else _mm256_storeu_si256(reinterpret_cast<__m256i*>(y.h + n * ldy), (__m256i)_mm512_cvtneps_pbh(v));
    }
}

// Output blocks [ob0, ob1) (16 rows each) for every activation row, two blocks at a time.
// Tiles: 0-1 accumulators, 4-5 weights, 6 activations.
__attribute__((target("amx-tile,amx-bf16,avx512f,avx512bf16,avx512bw,avx512vl"))) void amx_blocks(
    const std::uint16_t* xp, std::int64_t M, const std::uint16_t* w, std::int64_t I, const std::uint16_t* bias,
    Bf16Out y, std::int64_t O, std::int64_t ob0, std::int64_t ob1) {
    amx_load_tile_config();
    const std::int64_t k_blocks = I / kTileK, row_blocks = (M + kTileRows - 1) / kTileRows;
    const std::int64_t stride = I * 2;  // bytes between weight rows
    alignas(64) float c[2][kTileRows * kTileRows];
    auto store = [&](int h, std::int64_t ob, std::int64_t rb) {
        store_tile_impl(c[h], std::min(kTileRows, M - rb * kTileRows), bias ? bias + ob * kTileRows : nullptr,
                   y.at(rb * kTileRows * O + ob * kTileRows), O);
    };
    std::int64_t ob = ob0;
    for (; ob + 2 <= ob1; ob += 2) {
        const std::uint16_t* w0 = w + ob * kTileRows * I;
        const std::uint16_t* w1 = w0 + kTileRows * I;
        for (std::int64_t rb = 0; rb < row_blocks; ++rb) {
            const std::uint16_t* xb = xp + rb * k_blocks * 512;
            _tile_zero(0);
            _tile_zero(1);
            for (std::int64_t kb = 0; kb < k_blocks; ++kb) {
                _tile_loadd(6, xb + kb * 512, 64);
                _tile_loadd(4, w0 + kb * kTileK, stride);
                _tile_loadd(5, w1 + kb * kTileK, stride);
                _tile_dpbf16ps(0, 4, 6);
                _tile_dpbf16ps(1, 5, 6);
            }
            _tile_stored(0, c[0], 64);
            _tile_stored(1, c[1], 64);
            store(0, ob, rb);
            store(1, ob + 1, rb);
        }
    }
    for (; ob < ob1; ++ob) {
        const std::uint16_t* w0 = w + ob * kTileRows * I;
        for (std::int64_t rb = 0; rb < row_blocks; ++rb) {
            const std::uint16_t* xb = xp + rb * k_blocks * 512;
            _tile_zero(0);
            for (std::int64_t kb = 0; kb < k_blocks; ++kb) {
                _tile_loadd(6, xb + kb * 512, 64);
                _tile_loadd(4, w0 + kb * kTileK, stride);
                _tile_dpbf16ps(0, 4, 6);
            }
            _tile_stored(0, c[0], 64);
            store(0, ob, rb);
        }
    }
    _tile_release();
}

// The AVX512-BF16 kernel over output rows [o0, o1) for every activation row.
void avx512_rows(const std::uint16_t* xp, std::int64_t M, const std::uint16_t* wp, std::int64_t I,
                 const std::uint16_t* bp, Bf16Out yp, std::int64_t O, std::int64_t o0, std::int64_t o1) {
    for (std::int64_t m = 0; m < M; m += 4) {
        const std::int64_t mb = std::min<std::int64_t>(4, M - m);
        const std::uint16_t* xm = xp + m * I;
        const Bf16Out ym = yp.at(m * O);
        switch (mb) {
            case 1: gemv_rows<1, 1, false>(xm, I, wp, I, bp, ym, O, o0, o1); break;
            case 2: gemv_rows<2, 1, false>(xm, I, wp, I, bp, ym, O, o0, o1); break;
            case 3: gemv_rows<3, 2, true>(xm, I, wp, I, bp, ym, O, o0, o1); break;
            default: gemv_rows<4, 2, true>(xm, I, wp, I, bp, ym, O, o0, o1); break;
        }
    }
}

}  // namespace

bool amx_ready() { return cpu_has_amx_bf16(); }

// One configuration for every tile call: tiles 0-7 of 16 rows x 64 bytes. A constant in
// memory, not a local: GCC does not see ldtilecfg read its operand and drops the stores
// that fill a local one (seen: a #GP on ldtilecfg in an optimised build).
const TileConfig& tile_config() {
    static const TileConfig cfg = [] {
        TileConfig c;
        for (int t = 0; t < 8; ++t) {
            c.rows[t] = kTileRows;
            c.colsb[t] = 64;
        }
        return c;
    }();
    return cfg;
}

__attribute__((target("amx-tile"))) void amx_load_tile_config() { _tile_loadconfig(&tile_config()); }

std::vector<std::uint16_t> amx_pack_activations(const std::uint16_t* x, std::int64_t M, std::int64_t I) {
    return pack_activations_impl(x, M, I);
}

void amx_store_tile(const float* c, std::int64_t rows, const std::uint16_t* bias, std::uint16_t* y, std::int64_t ldy) {
    store_tile_impl(c, rows, bias, Bf16Out{y, nullptr}, ldy);
}

bool bf16_kernel_applies(const at::Tensor& x, const at::Tensor& weight) {
    return x.device().is_cpu() && x.scalar_type() == at::kBFloat16 && weight.scalar_type() == at::kBFloat16 &&
           weight.device().is_cpu() && x.dim() == 2 && weight.dim() == 2 && x.size(1) == weight.size(1) &&
           x.size(1) % 32 == 0 && weight.is_contiguous();
}

at::Tensor bf16_linear(const at::Tensor& x_in, const at::Tensor& weight, const at::Tensor& bias, Bf16Kernel kernel,
                       at::ScalarType out) {
    const at::Tensor x = x_in.contiguous();
    const std::int64_t M = x.size(0), I = x.size(1), O = weight.size(0);
    at::Tensor y = at::empty({M, O}, x.options().dtype(out == at::kFloat ? at::kFloat : at::kBFloat16));
    const auto* xp = reinterpret_cast<const std::uint16_t*>(x.data_ptr<at::BFloat16>());
    const auto* wp = reinterpret_cast<const std::uint16_t*>(weight.data_ptr<at::BFloat16>());
    const at::Tensor b = bias.defined() ? bias.contiguous() : bias;
    const auto* bp = b.defined() ? reinterpret_cast<const std::uint16_t*>(b.data_ptr<at::BFloat16>()) : nullptr;
    const Bf16Out yp = out == at::kFloat ? Bf16Out{nullptr, y.data_ptr<float>()}
                                         : Bf16Out{reinterpret_cast<std::uint16_t*>(y.data_ptr<at::BFloat16>()), nullptr};
    if (kernel == Bf16Kernel::Amx) {
        const std::vector<std::uint16_t> packed = pack_activations_impl(xp, M, I);
        const std::int64_t blocks = O / kTileRows, tail = blocks * kTileRows;
        // Grain: a task streams a few hundred KB of weights (pairs of 16-row blocks).
        const std::int64_t grain = std::max<std::int64_t>(2, (1 << 18) / (kTileRows * 2 * I)) / 2 * 2;
        at::parallel_for(0, blocks, grain, [&](std::int64_t b0, std::int64_t b1) {
            amx_blocks(packed.data(), M, wp, I, bp, yp, O, b0, b1);
        });
        if (tail < O) avx512_rows(xp, M, wp, I, bp, yp, O, tail, O);  // fewer than 16 rows left
        return y;
    }
    // Blocks of 64 output rows: their weights stay in cache while every activation row
    // passes over them (prompts); a decode call streams each weight once.
    constexpr std::int64_t kBlock = 64;
    at::parallel_for(0, (O + kBlock - 1) / kBlock, 1, [&](std::int64_t b0, std::int64_t b1) {
        for (std::int64_t blk = b0; blk < b1; ++blk)
            avx512_rows(xp, M, wp, I, bp, yp, O, blk * kBlock, std::min(O, (blk + 1) * kBlock));
    });
    return y;
}

}  // namespace kev
