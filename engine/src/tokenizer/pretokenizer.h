// Pre-tokenization: cutting normalized text into the words BPE works on.
//
// Every pre-tokenizer Kev supports reduces to a chain of steps over the words so far:
// regex splits with tokenizers' delimiter behaviours (Isolated: each match becomes a
// word, and so does each stretch between matches; Removed, MergedWithPrevious,
// MergedWithNext, Contiguous as the tokenizers library defines them), ByteLevel's
// prefix space (add_prefix_space; its byte mapping itself is done by the BPE model,
// which starts from bytes), and Metaspace (SentencePiece-style: spaces become the
// replacement character '▁', one is put in front per its prepend scheme, and words may
// be cut before each one). Regexes run on PCRE2 with UTF+UCP and the JIT, so
// \p{L}, \p{N}, \s and look-ahead behave as in the models' own (Oniguruma) patterns;
// \s is spelled out as Unicode White_Space, Oniguruma's meaning (see onig_compatible).
//
// Known limit: a property is only as new as the library's Unicode tables. Debian 12's PCRE2
// (10.42) knows Unicode 14; the tokenizers library's Oniguruma knows later characters
// (CJK Extension H/I, Kawi, Nag Mundari, ...), so around such a character the words can be
// cut differently. Measured: every difference on random text involved one of them.
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kev::tok {

// How a split treats the matches (tokenizers' SplitDelimiterBehavior).
enum class SplitBehavior { Isolated, Removed, MergedWithPrevious, MergedWithNext, Contiguous };

class Regex {
public:
    explicit Regex(const std::string& pattern);  // throws Error(Format) naming the pattern
    ~Regex();
    Regex(const Regex&) = delete;
    Regex& operator=(const Regex&) = delete;

    // Appends the split of `text` to `out` (empty pieces are dropped).
    void split(std::string_view text, SplitBehavior behavior, std::vector<std::string_view>& out) const;
    void split_isolated(std::string_view text, std::vector<std::string_view>& out) const {
        split(text, SplitBehavior::Isolated, out);
    }
    const std::string& pattern() const { return pattern_; }

private:
    std::string pattern_;
    void* code_ = nullptr;  // pcre2_code_8
};

// The patterns the models use (and the GGUF pre-tokenizer names map to).
namespace patterns {
extern const char* const kGpt2;    // GPT-2 / ByteLevel(use_regex=true)
extern const char* const kQwen2;   // Qwen2/2.5/3 and cl100k-style, one digit per word
extern const char* const kLlama3;  // Llama 3: digits in groups of up to three
extern const char* const kGpt4o;   // o200k (GPT-4o, Phi-4-mini, Llama 4): case-aware words
extern const char* const kDigit;   // Digits(individual_digits=true)
extern const char* const kDigits;  // Digits(individual_digits=false)
}  // namespace patterns

// Metaspace's prepend scheme: put the replacement in front of every word that lacks
// it, only in front of the text's first word, or never.
enum class PrependScheme { Always, First, Never };

class PreTokenizer {
public:
    void add_split(const std::string& pattern, SplitBehavior behavior = SplitBehavior::Isolated);
    void add_prefix_space();  // ByteLevel(add_prefix_space=true) at this point of the chain
    void add_metaspace(const std::string& replacement, PrependScheme scheme, bool split);
    bool empty() const { return steps_.empty(); }

    // Splits `text` into words (views into `text` or into `arena`, which owns the words
    // a step rewrote). `out` is cleared first. `at_start`: `text` begins the input (after
    // no special token), where Metaspace's First scheme prepends.
    void split(std::string_view text, std::vector<std::string_view>& out, std::deque<std::string>& arena,
               bool at_start = true) const;

private:
    enum class Kind { Regex, PrefixSpace, Metaspace };
    struct Step {
        Kind kind = Kind::Regex;
        std::shared_ptr<const Regex> regex;
        SplitBehavior behavior = SplitBehavior::Isolated;
        std::string replacement;  // Metaspace
        PrependScheme scheme = PrependScheme::Always;
        bool split = false;
    };
    std::vector<Step> steps_;
};

}  // namespace kev::tok
