// kev-cli --file: a question file, as JSON (array) or JSONL, read by the same function
// kev-cli uses (app/cli_questions.cpp). The first byte picks the extension.
#include <cstdint>
#include <string>

#include "cli_questions.h"
#include "fuzz_common.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0) return 0;
    const char* name = (data[0] & 1) ? "questions.jsonl" : "questions.json";
    const std::string path = kevfuzz::write_file(name, data + 1, size - 1);
    try {
        const auto qs = kevcli::read_question_file(path, kev::SamplingSettings{}, 1.0f);
        for (const auto& q : qs) {
            if (q.sampling) q.sampling->validate();
            if (q.lora) q.lora->validate();
        }
    } catch (const kev::Error& e) {
        kevfuzz::file_error(e, "read_question_file");
    }
    return 0;
}
