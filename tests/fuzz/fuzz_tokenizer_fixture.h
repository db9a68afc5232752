// The real tokenizer the encode/decode targets fuzz against: Qwen2.5's byte-level BPE
// from tests/data/qwen-tokenizer (151k tokens, NFC normalizer, ChatML specials), loaded
// once per process.
#pragma once

#include "kev/tokenizer.h"

namespace kevfuzz {

inline const kev::Tokenizer& qwen_tokenizer() {
    static const kev::Tokenizer tok = kev::Tokenizer::from_hf_dir(KEV_FUZZ_TOKENIZER_DIR);
    return tok;
}

}  // namespace kevfuzz
