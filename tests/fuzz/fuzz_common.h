// What every Kev fuzz target checks beyond "no memory error, no UB" (which ASan/UBSan
// report): a parser fails only with kev::Error. Any other exception escaping is a bug
// (kev-cli aborts on it), so it is left to escape and libFuzzer reports the abort.
// A broken *file* must not be reported as ErrorCode::InvalidArgument either (kev-cli maps
// that to exit 2, "usage error"): targets that parse files call file_error() in their
// catch, which aborts on it. KEV_FUZZ_LENIENT=1 turns that one check off (to look for
// deeper bugs while a known one waits for its fix).
#pragma once

#include <cstdio>
#include <cstdlib>

#include "kev/error.h"

namespace kevfuzz {

inline void file_error(const kev::Error& e, const char* parser) {
    static const bool lenient = std::getenv("KEV_FUZZ_LENIENT") != nullptr;
    if (e.code() == kev::ErrorCode::InvalidArgument && !lenient) {
        std::fprintf(stderr, "kev fuzz: %s reported a malformed file as InvalidArgument: %s\n",
                     parser, e.what());
        std::abort();
    }
}

}  // namespace kevfuzz
