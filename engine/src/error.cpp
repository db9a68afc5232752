#include "kev/error.h"

namespace kev {

const char* to_string(ErrorCode code) {
    switch (code) {
        case ErrorCode::InvalidArgument: return "invalid argument";
        case ErrorCode::Io: return "i/o error";
        case ErrorCode::Format: return "malformed file";
        case ErrorCode::Unsupported: return "unsupported";
        case ErrorCode::Refused: return "refused";
        case ErrorCode::OutOfMemory: return "out of memory";
        case ErrorCode::Cancelled: return "cancelled";
    }
    return "error";
}

}  // namespace kev
