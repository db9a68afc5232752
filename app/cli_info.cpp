#include "cli.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>

#include <nlohmann/json.hpp>

#include "kev/buffer_pool.h"
#include "kev/cpu_kernels.h"
#include "kev/chat_template.h"
#include "kev/config.h"
#include "kev/engine_info.h"
#include "kev/error.h"
#include "kev/generator.h"
#include "kev/gguf.h"
#include "kev/prefix_cache.h"
#include "kev/safetensors.h"
#include "kev/weights.h"

namespace kevcli {

namespace {

bool is_dir(const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) throw kev::Error(kev::ErrorCode::Io, path + ": no such file or folder");
    return S_ISDIR(st.st_mode);
}

std::int64_t bytes_on_disk(const std::string& path) {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (!fs::is_directory(path, ec)) return static_cast<std::int64_t>(fs::file_size(path, ec));
    std::int64_t total = 0;
    for (const auto& e : fs::directory_iterator(path, ec))
        if (e.is_regular_file(ec)) total += static_cast<std::int64_t>(e.file_size(ec));
    return total;
}

std::string human_bytes(double b) {
    const char* units[] = {"B", "KB", "MB", "GB"};
    int u = 0;
    while (b >= 1000.0 && u < 3) b /= 1000.0, ++u;
    char buf[32];
    std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", b, units[u]);
    return buf;
}

}  // namespace

kev::Tokenizer load_tokenizer(const std::string& path) {
    if (is_dir(path)) return kev::Tokenizer::from_hf_dir(path);
    return kev::Tokenizer::from_gguf(*kev::GgufFile::open(path));
}

int print_model_info(const std::string& path, bool json, const LoadFacts& loaded) {
    const bool folder = is_dir(path);
    kev::ModelConfig c;
    std::map<std::string, int> tensor_types;  // type name -> tensor count
    std::string container;
    if (folder) {
        c = kev::load_hf_config(path);
        const auto st = kev::SafetensorsModel::open(path);
        for (const auto& [name, e] : st->tensors()) ++tensor_types[kev::to_string(e.tensor->dtype)];
        container = "safetensors";
    } else {
        const auto gguf = kev::GgufFile::open(path);
        c = kev::config_from_gguf(*gguf);
        for (const auto& t : gguf->tensors()) ++tensor_types[kev::to_string(t.type)];
        container = "gguf v" + std::to_string(gguf->version());
    }
    std::string chat, chat_note;
    int vocab = 0;
    try {
        const kev::Tokenizer tok = load_tokenizer(path);
        vocab = tok.vocab_size();
        chat = kev::to_string(kev::ChatTemplate::recognise(tok).format());
    } catch (const kev::Error& e) {
        chat_note = e.what();
    }
    const kev::EngineInfo engine = kev::engine_info();
    const std::int64_t disk = bytes_on_disk(path);

    nlohmann::json types = nlohmann::json::object();
    for (const auto& [t, n] : tensor_types) types[t] = n;
    std::int64_t windowed = 0;
    for (std::int64_t l = 0; l < c.num_layers; ++l) windowed += c.layer_windowed(l);
    // Positions a windowed layer keeps per card (and for the shared context) on the CPU.
    const std::int64_t window_kept =
        windowed > 0 ? std::max(c.sliding_window, kev::PrefixCache::kBlockTokens) + kev::RunOptions{}.window_chunk - 1 : 0;
    nlohmann::json j = {{"path", path},
                        {"container", container},
                        {"bytes_on_disk", disk},
                        {"architecture", kev::to_string(c.arch)},
                        {"layers", c.num_layers},
                        {"hidden_size", c.hidden_size},
                        {"heads", c.num_heads},
                        {"kv_heads", c.num_kv_heads},
                        {"head_dim", c.head_dim},
                        {"intermediate_size", c.intermediate_size},
                        {"vocab_size", c.vocab_size},
                        {"tokenizer_vocab_size", vocab},
                        {"context_length", c.max_positions},
                        {"rope_theta", c.rope_theta},
                        {"rope_scaling", kev::to_string(c.rope_scaling.kind)},
                        {"sliding_window", c.sliding_window > 0 ? nlohmann::json(c.sliding_window) : nlohmann::json(nullptr)},
                        {"windowed_layers", windowed},
                        {"window_kept_per_card", window_kept > 0 ? nlohmann::json(window_kept) : nlohmann::json(nullptr)},
                        {"attn_logit_softcapping", c.attn_softcap > 0 ? nlohmann::json(c.attn_softcap) : nlohmann::json(nullptr)},
                        {"final_logit_softcapping", c.final_softcap > 0 ? nlohmann::json(c.final_softcap) : nlohmann::json(nullptr)},
                        {"features", c.describe_features()},
                        {"tied_embeddings", c.tie_word_embeddings},
                        {"parameters", c.parameter_count()},
                        {"tensor_types", types},
                        {"chat_format", chat.empty() ? nlohmann::json(nullptr) : nlohmann::json(chat)},
                        {"engine", {{"kev", engine.kev_version}, {"libtorch", engine.torch_version},
                                    {"cpu", engine.cpu_capability}, {"threads", engine.cpu_threads},
                                    {"cuda", engine.cuda_available}, {"cuda_libraries", engine.cuda_libraries}}}};
    if (!chat_note.empty()) j["chat_note"] = chat_note;
    j["loads"] = {{"precision", loaded.precision}, {"seconds", loaded.seconds}};
    nlohmann::json kernels = nlohmann::json::object();
    for (const auto& [what, kernel] : kev::kernel_paths()) kernels[what] = kernel;
    j["kernels"] = kernels;
    j["buffer_pool"] = kev::to_string(kev::buffer_pool_mode());
    const kev::PrecisionChoice automatic = kev::choose_auto_precision(path);
    j["auto_precision"] = {{"name", automatic.name}, {"why", automatic.why}};
    if (json) {
        std::printf("%s\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
        return 0;
    }
    std::string type_list;
    for (const auto& [t, n] : tensor_types) type_list += (type_list.empty() ? "" : ", ") + t + " x" + std::to_string(n);
    std::printf("model        %s\n", path.c_str());
    std::printf("container    %s, %s on disk\n", container.c_str(), human_bytes(static_cast<double>(disk)).c_str());
    std::printf("architecture %s, %.1f M parameters\n", kev::to_string(c.arch), c.parameter_count() / 1e6);
    std::printf("layers       %lld, hidden %lld, intermediate %lld\n", static_cast<long long>(c.num_layers),
                static_cast<long long>(c.hidden_size), static_cast<long long>(c.intermediate_size));
    std::printf("attention    %lld heads, %lld key/value heads, head dim %lld\n", static_cast<long long>(c.num_heads),
                static_cast<long long>(c.num_kv_heads), static_cast<long long>(c.head_dim));
    std::printf("context      %lld tokens (RoPE theta %g, scaling %s)\n", static_cast<long long>(c.max_positions), c.rope_theta,
                kev::to_string(c.rope_scaling.kind));
    if (c.sliding_window > 0)
        std::printf("window       sliding window of %lld tokens on %lld of %lld layers (counted within each card; on the "
                    "CPU those layers keep the last %lld positions of each card)\n",
                    static_cast<long long>(c.sliding_window), static_cast<long long>(windowed),
                    static_cast<long long>(c.num_layers), static_cast<long long>(window_kept));
    std::printf("family       %s\n", c.describe_features().c_str());
    std::printf("vocabulary   %lld rows, %d tokenizer tokens%s\n", static_cast<long long>(c.vocab_size), vocab,
                c.tie_word_embeddings ? ", output head tied to the embedding" : "");
    std::printf("tensors      %s\n", type_list.c_str());
    std::printf("chat format  %s\n", chat.empty() ? ("none (" + chat_note + ")").c_str() : chat.c_str());
    std::printf("engine       kev %s, libtorch %s, cpu %s, %d threads, cuda %s\n", engine.kev_version.c_str(),
                engine.torch_version.c_str(), engine.cpu_capability.c_str(), engine.cpu_threads,
                engine.cuda_available ? "yes" : "no");
    std::printf("cuda libs    %s\n", engine.cuda_libraries.c_str());
    std::printf("precision    auto = %s (%s)\n", automatic.name.c_str(), automatic.why.c_str());
    std::printf("loads        yes, as %s in %.1f s\n", loaded.precision.c_str(), loaded.seconds);
    for (const auto& [what, kernel] : kev::kernel_paths()) std::printf("kernel       %-25s %s\n", (what + ":").c_str(), kernel.c_str());
    std::printf("buffers      pool %s (KEV_BUFFER_POOL: on, off or poison)\n", kev::to_string(kev::buffer_pool_mode()));
    return 0;
}

}  // namespace kevcli
