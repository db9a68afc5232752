// adapter_config.json (PEFT): rank, alpha, target_modules (list or regular expression,
// the regex compiled by PCRE2 with limits), the refused options. A regex config is then
// matched against the module names a Llama/Qwen model has.
#include <cstdint>
#include <string>

#include "fuzz_common.h"
#include "kev/lora.h"
#include "lora/target_pattern.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    try {
        const kev::LoraConfig c = kev::parse_lora_config(text, "adapter_config.json");
        (void)c.scaling();
        if (!c.target_regex.empty()) {
            const kev::TargetPattern p(c.target_regex, "adapter_config.json");
            for (const char* name : {"model.layers.0.self_attn.q_proj", "model.layers.11.mlp.down_proj",
                                     "base_model.model.model.layers.3.self_attn.o_proj", "lm_head"})
                (void)p.full_match(name);
        }
    } catch (const kev::Error& e) {
        kevfuzz::file_error(e, "parse_lora_config");
    }
    return 0;
}
