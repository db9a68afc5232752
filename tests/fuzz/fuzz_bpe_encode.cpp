// BPE encode of arbitrary bytes (as user text and as a template-built prompt), with the
// real Qwen2.5 tokenizer: invalid UTF-8 is refused with kev::Error, everything else
// encodes to ids inside the vocabulary, and for text typed by a user (Plain) no special
// token comes out.
#include <cstdint>
#include <string_view>

#include "fuzz_tokenizer_fixture.h"
#include "kev/error.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    (void)kevfuzz::qwen_tokenizer();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const kev::Tokenizer& tok = kevfuzz::qwen_tokenizer();
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    for (auto mode : {kev::SpecialTokens::Plain, kev::SpecialTokens::Parse}) {
        try {
            const auto ids = tok.encode(text, mode);
            for (kev::TokenId id : ids) {
                if (id < 0 || id >= tok.vocab_size()) std::abort();
                if (mode == kev::SpecialTokens::Plain && tok.is_special(id)) std::abort();
            }
            (void)tok.decode(ids, kev::SpecialText::Show);
        } catch (const kev::Error&) {
            // invalid UTF-8: documented as Error(InvalidArgument)
        }
    }
    return 0;
}
