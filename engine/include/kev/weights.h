// Model weights in their working dtype and device, loaded from a Hugging Face folder
// (safetensors, single or sharded) or a GGUF file. The loader absorbs every
// checkpoint quirk so the forward never sees one:
//   - one table maps checkpoint names (HF and GGUF) to the fields below;
//     a missing or unexpected tensor is reported by name, shapes are checked
//     against the config;
//   - llama.cpp's q/k row permutation (llama architecture GGUF only) is undone;
//   - q/k/v are fused into one [q + 2 kv, hidden] matrix and gate/up into one
//     [2 I, hidden] matrix, so a decode step makes fewer, larger matmuls;
//   - a tied lm_head is the embedding tensor itself, not a copy.
// Each tensor is converted straight from the memory mapping into its working
// dtype: loading needs no second full copy of the model.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "kev/config.h"
#include "kev/engine_info.h"

namespace kev {

// Working precision of dense weights and activations.
enum class DType { F32, BF16, F16 };
const char* to_string(DType dtype);
// "fp32"/"f32"/"float32", "bf16"/"bfloat16", "fp16"/"f16"/"half"; throws InvalidArgument.
DType parse_dtype(const std::string& name);
// libtorch's dtype of a DType.
inline at::ScalarType scalar_type(DType d) {
    switch (d) {
        case DType::F32: return at::kFloat;
        case DType::BF16: return at::kBFloat16;
        case DType::F16: return at::kHalf;
    }
    return at::kFloat;
}

// Throws Unsupported, up front, when `dtype` cannot run the model's ops on `device`
// (e.g. CUDA absent, or a CPU build without the needed half-precision kernels).
// It probes the ops the forward uses on tiny tensors.
void check_device_dtype(Device device, DType dtype);

struct QuantMatrix;  // a weight held in 4-bit blocks (kev/quant.h)
struct LoraFactors;  // a LoRA adapter's low-rank update (kev/lora.h)

// Per-row LoRA context of one forward: row r adds scale[r] * (x A^T) B^T to its output.
struct LoraRows {
    at::Tensor scale;  // [S, 1] in the activations' dtype and device; undefined = no LoRA rows
    bool active() const { return scale.defined(); }
};

// One linear layer: y = x W^T (+ b). The single concept the decoder multiplies by;
// 4-bit and LoRA variants extend this struct, not the decoder.
struct Linear {
    at::Tensor weight;  // [out, in]; undefined when `quant` holds the weight
    at::Tensor bias;    // [out] or undefined
    std::shared_ptr<const QuantMatrix> quant;  // 4-bit blocks, or null for a dense weight
    std::shared_ptr<const LoraFactors> lora;   // an attached adapter's update, or null
    // Output rows kept in GGUF blocks of different formats, in row order (a fused q | k | v
    // whose v is Q6_K and q, k Q4_K, as llama.cpp's Q4_K_M files have them): each part is
    // multiplied by its own kernel and the outputs set side by side; `quant` is then null.
    // Every kernel computes a row alone, so the whole still does.
    std::vector<std::shared_ptr<const QuantMatrix>> quant_parts;
    bool quantized() const { return quant != nullptr || !quant_parts.empty(); }
    std::int64_t in_features() const;
    at::Tensor operator()(const at::Tensor& x) const;
    // The same plus, when `rows` is active and an adapter is attached, each row's scaled
    // low-rank update (the unmerged LoRA path; lora/lora_linear.cpp).
    at::Tensor operator()(const at::Tensor& x, const LoraRows& rows) const;
    // The same product with an fp32 result: the sums before any rounding to the working
    // dtype. The output head uses it, so bf16 logits are not rounded to 8 bits (which
    // made near-ties exact ties, broken by token id).
    at::Tensor fp32_out(const at::Tensor& x) const;
};

// Dense fp16 / bf16 linear layers on CUDA: libtorch's (cuBLAS; the default) or Kev's
// tensor-core tiles (KEV_CUDA_DENSE=tiles at start, in a build with the CUDA kernels):
// a fixed split of each row's sum into 256-column slices added in order, so a row's
// result does not depend on the rows beside it, which cuBLAS does not promise (it picks
// its kernel by the shape). Opt-in until a GPU check has measured it.
enum class CudaDenseForm { Torch, Tiles };
CudaDenseForm cuda_dense_form();
void set_cuda_dense_form(CudaDenseForm form);

struct LayerWeights {
    at::Tensor attn_norm;  // [hidden]
    Linear qkv;            // [q_size + 2 kv_size, hidden]: rows q | k | v
    at::Tensor q_norm;     // [D] (Qwen3) or undefined
    at::Tensor k_norm;     // [D] (Qwen3) or undefined
    Linear o;              // [hidden, q_size]
    at::Tensor mlp_norm;   // [hidden]
    Linear gate_up;        // [2 I, hidden]: rows gate | up
    Linear down;           // [hidden, I]
    // Gemma: norms of the attention and MLP outputs before each residual add. Gemma's
    // norm weights (these, the ones above and the final norm) are held as fp32 1 + w.
    at::Tensor post_attn_norm;  // [hidden] or undefined
    at::Tensor post_mlp_norm;   // [hidden] or undefined
};

// Weight memory by format, for the gauges and reports.
struct WeightMemory {
    std::int64_t dense = 0;         // bf16/fp16/fp32 tensors: embeddings, norms, biases, dense linear weights
    std::int64_t dense_linear = 0;  // of `dense`, the linear layers' weights (a tied head is the embedding)
    std::int64_t nf4 = 0;           // 4-bit linear weights by format (kev/quant.h)
    std::int64_t q4_0 = 0;
    std::int64_t q4_1 = 0;
    std::int64_t q4_k = 0;
    std::int64_t q8_0 = 0;          // kept GGUF Q8_0 blocks (a byte per weight)
    std::int64_t q6_k = 0;          // kept GGUF Q6_K blocks (a byte per weight, a scale per 16)
    std::int64_t q5_k = 0;          // kept GGUF Q5_K blocks (a byte per weight, Q4_K's scales)
    std::int64_t int8_kernel = 0;   // of the 4-bit bytes, those the int8 kernel multiplies (int8 activations)
    std::int64_t quantized() const { return nf4 + q4_0 + q4_1 + q4_k + q8_0 + q6_k + q5_k; }
    std::int64_t total() const { return dense + quantized(); }
};

struct ModelWeights {
    at::Tensor embed;               // [V, hidden]; undefined when embed_quant holds it
    // A tied embedding whose file blocks the 4-bit head keeps (CPU): the lookup decodes
    // its rows from those blocks (dequantize_rows), with no dense copy; else null.
    std::shared_ptr<const QuantMatrix> embed_quant;
    std::vector<LayerWeights> layers;
    at::Tensor final_norm;          // [hidden]
    Linear lm_head;                 // weight [V, hidden]; the embed tensor when tied
    at::Tensor rope_freq_divisors;  // [D/2] fp32 from GGUF rope_freqs.weight, or undefined
    std::int64_t bytes() const;     // distinct bytes held (a tied head counted once), 4-bit blocks included
    WeightMemory memory() const;    // the same bytes by format
};

// 4-bit linear layers (kev/quant.h). Embeddings, norms and biases keep LoadOptions::dtype
// (the activations' dtype too); a tied output head gets its own 4-bit copy while the
// embedding stays in `dtype` for the lookup, except where the head keeps the file's own
// blocks on the CPU: the lookup then decodes rows from them (the same values).
enum class WeightQuant {
    None,  // dense linear weights in `dtype`
    Q4,    // 4-bit: GGUF Q4_0/Q4_1/Q4_K/Q8_0 weights kept in their own blocks, every other one NF4
    NF4,   // 4-bit NF4 for every linear layer, re-quantized even from Q4_0/Q4_1 files
};
const char* to_string(WeightQuant quant);

struct LoadOptions {
    Device device = Device::Cpu;
    DType dtype = DType::F32;
    WeightQuant quant = WeightQuant::None;  // 4-bit on CUDA needs the CUDA kernels (kev/quant.h)
    // Called with (tensors done, tensors total) while loading; may be empty.
    std::function<void(int, int)> progress;
};

// A precision by name, as kev-cli and kev-bench take it: "4bit" or "nf4" (4-bit linear
// layers, bf16 activations) or a dtype name (parse_dtype). Sets dtype and quant; throws
// InvalidArgument for anything else.
void set_precision(LoadOptions& options, const std::string& name);

// "auto": the precision fastest on this CPU for this file, and why. A GGUF whose linear
// layers are Q4_0/Q4_1 blocks -> "4bit" (kept as they are, int8 kernel); any other file
// -> "bf16" where a batch-invariant SIMD bf16 kernel runs under the kernel-family
// ceiling (AVX2 and up: a decode step streams half the bytes of fp32), else "fp32".
// Reads only the file's header. Throws as the loaders do for a file it cannot read.
struct PrecisionChoice {
    std::string name;  // "4bit", "bf16" or "fp32"
    std::string why;
};
PrecisionChoice choose_auto_precision(const std::string& path);

// What a tied head's kept blocks would take with 4bit on the CPU, read from the header
// only: the bytes of token_embd's own blocks in the layout Kev keeps them in (the
// embedding is then looked up from them; no dense copy is held). 0 for a model folder or
// a GGUF whose token_embd 4-bit does not keep as it is (the head is made NF4 and the
// embedding stays dense). Throws as GgufFile::open does.
std::int64_t kept_embedding_bytes(const std::string& path);

// Loads from a model folder (config.json + safetensors) or a .gguf file, with the
// config that describes it. Pickle checkpoints are refused (ErrorCode::Refused).
struct LoadedWeights {
    ModelConfig config;
    ModelWeights weights;
};
LoadedWeights load_weights(const std::string& path, const LoadOptions& options);

}  // namespace kev
