// kev-cli's commands beside answering (kev_cli.cpp): model facts and tokenizing.
#pragma once

#include <string>

#include "kev/tokenizer.h"

namespace kevcli {

// The tokenizer of a .gguf file or a Hugging Face folder. Throws kev::Error.
kev::Tokenizer load_tokenizer(const std::string& path);

// `kev-cli info`: what the model is, read from its headers without loading weights:
// architecture and sizes, context length, parameter count, tensor types, chat format.
// Prints text, or one JSON document with `json`. Returns the exit code.
int print_model_info(const std::string& path, bool json);

}  // namespace kevcli
