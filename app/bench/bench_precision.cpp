// What each precision saves and what it costs, measured in one process.
//
//   kev-bench precision --model PATH [--precisions fp32,bf16,4bit,nf4] [--n 1,4,8,16]
//                       [--prompt 32] [--gen 64] [--reps 3] [--out PREFIX]
//     weight memory by format, and packed decode tok/s per precision and N; every
//     precision is loaded up front and the runs alternate between them, so the
//     4-bit / bf16 ratio is measured under the same machine load.
//
//   kev-bench quality --model PATH --text FILE [--precisions bf16,4bit,nf4] [--window 512]
//                     [--out PREFIX]
//     over a fixed text: next-token distributions of each precision against the first
//     one (mean KL(first || other), greedy agreement) and perplexity per precision.
//
// Precisions: fp32, bf16 (dense), 4bit (GGUF Q4_0/Q4_1/Q4_K/Q8_0 blocks kept, other linear
// weights NF4; activations bf16), nf4 (every linear weight NF4; activations bf16).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <c10/util/Half.h>

#include "bench.h"
#include "kev/generator.h"
#include "kev/model.h"
#include "kev/quant.h"
#include "kev/session.h"
#include "kev/weights.h"

namespace kevbench {

namespace {

std::vector<std::string> split(const std::string& s) {
    std::vector<std::string> v;
    std::stringstream ss(s);
    for (std::string item; std::getline(ss, item, ',');) v.push_back(item);
    return v;
}

kev::LoadOptions load_options(const std::string& precision) {
    kev::LoadOptions o;
    kev::set_precision(o, precision);
    return o;
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
}

std::string command_line(const char* name, const Args& args) {
    std::string cmd = std::string("kev-bench ") + name;
    for (const auto& a : args) cmd += " " + a;
    return cmd;
}

nlohmann::json memory_json(const kev::WeightMemory& m) {
    return {{"total", m.total()},        {"dense", m.dense}, {"dense_linear", m.dense_linear},
            {"nf4", m.nf4},              {"q4_0", m.q4_0},   {"q4_1", m.q4_1},   {"q4_k", m.q4_k},
            {"q8_0", m.q8_0},            {"q6_k", m.q6_k},   {"q5_k", m.q5_k}, {"linear", m.dense_linear + m.quantized()}};
}

// Aggregate decode tok/s of one packed run of `cards`.
double decode_tps(const kev::Model& model, const std::vector<kev::TokenCard>& cards) {
    kev::Generator gen(model, nullptr, std::nullopt);
    kev::RunOptions options;
    options.ignore_end_of_sequence = true;
    const kev::GenerationResult r = gen.run(gen.prepare_tokens(cards, {}), options);
    long long generated = 0;
    for (const auto& c : r.cards) generated += static_cast<long long>(c.tokens.size());
    // The first token of every card comes from the prefill.
    return (generated - static_cast<long long>(cards.size())) / (r.total_s - r.prefill_s);
}

int run_precision(const Args& args) {
    std::string model_path, out_prefix;
    std::vector<std::string> precisions{"fp32", "bf16", "4bit", "nf4"};
    std::vector<int> ns{1, 4, 8, 16};
    int prompt_len = 32, gen_len = 64, reps = 3;
    for (std::size_t i = 0; i + 1 < args.size(); i += 2) {
        const std::string &k = args[i], &v = args[i + 1];
        if (k == "--model") model_path = v;
        else if (k == "--precisions") precisions = split(v);
        else if (k == "--n") {
            ns.clear();
            for (const auto& s : split(v)) ns.push_back(std::stoi(s));
        } else if (k == "--prompt") prompt_len = std::stoi(v);
        else if (k == "--gen") gen_len = std::stoi(v);
        else if (k == "--reps") reps = std::stoi(v);
        else if (k == "--out") out_prefix = v;
        else {
            std::fprintf(stderr, "kev-bench precision: unknown option %s\n", k.c_str());
            return 2;
        }
    }
    if (model_path.empty()) {
        std::fprintf(stderr, "kev-bench precision: --model PATH is required\n");
        return 2;
    }
    nlohmann::json report;
    report["engine"] = engine_header();
    report["command"] = command_line("precision", args);
    report["model"] = model_path;
    // Half activations (the 4bit/nf4 precisions) run the int8 kernel where the CPU has it.
    report["q4_kernel"] = kev::quant_int8_available() ? kev::to_string(kev::quant_int8_kernel()) : kev::to_string(kev::quant_kernel());
    report["prompt_tokens"] = prompt_len;
    report["generated_tokens"] = gen_len;
    report["repetitions"] = reps;
    std::vector<std::unique_ptr<kev::Model>> models;
    for (const auto& p : precisions) {
        const auto t0 = std::chrono::steady_clock::now();
        models.push_back(kev::Model::load(model_path, load_options(p)));
        const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        report["memory"][p] = memory_json(models.back()->weights().memory());
        report["load_s"][p] = load_s;
        std::fprintf(stderr, "%s: %.1f MB of weights, loaded in %.1f s\n", p.c_str(),
                     models.back()->weights().bytes() / 1e6, load_s);
    }
    report["read_bandwidth_gbs"] = measure_read_bandwidth_gbs(1LL << 30, 5);

    const int vocab = static_cast<int>(models[0]->config().vocab_size);
    for (int n : ns) {
        std::mt19937 rng(99u + static_cast<unsigned>(n));
        std::uniform_int_distribution<int> tok(3, std::min(vocab, 32000) - 1);
        std::vector<kev::TokenCard> cards(static_cast<std::size_t>(n));
        for (auto& card : cards) {
            card.prompt.resize(static_cast<std::size_t>(prompt_len));
            for (auto& t : card.prompt) t = tok(rng);
            card.sampling.temperature = 0.0f;
            card.sampling.max_new_tokens = gen_len;
        }
        std::vector<std::vector<double>> tps(precisions.size());
        for (int r = 0; r < reps; ++r) {
            for (std::size_t k = 0; k < precisions.size(); ++k) {
                const std::size_t p = (r % 2 == 0) ? k : precisions.size() - 1 - k;  // alternate the order
                tps[p].push_back(decode_tps(*models[p], cards));
            }
        }
        nlohmann::json row{{"n", n}};
        for (std::size_t p = 0; p < precisions.size(); ++p) row["decode_tokens_per_s"][precisions[p]] = median(tps[p]);
        report["decode"].push_back(row);
        std::fprintf(stderr, "N=%d:", n);
        for (std::size_t p = 0; p < precisions.size(); ++p) std::fprintf(stderr, " %s %.1f", precisions[p].c_str(), median(tps[p]));
        std::fprintf(stderr, " tok/s\n");
    }

    std::printf("%s\n", report.dump(2).c_str());
    if (!out_prefix.empty()) {
        std::ofstream(out_prefix + ".json") << report.dump(2) << "\n";
        std::ofstream md(out_prefix + ".md");
        md << "# Precision: " << model_path << "\n\nCommand: `" << report["command"].get<std::string>() << "`\n\n"
           << "4-bit kernel: " << report["q4_kernel"].get<std::string>() << "; read bandwidth "
           << report["read_bandwidth_gbs"].get<double>() << " GB/s; prompt " << prompt_len << " tokens, " << gen_len
           << " generated per card, median of " << reps << ".\n\n"
           << "| precision | weights MB | linear layers MB | linear / bf16 linear | dense MB | nf4 MB | q4_0 MB | q4_1 MB | q4_k MB | q8_0 MB | q6_k MB | q5_k MB |\n"
           << "|---|---|---|---|---|---|---|---|---|---|---|---|\n";
        char buf[512];
        const bool has_bf16 = report["memory"].contains("bf16");
        for (const auto& p : precisions) {
            const auto& m = report["memory"][p];
            const double lin = m["linear"].get<double>();
            const double ratio = has_bf16 ? lin / report["memory"]["bf16"]["linear"].get<double>() : 0.0;
            std::snprintf(buf, sizeof buf, "| %s | %.1f | %.1f | %.3f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f |\n", p.c_str(),
                          m["total"].get<double>() / 1e6, lin / 1e6, ratio, m["dense"].get<double>() / 1e6,
                          m["nf4"].get<double>() / 1e6, m["q4_0"].get<double>() / 1e6, m["q4_1"].get<double>() / 1e6,
                          m["q4_k"].get<double>() / 1e6, m.value("q8_0", 0.0) / 1e6, m.value("q6_k", 0.0) / 1e6,
                          m.value("q5_k", 0.0) / 1e6);
            md << buf;
        }
        md << "\nAggregate decode tok/s (packed, N cards):\n\n| N |";
        for (const auto& p : precisions) md << " " << p << " |";
        if (has_bf16) md << " 4bit / bf16 |";
        md << "\n|---|";
        for (std::size_t p = 0; p < precisions.size() + (has_bf16 ? 1 : 0); ++p) md << "---|";
        md << "\n";
        for (const auto& row : report["decode"]) {
            md << "| " << row["n"].get<int>() << " |";
            for (const auto& p : precisions) {
                std::snprintf(buf, sizeof buf, " %.1f |", row["decode_tokens_per_s"][p].get<double>());
                md << buf;
            }
            if (has_bf16 && row["decode_tokens_per_s"].contains("4bit")) {
                std::snprintf(buf, sizeof buf, " %.2f |",
                              row["decode_tokens_per_s"]["4bit"].get<double>() / row["decode_tokens_per_s"]["bf16"].get<double>());
                md << buf;
            }
            md << "\n";
        }
    }
    return 0;
}

// Logits [T, V] (fp32) of `tokens` in windows of `window`, each window from an empty cache.
at::Tensor text_logits(const kev::Model& model, const std::vector<kev::TokenId>& tokens, std::int64_t window) {
    std::vector<at::Tensor> parts;
    for (std::size_t s = 0; s < tokens.size(); s += static_cast<std::size_t>(window)) {
        const std::size_t e = std::min(tokens.size(), s + static_cast<std::size_t>(window));
        std::vector<std::int64_t> w(tokens.begin() + static_cast<std::ptrdiff_t>(s), tokens.begin() + static_cast<std::ptrdiff_t>(e));
        kev::KvCache cache = model.make_cache(static_cast<std::int64_t>(w.size()));
        parts.push_back(model.forward(kev::single_sequence_batch(w, 0, false), cache));
    }
    return at::cat(parts, 0);
}

int run_quality(const Args& args) {
    std::string model_path, text_path, out_prefix;
    std::vector<std::string> precisions{"bf16", "4bit", "nf4"};
    std::int64_t window = 512;
    for (std::size_t i = 0; i + 1 < args.size(); i += 2) {
        const std::string &k = args[i], &v = args[i + 1];
        if (k == "--model") model_path = v;
        else if (k == "--text") text_path = v;
        else if (k == "--precisions") precisions = split(v);
        else if (k == "--window") window = std::stoll(v);
        else if (k == "--out") out_prefix = v;
        else {
            std::fprintf(stderr, "kev-bench quality: unknown option %s\n", k.c_str());
            return 2;
        }
    }
    std::ifstream in(text_path, std::ios::binary);
    if (model_path.empty() || !in) {
        std::fprintf(stderr, "kev-bench quality: --model PATH and a readable --text FILE are required\n");
        return 2;
    }
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    c10::InferenceMode guard;
    nlohmann::json report;
    report["engine"] = engine_header();
    report["command"] = command_line("quality", args);
    report["model"] = model_path;
    report["window"] = window;
    at::Tensor ref_logp;  // [T-1, V] log-probabilities of the first precision
    std::vector<kev::TokenId> tokens;
    for (const auto& p : precisions) {
        kev::SessionOptions so;
        so.load = load_options(p);
        const auto session = kev::Session::open(model_path, so);
        if (tokens.empty()) tokens = session->tokenizer().encode(text, kev::SpecialTokens::Plain);
        const at::Tensor logits = text_logits(session->model(), tokens, window);  // [T, V]
        // Predictions for tokens 1..T-1, leaving out each window's first token (no context).
        std::vector<std::int64_t> rows, targets;
        for (std::size_t t = 0; t + 1 < tokens.size(); ++t) {
            if ((t + 1) % static_cast<std::size_t>(window) == 0) continue;
            rows.push_back(static_cast<std::int64_t>(t));
            targets.push_back(tokens[t + 1]);
        }
        const at::Tensor logp = at::log_softmax(logits.index_select(0, at::tensor(rows)), -1);  // [R, V]
        const at::Tensor nll = -logp.gather(1, at::tensor(targets).unsqueeze(1)).squeeze(1);  // [R]
        nlohmann::json r{{"precision", p},
                         {"perplexity", std::exp(nll.mean().item<double>())},
                         {"weight_bytes", session->model().weights().bytes()}};
        if (!ref_logp.defined()) {
            ref_logp = logp;
        } else {
            const at::Tensor kl = (ref_logp.exp() * (ref_logp - logp)).sum(-1);  // [R] KL(ref || p)
            const at::Tensor agree = ref_logp.argmax(-1).eq(logp.argmax(-1)).to(at::kDouble);
            r["mean_kl_vs_" + precisions[0]] = kl.mean().item<double>();
            r["max_kl_vs_" + precisions[0]] = kl.max().item<double>();
            r["greedy_agreement_vs_" + precisions[0]] = agree.mean().item<double>();
        }
        report["results"].push_back(r);
        report["predicted_tokens"] = rows.size();
        std::fprintf(stderr, "%s: %s\n", p.c_str(), r.dump().c_str());
    }
    report["text_tokens"] = tokens.size();
    std::printf("%s\n", report.dump(2).c_str());
    if (!out_prefix.empty()) {
        std::ofstream(out_prefix + ".json") << report.dump(2) << "\n";
        std::ofstream md(out_prefix + ".md");
        md << "# Quality per precision: " << model_path << "\n\nCommand: `" << report["command"].get<std::string>()
           << "`\n\n" << tokens.size() << " tokens of text, windows of " << window << " tokens, "
           << report["predicted_tokens"].get<std::size_t>() << " next-token predictions; KL and agreement against "
           << precisions[0] << ".\n\n| precision | weights MB | perplexity | mean KL | max KL | greedy agreement |\n"
           << "|---|---|---|---|---|---|\n";
        char buf[256];
        const std::string ref = precisions[0];
        for (const auto& r : report["results"]) {
            const bool other = r.contains("mean_kl_vs_" + ref);
            std::snprintf(buf, sizeof buf, "| %s | %.1f | %.3f | %s | %s | %s |\n", r["precision"].get<std::string>().c_str(),
                          r["weight_bytes"].get<double>() / 1e6, r["perplexity"].get<double>(),
                          other ? std::to_string(r["mean_kl_vs_" + ref].get<double>()).c_str() : "-",
                          other ? std::to_string(r["max_kl_vs_" + ref].get<double>()).c_str() : "-",
                          other ? std::to_string(r["greedy_agreement_vs_" + ref].get<double>()).c_str() : "-");
            md << buf;
        }
    }
    return 0;
}

// ggml Q8_0 blocks of w [rows, cols] (cols a multiple of 32), as llama.cpp's reference
// quantizer makes them: d = absmax / 127 in fp16, q = round(x / d).
kev::QuantMatrix q8_0_of(const at::Tensor& w) {
    const at::Tensor f = w.to(at::kFloat).contiguous();
    const std::int64_t rows = f.size(0), cols = f.size(1), blocks = rows * cols / 32;
    std::vector<std::uint8_t> bytes(static_cast<std::size_t>(blocks * 34));
    const float* src = f.data_ptr<float>();
    for (std::int64_t b = 0; b < blocks; ++b) {
        float amax = 0.0f;
        for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(src[b * 32 + j]));
        const float d = amax / 127.0f, id = d > 0.0f ? 1.0f / d : 0.0f;
        const std::uint16_t h = c10::Half(d).x;
        std::uint8_t* out = bytes.data() + b * 34;
        out[0] = static_cast<std::uint8_t>(h & 0xff);
        out[1] = static_cast<std::uint8_t>(h >> 8);
        for (int j = 0; j < 32; ++j) out[2 + j] = static_cast<std::uint8_t>(static_cast<std::int8_t>(std::lrint(src[b * 32 + j] * id)));
    }
    return kev::quant_from_ggml(kev::QuantFormat::Q8_0, bytes.data(), bytes.size(), rows, cols);
}

// Random ggml blocks [rows, cols] of a format whose codes can be any bytes: Q4_0, Q4_1,
// Q4_K or Q6_K (cols a multiple of 32, of 256 for the K-quants). Random codes and factors,
// and a small finite fp16 at each of the block's scale offsets (d; Q4_1 also m; Q4_K d and
// dmin; Q6_K d, its last two bytes). Speed does not depend on the values.
kev::QuantMatrix random_blocks(kev::QuantFormat format, std::int64_t rows, std::int64_t cols) {
    struct Layout {
        std::int64_t elems, bytes;
        std::vector<std::size_t> fp16_at;
        float unit;
    };
    const Layout l = format == kev::QuantFormat::Q4_0   ? Layout{32, 18, {0}, 0.001f}
                     : format == kev::QuantFormat::Q4_1 ? Layout{32, 20, {0, 2}, 0.001f}
                     : format == kev::QuantFormat::Q4_K ? Layout{256, 144, {0, 2}, 0.001f}
                                                        : Layout{256, 210, {208}, 0.0001f};  // Q6_K
    std::mt19937 rng(7);
    std::vector<std::uint8_t> bytes(static_cast<std::size_t>(rows * cols / l.elems * l.bytes));
    for (auto& b : bytes) b = static_cast<std::uint8_t>(rng());
    for (std::size_t at = 0; at < bytes.size(); at += static_cast<std::size_t>(l.bytes))
        for (const std::size_t off : l.fp16_at) {
            const std::uint16_t v = c10::Half(l.unit * static_cast<float>(1 + rng() % 9)).x;
            bytes[at + off] = static_cast<std::uint8_t>(v & 0xff);
            bytes[at + off + 1] = static_cast<std::uint8_t>(v >> 8);
        }
    return kev::quant_from_ggml(format, bytes.data(), bytes.size(), rows, cols);
}

// One matrix, every kernel path, M = 1..16: best time per call and the weight bytes it
// streams per second (what bounds the decode step). bf16 at::linear for comparison.
// --format nf4 (the default), q4_0 or q4_1 (random blocks), q8_0 (the byte kernels), q4_k or
// q6_k (cols a multiple of 256), each also in the int8 layout. Prompt-sized M (128, 512)
// time the int8 kernel's passes of several rows.
int run_q4kernel(const Args& args) {
    std::int64_t rows = 9728, cols = 896;  // the 0.5B model's fused gate|up
    std::vector<int> ms{1, 4, 8, 16};
    int reps = 50;
    std::string format = "nf4";
    for (std::size_t i = 0; i + 1 < args.size(); i += 2) {
        const std::string &k = args[i], &v = args[i + 1];
        if (k == "--rows") rows = std::stoll(v);
        else if (k == "--cols") cols = std::stoll(v);
        else if (k == "--reps") reps = std::stoi(v);
        else if (k == "--format") format = v;
        else if (k == "--m") {
            ms.clear();
            for (const auto& s : split(v)) ms.push_back(std::stoi(s));
        } else {
            std::fprintf(stderr, "kev-bench q4kernel: unknown option %s\n", k.c_str());
            return 2;
        }
    }
    c10::InferenceMode guard;
    const at::Tensor w = at::randn({rows, cols}) * 0.02;  // [rows, cols]
    const bool kquant = format == "q4_k" || format == "q6_k";
    const bool q4_01 = format == "q4_0" || format == "q4_1";
    if ((format != "nf4" && format != "q8_0" && !kquant && !q4_01) || (kquant && cols % 256 != 0) || cols % 32 != 0) {
        std::fprintf(stderr, "kev-bench q4kernel: --format must be nf4, q4_0, q4_1, q8_0, q4_k or q6_k (--cols a multiple "
                             "of 32, of 256 for K-quants)\n");
        return 2;
    }
    const kev::QuantMatrix q = format == "q8_0"   ? q8_0_of(w)
                               : format == "q4_0" ? random_blocks(kev::QuantFormat::Q4_0, rows, cols)
                               : format == "q4_1" ? random_blocks(kev::QuantFormat::Q4_1, rows, cols)
                               : format == "q4_k" ? random_blocks(kev::QuantFormat::Q4_K, rows, cols)
                               : format == "q6_k" ? random_blocks(kev::QuantFormat::Q6_K, rows, cols)
                                                  : kev::quantize_nf4(w);
    const kev::QuantMatrix qi = rows % 16 == 0 ? kev::interleave_rows16(q) : q;  // the int8 kernel's layout
    const at::Tensor wb = w.to(at::kBFloat16);
    nlohmann::json report;
    report["engine"] = engine_header();
    report["command"] = command_line("q4kernel", args);
    auto time_ms = [&](const auto& fn) {
        std::vector<double> t;
        for (int r = 0; r < reps; ++r) {
            const auto t0 = std::chrono::steady_clock::now();
            fn();
            t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
        }
        // The best call: on a shared machine the median mostly measures preemption.
        return *std::min_element(t.begin(), t.end());
    };
    for (int m : ms) {
        const at::Tensor x = at::randn({m, cols}).to(at::kBFloat16);
        nlohmann::json row{{"m", m}};
        const double bf16_ms = time_ms([&] { (void)at::linear(x, wb); });
        row["bf16_linear_ms"] = bf16_ms;
        row["bf16_linear_gbs"] = wb.nbytes() / bf16_ms / 1e6;
        for (auto k : {kev::QuantKernel::Avx512, kev::QuantKernel::Avx2, kev::QuantKernel::Scalar}) {
            if (!kev::quant_kernel_supported(k) || m > kev::kQuantGemvMaxRows) continue;
            const double ms_k = time_ms([&] { (void)kev::quant_gemv(x, q, at::Tensor(), k); });
            row[std::string(kev::to_string(k)) + "_ms"] = ms_k;
            row[std::string(kev::to_string(k)) + "_gbs"] = q.bytes() / ms_k / 1e6;
        }
        for (auto k : {kev::Int8Kernel::Avx2, kev::Int8Kernel::AvxVnni, kev::Int8Kernel::Vnni, kev::Int8Kernel::Amx}) {
            if (!kev::quant_int8_kernel_supported(k) || !qi.interleaved) continue;
            const std::string name = k == kev::Int8Kernel::Amx       ? "int8_amx"
                                     : k == kev::Int8Kernel::Vnni    ? "int8_vnni"
                                     : k == kev::Int8Kernel::AvxVnni ? "int8_avx_vnni"
                                                                     : "int8_avx2";
            const double ms_k = time_ms([&] { (void)kev::quant_int8_linear(x, qi, at::Tensor(), k); });
            row[name + "_ms"] = ms_k;
            row[name + "_gbs"] = qi.bytes() / ms_k / 1e6;
        }
        const double lin_ms = time_ms([&] { (void)kev::quant_linear(x, q, at::Tensor()); });
        row["quant_linear_ms"] = lin_ms;
        std::fprintf(stderr, "%s\n", row.dump().c_str());
        report["results"].push_back(row);
    }
    std::printf("%s\n", report.dump(2).c_str());
    return 0;
}

}  // namespace

KEV_BENCH("q4kernel", "the 4-bit kernel paths vs bf16 linear on one matrix [--rows 9728 --cols 896 --m 1,4,8,16 --reps 50 "
                      "--format nf4|q4_0|q4_1|q8_0|q4_k|q6_k]",
          run_q4kernel);
KEV_BENCH("precision", "weight memory and decode tok/s per precision --model PATH [--precisions fp32,bf16,4bit,nf4] "
                       "[--n 1,4,8,16] [--prompt 32] [--gen 64] [--reps 3] [--out PREFIX]",
          run_precision);
KEV_BENCH("quality", "KL, greedy agreement and perplexity per precision over a text --model PATH --text FILE "
                     "[--precisions bf16,4bit,nf4] [--window 512] [--out PREFIX]",
          run_quality);

}  // namespace kevbench
