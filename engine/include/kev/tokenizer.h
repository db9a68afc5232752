// Text <-> token ids, exactly as the model was trained.
//
// One Tokenizer type covers the three sources Kev reads:
//   - a Hugging Face `tokenizer.json` (+ `tokenizer_config.json`): byte-level BPE with its
//     normalizer, pre-tokenizer, added tokens and decoder, matching the `tokenizers` library;
//   - GGUF metadata (`tokenizer.ggml.model` = gpt2): the same BPE, pre-tokenizer chosen by
//     `tokenizer.ggml.pre` (qwen2, smollm, llama-bpe, gpt-2, ...);
//   - a SentencePiece `tokenizer.model` (Llama 2 / Mistral), through libsentencepiece.
//
// Encoding never adds BOS/EOS on its own: chat prompts carry their own markers (see
// chat_template.h) and a caller that wants a BOS asks `adds_bos()` and prepends `bos()`.
// A Tokenizer is immutable after loading; encode/decode are safe to call from many threads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kev {

class GgufFile;

using TokenId = std::int32_t;

// Whether special-token text in the input ("<|im_start|>") becomes the special token.
// Parse: for prompts Kev builds itself (chat templates). Plain: for text a user typed, so
// that typing "<|im_end|>" cannot forge a turn boundary; the text is tokenized as ordinary
// characters (as transformers does with split_special_tokens=True). Non-special added
// tokens (Qwen3's <think>) are matched in both modes, as transformers does.
enum class SpecialTokens { Parse, Plain };

// A byte range [begin, end) of a text.
struct TextRange {
    std::size_t begin = 0;
    std::size_t end = 0;
};

// Whether decoding writes special tokens' text or hides it.
enum class SpecialText { Hide, Show };

enum class TokenizerKind { ByteLevelBpe, Bpe, SentencePiece };

struct SpecialTokenIds {
    std::optional<TokenId> bos;
    std::optional<TokenId> eos;
    std::optional<TokenId> pad;
    std::optional<TokenId> unk;
    // Every id that ends an answer: eos plus the family's end-of-turn markers present in the
    // vocabulary (<|im_end|>, <|endoftext|>, <|eot_id|>, </s>, ...).
    std::vector<TokenId> end_of_generation;
};

class Tokenizer {
public:
    // `dir` holds tokenizer.json and optionally tokenizer_config.json (chat template,
    // bos/eos names, add_bos_token). Throws kev::Error (Io, Format, Unsupported naming the
    // component, e.g. "pre_tokenizer Metaspace").
    static Tokenizer from_hf_dir(const std::string& dir);
    static Tokenizer from_hf_files(const std::string& tokenizer_json,
                                   const std::string& tokenizer_config_json /* "" = none */);
    // From a GGUF's tokenizer.* metadata (gpt2 = byte-level BPE; llama = SentencePiece is
    // not rebuilt from GGUF and throws Unsupported).
    static Tokenizer from_gguf(const GgufFile& gguf);
    // A SentencePiece model file; `tokenizer_config_json` may give the chat template.
    static Tokenizer from_sentencepiece(const std::string& model_path,
                                        const std::string& tokenizer_config_json = {});

    Tokenizer(Tokenizer&&) noexcept;
    Tokenizer& operator=(Tokenizer&&) noexcept;
    ~Tokenizer();

    // UTF-8 text -> ids. Throws Error(InvalidArgument) for text that is not valid UTF-8.
    std::vector<TokenId> encode(std::string_view text, SpecialTokens specials) const;
    // A rendered chat prompt: special tokens are parsed, except inside `plain` (the text
    // the user typed: question, system prompt, shared context), where they are ordinary
    // characters, so a question cannot open a turn of its own. Where the user's text holds
    // no special-token text the ids equal encode(text, Parse)'s. Ranges must lie in `text`.
    std::vector<TokenId> encode(std::string_view text, const std::vector<TextRange>& plain) const;
    // ids -> UTF-8 text; byte sequences that are not UTF-8 become U+FFFD (as transformers).
    // Throws Error(InvalidArgument) for an id outside the vocabulary.
    std::string decode(const std::vector<TokenId>& ids, SpecialText special = SpecialText::Hide) const;

    // The raw bytes a token stands for (a special token: its text). For SentencePiece the
    // word-boundary mark is already a space. Streaming decoders concatenate these.
    std::string token_bytes(TokenId id) const;
    // The vocabulary's own spelling ("Ġhello", "▁hello", "<|im_end|>").
    std::string id_to_piece(TokenId id) const;
    std::optional<TokenId> piece_to_id(std::string_view piece) const;

    bool is_special(TokenId id) const;
    bool is_end_of_generation(TokenId id) const;
    // Ids are in [0, vocab_size()).
    int vocab_size() const;
    const SpecialTokenIds& special_ids() const;
    // True when the model expects a BOS in front of every sequence (Llama 2 style).
    bool adds_bos() const;
    // SentencePiece drops the space its dummy prefix put in front of the first word.
    bool strips_leading_space() const;
    // The first token's text as decoding shows it: one leading space stripped
    // (strips_leading_space), or, for a tokenizer.json Metaspace decoder, every space its
    // markers became dropped from the first token (as the tokenizers library does).
    std::string first_token_text(std::string bytes) const;
    TokenizerKind kind() const;

    // The Jinja chat template the files carry ("" when none) and the text of bos/eos.
    const std::string& chat_template_source() const;
    std::string bos_text() const;
    std::string eos_text() const;

    struct Impl;

private:
    explicit Tokenizer(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace kev
