// kev-cli's defences against hostile input from the command line and from the files it
// names: numbers parsed with their whole range checked, files refused by kind (a folder,
// a FIFO, a device) before they are opened and read with a size limit, pickles refused by
// their magic bytes, and JSON written so that bytes that are not UTF-8 cannot abort it.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace kevcli {

// A mistake in the command line itself: exit 2. Problems inside a file the command line
// names are kev::Error (Io, Format, Refused): exit 1.
struct UsageError {
    std::string message;
};

// Whole numbers and reals of an option value. Throws UsageError naming the flag: not a
// number ("--top-k expects a whole number, got 'x'"), trailing junk, or outside
// [min, max] ("--top-k: 4294967297 is out of range (0..2147483647)"). Reals must be
// finite (no nan, inf, or a value that overflows a float).
std::int64_t parse_integer(const std::string& flag, const std::string& value, std::int64_t min, std::int64_t max);
std::uint64_t parse_unsigned(const std::string& flag, const std::string& value);
float parse_real(const std::string& flag, const std::string& value);

// Limits on what kev-cli reads whole into memory.
constexpr std::uint64_t kMaxQuestionFileBytes = std::uint64_t(16) << 20;
constexpr std::uint64_t kMaxSharedContextBytes = std::uint64_t(16) << 20;

// Throws kev::Error(Io) unless `path` is a regular file (symbolic links followed):
// "<path>: is a directory", "<path>: not a regular file (a FIFO)", "<path>: no such file".
// Nothing is opened: stat() only. Returns the size in bytes.
std::uint64_t require_regular_file(const std::string& path);

// The bytes of a regular file of at most `max_bytes` (checked before reading, and while
// reading in case the file grows). `what` names the kind in the limit message:
// "<path>: 20000000 bytes, over the 16 MiB limit for a question file".
std::string read_file_limited(const std::string& path, std::uint64_t max_bytes, const char* what);

// A model path given directly: a special file (a FIFO, a device) is refused with
// kev::Error(Io) before anything opens it, a pickle checkpoint (by content or by name,
// kev::refuse_pickle_checkpoint) with kev::Error(Refused). Folders and anything else pass.
void refuse_unloadable_model_file(const std::string& path);

// True when `text` is well-formed UTF-8 (no overlong forms, surrogates or code points
// past U+10FFFF): what the tokenizer accepts. Questions and other text from the command
// line are checked with it before anything slow, so the message names the argument.
bool is_valid_utf8(const std::string& text);

// The JSON text, with bytes that are not UTF-8 (a path, a question, a piece of a token)
// replaced by U+FFFD instead of throwing. indent -1: one line.
std::string dump_json(const nlohmann::json& j, int indent = -1);

}  // namespace kevcli
