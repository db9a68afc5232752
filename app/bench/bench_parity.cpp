// kev-bench parity: Kev's logits (and greedy tokens) against reference files written by
// tests/reference/model_logits.py, on any device: the GPU check's parity step
// (packaging/gpu-check.sh), where the Qt Test suite cannot run.
//   --model PATH --prompts prompts.json --reference DIR [--device cpu|cuda]
//   [--precision fp32] [--tol 1e-4] [--greedy N]
// Each prompt runs alone in a fresh cache with positions start.., as the reference
// does; --tol bounds the largest |difference| of any logit. With --greedy N, Kev's N
// greedy tokens after each prompt must equal DIR/greedy_<i>.json. Exit 0 within the
// bounds, 1 outside, 2 usage or unreadable files.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include "bench.h"
#include "kev/model.h"
#include "kev/weights.h"

namespace kevbench {
namespace {

struct Prompt {
    std::vector<std::int64_t> tokens;
    std::int64_t start = 0;
};

std::vector<float> read_f32(const std::string& path) {
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    if (!in) throw std::runtime_error(path + ": cannot be read");
    const auto size = static_cast<std::size_t>(in.tellg());
    std::vector<float> v(size / sizeof(float));
    in.seekg(0);
    in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
    return v;
}

int run_parity(const Args& args) {
    std::string model_path, prompts_path, ref_dir, device = "cpu", precision = "fp32";
    double tol = 1e-4;
    int greedy = 0;
    for (std::size_t i = 0; i + 1 < args.size(); i += 2) {
        const std::string& k = args[i];
        const std::string& v = args[i + 1];
        if (k == "--model") model_path = v;
        else if (k == "--prompts") prompts_path = v;
        else if (k == "--reference") ref_dir = v;
        else if (k == "--device") device = v;
        else if (k == "--precision") precision = v;
        else if (k == "--tol") tol = std::stod(v);
        else if (k == "--greedy") greedy = std::stoi(v);
        else {
            std::fprintf(stderr, "kev-bench parity: unknown option %s\n", k.c_str());
            return 2;
        }
    }
    if (model_path.empty() || prompts_path.empty() || ref_dir.empty() || (device != "cpu" && device != "cuda")) {
        std::fprintf(stderr, "kev-bench parity: --model, --prompts and --reference are required; --device cpu|cuda\n");
        return 2;
    }
    std::vector<Prompt> prompts;
    try {
        std::ifstream in(prompts_path);
        const nlohmann::json j = nlohmann::json::parse(in);
        for (const auto& p : j) prompts.push_back({p.at("tokens").get<std::vector<std::int64_t>>(), p.value("start", 0)});
    } catch (const std::exception& e) {
        std::fprintf(stderr, "kev-bench parity: %s: %s\n", prompts_path.c_str(), e.what());
        return 2;
    }
    kev::LoadOptions load;
    kev::set_precision(load, precision);
    if (device == "cuda") load.device = kev::Device::Cuda;
    const auto model = kev::Model::load(model_path, load);
    c10::InferenceMode guard;
    const std::int64_t V = model->config().vocab_size;
    nlohmann::json report = engine_header();
    std::string cmd = "kev-bench parity";
    for (const auto& a : args) cmd += " " + a;
    report["command"] = cmd;
    report["prompts"] = nlohmann::json::array();
    bool ok = true;
    for (std::size_t i = 0; i < prompts.size(); ++i) {
        const Prompt& pr = prompts[i];
        const auto n = static_cast<std::int64_t>(pr.tokens.size());
        kev::ForwardBatch b = kev::single_sequence_batch(pr.tokens, 0, false);
        for (auto& pos : b.positions) pos += pr.start;
        kev::KvCache cache = model->make_cache(n + std::max(greedy, 1));
        const at::Tensor logits = model->forward(b, cache).to(at::kCPU).to(at::kFloat).contiguous();  // [n, V]
        nlohmann::json row = {{"index", i}, {"tokens", n}, {"start", pr.start}};
        std::vector<float> ref;
        try {
            ref = read_f32(ref_dir + "/logits_" + std::to_string(i) + ".f32");
        } catch (const std::exception& e) {
            std::fprintf(stderr, "kev-bench parity: %s\n", e.what());
            return 2;
        }
        if (static_cast<std::int64_t>(ref.size()) != n * V) {
            std::fprintf(stderr, "kev-bench parity: reference %zu has %zu floats, expected %lld\n", i, ref.size(),
                         static_cast<long long>(n * V));
            return 2;
        }
        const at::Tensor r = at::from_blob(ref.data(), {n, V}, at::kFloat);
        const double diff = (logits - r).abs().max().item<double>();
        row["max_abs_diff"] = diff;
        row["within_tol"] = diff <= tol;
        ok = ok && diff <= tol;
        if (greedy > 0) {
            // Greedy decoding from the prompt's cache, one token per step.
            std::vector<std::int64_t> got{logits[n - 1].argmax().item<std::int64_t>()};
            for (int t = 1; t < greedy; ++t) {
                kev::ForwardBatch step = kev::single_sequence_batch({got.back()}, n + t - 1, true);
                step.positions[0] += pr.start;
                got.push_back(model->forward(step, cache).to(at::kCPU).argmax(-1).item<std::int64_t>());
            }
            std::vector<std::int64_t> want;
            try {
                std::ifstream in(ref_dir + "/greedy_" + std::to_string(i) + ".json");
                want = nlohmann::json::parse(in).get<std::vector<std::int64_t>>();
            } catch (const std::exception& e) {
                std::fprintf(stderr, "kev-bench parity: greedy reference %zu: %s\n", i, e.what());
                return 2;
            }
            std::size_t first = 0;
            while (first < got.size() && first < want.size() && got[first] == want[first]) ++first;
            const bool same = got == want;
            row["greedy_identical"] = same;
            row["greedy_first_difference"] = same ? -1 : static_cast<long long>(first);
            // The reference's margin between its two best logits where the runs part
            // (model_logits.py writes it): a near-tie there is not a wrong kernel.
            if (!same) {
                std::ifstream in(ref_dir + "/greedy_margins_" + std::to_string(i) + ".json");
                if (in) {
                    const auto margins = nlohmann::json::parse(in, nullptr, false);
                    if (margins.is_array() && first < margins.size() && margins[first].is_number())
                        row["reference_margin_at_first_difference"] = margins[first].get<double>();
                }
            }
            ok = ok && same;
        }
        std::fprintf(stderr, "prompt %zu (%lld tokens from %lld): max |diff| %.3g%s\n", i, static_cast<long long>(n),
                     static_cast<long long>(pr.start), diff,
                     greedy > 0 ? (row["greedy_identical"].get<bool>() ? ", greedy identical" : ", greedy differs") : "");
        report["prompts"].push_back(row);
    }
    report["tolerance"] = tol;
    report["pass"] = ok;
    std::printf("%s\n", report.dump(2).c_str());
    return ok ? 0 : 1;
}

}  // namespace
}  // namespace kevbench

KEV_BENCH("parity", "logits / greedy tokens against model_logits.py's reference --model PATH --prompts FILE "
                    "--reference DIR [--device cpu|cuda --precision fp32 --tol 1e-4 --greedy N]",
          kevbench::run_parity);
