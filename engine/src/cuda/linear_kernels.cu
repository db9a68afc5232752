// Kev's CUDA kernels for linear layers (launchers in linear_kernels.h).
//
// 4-bit x activations, the fixed-order form (q4_linear): the fused dequantize-and-
// multiply kernel for Q4_0, Q4_1 and NF4 blocks in their row layout (kev/quant.h). The
// arithmetic is q4_order.h's, called from here and from the CPU twin, so the two
// compute the same bits. One kernel body serves every shape. A thread block owns
// kRowsPerBlock output rows (one per thread) and kRowsPerPass rows of x; per slice of
// kSliceCols columns it stages the rows' codes (coalesced 16-byte loads) and the slice
// of x (as floats) in shared memory, and each thread expands its row's blocks once and
// multiplies them with every staged row of x. Two forms:
//   split (M <= kQ4SplitMaxRows, decode): grid.y runs over slices, each block writes
//     its slice's sums to `partials`, and a second kernel adds them in slice order;
//   whole (prompts): each thread walks all slices and adds their sums in slice order.
// Both add the same slice sums in the same order, so they agree to the bit; neither
// depends on M for any output.
//
// The tensor-core forms (q4_linear with tiles, dense_linear_tiles): 64 x 64 tiles of (rows
// of x) x (weight rows) by WMMA, split and whole forms as above. See the header.
#include "linear_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <type_traits>

#include "../model/q4_order.h"

namespace kev::cuda {
namespace {

namespace qo = kev::q4order;

constexpr int kRowsPerBlock = 64;  // output rows per thread block (threads)
constexpr int kRowsPerPass = 8;    // rows of x per thread block
constexpr int kSlice = qo::kSliceCols;
constexpr int kCodeStride = kSlice / 2 + 16;  // bytes per staged row: 16-byte loads hit distinct banks

template <Act A>
__device__ __forceinline__ float load_act(const void* x, std::int64_t i) {
    if constexpr (A == Act::F32) return static_cast<const float*>(x)[i];
    if constexpr (A == Act::F16) return qo::half_bits_to_float(static_cast<const std::uint16_t*>(x)[i]);
    return qo::bf16_bits_to_float(static_cast<const std::uint16_t*>(x)[i]);
}

// out[r][n] for this block's rows: the sum of one slice (split) or of all (whole).
template <Act A, int BLOCK, bool HAS_MIN, bool SPLIT>
__global__ void __launch_bounds__(kRowsPerBlock) q4_kernel(Q4View w, const void* __restrict__ x, std::int64_t M,
                                                           const float* __restrict__ bias, float* __restrict__ out) {
    __shared__ alignas(16) std::uint8_t codes[kRowsPerBlock * kCodeStride];
    __shared__ float xs[kRowsPerPass][kSlice];
    __shared__ float sxs[kRowsPerPass][kSlice / BLOCK];
    __shared__ float lut[16];

    const int t = threadIdx.x;
    const std::int64_t n0 = static_cast<std::int64_t>(blockIdx.x) * kRowsPerBlock;
    const std::int64_t n = n0 + t;
    const std::int64_t m0 = static_cast<std::int64_t>(blockIdx.z) * kRowsPerPass;
    const int mr = static_cast<int>(M - m0 < kRowsPerPass ? M - m0 : kRowsPerPass);
    const std::int64_t row_bytes = w.cols / 2;
    const std::int64_t blocks_per_row = w.cols / BLOCK;
    const std::int64_t slices = (w.cols + kSlice - 1) / kSlice;
    if (t == 0) {
#pragma unroll
        for (int i = 0; i < 16; ++i) lut[i] = w.lut[i];  // constant indices: the parameter stays in its bank
    }

    float total[kRowsPerPass];
#pragma unroll
    for (int r = 0; r < kRowsPerPass; ++r) total[r] = 0.0f;

    const std::int64_t s_begin = SPLIT ? blockIdx.y : 0;
    const std::int64_t s_end = SPLIT ? s_begin + 1 : slices;
    for (std::int64_t s = s_begin; s < s_end; ++s) {
        const std::int64_t c0 = s * kSlice;
        const int cw = static_cast<int>(w.cols - c0 < kSlice ? w.cols - c0 : kSlice);  // a multiple of BLOCK
        __syncthreads();  // the previous slice's staged data is no longer read
        const int units = cw / 32;  // 16-byte units of codes per row
        for (int i = t; i < kRowsPerBlock * units; i += kRowsPerBlock) {
            const int r = i / units, u = i % units;
            uint4 v = make_uint4(0, 0, 0, 0);
            if (n0 + r < w.rows)
                v = *reinterpret_cast<const uint4*>(w.codes + (n0 + r) * row_bytes + c0 / 2 + u * 16);
            *reinterpret_cast<uint4*>(codes + r * kCodeStride + u * 16) = v;
        }
        for (int i = t; i < kRowsPerPass * cw; i += kRowsPerBlock) {
            const int r = i / cw, j = i % cw;
            xs[r][j] = r < mr ? load_act<A>(x, (m0 + r) * w.cols + c0 + j) : 0.0f;
        }
        __syncthreads();
        if constexpr (HAS_MIN) {
            const int nb = cw / BLOCK;
            for (int i = t; i < kRowsPerPass * nb; i += kRowsPerBlock) {
                const int r = i / nb, b = i % nb;
                sxs[r][b] = qo::block_x_sum(&xs[r][b * BLOCK], BLOCK);
            }
            __syncthreads();
        }
        if (n >= w.rows) continue;
        float a[kRowsPerPass];
#pragma unroll
        for (int r = 0; r < kRowsPerPass; ++r) a[r] = 0.0f;
        const std::uint8_t* mine = codes + t * kCodeStride;
        for (int b = 0; b < cw / BLOCK; ++b) {
            // The block's codes into registers (16-byte loads), then its values.
            float wv[BLOCK];
#pragma unroll
            for (int u = 0; u < BLOCK / 32; ++u) {
                const uint4 v = *reinterpret_cast<const uint4*>(mine + b * (BLOCK / 2) + 16 * u);
                const std::uint32_t words[4] = {v.x, v.y, v.z, v.w};
                qo::group_values(words, lut, wv + 32 * u);
            }
            const std::int64_t si = n * blocks_per_row + c0 / BLOCK + b;
            const float d = qo::half_bits_to_float(w.scales[si]);
            const float mn = HAS_MIN ? qo::half_bits_to_float(w.mins[si]) : 0.0f;
#pragma unroll
            for (int r = 0; r < kRowsPerPass; ++r) {
                if (r >= mr) break;
                const float sum = qo::block_dot(wv, &xs[r][b * BLOCK], BLOCK);
                a[r] = qo::accumulate(a[r], sum, d, HAS_MIN, mn, HAS_MIN ? sxs[r][b] : 0.0f);
            }
        }
#pragma unroll
        for (int r = 0; r < kRowsPerPass; ++r) total[r] = total[r] + a[r];
    }
    if (n >= w.rows) return;
#pragma unroll
    for (int r = 0; r < kRowsPerPass; ++r) {
        if (r >= mr) break;
        if constexpr (SPLIT) {
            // partials[slice][m][n]
            out[(static_cast<std::int64_t>(blockIdx.y) * M + m0 + r) * w.rows + n] = total[r];
        } else {
            out[(m0 + r) * w.rows + n] = bias ? total[r] + bias[n] : total[r];
        }
    }
}

// y[m][n] = sum over slices of partials[s][m][n], in slice order (+ bias).
__global__ void add_slices(const float* __restrict__ partials, std::int64_t slices, std::int64_t M, std::int64_t N,
                           const float* __restrict__ bias, float* __restrict__ y) {
    const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= M * N) return;
    float v = 0.0f;
    for (std::int64_t s = 0; s < slices; ++s) v = v + partials[s * M * N + i];
    y[i] = bias ? v + bias[i % N] : v;
}

// Launches a kernel in its split form (grid.y over slices, each writing its slice's
// sums to `partials`, then add_slices in slice order) or its whole form (one block per
// tile walks every slice). `args` are the kernel's leading parameters; both forms end
// with (bias, out).
template <typename Split, typename Whole, typename... Args>
cudaError_t launch_forms(bool split, Split split_kernel, Whole whole_kernel, std::int64_t rows, std::int64_t cols,
                         std::int64_t M, int rows_per_block, int m_per_block, int threads, const float* bias, float* y,
                         float* partials, cudaStream_t stream, Args... args) {
    const std::int64_t slices = (cols + kSlice - 1) / kSlice;
    const auto gx = static_cast<unsigned>((rows + rows_per_block - 1) / rows_per_block);
    const auto gz = static_cast<unsigned>((M + m_per_block - 1) / m_per_block);
    if (split) {
        split_kernel<<<dim3(gx, static_cast<unsigned>(slices), gz), threads, 0, stream>>>(args..., nullptr, partials);
        const std::int64_t n = M * rows;
        add_slices<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(partials, slices, M, rows, bias, y);
    } else {
        whole_kernel<<<dim3(gx, 1, gz), threads, 0, stream>>>(args..., bias, y);
    }
    return cudaGetLastError();
}

// f(block, has_min) with the matrix's block size (32 or 64) and Q4_1's offsets as
// compile-time constants.
template <typename F>
cudaError_t with_layout(const Q4View& w, F f) {
    using B32 = std::integral_constant<int, 32>;
    using B64 = std::integral_constant<int, 64>;
    if (w.block == 64) return w.mins ? f(B64{}, std::true_type{}) : f(B64{}, std::false_type{});
    return w.mins ? f(B32{}, std::true_type{}) : f(B32{}, std::false_type{});
}

// --- the tensor-core form (q4_linear with tiles) ----------------------------------------------
constexpr int kTileM = 64;   // rows of x per thread block
constexpr int kTileN = 64;   // weight rows per thread block
constexpr int kTileThreads = 128;  // 4 warps, each a 32 x 32 corner of the tile

template <Act A>
struct Half;
template <>
struct Half<Act::F16> {
    using T = __half;
    __device__ static T from_float(float f) { return __float2half_rn(f); }
};
template <>
struct Half<Act::BF16> {
    using T = __nv_bfloat16;
    __device__ static T from_float(float f) { return __float2bfloat16_rn(f); }
};

template <Act A, int BLOCK, bool HAS_MIN, bool SPLIT>
__global__ void __launch_bounds__(kTileThreads) q4_tile_kernel(Q4View w, const void* __restrict__ x_raw, std::int64_t M,
                                                               const float* __restrict__ bias, float* __restrict__ out) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    namespace wm = nvcuda::wmma;
    using T = typename Half<A>::T;
    constexpr int LD = BLOCK + 8;  // halves per staged row: tiles start 32-byte aligned
    constexpr int kPer = kTileM * kTileN / kTileThreads;  // outputs per thread
    __shared__ alignas(32) T xs[kTileM * LD];
    __shared__ alignas(32) T ws[kTileN * LD];
    __shared__ alignas(32) float sums[kTileM * kTileN];
    __shared__ float sx[kTileM];
    __shared__ T lut[16];
    const T* x = static_cast<const T*>(x_raw);
    const int t = threadIdx.x, warp = t / 32;
    const std::int64_t n0 = static_cast<std::int64_t>(blockIdx.x) * kTileN;
    const std::int64_t m0 = static_cast<std::int64_t>(blockIdx.z) * kTileM;
    const std::int64_t row_bytes = w.cols / 2;
    const std::int64_t blocks_per_row = w.cols / BLOCK;
    const std::int64_t slices = (w.cols + kSlice - 1) / kSlice;
    if (t == 0) {
#pragma unroll
        for (int i = 0; i < 16; ++i) lut[i] = Half<A>::from_float(w.lut[i]);
    }
    float total[kPer];
#pragma unroll
    for (int i = 0; i < kPer; ++i) total[i] = 0.0f;
    const std::int64_t s_begin = SPLIT ? blockIdx.y : 0;
    const std::int64_t s_end = SPLIT ? s_begin + 1 : slices;
    for (std::int64_t s = s_begin; s < s_end; ++s) {
        const std::int64_t c0 = s * kSlice;
        const std::int64_t c1 = c0 + kSlice < w.cols ? c0 + kSlice : w.cols;
        float a[kPer];
#pragma unroll
        for (int i = 0; i < kPer; ++i) a[i] = 0.0f;
        for (std::int64_t c = c0; c < c1; c += BLOCK) {
            __syncthreads();  // the previous block's tiles are no longer read
            for (int i = t; i < kTileM * BLOCK; i += kTileThreads) {
                const int r = i / BLOCK, k = i % BLOCK;
                xs[r * LD + k] = m0 + r < M ? x[(m0 + r) * w.cols + c + k] : Half<A>::from_float(0.0f);
            }
            // Codes: 8 bytes (16 values) per step; byte j of a group holds elements j
            // (low nibble) and j + 16 (high).
            for (int i = t; i < kTileN * (BLOCK / 16); i += kTileThreads) {
                const int r = i / (BLOCK / 16), u = i % (BLOCK / 16);  // u: 8-byte unit in the block
                const int g = u / 2, half = u % 2;                      // group, and which 8 bytes of it
                uint2 v = make_uint2(0x88888888u, 0x88888888u);         // outside W: code 8 (Q4_0: 0)
                if (n0 + r < w.rows)
                    v = *reinterpret_cast<const uint2*>(w.codes + (n0 + r) * row_bytes + c / 2 + g * 16 + half * 8);
                T* dst = ws + r * LD + g * 32 + half * 8;
#pragma unroll
                for (int j = 0; j < 8; ++j) {
                    const std::uint32_t byte = ((j < 4 ? v.x : v.y) >> (8 * (j % 4))) & 0xffu;
                    dst[j] = lut[byte & 0x0fu];
                    dst[j + 16] = lut[byte >> 4];
                }
            }
            __syncthreads();
            if (HAS_MIN && t < kTileM) {
                float acc = 0.0f;
                for (int k = 0; k < BLOCK; ++k) acc = acc + static_cast<float>(xs[t * LD + k]);
                sx[t] = acc;
            }
            // Each warp: a 32 x 32 corner as 2 x 2 tiles of 16 x 16, over the block's k.
            const int wm_ = (warp / 2) * 32, wn_ = (warp % 2) * 32;
#pragma unroll
            for (int i = 0; i < 2; ++i) {
#pragma unroll
                for (int j = 0; j < 2; ++j) {
                    wm::fragment<wm::accumulator, 16, 16, 16, float> acc;
                    wm::fill_fragment(acc, 0.0f);
#pragma unroll
                    for (int k = 0; k < BLOCK; k += 16) {
                        wm::fragment<wm::matrix_a, 16, 16, 16, T, wm::row_major> fa;
                        wm::fragment<wm::matrix_b, 16, 16, 16, T, wm::col_major> fb;
                        wm::load_matrix_sync(fa, xs + (wm_ + 16 * i) * LD + k, LD);
                        wm::load_matrix_sync(fb, ws + (wn_ + 16 * j) * LD + k, LD);
                        wm::mma_sync(acc, fa, fb, acc);
                    }
                    wm::store_matrix_sync(sums + (wm_ + 16 * i) * kTileN + wn_ + 16 * j, acc, kTileN, wm::mem_row_major);
                }
            }
            __syncthreads();
            const std::int64_t b = c / BLOCK;
            const int my_n = t % kTileN;
            const bool in_w = n0 + my_n < w.rows;
            const std::int64_t si = (in_w ? n0 + my_n : 0) * blocks_per_row + b;
            const float d = in_w ? qo::half_bits_to_float(w.scales[si]) : 0.0f;
            const float mn = HAS_MIN && in_w ? qo::half_bits_to_float(w.mins[si]) : 0.0f;
#pragma unroll
            for (int i = 0; i < kPer; ++i) {
                // Thread t always has column t % 64 (128 threads, 64 columns): one scale.
                const int e = t + kTileThreads * i, r = e / kTileN;
                a[i] = qo::accumulate(a[i], sums[r * kTileN + my_n], d, HAS_MIN, mn, HAS_MIN ? sx[r] : 0.0f);
            }
        }
#pragma unroll
        for (int i = 0; i < kPer; ++i) total[i] = total[i] + a[i];
    }
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
        const int e = t + kTileThreads * i, r = e / kTileN, n = e % kTileN;
        if (m0 + r >= M || n0 + n >= w.rows) break;  // rows grow with i: the rest are outside too
        if constexpr (SPLIT) {
            out[(static_cast<std::int64_t>(blockIdx.y) * M + m0 + r) * w.rows + n0 + n] = total[i];
        } else {
            out[(m0 + r) * w.rows + n0 + n] = bias ? total[i] + bias[n0 + n] : total[i];
        }
    }
#endif
}



// --- dense weights by the same tiles (dense_linear_tiles) ---------------------------------
template <Act A, bool SPLIT>
__global__ void __launch_bounds__(kTileThreads) dense_tile_kernel(const void* __restrict__ w_raw, std::int64_t rows,
                                                                  std::int64_t cols, const void* __restrict__ x_raw,
                                                                  std::int64_t M, const float* __restrict__ bias,
                                                                  float* __restrict__ out) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    namespace wm = nvcuda::wmma;
    using T = typename Half<A>::T;
    constexpr int BK = 64;
    constexpr int LD = BK + 8;
    constexpr int kPer = kTileM * kTileN / kTileThreads;
    __shared__ alignas(32) T xs[kTileM * LD];
    __shared__ alignas(32) T ws[kTileN * LD];
    __shared__ alignas(32) float sums[kTileM * kTileN];
    const T* x = static_cast<const T*>(x_raw);
    const T* w = static_cast<const T*>(w_raw);
    const T zero = Half<A>::from_float(0.0f);
    const int t = threadIdx.x, warp = t / 32;
    const std::int64_t n0 = static_cast<std::int64_t>(blockIdx.x) * kTileN;
    const std::int64_t m0 = static_cast<std::int64_t>(blockIdx.z) * kTileM;
    const std::int64_t slices = (cols + kSlice - 1) / kSlice;
    const int wm_ = (warp / 2) * 32, wn_ = (warp % 2) * 32;
    float total[kPer];
#pragma unroll
    for (int i = 0; i < kPer; ++i) total[i] = 0.0f;
    const std::int64_t s_begin = SPLIT ? blockIdx.y : 0;
    const std::int64_t s_end = SPLIT ? s_begin + 1 : slices;
    for (std::int64_t s = s_begin; s < s_end; ++s) {
        const std::int64_t c0 = s * kSlice;
        const std::int64_t c1 = c0 + kSlice < cols ? c0 + kSlice : cols;
        wm::fragment<wm::accumulator, 16, 16, 16, float> acc[2][2];
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
            for (int j = 0; j < 2; ++j) wm::fill_fragment(acc[i][j], 0.0f);
        for (std::int64_t c = c0; c < c1; c += BK) {
            const int kw = static_cast<int>(c1 - c < BK ? c1 - c : BK);  // a multiple of 16
            __syncthreads();
            for (int i = t; i < kTileM * BK; i += kTileThreads) {
                const int r = i / BK, k = i % BK;
                xs[r * LD + k] = m0 + r < M && k < kw ? x[(m0 + r) * cols + c + k] : zero;
                ws[r * LD + k] = n0 + r < rows && k < kw ? w[(n0 + r) * cols + c + k] : zero;
            }
            __syncthreads();
#pragma unroll
            for (int k = 0; k < BK; k += 16) {
                if (k >= kw) break;
#pragma unroll
                for (int i = 0; i < 2; ++i) {
                    wm::fragment<wm::matrix_a, 16, 16, 16, T, wm::row_major> fa;
                    wm::load_matrix_sync(fa, xs + (wm_ + 16 * i) * LD + k, LD);
#pragma unroll
                    for (int j = 0; j < 2; ++j) {
                        wm::fragment<wm::matrix_b, 16, 16, 16, T, wm::col_major> fb;
                        wm::load_matrix_sync(fb, ws + (wn_ + 16 * j) * LD + k, LD);
                        wm::mma_sync(acc[i][j], fa, fb, acc[i][j]);
                    }
                }
            }
        }
        __syncthreads();
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
            for (int j = 0; j < 2; ++j)
                wm::store_matrix_sync(sums + (wm_ + 16 * i) * kTileN + wn_ + 16 * j, acc[i][j], kTileN, wm::mem_row_major);
        __syncthreads();
#pragma unroll
        for (int i = 0; i < kPer; ++i) {
            const int e = t + kTileThreads * i;
            total[i] = total[i] + sums[(e / kTileN) * kTileN + e % kTileN];
        }
    }
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
        const int e = t + kTileThreads * i, r = e / kTileN, n = e % kTileN;
        if (m0 + r >= M || n0 + n >= rows) break;  // rows grow with i; n is the thread's own
        if constexpr (SPLIT) {
            out[(static_cast<std::int64_t>(blockIdx.y) * M + m0 + r) * rows + n0 + n] = total[i];
        } else {
            out[(m0 + r) * rows + n0 + n] = bias ? total[i] + bias[n0 + n] : total[i];
        }
    }
#endif
}

// --- launchers --------------------------------------------------------------------------
template <Act A, bool TILES>
cudaError_t launch_q4(const Q4View& w, const void* x, std::int64_t M, const float* bias, float* y, float* partials,
                      cudaStream_t stream) {
    return with_layout(w, [&](auto block, auto has_min) {
        constexpr int B = decltype(block)::value;
        constexpr bool H = decltype(has_min)::value;
        if constexpr (TILES) {
            return launch_forms(M <= kTileM, q4_tile_kernel<A, B, H, true>, q4_tile_kernel<A, B, H, false>, w.rows,
                                w.cols, M, kTileN, kTileM, kTileThreads, bias, y, partials, stream, w, x, M);
        } else {
            return launch_forms(M <= kQ4SplitMaxRows, q4_kernel<A, B, H, true>, q4_kernel<A, B, H, false>, w.rows,
                                w.cols, M, kRowsPerBlock, kRowsPerPass, kRowsPerBlock, bias, y, partials, stream, w, x, M);
        }
    });
}

template <Act A>
cudaError_t launch_dense_tiles(const void* w, std::int64_t rows, std::int64_t cols, const void* x, std::int64_t M,
                               const float* bias, float* y, float* partials, cudaStream_t stream) {
    return launch_forms(M <= kTileM, dense_tile_kernel<A, true>, dense_tile_kernel<A, false>, rows, cols, M, kTileN,
                        kTileM, kTileThreads, bias, y, partials, stream, w, rows, cols, x, M);
}

}  // namespace

namespace {
// The launch limits, and compute capability 8.0 for the tensor-core forms (bf16 WMMA).
const char* check_launch(std::int64_t cols, std::int64_t M, int m_per_block, bool tiles) {
    if ((cols + kSlice - 1) / kSlice > 65535 || (M + m_per_block - 1) / m_per_block > 65535)
        return "too many columns or rows for one launch";
    if (!tiles) return nullptr;
    int device = 0, major = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess || major < 8)
        return "the tensor-core forms need compute capability 8.0 or newer";
    return nullptr;
}
}  // namespace

std::int64_t q4_partials_floats(const Q4View& w, std::int64_t M, bool tiles) {
    if (M > (tiles ? kTileM : kQ4SplitMaxRows)) return 0;
    return (w.cols + kSlice - 1) / kSlice * M * w.rows;
}

const char* q4_linear(const Q4View& w, const void* x, Act act, std::int64_t M, const float* bias, float* y,
                      float* partials, void* stream, bool tiles) {
    if (M <= 0) return nullptr;
    if ((w.block != 32 && w.block != 64) || w.cols % w.block != 0 || w.cols <= 0 || w.rows <= 0)
        return "the block must be 32 or 64 and divide the columns";
    if (tiles && act == Act::F32) return "the tensor-core form takes fp16 or bf16 activations";
    if (M <= (tiles ? kTileM : kQ4SplitMaxRows) && !partials) return "the decode form needs its partials buffer";
    if (const char* e = check_launch(w.cols, M, tiles ? kTileM : kRowsPerPass, tiles)) return e;
    const auto s = static_cast<cudaStream_t>(stream);
    cudaError_t e = cudaSuccess;
    switch (act) {
        case Act::F32: e = launch_q4<Act::F32, false>(w, x, M, bias, y, partials, s); break;
        case Act::F16:
            e = tiles ? launch_q4<Act::F16, true>(w, x, M, bias, y, partials, s)
                      : launch_q4<Act::F16, false>(w, x, M, bias, y, partials, s);
            break;
        case Act::BF16:
            e = tiles ? launch_q4<Act::BF16, true>(w, x, M, bias, y, partials, s)
                      : launch_q4<Act::BF16, false>(w, x, M, bias, y, partials, s);
            break;
    }
    return e == cudaSuccess ? nullptr : cudaGetErrorString(e);
}

std::int64_t dense_tile_partials_floats(std::int64_t rows, std::int64_t cols, std::int64_t M) {
    if (M > kTileM) return 0;
    return (cols + kSlice - 1) / kSlice * M * rows;
}

const char* dense_linear_tiles(const void* w, std::int64_t rows, std::int64_t cols, const void* x, Act act,
                               std::int64_t M, const float* bias, float* y, float* partials, void* stream) {
    if (M <= 0) return nullptr;
    if (cols <= 0 || cols % 16 != 0 || rows <= 0) return "the columns must be a multiple of 16";
    if (act == Act::F32) return "the tensor-core form takes fp16 or bf16";
    if (M <= kTileM && !partials) return "the decode form needs its partials buffer";
    if (const char* e = check_launch(cols, M, kTileM, true)) return e;
    const auto s = static_cast<cudaStream_t>(stream);
    const cudaError_t e = act == Act::F16 ? launch_dense_tiles<Act::F16>(w, rows, cols, x, M, bias, y, partials, s)
                                          : launch_dense_tiles<Act::BF16>(w, rows, cols, x, M, bias, y, partials, s);
    return e == cudaSuccess ? nullptr : cudaGetErrorString(e);
}

}  // namespace kev::cuda
