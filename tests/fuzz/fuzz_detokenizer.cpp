// The streaming detokenizer: a stream of ids (any, in range) with stop strings. Checks the
// documented contract: without a stop, everything push() and flush() return equals
// tokenizer.decode(ids); with stops, the text shown is a prefix of that decode (text
// after a stop is never shown) and never contains the stop string.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_tokenizer_fixture.h"
#include "kev/detokenizer.h"
#include "kev/error.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    (void)kevfuzz::qwen_tokenizer();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const kev::Tokenizer& tok = kevfuzz::qwen_tokenizer();
    FuzzedDataProvider in(data, size);
    const auto special = in.ConsumeBool() ? kev::SpecialText::Show : kev::SpecialText::Hide;
    std::vector<std::string> stops;
    const int n_stops = in.ConsumeIntegralInRange(0, 2);
    for (int i = 0; i < n_stops; ++i) stops.push_back(in.ConsumeRandomLengthString(8));
    std::vector<kev::TokenId> ids;
    while (in.remaining_bytes() >= 3 && ids.size() < 256) {
        // Mostly the byte tokens and short pieces (low ids), sometimes anything.
        const auto raw = in.ConsumeIntegral<std::uint32_t>() & 0xFFFFFF;
        ids.push_back(static_cast<kev::TokenId>(raw % static_cast<std::uint32_t>(tok.vocab_size())));
    }
    kev::StreamDecoder dec(tok, stops, special);
    std::string shown;
    for (kev::TokenId id : ids) shown += dec.push(id);
    shown += dec.flush();
    if (shown != dec.text()) std::abort();
    const std::string full = tok.decode(ids, special);
    bool any_stop = false;
    for (const auto& s : stops) any_stop |= !s.empty();
    if (!any_stop) {
        if (shown != full) std::abort();
    } else {
        if (full.compare(0, shown.size(), shown) != 0) std::abort();
        if (dec.stopped()) {
            if (dec.matched_stop().empty()) std::abort();
            if (shown.find(dec.matched_stop()) != std::string::npos) std::abort();
        }
    }
    return 0;
}
