// Packed vs one-at-a-time generation, in the same process, alternating, repeated.
//
//   kev-bench pack --model PATH [--precision fp32|bf16|4bit|nf4] [--n 1,2,4,8,16]
//                  [--prompt 128] [--gen 128] [--temperature 0] [--reps 3] [--out PREFIX]
//
// For every N: N cards of random prompt tokens (fixed seed) generate exactly --gen
// tokens each (end-of-sequence ignored; greedy, or sampled at --temperature), once
// packed (one forward per step for all cards) and once one card at a time. Reports wall
// time, time to first token, prefill and decode throughput, peak memory, the packed /
// one-at-a-time ratio, the decode step time next to the bandwidth roofline (the weight
// bytes a decode step streams: every linear layer and the output head, not the
// embedding unless it is the head; divided by the measured read bandwidth), and how
// much of a step drawing the tokens took.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include "bench.h"
#include "bench_cards.h"
#include "kev/cuda_attention.h"
#include "kev/engine_info.h"
#include "kev/generator.h"
#include "kev/model.h"
#include "kev/quant.h"
#include "kev/weights.h"

namespace kevbench {

namespace {

long long proc_status_kib(const char* key) {
    std::ifstream in("/proc/self/status");
    std::string line;
    const std::string k = std::string(key) + ":";
    while (std::getline(in, line)) {
        if (line.rfind(k, 0) == 0) return std::stoll(line.substr(k.size()));
    }
    return 0;
}

std::vector<int> parse_list(const std::string& s) {
    std::vector<int> v;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ',')) v.push_back(std::stoi(item));
    return v;
}

struct Sample {
    double wall_s = 0, ttft_s = 0, prefill_s = 0, decode_s = 0, sample_ms_per_step = 0;
    long long prefill_tokens = 0, generated = 0, steps = 0;
};

Sample run_once(const kev::Model& model, const std::vector<kev::TokenCard>& cards, bool dense = false) {
    kev::Generator gen(model, nullptr, std::nullopt);
    kev::RunOptions options;
    options.ignore_end_of_sequence = true;
    options.dense_mask = dense;
    const auto t0 = std::chrono::steady_clock::now();
    const kev::GenerationResult r = gen.run(gen.prepare_tokens(cards, {}), options);
    Sample s;
    s.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    s.prefill_s = r.prefill_s;
    s.decode_s = r.total_s - r.prefill_s;
    s.prefill_tokens = r.prefill_tokens;
    s.steps = r.steps - 1;
    s.sample_ms_per_step = r.sample_s / static_cast<double>(std::max<std::int64_t>(1, r.steps)) * 1e3;
    double ttft = 0;
    for (const auto& c : r.cards) {
        s.generated += static_cast<long long>(c.tokens.size());
        ttft = std::max(ttft, c.stats.time_to_first_token_s);
    }
    s.ttft_s = ttft;
    return s;
}

// The breakdown of a decode step: every linear layer of the model (each layer's qkv, o,
// gate_up and down, and the output head) run alone on [n, in] activations in the
// model's dtype; median of 5 passes, in ms. The rest of a step is attention, norms,
// RoPE, sampling and the framework's own overhead.
double linears_ms(const kev::Model& model, int n) {
    c10::InferenceMode guard;
    const auto& w = model.weights();
    const at::Device device = w.final_norm.device();
    const at::ScalarType dtype = kev::scalar_type(model.dtype());
    std::vector<const kev::Linear*> all;
    for (const auto& l : w.layers) all.insert(all.end(), {&l.qkv, &l.o, &l.gate_up, &l.down});
    all.push_back(&w.lm_head);
    std::vector<at::Tensor> inputs;
    for (const kev::Linear* lin : all) {
        const std::int64_t in = lin->in_features();
        inputs.push_back(at::randn({n, in}).to(dtype).to(device));
    }
    std::vector<double> passes;
    for (int p = 0; p < 6; ++p) {
        const auto t0 = std::chrono::steady_clock::now();
        at::Tensor last;
        for (std::size_t i = 0; i < all.size(); ++i) last = (*all[i])(inputs[i]);
        if (device.is_cuda()) last.sum().item<float>();  // waits for the stream
        if (p > 0) passes.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    return median(passes);
}

int run_pack(const Args& args) {
    std::string model_path, out_prefix, precision = "bf16", device = "cpu";
    double hbm_gbs = 0;  // --hbm-gbs: the device's memory bandwidth for the roofline (CUDA)
    std::vector<int> ns{1, 2, 4, 8, 16};
    int prompt_len = 128, gen_len = 128, reps = 3;
    bool packed_only = false;  // --packed-only 1: no one-at-a-time runs (side by side with llama-batched-bench)
    // --alone K: the one-at-a-time runs of a pack measured on its first K cards only and
    // scaled by n / K (every card has the same lengths); 0 = every card. For a device
    // lent for minutes. --dense-mask 0 leaves out the dense-mask pass.
    int alone_cards = 0;
    bool dense_pass = true;
    float temperature = 0.0f;  // --temperature T: every card sampled at T (seeded), as in the app; 0 = greedy
    for (std::size_t i = 0; i + 1 < args.size(); i += 2) {
        const std::string& k = args[i];
        const std::string& v = args[i + 1];
        if (k == "--model") model_path = v;
        else if (k == "--precision") precision = v;
        else if (k == "--n") ns = parse_list(v);
        else if (k == "--prompt") prompt_len = std::stoi(v);
        else if (k == "--gen") gen_len = std::stoi(v);
        else if (k == "--reps") reps = std::stoi(v);
        else if (k == "--out") out_prefix = v;
        else if (k == "--packed-only") packed_only = v == "1";
        else if (k == "--alone") alone_cards = std::stoi(v);
        else if (k == "--dense-mask") dense_pass = v != "0";
        else if (k == "--device") device = v;
        else if (k == "--hbm-gbs") hbm_gbs = std::stod(v);
        else if (k == "--temperature") temperature = std::stof(v);
        else {
            std::fprintf(stderr, "kev-bench pack: unknown option %s\n", k.c_str());
            return 2;
        }
    }
    if (model_path.empty()) {
        std::fprintf(stderr, "kev-bench pack: --model PATH is required\n");
        return 2;
    }
    kev::LoadOptions load;
    kev::set_precision(load, precision);
    if (device != "cpu" && device != "cuda") {
        std::fprintf(stderr, "kev-bench pack: --device cpu|cuda\n");
        return 2;
    }
    const bool cuda = device == "cuda";
    if (cuda) load.device = kev::Device::Cuda;
    if (cuda && hbm_gbs <= 0) hbm_gbs = 4800.0;  // H200's HBM3e
    const auto t_load = std::chrono::steady_clock::now();
    const auto model = kev::Model::load(model_path, load);
    const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count();
    const double bandwidth = cuda ? hbm_gbs : measure_read_bandwidth_gbs(1LL << 30, 5);
    // A step reads one row of the embedding, all of it only when it is also the head.
    const kev::ModelWeights& mw = model->weights();
    // (An embedding kept as the head's blocks is the head: counted once in bytes().)
    const bool head_is_embed = !mw.embed.defined() ||
                               (mw.lm_head.weight.defined() && mw.lm_head.weight.data_ptr() == mw.embed.data_ptr());
    const double weight_bytes =
        static_cast<double>(mw.bytes() - (head_is_embed ? 0 : static_cast<std::int64_t>(mw.embed.nbytes())));
    const double roofline_ms = weight_bytes / (bandwidth * 1e9) * 1e3;

    nlohmann::json report = report_start("pack", args);
    const std::string cmd = report["command"];
    report["model"] = model_path;
    report["precision"] = precision;
    report["temperature"] = temperature;
    report["device"] = device;
    if (cuda) {
        // Which attention kernel libtorch takes for this model's decode and prompt shapes
        // (KEV_CUDA_SDPA limits the choice; kev/cuda_attention.h).
        const auto& cfg = model->config();
        const auto sdpa = kev::cuda_attention_backends(static_cast<int>(cfg.num_heads), static_cast<int>(cfg.num_kv_heads),
                                                       static_cast<int>(cfg.head_dim), precision == "fp16" ? "fp16" : "bf16");
        const char* env = std::getenv("KEV_CUDA_SDPA");
        report["cuda_attention"] = {{"KEV_CUDA_SDPA", env ? env : "auto"}, {"decode", sdpa.decode}, {"prompt", sdpa.prompt}};
    }
    report["bandwidth_source"] = cuda ? "given (--hbm-gbs)" : "measured (host memory read)";
    report["streamed_weight_bytes"] = weight_bytes;
    report["load_s"] = load_s;
    report["read_bandwidth_gbs"] = bandwidth;
    report["roofline_step_ms"] = roofline_ms;
    report["prompt_tokens"] = prompt_len;
    report["generated_tokens"] = gen_len;
    report["repetitions"] = reps;
    report["alone_cards_measured"] = alone_cards;  // 0: every card of every pack
    report["results"] = nlohmann::json::array();

    const int vocab = static_cast<int>(model->config().vocab_size);
    {
        // One short untimed run first: the process's first forward loads kernels and sets
        // up libraries (on CUDA, seconds), which no pack size should be charged with.
        kev::TokenCard warm;
        warm.prompt.assign(8, 3);
        warm.sampling.temperature = 0.0f;
        warm.sampling.max_new_tokens = 4;
        run_once(*model, {warm});
    }
    for (int n : ns) {
        std::mt19937 rng(1234u + static_cast<unsigned>(n));
        const std::vector<kev::TokenCard> cards = random_board(rng, std::min(vocab, 32000), n, prompt_len, gen_len, temperature);
        kev::reset_cuda_peak_memory();
        std::vector<double> packed_wall, seq_wall, packed_ttft, packed_prefill_tps, packed_decode_tps, step_ms,
            seq_decode_tps, sample_ms;
        for (int r = 0; r < reps; ++r) {
            // Alternate which goes first so drift on a shared machine hits both alike.
            for (int order = 0; order < 2; ++order) {
                const bool packed_now = (order == 0) == (r % 2 == 0);
                if (packed_now) {
                    const Sample s = run_once(*model, cards);
                    packed_wall.push_back(s.wall_s);
                    packed_ttft.push_back(s.ttft_s);
                    packed_prefill_tps.push_back(s.prefill_tokens / s.prefill_s);
                    packed_decode_tps.push_back((s.generated - n) / s.decode_s);
                    step_ms.push_back(s.decode_s / std::max<long long>(1, s.steps) * 1e3);
                    sample_ms.push_back(s.sample_ms_per_step);
                } else if (!packed_only) {
                    double wall = 0, decode_s = 0;
                    long long gen = 0;
                    const int measured = alone_cards > 0 ? std::min(alone_cards, n) : n;
                    for (int c = 0; c < measured; ++c) {
                        const Sample s = run_once(*model, {cards[static_cast<std::size_t>(c)]});
                        wall += s.wall_s;
                        decode_s += s.decode_s;
                        gen += s.generated - 1;
                    }
                    seq_wall.push_back(wall * n / measured);
                    seq_decode_tps.push_back(gen / decode_s);
                }
            }
        }
        // The same pack once more with the dense-mask decode (every row reads the whole
        // cache): what the gathered layout saves.
        double dense_step_ms = 0;
        if (!packed_only && dense_pass) {
            const Sample dense = run_once(*model, cards, /*dense=*/true);
            dense_step_ms = dense.decode_s / std::max<long long>(1, dense.steps) * 1e3;
        }
        if (seq_wall.empty()) seq_wall.push_back(0.0), seq_decode_tps.push_back(0.0);
        const double linear_ms = linears_ms(*model, n);
        nlohmann::json row = {
            {"linears_ms_per_step", linear_ms},
            {"dense_mask_decode_step_ms", dense_step_ms},
            {"n", n},
            {"packed_wall_s", median(packed_wall)},
            {"sequential_wall_s", median(seq_wall)},
            {"ratio", median(packed_wall) / median(seq_wall)},
            {"packed_ttft_s", median(packed_ttft)},
            {"prefill_tokens_per_s", median(packed_prefill_tps)},
            {"aggregate_decode_tokens_per_s", median(packed_decode_tps)},
            {"per_card_decode_tokens_per_s", median(packed_decode_tps) / n},
            {"sequential_decode_tokens_per_s", median(seq_decode_tps)},
            {"decode_step_ms", median(step_ms)},
            {"sample_ms_per_step", median(sample_ms)},
            {"step_vs_roofline", median(step_ms) / roofline_ms},
            {"peak_rss_mib", proc_status_kib("VmHWM") / 1024.0},
        };
        if (cuda) {
            // The allocator's own peak (what Kev's tensors and its cache held) against the
            // driver's view of the device now (nvidia-smi's number: all of this process,
            // its CUDA context included, and any other process).
            if (const auto a = kev::cuda_allocator_memory()) {
                row["cuda_peak_allocated_mib"] = a->peak_allocated_bytes / 1048576.0;
                row["cuda_peak_reserved_mib"] = a->peak_reserved_bytes / 1048576.0;
                row["cuda_reserved_mib"] = a->reserved_bytes / 1048576.0;
            }
            if (const auto d = kev::cuda_memory()) row["device_used_mib"] = d->used_bytes / 1048576.0;
        }
        report["results"].push_back(row);
        std::fprintf(stderr, "N=%d: packed %.2fs, one-at-a-time %.2fs, ratio %.3f, %.1f tok/s aggregate\n", n,
                     median(packed_wall), median(seq_wall), median(packed_wall) / median(seq_wall),
                     median(packed_decode_tps));
    }

    std::printf("%s\n", report.dump(2).c_str());
    if (!out_prefix.empty()) {
        std::ofstream(out_prefix + ".json") << report.dump(2) << "\n";
        std::ofstream md(out_prefix + ".md");
        md << "# Packed vs one-at-a-time: " << model_path << " (" << precision << ")\n\n"
           << "Command: `" << cmd << "`\n\n"
           << "Weights streamed per step " << weight_bytes / 1e6 << " MB; read bandwidth " << bandwidth
           << " GB/s; roofline step " << roofline_ms << " ms; load " << load_s << " s; prompt " << prompt_len
           << " tokens, " << gen_len << " generated per card, median of " << reps << "."
           << (alone_cards > 0 ? " One-at-a-time: the first " + std::to_string(alone_cards) +
                                     " cards of each pack run alone, their time scaled by N / " +
                                     std::to_string(alone_cards) + " (cards of one length)."
                               : std::string())
           << "\n\n"
           << "| N | packed wall s | one-at-a-time wall s | ratio | TTFT s | prefill tok/s | aggregate decode tok/s "
              "| per-card tok/s | one-at-a-time decode tok/s | step ms | of which linears ms | of which sampling ms | step / roofline "
              "| dense-mask step ms | peak RSS MiB |\n"
           << "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
        char buf[512];
        for (const auto& r : report["results"]) {
            std::snprintf(buf, sizeof buf, "| %d | %.2f | %.2f | %.3f | %.2f | %.0f | %.1f | %.1f | %.1f | %.1f | %.1f | %.2f | %.2f | %.1f | %.0f |\n",
                          r["n"].get<int>(), r["packed_wall_s"].get<double>(), r["sequential_wall_s"].get<double>(),
                          r["ratio"].get<double>(), r["packed_ttft_s"].get<double>(),
                          r["prefill_tokens_per_s"].get<double>(), r["aggregate_decode_tokens_per_s"].get<double>(),
                          r["per_card_decode_tokens_per_s"].get<double>(),
                          r["sequential_decode_tokens_per_s"].get<double>(), r["decode_step_ms"].get<double>(),
                          r["linears_ms_per_step"].get<double>(), r["sample_ms_per_step"].get<double>(),
                          r["step_vs_roofline"].get<double>(), r["dense_mask_decode_step_ms"].get<double>(),
                          r["peak_rss_mib"].get<double>());
            md << buf;
        }
    }
    return 0;
}

}  // namespace

KEV_BENCH("pack", "packed vs one-at-a-time generation --model PATH [--precision bf16|fp32|4bit|nf4] [--n 1,2,4,8,16] "
                  "[--device cpu|cuda --hbm-gbs 4800] "
                  "[--prompt 128] [--gen 128] [--temperature 0] [--reps 3] [--packed-only 1] [--alone K] [--dense-mask 0] "
                  "[--out PREFIX]",
          run_pack);

}  // namespace kevbench
