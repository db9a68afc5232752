#include "kev/model.h"

#include <algorithm>
#include <cmath>
#include <map>

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include "kev/buffer_pool.h"
#include "kev/error.h"
#include "kev/quant.h"
#include "model/rowwise.h"
#include "model/torch_util.h"

namespace kev {

namespace {

[[noreturn]] void bad_batch(const std::string& what) {
    throw Error(ErrorCode::InvalidArgument, "forward batch: " + what);
}

// RoPE inverse frequencies [R/2] (R the rotary size), computed with the same fp32 ops, in
// the same order, as transformers' rope initialisers, so positions past 1000 agree to the
// last bit. LongRoPE: the short factors' table, or the long ones' with long_factors.
at::Tensor rope_inverse_frequencies(const ModelConfig& c, const at::Tensor& gguf_divisors, bool long_factors = false) {
    const std::int64_t dim = c.rope_dim();
    at::Tensor exponent = at::arange(0, dim, 2, at::kLong).to(at::kFloat) / static_cast<double>(dim);
    const RopeScaling& r = c.rope_scaling;
    if (r.kind == RopeScalingKind::LongRope) {  // 1 / (ext * base^e), ext rounded to fp32
        const std::vector<double>& f = long_factors ? r.long_factor : r.short_factor;
        const std::vector<float> ext(f.begin(), f.end());
        const at::Tensor ext_t = at::from_blob(const_cast<float*>(ext.data()), {static_cast<std::int64_t>(ext.size())}, at::kFloat);
        return (ext_t * at::pow(c.rope_theta, exponent)).reciprocal().contiguous();
    }
    at::Tensor inv = at::pow(c.rope_theta, exponent).reciprocal();  // [R/2]
    if (r.kind == RopeScalingKind::Linear) {
        inv = inv / r.factor;
    } else if (r.kind == RopeScalingKind::Llama3) {
        // Llama 3.1: long wavelengths are slowed by `factor`, short ones kept, the
        // band between interpolated smoothly.
        const double old_len = static_cast<double>(r.original_max_positions);
        const double low_wavelen = old_len / r.low_freq_factor;
        const double high_wavelen = old_len / r.high_freq_factor;
        at::Tensor wavelen = inv.reciprocal() * (2 * M_PI);
        at::Tensor inv_llama = at::where(wavelen > low_wavelen, inv / r.factor, inv);
        at::Tensor smooth = (wavelen.reciprocal() * old_len - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
        at::Tensor smoothed = (1 - smooth) * inv_llama / r.factor + smooth * inv_llama;
        at::Tensor medium = at::logical_not(wavelen < high_wavelen) * at::logical_not(wavelen > low_wavelen);
        inv = at::where(medium, smoothed, inv_llama);
    }
    if (gguf_divisors.defined()) inv = inv / gguf_divisors;
    return inv.contiguous();
}

// RMSNorm as transformers computes it: in fp32, cast back, then scaled. The CPU runs the
// row kernel (rowwise.h: a row's result never depends on the rest of the batch).
// Gemma (fp32_product): the fp32 normalised row times the fp32 (1 + w), rounded once.
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps, bool fp32_product = false) {
    if (x.device().is_cpu()) return rms_norm_rows(x, weight, eps, fp32_product);
    at::Tensor h = x.to(at::kFloat);
    h = h * at::rsqrt(h.pow(2).mean(-1, /*keepdim=*/true) + eps);
    if (fp32_product) return (h * weight).to(x.scalar_type());
    return weight * h.to(x.scalar_type());
}

// Attention off the row kernel: SDPA, or written out where SDPA cannot say it (Gemma 2's
// soft-capped scores), as transformers' eager attention does: scores in the working dtype,
// softmax in fp32. q [B, H, S, D], keys/values [B, KVH, L, D], mask bool broadcast to
// [B, H, S, L] (undefined with causal). Soft-capped models never take the causal runs, so
// the written-out form always has a mask.
at::Tensor attention(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values, const at::Tensor& mask,
                     bool causal, double scale, double softcap) {
    if (softcap <= 0.0)
        return at::scaled_dot_product_attention(q, keys, values, mask.defined() ? std::optional<at::Tensor>(mask) : std::nullopt,
                                                0.0, causal, scale, /*enable_gqa=*/true);
    if (causal || !mask.defined()) throw Error(ErrorCode::InvalidArgument, "soft-capped attention needs an explicit mask");
    const std::int64_t G = q.size(1) / keys.size(1);
    const at::Tensor k = G > 1 ? keys.repeat_interleave(G, 1) : keys;
    const at::Tensor v = G > 1 ? values.repeat_interleave(G, 1) : values;
    at::Tensor w = at::matmul(q, k.transpose(-2, -1)) * scale;
    w = at::tanh(w / softcap) * softcap;
    w = w.masked_fill(mask.logical_not(), -INFINITY);
    w = at::softmax(w, -1, at::kFloat).to(q.scalar_type());
    return at::matmul(w, v);
}

at::Tensor rotate_half(const at::Tensor& x) {
    const std::int64_t half = x.size(-1) / 2;
    return at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

// x [S, heads, D] turned by cos / sin [S, 1, R] over its first R dims (the rest pass), as
// transformers' Phi-3 attention slices a partial rotary head.
at::Tensor apply_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
    const std::int64_t R = cos.size(-1), D = x.size(-1);
    if (R == D) return x * cos + rotate_half(x) * sin;
    const at::Tensor turned = x.narrow(-1, 0, R);
    return at::cat({turned * cos + rotate_half(turned) * sin, x.narrow(-1, R, D - R)}, -1);
}

at::Tensor from_vector(const std::vector<std::int64_t>& v, const at::Device& device) {
    return at::from_blob(const_cast<std::int64_t*>(v.data()), {static_cast<std::int64_t>(v.size())}, at::kLong)
        .to(device, /*non_blocking=*/false, /*copy=*/true);
}

}  // namespace

std::vector<std::uint8_t> build_attention_mask(const std::vector<std::int32_t>& row_segments,
                                               const std::vector<std::int64_t>& row_positions,
                                               const std::vector<std::int32_t>& slot_segments,
                                               const std::vector<std::int64_t>& slot_positions) {
    if (row_segments.size() != row_positions.size() || slot_segments.size() != slot_positions.size())
        throw Error(ErrorCode::InvalidArgument, "build_attention_mask: segment and position arrays differ in length");
    const std::size_t rows = row_segments.size(), slots = slot_segments.size();
    std::vector<std::uint8_t> mask(rows * slots, 0);
    for (std::size_t r = 0; r < rows; ++r) {
        std::uint8_t* m = mask.data() + r * slots;
        for (std::size_t j = 0; j < slots; ++j) {
            const std::int32_t owner = slot_segments[j];
            if (owner == kEmptySlot) continue;
            const bool visible = owner == row_segments[r] || owner == kSharedSegment;
            m[j] = visible && slot_positions[j] <= row_positions[r];
        }
    }
    return mask;
}

ForwardBatch single_sequence_batch(const std::vector<std::int64_t>& tokens, std::int64_t start, bool last_only) {
    ForwardBatch b;
    const std::int64_t n = static_cast<std::int64_t>(tokens.size());
    b.tokens = tokens;
    b.kv_len = start + n;
    b.mask.assign(static_cast<std::size_t>(n * b.kv_len), 0);
    for (std::int64_t i = 0; i < n; ++i) {
        b.positions.push_back(start + i);
        b.slots.push_back(start + i);
        std::fill_n(b.mask.begin() + i * b.kv_len, start + i + 1, 1);  // slots 0 .. start+i
        if (!last_only || i == n - 1) b.output_rows.push_back(i);
    }
    return b;
}

std::unique_ptr<Model> Model::load(const std::string& path, const LoadOptions& options) {
    check_device_dtype(options.device, options.dtype);
    if (options.quant != WeightQuant::None && options.device == Device::Cuda && !quant_cuda_kernels_built())
        throw Error(ErrorCode::Unsupported,
                    "4-bit on CUDA: this build has no CUDA kernels (nvcc was not found when it was configured)");
    LoadedWeights lw = load_weights(path, options);
    return std::make_unique<Model>(std::move(lw.config), std::move(lw.weights), options.device, options.dtype);
}

Model::Model(ModelConfig config, ModelWeights weights, Device device, DType dtype)
    : config_(std::move(config)), weights_(std::move(weights)), device_(device), dtype_(dtype) {
    validate(config_);
    inv_freq_ = rope_inverse_frequencies(config_, weights_.rope_freq_divisors).to(torch_device(device_));
    if (config_.rope_scaling.kind == RopeScalingKind::LongRope)
        inv_freq_long_ = rope_inverse_frequencies(config_, at::Tensor(), /*long_factors=*/true).to(torch_device(device_));
    if (config_.rope_local_theta > 0.0) {
        ModelConfig local = config_;  // Gemma 3's windowed layers: their own base, unscaled
        local.rope_theta = config_.rope_local_theta;
        local.rope_scaling = RopeScaling{};
        inv_freq_local_ = rope_inverse_frequencies(local, at::Tensor()).to(torch_device(device_));
    }
}

namespace {

// A cache that keeps windowed layers in rings (kv_cache.h) takes only the batches that
// cannot lose what they read: read by spans on the CPU, every row's region (and the shared
// context it reads) mapped, and a wrapping ring written in order, no more rows at once than
// leave the window its first row reads. Throws InvalidArgument (nothing written yet).
void check_ring_writes(const ForwardBatch& b, const KvCache& cache, std::int64_t window, bool cpu) {
    if (b.reads.empty() || !cpu) bad_batch("a cache keeping only the windows is read by spans on the CPU");
    std::map<const KvCache::Ring*, std::vector<std::int64_t>> written;  // ring -> offsets this batch writes
    for (std::size_t r = 0; r < b.slots.size(); ++r) {
        const std::string row = "row " + std::to_string(r) + ": ";
        const ForwardBatch::RowRead& rd = b.reads[r];
        const KvCache::Ring* own = cache.ring_of(b.slots[r]);
        if (!own || cache.ring_of(rd.begin) != own || rd.end > own->end)
            bad_batch(row + "its slots are not one region with a window ring");
        if (rd.shared_end > 0 && (!cache.ring_of(0) || cache.ring_of(0)->end < rd.shared_end))
            bad_batch(row + "the shared context it reads has no window ring");
        written[own].push_back(b.slots[r] - own->begin);
    }
    for (auto& [ring, offsets] : written) {
        if (!ring->wraps()) continue;
        std::sort(offsets.begin(), offsets.end());
        const auto n = static_cast<std::int64_t>(offsets.size());
        if (offsets.front() != ring->last + 1 || offsets.back() != ring->last + n)
            bad_batch("region " + std::to_string(ring->begin) + ": a window ring is written in order, from offset " +
                      std::to_string(ring->last + 1));
        if (n > ring->size - window + 1)
            bad_batch("region " + std::to_string(ring->begin) + ": " + std::to_string(n) + " rows at once overrun its ring of " +
                      std::to_string(ring->size) + " slots for a window of " + std::to_string(window));
    }
}

}  // namespace

KvCache Model::make_cache(std::int64_t slots) const { return KvCache(config_, slots, device_, dtype_); }

at::Tensor Model::forward(const ForwardBatch& b, KvCache& cache) const {
    const ModelConfig& c = config_;
    // Each layer's buffers are the last layer's, not new pages (kev/buffer_pool.h).
    const BufferPoolScope pool;
    // --- validation: nothing is written before the whole batch is known good ---
    const std::int64_t S = static_cast<std::int64_t>(b.tokens.size());
    const std::int64_t K = b.kv_len;
    if (S == 0) bad_batch("no rows");
    if (static_cast<std::int64_t>(b.positions.size()) != S || static_cast<std::int64_t>(b.slots.size()) != S)
        bad_batch("tokens, positions and slots differ in length");
    if (cache.layers() != c.num_layers) bad_batch("the cache was made for another model");
    if (K <= 0 || K > cache.slots())
        bad_batch("kv_len " + std::to_string(K) + " is outside the cache's " + std::to_string(cache.slots()) + " slots");
    const bool by_reads = !b.reads.empty();
    if (by_reads) {
        if (static_cast<std::int64_t>(b.reads.size()) != S)
            bad_batch("reads has " + std::to_string(b.reads.size()) + " entries, expected one per row (" + std::to_string(S) + ")");
    } else if (static_cast<std::int64_t>(b.mask.size()) != S * K) {
        bad_batch("mask has " + std::to_string(b.mask.size()) + " entries, expected rows x kv_len = " + std::to_string(S * K));
    }
    std::vector<std::uint8_t> slot_taken(static_cast<std::size_t>(K), 0);
    for (std::int64_t r = 0; r < S; ++r) {
        const std::string row = "row " + std::to_string(r) + ": ";
        if (b.tokens[r] < 0 || b.tokens[r] >= c.vocab_size)
            bad_batch(row + "token id " + std::to_string(b.tokens[r]) + " is outside the vocabulary of " + std::to_string(c.vocab_size));
        if (b.positions[r] < 0 || b.positions[r] >= c.max_positions)
            bad_batch(row + "position " + std::to_string(b.positions[r]) + " is outside the model's context of " +
                      std::to_string(c.max_positions));
        const std::int64_t slot = b.slots[r];
        if (slot < 0 || slot >= K) bad_batch(row + "slot " + std::to_string(slot) + " is outside [0, kv_len)");
        if (slot_taken[slot]++) bad_batch(row + "slot " + std::to_string(slot) + " is written by two rows");
        if (by_reads) {
            const ForwardBatch::RowRead& rd = b.reads[r];
            if (rd.shared_end < 0 || rd.shared_end > rd.begin || rd.begin > rd.end || rd.end > K)
                bad_batch(row + "read ranges [0, " + std::to_string(rd.shared_end) + ") and [" + std::to_string(rd.begin) +
                          ", " + std::to_string(rd.end) + ") are not ordered inside [0, kv_len)");
            if (slot < rd.begin || slot >= rd.end) bad_batch(row + "the read ranges leave out the row's own slot");
        } else if (!b.mask[r * K + slot]) {
            bad_batch(row + "the mask hides the row's own slot");
        }
    }
    for (std::int64_t r : b.output_rows)
        if (r < 0 || r >= S) bad_batch("output row " + std::to_string(r) + " is outside the batch");
    if (!b.lora_scales.empty()) {
        if (static_cast<std::int64_t>(b.lora_scales.size()) != S)
            bad_batch("lora_scales has " + std::to_string(b.lora_scales.size()) + " entries, expected one per row");
        if (!lora_) bad_batch("lora_scales given but no LoRA adapter is attached");
        if (merged_scale_) bad_batch("lora_scales given while the adapter is merged into the weights");
        for (float v : b.lora_scales)
            if (!(v >= 0.0f && v <= kMaxLoraScale)) bad_batch("a LoRA scale is outside [0, 2]");
    }

    const bool rings = cache.keeps_windows();
    if (rings) check_ring_writes(b, cache, c.sliding_window, device_ == Device::Cpu);

    // The batch is good: its rows' positions go with their slots (windows read them).
    for (std::int64_t r = 0; r < S; ++r) cache.set_slot_position(b.slots[r], b.positions[r]);

    c10::InferenceMode inference;
    const at::Device dev = torch_device(device_);
    const at::ScalarType dt = scalar_type(dtype_);
    const std::int64_t H = c.num_heads, KVH = c.num_kv_heads, D = c.head_dim, I = c.intermediate_size;
    const std::int64_t qs = c.q_size(), kvs = c.kv_size();

    const at::Tensor tokens = from_vector(b.tokens, dev);    // [S]
    // Where ringed layers keep the rows (the same slots when the cache keeps no rings).
    // The CPU writes rows to the cache from these lists; other devices index by tensors.
    const bool cpu = device_ == Device::Cpu;
    std::vector<std::int64_t> ring_slot_list;
    for (std::int64_t l = 0; rings && l < c.num_layers && ring_slot_list.empty(); ++l)
        if (cache.ringed(l)) ring_slot_list = cache.storage_slots(l, b.slots);
    const at::Tensor slots = cpu ? at::Tensor() : from_vector(b.slots, dev);                   // [S]
    const at::Tensor ring_slots = cpu || ring_slot_list.empty() ? at::Tensor() : from_vector(ring_slot_list, dev);
    const at::Tensor positions = from_vector(b.positions, dev);
    // Dense path: one mask over slots [0, K) for every row.
    // Run path (prefill with `reads`): rows that continue one another (consecutive
    // slots, the same shared context and region) form a run, attended in one call over
    // only the slots the run may read: the shared context and its own region. A pack's
    // attention then costs the sum of its cards' squares, not the square of the pack.
    // Gather path (decode): each row's slots listed in `gather` [S, L] (padded with the
    // row's own slot), `valid` [S, 1, 1, L] marking the real entries.
    struct Run {
        std::int64_t row = 0, rows = 0, shared_end = 0, begin = 0, end = 0;
        at::Tensor mask;  // [1, 1, rows, shared_end + end - begin] or undefined (plain causal)
    };
    // On the CPU every row that reads by spans goes to the row kernel (attention_rows.cpp):
    // a row's attention then depends only on its query and its slots, never on how its
    // card's prompt is cut into calls or on the pack around it. Other devices: SDPA per run.
    const bool rows_kernel = by_reads && cpu;
    std::vector<Run> runs;
    if (by_reads && !cpu) {
        for (std::int64_t r = 0; r < S; ++r) {
            const auto& rd = b.reads[r];
            if (!runs.empty()) {
                Run& last = runs.back();
                if (rd.shared_end == last.shared_end && rd.begin == last.begin && b.slots[r] == b.slots[r - 1] + 1 &&
                    rd.end == b.slots[r] + 1 && b.reads[r - 1].end == b.slots[r - 1] + 1) {
                    ++last.rows;
                    last.end = rd.end;
                    continue;
                }
            }
            runs.push_back({r, 1, rd.shared_end, rd.begin, rd.end, {}});
        }
    }
    // Runs attend causally over whole spans: not with a window or a soft-cap (those go by the gather path).
    const bool any_window = c.sliding_window > 0;
    const bool by_runs = by_reads && !cpu && !any_window && c.attn_softcap <= 0.0 && static_cast<std::int64_t>(runs.size()) < S;
    at::Tensor mask, gather, valid, window_mask, window_valid;
    if (rows_kernel) {
        // nothing to prepare: the reads are the kernel's input
    } else if (by_runs) {
        for (Run& run : runs) {
            const std::int64_t own = run.end - run.begin, L = run.shared_end + own;
            if (run.shared_end == 0 && own == run.rows) continue;  // square and causal
            std::vector<std::uint8_t> m(static_cast<std::size_t>(run.rows * L), 0);
            for (std::int64_t i = 0; i < run.rows; ++i) {
                const std::int64_t visible_own = b.slots[run.row + i] - run.begin + 1;
                std::fill_n(m.begin() + i * L, run.shared_end + visible_own, 1);
            }
            run.mask = at::from_blob(m.data(), {1, 1, run.rows, L}, at::kByte).to(dev, at::kBool, false, true);
        }
    } else if (!by_reads) {
        mask = at::from_blob(const_cast<std::uint8_t*>(b.mask.data()), {S, K}, at::kByte)
                   .to(dev, at::kBool, false, true);  // [S, K]
        if (any_window) {
            std::vector<std::uint8_t> m(b.mask);
            const auto& sp = cache.slot_positions();
            for (std::int64_t r = 0; r < S; ++r)
                for (std::int64_t j = 0; j < K; ++j) m[r * K + j] &= within_window(b.positions[r], sp[j], c.sliding_window);
            window_mask = at::from_blob(m.data(), {S, K}, at::kByte).to(dev, at::kBool, false, true);
        }
    } else {
        std::int64_t L = 1;
        for (const auto& rd : b.reads) L = std::max(L, rd.shared_end + rd.end - rd.begin);
        std::vector<std::int64_t> idx(static_cast<std::size_t>(S * L));
        std::vector<std::uint8_t> ok(static_cast<std::size_t>(S * L), 0);
        for (std::int64_t r = 0; r < S; ++r) {
            const auto& rd = b.reads[r];
            std::int64_t j = 0;
            for (std::int64_t s = 0; s < rd.shared_end; ++s, ++j) idx[r * L + j] = s, ok[r * L + j] = 1;
            for (std::int64_t s = rd.begin; s < rd.end; ++s, ++j) idx[r * L + j] = s, ok[r * L + j] = 1;
            for (; j < L; ++j) idx[r * L + j] = b.slots[r];
        }
        gather = from_vector(idx, dev);  // [S * L]
        valid = at::from_blob(ok.data(), {S, 1, 1, L}, at::kByte).to(dev, at::kBool, false, true);
        if (any_window) {
            const auto& sp = cache.slot_positions();
            for (std::int64_t r = 0; r < S; ++r)
                for (std::int64_t j = 0; j < L; ++j)
                    ok[r * L + j] &= within_window(b.positions[r], sp[idx[r * L + j]], c.sliding_window);
            window_valid = at::from_blob(ok.data(), {S, 1, 1, L}, at::kByte).to(dev, at::kBool, false, true);
        }
    }

    // RoPE tables, fp32 then cast, as transformers does (CPU: per row, rowwise.h).
    // Gemma 3's windowed layers have their own table (index 1).
    RopeTable rope[2];
    at::Tensor cos[2], sin[2];  // [S, 1, D] off the CPU
    // LongRoPE (global table only): each row by its own position, the long factors from
    // original_max_positions on, cos and sin times the attention factor.
    RopeLong longrope;
    if (inv_freq_long_.defined()) {
        longrope.long_inv_freq = inv_freq_long_;
        longrope.long_from = c.rope_scaling.original_max_positions;
        longrope.attention_factor = static_cast<float>(c.rope_scaling.attention_factor);
    }
    for (int t = 0; t < (inv_freq_local_.defined() ? 2 : 1); ++t) {
        const at::Tensor& inv = t ? inv_freq_local_ : inv_freq_;
        if (cpu) {
            rope[t] = rope_table(b.positions, inv, t ? RopeLong{} : longrope);
        } else {
            const at::Tensor pos = positions.to(at::kFloat).unsqueeze(1);  // [S, 1]
            at::Tensor freqs = pos * inv.unsqueeze(0);                     // [S, R/2]
            if (t == 0 && longrope.long_inv_freq.defined())
                freqs = at::where(positions.unsqueeze(1) >= longrope.long_from, pos * inv_freq_long_.unsqueeze(0), freqs);
            const at::Tensor emb = at::cat({freqs, freqs}, -1);  // [S, R]
            const float af = t ? 1.0f : longrope.attention_factor;
            cos[t] = (emb.cos() * af).to(dt).unsqueeze(1);
            sin[t] = (emb.sin() * af).to(dt).unsqueeze(1);
        }
    }
    const double scale = c.query_scale > 0.0 ? c.query_scale : 1.0 / std::sqrt(static_cast<double>(D));
    RowAttention row_attention;
    row_attention.scale = static_cast<float>(scale);
    row_attention.softcap = static_cast<float>(c.attn_softcap);
    row_attention.row_positions = b.positions.data();
    row_attention.slot_positions = cache.slot_positions().data();

    // Unmerged LoRA: each row's scale x alpha/r, [S, 1]; inactive when no row uses it.
    LoraRows lora;
    if (std::any_of(b.lora_scales.begin(), b.lora_scales.end(), [](float v) { return v != 0.0f; })) {
        lora.scale = (at::from_blob(const_cast<float*>(b.lora_scales.data()), {S, 1}, at::kFloat) *
                      lora_->config.scaling()).to(dev, dt);
    }

    const bool gemma = c.gemma_norms;
    at::Tensor x = weights_.embed.defined() ? at::embedding(weights_.embed, tokens)  // [S, hidden]
                                            : dequantize_rows(*weights_.embed_quant, tokens, dt);
    // Gemma: x sqrt(hidden), the factor rounded to the working dtype first (as transformers).
    if (c.scale_embeddings) x = x * at::scalar_tensor(std::sqrt(static_cast<double>(c.hidden_size)), at::TensorOptions().dtype(dt));
    for (std::int64_t l = 0; l < c.num_layers; ++l) {
        const LayerWeights& w = weights_.layers[l];
        const bool windowed = c.layer_windowed(l);
        // Gemma 3's local layers turn by their own base, window or not.
        const bool local = !c.windowed_layers.empty() && c.windowed_layers[static_cast<std::size_t>(l)];
        const int rt = local && inv_freq_local_.defined() ? 1 : 0;
        at::Tensor h = rms_norm(x, w.attn_norm, c.rms_norm_eps, gemma);
        const at::Tensor qkv = w.qkv(h, lora);                // [S, qs + 2 kvs]
        at::Tensor q = qkv.narrow(1, 0, qs).view({S, H, D});  // [S, H, D]
        at::Tensor k = qkv.narrow(1, qs, kvs).view({S, KVH, D});
        const at::Tensor v = qkv.narrow(1, qs + kvs, kvs).view({S, KVH, D});
        if (c.qk_norm) {
            q = rms_norm(q, w.q_norm, c.rms_norm_eps, gemma);
            k = rms_norm(k, w.k_norm, c.rms_norm_eps, gemma);
        }
        if (cpu) {
            apply_rope_rows(q, rope[rt]);
            apply_rope_rows(k, rope[rt]);
        } else {
            q = apply_rope(q, cos[rt], sin[rt]);
            k = apply_rope(k, cos[rt], sin[rt]);
        }

        at::Tensor& cache_k = cache.keys(l);  // [KVH, slots, D]
        at::Tensor& cache_v = cache.values(l);
        const bool ringed = cache.ringed(l);
        if (cpu) {
            write_cache_rows(k, cache_k, ringed ? ring_slot_list : b.slots);
            write_cache_rows(v, cache_v, ringed ? ring_slot_list : b.slots);
        } else {
            cache_k.index_copy_(1, ringed ? ring_slots : slots, k.transpose(0, 1));
            cache_v.index_copy_(1, ringed ? ring_slots : slots, v.transpose(0, 1));
        }
        at::Tensor a;
        if (rows_kernel) {
            row_attention.window = windowed ? c.sliding_window : 0;
            row_attention.rings = ringed ? &cache : nullptr;
            a = attend_rows(q, cache_k, cache_v, b.reads, row_attention);  // [S, qs]
        } else if (by_runs) {
            std::vector<at::Tensor> parts;
            for (const Run& run : runs) {
                const at::Tensor qr = q.narrow(0, run.row, run.rows).transpose(0, 1).unsqueeze(0);  // [1, H, R, D]
                at::Tensor keys = cache_k.narrow(1, run.begin, run.end - run.begin);
                at::Tensor values = cache_v.narrow(1, run.begin, run.end - run.begin);
                if (run.shared_end > 0) {
                    keys = at::cat({cache_k.narrow(1, 0, run.shared_end), keys}, 1);
                    values = at::cat({cache_v.narrow(1, 0, run.shared_end), values}, 1);
                }
                const at::Tensor out = attention(qr, keys.unsqueeze(0), values.unsqueeze(0), run.mask,
                                                 /*causal=*/!run.mask.defined(), scale, c.attn_softcap);  // [1, H, R, D]
                parts.push_back(out.squeeze(0).transpose(0, 1).reshape({run.rows, qs}));
            }
            a = parts.size() == 1 ? parts[0] : at::cat(parts, 0);
        } else if (!by_reads) {
            const at::Tensor keys = cache_k.narrow(1, 0, K).unsqueeze(0);    // [1, KVH, K, D]
            const at::Tensor values = cache_v.narrow(1, 0, K).unsqueeze(0);  // [1, KVH, K, D]
            a = attention(q.transpose(0, 1).unsqueeze(0), keys, values, windowed ? window_mask : mask, false, scale,
                          c.attn_softcap);  // [1, H, S, D]
            a = a.squeeze(0).transpose(0, 1).reshape({S, qs});
        } else {
            const std::int64_t L = valid.size(3);
            // [KVH, S*L, D] -> [S, KVH, L, D]: each row's own keys/values only.
            const at::Tensor keys = cache_k.index_select(1, gather).view({KVH, S, L, D}).transpose(0, 1);
            const at::Tensor values = cache_v.index_select(1, gather).view({KVH, S, L, D}).transpose(0, 1);
            a = attention(q.unsqueeze(2), keys, values, windowed ? window_valid : valid, false, scale,
                          c.attn_softcap);  // [S, H, 1, D]
            a = a.reshape({S, qs});
        }
        at::Tensor attn_out = w.o(a, lora);
        if (gemma) attn_out = rms_norm(attn_out, w.post_attn_norm, c.rms_norm_eps, true);
        x = x + attn_out;

        h = rms_norm(x, w.mlp_norm, c.rms_norm_eps, gemma);
        const at::Tensor gu = w.gate_up(h, lora);  // [S, 2 I]
        at::Tensor act;                            // [S, I]
        if (c.activation == Activation::GeluTanh)
            act = cpu ? gelu_tanh_gate_rows(gu) : at::gelu(gu.narrow(1, 0, I), "tanh") * gu.narrow(1, I, I);
        else
            act = cpu ? silu_gate_rows(gu) : at::silu(gu.narrow(1, 0, I)) * gu.narrow(1, I, I);
        at::Tensor mlp_out = w.down(act, lora);
        if (gemma) mlp_out = rms_norm(mlp_out, w.post_mlp_norm, c.rms_norm_eps, true);
        x = x + mlp_out;
    }
    if (b.output_rows.empty()) return at::empty({0, c.vocab_size}, at::TensorOptions().dtype(at::kFloat).device(dev));
    x = x.index_select(0, from_vector(b.output_rows, dev));  // [R, hidden]
    x = rms_norm(x, weights_.final_norm, c.rms_norm_eps, gemma);
    // CPU: the head's sums in fp32, not rounded to the working dtype first.
    at::Tensor logits = (cpu ? weights_.lm_head.fp32_out(x) : weights_.lm_head(x).to(at::kFloat)).contiguous();  // [R, V]
    if (c.final_softcap > 0.0) {
        if (cpu) softcap_rows(logits, c.final_softcap);
        else logits = at::tanh(logits / c.final_softcap) * c.final_softcap;
    }
    return logits;
}

}  // namespace kev
