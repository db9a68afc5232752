// tokenizer.json loading (model vocab and merges, added tokens, normalizer,
// pre-tokenizer, decoder), then an encode and decode through whatever was loaded, and a
// check that every id it hands out is inside its own vocabulary.
#include <cstdint>
#include <optional>
#include <string>

#include "fuzz_common.h"
#include "fuzz_util.h"
#include "kev/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string path = kevfuzz::write_file("tokenizer.json", data, size);
    std::optional<kev::Tokenizer> loaded;
    try {
        loaded.emplace(kev::Tokenizer::from_hf_files(path, ""));
    } catch (const kev::Error& e) {
        kevfuzz::file_error(e, "Tokenizer::from_hf_files");
        return 0;
    }
    const kev::Tokenizer& tok = *loaded;
    try {
        const int vocab = tok.vocab_size();
        for (auto mode : {kev::SpecialTokens::Parse, kev::SpecialTokens::Plain}) {
            const auto ids = tok.encode("Hello, world! 123 h\xc3\xa9llo <|im_end|> <s>", mode);
            for (kev::TokenId id : ids)
                if (id < 0 || id >= vocab) std::abort();
            (void)tok.decode(ids, kev::SpecialText::Show);
        }
        for (int id = 0; id < vocab && id < 64; ++id) {
            (void)tok.token_bytes(id);
            (void)tok.id_to_piece(id);
        }
        (void)tok.bos_text();
        (void)tok.eos_text();
    } catch (const kev::Error&) {
        // encode: a character a vocabulary without unk cannot spell is an InvalidArgument
    }
    return 0;
}
