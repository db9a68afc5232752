// Attention row by row (rowwise.h has the arithmetic): the AVX2 form and its scalar twin.
//
// Why not SDPA: its CPU kernel blocks the keys and queries by the shapes of the call, so a
// prompt row computed in a call of 40 rows and the same row in a call of 55 (the shared
// context split elsewhere, a prompt read in chunks) came out different in bf16. Here a
// row's result depends on its query, its slots and nothing else.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include "kev/cpu_kernels.h"
#include "kev/error.h"
#include "model/exp8.h"
#include "model/rowwise.h"
#include <immintrin.h>

namespace kev {

namespace {

template <typename T>
inline float wide(T v) {
    return static_cast<float>(v);
}

inline float tree8(const float* l) {
    const float a = l[0] + l[4], b = l[1] + l[5], c = l[2] + l[6], d = l[3] + l[7];
    return (a + c) + (b + d);
}

// The rows' slots: j in [0, L) -> the shared context's shared_n slots, then the row's
// own. Each part is contiguous in the slot space and, where the cache keeps windowed layers
// in rings (kv_cache.h), wraps at most once in its ring: part slot k is base + k, less the
// ring's size once k passes it.
struct Slots {
    std::int64_t shared_n;
    std::int64_t shared_base, shared_start, shared_size;
    std::int64_t own_base, own_start, own_size;
    std::int64_t operator()(std::int64_t j) const {
        if (j < shared_n) {
            const std::int64_t k = shared_start + j;
            return shared_base + (k < shared_size ? k : k - shared_size);
        }
        const std::int64_t k = own_start + (j - shared_n);
        return own_base + (k < own_size ? k : k - own_size);
    }
};

constexpr std::int64_t kNoRing = std::numeric_limits<std::int64_t>::max();

// Where the part [first, end) of a read lives: in its ring (the rows' writes came in order,
// so the ring must still hold `first`), or in place.
void place(const KvCache::Ring* ring, std::int64_t first, std::int64_t end, std::int64_t& base, std::int64_t& start,
           std::int64_t& size) {
    if (!ring || first >= end) {
        base = first, start = 0, size = kNoRing;
        return;
    }
    if (!ring->holds(first) || end > ring->end)
        throw Error(ErrorCode::InvalidArgument, "attention: slot " + std::to_string(first) + " is no longer in its window ring");
    base = ring->base, start = (first - ring->begin) % ring->size, size = ring->size;
}

// A score as the model family wants it: scaled, then soft-capped (Gemma 2).
inline float shaped(float dot, float scale, float softcap) {
    const float s = dot * scale;
    return softcap > 0.0f ? std::tanh(s / softcap) * softcap : s;
}

// ---- scalar twin ----------------------------------------------------------------------
template <typename T>
void head_scalar(const float* q, const T* kh, const T* vh, std::int64_t D, std::int64_t L, Slots slot, float scale,
                 float softcap, float* p, float* acc, T* out) {
    float m = -INFINITY;
    for (std::int64_t j = 0; j < L; ++j) {
        const T* k = kh + slot(j) * D;
        float lane[8] = {};
        for (std::int64_t d = 0; d < D; ++d) lane[d % 8] = std::fma(q[d], wide(k[d]), lane[d % 8]);
        p[j] = shaped(tree8(lane), scale, softcap);
        m = std::max(m, p[j]);
    }
    float sum = 0.0f;
    for (std::int64_t j = 0; j < L; ++j) {
        p[j] = kev_exp(p[j] - m);
        sum += p[j];
    }
    for (std::int64_t d = 0; d < D; ++d) acc[d] = 0.0f;
    for (std::int64_t j = 0; j < L; ++j) {
        const T* v = vh + slot(j) * D;
        for (std::int64_t d = 0; d < D; ++d) acc[d] = std::fma(p[j], wide(v[d]), acc[d]);
    }
    for (std::int64_t d = 0; d < D; ++d) out[d] = static_cast<T>(acc[d] / sum);
}

// ---- AVX2 (also what the avx512 and amx families run) ---------------------------------
#define KEV_AVX2 __attribute__((target("avx2,fma,f16c")))

// tree8 of 8 keys' lane vectors at once: lane i of the result is tree8 of a[i]'s lanes,
// the same additions in the same association (float addition commutes, so which operand
// comes first does not matter): halves, then (q0 + q2) beside (q1 + q3), then their sum.
KEV_AVX2 inline __m256 tree8x8(const __m256* a) {
    __m256 t[4];
    for (int i = 0; i < 4; ++i)  // keys i and i + 4: [l0 + l4, l1 + l5, l2 + l6, l3 + l7] each
        t[i] = _mm256_permute_ps(_mm256_add_ps(_mm256_permute2f128_ps(a[i], a[i + 4], 0x20),
                                               _mm256_permute2f128_ps(a[i], a[i + 4], 0x31)),
                                 _MM_SHUFFLE(3, 1, 2, 0));  // -> q0, q2, q1, q3
    return _mm256_hadd_ps(_mm256_hadd_ps(t[0], t[1]), _mm256_hadd_ps(t[2], t[3]));
}

// The rows of keys (or values) j0 .. j0 + nj - 1 widened to fp32 into kb [nj, D].
template <typename T>
KEV_AVX2 void widen_rows(const T* base, std::int64_t j0, std::int64_t nj, std::int64_t D, Slots slot, float* kb) {
    for (std::int64_t i = 0; i < nj; ++i) {
        const T* row = base + slot(j0 + i) * D;
        for (std::int64_t d = 0; d < D; d += 8) _mm256_storeu_ps(kb + i * D + d, load8(row + d));
    }
}

// acc[0, 8n) += p[jj] * v[jj][0, 8n) for jj in [0, nj), each output's chain in key
// order; v rows D apart. N = 8: the count known, the 8 sums stay in registers.
template <int N>
KEV_AVX2 inline void values_block(const float* p, std::int64_t nj, const float* v, std::int64_t D, float* acc, int n) {
    const int count = N > 0 ? N : n;
    __m256 a[8];
    for (int i = 0; i < count; ++i) a[i] = _mm256_loadu_ps(acc + 8 * i);
    for (std::int64_t jj = 0; jj < nj; ++jj) {
        const __m256 pj = _mm256_set1_ps(p[jj]);
        for (int i = 0; i < count; ++i) a[i] = _mm256_fmadd_ps(pj, _mm256_loadu_ps(v + jj * D + 8 * i), a[i]);
    }
    for (int i = 0; i < count; ++i) _mm256_storeu_ps(acc + 8 * i, a[i]);
}

// Heads [0, nh) of one row that read the same keys and values (one KV head of a
// grouped-query model): q [nh, D], p [nh, L], acc [nh, D], out [nh, D], and scratch
// mvl [nh, 8] and sums [nh]. Each block of 8
// keys and of 8 values is widened to fp32 once into kb [8, D], and every head's products
// read it there. Each head runs head_scalar's arithmetic: its scores eight keys at a
// time (eight independent FMA chains, their trees in one vector: each key's lanes and
// tree are the ones it has alone), the max, exp and sum in head_scalar's order, and each
// output's FMA chain over the keys in order, carried in acc from block to block; the
// widening is exact, so sharing it (it was two thirds of the vector instructions of the
// per-head loops it replaces) changes no bit.
template <typename T>
KEV_AVX2 void heads_avx2(const float* q, std::int64_t nh, const T* kh, const T* vh, std::int64_t D, std::int64_t L,
                         Slots slot, float scale, float softcap, float* p, float* acc, float* kb, float* mvl, float* sums,
                         T* out) {
    alignas(32) float lane[8];
    for (std::int64_t h = 0; h < nh; ++h) _mm256_storeu_ps(mvl + 8 * h, _mm256_set1_ps(-INFINITY));
    const std::int64_t L8 = L / 8 * 8;
    for (std::int64_t j = 0; j < L8; j += 8) {
        widen_rows(kh, j, 8, D, slot, kb);
        for (std::int64_t h = 0; h < nh; ++h) {
            const float* qh = q + h * D;
            __m256 a[8];
            for (int i = 0; i < 8; ++i) a[i] = _mm256_setzero_ps();
            for (std::int64_t d = 0; d < D; d += 8) {
                const __m256 qv = _mm256_loadu_ps(qh + d);
                for (int i = 0; i < 8; ++i) a[i] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(kb + i * D + d), a[i]);
            }
            __m256 s = _mm256_mul_ps(tree8x8(a), _mm256_set1_ps(scale));
            if (softcap > 0.0f) {
                _mm256_store_ps(lane, s);
                for (int i = 0; i < 8; ++i) lane[i] = std::tanh(lane[i] / softcap) * softcap;
                s = _mm256_load_ps(lane);
            }
            _mm256_storeu_ps(p + h * L + j, s);
            _mm256_storeu_ps(mvl + 8 * h, _mm256_max_ps(s, _mm256_loadu_ps(mvl + 8 * h)));
        }
    }
    for (std::int64_t h = 0; h < nh; ++h) {
        const float* qh = q + h * D;
        float* ph = p + h * L;
        float m = -INFINITY;
        for (int i = 0; i < 8; ++i) m = std::max(m, mvl[8 * h + i]);
        for (std::int64_t j = L8; j < L; ++j) {
            const T* k = kh + slot(j) * D;
            __m256 a = _mm256_setzero_ps();
            for (std::int64_t d = 0; d < D; d += 8) a = _mm256_fmadd_ps(_mm256_loadu_ps(qh + d), load8(k + d), a);
            _mm256_store_ps(lane, a);
            ph[j] = shaped(tree8(lane), scale, softcap);
            m = std::max(m, ph[j]);
        }
        std::int64_t j = 0;
        const __m256 mv = _mm256_set1_ps(m);
        for (; j + 8 <= L; j += 8) _mm256_storeu_ps(ph + j, exp8(_mm256_sub_ps(_mm256_loadu_ps(ph + j), mv)));
        for (; j < L; ++j) ph[j] = kev_exp(ph[j] - m);
        float sum = 0.0f;
        for (j = 0; j < L; ++j) sum += ph[j];
        sums[h] = sum;
        for (std::int64_t d = 0; d < D; ++d) acc[h * D + d] = 0.0f;
    }
    // Each output's chain over the keys in order, carried in acc between blocks.
    for (std::int64_t j0 = 0; j0 < L; j0 += 8) {
        const std::int64_t nj = std::min<std::int64_t>(8, L - j0);
        widen_rows(vh, j0, nj, D, slot, kb);
        for (std::int64_t h = 0; h < nh; ++h) {
            const float* ph = p + h * L;
            float* ah = acc + h * D;
            for (std::int64_t d = 0; d < D;) {
                const int n = static_cast<int>(std::min<std::int64_t>(8, (D - d) / 8));
                if (n == 8) values_block<8>(ph + j0, nj, kb + d, D, ah + d, 8);  // the sums in registers
                else values_block<0>(ph + j0, nj, kb + d, D, ah + d, n);
                d += 8 * n;
            }
        }
    }
    for (std::int64_t h = 0; h < nh; ++h)
        for (std::int64_t d = 0; d < D; ++d) out[h * D + d] = static_cast<T>(acc[h * D + d] / sums[h]);
}
#undef KEV_AVX2

bool use_avx2(std::int64_t D) {
    return D % 8 == 0 && row_kernels_avx2();
}


}  // namespace

const char* attention_rows_kernel(std::int64_t head_dim) { return use_avx2(head_dim) ? "avx2" : "scalar"; }

at::Tensor attend_rows(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values,
                       const std::vector<ForwardBatch::RowRead>& reads, const RowAttention& options) {
    const std::int64_t H = q.size(1), D = q.size(2), KVH = keys.size(0), G = H / KVH;
    const std::int64_t n = q.size(0);
    if (static_cast<std::int64_t>(reads.size()) != n) throw Error(ErrorCode::InvalidArgument, "attend_rows: one read per row");
    if (q.stride(2) != 1 || !keys.is_contiguous() || !values.is_contiguous() || keys.scalar_type() != q.scalar_type())
        throw Error(ErrorCode::InvalidArgument, "attend_rows: q [S, H, D] and contiguous caches of q's dtype");
    at::Tensor out = at::empty({n, H * D}, q.options());  // [n, H * D]
    const std::int64_t slots = keys.size(1), qs0 = q.stride(0), qs1 = q.stride(1);
    const float scale = options.scale > 0.0f ? options.scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
    const float softcap = options.softcap;
    const std::int64_t W = options.window;
    if (W > 0 && (!options.row_positions || !options.slot_positions))
        throw Error(ErrorCode::InvalidArgument, "attend_rows: a window needs row and slot positions");
    // Each row's slots: with a window, the tail of each span within it.
    std::vector<Slots> row_slots(static_cast<std::size_t>(n));
    std::vector<std::int64_t> row_len(static_cast<std::size_t>(n));
    for (std::int64_t r = 0; r < n; ++r) {
        const ForwardBatch::RowRead& rd = reads[static_cast<std::size_t>(r)];
        std::int64_t shared_begin = 0, begin = rd.begin;
        if (W > 0) {
            const std::int64_t p = options.row_positions[r];
            const std::int64_t* sp = options.slot_positions;
            auto outside = [p, W](std::int64_t pos) { return !within_window(p, pos, W); };
            shared_begin = std::partition_point(sp, sp + rd.shared_end, outside) - sp;
            begin = std::partition_point(sp + rd.begin, sp + rd.end, outside) - sp;
        }
        Slots& sl = row_slots[static_cast<std::size_t>(r)];
        sl.shared_n = rd.shared_end - shared_begin;
        const KvCache* rings = options.rings;
        place(rings && sl.shared_n > 0 ? rings->ring_of(shared_begin) : nullptr, shared_begin, rd.shared_end,
              sl.shared_base, sl.shared_start, sl.shared_size);
        place(rings ? rings->ring_of(begin) : nullptr, begin, rd.end, sl.own_base, sl.own_start, sl.own_size);
        row_len[static_cast<std::size_t>(r)] = (rd.shared_end - shared_begin) + (rd.end - begin);
    }
    const bool avx2 = use_avx2(D);
    with_row_dtype(q.scalar_type(), [&](auto* tag) {
        using T = std::remove_pointer_t<decltype(tag)>;
        const T* qp = q.data_ptr<T>();
        const T* kp = keys.data_ptr<T>();
        const T* vp = values.data_ptr<T>();
        T* op = out.data_ptr<T>();
        if (avx2) {
            // Tasks of the heads that share a KV head (all G of them, or halves where whole
            // groups would leave a thread short); a head's bits do not depend on the split.
            const std::int64_t threads = std::max<int>(1, at::get_num_threads());
            const std::int64_t parts = G > 1 && (n * KVH) % threads != 0 && n * KVH < 4 * threads ? 2 : 1;
            const std::int64_t per = (G + parts - 1) / parts;
            at::parallel_for(0, n * KVH * parts, 1, [&](std::int64_t t0, std::int64_t t1) {
                std::vector<float> p, acc(static_cast<std::size_t>(per * D)), qf(static_cast<std::size_t>(per * D)),
                    kb(static_cast<std::size_t>(8 * D)), mvl(static_cast<std::size_t>(8 * per)), sums(static_cast<std::size_t>(per));
                for (std::int64_t t = t0; t < t1; ++t) {
                    const std::int64_t r = t / (KVH * parts), g = t / parts % KVH, part = t % parts;
                    const std::int64_t h0 = g * G + part * per, nh = std::min(per, G - part * per);
                    if (nh <= 0) continue;
                    const std::int64_t L = row_len[static_cast<std::size_t>(r)];
                    for (std::int64_t h = 0; h < nh; ++h) {
                        const T* qr = qp + r * qs0 + (h0 + h) * qs1;
                        for (std::int64_t d = 0; d < D; ++d) qf[static_cast<std::size_t>(h * D + d)] = wide(qr[d]);
                    }
                    p.resize(static_cast<std::size_t>(nh * std::max<std::int64_t>(L, 1)));
                    heads_avx2<T>(qf.data(), nh, kp + g * slots * D, vp + g * slots * D, D, L, row_slots[static_cast<std::size_t>(r)],
                                  scale, softcap, p.data(), acc.data(), kb.data(), mvl.data(), sums.data(),
                                  op + r * H * D + h0 * D);
                }
            });
            return;
        }
        at::parallel_for(0, n * H, 1, [&](std::int64_t t0, std::int64_t t1) {
            std::vector<float> p, acc(static_cast<std::size_t>(D)), qf(static_cast<std::size_t>(D));
            for (std::int64_t t = t0; t < t1; ++t) {
                const std::int64_t r = t / H, h = t % H;
                const std::int64_t L = row_len[static_cast<std::size_t>(r)];
                const T* qr = qp + r * qs0 + h * qs1;
                for (std::int64_t d = 0; d < D; ++d) qf[static_cast<std::size_t>(d)] = wide(qr[d]);
                p.resize(static_cast<std::size_t>(std::max<std::int64_t>(L, 1)));
                const T* kh = kp + (h / G) * slots * D;
                const T* vh = vp + (h / G) * slots * D;
                T* o = op + r * H * D + h * D;
                const Slots slot = row_slots[static_cast<std::size_t>(r)];
                head_scalar<T>(qf.data(), kh, vh, D, L, slot, scale, softcap, p.data(), acc.data(), o);
            }
        });
    });
    return out;
}

}  // namespace kev
