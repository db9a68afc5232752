#include "lora/target_pattern.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "kev/error.h"

namespace kev {

namespace {

std::string pcre2_message(int code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(code, msg, sizeof msg);
    return reinterpret_cast<const char*>(msg);
}

}  // namespace

struct TargetPattern::Impl {
    std::string source, pattern;
    pcre2_code* code = nullptr;
    pcre2_match_context* match_ctx = nullptr;
    pcre2_match_data* match_data = nullptr;
    ~Impl() {
        pcre2_match_data_free(match_data);
        pcre2_match_context_free(match_ctx);
        pcre2_code_free(code);
    }
    [[noreturn]] void refuse(const std::string& rule) const {
        const std::string shown = pattern.size() > 60 ? pattern.substr(0, 60) + "..." : pattern;
        throw Error(ErrorCode::Format, source + ": target_modules \"" + shown + "\": " + rule);
    }
};

TargetPattern::TargetPattern(const std::string& pattern, const std::string& source) : impl_(new Impl) {
    impl_->source = source;
    impl_->pattern = pattern;
    if (pattern.size() > kMaxLength)
        impl_->refuse("the pattern is " + std::to_string(pattern.size()) + " characters long, over the limit of " +
                      std::to_string(kMaxLength));
    pcre2_compile_context* cc = pcre2_compile_context_create(nullptr);
    if (!cc) throw Error(ErrorCode::OutOfMemory, source + ": cannot compile target_modules");
    pcre2_set_parens_nest_limit(cc, kMaxNesting);
    int err = 0;
    PCRE2_SIZE offset = 0;
    // ANCHORED + ENDANCHORED: the match must cover the whole name, as re.fullmatch.
    impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                PCRE2_ANCHORED | PCRE2_ENDANCHORED, &err, &offset, cc);
    pcre2_compile_context_free(cc);
    if (!impl_->code) {
        if (err == PCRE2_ERROR_PARENTHESES_NEST_TOO_DEEP)
            impl_->refuse("parentheses nested deeper than " + std::to_string(kMaxNesting));
        impl_->refuse("not a valid regular expression (" + pcre2_message(err) + " at offset " + std::to_string(offset) +
                      ")");
    }
    impl_->match_ctx = pcre2_match_context_create(nullptr);
    impl_->match_data = pcre2_match_data_create_from_pattern(impl_->code, nullptr);
    if (!impl_->match_ctx || !impl_->match_data) throw Error(ErrorCode::OutOfMemory, source + ": cannot match target_modules");
    // No JIT: the interpreter honours both limits.
    pcre2_set_match_limit(impl_->match_ctx, kMatchLimit);
    pcre2_set_depth_limit(impl_->match_ctx, kDepthLimit);
}

TargetPattern::~TargetPattern() = default;

bool TargetPattern::full_match(const std::string& name) const {
    const int rc = pcre2_match(impl_->code, reinterpret_cast<PCRE2_SPTR>(name.data()), name.size(), 0, 0,
                               impl_->match_data, impl_->match_ctx);
    if (rc >= 0) return true;
    if (rc == PCRE2_ERROR_NOMATCH) return false;
    if (rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT || rc == PCRE2_ERROR_HEAPLIMIT)
        impl_->refuse("pattern too expensive: matching \"" + name + "\" exceeded PCRE2's " +
                      (rc == PCRE2_ERROR_MATCHLIMIT ? "step limit of " + std::to_string(kMatchLimit)
                                                    : "depth limit of " + std::to_string(kDepthLimit)) +
                      " (catastrophic backtracking); list the modules instead");
    impl_->refuse("cannot be matched (" + pcre2_message(rc) + ")");
}

}  // namespace kev
