// tokenizer.json (+ tokenizer_config.json) -> Tokenizer. Reads the parts of the Hugging
// Face format that BPE models use: byte-level ones (GPT-2, Llama 3, Qwen) and
// SentencePiece-style ones with byte fallback as transformers' converters write them
// (Gemma: Replace " " -> "▁" and Split merged_with_previous; Llama 2 / Mistral: Prepend
// + Replace, or Metaspace; their Replace / Strip / Metaspace decoders). Anything else is
// refused by name rather than tokenized differently from the reference.
#include <algorithm>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "kev/error.h"
#include "text_file.h"
#include "kev/tokenizer.h"
#include "tokenizer/tokenizer_impl.h"

namespace kev {

using nlohmann::json;

namespace tok {

namespace {

json read_json(const std::string& path) {
    const std::string text = read_text_file(path);
    try {
        return json::parse(text);
    } catch (const json::exception& e) {
        throw Error(ErrorCode::Format, path + ": " + e.what());
    }
}

// A token id from tokenizer.json: an integer from 0 to kMaxTokenId. Anything else would
// index outside the id tables built from it.
TokenId token_id(const json& v, const std::string& where, const std::string& field) {
    const bool integer = v.is_number_integer();
    const bool in_range = integer && (v.is_number_unsigned() ? v.get<std::uint64_t>() <= std::uint64_t(kMaxTokenId)
                                                             : v.get<std::int64_t>() >= 0 && v.get<std::int64_t>() <= kMaxTokenId);
    if (!in_range)
        throw Error(ErrorCode::Format, where + ": " + field + " is " + v.dump() + "; a token id must be an integer from 0 to " +
                                           std::to_string(kMaxTokenId));
    return static_cast<TokenId>(v.get<std::int64_t>());
}

std::string escape_regex(const std::string& literal) {
    std::string out;
    for (char c : literal) {
        if (std::string("\\^$.|?*+()[]{}").find(c) != std::string::npos) out += '\\';
        out += c;
    }
    return out;
}

// A special-token entry of tokenizer_config.json: "<s>" or {"content": "<s>", ...}.
std::optional<std::string> token_name(const json& v) {
    if (v.is_string()) return v.get<std::string>();
    if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
    return std::nullopt;
}

void add_normalizer(Tokenizer::Impl& impl, const json& n, const std::string& where) {
    if (n.is_null()) return;
    const std::string type = n.value("type", "");
    auto form = [&](NormalForm f) { impl.normalizers.push_back({Normalizer::Kind::Form, f, {}, {}}); };
    if (type == "NFC") form(NormalForm::NFC);
    else if (type == "NFD") form(NormalForm::NFD);
    else if (type == "NFKC") form(NormalForm::NFKC);
    else if (type == "NFKD") form(NormalForm::NFKD);
    else if (type == "Sequence") {
        for (const json& sub : n.at("normalizers")) add_normalizer(impl, sub, where);
    } else if (type == "Replace") {
        // SentencePiece-style files: " " -> "▁". A literal pattern only.
        const json& pat = n.at("pattern");
        if (!pat.contains("String") || !pat["String"].is_string() || !n.value("content", json()).is_string())
            throw Error(ErrorCode::Unsupported, where + ": normalizer Replace with a " +
                                                    (pat.contains("Regex") ? "Regex" : "missing") + " pattern is not supported");
        impl.normalizers.push_back({Normalizer::Kind::Replace, NormalForm::NFC, pat["String"].get<std::string>(),
                                    n["content"].get<std::string>()});
    } else if (type == "Prepend") {
        if (!n.value("prepend", json()).is_string())
            throw Error(ErrorCode::Format, where + ": normalizer Prepend without a string to prepend");
        impl.normalizers.push_back({Normalizer::Kind::Prepend, NormalForm::NFC, {}, n["prepend"].get<std::string>()});
    } else {
        throw Error(ErrorCode::Unsupported, where + ": normalizer " + type + " is not supported");
    }
}

// Metaspace's prepend_scheme ("always", "first", "never"); files written before the
// field existed have add_prefix_space (true: always).
PrependScheme prepend_scheme(const json& p, const std::string& where) {
    if (!p.contains("prepend_scheme")) return p.value("add_prefix_space", true) ? PrependScheme::Always : PrependScheme::Never;
    const std::string s = p.value("prepend_scheme", "");
    if (s == "always") return PrependScheme::Always;
    if (s == "first") return PrependScheme::First;
    if (s == "never") return PrependScheme::Never;
    throw Error(ErrorCode::Unsupported, where + ": Metaspace prepend_scheme " + s + " is not supported");
}

// The decoder, as far as it changes the text a token stands for: ByteLevel (the BPE
// model's byte mapping), SentencePiece's Replace("▁", " ") or Metaspace (the marker
// reads as a space), Strip of one leading space, Metaspace dropping the first token's
// markers; ByteFallback and Fuse are what Kev's decoding does anyway. Returns whether a
// ByteLevel step was seen. Anything else is refused by name.
bool add_decoder(Tokenizer::Impl& impl, const json& d, const std::string& where) {
    if (d.is_null()) return false;
    const std::string type = d.value("type", "");
    if (type == "Sequence") {
        bool byte_level = false;
        for (const json& sub : d.at("decoders")) byte_level = add_decoder(impl, sub, where) || byte_level;
        return byte_level;
    }
    if (type == "ByteLevel") return true;
    if (type == "ByteFallback" || type == "Fuse") return false;
    if (type == "Replace") {
        const json& pat = d.at("pattern");
        if (pat.contains("String") && d.value("content", json()) == " ") {
            impl.space_marker = pat["String"].get<std::string>();
            return false;
        }
        throw Error(ErrorCode::Unsupported, where + ": decoder Replace other than a marker -> \" \" is not supported");
    }
    if (type == "Strip") {
        if (d.value("content", json()) == " " && d.value("start", 0) <= 1 && d.value("stop", 0) == 0) {
            impl.strip_leading_space = impl.strip_leading_space || d.value("start", 0) == 1;
            return false;
        }
        throw Error(ErrorCode::Unsupported, where + ": decoder Strip other than one leading space is not supported");
    }
    if (type == "Metaspace") {
        impl.space_marker = d.value("replacement", std::string("\u2581"));
        impl.first_token_drops_spaces = prepend_scheme(d, where) != PrependScheme::Never;
        return false;
    }
    throw Error(ErrorCode::Unsupported, where + ": decoder " + type + " is not supported");
}

// Returns whether a ByteLevel step was seen.
bool add_pre_tokenizer(Tokenizer::Impl& impl, const json& p, const std::string& where) {
    if (p.is_null()) return false;
    const std::string type = p.value("type", "");
    if (type == "Sequence") {
        bool byte_level = false;
        for (const json& sub : p.at("pretokenizers")) byte_level = add_pre_tokenizer(impl, sub, where) || byte_level;
        return byte_level;
    }
    if (type == "ByteLevel") {
        if (p.value("add_prefix_space", false)) impl.pre.add_prefix_space();
        if (p.value("use_regex", true)) impl.pre.add_split(patterns::kGpt2);
        return true;
    }
    if (type == "Digits") {
        impl.pre.add_split(p.value("individual_digits", false) ? patterns::kDigit : patterns::kDigits);
        return false;
    }
    if (type == "Split") {
        const std::string behavior = p.value("behavior", "");
        static const std::pair<const char*, SplitBehavior> kBehaviors[] = {
            {"Isolated", SplitBehavior::Isolated},
            {"Removed", SplitBehavior::Removed},
            {"MergedWithPrevious", SplitBehavior::MergedWithPrevious},
            {"MergedWithNext", SplitBehavior::MergedWithNext},
            {"Contiguous", SplitBehavior::Contiguous}};
        const auto* known = std::find_if(std::begin(kBehaviors), std::end(kBehaviors),
                                         [&](const auto& b) { return behavior == b.first; });
        if (known == std::end(kBehaviors) || p.value("invert", false))
            throw Error(ErrorCode::Unsupported, where + ": Split pre-tokenizer with behavior " + behavior +
                                                    (p.value("invert", false) ? " (inverted)" : "") + " is not supported");
        const json& pat = p.at("pattern");
        if (pat.contains("Regex")) impl.pre.add_split(pat["Regex"].get<std::string>(), known->second);
        else if (pat.contains("String")) impl.pre.add_split(escape_regex(pat["String"].get<std::string>()), known->second);
        else throw Error(ErrorCode::Format, where + ": Split pre-tokenizer without a pattern");
        return false;
    }
    if (type == "Metaspace") {
        impl.pre.add_metaspace(p.value("replacement", std::string("\u2581")), prepend_scheme(p, where),
                               p.value("split", true));
        return false;
    }
    throw Error(ErrorCode::Unsupported, where + ": pre_tokenizer " + type + " is not supported");
}

}  // namespace

void apply_tokenizer_config(Tokenizer::Impl& impl, const std::string& path, SpecialNames& names) {
    const json cfg = read_json(path);
    if (cfg.contains("chat_template")) {
        const json& t = cfg["chat_template"];
        if (t.is_string()) {
            impl.chat_template = t.get<std::string>();
        } else if (t.is_array()) {
            for (const json& entry : t)
                if (entry.is_object() && entry.value("name", json()) == "default" && entry.value("template", json()).is_string())
                    impl.chat_template = entry["template"].get<std::string>();
        } else if (!t.is_null()) {
            throw Error(ErrorCode::Format, path + ": chat_template is " + t.dump().substr(0, 40) +
                                               ", neither a template nor a list of named templates");
        }
    }
    if (cfg.contains("bos_token")) names.bos = token_name(cfg["bos_token"]);
    if (cfg.contains("eos_token")) names.eos = token_name(cfg["eos_token"]);
    if (cfg.contains("pad_token")) names.pad = token_name(cfg["pad_token"]);
    if (cfg.contains("unk_token")) names.unk = token_name(cfg["unk_token"]);
    if (cfg.contains("add_bos_token") && cfg["add_bos_token"].is_boolean())
        impl.add_bos = cfg["add_bos_token"].get<bool>();
}

}  // namespace tok

Tokenizer Tokenizer::from_hf_dir(const std::string& dir) {
    const std::string config = dir + "/tokenizer_config.json";
    std::ifstream probe(config);
    return from_hf_files(dir + "/tokenizer.json", probe ? config : std::string());
}

Tokenizer Tokenizer::from_hf_files(const std::string& tokenizer_json, const std::string& config_json) {
    const json j = tok::read_json(tokenizer_json);
    auto impl = std::make_unique<Impl>();
    const std::string& where = tokenizer_json;
    try {
        const json& model = j.at("model");
        const std::string type = model.value("type", "BPE");
        if (type != "BPE") throw Error(ErrorCode::Unsupported, where + ": model type " + type + " is not supported (only BPE)");
        if (!model.value("continuing_subword_prefix", json()).is_null() &&
            !model["continuing_subword_prefix"].get<std::string>().empty())
            throw Error(ErrorCode::Unsupported, where + ": BPE continuing_subword_prefix is not supported");
        if (!model.value("end_of_word_suffix", json()).is_null() &&
            !model["end_of_word_suffix"].get<std::string>().empty())
            throw Error(ErrorCode::Unsupported, where + ": BPE end_of_word_suffix is not supported");

        tok::add_normalizer(*impl, j.value("normalizer", json()), where);
        bool byte_level = tok::add_pre_tokenizer(*impl, j.value("pre_tokenizer", json()), where);
        byte_level = tok::add_decoder(*impl, j.value("decoder", json()), where) || byte_level;

        if (!model.at("vocab").is_object() || model["vocab"].empty())
            throw Error(ErrorCode::Format, where + ": model.vocab must be a non-empty object of token -> id");
        std::unordered_map<std::string, TokenId> vocab;
        vocab.reserve(model.at("vocab").size());
        for (auto it = model["vocab"].begin(); it != model["vocab"].end(); ++it)
            vocab.emplace(it.key(), tok::token_id(it.value(), where, "model.vocab[" + json(it.key()).dump() + "]"));

        std::vector<std::pair<std::string, std::string>> merges;
        const json& jm = model.value("merges", json::array());
        if (!jm.is_array()) throw Error(ErrorCode::Format, where + ": model.merges is " + jm.dump().substr(0, 40) + ", not a list");
        merges.reserve(jm.size());
        for (const json& m : jm) {
            if (m.is_string()) {
                const std::string s = m.get<std::string>();
                const std::size_t space = s.find(' ', 1);
                if (space == std::string::npos) throw Error(ErrorCode::Format, where + ": merge '" + s + "' has no space");
                merges.emplace_back(s.substr(0, space), s.substr(space + 1));
            } else if (m.is_array() && m.size() == 2) {
                merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
            } else {
                throw Error(ErrorCode::Format, where + ": a merge is neither \"a b\" nor [\"a\", \"b\"]");
            }
        }

        tok::BpeModel::Options opt;
        opt.byte_level = byte_level;
        opt.byte_fallback = model.value("byte_fallback", false);
        opt.fuse_unk = model.value("fuse_unk", false);
        opt.ignore_merges = model.value("ignore_merges", false);
        const json unk = model.value("unk_token", json());
        if (unk.is_string()) {
            auto it = vocab.find(unk.get<std::string>());
            if (it != vocab.end()) opt.unk = it->second;
        }
        impl->kind = byte_level ? TokenizerKind::ByteLevelBpe : TokenizerKind::Bpe;
        try {
            impl->bpe = std::make_unique<tok::BpeModel>(std::move(vocab), merges, opt);
        } catch (const Error& e) {
            throw Error(e.code(), where + ": model.merges: " + e.what());
        }

        const json added = j.value("added_tokens", json::array());
        if (!added.is_array()) throw Error(ErrorCode::Format, where + ": added_tokens is not a list");
        for (std::size_t k = 0; k < added.size(); ++k) {
            const json& a = added[k];
            tok::AddedToken t;
            t.id = tok::token_id(a.at("id"), where, "added_tokens[" + std::to_string(k) + "].id");
            if (!a.contains("content") || !a["content"].is_string())
                throw Error(ErrorCode::Format, where + ": added_tokens[" + std::to_string(k) + "].content is not a string");
            t.content = a["content"].get<std::string>();
            t.special = a.value("special", false);
            t.lstrip = a.value("lstrip", false);
            t.rstrip = a.value("rstrip", false);
            t.single_word = a.value("single_word", false);
            t.normalized = a.value("normalized", !t.special);
            impl->added.add(t);
        }

        // A TemplateProcessing post-processor that starts with a special token adds a BOS.
        tok::SpecialNames names;
        const json post = j.value("post_processor", json());
        if (post.is_object() && post.value("type", "") == "TemplateProcessing" && post.contains("single") &&
            !post["single"].empty() && post["single"][0].contains("SpecialToken")) {
            names.bos = post["single"][0]["SpecialToken"].value("id", "");
            impl->add_bos = true;
        }
        impl->added.finalize();
    impl->build_tables_bpe();
        if (!config_json.empty()) tok::apply_tokenizer_config(*impl, config_json, names);
        impl->resolve_specials(names);
    } catch (const json::exception& e) {
        throw Error(ErrorCode::Format, where + ": " + e.what());
    }
    return Tokenizer(std::move(impl));
}

}  // namespace kev
