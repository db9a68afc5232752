// adapter_config.json: what Kev applies, and a refusal by name for everything else.
#include <cmath>
#include <sstream>
#include <set>

#include <nlohmann/json.hpp>

#include "kev/error.h"
#include "kev/lora.h"
#include "lora/target_pattern.h"

namespace kev {

using nlohmann::json;

namespace {

// Keys that do not change what a trained adapter computes at inference: training
// settings and bookkeeping. Read and ignored.
const std::set<std::string> kIgnoredKeys = {
    "task_type", "auto_mapping", "peft_version", "revision", "inference_mode", "lora_dropout",
    "megatron_core", "qalora_group_size", "base_model_name_or_path",
};

// Keys Kev reads itself.
const std::set<std::string> kReadKeys = {"peft_type", "r", "lora_alpha", "use_rslora", "target_modules",
                                         "fan_in_fan_out", "bias", "init_lora_weights"};

// PEFT writes every option it knows, most at a default that changes nothing: null,
// false, "", {} or []. Anything else in an option Kev does not implement is refused.
bool is_default(const json& v) {
    return v.is_null() || (v.is_boolean() && !v.get<bool>()) || (v.is_string() && v.get<std::string>().empty()) ||
           ((v.is_object() || v.is_array()) && v.empty());
}

[[noreturn]] void unsupported(const std::string& source, const std::string& what) {
    throw Error(ErrorCode::Unsupported, source + ": " + what + " is not supported by Kev");
}

// s = alpha / r (or / sqrt(r)) multiplies B A into weights of every working dtype; past
// fp16's largest value any unit-sized update overflows, and no trained adapter comes
// near it (alpha is usually r or 2r).
constexpr double kMaxLoraScaling = 65504.0;

void check_alpha(const LoraConfig& c, const std::string& source) {
    std::ostringstream a;
    a << c.alpha;
    if (!std::isfinite(c.alpha)) throw Error(ErrorCode::Format, source + ": lora_alpha " + a.str() + " is not finite");
    if (!(c.alpha > 0.0))
        throw Error(ErrorCode::Format, source + ": lora_alpha " + a.str() + " must be positive (it scales the update)");
    const double s = c.scaling();
    if (!std::isfinite(s) || s > kMaxLoraScaling) {
        std::ostringstream v;
        v << s;
        throw Error(ErrorCode::Format, source + ": lora_alpha " + a.str() + " with r = " + std::to_string(c.rank) +
                                           " gives the scale alpha/" + (c.use_rslora ? "sqrt(r)" : "r") + " = " +
                                           v.str() + ", over the limit of 65504 (the update would overflow)");
    }
}

}  // namespace

double LoraConfig::scaling() const {
    return use_rslora ? alpha / std::sqrt(static_cast<double>(rank)) : alpha / static_cast<double>(rank);
}

const char* to_string(LoraMode mode) {
    switch (mode) {
        case LoraMode::Off: return "off";
        case LoraMode::Merged: return "merged";
        case LoraMode::PerCard: return "per card";
    }
    return "?";
}

void LoraUse::validate() const {
    if (!std::isfinite(scale) || scale < 0.0f || scale > kMaxLoraScale) {
        throw Error(ErrorCode::InvalidArgument, "LoRA scale " + std::to_string(scale) + " is outside 0-" +
                                                    std::to_string(static_cast<int>(kMaxLoraScale)) + " (x alpha/r)");
    }
}

LoraConfig parse_lora_config(const std::string& json_text, const std::string& source) {
    json j;
    try {
        j = json::parse(json_text);
    } catch (const json::exception& e) {  // parse_error, and out_of_range for numbers like 1e400
        throw Error(ErrorCode::Format, source + ": not valid JSON (" + e.what() + ")");
    }
    if (!j.is_object()) throw Error(ErrorCode::Format, source + ": expected a JSON object");

    for (const auto& [key, v] : j.items()) {
        if (kIgnoredKeys.count(key) || kReadKeys.count(key)) continue;
        if (!is_default(v)) unsupported(source, "option \"" + key + "\" (set to " + v.dump() + ")");
    }
    LoraConfig c;
    try {
        const std::string type = j.value("peft_type", std::string("LORA"));
        if (type != "LORA") unsupported(source, "adapter type \"" + type + "\" (only LORA)");
        if (!j.contains("r") || !j["r"].is_number_integer()) throw Error(ErrorCode::Format, source + ": \"r\" must be a whole number");
        c.rank = j["r"].get<std::int64_t>();
        if (c.rank <= 0 || c.rank > 65536) throw Error(ErrorCode::Format, source + ": r = " + std::to_string(c.rank) + " is not a usable rank");
        if (!j.contains("lora_alpha") || !j["lora_alpha"].is_number()) throw Error(ErrorCode::Format, source + ": \"lora_alpha\" must be a number");
        c.alpha = j["lora_alpha"].get<double>();
        c.use_rslora = j.value("use_rslora", false);
        check_alpha(c, source);
        const std::string bias = j.value("bias", std::string("none"));
        if (bias != "none") unsupported(source, "bias \"" + bias + "\" (only \"none\")");
        // fan_in_fan_out describes GPT-2 style Conv1D weights; every module Kev targets is a
        // plain Linear, for which PEFT itself turns the flag off. Accepted and ignored.
        (void)j.value("fan_in_fan_out", false);
        // Initialisations that rewrite the base weights (PiSSA, OLoRA, ...) need that
        // rewritten base, which the adapter does not carry.
        if (j.contains("init_lora_weights") && j["init_lora_weights"].is_string() &&
            j["init_lora_weights"].get<std::string>() != "gaussian") {
            unsupported(source, "init_lora_weights \"" + j["init_lora_weights"].get<std::string>() +
                                    "\" (it changes the base weights)");
        }
        if (!j.contains("target_modules") || j["target_modules"].is_null())
            throw Error(ErrorCode::Format, source + ": \"target_modules\" is missing");
        const json& t = j["target_modules"];
        if (t.is_string()) {
            c.target_regex = t.get<std::string>();
            if (c.target_regex.empty()) throw Error(ErrorCode::Format, source + ": target_modules is empty");
            if (c.target_regex == "all-linear") unsupported(source, "target_modules \"all-linear\" (list the modules)");
            TargetPattern check(c.target_regex, source);  // too long, too deeply nested, invalid: refused here
        } else if (t.is_array()) {
            c.target_list = t.get<std::vector<std::string>>();
            if (c.target_list.empty()) throw Error(ErrorCode::Format, source + ": target_modules is empty");
        } else {
            throw Error(ErrorCode::Format, source + ": target_modules must be a list or a string");
        }
        if (j.contains("base_model_name_or_path") && j["base_model_name_or_path"].is_string())
            c.base_model = j["base_model_name_or_path"].get<std::string>();
    } catch (const json::exception& e) {
        throw Error(ErrorCode::Format, source + ": a key has the wrong type (" + e.what() + ")");
    }
    return c;
}

}  // namespace kev
