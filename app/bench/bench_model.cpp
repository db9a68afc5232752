// kev-bench model: load time, resident memory and single-stream decode speed of one
// model, per working dtype, next to the memory-bandwidth roofline.
//
// A decode step must stream every weight it multiplies by once (the lm_head, all
// layer matrices; only one row of an untied embedding), so
//   roofline step time = streamed weight bytes / measured read bandwidth,
// and "x roofline" says how far a step is from that floor.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <random>
#include <sstream>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "bench.h"
#include "kev/engine_info.h"
#include "kev/error.h"
#include "kev/model.h"

namespace kevbench {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Resident set size in MiB, from /proc/self/status (VmRSS), or -1.
double rss_mib() {
    std::ifstream in("/proc/self/status");
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
    }
    return -1.0;
}

double median(std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

struct Options {
    std::string model = kev::builtin_model_path();
    std::vector<std::string> dtypes{"fp32", "bf16"};
    int prompt = 32;
    int tokens = 64;
    int reps = 3;
    std::string report;  // path prefix for .json and .md
};

nlohmann::json run_one(const Options& o, kev::DType dtype, double bandwidth_gbs, nlohmann::json* config) {
    nlohmann::json r;
    r["dtype"] = kev::to_string(dtype);
    const double rss0 = rss_mib();
    const auto t0 = Clock::now();
    kev::LoadOptions lo;
    lo.dtype = dtype;
    const auto model = kev::Model::load(o.model, lo);
    r["load_s"] = seconds_since(t0);
    const double rss1 = rss_mib();
    const kev::ModelConfig& c = model->config();
    *config = {{"arch", kev::to_string(c.arch)}, {"hidden", c.hidden_size}, {"layers", c.num_layers},
               {"heads", c.num_heads}, {"kv_heads", c.num_kv_heads}, {"intermediate", c.intermediate_size},
               {"vocab", c.vocab_size}, {"tied", c.tie_word_embeddings}, {"parameters", c.parameter_count()}};
    const std::int64_t weight_bytes = model->weights().bytes();
    const std::int64_t streamed =
        weight_bytes - (c.tie_word_embeddings ? 0 : static_cast<std::int64_t>(model->weights().embed.nbytes()));
    r["weight_mib"] = weight_bytes / 1048576.0;
    r["rss_before_load_mib"] = rss0;
    r["rss_after_load_mib"] = rss1;
    r["streamed_bytes_per_token"] = streamed;

    const std::int64_t slots = o.prompt + o.tokens;
    kev::KvCache cache = model->make_cache(slots);
    r["kv_cache_mib"] = cache.bytes() / 1048576.0;
    std::mt19937 rng(42);
    std::vector<std::int64_t> prompt(o.prompt);
    for (auto& t : prompt) t = static_cast<std::int64_t>(rng() % c.vocab_size);

    std::vector<double> step_ms, prefill_s;
    for (int rep = 0; rep < o.reps; ++rep) {
        auto tp = Clock::now();
        at::Tensor logits = model->forward(kev::single_sequence_batch(prompt, 0, true), cache);
        std::int64_t next = logits.argmax(1).item<std::int64_t>();
        prefill_s.push_back(seconds_since(tp));
        for (int s = 0; s < o.tokens; ++s) {
            const auto ts = Clock::now();
            logits = model->forward(kev::single_sequence_batch({next}, o.prompt + s, true), cache);
            next = logits.argmax(1).item<std::int64_t>();
            step_ms.push_back(seconds_since(ts) * 1e3);
        }
    }
    const double step = median(step_ms);
    const double roofline_ms = static_cast<double>(streamed) / (bandwidth_gbs * 1e9) * 1e3;
    r["prefill_tokens"] = o.prompt;
    r["prefill_tok_s"] = o.prompt / median(prefill_s);
    r["decode_steps"] = static_cast<int>(step_ms.size());
    r["decode_step_ms_median"] = step;
    r["decode_step_ms_min"] = *std::min_element(step_ms.begin(), step_ms.end());
    r["decode_tok_s"] = 1e3 / step;
    r["roofline_step_ms"] = roofline_ms;
    r["roofline_tok_s"] = 1e3 / roofline_ms;
    r["x_roofline"] = step / roofline_ms;
    r["rss_after_decode_mib"] = rss_mib();
    return r;
}

std::string markdown(const nlohmann::json& report) {
    std::ostringstream md;
    md << "# kev-bench model: " << report["model"].get<std::string>() << "\n\n";
    md << "Command: `" << report["command"].get<std::string>() << "`\n\n";
    md << "libtorch " << report["engine"]["torch"].get<std::string>() << ", CPU "
       << report["engine"]["cpu_capability"].get<std::string>() << ", " << report["engine"]["threads"].get<int>()
       << " threads; read bandwidth " << report["read_bandwidth_gbs"].get<double>() << " GB/s.\n";
    md << "Config: " << report["config"].dump() << "\n\n";
    md << "| dtype | load s | weights MiB | RSS after load MiB | prefill tok/s | decode ms/step (median) | decode tok/s | "
          "roofline ms/step | roofline tok/s | x roofline |\n";
    md << "|---|---|---|---|---|---|---|---|---|---|\n";
    char buf[512];
    for (const auto& r : report["runs"]) {
        std::snprintf(buf, sizeof buf, "| %s | %.2f | %.0f | %.0f | %.0f | %.2f | %.1f | %.2f | %.1f | %.2f |\n",
                      r["dtype"].get<std::string>().c_str(), r["load_s"].get<double>(), r["weight_mib"].get<double>(),
                      r["rss_after_load_mib"].get<double>(), r["prefill_tok_s"].get<double>(),
                      r["decode_step_ms_median"].get<double>(), r["decode_tok_s"].get<double>(),
                      r["roofline_step_ms"].get<double>(), r["roofline_tok_s"].get<double>(),
                      r["x_roofline"].get<double>());
        md << buf;
    }
    md << "\nRoofline = bytes of weights a decode step streams / measured read bandwidth. "
          "RSS is process-wide (includes libtorch and, for GGUF, the touched mapping).\n";
    return md.str();
}

int run_model(const Args& args) {
    Options o;
    std::string command = "kev-bench model";
    for (std::size_t i = 0; i < args.size(); ++i) {
        command += " " + args[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= args.size()) throw kev::Error(kev::ErrorCode::InvalidArgument, args[i] + " needs a value");
            command += " " + args[i + 1];
            return args[++i];
        };
        if (args[i] == "--model") o.model = value();
        else if (args[i] == "--prompt") o.prompt = std::stoi(value());
        else if (args[i] == "--tokens") o.tokens = std::stoi(value());
        else if (args[i] == "--reps") o.reps = std::stoi(value());
        else if (args[i] == "--report") o.report = value();
        else if (args[i] == "--threads") at::set_num_threads(std::stoi(value()));
        else if (args[i] == "--dtypes") {
            o.dtypes.clear();
            std::stringstream ss(value());
            for (std::string d; std::getline(ss, d, ',');) o.dtypes.push_back(d);
        } else {
            throw kev::Error(kev::ErrorCode::InvalidArgument, "unknown option " + args[i] +
                                                                  " (--model PATH --dtypes fp32,bf16 --prompt N --tokens N "
                                                                  "--reps N --threads N --report PREFIX)");
        }
    }
    nlohmann::json report;
    report["engine"] = engine_header();
    report["command"] = command;
    report["model"] = o.model;
    report["read_bandwidth_gbs"] = measure_read_bandwidth_gbs(1ll << 30, 5);
    for (const auto& d : o.dtypes) {
        report["runs"].push_back(run_one(o, kev::parse_dtype(d), report["read_bandwidth_gbs"].get<double>(), &report["config"]));
        std::fprintf(stderr, "%s\n", report["runs"].back().dump().c_str());
    }
    std::printf("%s\n", report.dump(2).c_str());
    if (!o.report.empty()) {
        std::ofstream(o.report + ".json") << report.dump(2) << "\n";
        std::ofstream(o.report + ".md") << markdown(report);
    }
    return 0;
}

}  // namespace

KEV_BENCH("model", "load time, memory, single-stream decode vs roofline [--model PATH --dtypes fp32,bf16 --threads N --report PREFIX]",
          run_model);

}  // namespace kevbench
