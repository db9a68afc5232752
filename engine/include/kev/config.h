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

enum class Arch { Llama, Qwen2, Qwen3 };

// How RoPE inverse frequencies are adjusted for long contexts. Kinds Kev does not
// implement (dynamic, yarn, longrope, ...) are refused by name when the config is read.
enum class RopeScalingKind { None, Linear, Llama3 };

struct RopeScaling {
    RopeScalingKind kind = RopeScalingKind::None;
    double factor = 1.0;                        // linear and llama3
    double low_freq_factor = 1.0;               // llama3
    double high_freq_factor = 4.0;              // llama3
    std::int64_t original_max_positions = 8192; // llama3
};

struct ModelConfig {
    Arch arch = Arch::Llama;
    std::string source;                 // the file the config was read from (for messages)
    std::int64_t hidden_size = 0;       // model width
    std::int64_t num_layers = 0;
    std::int64_t num_heads = 0;         // H, query heads
    std::int64_t num_kv_heads = 0;      // key/value heads (GQA: divides num_heads)
    std::int64_t head_dim = 0;          // D (explicit in Qwen3; hidden/heads otherwise)
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
    std::vector<std::int64_t> bos_token_ids;  // usually one
    std::vector<std::int64_t> eos_token_ids;  // generation_config.json may list several

    std::int64_t q_size() const { return num_heads * head_dim; }
    std::int64_t kv_size() const { return num_kv_heads * head_dim; }
    // Number of parameters the config implies (embedding counted once when tied).
    std::int64_t parameter_count() const;
};

const char* to_string(Arch arch);
const char* to_string(RopeScalingKind kind);

// Parses config.json text. `source` names the file in error messages. Throws
// kev::Error: Format (missing/ill-typed key, bad JSON), Unsupported (unknown
// architecture or rope scaling kind, sliding window, ...), InvalidArgument (sizes
// that do not fit together).
ModelConfig config_from_hf_json(const std::string& json_text, const std::string& source);

// Reads <dir>/config.json and, when present, <dir>/generation_config.json (bos/eos).
ModelConfig load_hf_config(const std::string& dir);

// Architecture and hyper-parameters from GGUF metadata (general.architecture =
// llama / qwen2 / qwen3).
ModelConfig config_from_gguf(const GgufFile& gguf);

// Throws InvalidArgument naming `config.source` when sizes are inconsistent.
void validate(const ModelConfig& config);

}  // namespace kev
