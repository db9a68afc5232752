// SentencePiece tokenizer.model (Llama 2, Mistral) -> Tokenizer, through libsentencepiece;
// and the same from a GGUF's `llama` vocabulary (tokens, scores, types), rebuilt as the
// ModelProto libsentencepiece reads.
// Control pieces (<s>, </s>) are added tokens Kev matches itself in SpecialTokens::Parse
// mode; every other segment is encoded by SentencePiece, dummy prefix and all.
#include <cstring>
#include <fstream>

#include <sentencepiece_processor.h>

#include "kev/error.h"
#include "kev/gguf.h"
#include "kev/tokenizer.h"
#include "tokenizer/tokenizer_impl.h"

namespace kev {

namespace tok {

void SpDeleter::operator()(sentencepiece::SentencePieceProcessor* p) const { delete p; }

void sp_encode(const sentencepiece::SentencePieceProcessor& sp, std::string_view text,
               std::vector<TokenId>& out) {
    std::vector<int> ids;
    const auto status = sp.Encode(absl::string_view(text.data(), text.size()), &ids);
    if (!status.ok()) throw Error(ErrorCode::InvalidArgument, "sentencepiece: " + status.ToString());
    out.insert(out.end(), ids.begin(), ids.end());
}

std::optional<TokenId> sp_piece_to_id(const sentencepiece::SentencePieceProcessor& sp, std::string_view piece) {
    const int id = sp.PieceToId(absl::string_view(piece.data(), piece.size()));
    // PieceToId answers unk for an unknown piece; only the unk piece itself maps to it.
    if (id < 0 || (id == sp.unk_id() && sp.IdToPiece(id) != piece)) return std::nullopt;
    return id;
}

}  // namespace tok

namespace {

// The tables of a loaded SentencePiece processor (pieces, their bytes, control tokens as
// added tokens), the Llama 2 / Mistral conventions, the special tokens.
std::unique_ptr<Tokenizer::Impl> finish_sentencepiece(std::unique_ptr<Tokenizer::Impl> impl,
                                                      const std::string& config_json, bool add_bos) {
    const auto& sp = *impl->sp;
    const int n = sp.GetPieceSize();
    impl->pieces.resize(n);
    impl->bytes.resize(n);
    impl->special.assign(n, 0);
    const std::string kSpaceMark = "\xE2\x96\x81";  // U+2581, SentencePiece's space
    for (int id = 0; id < n; ++id) {
        const std::string& piece = sp.IdToPiece(id);
        impl->pieces[id] = piece;
        if (sp.IsControl(id) || sp.IsUnknown(id)) {
            impl->special[id] = 1;
            impl->bytes[id] = piece;
            if (sp.IsControl(id))
                impl->added.add(tok::AddedToken{piece, id, true, false, false, false, false});
        } else if (sp.IsByte(id)) {
            impl->bytes[id] = std::string(1, static_cast<char>(std::stoi(piece.substr(3, 2), nullptr, 16)));
        } else {
            std::string b;
            for (std::size_t pos = 0; pos < piece.size();) {
                if (piece.compare(pos, kSpaceMark.size(), kSpaceMark) == 0) {
                    b += ' ';
                    pos += kSpaceMark.size();
                } else {
                    b += piece[pos++];
                }
            }
            impl->bytes[id] = b;
        }
    }
    impl->added.finalize();
    impl->add_bos = add_bos;
    impl->strip_leading_space = true;
    tok::SpecialNames names;
    auto name_of = [&](int id) -> std::optional<std::string> {
        if (id < 0 || id >= n) return std::nullopt;
        return sp.IdToPiece(id);
    };
    names.bos = name_of(sp.bos_id());
    names.eos = name_of(sp.eos_id());
    names.pad = name_of(sp.pad_id());
    names.unk = name_of(sp.unk_id());
    if (!config_json.empty()) tok::apply_tokenizer_config(*impl, config_json, names);
    impl->resolve_specials(names);
    return impl;
}

// Protocol-buffer wire format, the little of it a ModelProto needs.
void put_varint(std::string& out, std::uint64_t v) {
    while (v >= 0x80) {
        out += static_cast<char>((v & 0x7f) | 0x80);
        v >>= 7;
    }
    out += static_cast<char>(v);
}
void put_tag(std::string& out, int field, int wire) { put_varint(out, static_cast<std::uint64_t>(field) << 3 | wire); }
void put_bytes(std::string& out, int field, const std::string& bytes) {
    put_tag(out, field, 2);
    put_varint(out, bytes.size());
    out += bytes;
}
void put_int(std::string& out, int field, std::int64_t v) {
    put_tag(out, field, 0);
    put_varint(out, static_cast<std::uint64_t>(v));  // negative: ten bytes, as protobuf writes int32
}
void put_float(std::string& out, int field, float f) {
    put_tag(out, field, 5);
    char b[4];
    std::memcpy(b, &f, 4);
    out.append(b, 4);
}

}  // namespace

Tokenizer Tokenizer::from_sentencepiece(const std::string& model_path, const std::string& config_json) {
    {
        std::ifstream probe(model_path);
        if (!probe) throw Error(ErrorCode::Io, "cannot open " + model_path);
    }
    auto impl = std::make_unique<Impl>();
    impl->kind = TokenizerKind::SentencePiece;
    impl->sp.reset(new sentencepiece::SentencePieceProcessor());
    const auto status = impl->sp->Load(model_path);
    if (!status.ok()) throw Error(ErrorCode::Format, model_path + ": " + status.ToString());
    // The Llama 2 / Mistral convention; tokenizer_config.json may say otherwise.
    return Tokenizer(finish_sentencepiece(std::move(impl), config_json, true));
}

namespace tok {

std::unique_ptr<Tokenizer::Impl> sentencepiece_from_gguf(const GgufFile& gguf, const std::vector<std::string>& tokens) {
    const std::string& where = gguf.path();
    const auto scores = gguf.get_floats("tokenizer.ggml.scores").value_or(std::vector<double>());
    const auto types = gguf.get_ints("tokenizer.ggml.token_type").value_or(std::vector<std::int64_t>());
    if (scores.size() != tokens.size())
        throw Error(ErrorCode::Format, where + ": tokenizer.ggml.scores has " + std::to_string(scores.size()) +
                                           " entries for " + std::to_string(tokens.size()) + " tokens");
    if (!types.empty() && types.size() != tokens.size())
        throw Error(ErrorCode::Format, where + ": tokenizer.ggml.token_type has " + std::to_string(types.size()) +
                                           " entries for " + std::to_string(tokens.size()) + " tokens");
    // llama.cpp's SentencePiece reading: a BPE model ranked by the pieces' scores, the
    // text as it is ("identity" normalization, whitespace kept) with "\u2581" for spaces and
    // a dummy prefix unless tokenizer.ggml.add_space_prefix says otherwise; byte fallback
    // where the vocabulary has byte pieces. Built as the ModelProto libsentencepiece reads.
    bool has_bytes = false;
    std::string model;
    for (std::size_t id = 0; id < tokens.size(); ++id) {
        if (!is_valid_utf8(tokens[id]) || tokens[id].empty())
            throw Error(ErrorCode::Format, where + ": token " + std::to_string(id) + " is empty or not UTF-8");
        const std::int64_t type = types.empty() ? 1 : types[id];
        if (type < 1 || type > 6)
            throw Error(ErrorCode::Format, where + ": token " + std::to_string(id) + " has type " + std::to_string(type) +
                                               " (1 to 6: normal, unknown, control, user-defined, unused, byte)");
        has_bytes = has_bytes || type == 6;
        std::string piece;
        put_bytes(piece, 1, tokens[id]);
        put_float(piece, 2, static_cast<float>(scores[id]));
        put_int(piece, 3, type);
        put_bytes(model, 1, piece);
    }
    auto special_id = [&](const char* key, std::int64_t fallback) {
        const std::int64_t id = gguf.get_int(key).value_or(fallback);
        if (id >= static_cast<std::int64_t>(tokens.size()) || id < -1)
            throw Error(ErrorCode::Format, where + ": " + key + " is " + std::to_string(id) + ", outside the vocabulary");
        return id;
    };
    std::string trainer;
    put_int(trainer, 3, 2);  // model_type = BPE
    put_int(trainer, 4, static_cast<std::int64_t>(tokens.size()));
    if (has_bytes) put_int(trainer, 35, 1);  // byte_fallback
    put_int(trainer, 40, special_id("tokenizer.ggml.unknown_token_id", 0));
    put_int(trainer, 41, special_id("tokenizer.ggml.bos_token_id", -1));
    put_int(trainer, 42, special_id("tokenizer.ggml.eos_token_id", -1));
    put_int(trainer, 43, special_id("tokenizer.ggml.padding_token_id", -1));
    put_bytes(model, 2, trainer);
    std::string normalizer;
    put_bytes(normalizer, 1, "identity");
    put_int(normalizer, 3, gguf.get_bool("tokenizer.ggml.add_space_prefix").value_or(true) ? 1 : 0);
    put_int(normalizer, 4, 0);  // remove_extra_whitespaces
    put_int(normalizer, 5, 1);  // escape_whitespaces
    put_bytes(model, 3, normalizer);

    auto impl = std::make_unique<Tokenizer::Impl>();
    impl->kind = TokenizerKind::SentencePiece;
    impl->sp.reset(new sentencepiece::SentencePieceProcessor());
    const auto status = impl->sp->LoadFromSerializedProto(absl::string_view(model.data(), model.size()));
    if (!status.ok()) throw Error(ErrorCode::Format, where + ": the SentencePiece vocabulary: " + status.ToString());
    impl->chat_template = gguf.get_string("tokenizer.chat_template").value_or("");
    return finish_sentencepiece(std::move(impl), std::string(), gguf.get_bool("tokenizer.ggml.add_bos_token").value_or(true));
}

}  // namespace tok

}  // namespace kev
