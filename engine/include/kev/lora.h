// LoRA adapters in Hugging Face PEFT format (adapter_config.json +
// adapter_model.safetensors), applied to a loaded Model in one of two ways:
//
//   merged    W' = W + s * B A for every target, computed in fp32 and cast to the
//             working dtype; the original W is kept, so turning the adapter off puts
//             the very same tensor back (nothing is subtracted). One adapter at one
//             scale for every row of every forward; as fast as the base model.
//   per row   y = x W^T + s_r * (x A^T) B^T beside the base projection, with s_r the
//             row's own scale (0 = off): one pack holds LoRA-on and LoRA-off cards.
//             The only way for 4-bit base weights (their dense W does not exist).
//
// s = m * alpha / r (alpha / sqrt(r) with use_rslora), m the user's multiplier in
// [0, kMaxLoraScale].
//
// Kev fuses q/k/v into one qkv Linear and gate/up into one gate_up Linear; an adapter's
// q_proj, k_proj and v_proj factors become one factor pair on the fused layer:
//
//   A = [A_q; A_k; A_v]           [3r, hidden]  (only the targeted ones)
//   B = | B_q  0    0   |  q rows
//       | 0    B_k  0   |  k rows  [q + 2 kv, 3r]
//       | 0    0    B_v |  v rows
//
// so (x A^T) B^T is exactly each module's own update on its own slice of rows.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace kev {

class Model;

// The user's multiplier of alpha/r is in [0, kMaxLoraScale].
constexpr float kMaxLoraScale = 2.0f;

// What adapter_config.json says, restricted to what Kev applies. Everything else PEFT
// can write (modules_to_save, DoRA, bias other than "none", rank/alpha patterns,
// layers_to_transform, ...) is refused by name when it is set to anything but its default.
struct LoraConfig {
    std::int64_t rank = 0;        // r
    double alpha = 0.0;           // lora_alpha
    bool use_rslora = false;      // scaling alpha / sqrt(r) instead of alpha / r
    std::vector<std::string> target_list;  // suffix match on module names (as PEFT)
    std::string target_regex;     // or one regular expression, full match (empty: the list)
    std::string base_model;       // base_model_name_or_path, for messages only
    double scaling() const;       // alpha / r, or alpha / sqrt(r)
};

// Parses adapter_config.json text; `source` names the file in messages. Throws
// kev::Error: Format (bad JSON, a key of the wrong type), Unsupported (naming the option).
LoraConfig parse_lora_config(const std::string& json_text, const std::string& source);

// One low-rank update of a Kev Linear (a fused one included, see above).
struct LoraFactors {
    at::Tensor a;      // [R, in] working dtype and device
    at::Tensor b;      // [out, R] working dtype and device (zeros outside each module's block)
    at::Tensor a_f32;  // the same in fp32, for merging (the same tensors as a/b in fp32 models)
    at::Tensor b_f32;
};

struct LoraAdapter {
    std::string path;   // the adapter folder
    LoraConfig config;
    std::vector<std::string> modules;  // PEFT module names it changes, in load order
    struct Layer {      // null where the adapter leaves a layer's Linear alone
        std::shared_ptr<const LoraFactors> qkv, o, gate_up, down;
    };
    std::vector<Layer> layers;  // one per model layer
    std::int64_t bytes() const;
};

// Reads an adapter folder and checks it against `model`: every target module exists,
// every tensor has the shape the model's layer needs, no tensor is left over. Factors
// are converted to the model's device and dtype. The model is not changed (attach it
// with Model::attach_lora). Throws kev::Error: Io (missing files), Format (malformed
// files; a mismatch with the model, naming the module and both shapes; a target pattern
// too long, too deeply nested or too expensive to match; lora_alpha not positive and
// finite, or alpha/r over 65504; NaN/Inf in a factor), Unsupported (an option Kev does
// not apply, by name).
std::shared_ptr<const LoraAdapter> load_lora_adapter(const std::string& dir, const Model& model);

// How a run applies the adapter (chosen by the Generator, shown to the user).
enum class LoraMode {
    Off,      // no card wants it: base weights
    Merged,   // every card wants it at the same scale: merged into the weights
    PerCard,  // a mix, or 4-bit weights: the low-rank path per row
};
const char* to_string(LoraMode mode);  // "off", "merged", "per card"

// One card's choice.
struct LoraUse {
    bool enabled = false;
    float scale = 1.0f;  // multiplier of alpha/r in [0, kMaxLoraScale]
    bool operator==(const LoraUse& o) const { return enabled == o.enabled && (!enabled || scale == o.scale); }
    bool operator!=(const LoraUse& o) const { return !(*this == o); }
    // Throws InvalidArgument when the scale is outside [0, kMaxLoraScale] or not finite.
    void validate() const;
};

}  // namespace kev
