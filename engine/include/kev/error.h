// Errors the engine reports. Every public engine call either succeeds or throws
// kev::Error with a code and a message that names the file, key or tensor at fault;
// on failure the callee's state is unchanged. The engine never calls exit().
#pragma once

#include <stdexcept>
#include <string>

namespace kev {

enum class ErrorCode {
    InvalidArgument,  // a caller passed something absurd (empty question, negative top-k, ...)
    Io,               // a file could not be opened, read or mapped
    Format,           // a file is malformed: bad magic, out-of-bounds offset, wrong type, ...
    Unsupported,      // well-formed but not something Kev implements (by name)
    Refused,          // deliberately not done, e.g. pickle checkpoints
    OutOfMemory,      // a size check before allocation failed
    Cancelled,        // the caller asked to stop
};

const char* to_string(ErrorCode code);

class Error : public std::runtime_error {
public:
    Error(ErrorCode code, const std::string& message)
        : std::runtime_error(message), code_(code) {}
    ErrorCode code() const noexcept { return code_; }

private:
    ErrorCode code_;
};

}  // namespace kev
