// The BPE model: a word (bytes, or characters for non-byte-level vocabularies) becomes
// token ids by applying merges lowest rank first, leftmost first -- the order Hugging Face
// tokenizers uses. Merges live in one open-addressing hash map keyed by the id pair, so a
// merge lookup is a multiply and a probe or two.
//
// Long words (a megabyte without a space, a wall of emoji) go through rank buckets over a
// linked list of symbols (a heap of (rank, position) where a vocabulary's ranks are not
// monotone): O(n log k) for k distinct ranks. Short words, nearly all of them, use a plain
// scan, which is faster below a few dozen symbols and gives the same result.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kev/tokenizer.h"

namespace kev::tok {

class BpeModel {
public:
    struct Options {
        bool byte_level = true;              // words are bytes, spelled with GPT-2's alphabet
        bool byte_fallback = false;          // unknown character -> <0xXX> tokens
        std::optional<TokenId> unk;          // unknown character -> unk (when no byte fallback)
        bool fuse_unk = false;
        bool ignore_merges = false;          // a word that is a whole token is not merged
    };

    // `vocab`: piece -> id (ids may leave gaps; they are checked against `vocab_size`).
    // `merges`: pairs of pieces, best first. A merge whose parts or result are not in the
    // vocabulary is skipped, as the tokenizers library does when it loads.
    BpeModel(std::unordered_map<std::string, TokenId> vocab,
             const std::vector<std::pair<std::string, std::string>>& merges, Options options);

    // Appends the ids of one pre-tokenized word (raw UTF-8 bytes, not yet byte-mapped).
    void encode_word(std::string_view word, std::vector<TokenId>& out) const;

    std::optional<TokenId> find(std::string_view piece) const;
    bool byte_level() const { return options_.byte_level; }
    bool byte_fallback() const { return options_.byte_fallback; }
    const std::unordered_map<std::string, TokenId>& vocab() const { return vocab_; }

private:
    struct Merge {
        std::uint64_t key = ~0ull;  // (left << 32) | right; ~0 marks an empty slot
        std::int32_t rank = 0;
        TokenId merged = 0;
    };
    const Merge* find_merge(TokenId left, TokenId right) const;
    void initial_symbols(std::string_view word, std::vector<TokenId>& symbols) const;
    void merge_short(std::vector<TokenId>& symbols) const;
    // False (symbols unspecified) when the vocabulary's merge ranks are not monotone.
    bool merge_long_buckets(std::vector<TokenId>& symbols) const;
    void merge_long_heap(std::vector<TokenId>& symbols) const;

    std::unordered_map<std::string, TokenId> vocab_;
    Options options_;
    std::vector<Merge> merges_;  // open addressing, size a power of two
    std::uint64_t mask_ = 0;
    TokenId byte_ids_[256];      // byte-level: the id of each byte's stand-in character;
                                 // byte fallback: the id of <0xXX>; -1 where absent
};

}  // namespace kev::tok
