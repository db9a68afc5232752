// adapter_config.json's target_modules given as one regular expression, matched the
// way PEFT does (re.fullmatch on the module name), but on PCRE2 with limits: a pattern
// from the internet must neither hang the load ("(.*.*)*X" backtracks exponentially in
// std::regex) nor overflow the stack (20,000 nested brackets).
#pragma once

#include <memory>
#include <string>

namespace kev {

class TargetPattern {
public:
    static constexpr std::size_t kMaxLength = 1000;      // characters
    static constexpr unsigned kMaxNesting = 32;          // parentheses
    static constexpr unsigned kMatchLimit = 200000;      // backtracking steps per module name
    static constexpr unsigned kDepthLimit = 2000;        // nested backtracking frames

    // Compiles `pattern`. Throws kev::Error(Format) naming `source`, the field
    // target_modules and the rule (too long, nested too deep, not a valid expression).
    TargetPattern(const std::string& pattern, const std::string& source);
    ~TargetPattern();
    TargetPattern(const TargetPattern&) = delete;
    TargetPattern& operator=(const TargetPattern&) = delete;

    // True when the whole of `name` matches. Throws kev::Error(Format) ("pattern too
    // expensive") when matching hits the step or depth limit.
    bool full_match(const std::string& name) const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace kev
