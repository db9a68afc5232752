#include "kev/config.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "kev/error.h"
#include "text_file.h"
#include "kev/gguf.h"

namespace kev {

namespace {

using nlohmann::json;

[[noreturn]] void fail(ErrorCode code, const std::string& source, const std::string& what) {
    throw Error(code, source + ": " + what);
}

std::string num(double v) {
    std::ostringstream s;
    s << v;
    return s.str();
}

// An integer too large for int64 (nlohmann keeps it as uint64) would wrap to a negative.
std::int64_t as_int64(const json& v, const char* key, const std::string& source) {
    if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX))
        fail(ErrorCode::Format, source, std::string("key '") + key + "' = " + v.dump() + " is too large");
    return v.get<std::int64_t>();
}

std::int64_t require_int(const json& j, const char* key, const std::string& source) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) fail(ErrorCode::Format, source, std::string("missing key '") + key + "'");
    if (!it->is_number_integer()) fail(ErrorCode::Format, source, std::string("key '") + key + "' is not an integer");
    return as_int64(*it, key, source);
}

std::int64_t optional_int(const json& j, const char* key, std::int64_t fallback, const std::string& source) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return fallback;
    if (!it->is_number_integer()) fail(ErrorCode::Format, source, std::string("key '") + key + "' is not an integer");
    return as_int64(*it, key, source);
}

double optional_float(const json& j, const char* key, double fallback, const std::string& source) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return fallback;
    if (!it->is_number()) fail(ErrorCode::Format, source, std::string("key '") + key + "' is not a number");
    return it->get<double>();
}

// A string field, or `fallback` when it is absent or null; another type is an error
// naming the field (json::value would throw a type_error instead).
std::string optional_string(const json& j, const char* key, const std::string& fallback, const std::string& source) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return fallback;
    if (!it->is_string()) fail(ErrorCode::Format, source, std::string(key) + " is " + it->dump() + ", not a string");
    return it->get<std::string>();
}

bool optional_bool(const json& j, const char* key, bool fallback, const std::string& source) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return fallback;
    if (!it->is_boolean()) fail(ErrorCode::Format, source, std::string("key '") + key + "' is not a boolean");
    return it->get<bool>();
}

// bos_token_id / eos_token_id: an integer or a list of integers (or null).
std::vector<std::int64_t> token_ids(const json& j, const char* key, const std::string& source) {
    std::vector<std::int64_t> ids;
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return ids;
    if (it->is_number_integer()) {
        ids.push_back(as_int64(*it, key, source));
    } else if (it->is_array()) {
        for (const auto& v : *it) {
            if (!v.is_number_integer()) fail(ErrorCode::Format, source, std::string("key '") + key + "' holds a non-integer");
            ids.push_back(as_int64(v, key, source));
        }
    } else {
        fail(ErrorCode::Format, source, std::string("key '") + key + "' is neither an integer nor a list");
    }
    return ids;
}

// LongRoPE's per-frequency factors: a list of numbers (their count and values are checked
// by validate, which knows the rotary size).
std::vector<double> factor_list(const json& j, const char* key, const std::string& source) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) fail(ErrorCode::Format, source, std::string("longrope needs '") + key + "'");
    if (!it->is_array()) fail(ErrorCode::Format, source, std::string("longrope '") + key + "' is not a list");
    std::vector<double> v;
    for (const auto& x : *it) {
        if (!x.is_number()) fail(ErrorCode::Format, source, std::string("longrope '") + key + "' holds " + x.dump() + ", not a number");
        v.push_back(x.get<double>());
    }
    return v;
}

// `top`: the config's top level (Phi-3 keeps original_max_position_embeddings there).
RopeScaling rope_scaling_from(const std::string& type, const json& params, const json& top, std::int64_t max_positions,
                              const std::string& source) {
    RopeScaling r;
    if (type.empty() || type == "default") return r;
    if (type == "longrope") {
        // transformers' _compute_longrope_parameters: factor from the params, else the
        // ratio of the context lengths; attention_factor from the params, else
        // sqrt(1 + ln factor / ln original) when factor > 1.
        r.kind = RopeScalingKind::LongRope;
        r.short_factor = factor_list(params, "short_factor", source);
        r.long_factor = factor_list(params, "long_factor", source);
        r.original_max_positions = optional_int(
            params, "original_max_position_embeddings",
            optional_int(top, "original_max_position_embeddings", max_positions, source), source);
        const double factor = optional_float(params, "factor",
                                             static_cast<double>(max_positions) / static_cast<double>(r.original_max_positions),
                                             source);
        if (!std::isfinite(factor) || !(factor > 0.0))
            fail(ErrorCode::Format, source, "longrope factor " + num(factor) + " must be a positive finite number");
        r.attention_factor =
            optional_float(params, "attention_factor", longrope_default_attention_factor(factor, r.original_max_positions), source);
        return r;
    }
    if (type == "linear") {
        r.kind = RopeScalingKind::Linear;
        r.factor = optional_float(params, "factor", 1.0, source);
    } else if (type == "llama3") {
        r.kind = RopeScalingKind::Llama3;
        r.factor = optional_float(params, "factor", 8.0, source);
        r.low_freq_factor = optional_float(params, "low_freq_factor", 1.0, source);
        r.high_freq_factor = optional_float(params, "high_freq_factor", 4.0, source);
        r.original_max_positions = optional_int(params, "original_max_position_embeddings", max_positions, source);
        if (r.high_freq_factor <= r.low_freq_factor)
            fail(ErrorCode::Format, source, "llama3 rope scaling needs high_freq_factor > low_freq_factor");
    } else {
        fail(ErrorCode::Unsupported, source,
             "rope scaling kind '" + type + "' is not supported (Kev implements none, linear, llama3 and longrope)");
    }
    if (!(r.factor > 0.0)) fail(ErrorCode::Format, source, "rope scaling factor must be positive");
    return r;
}

// stat(), not an open: a FIFO named generation_config.json must not block here (reading
// it is refused by read_text_file).
bool file_exists(const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0;
}

// The name a ModelConfig field has in the file it came from, for messages.
std::string key_name(const ModelConfig& c, const std::string& hf) {
    if (c.gguf_arch.empty()) return hf;
    static const std::pair<const char*, const char*> kGguf[] = {
        {"hidden_size", "embedding_length"},
        {"num_hidden_layers", "block_count"},
        {"num_attention_heads", "attention.head_count"},
        {"num_key_value_heads", "attention.head_count_kv"},
        {"head_dim", "attention.key_length"},
        {"intermediate_size", "feed_forward_length"},
        {"vocab_size", "vocab_size"},
        {"max_position_embeddings", "context_length"},
        {"rms_norm_eps", "attention.layer_norm_rms_epsilon"},
        {"rope_theta", "rope.freq_base"},
        {"original_max_position_embeddings", "rope.scaling.original_context_length"},
        {"attention_factor", "rope.scaling.attn_factor"},
    };
    for (const auto& [h, g] : kGguf)
        if (hf == h) return c.gguf_arch + "." + g;
    if (hf == "bos_token_id" || hf == "eos_token_id") return "tokenizer.ggml." + hf;
    return hf;
}

// Without an explicit head_dim, it is hidden_size / num_attention_heads, which must divide.
std::int64_t derived_head_dim(const ModelConfig& c) {
    if (c.num_heads <= 0)
        fail(ErrorCode::Format, c.source, key_name(c, "num_attention_heads") + " " + std::to_string(c.num_heads) +
                                              " must be positive");
    if (c.hidden_size <= 0)
        fail(ErrorCode::Format, c.source, key_name(c, "hidden_size") + " " + std::to_string(c.hidden_size) +
                                              " must be positive");
    if (c.hidden_size % c.num_heads != 0)
        fail(ErrorCode::Format, c.source, key_name(c, "num_attention_heads") + " " + std::to_string(c.num_heads) +
                                              " does not divide " + key_name(c, "hidden_size") + " " +
                                              std::to_string(c.hidden_size) + " (and no " + key_name(c, "head_dim") +
                                              " is given)");
    return c.hidden_size / c.num_heads;
}

// layer_types (transformers >= 5): one entry per layer, "sliding_attention" or
// "full_attention", into c.windowed_layers. False when the key is absent or null.
bool read_layer_types(const json& j, ModelConfig& c, const std::string& source) {
    auto lt = j.find("layer_types");
    if (lt == j.end() || lt->is_null()) return false;
    // Clamped: an absurd layer count is reported by validate(), not allocated here.
    c.windowed_layers.assign(static_cast<std::size_t>(std::clamp<std::int64_t>(c.num_layers, 0, 1 << 10)), 0);
    if (!lt->is_array() || static_cast<std::int64_t>(lt->size()) != c.num_layers || lt->size() != c.windowed_layers.size())
        fail(ErrorCode::Format, source, "layer_types must list one type per layer (" + std::to_string(c.num_layers) + ")");
    for (std::size_t i = 0; i < lt->size(); ++i) {
        const json& t = (*lt)[i];
        if (t == "sliding_attention") c.windowed_layers[i] = 1;
        else if (t != "full_attention")
            fail(ErrorCode::Unsupported, source, "layer_types[" + std::to_string(i) + "] = " + t.dump() +
                                                     " is not supported (sliding_attention, full_attention)");
    }
    return true;
}

}  // namespace

const char* to_string(Arch arch) {
    switch (arch) {
        case Arch::Llama: return "llama";
        case Arch::Qwen2: return "qwen2";
        case Arch::Qwen3: return "qwen3";
        case Arch::Mistral: return "mistral";
        case Arch::Phi3: return "phi3";
        case Arch::Gemma2: return "gemma2";
        case Arch::Gemma3: return "gemma3";
    }
    return "?";
}

double longrope_default_attention_factor(double factor, std::int64_t original) {
    if (!(factor > 1.0) || original <= 1) return 1.0;
    return std::sqrt(1.0 + std::log(factor) / std::log(static_cast<double>(original)));
}

const char* to_string(RopeScalingKind kind) {
    switch (kind) {
        case RopeScalingKind::None: return "none";
        case RopeScalingKind::Linear: return "linear";
        case RopeScalingKind::Llama3: return "llama3";
        case RopeScalingKind::LongRope: return "longrope";
    }
    return "?";
}

std::int64_t ModelConfig::parameter_count() const {
    const std::int64_t attn = hidden_size * (q_size() + 2 * kv_size()) + q_size() * hidden_size;
    const std::int64_t mlp = 3 * hidden_size * intermediate_size;
    const std::int64_t norms = (gemma_norms ? 4 : 2) * hidden_size + (qk_norm ? 2 * head_dim : 0);
    const std::int64_t per_layer = attn + mlp + norms;
    const std::int64_t embed = vocab_size * hidden_size;
    return num_layers * per_layer + embed * (tie_word_embeddings ? 1 : 2) + hidden_size;
}

std::string ModelConfig::describe_features() const {
    std::string s = to_string(arch);
    auto add = [&](const std::string& f) { s += ", " + f; };
    if (sliding_window > 0) {
        std::int64_t n = num_layers;
        if (!windowed_layers.empty()) n = std::count(windowed_layers.begin(), windowed_layers.end(), std::uint8_t(1));
        add("sliding window " + std::to_string(sliding_window) + " on " +
            (n == num_layers ? std::string("every layer") : std::to_string(n) + " of " + std::to_string(num_layers) + " layers"));
    }
    if (rotary_dim > 0 && rotary_dim != head_dim)
        add("partial rotary (" + std::to_string(rotary_dim) + " of " + std::to_string(head_dim) + " dims a head)");
    if (rope_scaling.kind == RopeScalingKind::LongRope)
        add("LongRoPE (long factors from position " + std::to_string(rope_scaling.original_max_positions) +
            ", attention factor " + num(rope_scaling.attention_factor) + ")");
    if (rope_local_theta > 0.0) add("windowed layers' RoPE base " + num(rope_local_theta));
    if (attn_softcap > 0.0) add("attention soft-cap " + num(attn_softcap));
    if (final_softcap > 0.0) add("final logit soft-cap " + num(final_softcap));
    if (gemma_norms) add("(1 + w) RMSNorm before and after attention and MLP");
    if (activation == Activation::GeluTanh) add("GeGLU (gelu-tanh)");
    if (scale_embeddings) add("embeddings x sqrt(hidden)");
    if (query_scale > 0.0) add("query scale " + num(query_scale));
    if (qk_norm) add("q/k norm");
    if (qkv_bias) add("q/k/v bias");
    if (fused_qkv) add("fused qkv");
    if (tie_word_embeddings) add("tied head");
    return s;
}

void validate(const ModelConfig& c) {
    auto bad = [&](const std::string& what) { fail(ErrorCode::Format, c.source, what); };
    // Bounds well beyond any real model keep products below int64 overflow.
    auto in_range = [&](std::int64_t v, std::int64_t hi, const char* name) {
        const std::string key = key_name(c, name);
        if (v <= 0) bad(key + " " + std::to_string(v) + " must be positive");
        if (v > hi) bad(key + " " + std::to_string(v) + " is over the limit of " + std::to_string(hi));
    };
    in_range(c.hidden_size, 1 << 16, "hidden_size");
    in_range(c.num_layers, 1 << 10, "num_hidden_layers");
    in_range(c.num_heads, 1 << 10, "num_attention_heads");
    in_range(c.num_kv_heads, 1 << 10, "num_key_value_heads");
    in_range(c.head_dim, 1 << 12, "head_dim");
    in_range(c.intermediate_size, 1 << 18, "intermediate_size");
    in_range(c.vocab_size, 1 << 22, "vocab_size");
    in_range(c.max_positions, 1 << 24, "max_position_embeddings");
    if (c.num_heads % c.num_kv_heads != 0)
        bad(key_name(c, "num_key_value_heads") + " " + std::to_string(c.num_kv_heads) + " does not divide " +
            key_name(c, "num_attention_heads") + " " + std::to_string(c.num_heads) +
            " (each key/value head serves a whole number of query heads)");
    if (c.head_dim % 2 != 0) bad(key_name(c, "head_dim") + " " + std::to_string(c.head_dim) + " must be even for RoPE");
    if (c.rotary_dim < 0 || c.rotary_dim > c.head_dim || c.rotary_dim % 2 != 0)
        bad("the rotary size " + std::to_string(c.rotary_dim) + " (head_dim x partial_rotary_factor) must be even and in 2.." +
            std::to_string(c.head_dim));
    if (c.rope_scaling.kind == RopeScalingKind::LongRope) {
        const RopeScaling& r = c.rope_scaling;
        if (r.original_max_positions <= 1 || r.original_max_positions > (1 << 24))
            bad(key_name(c, "original_max_position_embeddings") + " " + std::to_string(r.original_max_positions) +
                " must be in 2..16777216");
        if (!std::isfinite(r.attention_factor) || !(r.attention_factor > 0.0))
            bad("longrope " + key_name(c, "attention_factor") + " " + num(r.attention_factor) + " must be a positive finite number");
        const std::size_t pairs = static_cast<std::size_t>(c.rope_dim() / 2);
        for (const auto& [list, name] : {std::pair{&c.rope_scaling.short_factor, "short_factor"}, {&c.rope_scaling.long_factor, "long_factor"}}) {
            if (list->size() != pairs)
                bad(std::string("longrope ") + name + " lists " + std::to_string(list->size()) + " factors, the rotary size " +
                    std::to_string(c.rope_dim()) + " needs " + std::to_string(pairs));
            for (double v : *list)
                if (!std::isfinite(v) || !(v > 0.0)) bad(std::string("longrope ") + name + " holds " + num(v) + ", not a positive finite number");
        }
    }
    if (!std::isfinite(c.rms_norm_eps) || !(c.rms_norm_eps > 0.0) || c.rms_norm_eps > 1.0)
        bad(key_name(c, "rms_norm_eps") + " " + num(c.rms_norm_eps) + " must be a finite number in (0, 1]");
    if (!std::isfinite(c.rope_theta) || !(c.rope_theta > 0.0))
        bad(key_name(c, "rope_theta") + " " + num(c.rope_theta) + " must be a positive finite number");
    if (!std::isfinite(c.rope_scaling.factor) || !(c.rope_scaling.factor > 0.0))
        bad("rope scaling factor " + num(c.rope_scaling.factor) + " must be a positive finite number");
    if (c.sliding_window < 0) bad("sliding_window " + std::to_string(c.sliding_window) + " must be positive or null");
    if (!c.windowed_layers.empty() && static_cast<std::int64_t>(c.windowed_layers.size()) != c.num_layers)
        bad("layer_types lists " + std::to_string(c.windowed_layers.size()) + " layers, the model has " +
            std::to_string(c.num_layers));
    for (const auto& [v, name] : {std::pair{c.query_scale, "query_pre_attn_scalar"}, {c.attn_softcap, "attn_logit_softcapping"},
                                  {c.final_softcap, "final_logit_softcapping"}, {c.rope_local_theta, "rope_local_base_freq"}})
        if (!std::isfinite(v) || v < 0.0) bad(std::string(name) + " " + num(v) + " must be a positive finite number or null");
    validate_token_ids(c, c.bos_token_ids, "bos_token_id", c.source);
    validate_token_ids(c, c.eos_token_ids, "eos_token_id", c.source);
}

void validate_token_ids(const ModelConfig& c, const std::vector<std::int64_t>& ids, const std::string& field,
                        const std::string& source) {
    for (std::int64_t id : ids) {
        if (id < 0 || id >= c.vocab_size)
            fail(ErrorCode::Format, source, key_name(c, field) + " " + std::to_string(id) +
                                                " is not a token id of this model (0.." +
                                                std::to_string(c.vocab_size - 1) + ")");
    }
}

void check_tokenizer_fits(const ModelConfig& c, std::int64_t tokenizer_vocab, const std::string& tokenizer_source) {
    if (tokenizer_vocab > c.vocab_size)
        fail(ErrorCode::Format, tokenizer_source,
             "the tokenizer has " + std::to_string(tokenizer_vocab) + " tokens but the model's embedding (" +
                 c.source + ", " + key_name(c, "vocab_size") + ") has only " + std::to_string(c.vocab_size) +
                 " rows: the tokenizer belongs to another model");
}

ModelConfig config_from_hf_json(const std::string& json_text, const std::string& source) {
    json j;
    try {
        j = json::parse(json_text);
    } catch (const json::exception& e) {
        fail(ErrorCode::Format, source, std::string("invalid JSON: ") + e.what());
    }
    if (!j.is_object()) fail(ErrorCode::Format, source, "not a JSON object");

    ModelConfig c;
    c.source = source;
    const std::string model_type = optional_string(j, "model_type", std::string(), source);
    if (model_type == "llama") c.arch = Arch::Llama;
    else if (model_type == "qwen2") c.arch = Arch::Qwen2;
    else if (model_type == "qwen3") c.arch = Arch::Qwen3;
    else if (model_type == "mistral") c.arch = Arch::Mistral;
    else if (model_type == "phi3") c.arch = Arch::Phi3;
    else if (model_type == "gemma2") c.arch = Arch::Gemma2;
    else if (model_type == "gemma3_text") c.arch = Arch::Gemma3;
    else if (model_type == "gemma3")
        fail(ErrorCode::Unsupported, source,
             "model_type 'gemma3' is Gemma 3's image-and-text checkpoint; Kev opens the text model (model_type "
             "gemma3_text, e.g. gemma-3-1b) or a GGUF of it");
    else fail(ErrorCode::Unsupported, source,
              "model_type '" + model_type + "' is not supported (llama, qwen2, qwen3, mistral, phi3, gemma2, gemma3_text)");
    const bool gemma = c.arch == Arch::Gemma2 || c.arch == Arch::Gemma3;

    c.hidden_size = require_int(j, "hidden_size", source);
    c.num_layers = require_int(j, "num_hidden_layers", source);
    c.num_heads = require_int(j, "num_attention_heads", source);
    c.num_kv_heads = optional_int(j, "num_key_value_heads", c.num_heads, source);
    c.head_dim = optional_int(j, "head_dim", 0, source);
    if (c.head_dim == 0) c.head_dim = derived_head_dim(c);
    c.intermediate_size = require_int(j, "intermediate_size", source);
    c.vocab_size = require_int(j, "vocab_size", source);
    c.max_positions = optional_int(j, "max_position_embeddings", 2048, source);
    c.rms_norm_eps = optional_float(j, "rms_norm_eps", 1e-6, source);
    c.tie_word_embeddings = optional_bool(j, "tie_word_embeddings", gemma, source);

    if (gemma) {
        // Gemma writes hidden_activation (older folders hidden_act, which it ignores when both are there).
        const std::string act = optional_string(j, "hidden_activation", optional_string(j, "hidden_act", "gelu_pytorch_tanh", source), source);
        if (act != "gelu_pytorch_tanh" && act != "gelu_tanh")
            fail(ErrorCode::Unsupported, source, "hidden_activation '" + act + "' is not supported (gelu_pytorch_tanh)");
        c.activation = Activation::GeluTanh;
        c.gemma_norms = c.scale_embeddings = true;
        c.qk_norm = c.arch == Arch::Gemma3;
        const double qpas = optional_float(j, "query_pre_attn_scalar", static_cast<double>(c.head_dim), source);
        if (!(qpas > 0.0) || !std::isfinite(qpas))
            fail(ErrorCode::Format, source, "query_pre_attn_scalar " + num(qpas) + " must be a positive number");
        c.query_scale = 1.0 / std::sqrt(qpas);
        c.attn_softcap = optional_float(j, "attn_logit_softcapping", 0.0, source);
        c.final_softcap = optional_float(j, "final_logit_softcapping", 0.0, source);
        if (optional_bool(j, "use_bidirectional_attention", false, source))
            fail(ErrorCode::Unsupported, source, "use_bidirectional_attention (an encoder Gemma) is not supported");
        c.sliding_window = optional_int(j, "sliding_window", 0, source);
        if (!read_layer_types(j, c, source)) {
            // Before layer_types: Gemma 2 alternates (layer 0 windowed); Gemma 3 has
            // sliding_window_pattern (6): every 6th layer global.
            c.windowed_layers.assign(static_cast<std::size_t>(std::clamp<std::int64_t>(c.num_layers, 0, 1 << 10)), 0);
            const std::int64_t pattern = c.arch == Arch::Gemma2 ? 2 : optional_int(j, "sliding_window_pattern", 6, source);
            if (pattern <= 0) fail(ErrorCode::Format, source, "sliding_window_pattern must be positive");
            for (std::size_t i = 0; i < c.windowed_layers.size(); ++i) c.windowed_layers[i] = (i + 1) % pattern != 0;
        }
    } else {
        const std::string act = optional_string(j, "hidden_act", "silu", source);
        if (act != "silu") fail(ErrorCode::Unsupported, source, "hidden_act '" + act + "' is not supported (silu)");
    }
    if (optional_bool(j, "mlp_bias", false, source))
        fail(ErrorCode::Unsupported, source, "mlp_bias is not supported");
    if (optional_bool(j, "use_sliding_window", false, source)) {
        // Qwen2 / Qwen3: the window on the layers from max_window_layers on (or as
        // layer_types says); other families have no such switch.
        if (c.arch != Arch::Qwen2 && c.arch != Arch::Qwen3)
            fail(ErrorCode::Unsupported, source, "use_sliding_window is not supported for " + model_type);
        c.sliding_window = optional_int(j, "sliding_window", 4096, source);
        if (c.sliding_window <= 0) fail(ErrorCode::Format, source, "sliding_window must be positive with use_sliding_window");
        if (!read_layer_types(j, c, source)) {
            const std::int64_t first = optional_int(j, "max_window_layers", 28, source);
            c.windowed_layers.assign(static_cast<std::size_t>(std::clamp<std::int64_t>(c.num_layers, 0, 1 << 10)), 0);
            for (std::size_t i = 0; i < c.windowed_layers.size(); ++i) c.windowed_layers[i] = static_cast<std::int64_t>(i) >= first;
        }
    }
    // Mistral's and Phi-3's window applies to every layer whenever it is set (Qwen2 writes
    // one but switches it off with use_sliding_window, above).
    if (c.arch == Arch::Mistral || c.arch == Arch::Phi3) {
        c.sliding_window = optional_int(j, "sliding_window", 0, source);
        if (c.sliding_window < 0) fail(ErrorCode::Format, source, "sliding_window must be positive or null");
    }
    if (optional_int(j, "pretraining_tp", 1, source) != 1)
        fail(ErrorCode::Unsupported, source, "pretraining_tp != 1 is not supported");

    const bool attention_bias = optional_bool(j, "attention_bias", false, source);
    switch (c.arch) {
        case Arch::Qwen2:  // Qwen2 always has q/k/v bias and never an o bias
            c.qkv_bias = true;
            break;
        case Arch::Qwen3:
            c.qk_norm = true;
            c.qkv_bias = c.o_bias = attention_bias;
            break;
        case Arch::Llama:
        case Arch::Mistral:
            c.qkv_bias = c.o_bias = attention_bias;
            break;
        case Arch::Phi3:
            c.qkv_bias = c.o_bias = attention_bias;
            c.fused_qkv = c.fused_gate_up = true;
            break;
        case Arch::Gemma2:
        case Arch::Gemma3:
            c.qkv_bias = c.o_bias = attention_bias;
            break;
    }
    // Phi-4-mini rotates only part of each head (transformers 5 writes the factor into
    // rope_parameters, older folders at the top): int(head_dim x factor) dims, as
    // transformers. Only Phi-3's attention slices the heads so.
    for (const char* key : {"rope_parameters", "rope_scaling", ""}) {
        const json& where = *key ? j.value(key, json()) : j;
        if (!where.is_object()) continue;
        const double f = optional_float(where, "partial_rotary_factor", 1.0, source);
        if (f == 1.0) continue;
        if (c.arch != Arch::Phi3)
            fail(ErrorCode::Unsupported, source, "partial rotary embeddings (partial_rotary_factor " + num(f) +
                                                     ") are supported for phi3 only, not " + model_type);
        if (!std::isfinite(f) || !(f > 0.0) || f > 1.0)
            fail(ErrorCode::Format, source, "partial_rotary_factor " + num(f) + " must be in (0, 1]");
        c.rotary_dim = static_cast<std::int64_t>(static_cast<double>(c.head_dim) * f);
        if (c.rotary_dim < 2)
            fail(ErrorCode::Format, source, "partial_rotary_factor " + num(f) + " turns " + std::to_string(c.rotary_dim) +
                                                " of head_dim " + std::to_string(c.head_dim) + " dims (RoPE needs at least 2)");
        if (c.rotary_dim == c.head_dim) c.rotary_dim = 0;
    }

    // RoPE: transformers >= 5 writes "rope_parameters" {rope_type, rope_theta, ...};
    // older folders have "rope_theta" and "rope_scaling" {type|rope_type, ...}.
    std::string rope_type;
    const json* rope_params = nullptr;
    c.rope_theta = optional_float(j, "rope_theta", 10000.0, source);
    // Where the (global layers') RoPE settings are: the top level and "rope_scaling", or
    // "rope_parameters"; Gemma 3 in transformers >= 5 keeps one entry per layer type there.
    std::vector<const json*> rope_sources;
    for (const char* key : {"rope_parameters", "rope_scaling"}) {
        auto it = j.find(key);
        if (it == j.end() || it->is_null()) continue;
        if (!it->is_object()) fail(ErrorCode::Format, source, std::string("key '") + key + "' is not an object");
        rope_sources.push_back(&*it);
    }
    if (c.arch == Arch::Gemma3) {
        c.rope_local_theta = optional_float(j, "rope_local_base_freq", 10000.0, source);
        for (const json*& where : rope_sources) {
            if (!where->contains("full_attention")) continue;
            const json& local = where->value("sliding_attention", json::object());
            if (!local.is_object()) fail(ErrorCode::Format, source, "rope_parameters.sliding_attention is not an object");
            c.rope_local_theta = optional_float(local, "rope_theta", c.rope_local_theta, source);
            if (const std::string t = optional_string(local, "rope_type", "default", source); t != "default")
                fail(ErrorCode::Unsupported, source, "rope scaling '" + t + "' on the windowed layers is not supported");
            where = &(*where)["full_attention"];
            if (!where->is_object()) fail(ErrorCode::Format, source, "rope_parameters.full_attention is not an object");
        }
    }
    for (const json* where : rope_sources) {
        rope_params = where;
        if (where->contains("rope_theta")) c.rope_theta = optional_float(*where, "rope_theta", c.rope_theta, source);
        std::string t = optional_string(*where, "rope_type", std::string(), source);
        if (t.empty()) t = optional_string(*where, "type", std::string(), source);
        if (!t.empty() && t != "default") rope_type = t;
    }
    // Phi-3's older names for LongRoPE (transformers maps them the same way).
    if (c.arch == Arch::Phi3 && (rope_type == "su" || rope_type == "yarn")) rope_type = "longrope";
    if (rope_type == "longrope" && c.arch != Arch::Phi3)
        fail(ErrorCode::Unsupported, source, "longrope is supported for phi3 only, not " + model_type);
    if (rope_params) c.rope_scaling = rope_scaling_from(rope_type, *rope_params, j, c.max_positions, source);

    c.bos_token_ids = token_ids(j, "bos_token_id", source);
    c.eos_token_ids = token_ids(j, "eos_token_id", source);
    validate(c);
    return c;
}

ModelConfig load_hf_config(const std::string& dir) {
    const std::string path = dir + "/config.json";
    ModelConfig c = config_from_hf_json(read_text_file(path), path);
    const std::string gen_path = dir + "/generation_config.json";
    if (file_exists(gen_path)) {
        json g;
        try {
            g = json::parse(read_text_file(gen_path));
        } catch (const json::exception& e) {
            fail(ErrorCode::Format, gen_path, std::string("invalid JSON: ") + e.what());
        }
        if (!g.is_object()) fail(ErrorCode::Format, gen_path, "not a JSON object");
        auto bos = token_ids(g, "bos_token_id", gen_path);
        auto eos = token_ids(g, "eos_token_id", gen_path);
        validate_token_ids(c, bos, "bos_token_id", gen_path);
        validate_token_ids(c, eos, "eos_token_id", gen_path);
        if (!bos.empty()) c.bos_token_ids = bos;
        if (!eos.empty()) c.eos_token_ids = eos;
    }
    return c;
}

ModelConfig config_from_gguf(const GgufFile& g) {
    const std::string& source = g.path();
    ModelConfig c;
    c.source = source;
    const std::string arch = g.get_string("general.architecture").value_or("");
    c.gguf_arch = arch;
    if (arch == "llama") c.arch = Arch::Llama;
    else if (arch == "qwen2") c.arch = Arch::Qwen2;
    else if (arch == "qwen3") c.arch = Arch::Qwen3;
    else if (arch == "phi3") c.arch = Arch::Phi3;
    else if (arch == "gemma2") c.arch = Arch::Gemma2;
    else if (arch == "gemma3") c.arch = Arch::Gemma3;
    else fail(ErrorCode::Unsupported, source,
              "general.architecture '" + arch + "' is not supported (llama, qwen2, qwen3, phi3, gemma2, gemma3)");

    auto need = [&](const std::string& key) {
        auto v = g.get_int(arch + "." + key);
        if (!v) fail(ErrorCode::Format, source, "missing metadata key '" + arch + "." + key + "'");
        return *v;
    };
    c.hidden_size = need("embedding_length");
    c.num_layers = need("block_count");
    c.intermediate_size = need("feed_forward_length");
    c.num_heads = need("attention.head_count");
    c.num_kv_heads = g.get_int(arch + ".attention.head_count_kv").value_or(c.num_heads);
    c.max_positions = need("context_length");
    if (auto kl = g.get_int(arch + ".attention.key_length")) c.head_dim = *kl;
    else c.head_dim = derived_head_dim(c);
    c.rms_norm_eps = g.get_float(arch + ".attention.layer_norm_rms_epsilon").value_or(1e-6);
    c.rope_theta = g.get_float(arch + ".rope.freq_base").value_or(10000.0);
    if (auto v = g.get_int(arch + ".vocab_size")) {
        c.vocab_size = *v;
    } else if (const GgufTensorInfo* t = g.find_tensor("token_embd.weight"); t && t->dims.size() == 2) {
        c.vocab_size = t->dims[1];
    } else {
        fail(ErrorCode::Format, source, "cannot tell the vocabulary size (no " + arch + ".vocab_size, no token_embd.weight)");
    }
    if (auto rd = g.get_int(arch + ".rope.dimension_count"); rd && *rd != c.head_dim) {
        if (*rd <= 0 || *rd > c.head_dim || *rd % 2 != 0)
            fail(ErrorCode::Format, source, arch + ".rope.dimension_count " + std::to_string(*rd) +
                                                " must be even and in 2.." + std::to_string(c.head_dim) + " (the head size)");
        if (c.arch != Arch::Phi3)  // Phi-4-mini turns part of each head; llama.cpp's other families here turn all
            fail(ErrorCode::Unsupported, source, "partial rotary embeddings (" + arch + ".rope.dimension_count " +
                                                     std::to_string(*rd) + " < head size " + std::to_string(c.head_dim) +
                                                     ") are supported for phi3 only");
        c.rotary_dim = *rd;
    }

    const std::string scaling = g.get_string(arch + ".rope.scaling.type").value_or("none");
    if (scaling == "linear") {
        c.rope_scaling.kind = RopeScalingKind::Linear;
        c.rope_scaling.factor = g.get_float(arch + ".rope.scaling.factor").value_or(1.0);
    } else if (scaling != "none") {
        fail(ErrorCode::Unsupported, source, "rope scaling kind '" + scaling + "' is not supported (none, linear)");
    }
    // llama3-style scaling arrives in GGUF as a rope_freqs.weight tensor of per-frequency
    // divisors; the loader applies it (see weights.cpp), the config stays "none". Phi-3's
    // LongRoPE factors are tensors too: load_weights reads them into the config.

    c.tie_word_embeddings = g.find_tensor("output.weight") == nullptr;
    c.qkv_bias = g.find_tensor("blk.0.attn_q.bias") != nullptr;
    c.o_bias = g.find_tensor("blk.0.attn_output.bias") != nullptr;
    c.qk_norm = g.find_tensor("blk.0.attn_q_norm.weight") != nullptr;
    c.fused_qkv = c.fused_gate_up = c.arch == Arch::Phi3;  // attn_qkv; ffn_up holds gate | up
    if (auto w = g.get_int(arch + ".attention.sliding_window"); w && *w > 0) c.sliding_window = *w;
    if (c.arch == Arch::Gemma2 || c.arch == Arch::Gemma3) {
        // llama.cpp's reading of these files: norms stored as 1 + weight already (the
        // loader keeps them), windowed layers by a fixed pattern (Gemma 2: every other
        // layer from layer 0; Gemma 3: five of six) unless the file gives one, the windowed
        // layers' RoPE base 10000, and queries scaled by the head size (by hidden / heads for
        // the 27B models, told apart by their layer count).
        c.gemma_norms = c.scale_embeddings = true;
        c.activation = Activation::GeluTanh;
        c.attn_softcap = g.get_float(arch + ".attn_logit_softcapping").value_or(0.0);
        c.final_softcap = g.get_float(arch + ".final_logit_softcapping").value_or(0.0);
        const bool big = c.num_layers == (c.arch == Arch::Gemma2 ? 46 : 62);
        c.query_scale = 1.0 / std::sqrt(static_cast<double>(big ? c.hidden_size / c.num_heads : c.head_dim));
        const std::string pattern_key = arch + ".attention.sliding_window_pattern";
        const std::size_t layers = static_cast<std::size_t>(std::clamp<std::int64_t>(c.num_layers, 0, 1 << 10));
        const GgufValue* pv = g.find(pattern_key);
        if (pv && pv->type == GgufValueType::Array) {
            // One flag per layer (true: windowed), as newer converters may write it.
            const std::vector<std::int64_t> flags = g.get_ints(pattern_key).value_or(std::vector<std::int64_t>{});
            if (static_cast<std::int64_t>(flags.size()) != c.num_layers)
                fail(ErrorCode::Format, source, pattern_key + " lists " + std::to_string(flags.size()) +
                                                    " layers, the model has " + std::to_string(c.num_layers));
            c.windowed_layers.assign(flags.begin(), flags.end());
            for (auto& f : c.windowed_layers) f = f != 0;
        } else {
            const std::int64_t pattern = g.get_int(pattern_key).value_or(c.arch == Arch::Gemma2 ? 2 : 6);
            if (pattern <= 0 || pattern > (1 << 11))
                fail(ErrorCode::Format, source, pattern_key + " " + std::to_string(pattern) + " must be in 1..2048");
            c.windowed_layers.assign(layers, 0);
            for (std::size_t i = 0; i < layers; ++i) c.windowed_layers[i] = static_cast<std::int64_t>(i) % pattern < pattern - 1;
        }
        if (c.arch == Arch::Gemma3) c.rope_local_theta = g.get_float(arch + ".rope.freq_base_swa").value_or(10000.0);
    }
    if (auto v = g.get_int("tokenizer.ggml.bos_token_id")) c.bos_token_ids = {*v};
    if (auto v = g.get_int("tokenizer.ggml.eos_token_id")) c.eos_token_ids = {*v};
    validate(c);
    return c;
}

}  // namespace kev
