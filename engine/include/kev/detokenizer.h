// Streaming decode for one card: ids arrive one at a time, text leaves as soon as it is
// safe to show.
//
//   - Only complete UTF-8 leaves: a character split across tokens (a Chinese character, an
//     emoji) is held until its last byte arrives, then appears once, whole.
//   - Special tokens are hidden (unless asked otherwise).
//   - Stop strings are found even when they span tokens: text that could be the start of
//     a stop string is held back until it is known not to be one. Once a stop string is
//     seen, the text before it is emitted and the decoder is stopped. Stop strings are
//     matched in the shown text; a hidden special token (<|im_end|>) is not text, so end of
//     generation by token is the caller's check (Tokenizer::is_end_of_generation).
//
// The concatenation of everything push() and flush() return equals
// tokenizer.decode(all ids) (before any stop string).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "kev/tokenizer.h"

namespace kev {

// A token's bytes (Tokenizer::token_bytes) as text that can be shown on its own, for the
// comparison view's token cells. A byte-level token often holds only part of a UTF-8
// character (the first two bytes of "中"); decoding it alone would give U+FFFD and hide
// which bytes it was. Every complete, valid character is kept as it is; every byte that
// is not part of one is written as "<0xE4>" (SentencePiece's spelling of byte tokens),
// so the result is always valid UTF-8 and the tokens of a split character are told apart.
std::string token_display_text(std::string_view bytes);

class StreamDecoder {
public:
    // `tokenizer` must outlive the decoder.
    explicit StreamDecoder(const Tokenizer& tokenizer, std::vector<std::string> stop_strings = {},
                           SpecialText special = SpecialText::Hide);

    // Feeds one id; returns the text that became safe to show (often empty). After a stop,
    // returns "" and ignores further ids.
    std::string push(TokenId id);
    // End of generation: returns what was held back (an incomplete character becomes U+FFFD,
    // as in a full decode).
    std::string flush();

    bool stopped() const { return stopped_; }
    // The stop string that stopped the decoder ("" when none did).
    const std::string& matched_stop() const { return matched_stop_; }
    // Everything returned so far.
    const std::string& text() const { return emitted_; }

private:
    std::string release(bool final);

    const Tokenizer* tokenizer_;
    std::vector<std::string> stops_;
    SpecialText special_;
    std::string pending_bytes_;  // bytes of a character not yet complete
    std::string held_;           // complete text that may begin a stop string
    std::string emitted_;
    std::string matched_stop_;
    bool started_ = false;       // any byte seen (for the SentencePiece leading space)
    bool stopped_ = false;
};

}  // namespace kev
