// Reading a small text file (config.json, tokenizer.json, a question file) whole, and
// the check that a path names a regular file before anything opens it. A FIFO, a
// device such as /dev/zero or a folder given where a file is expected would otherwise
// block open() or read forever; they are refused by stat() before any open.
#pragma once

#include <cstdint>
#include <string>

namespace kev {

// The default size limit of read_text_file: generous for any real config or
// tokenizer.json (the largest seen are ~35 MB), small enough to refuse /dev/zero-like
// input before it eats memory.
constexpr std::uint64_t kMaxJsonFileBytes = std::uint64_t(64) << 20;

// Throws kev::Error(Io) "<path>: not a regular file (a FIFO|a device|a folder|...)"
// unless `path` names a regular file (symbolic links followed), or "<path>: cannot
// open: <errno text>" when it does not exist. `what` (may be null) names the role in
// the message, e.g. "model file". Returns the file's size in bytes.
std::uint64_t require_regular_file(const std::string& path, const char* what = nullptr);

// The file's bytes. Throws kev::Error(Io) naming the path when it is not a regular
// file, cannot be read, or is larger than `max_bytes` ("<path>: 100000000 bytes, over
// the 64 MiB limit for a JSON file"; `what` names the kind of file in that message).
std::string read_text_file(const std::string& path, std::uint64_t max_bytes = kMaxJsonFileBytes,
                           const char* what = "a JSON file");

}  // namespace kev
