// config.json (Hugging Face): every field the model config reads and checks.
#include <cstdint>
#include <string>

#include "fuzz_common.h"
#include "kev/config.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    try {
        const kev::ModelConfig c = kev::config_from_hf_json(text, "config.json");
        (void)c.parameter_count();
        (void)c.q_size();
        (void)c.kv_size();
    } catch (const kev::Error& e) {
        kevfuzz::file_error(e, "config_from_hf_json");
    }
    return 0;
}
