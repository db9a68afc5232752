// Added tokens (special tokens like <|im_start|> and non-special ones like <think>) are
// found in the text before any normalization or BPE, as the tokenizers library does:
// leftmost-longest matching over all added tokens, then the lstrip / rstrip /
// single_word rules. Tokens flagged `normalized` are looked for in the normalized text,
// the others in the raw text.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kev/tokenizer.h"

namespace kev::tok {

struct AddedToken {
    std::string content;
    TokenId id = 0;
    bool special = false;
    bool lstrip = false;
    bool rstrip = false;
    bool single_word = false;
    bool normalized = false;
};

class AddedVocab {
public:
    // A later token with the same content replaces the earlier one. Call finalize() after
    // the last add and before split().
    void add(const AddedToken& token);
    void finalize();

    struct Piece {
        std::string_view text;
        TokenId id;  // -1: plain text still to be tokenized
    };
    // Splits `text` on the tokens of one pass (normalized == the tokens' flag). With
    // SpecialTokens::Plain a special token's text stays plain text; so does a special
    // token's text that overlaps one of `plain` (byte ranges of `text`, sorted, may be null).
    void split(std::string_view text, bool normalized, SpecialTokens mode, std::vector<Piece>& out,
               const std::vector<TextRange>* plain = nullptr) const;

    bool has_normalized() const { return has_normalized_; }
    const AddedToken* find_id(TokenId id) const;
    const AddedToken* find_content(std::string_view content) const;
    const std::vector<AddedToken>& tokens() const { return tokens_; }

private:
    std::vector<AddedToken> tokens_;
    std::unordered_map<TokenId, std::size_t> by_id_;
    std::unordered_map<std::string, std::size_t> by_content_;
    // Per first byte, the indices of the tokens of each pass starting with it, longest first.
    std::array<std::vector<std::size_t>, 256> first_[2];
    bool has_normalized_ = false;
};

}  // namespace kev::tok
