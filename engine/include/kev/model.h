// The decoder: one implementation for Llama, Qwen2/2.5 and Qwen3, configured by
// ModelConfig. Its forward runs over a PACKED batch: any number of rows, each
// with its own token, RoPE position and cache slot, and a mask saying which cache
// slots each row may attend to. One prefill of N prompts and one decode step of N
// cards are the same call with different batches.
//
// Dimension letters: S packed rows, K cache slots read (kv_len), H query heads,
// G = H / KVH query heads per key/value head, D head dim, V vocabulary.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "kev/config.h"
#include "kev/kv_cache.h"
#include "kev/lora.h"
#include "kev/pack_plan.h"
#include "kev/weights.h"

namespace kev {

// One forward's input, plain parallel arrays (like llama.cpp's llama_batch).
struct ForwardBatch {
    std::vector<std::int64_t> tokens;       // [S] token ids
    std::vector<std::int64_t> positions;    // [S] RoPE positions (restart per sequence)
    std::vector<std::int64_t> slots;        // [S] cache slot each row's key/value is written to
    std::int64_t kv_len = 0;                // rows attend over cache slots [0, kv_len)
    std::vector<std::uint8_t> mask;         // [S * kv_len] row-major, 1 = row may read slot
    // Optional, instead of `mask`: row r reads exactly the cache slots of reads[r] (the
    // isolation rule, pack_plan.h's ReadSpan: the shared context and its own card's slots
    // up to itself). Only those slots are read, so a step's attention cost follows each
    // card's own length, not the whole pack's.
    using RowRead = ReadSpan;
    std::vector<RowRead> reads;             // [S] or empty (then `mask` is used)
    std::vector<std::int64_t> output_rows;  // rows whose logits are returned, in this order
    // Optional, the unmerged LoRA path: row r adds lora_scales[r] x alpha/r times the
    // attached adapter's update (0 = the base model for that row). Empty = no LoRA rows.
    // Needs an attached, unmerged adapter; values in [0, kMaxLoraScale].
    std::vector<float> lora_scales;         // [S] or empty
};

// Slot owner marks for build_attention_mask.
constexpr std::int32_t kEmptySlot = -1;      // never read
constexpr std::int32_t kSharedSegment = PackPlan::kSharedSegment;  // shared context: readable by every segment

// The isolation rule, as a pure function. Row r may read slot j when
//   slot j belongs to r's segment (or to the shared context), and
//   slot_position[j] <= row_position[r]           (causal: nothing from the future).
// Rows are described by (segment, position), slots by (owner segment, position of
// the token stored there). With two prompts packed in slots 0..6:
//
//   slot:        0 1 2 3 4 5 6        segment a = slots 0-3, positions 0-3
//   row a@2  ->  1 1 1 0 0 0 0        segment b = slots 4-6, positions 0-2
//   row b@1  ->  0 0 0 0 1 1 0
//
// A batch's own rows must be entered in the slot arrays too (a row reads itself).
// Returns [rows * slots] bytes.
std::vector<std::uint8_t> build_attention_mask(const std::vector<std::int32_t>& row_segments,
                                               const std::vector<std::int64_t>& row_positions,
                                               const std::vector<std::int32_t>& slot_segments,
                                               const std::vector<std::int64_t>& slot_positions);

// A batch for one sequence alone: tokens at positions [start, start + n) written to
// slots [start, start + n), reading slots [0, start + n) causally; logits for every
// row, or only the last when `last_only`. The single-sequence reference path.
ForwardBatch single_sequence_batch(const std::vector<std::int64_t>& tokens, std::int64_t start, bool last_only);

class Model {
public:
    // Loads weights (see weights.h) after checking that `options.dtype` works on
    // `options.device`. Throws kev::Error.
    static std::unique_ptr<Model> load(const std::string& path, const LoadOptions& options);
    Model(ModelConfig config, ModelWeights weights, Device device, DType dtype);

    const ModelConfig& config() const { return config_; }
    const ModelWeights& weights() const { return weights_; }
    Device device() const { return device_; }
    DType dtype() const { return dtype_; }

    // A cache with `slots` slots in this model's device and dtype.
    KvCache make_cache(std::int64_t slots) const;

    // Runs the batch: writes every row's key/value into its slot, returns logits
    // [output_rows.size(), V] as fp32 on the model's device. Validates the batch
    // first (sizes, token ids, positions < max_positions, slots and kv_len within
    // the cache, every row reading at least one slot, its own slot included); on a
    // validation error (InvalidArgument) the cache is unchanged.
    at::Tensor forward(const ForwardBatch& batch, KvCache& cache) const;

    // --- LoRA (kev/lora.h; defined in lora/lora_model.cpp) ---
    // Attaches an adapter loaded for this model (load_lora_adapter), replacing any
    // other; null detaches. Unmerges first. The base weights are not changed.
    void attach_lora(std::shared_ptr<const LoraAdapter> adapter);
    const std::shared_ptr<const LoraAdapter>& lora() const { return lora_; }
    // True when an adapter is attached and none of its target layers is 4-bit.
    bool lora_mergeable() const;
    // Merges the attached adapter at `scale` x alpha/r: W' = W + s B A in fp32, cast to
    // the working dtype. The original tensors are kept for unmerge_lora(). Throws
    // InvalidArgument (no adapter, scale out of range), Unsupported (4-bit targets);
    // the weights are unchanged then.
    void merge_lora(float scale);
    // Puts the original weight tensors back (the same tensors: bit-exact). No-op when
    // nothing is merged.
    void unmerge_lora();
    // The scale merged into the weights, or empty.
    std::optional<float> merged_lora_scale() const { return merged_scale_; }

private:
    ModelConfig config_;
    ModelWeights weights_;
    Device device_;
    DType dtype_;
    at::Tensor inv_freq_;  // [R/2] fp32, RoPE inverse frequencies after scaling (R: config_.rope_dim())
    at::Tensor inv_freq_long_;  // [R/2] fp32, LongRoPE's from original_max_positions on, or undefined
    at::Tensor inv_freq_local_;  // [D/2] fp32, the windowed layers' own (Gemma 3), or undefined
    std::shared_ptr<const LoraAdapter> lora_;
    std::optional<float> merged_scale_;
    std::vector<at::Tensor> unmerged_weights_;  // originals of merged Linears, in layer order
};

}  // namespace kev
