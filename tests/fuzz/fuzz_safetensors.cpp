// safetensors: the 8-byte header length, the JSON header, dtypes, shapes and offsets.
// Every tensor the parser accepts must lie inside the file: touching its first and last
// byte lets ASan check that.
#include <cstdint>

#include "fuzz_common.h"
#include "fuzz_util.h"
#include "kev/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string path = kevfuzz::write_file("model.safetensors", data, size);
    try {
        const auto st = kev::SafetensorsFile::open(path);
        unsigned sum = 0;
        for (const auto& [name, t] : st->tensors()) {
            if (st->find(name) != &t) std::abort();
            if (t.numel() < 0) std::abort();
            if (t.nbytes != static_cast<std::uint64_t>(t.numel()) * kev::element_size(t.dtype)) std::abort();
            if (t.nbytes > 0) sum += st->data(t)[0] + st->data(t)[t.nbytes - 1];
        }
        (void)sum;
    } catch (const kev::Error& e) {
        kevfuzz::file_error(e, "SafetensorsFile::open");
    }
    return 0;
}
