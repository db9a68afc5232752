// kev-cli: the engine from a terminal. For now it reports what the engine is built
// with and what a model file holds; generation arrives with the packed engine.
#include <cstdio>
#include <cstring>
#include <string>

#include "kev/engine_info.h"
#include "kev/error.h"
#include "kev/gguf.h"

namespace {

void usage(std::FILE* out) {
    std::fprintf(out,
                 "usage: kev-cli info [--model PATH]\n"
                 "       kev-cli --version\n"
                 "\n"
                 "  info      print the engine build and the model's architecture and sizes\n"
                 "  --model   a .gguf file (default: the built-in SmolLM2-135M-Instruct)\n");
}

int info(const std::string& model) {
    const kev::EngineInfo e = kev::engine_info();
    std::printf("kev %s, libtorch %s, cpu %s, %d threads, cuda %s\n", e.kev_version.c_str(),
                e.torch_version.c_str(), e.cpu_capability.c_str(), e.cpu_threads,
                e.cuda_available ? "yes" : "no");
    const auto gguf = kev::GgufFile::open(model);
    std::printf("model %s\n  gguf v%u, %zu tensors, %zu metadata keys\n", model.c_str(),
                gguf->version(), gguf->tensors().size(), gguf->metadata().size());
    if (auto arch = gguf->get_string("general.architecture")) {
        std::printf("  architecture %s\n", arch->c_str());
    }
    if (auto name = gguf->get_string("general.name")) std::printf("  name %s\n", name->c_str());
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    std::string command;
    std::string model = kev::builtin_model_path();
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg == "--help" || arg == "-h") {
            usage(stdout);
            return 0;
        } else if (arg == "--version") {
            std::printf("kev-cli %s\n", kev::engine_info().kev_version.c_str());
            return 0;
        } else if (arg == "--model" && i + 1 < argc) {
            model = argv[++i];
        } else if (command.empty() && arg[0] != '-') {
            command = arg;
        } else {
            std::fprintf(stderr, "kev-cli: unknown argument '%s'\n", arg.c_str());
            usage(stderr);
            return 2;
        }
    }
    if (command != "info") {
        usage(stderr);
        return 2;
    }
    try {
        return info(model);
    } catch (const kev::Error& e) {
        std::fprintf(stderr, "kev-cli: %s\n", e.what());
        return 1;
    }
}
