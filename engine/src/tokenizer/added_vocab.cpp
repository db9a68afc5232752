#include "tokenizer/added_vocab.h"

#include <algorithm>

#include "tokenizer/unicode.h"

namespace kev::tok {

namespace {

std::uint32_t last_code_point(std::string_view s) {
    std::size_t i = s.size();
    while (i > 0 && (static_cast<unsigned char>(s[i - 1]) & 0xC0) == 0x80) --i;
    if (i > 0) --i;
    std::size_t j = i;
    return next_code_point(s, j);
}

}  // namespace

void AddedVocab::add(const AddedToken& token) {
    if (token.content.empty()) return;
    auto it = by_content_.find(token.content);
    if (it != by_content_.end()) {
        tokens_[it->second] = token;
    } else {
        by_content_.emplace(token.content, tokens_.size());
        tokens_.push_back(token);
    }
}

void AddedVocab::finalize() {
    by_id_.clear();
    has_normalized_ = false;
    for (auto& list : first_)
        for (auto& v : list) v.clear();
    for (std::size_t i = 0; i < tokens_.size(); ++i) {
        const AddedToken& t = tokens_[i];
        by_id_[t.id] = i;
        has_normalized_ = has_normalized_ || t.normalized;
        first_[t.normalized ? 1 : 0][static_cast<unsigned char>(t.content[0])].push_back(i);
    }
    for (auto& list : first_)
        for (auto& v : list)
            std::stable_sort(v.begin(), v.end(), [&](std::size_t a, std::size_t b) {
                return tokens_[a].content.size() > tokens_[b].content.size();
            });
}

const AddedToken* AddedVocab::find_id(TokenId id) const {
    auto it = by_id_.find(id);
    return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

const AddedToken* AddedVocab::find_content(std::string_view content) const {
    auto it = by_content_.find(std::string(content));
    return it == by_content_.end() ? nullptr : &tokens_[it->second];
}

namespace {

// Whether [begin, end) overlaps one of the sorted ranges; `next` walks forward with the
// calls (their `begin` never decreases).
bool overlaps(const std::vector<TextRange>& ranges, std::size_t& next, std::size_t begin, std::size_t end) {
    while (next < ranges.size() && ranges[next].end <= begin) ++next;
    return next < ranges.size() && ranges[next].begin < end;
}

}  // namespace

void AddedVocab::split(std::string_view text, bool normalized, SpecialTokens mode,
                       std::vector<Piece>& out, const std::vector<TextRange>* plain) const {
    std::size_t next_range = 0;
    const auto& first = first_[normalized ? 1 : 0];
    std::size_t plain_start = 0;  // start of the text not yet emitted
    std::size_t i = 0;
    const std::size_t n = text.size();
    while (i < n) {
        const auto& candidates = first[static_cast<unsigned char>(text[i])];
        const AddedToken* match = nullptr;
        for (std::size_t idx : candidates) {
            const AddedToken& t = tokens_[idx];
            if (text.compare(i, t.content.size(), t.content) == 0) {
                match = &t;  // longest first, so the first hit is the leftmost-longest match
                break;
            }
        }
        if (!match) {
            ++i;
            continue;
        }
        std::size_t start = i, stop = i + match->content.size();
        // A skipped match still consumes its text (the matcher does not look inside it).
        i = stop;
        if (match->special && mode == SpecialTokens::Plain) continue;
        if (match->special && plain && overlaps(*plain, next_range, start, stop)) {
            // Typed by the user: plain text. A match that is not wholly inside the typed
            // text is looked at again from its next byte, so that a token of the
            // template's own next to the typed text is still found.
            const TextRange& r = (*plain)[next_range];
            if (r.begin > start || r.end < stop) i = start + 1;
            continue;
        }
        if (match->single_word) {
            const bool word_before = start > 0 && is_word_char(last_code_point(text.substr(0, start)));
            std::size_t k = stop;
            const bool word_after = stop < n && is_word_char(next_code_point(text, k));
            if (word_before || word_after) continue;
        }
        if (match->lstrip) {
            while (start > plain_start) {
                std::size_t b = start;
                while (b > plain_start && (static_cast<unsigned char>(text[b - 1]) & 0xC0) == 0x80) --b;
                if (b > plain_start) --b;
                std::size_t k = b;
                if (!is_whitespace(next_code_point(text, k))) break;
                start = b;
            }
        }
        if (match->rstrip) {
            while (stop < n) {
                std::size_t k = stop;
                if (!is_whitespace(next_code_point(text, k))) break;
                stop = k;
            }
            i = stop;
        }
        if (start > plain_start) out.push_back(Piece{text.substr(plain_start, start - plain_start), -1});
        out.push_back(Piece{text.substr(start, stop - start), match->id});
        plain_start = stop;
    }
    if (plain_start < n) out.push_back(Piece{text.substr(plain_start), -1});
}

}  // namespace kev::tok
