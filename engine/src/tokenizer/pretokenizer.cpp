#include "tokenizer/pretokenizer.h"

#include <algorithm>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "kev/error.h"

namespace kev::tok {

namespace patterns {
const char* const kGpt2 =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const char* const kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// OpenAI's o200k split (GPT-4o; Phi-4-mini and Llama 4 use it): words keep a leading
// uppercase run and a trailing contraction, digits in threes, "/" joins punctuation runs.
const char* const kGpt4o =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kDigit = R"(\p{N})";
const char* const kDigits = R"(\p{N}+)";
}  // namespace patterns

namespace {

pcre2_code* as_code(void* p) { return static_cast<pcre2_code*>(p); }

// One match-data block per thread, grown on demand: a split is called once per text
// segment, and allocating match data each time would cost more than short matches.
pcre2_match_data* thread_match_data() {
    struct Holder {
        pcre2_match_data* md = pcre2_match_data_create(32, nullptr);
        ~Holder() { pcre2_match_data_free(md); }
    };
    thread_local Holder holder;
    return holder.md;
}

// Unicode White_Space, which is what \s means in Oniguruma (the regex engine of the
// tokenizers library). PCRE2's \s in UCP mode also matches U+180E, which Unicode stopped
// calling a space in 6.3, so patterns get this class spelled out instead.
const char kWhiteSpace[] =
    R"(\t\n\x{0B}\f\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

// Rewrites \s and \S (outside character classes) and \s (inside them) to kWhiteSpace.
// \S inside a class has no such spelling and is left to PCRE2.
std::string onig_compatible(const std::string& pattern) {
    std::string out;
    bool in_class = false;
    for (std::size_t i = 0; i < pattern.size(); ++i) {
        const char c = pattern[i];
        if (c == '\\' && i + 1 < pattern.size()) {
            const char e = pattern[i + 1];
            if (e == 's') out += in_class ? std::string(kWhiteSpace) : "[" + std::string(kWhiteSpace) + "]";
            else if (e == 'S' && !in_class) out += "[^" + std::string(kWhiteSpace) + "]";
            else out.append(pattern, i, 2);
            ++i;
            continue;
        }
        if (c == '[' && !in_class) {
            in_class = true;
            out += c;
            // A ']' right after '[' or '[^' is a literal, not the end of the class.
            if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
            if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
            continue;
        }
        if (c == ']' && in_class) in_class = false;
        out += c;
    }
    return out;
}

}  // namespace

Regex::Regex(const std::string& pattern) : pattern_(pattern) {
    int err = 0;
    PCRE2_SIZE offset = 0;
    const std::string compiled = onig_compatible(pattern);
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(compiled.data()), compiled.size(),
                                     PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &err, &offset,
                                     nullptr);
    if (!code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        throw Error(ErrorCode::Format, "pre-tokenizer regex '" + pattern + "' at offset " +
                                           std::to_string(offset) + ": " +
                                           reinterpret_cast<const char*>(msg));
    }
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if no JIT
    code_ = code;
}

Regex::~Regex() { pcre2_code_free(as_code(code_)); }

namespace {

// Pieces of a text: [begin, end) and whether the piece is a match.
struct Piece {
    std::size_t begin, end;
    bool match;
};

// tokenizers' delimiter behaviours over the partition of a text into matches and the
// stretches between them (normalizer.rs: NormalizedString::split); empty pieces dropped.
void emit(std::string_view text, const std::vector<Piece>& pieces, SplitBehavior behavior,
          std::vector<std::string_view>& out) {
    std::vector<Piece> merged;
    switch (behavior) {
        case SplitBehavior::Isolated: merged = pieces; break;
        case SplitBehavior::Removed:
            for (const Piece& p : pieces)
                if (!p.match) merged.push_back(p);
            break;
        case SplitBehavior::Contiguous:
            for (const Piece& p : pieces) {
                if (p.match && !merged.empty() && merged.back().match) merged.back().end = p.end;
                else merged.push_back(p);
            }
            break;
        case SplitBehavior::MergedWithPrevious: {
            bool previous_match = false;
            for (const Piece& p : pieces) {
                if (p.match && !previous_match && !merged.empty()) merged.back().end = p.end;
                else merged.push_back({p.begin, p.end, false});
                previous_match = p.match;
            }
            break;
        }
        case SplitBehavior::MergedWithNext: {
            bool next_match = false;  // walking backwards: whether the piece after was a match
            for (auto it = pieces.rbegin(); it != pieces.rend(); ++it) {
                if (it->match && !next_match && !merged.empty()) merged.back().begin = it->begin;
                else merged.push_back({it->begin, it->end, false});
                next_match = it->match;
            }
            std::reverse(merged.begin(), merged.end());
            break;
        }
    }
    for (const Piece& p : merged)
        if (p.end > p.begin) out.push_back(text.substr(p.begin, p.end - p.begin));
}

}  // namespace

void Regex::split(std::string_view text, SplitBehavior behavior, std::vector<std::string_view>& out) const {
    pcre2_match_data* md = thread_match_data();
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    const std::size_t n = text.size();
    std::size_t pos = 0;   // where the next search starts
    std::size_t done = 0;  // end of the last piece
    const bool isolated = behavior == SplitBehavior::Isolated;
    thread_local std::vector<Piece> pieces;
    pieces.clear();
    while (pos < n) {
        // The text was validated once before encoding; no per-call UTF check.
        const int rc = pcre2_match(as_code(code_), subject, n, pos, PCRE2_NO_UTF_CHECK, md, nullptr);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            throw Error(ErrorCode::InvalidArgument, std::string("pre-tokenizer regex match: ") +
                                                        reinterpret_cast<const char*>(msg));
        }
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
        const std::size_t start = ov[0], end = ov[1];
        if (end == start) {
            // An empty match would loop forever; step over one character.
            pos = start + 1;
            while (pos < n && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) ++pos;
            continue;
        }
        if (isolated) {  // every model's common case: words straight out, no piece list
            if (start > done) out.push_back(text.substr(done, start - done));
            out.push_back(text.substr(start, end - start));
        } else {
            if (start > done) pieces.push_back({done, start, false});
            pieces.push_back({start, end, true});
        }
        done = pos = end;
    }
    if (isolated) {
        if (done < n) out.push_back(text.substr(done));
        return;
    }
    if (done < n) pieces.push_back({done, n, false});
    emit(text, pieces, behavior, out);
}

void PreTokenizer::add_split(const std::string& pattern, SplitBehavior behavior) {
    Step step;
    step.regex = std::make_shared<const Regex>(pattern);
    step.behavior = behavior;
    steps_.push_back(std::move(step));
}

void PreTokenizer::add_prefix_space() {
    Step step;
    step.kind = Kind::PrefixSpace;
    steps_.push_back(std::move(step));
}

void PreTokenizer::add_metaspace(const std::string& replacement, PrependScheme scheme, bool split) {
    Step step;
    step.kind = Kind::Metaspace;
    step.replacement = replacement;
    step.scheme = scheme;
    step.split = split;
    steps_.push_back(std::move(step));
}

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& out, std::deque<std::string>& arena,
                         bool at_start) const {
    out.clear();
    if (text.empty()) return;
    out.push_back(text);
    std::vector<std::string_view> next;
    for (const Step& step : steps_) {
        next.clear();
        for (std::size_t w = 0; w < out.size(); ++w) {
            const std::string_view word = out[w];
            switch (step.kind) {
                case Kind::Regex: step.regex->split(word, step.behavior, next); break;
                case Kind::PrefixSpace:
                    if (!word.empty() && word.front() != ' ') {
                        arena.push_back(" " + std::string(word));
                        next.push_back(arena.back());
                    } else {
                        next.push_back(word);
                    }
                    break;
                case Kind::Metaspace: {
                    // Spaces become the replacement; the prefix goes where the scheme says
                    // and the word does not start with one already (tokenizers' Metaspace).
                    std::string s;
                    s.reserve(word.size() + step.replacement.size());
                    for (char c : word) {
                        if (c == ' ') s += step.replacement;
                        else s += c;
                    }
                    const bool starts = s.compare(0, step.replacement.size(), step.replacement) == 0;
                    const bool first = at_start && w == 0 && word.data() == out[0].data();
                    if (!starts && (step.scheme == PrependScheme::Always || (step.scheme == PrependScheme::First && first)))
                        s.insert(0, step.replacement);
                    arena.push_back(std::move(s));
                    const std::string_view rewritten = arena.back();
                    if (!step.split) {
                        next.push_back(rewritten);
                        break;
                    }
                    // A new word before every replacement (MergedWithNext).
                    std::size_t begin = 0;
                    for (std::size_t at = rewritten.find(step.replacement, 1);
                         at != std::string_view::npos; at = rewritten.find(step.replacement, at + step.replacement.size())) {
                        next.push_back(rewritten.substr(begin, at - begin));
                        begin = at;
                    }
                    next.push_back(rewritten.substr(begin));
                    break;
                }
            }
        }
        out.swap(next);
    }
}

}  // namespace kev::tok
