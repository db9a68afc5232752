// kev-cli --file: questions from a .json array or a .jsonl file, each a string or an
// object {"question": ..., settings...} whose settings override the command line's. An
// object may give a conversation instead of "question": "messages": [{"role": "system" |
// "user" | "assistant", "content": "..."}], an optional system message first, then user
// and assistant messages in turn, ending with the user message to answer.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "kev/chat_template.h"
#include "kev/lora.h"
#include "kev/sampling.h"

namespace kevcli {

struct FileQuestion {
    std::string question;                           // a "messages" entry: its last user message
    std::optional<kev::SamplingSettings> sampling;  // set when the entry is an object
    std::optional<kev::LoraUse> lora;               // "lora" / "lora_scale"
    std::optional<std::string> system = std::nullopt;  // "messages": its system message
    std::vector<kev::ChatTurn> history = {};           // "messages": the turns before the last
};

// Reads and checks the whole file (at most kMaxQuestionFileBytes; special files refused
// unopened). Every problem is a kev::Error (Io or Format), never InvalidArgument: a bad
// question file is a file error, exit 1. Messages name the file, the entry ("item 2" of a
// JSON array, "line 3" of a JSONL file), the setting and the rule, e.g.
// "q.json item 1: temperature: number 1e400 is out of range",
// "q.json item 2: messages: message 3: expected a user message, got assistant".
// `defaults` are the command line's settings an object's settings start from.
std::vector<FileQuestion> read_question_file(const std::string& path, const kev::SamplingSettings& defaults,
                                             float default_lora_scale);

}  // namespace kevcli
