// GGUF: header, metadata key/values, tensor infos and offsets, then what the loaders read
// from the metadata (the model config and the GGUF tokenizer) and a dequantization of
// every small tensor (reads exactly the bytes the tensor info promises).
#include <cstdint>
#include <vector>

#include "fuzz_common.h"
#include "fuzz_util.h"
#include "kev/config.h"
#include "kev/gguf.h"
#include "kev/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string path = kevfuzz::write_file("model.gguf", data, size);
    std::unique_ptr<kev::GgufFile> gguf;
    try {
        gguf = kev::GgufFile::open(path);
    } catch (const kev::Error& e) {
        kevfuzz::file_error(e, "GgufFile::open");
        return 0;
    }
    // Every getter on every key: a value of another type is a documented kev::Error.
    const auto get = [](auto&& f) {
        try {
            (void)f();
        } catch (const kev::Error& e) {
            kevfuzz::file_error(e, "GgufFile getter");
        }
    };
    for (const auto& [key, value] : gguf->metadata()) {
        (void)value;
        const std::string& k = key;
        get([&] { return gguf->get_int(k); });
        get([&] { return gguf->get_float(k); });
        get([&] { return gguf->get_bool(k); });
        get([&] { return gguf->get_string(k); });
        get([&] { return gguf->get_strings(k); });
        get([&] { return gguf->get_ints(k); });
        get([&] { return gguf->get_floats(k); });
    }
    std::vector<float> out;
    for (const auto& t : gguf->tensors()) {
        const std::int64_t n = t.numel();
        if (n < 0 || n > (1 << 16)) continue;
        out.resize(static_cast<std::size_t>(n));
        try {
            gguf->dequantize(t, out.data());
        } catch (const kev::Error& e) {
            kevfuzz::file_error(e, "GgufFile::dequantize");
        }
    }
    try {
        (void)kev::config_from_gguf(*gguf);
    } catch (const kev::Error& e) {
        kevfuzz::file_error(e, "config_from_gguf");
    }
    try {
        const kev::Tokenizer tok = kev::Tokenizer::from_gguf(*gguf);
        const auto ids = tok.encode("Hello, world! 123 <|im_end|>", kev::SpecialTokens::Parse);
        (void)tok.decode(ids, kev::SpecialText::Show);
    } catch (const kev::Error& e) {
        kevfuzz::file_error(e, "Tokenizer::from_gguf");
    }
    return 0;
}
