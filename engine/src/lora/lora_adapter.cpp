// Loading a PEFT adapter folder and checking it against a loaded model.
#include <filesystem>
#include <map>
#include <set>

#include <ATen/ATen.h>

#include "kev/error.h"
#include "kev/lora.h"
#include "kev/model.h"
#include "kev/safetensors.h"
#include "lora/target_pattern.h"
#include "model/torch_util.h"
#include "text_file.h"

namespace kev {

namespace fs = std::filesystem;

namespace {

// The Linear modules of a Kev decoder layer under their Hugging Face names, and where
// each lands in Kev's (fused) layout.
enum class Fused { Qkv, O, GateUp, Down };
struct ModuleKind {
    const char* name;  // e.g. "self_attn.q_proj"
    Fused into;
};
constexpr ModuleKind kKinds[] = {
    {"self_attn.q_proj", Fused::Qkv},   {"self_attn.k_proj", Fused::Qkv},  {"self_attn.v_proj", Fused::Qkv},
    {"self_attn.o_proj", Fused::O},     {"mlp.gate_proj", Fused::GateUp},  {"mlp.up_proj", Fused::GateUp},
    {"mlp.down_proj", Fused::Down},
};
constexpr const char* kKeyPrefix = "base_model.model.";

std::string shape_string(const std::vector<std::int64_t>& s) {
    std::string out = "[";
    for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
    return out + "]";
}

// One targeted module: its [out, in] shape and the rows it owns in the fused Linear.
struct Target {
    std::string module;  // "model.layers.3.self_attn.k_proj"
    std::int64_t layer = 0;
    Fused into = Fused::Qkv;
    std::int64_t out = 0, in = 0, row_offset = 0;
};

// PEFT's rule: a list entry matches a module named exactly so or ending in "." + entry;
// a string is a regular expression that must match the whole name.
bool matches(const LoraConfig& c, const std::string& module, const TargetPattern* re) {
    if (re) return re->full_match(module);
    for (const std::string& t : c.target_list) {
        if (module == t) return true;
        if (module.size() > t.size() && module.compare(module.size() - t.size(), t.size(), t) == 0 &&
            module[module.size() - t.size() - 1] == '.')
            return true;
    }
    return false;
}

at::Tensor read_f32(const SafetensorsFile& f, const SafetensorsTensor& t) {
    at::ScalarType st = at::kFloat;
    if (t.dtype == SafetensorsDType::F16) st = at::kHalf;
    if (t.dtype == SafetensorsDType::BF16) st = at::kBFloat16;
    return at::from_blob(const_cast<std::uint8_t*>(f.data(t)), t.shape, at::TensorOptions().dtype(st))
        .to(at::kFloat, /*non_blocking=*/false, /*copy=*/true);
}

}  // namespace

std::int64_t LoraAdapter::bytes() const {
    std::int64_t n = 0;
    for (const Layer& l : layers)
        for (const auto* f : {l.qkv.get(), l.o.get(), l.gate_up.get(), l.down.get()})
            if (f) n += static_cast<std::int64_t>(f->a.nbytes() + f->b.nbytes());
    return n;
}

std::shared_ptr<const LoraAdapter> load_lora_adapter(const std::string& dir, const Model& model) {
    const std::string config_path = (fs::path(dir) / "adapter_config.json").string();
    const std::string weights_path = (fs::path(dir) / "adapter_model.safetensors").string();
    if (!fs::is_directory(dir)) throw Error(ErrorCode::Io, dir + ": not an adapter folder (no such folder)");
    if (!fs::exists(config_path)) throw Error(ErrorCode::Io, dir + ": no adapter_config.json (not a PEFT adapter folder)");
    if (!fs::exists(weights_path)) {
        if (fs::exists(fs::path(dir) / "adapter_model.bin"))
            throw Error(ErrorCode::Refused, dir + ": adapter_model.bin is a pickle file, which Kev does not load; "
                                                  "save the adapter with safe_serialization=True");
        throw Error(ErrorCode::Io, dir + ": no adapter_model.safetensors");
    }
    auto adapter = std::make_shared<LoraAdapter>();
    adapter->path = dir;
    adapter->config = parse_lora_config(read_text_file(config_path), config_path);
    const LoraConfig& cfg = adapter->config;
    const ModelConfig& mc = model.config();
    const std::string where = "adapter " + dir;

    // --- which modules: every target must name something this model has ---
    std::unique_ptr<TargetPattern> re;
    if (!cfg.target_regex.empty()) re = std::make_unique<TargetPattern>(cfg.target_regex, config_path);
    const std::int64_t hidden = mc.hidden_size, I = mc.intermediate_size, qs = mc.q_size(), kvs = mc.kv_size();
    for (const char* other : {"lm_head", "model.embed_tokens"}) {
        if (matches(cfg, other, re.get()))
            throw Error(ErrorCode::Unsupported, where + ": LoRA on " + std::string(other) + " is not supported by Kev");
    }
    std::vector<Target> targets;
    std::set<std::string> used_entries;
    for (std::int64_t l = 0; l < mc.num_layers; ++l) {
        for (const ModuleKind& k : kKinds) {
            const std::string module = "model.layers." + std::to_string(l) + "." + k.name;
            if (!matches(cfg, module, re.get())) continue;
            Target t{module, l, k.into, 0, 0, 0};
            const std::string kind = k.name;
            if (kind == "self_attn.q_proj") t.out = qs, t.in = hidden, t.row_offset = 0;
            else if (kind == "self_attn.k_proj") t.out = kvs, t.in = hidden, t.row_offset = qs;
            else if (kind == "self_attn.v_proj") t.out = kvs, t.in = hidden, t.row_offset = qs + kvs;
            else if (kind == "self_attn.o_proj") t.out = hidden, t.in = qs;
            else if (kind == "mlp.gate_proj") t.out = I, t.in = hidden, t.row_offset = 0;
            else if (kind == "mlp.up_proj") t.out = I, t.in = hidden, t.row_offset = I;
            else t.out = hidden, t.in = I;
            targets.push_back(t);
            for (const std::string& e : cfg.target_list)
                if (matches(LoraConfig{0, 0, false, {e}, "", ""}, module, nullptr)) used_entries.insert(e);
        }
    }
    for (const std::string& e : cfg.target_list) {
        if (!used_entries.count(e))
            throw Error(ErrorCode::Format, where + ": target module \"" + e +
                                                        "\" does not exist in this model (it has q_proj, k_proj, v_proj, "
                                                        "o_proj, gate_proj, up_proj, down_proj in " +
                                                        std::to_string(mc.num_layers) + " layers)");
    }
    if (targets.empty())
        throw Error(ErrorCode::Format, where + ": target_modules \"" + cfg.target_regex + "\" matches no module of this model");

    // --- the tensors: exactly lora_A and lora_B of every target, in the right shapes ---
    const auto file = SafetensorsFile::open(weights_path);
    std::set<std::string> expected;
    struct Pair {
        at::Tensor a, b;  // fp32 CPU [r, in], [out, r]
    };
    std::vector<Pair> pairs;
    for (const Target& t : targets) {
        Pair p;
        for (const char* which : {"lora_A", "lora_B"}) {
            const std::string key = kKeyPrefix + t.module + "." + which + ".weight";
            expected.insert(key);
            const SafetensorsTensor* st = file->find(key);
            if (!st) throw Error(ErrorCode::Format, weights_path + ": tensor " + key + " is missing (the config targets " + t.module + ")");
            const bool is_a = which[5] == 'A';
            const std::vector<std::int64_t> want = is_a ? std::vector<std::int64_t>{cfg.rank, t.in}
                                                        : std::vector<std::int64_t>{t.out, cfg.rank};
            if (st->shape != want) {
                const bool rank_differs = st->shape.size() == 2 && st->shape[is_a ? 0 : 1] != cfg.rank;
                throw Error(ErrorCode::Format,
                            where + ": " + t.module + "." + which + " is " + shape_string(st->shape) + " but " +
                                (rank_differs ? "the config's rank r = " + std::to_string(cfg.rank) + " and "
                                              : std::string()) +
                                "this model's " + t.module + " is [" + std::to_string(t.out) + ", " +
                                std::to_string(t.in) + "], so it must be " + shape_string(want) +
                                (rank_differs ? "" : ": the adapter was made for another model") +
                                (cfg.base_model.empty() ? "" : " (adapter base: " + cfg.base_model + ")"));
            }
            (is_a ? p.a : p.b) = read_f32(*file, *st);
            if (!at::isfinite(is_a ? p.a : p.b).all().item<bool>())
                throw Error(ErrorCode::Format, weights_path + ": tensor " + key + " holds NaN or infinite values");
        }
        pairs.push_back(std::move(p));
    }
    const std::string layers_prefix = std::string(kKeyPrefix) + "model.layers.";
    for (const auto& [name, st] : file->tensors()) {
        if (expected.count(name)) continue;
        if (name.compare(0, layers_prefix.size(), layers_prefix) == 0) {
            const std::string rest = name.substr(layers_prefix.size());
            const std::size_t dot = rest.find('.');
            if (dot != std::string::npos && dot > 0 && dot < 7 &&
                rest.find_first_not_of("0123456789") == dot && std::stoll(rest.substr(0, dot)) >= mc.num_layers)
                throw Error(ErrorCode::Format, where + ": tensor " + name + " is for layer " + rest.substr(0, dot) +
                                                            " but this model has " + std::to_string(mc.num_layers) +
                                                            " layers: the adapter was made for another model");
        }
        if (!expected.count(name))
            throw Error(ErrorCode::Unsupported, weights_path + ": tensor " + name +
                                                    " is not a LoRA factor of a targeted module (modules_to_save, DoRA "
                                                    "magnitudes, embeddings and biases are not supported)");
    }

    // --- fuse onto Kev's Linears: stack A, place each B in its rows and rank columns ---
    const at::TensorOptions work = tensor_options(model.device(), model.dtype());
    const at::TensorOptions f32 = at::TensorOptions().dtype(at::kFloat).device(torch_device(model.device()));
    adapter->layers.resize(static_cast<std::size_t>(mc.num_layers));
    for (std::int64_t l = 0; l < mc.num_layers; ++l) {
        for (Fused into : {Fused::Qkv, Fused::O, Fused::GateUp, Fused::Down}) {
            std::vector<std::size_t> idx;
            for (std::size_t i = 0; i < targets.size(); ++i)
                if (targets[i].layer == l && targets[i].into == into) idx.push_back(i);
            if (idx.empty()) continue;
            const std::int64_t out = into == Fused::Qkv ? qs + 2 * kvs : into == Fused::GateUp ? 2 * I : hidden;
            const std::int64_t R = cfg.rank * static_cast<std::int64_t>(idx.size());
            at::Tensor b = at::zeros({out, R}, at::kFloat);  // [out, R]
            std::vector<at::Tensor> as;
            for (std::size_t j = 0; j < idx.size(); ++j) {
                const Target& t = targets[idx[j]];
                as.push_back(pairs[idx[j]].a);
                b.narrow(0, t.row_offset, t.out).narrow(1, static_cast<std::int64_t>(j) * cfg.rank, cfg.rank).copy_(pairs[idx[j]].b);
                adapter->modules.push_back(t.module);
            }
            auto f = std::make_shared<LoraFactors>();
            f->a_f32 = at::cat(as, 0).to(f32).contiguous();  // [R, in]
            f->b_f32 = b.to(f32).contiguous();
            f->a = model.dtype() == DType::F32 ? f->a_f32 : f->a_f32.to(work).contiguous();
            f->b = model.dtype() == DType::F32 ? f->b_f32 : f->b_f32.to(work).contiguous();
            LoraAdapter::Layer& layer = adapter->layers[static_cast<std::size_t>(l)];
            (into == Fused::Qkv ? layer.qkv : into == Fused::O ? layer.o : into == Fused::GateUp ? layer.gate_up : layer.down) = f;
        }
    }
    return adapter;
}

}  // namespace kev
