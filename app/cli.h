// kev-cli's commands beside answering (kev_cli.cpp): model facts and tokenizing.
#pragma once

#include <string>

#include "kev/tokenizer.h"

namespace kevcli {

// The tokenizer of a .gguf file or a Hugging Face folder. Throws kev::Error.
kev::Tokenizer load_tokenizer(const std::string& path);

// How `info`'s caller loaded the model, as a run would (so that `info` fails where a
// run would, and exits 0 only for a model that loads).
struct LoadFacts {
    std::string precision;  // the working precision it loaded at
    double seconds = 0.0;
};

// `kev-cli info`: what the model is, from its headers: architecture and sizes, context
// length, parameter count, tensor types, chat format, and how it loaded. Prints text,
// or one JSON document with `json`. Returns the exit code.
int print_model_info(const std::string& path, bool json, const LoadFacts& loaded);

}  // namespace kevcli
