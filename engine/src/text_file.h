// Reading a small text file (config.json, tokenizer.json, a shard index) whole.
#pragma once

#include <string>

namespace kev {

// The file's bytes. Throws kev::Error(Io) naming the path when it cannot be read.
std::string read_text_file(const std::string& path);

}  // namespace kev
