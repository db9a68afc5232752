// What a loaded Tokenizer holds. The loaders (tokenizer.json, GGUF, SentencePiece) fill
// this in; tokenizer.cpp runs it.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "kev/tokenizer.h"
#include "tokenizer/added_vocab.h"
#include "tokenizer/bpe.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/unicode.h"

namespace kev {
class GgufFile;
}

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace kev::tok {

// Recently seen words and their ids. Direct-mapped: a word's hash picks one slot, a
// collision replaces it. Text repeats words constantly, so this saves most BPE work.
class WordCache {
public:
    static constexpr std::size_t kMaxWordBytes = 64;
    const std::vector<TokenId>* find(std::string_view word, std::size_t hash) const;
    void put(std::string_view word, std::size_t hash, const TokenId* ids, std::size_t n);

private:
    struct Slot {
        std::string word;
        std::vector<TokenId> ids;
        bool used = false;
    };
    static constexpr std::size_t kSlots = 1 << 15;
    std::vector<Slot> slots_ = std::vector<Slot>(kSlots);
};

// Deletes the SentencePiece processor where its type is complete.
struct SpDeleter {
    void operator()(sentencepiece::SentencePieceProcessor* p) const;
};

// One step of tokenizer.json's normalizer: a Unicode normal form, a literal
// replacement (Replace with a String pattern: every occurrence, left to right), or a
// prefix (Prepend: added to a non-empty segment).
struct Normalizer {
    enum class Kind { Form, Replace, Prepend };
    Kind kind = Kind::Form;
    NormalForm form = NormalForm::NFC;
    std::string pattern, content;  // Replace: pattern -> content; Prepend: content
    std::string apply(std::string_view text) const;
};

// Picks the conventional special tokens (bos/eos/pad/unk by name) and the set of
// end-of-generation ids once pieces and added tokens are known.
struct SpecialNames {
    std::optional<std::string> bos, eos, pad, unk;
};

}  // namespace kev::tok

namespace kev {

struct Tokenizer::Impl {
    TokenizerKind kind = TokenizerKind::ByteLevelBpe;
    std::vector<std::string> pieces;  // id -> vocabulary spelling
    std::vector<std::string> bytes;   // id -> raw bytes (special: its text)
    std::vector<char> special;        // id -> is a special token
    tok::AddedVocab added;
    std::vector<tok::Normalizer> normalizers;
    tok::PreTokenizer pre;
    std::unique_ptr<tok::BpeModel> bpe;
    std::unique_ptr<sentencepiece::SentencePieceProcessor, tok::SpDeleter> sp;

    SpecialTokenIds ids;
    bool add_bos = false;
    bool strip_leading_space = false;
    // SentencePiece-style tokenizer.json: the marker ("▁") a decoder reads as a space, and
    // whether the decoder (Metaspace) drops it from the first token altogether.
    std::string space_marker;
    bool first_token_drops_spaces = false;
    std::string chat_template;

    mutable std::mutex cache_mutex;
    mutable tok::WordCache cache;

    // Fills pieces/bytes/special for ids [0, n) from the BPE vocabulary and added tokens.
    void build_tables_bpe();
    // Sets `ids` from names (looked up among added tokens, then the vocabulary) and adds the
    // family end-of-turn markers present.
    void resolve_specials(const tok::SpecialNames& names);
    std::optional<TokenId> lookup(std::string_view piece) const;

    // `at_start`: `text` begins the input (Metaspace's First scheme prepends there only).
    void encode_plain(std::string_view text, std::vector<TokenId>& out, bool use_cache, bool at_start) const;
    // Tokenizer::encode; `plain` (sorted, may be null): byte ranges whose special-token
    // text stays plain text.
    std::vector<TokenId> encode(std::string_view text, SpecialTokens specials, const std::vector<TextRange>* plain) const;
};

// Loader helpers shared by the sources.
namespace tok {
// The largest token id a tokenizer may use (the largest vocabularies in use hold about
// 262,000): the id tables are sized by the largest id, so a file cannot ask for gigabytes.
constexpr std::int64_t kMaxTokenId = (1 << 21) - 1;
// Appends SentencePiece's ids for one plain segment (dummy prefix included).
void sp_encode(const sentencepiece::SentencePieceProcessor& sp, std::string_view text,
               std::vector<TokenId>& out);
std::optional<TokenId> sp_piece_to_id(const sentencepiece::SentencePieceProcessor& sp, std::string_view piece);
// A GGUF's SentencePiece vocabulary (tokenizer.ggml.model "llama"), `tokens` already read.
std::unique_ptr<Tokenizer::Impl> sentencepiece_from_gguf(const GgufFile& gguf, const std::vector<std::string>& tokens);
// Reads tokenizer_config.json: chat template, special-token names, add_bos_token.
void apply_tokenizer_config(Tokenizer::Impl& impl, const std::string& path, SpecialNames& names);
}  // namespace tok

}  // namespace kev
