// GGUF tokenizer.* metadata -> Tokenizer: byte-level BPE (`tokenizer.ggml.model` = gpt2)
// here, SentencePiece (`llama`: Llama 2, Mistral, Gemma) in load_sentencepiece.cpp.
//
// GGUF stores no pre-tokenizer, only its name (`tokenizer.ggml.pre`). The table below maps
// the names to the split patterns the models were trained with, as llama.cpp's vocabulary
// loader does (the patterns are the published ones of each model family).
#include <set>

#include "kev/error.h"
#include "kev/gguf.h"
#include "kev/tokenizer.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

namespace kev {

namespace {

enum class PreSet { Gpt2, DigitThenGpt2, Qwen2, Llama3, Gpt4o };

PreSet pre_set_for(const std::string& name, const std::string& where) {
    static const std::set<std::string> qwen2 = {"qwen2", "deepseek-r1-qwen", "stablelm2", "megrez"};
    static const std::set<std::string> llama3 = {"llama-bpe", "llama3", "llama-v3", "falcon3",
                                                 "dbrx", "smaug-bpe", "pixtral"};
    static const std::set<std::string> digit_gpt2 = {"smollm", "starcoder", "refact", "command-r",
                                                     "codeshell", "exaone", "minerva"};
    static const std::set<std::string> gpt2 = {"gpt-2", "default", "mpt", "olmo", "jais"};
    static const std::set<std::string> gpt4o = {"gpt-4o", "llama4"};  // Phi-4-mini's files say gpt-4o
    if (gpt4o.count(name)) return PreSet::Gpt4o;
    if (qwen2.count(name)) return PreSet::Qwen2;
    if (llama3.count(name)) return PreSet::Llama3;
    if (digit_gpt2.count(name)) return PreSet::DigitThenGpt2;
    if (gpt2.count(name)) return PreSet::Gpt2;
    throw Error(ErrorCode::Unsupported, where + ": tokenizer.ggml.pre '" + name + "' is not a pre-tokenizer Kev knows");
}

}  // namespace

Tokenizer Tokenizer::from_gguf(const GgufFile& gguf) {
    const std::string& where = gguf.path();
    const std::string model = gguf.get_string("tokenizer.ggml.model").value_or("");
    if (model != "gpt2" && model != "llama") {
        throw Error(ErrorCode::Unsupported,
                    where + ": tokenizer.ggml.model '" + model +
                        "' is not rebuilt from GGUF (byte-level BPE 'gpt2' and SentencePiece 'llama' are; use the "
                        "model's tokenizer.model or tokenizer.json)");
    }
    auto tokens = gguf.get_strings("tokenizer.ggml.tokens");
    if (!tokens || tokens->empty()) throw Error(ErrorCode::Format, where + ": tokenizer.ggml.tokens is missing");
    if (tokens->size() > static_cast<std::size_t>(tok::kMaxTokenId) + 1)
        throw Error(ErrorCode::Format, where + ": tokenizer.ggml.tokens holds " + std::to_string(tokens->size()) +
                                           " tokens; the most Kev takes is " + std::to_string(tok::kMaxTokenId + 1));
    if (model == "llama") return Tokenizer(tok::sentencepiece_from_gguf(gguf, *tokens));
    auto merges_text = gguf.get_strings("tokenizer.ggml.merges");
    if (!merges_text) throw Error(ErrorCode::Format, where + ": tokenizer.ggml.merges is missing");
    const auto types = gguf.get_ints("tokenizer.ggml.token_type").value_or(std::vector<std::int64_t>());
    if (!types.empty() && types.size() != tokens->size())
        throw Error(ErrorCode::Format, where + ": tokenizer.ggml.token_type has " + std::to_string(types.size()) +
                                           " entries for " + std::to_string(tokens->size()) + " tokens");

    auto impl = std::make_unique<Impl>();
    impl->kind = TokenizerKind::ByteLevelBpe;

    // Tokens are written in GPT-2's byte alphabet; one that is not (a mislabelled control
    // token, say) is respelled from its UTF-8 bytes, as transformers does.
    auto spelled_in_alphabet = [](const std::string& t) {
        std::size_t i = 0;
        while (i < t.size())
            if (tok::unicode_to_byte(tok::next_code_point(t, i)) < 0) return false;
        return true;
    };

    std::unordered_map<std::string, TokenId> vocab;
    vocab.reserve(tokens->size());
    for (std::size_t id = 0; id < tokens->size(); ++id) {
        const std::string& t = (*tokens)[id];
        if (!tok::is_valid_utf8(t)) throw Error(ErrorCode::Format, where + ": token " + std::to_string(id) + " is not UTF-8");
        std::string key = t;
        if (!spelled_in_alphabet(t)) {
            key.clear();
            for (unsigned char c : t) key += tok::byte_to_unicode()[c];
        }
        const auto [at, fresh] = vocab.emplace(std::move(key), static_cast<TokenId>(id));
        if (!fresh)
            throw Error(ErrorCode::Format, where + ": tokenizer.ggml.tokens: token " + std::to_string(id) + " ('" + t +
                                               "') repeats token " + std::to_string(at->second));
    }

    std::vector<std::pair<std::string, std::string>> merges;
    merges.reserve(merges_text->size());
    for (const std::string& m : *merges_text) {
        const std::size_t space = m.find(' ', 1);
        if (space == std::string::npos) throw Error(ErrorCode::Format, where + ": merge '" + m + "' has no space");
        merges.emplace_back(m.substr(0, space), m.substr(space + 1));
    }

    const std::string pre = gguf.get_string("tokenizer.ggml.pre").value_or("default");
    tok::BpeModel::Options opt;
    opt.byte_level = true;
    switch (pre_set_for(pre, where)) {
        case PreSet::Gpt2: impl->pre.add_split(tok::patterns::kGpt2); break;
        case PreSet::DigitThenGpt2:
            impl->pre.add_split(tok::patterns::kDigit);
            impl->pre.add_split(tok::patterns::kGpt2);
            break;
        case PreSet::Qwen2:
            // Qwen's tokenizer.json normalizes to NFC before splitting; GGUF does not record
            // normalizers, so the family's is restored here (llama.cpp skips it).
            impl->normalizers.push_back({tok::Normalizer::Kind::Form, tok::NormalForm::NFC, {}, {}});
            impl->pre.add_split(tok::patterns::kQwen2);
            break;
        case PreSet::Llama3:
            impl->pre.add_split(tok::patterns::kLlama3);
            opt.ignore_merges = true;
            break;
        case PreSet::Gpt4o:  // no normalizer, merges applied (llama.cpp and transformers alike)
            impl->pre.add_split(tok::patterns::kGpt4o);
            break;
    }
    try {
        impl->bpe = std::make_unique<tok::BpeModel>(std::move(vocab), merges, opt);
    } catch (const Error& e) {
        throw Error(e.code(), where + ": tokenizer.ggml.merges: " + e.what());
    }

    // token_type 3 = CONTROL (special), 4 = USER_DEFINED (added, matched whole, not special).
    for (std::size_t id = 0; id < types.size() && id < tokens->size(); ++id) {
        const std::string& t = (*tokens)[id];
        if (types[id] == 3 && spelled_in_alphabet(t)) {
            impl->added.add(tok::AddedToken{t, static_cast<TokenId>(id), true, false, false, false, false});
        } else if (types[id] == 4) {
            impl->added.add(tok::AddedToken{t, static_cast<TokenId>(id), false, false, false, false, false});
        }
    }
    impl->added.finalize();
    impl->build_tables_bpe();

    tok::SpecialNames names;
    auto name_of = [&](const char* key) -> std::optional<std::string> {
        const auto id = gguf.get_int(key);
        if (!id) return std::nullopt;
        if (*id < 0 || static_cast<std::uint64_t>(*id) >= tokens->size())
            throw Error(ErrorCode::Format, where + ": " + key + " is " + std::to_string(*id) + ", outside the vocabulary of " +
                                               std::to_string(tokens->size()) + " tokens");
        return (*tokens)[static_cast<std::size_t>(*id)];
    };
    names.bos = name_of("tokenizer.ggml.bos_token_id");
    names.eos = name_of("tokenizer.ggml.eos_token_id");
    names.pad = name_of("tokenizer.ggml.padding_token_id");
    names.unk = name_of("tokenizer.ggml.unknown_token_id");
    impl->add_bos = gguf.get_bool("tokenizer.ggml.add_bos_token").value_or(false);
    impl->chat_template = gguf.get_string("tokenizer.chat_template").value_or("");
    impl->resolve_specials(names);
    return Tokenizer(std::move(impl));
}

}  // namespace kev
