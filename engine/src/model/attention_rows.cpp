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

template <typename T>
KEV_AVX2 void head_avx2(const float* q, const T* kh, const T* vh, std::int64_t D, std::int64_t L, Slots slot,
                        float scale, float softcap, float* p, float* acc, T* out) {
    alignas(32) float lane[8];
    // Eight keys at a time: eight independent FMA chains, their trees in one vector; each
    // key's lanes and tree are the ones it has alone.
    std::int64_t j = 0;
    __m256 mv = _mm256_set1_ps(-INFINITY);
    for (; j + 8 <= L; j += 8) {
        const T* k[8];
        for (int i = 0; i < 8; ++i) k[i] = kh + slot(j + i) * D;
        __m256 a[8];
        for (int i = 0; i < 8; ++i) a[i] = _mm256_setzero_ps();
        for (std::int64_t d = 0; d < D; d += 8) {
            const __m256 qv = _mm256_loadu_ps(q + d);
            for (int i = 0; i < 8; ++i) a[i] = _mm256_fmadd_ps(qv, load8(k[i] + d), a[i]);
        }
        __m256 s = _mm256_mul_ps(tree8x8(a), _mm256_set1_ps(scale));
        if (softcap > 0.0f) {
            _mm256_store_ps(lane, s);
            for (int i = 0; i < 8; ++i) lane[i] = std::tanh(lane[i] / softcap) * softcap;
            s = _mm256_load_ps(lane);
        }
        _mm256_storeu_ps(p + j, s);
        mv = _mm256_max_ps(s, mv);  // a NaN score passes, as std::max(m, score) lets it
    }
    _mm256_store_ps(lane, mv);
    float m = -INFINITY;
    for (int i = 0; i < 8; ++i) m = std::max(m, lane[i]);  // max is exact: any order, the same value
    for (; j < L; ++j) {
        const T* k = kh + slot(j) * D;
        __m256 a = _mm256_setzero_ps();
        for (std::int64_t d = 0; d < D; d += 8) a = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), load8(k + d), a);
        _mm256_store_ps(lane, a);
        p[j] = shaped(tree8(lane), scale, softcap);
        m = std::max(m, p[j]);
    }
    j = 0;
    mv = _mm256_set1_ps(m);
    for (; j + 8 <= L; j += 8) _mm256_storeu_ps(p + j, exp8(_mm256_sub_ps(_mm256_loadu_ps(p + j), mv)));
    for (; j < L; ++j) p[j] = kev_exp(p[j] - m);
    float sum = 0.0f;
    for (j = 0; j < L; ++j) sum += p[j];
    // Up to eight groups of 8 outputs at a time (independent chains); each output's sum
    // over the keys is the same chain it is alone.
    for (std::int64_t d = 0; d < D;) {
        const int n = static_cast<int>(std::min<std::int64_t>(8, (D - d) / 8));
        __m256 a[8];
        for (int i = 0; i < 8; ++i) a[i] = _mm256_setzero_ps();
        if (n == 8) {
            for (j = 0; j < L; ++j) {
                const __m256 pj = _mm256_set1_ps(p[j]);
                const T* v = vh + slot(j) * D + d;
                for (int i = 0; i < 8; ++i) a[i] = _mm256_fmadd_ps(pj, load8(v + 8 * i), a[i]);
            }
        } else {
            for (j = 0; j < L; ++j) {
                const __m256 pj = _mm256_set1_ps(p[j]);
                const T* v = vh + slot(j) * D + d;
                for (int i = 0; i < n; ++i) a[i] = _mm256_fmadd_ps(pj, load8(v + 8 * i), a[i]);
            }
        }
        for (int i = 0; i < n; ++i) _mm256_storeu_ps(acc + d + 8 * i, a[i]);
        d += 8 * n;
    }
    for (std::int64_t d = 0; d < D; ++d) out[d] = static_cast<T>(acc[d] / sum);
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
                if (avx2) head_avx2<T>(qf.data(), kh, vh, D, L, slot, scale, softcap, p.data(), acc.data(), o);
                else head_scalar<T>(qf.data(), kh, vh, D, L, slot, scale, softcap, p.data(), acc.data(), o);
            }
        });
    });
    return out;
}

}  // namespace kev
