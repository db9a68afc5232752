// The non-linear part of the forward, row by row: RMSNorm, RoPE, the SiLU gate, decode
// attention over each row's own cache slots, and the per-row LoRA add.
//
// Why our own: libtorch's elementwise and reduction kernels split their work by the
// size of the whole tensor (vectorised body, scalar tail, thread chunks), so an
// element's result could depend on how many rows share the call; and SDPA over a padded
// gather made a decode row depend on the longest card of the pack. Here each row is
// computed by one fixed sequence of IEEE operations that depends only on that row: no
// intrinsics, no fused multiply-add (the engine builds with -ffp-contract=off), so the
// compiler's vectorised and scalar forms agree and every CPU computes the same bits.
//
// Each function follows transformers' arithmetic step for step where it rounds to the
// working dtype (bf16: after the norm, after the RoPE products, after SiLU), so the
// parity tests hold; transcendental functions are our own (exp) or correctly rounded
// (cos/sin in double), within an ulp or two of libtorch's.
//
// Dimension letters: S rows, H query heads, KVH key/value heads, D head dim, C columns.
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include "kev/error.h"
#include "kev/model.h"

namespace kev {

// Calls fn with a null pointer of the element type of dtype (float, bf16 or fp16): the
// row kernels' one dtype dispatch.
template <typename Fn>
void with_row_dtype(at::ScalarType dtype, Fn&& fn) {
    switch (dtype) {
        case at::kFloat: return fn(static_cast<float*>(nullptr));
        case at::kBFloat16: return fn(static_cast<c10::BFloat16*>(nullptr));
        case at::kHalf: return fn(static_cast<c10::Half*>(nullptr));
        default: throw Error(ErrorCode::InvalidArgument, "row kernels take fp32, bf16 or fp16 tensors");
    }
}

// weight * (x * rsqrt(mean(x^2) + eps)) over the last dimension of x [..., C], in fp32,
// the normalised row rounded to x's dtype before the weight multiplies it.
// fp32_product (Gemma): weight is fp32 and multiplies the fp32 normalised row, the
// product rounded once: (x * rsqrt(...) * weight).to(dtype).
at::Tensor rms_norm_rows(const at::Tensor& x, const at::Tensor& weight, double eps, bool fp32_product = false);

// cos and sin of position x inv_freq, [S, R/2] fp32 each (inv_freq [R/2] fp32 on the CPU;
// R the rotary size, D or less).
struct RopeTable {
    std::vector<float> cos, sin;
    std::int64_t half = 0;
};
// LongRoPE: rows at positions from `long_from` on turn by `long_inv_freq` instead (each
// row by its own position, so never by the rest of the pack), and every cos and sin is
// multiplied by `attention_factor` in fp32, as transformers does before the cast.
struct RopeLong {
    at::Tensor long_inv_freq;  // [R/2] fp32, or undefined: one table
    std::int64_t long_from = 0;
    float attention_factor = 1.0f;
};
RopeTable rope_table(const std::vector<std::int64_t>& positions, const at::Tensor& inv_freq, const RopeLong& extra = {});
// x [S, heads, D] rotated in place (rotate-half convention over its first R = 2 half
// dims; the rest pass): x1 c - x2 s | x2 c + x1 s, with c and s rounded to x's dtype
// first and each product and sum rounded to it.
void apply_rope_rows(at::Tensor& x, const RopeTable& table);

// gu [S, 2I] (gate | up) -> silu(gate) * up, [S, I], silu rounded to the dtype first.
at::Tensor silu_gate_rows(const at::Tensor& gu);
// x [S, KVH, D] (D contiguous) written into cache [KVH, slots, D] (contiguous, x's dtype)
// at slot slots[s] for row s: the bytes as they are, what index_copy_ does without a
// dispatch per call. Slots are checked against the cache.
void write_cache_rows(const at::Tensor& x, at::Tensor& cache, const std::vector<std::int64_t>& slots);
// The same with GELU's tanh form (Gemma's GeGLU): 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))),
// in fp32 per element with the C library's tanh, rounded to the dtype, then times up.
at::Tensor gelu_tanh_gate_rows(const at::Tensor& gu);
// x [R, V] fp32 -> cap * tanh(x / cap) in place, element by element (Gemma 2's final soft-cap).
void softcap_rows(at::Tensor& x, double cap);

// Attention for rows that each read their own slots (attention_rows.cpp): row r's query
// q [S, H, D] against cache slots [0, reads[r].shared_end) and [reads[r].begin,
// reads[r].end) of keys and values [KVH, slots, D], for every row. Returns [S, H * D] in
// q's dtype. One arithmetic, written per row and head:
//   score_j = tree8(lane[0..7]) * (1 / sqrt(D)),  lane[l] = fma chain over d = l, l+8, ...
//   p_j     = kev_exp(score_j - max_j score_j),     sum = p_0 + p_1 + ... (in order)
//   out[d]  = (fma chain over j of p_j * v_j[d]) / sum
// with tree8 = ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)). An AVX2 form (8 lanes:
// the lanes above) and a scalar twin compute the same bits; prompts and decode, a card
// alone or in any pack, any split of its prompt into calls: the same numbers.
//
// Options (Gemma, Mistral): `scale` replaces 1 / sqrt(D); `softcap` > 0 turns each score
// into softcap * tanh(score / softcap) before the max; `window` > 0 keeps only the slots
// whose position (slot_positions) is within window - 1 of the row's (row_positions): the
// tail of each read span, as positions rise along a span.
// The window rule, written once: a row at row_position reads a slot holding slot_position
// only when it lies within the last `window` positions (window 0: no limit). The row kernel,
// the dense masks and the gathers off the CPU all ask this.
inline bool within_window(std::int64_t row_position, std::int64_t slot_position, std::int64_t window) {
    return window <= 0 || row_position - slot_position < window;
}

struct RowAttention {
    float scale = 0.0f;
    float softcap = 0.0f;
    std::int64_t window = 0;
    const std::int64_t* row_positions = nullptr;   // [S], with a window
    const std::int64_t* slot_positions = nullptr;  // [slots], with a window
    // With a window: the cache when it keeps this layer in rings (keys and values are then
    // its ring storage, read where KvCache::Ring puts each slot).
    const KvCache* rings = nullptr;
};
at::Tensor attend_rows(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values,
                       const std::vector<ForwardBatch::RowRead>& reads, const RowAttention& options = {});
// The path attend_rows takes for head dim D under the kernel-family ceiling: "avx2" or
// "scalar" (the AVX2 form needs D a multiple of 8).
const char* attention_rows_kernel(std::int64_t head_dim);

// y + update * scale[r] per row (LoRA's unmerged path), rounded once to y's dtype.
at::Tensor add_scaled_rows(const at::Tensor& y, const at::Tensor& update, const at::Tensor& scale);

// Whether the row kernels' AVX2 forms run: the ceiling (KEV_ISA) allows avx2 and the CPU
// has it. Otherwise the scalar twins run; both give the same bits.
bool row_kernels_avx2();

// The exp used above: Cody-Waite reduction and a degree-6 polynomial, within 2 ulp of
// expf; plain float operations, so it is the same function on every CPU.
float kev_exp(float x);

}  // namespace kev
