// The architecture hyper-parameters of a decoder model, read from a Hugging Face
// folder (config.json + generation_config.json) or from GGUF metadata. One struct
// describes Llama, Qwen2/2.5 and Qwen3: the differences are flags (q/k/v bias,
// per-head q/k norms, tied head), never a separate model class.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kev {

class GgufFile;

// Mistral: the Llama decoder, its own name and window. Phi3: the same with fused qkv and
// gate_up tensors in the checkpoint (Phi-3 / Phi-3.5 / Phi-4-mini). Gemma2 / Gemma3 (text):
// the same decoder with Gemma's norms, GeGLU, scaled embeddings, soft-capping and
// interleaved windowed layers, all switched on by the flags below.
enum class Arch { Llama, Qwen2, Qwen3, Mistral, Phi3, Gemma2, Gemma3 };

// The MLP's gate activation: SiLU (SwiGLU) or GELU with the tanh approximation (GeGLU).
enum class Activation { Silu, GeluTanh };

// How RoPE inverse frequencies are adjusted for long contexts. Kinds Kev does not
// implement (dynamic, yarn outside Phi-3, ...) are refused by name when the config is read.
//
// LongRoPE (Phi-3.5, Phi-4-mini; "su" and Phi-3's "yarn" are its older names): each
// frequency divided by its own factor, short_factor for positions below
// original_max_positions and long_factor from there on, and cos / sin scaled by
// attention_factor. Kev chooses per position, so a card's cached keys never change and a
// row's result never depends on the pack: a card that stays below original_max_positions
// (4096 in those models) turns exactly as in transformers, and one held wholly past it too.
// One that crosses it keeps its earlier keys as they were turned; transformers' generate
// recomputes the whole sequence with the long factors at that point, and llama.cpp picks
// one set for the whole context by its size.
enum class RopeScalingKind { None, Linear, Llama3, LongRope };

struct RopeScaling {
    RopeScalingKind kind = RopeScalingKind::None;
    double factor = 1.0;                        // linear and llama3
    double low_freq_factor = 1.0;               // llama3
    double high_freq_factor = 4.0;              // llama3
    std::int64_t original_max_positions = 8192; // llama3, longrope
    std::vector<double> short_factor;           // longrope: one per rotated pair
    std::vector<double> long_factor;            // longrope
    double attention_factor = 1.0;              // longrope: cos and sin times this
};

struct ModelConfig {
    Arch arch = Arch::Llama;
    std::string source;                 // the file the config was read from (for messages)
    std::string gguf_arch;              // GGUF: general.architecture (messages name "<arch>.<key>"); HF: empty
    std::int64_t hidden_size = 0;       // model width
    std::int64_t num_layers = 0;
    std::int64_t num_heads = 0;         // H, query heads
    std::int64_t num_kv_heads = 0;      // key/value heads (GQA: divides num_heads)
    std::int64_t head_dim = 0;          // D (explicit in Qwen3; hidden/heads otherwise)
    // Partial rotary (Phi-4-mini: partial_rotary_factor 0.75): RoPE turns the first
    // rotary_dim of each head's D and leaves the rest; 0 = all of it.
    std::int64_t rotary_dim = 0;
    std::int64_t intermediate_size = 0; // SwiGLU inner width
    std::int64_t vocab_size = 0;        // V
    std::int64_t max_positions = 0;     // max_position_embeddings / context_length
    double rms_norm_eps = 1e-6;
    double rope_theta = 10000.0;
    RopeScaling rope_scaling;
    bool tie_word_embeddings = false;   // lm_head shares the embedding matrix
    bool qkv_bias = false;              // Qwen2; Llama/Qwen3 when attention_bias
    bool o_bias = false;                // Llama/Qwen3 when attention_bias
    bool qk_norm = false;               // Qwen3: RMSNorm over D on each head of q and k
    // Sliding-window attention (config.json "sliding_window"; 0 = none): a row at position p
    // reads only keys at positions p - sliding_window + 1 .. p. It counts within a card
    // (positions restart per card), so a packed card reads what it reads alone. Which layers
    // are windowed: `windowed_layers` (one flag per layer; empty = every layer, as Mistral
    // v0.1 and Phi-3; Gemma 2 alternates, Gemma 3 has five windowed layers to one global).
    std::int64_t sliding_window = 0;
    std::vector<std::uint8_t> windowed_layers;
    // Gemma: RMSNorm scales by (1 + weight), the product taken in fp32 and rounded once
    // (Kev stores the norm weights as fp32 1 + weight at load), and the attention and MLP
    // outputs pass their own norm before the residual add.
    bool gemma_norms = false;
    Activation activation = Activation::Silu;
    bool scale_embeddings = false;      // Gemma: embeddings x sqrt(hidden_size), in the working dtype
    double query_scale = 0.0;           // attention score scale; 0 = 1 / sqrt(head_dim) (Gemma: query_pre_attn_scalar^-1/2)
    double attn_softcap = 0.0;          // Gemma 2: scores -> cap * tanh(scores / cap); 0 = none
    double final_softcap = 0.0;         // Gemma 2: logits -> cap * tanh(logits / cap); 0 = none
    double rope_local_theta = 0.0;      // Gemma 3: RoPE base of the windowed layers (unscaled); 0 = rope_theta
    bool fused_qkv = false;             // Phi3: one qkv_proj tensor, rows q | k | v
    bool fused_gate_up = false;         // Phi3: one gate_up_proj tensor, rows gate | up
    std::vector<std::int64_t> bos_token_ids;  // usually one
    std::vector<std::int64_t> eos_token_ids;  // generation_config.json may list several

    std::int64_t q_size() const { return num_heads * head_dim; }
    std::int64_t kv_size() const { return num_kv_heads * head_dim; }
    std::int64_t rope_dim() const { return rotary_dim > 0 ? rotary_dim : head_dim; }
    // Whether layer l attends over the window only.
    bool layer_windowed(std::int64_t l) const {
        return sliding_window > 0 && (windowed_layers.empty() || windowed_layers[static_cast<std::size_t>(l)]);
    }
    // The family and its features in a few words ("gemma3, window 512 on 5 of 6 layers, ...").
    std::string describe_features() const;
    // Number of parameters the config implies (embedding counted once when tied).
    std::int64_t parameter_count() const;
};

const char* to_string(Arch arch);
const char* to_string(RopeScalingKind kind);

// LongRoPE's attention factor when the file names none (transformers'
// _compute_longrope_parameters): sqrt(1 + ln factor / ln original) for a context
// stretched by `factor` > 1 past `original` positions, else 1. `validate` checks the
// range of `original` and the result.
double longrope_default_attention_factor(double factor, std::int64_t original);

// Parses config.json text. `source` names the file in error messages. Throws
// kev::Error: Format (missing/ill-typed key, bad JSON), Unsupported (unknown
// architecture or rope scaling kind, sliding window, ...), and Format for sizes that
// are zero, negative, absurd or do not fit together, each naming the key and the rule.
ModelConfig config_from_hf_json(const std::string& json_text, const std::string& source);

// Reads <dir>/config.json and, when present, <dir>/generation_config.json (bos/eos).
ModelConfig load_hf_config(const std::string& dir);

// Architecture and hyper-parameters from GGUF metadata (general.architecture =
// llama / qwen2 / qwen3).
ModelConfig config_from_gguf(const GgufFile& gguf);

// Throws Format naming `config.source` and the key when a size is zero, negative, over
// its limit or inconsistent with another (num_attention_heads 7 does not divide
// hidden_size 576), when rope_theta / rms_norm_eps are not positive finite numbers, or
// when a bos/eos id is outside [0, vocab_size).
void validate(const ModelConfig& config);

// Throws Format naming `source` and `field` ("eos_token_id") unless every id is in
// [0, config.vocab_size). For ids read from another file (generation_config.json).
void validate_token_ids(const ModelConfig& config, const std::vector<std::int64_t>& ids, const std::string& field,
                        const std::string& source);

// Throws Format naming both files when the tokenizer (read from `tokenizer_source`) has
// more tokens than the model's embedding has rows: its high ids would index past it.
void check_tokenizer_fits(const ModelConfig& config, std::int64_t tokenizer_vocab, const std::string& tokenizer_source);

}  // namespace kev
