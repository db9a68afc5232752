#include "kev/tokenizer.h"

#include <algorithm>
#include <cctype>
#include <deque>
#include <functional>

#include "kev/error.h"
#include "tokenizer/tokenizer_impl.h"

namespace kev {

namespace tok {

const std::vector<TokenId>* WordCache::find(std::string_view word, std::size_t hash) const {
    const Slot& s = slots_[hash & (kSlots - 1)];
    if (s.used && s.word == word) return &s.ids;
    return nullptr;
}

void WordCache::put(std::string_view word, std::size_t hash, const TokenId* ids, std::size_t n) {
    Slot& s = slots_[hash & (kSlots - 1)];
    s.word.assign(word.data(), word.size());
    s.ids.assign(ids, ids + n);
    s.used = true;
}

std::string Normalizer::apply(std::string_view text) const {
    switch (kind) {
        case Kind::Form: return normalize(text, form);
        case Kind::Prepend: return text.empty() ? std::string() : content + std::string(text);
        case Kind::Replace: {
            if (pattern.empty()) return std::string(text);
            std::string out;
            std::size_t at = 0;
            for (std::size_t hit; (hit = text.find(pattern, at)) != std::string_view::npos; at = hit + pattern.size()) {
                out.append(text, at, hit - at);
                out += content;
            }
            out.append(text, at, std::string_view::npos);
            return out;
        }
    }
    return std::string(text);
}

}  // namespace tok

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

std::optional<TokenId> Tokenizer::Impl::lookup(std::string_view piece) const {
    if (const tok::AddedToken* t = added.find_content(piece)) return t->id;
    if (bpe) return bpe->find(piece);
    if (sp) return tok::sp_piece_to_id(*sp, piece);
    return std::nullopt;
}

namespace {
// "<0xAB>": SentencePiece's byte tokens (byte fallback).
bool is_byte_token(const std::string& piece) {
    return piece.size() == 6 && piece.compare(0, 3, "<0x") == 0 && piece[5] == '>' &&
           std::isxdigit(static_cast<unsigned char>(piece[3])) && std::isxdigit(static_cast<unsigned char>(piece[4]));
}
}  // namespace

void Tokenizer::Impl::build_tables_bpe() {
    // The loaders check ids as they read them; this is the last guard before ids index the
    // tables (a negative id would write before them).
    TokenId max_id = -1;
    auto check = [&](TokenId id, std::string_view piece) {
        if (id < 0 || id > tok::kMaxTokenId)
            throw Error(ErrorCode::Format, "tokenizer: token '" + std::string(piece) + "' has id " + std::to_string(id) +
                                               "; ids must be from 0 to " + std::to_string(tok::kMaxTokenId));
        max_id = std::max(max_id, id);
    };
    for (const auto& [piece, id] : bpe->vocab()) check(id, piece);
    for (const tok::AddedToken& t : added.tokens()) check(t.id, t.content);
    const std::size_t n = static_cast<std::size_t>(max_id + 1);
    pieces.assign(n, std::string());
    bytes.assign(n, std::string());
    special.assign(n, 0);
    for (const auto& [piece, id] : bpe->vocab()) {
        pieces[id] = piece;
        std::string& b = bytes[id];
        if (bpe->byte_level()) {
            std::size_t i = 0;
            while (i < piece.size()) {
                const std::size_t start = i;
                const std::uint32_t cp = tok::next_code_point(piece, i);
                const int byte = tok::unicode_to_byte(cp);
                if (byte >= 0) b += static_cast<char>(byte);
                else b.append(piece, start, i - start);
            }
        } else if (is_byte_token(piece)) {
            b += static_cast<char>(std::stoi(piece.substr(3, 2), nullptr, 16));
        } else if (!space_marker.empty()) {
            b = tok::Normalizer{tok::Normalizer::Kind::Replace, tok::NormalForm::NFC, space_marker, " "}.apply(piece);
        } else {
            b = piece;
        }
    }
    for (const tok::AddedToken& t : added.tokens()) {
        pieces[t.id] = t.content;
        bytes[t.id] = t.content;
        special[t.id] = t.special ? 1 : 0;
        // With byte fallback, "<0xAB>" reads as that byte even when it is an added token
        // (a trainer given the byte tokens as special tokens makes them so); the
        // ByteFallback decoder converts it all the same.
        if (bpe->byte_fallback() && is_byte_token(t.content))
            bytes[t.id] = std::string(1, static_cast<char>(std::stoi(t.content.substr(3, 2), nullptr, 16)));
    }
}

void Tokenizer::Impl::resolve_specials(const tok::SpecialNames& names) {
    auto find = [&](const std::optional<std::string>& name) -> std::optional<TokenId> {
        if (!name || name->empty()) return std::nullopt;
        return lookup(*name);
    };
    if (names.bos) ids.bos = find(names.bos);
    if (names.eos) ids.eos = find(names.eos);
    if (names.pad) ids.pad = find(names.pad);
    if (names.unk) ids.unk = find(names.unk);
    ids.end_of_generation.clear();
    if (ids.eos) ids.end_of_generation.push_back(*ids.eos);
    static const char* const kEndMarkers[] = {"<|im_end|>", "<|endoftext|>", "<|eot_id|>",
                                              "<|end_of_text|>", "<|eom_id|>", "</s>",
                                              "<|end|>", "<end_of_turn>"};
    for (const char* marker : kEndMarkers) {
        const tok::AddedToken* t = added.find_content(marker);
        if (!t || !t->special) continue;
        if (std::find(ids.end_of_generation.begin(), ids.end_of_generation.end(), t->id) ==
            ids.end_of_generation.end())
            ids.end_of_generation.push_back(t->id);
    }
}

void Tokenizer::Impl::encode_plain(std::string_view text, std::vector<TokenId>& out, bool use_cache,
                                   bool at_start) const {
    thread_local std::vector<std::string_view> words;
    thread_local std::deque<std::string> arena;
    arena.clear();
    pre.split(text, words, arena, at_start);
    const std::hash<std::string_view> hasher;
    for (std::string_view word : words) {
        if (use_cache && word.size() <= tok::WordCache::kMaxWordBytes) {
            const std::size_t h = hasher(word);
            if (const std::vector<TokenId>* hit = cache.find(word, h)) {
                out.insert(out.end(), hit->begin(), hit->end());
                continue;
            }
            const std::size_t before = out.size();
            bpe->encode_word(word, out);
            cache.put(word, h, out.data() + before, out.size() - before);
        } else {
            bpe->encode_word(word, out);
        }
    }
}

std::vector<TokenId> Tokenizer::encode(std::string_view text, SpecialTokens specials) const {
    return impl_->encode(text, specials, nullptr);
}

std::vector<TokenId> Tokenizer::encode(std::string_view text, const std::vector<TextRange>& plain) const {
    std::vector<TextRange> sorted;
    for (const TextRange& r : plain) {
        if (r.begin > r.end || r.end > text.size())
            throw Error(ErrorCode::InvalidArgument, "tokenizer: a plain-text range lies outside the text");
        if (r.begin < r.end) sorted.push_back(r);
    }
    std::sort(sorted.begin(), sorted.end(), [](const TextRange& a, const TextRange& b) { return a.begin < b.begin; });
    return impl_->encode(text, SpecialTokens::Parse, &sorted);
}

std::vector<TokenId> Tokenizer::Impl::encode(std::string_view text, SpecialTokens specials,
                                             const std::vector<TextRange>* plain) const {
    if (!tok::is_valid_utf8(text))
        throw Error(ErrorCode::InvalidArgument, "tokenizer: the text is not valid UTF-8");
    const Impl& m = *this;
    std::vector<TokenId> out;
    out.reserve(text.size() / 3 + 4);

    std::vector<tok::AddedVocab::Piece> raw;
    m.added.split(text, /*normalized=*/false, specials, raw, plain);

    // One thread at a time uses the word cache; a concurrent caller encodes without it
    // rather than wait.
    std::unique_lock<std::mutex> lock(m.cache_mutex, std::try_to_lock);
    const bool use_cache = lock.owns_lock();

    std::vector<tok::AddedVocab::Piece> normalized_pieces;
    for (const auto& piece : raw) {
        if (piece.id >= 0) {
            out.push_back(piece.id);
            continue;
        }
        std::string normalized;
        std::string_view segment = piece.text;
        if (!m.normalizers.empty()) {
            normalized = m.normalizers[0].apply(segment);
            for (std::size_t k = 1; k < m.normalizers.size(); ++k) normalized = m.normalizers[k].apply(normalized);
            segment = normalized;
        }
        normalized_pieces.clear();
        // Normalizing moves bytes, so the typed ranges cannot follow into the normalized
        // text: a piece that holds typed text is split with its special tokens plain.
        SpecialTokens piece_specials = specials;
        if (plain) {
            const std::size_t at = static_cast<std::size_t>(piece.text.data() - text.data());
            for (const TextRange& r : *plain)
                if (r.begin < at + piece.text.size() && at < r.end) piece_specials = SpecialTokens::Plain;
        }
        if (m.added.has_normalized()) m.added.split(segment, /*normalized=*/true, piece_specials, normalized_pieces);
        else normalized_pieces.push_back({segment, -1});
        for (const auto& sub : normalized_pieces) {
            if (sub.id >= 0) {
                out.push_back(sub.id);
            } else if (m.sp) {
                tok::sp_encode(*m.sp, sub.text, out);
            } else {
                // Where the input starts: the first piece, before any special token.
                const bool at_start = piece.text.data() == text.data() && sub.text.data() == segment.data();
                m.encode_plain(sub.text, out, use_cache, at_start);
            }
        }
    }
    return out;
}

std::string Tokenizer::decode(const std::vector<TokenId>& ids, SpecialText special) const {
    const Impl& m = *impl_;
    std::string raw;
    bool first = true;
    for (TokenId id : ids) {
        if (id < 0 || static_cast<std::size_t>(id) >= m.bytes.size())
            throw Error(ErrorCode::InvalidArgument, "decode: token id " + std::to_string(id) + " is outside the vocabulary");
        if (m.special[id] && special == SpecialText::Hide) continue;
        if (first && m.first_token_drops_spaces) raw += first_token_text(m.bytes[id]);
        else raw += m.bytes[id];
        first = false;
    }
    std::string text;
    tok::utf8_lossy_append(raw, text, /*final=*/true);
    if (m.strip_leading_space && !text.empty() && text[0] == ' ') text.erase(0, 1);
    return text;
}

std::string Tokenizer::token_bytes(TokenId id) const {
    if (id < 0 || static_cast<std::size_t>(id) >= impl_->bytes.size())
        throw Error(ErrorCode::InvalidArgument, "token id " + std::to_string(id) + " is outside the vocabulary");
    return impl_->bytes[id];
}

std::string Tokenizer::id_to_piece(TokenId id) const {
    if (id < 0 || static_cast<std::size_t>(id) >= impl_->pieces.size())
        throw Error(ErrorCode::InvalidArgument, "token id " + std::to_string(id) + " is outside the vocabulary");
    return impl_->pieces[id];
}

std::optional<TokenId> Tokenizer::piece_to_id(std::string_view piece) const { return impl_->lookup(piece); }

bool Tokenizer::is_special(TokenId id) const {
    return id >= 0 && static_cast<std::size_t>(id) < impl_->special.size() && impl_->special[id];
}

bool Tokenizer::is_end_of_generation(TokenId id) const {
    const auto& v = impl_->ids.end_of_generation;
    return std::find(v.begin(), v.end(), id) != v.end();
}

int Tokenizer::vocab_size() const { return static_cast<int>(impl_->pieces.size()); }
const SpecialTokenIds& Tokenizer::special_ids() const { return impl_->ids; }
bool Tokenizer::adds_bos() const { return impl_->add_bos && impl_->ids.bos.has_value(); }
bool Tokenizer::strips_leading_space() const { return impl_->strip_leading_space; }

std::string Tokenizer::first_token_text(std::string bytes) const {
    if (impl_->first_token_drops_spaces) {
        bytes.erase(std::remove(bytes.begin(), bytes.end(), ' '), bytes.end());
    } else if (impl_->strip_leading_space && !bytes.empty() && bytes[0] == ' ') {
        bytes.erase(0, 1);
    }
    return bytes;
}
TokenizerKind Tokenizer::kind() const { return impl_->kind; }
const std::string& Tokenizer::chat_template_source() const { return impl_->chat_template; }
std::string Tokenizer::bos_text() const { return impl_->ids.bos ? impl_->pieces[*impl_->ids.bos] : std::string(); }
std::string Tokenizer::eos_text() const { return impl_->ids.eos ? impl_->pieces[*impl_->ids.eos] : std::string(); }

}  // namespace kev
