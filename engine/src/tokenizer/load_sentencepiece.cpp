// SentencePiece tokenizer.model (Llama 2, Mistral) -> Tokenizer, through libsentencepiece.
// Control pieces (<s>, </s>) are added tokens Kev matches itself in SpecialTokens::Parse
// mode; every other segment is encoded by SentencePiece, dummy prefix and all.
#include <fstream>

#include <sentencepiece_processor.h>

#include "kev/error.h"
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
    impl->add_bos = true;  // the Llama 2 / Mistral convention; tokenizer_config.json may say otherwise
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
    return Tokenizer(std::move(impl));
}

}  // namespace kev
