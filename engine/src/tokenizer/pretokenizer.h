// Pre-tokenization: cutting normalized text into the words BPE works on.
//
// Every pre-tokenizer Kev supports reduces to a chain of "Isolated" regex splits: each
// match becomes a word, and so does each stretch between matches. ByteLevel may also put
// a space in front of each word (add_prefix_space); its byte mapping itself is done by the
// BPE model, which starts from bytes. Regexes run on PCRE2 with UTF+UCP and the JIT, so
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

class Regex {
public:
    explicit Regex(const std::string& pattern);  // throws Error(Format) naming the pattern
    ~Regex();
    Regex(const Regex&) = delete;
    Regex& operator=(const Regex&) = delete;

    // Appends the Isolated split of `text` to `out`.
    void split_isolated(std::string_view text, std::vector<std::string_view>& out) const;
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
extern const char* const kDigit;   // Digits(individual_digits=true)
extern const char* const kDigits;  // Digits(individual_digits=false)
}  // namespace patterns

class PreTokenizer {
public:
    void add_split(const std::string& pattern);
    void add_prefix_space();  // ByteLevel(add_prefix_space=true) at this point of the chain
    bool empty() const { return steps_.empty(); }

    // Splits `text` into words (views into `text` or into `arena`, which owns the words
    // that received a prefix space). `out` is cleared first.
    void split(std::string_view text, std::vector<std::string_view>& out,
               std::deque<std::string>& arena) const;

private:
    struct Step {
        std::shared_ptr<const Regex> regex;  // null: prefix-space step
    };
    std::vector<Step> steps_;
};

}  // namespace kev::tok
