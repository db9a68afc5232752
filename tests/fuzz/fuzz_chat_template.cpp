// Chat templates: a template text (as tokenizer_config.json's chat_template or GGUF's
// tokenizer.chat_template would give it), a BOS spelling and a conversation (optional
// system, up to two earlier turns, user). Recognition fails only with kev::Error, the
// marked rendering's ranges are ordered and inside its text, and a rendered prompt
// encodes (Parse, and with the ranges as the generator does) with the real Qwen2.5
// tokenizer.
// Half the inputs are instead a whole tokenizer_config.json next to a tiny tokenizer.json.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>

#include "fuzz_common.h"
#include "fuzz_tokenizer_fixture.h"
#include "fuzz_util.h"
#include "kev/chat_template.h"
#include "kev/error.h"

namespace {

const char* const kTinyTokenizerJson = R"({
  "version": "1.0",
  "added_tokens": [
    {"id": 5, "content": "<|im_start|>", "special": true, "single_word": false, "lstrip": false, "rstrip": false, "normalized": false},
    {"id": 6, "content": "<|im_end|>", "special": true, "single_word": false, "lstrip": false, "rstrip": false, "normalized": false}
  ],
  "normalizer": null,
  "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
  "post_processor": null,
  "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
  "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
            "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false,
            "vocab": {"a": 0, "b": 1, "ab": 2, "Ġ": 3, "c": 4, "<|im_start|>": 5, "<|im_end|>": 6},
            "merges": ["a b"]}
})";

void render_and_encode(const kev::ChatTemplate& t, const kev::ChatPrompt& prompt) {
    const kev::Tokenizer& tok = kevfuzz::qwen_tokenizer();
    for (auto thinking : {kev::Thinking::Off, kev::Thinking::On}) {
        const kev::ChatTemplate::Rendered r = t.render_marked(prompt, thinking);
        std::size_t end = 0;
        for (const kev::TextRange& range : r.user_text) {
            if (range.begin < end || range.end <= range.begin || range.end > r.text.size()) std::abort();
            end = range.end;
        }
        if (t.render(prompt, thinking) != r.text) std::abort();
        try {
            (void)tok.encode(r.text, kev::SpecialTokens::Parse);
            (void)tok.encode(r.text, r.user_text);
        } catch (const kev::Error&) {
            // invalid UTF-8 in the message: refused by encode
        }
    }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    (void)kevfuzz::qwen_tokenizer();
    (void)kevfuzz::write_file("tokenizer.json", std::string(kTinyTokenizerJson));
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    FuzzedDataProvider in(data, size);
    kev::ChatPrompt prompt;
    if (in.ConsumeBool()) prompt.system = in.ConsumeRandomLengthString(64);
    prompt.user = in.ConsumeRandomLengthString(64);
    for (int turns = in.ConsumeIntegralInRange(0, 2); turns > 0; --turns)
        prompt.history.push_back({in.ConsumeRandomLengthString(32), in.ConsumeRandomLengthString(32)});
    if (in.ConsumeBool()) {
        const std::string config = in.ConsumeRemainingBytesAsString();
        const std::string config_path = kevfuzz::write_file("tokenizer_config.json", config);
        try {
            const kev::Tokenizer tok =
                kev::Tokenizer::from_hf_files(kevfuzz::scratch_dir() + "/tokenizer.json", config_path);
            render_and_encode(kev::ChatTemplate::recognise(tok), prompt);
        } catch (const kev::Error& e) {
            kevfuzz::file_error(e, "tokenizer_config.json");
        }
        return 0;
    }
    const std::string bos = in.ConsumeRandomLengthString(16);
    const std::string source = in.ConsumeRemainingBytesAsString();
    try {
        render_and_encode(kev::ChatTemplate::recognise(source, bos), prompt);
    } catch (const kev::Error& e) {
        kevfuzz::file_error(e, "ChatTemplate::recognise");
    }
    return 0;
}
