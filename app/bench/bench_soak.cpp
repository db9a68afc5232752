// Many consecutive packs in one process, resident memory after each: does anything
// grow that should not (KV caches, LoRA copies, sampler state, allocator arenas)?
//
//   kev-bench soak [--model PATH] [--adapter DIR] [--packs 200] [--precisions fp32,bf16,4bit]
//                  [--max-tokens 24] [--warmup 10] [--out PREFIX]
//
// One session per precision is opened first (the demo adapter attached to each), then
// --packs runs cycle through them: pack sizes 1..8, LoRA on for every other card in
// every third pack, a shared context in every fourth, a mix of greedy and seeded
// sampling. Resident memory (VmRSS) is read after every pack; the report gives the
// value after the warm-up packs, after the last, the growth between them and the
// least-squares slope per pack over the packs after the warm-up.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "bench.h"
#include "kev/engine_info.h"
#include "kev/error.h"
#include "kev/generator.h"
#include "kev/session.h"

namespace kevbench {

namespace {

double rss_mib() {
    std::ifstream in("/proc/self/status");
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
    }
    return 0.0;
}

std::vector<std::string> split(const std::string& s) {
    std::vector<std::string> out;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ',')) out.push_back(item);
    return out;
}

const char* const kQuestions[] = {
    "What is the capital of France?", "Name three primary colors.",
    "Write a haiku about the sea.",   "What is 12 times 12?",
    "Who wrote Romeo and Juliet?",    "Give me a synonym for happy.",
    "What is the capital of Japan?",  "Explain photosynthesis in one sentence.",
};

// Pack `index` of the soak: its size, LoRA, shared context and sampling vary with the
// index so that every combination recurs many times.
kev::GenerationRequest soak_request(int index, int max_tokens, bool has_lora) {
    kev::GenerationRequest request;
    const int n = 1 + index % 8;
    for (int c = 0; c < n; ++c) {
        kev::CardRequest card;
        card.question = kQuestions[(index + c) % 8];
        card.sampling.max_new_tokens = max_tokens;
        if ((index + c) % 3 == 0) {
            card.sampling.temperature = 0.0f;
        } else {
            card.sampling.temperature = 0.7f;
            card.sampling.seed = static_cast<std::uint64_t>(index * 31 + c);
            card.sampling.top_p = 0.9f;
        }
        card.lora.enabled = has_lora && index % 3 == 0 && c % 2 == 1;
        request.cards.push_back(card);
    }
    if (index % 4 == 0) request.shared_context = "Answer in one short sentence. Be exact.";
    return request;
}

}  // namespace

struct SoakResult {
    std::vector<double> rss_mib;  // after each pack
    long long generated = 0;
    double wall_s = 0.0;
};

static int run_soak(const Args& args) {
    std::string model = kev::builtin_model_path();
    std::string adapter = kev::demo_adapter_path();
    std::string precisions = "fp32,bf16,4bit";
    std::string out_prefix;
    int packs = 200, max_tokens = 24, warmup = 10;
    for (std::size_t i = 0; i < args.size(); ++i) {
        const std::string& a = args[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= args.size()) throw kev::Error(kev::ErrorCode::InvalidArgument, a + " needs a value");
            return args[++i];
        };
        if (a == "--model") model = value();
        else if (a == "--adapter") adapter = value();
        else if (a == "--packs") packs = std::stoi(value());
        else if (a == "--precisions") precisions = value();
        else if (a == "--max-tokens") max_tokens = std::stoi(value());
        else if (a == "--warmup") warmup = std::stoi(value());
        else if (a == "--out") out_prefix = value();
        else throw kev::Error(kev::ErrorCode::InvalidArgument, "soak: unknown option " + a);
    }
    if (packs < 1 || warmup < 0 || warmup >= packs || max_tokens < 1)
        throw kev::Error(kev::ErrorCode::InvalidArgument, "soak: need 0 <= --warmup < --packs and --max-tokens >= 1");

    const double rss_start = rss_mib();
    std::vector<std::unique_ptr<kev::Session>> sessions;
    for (const std::string& p : split(precisions)) {
        kev::SessionOptions options;
        kev::set_precision(options.load, p);
        sessions.push_back(kev::Session::open(model, options));
        if (!adapter.empty()) sessions.back()->load_lora(adapter);
    }
    const double rss_loaded = rss_mib();

    SoakResult r;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < packs; ++i) {
        const kev::Session& s = *sessions[static_cast<std::size_t>(i) % sessions.size()];
        const kev::Generator g = s.generator();
        const auto result = g.run(g.prepare(soak_request(i, max_tokens, s.lora() != nullptr)));
        for (const auto& c : result.cards) r.generated += c.stats.generated_tokens;
        r.rss_mib.push_back(rss_mib());
    }
    r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    // Least-squares slope of RSS over the packs after the warm-up.
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    const int m = packs - warmup;
    for (int i = warmup; i < packs; ++i) {
        const double x = i, y = r.rss_mib[static_cast<std::size_t>(i)];
        sx += x; sy += y; sxx += x * x; sxy += x * y;
    }
    const double slope = m > 1 ? (m * sxy - sx * sy) / (m * sxx - sx * sx) : 0.0;
    const double after_warmup = r.rss_mib[static_cast<std::size_t>(warmup)];
    const double last = r.rss_mib.back();
    double peak = 0;
    for (double v : r.rss_mib) peak = std::max(peak, v);

    nlohmann::json report = engine_header();
    report["bench"] = "soak";
    report["model"] = model;
    report["adapter"] = adapter;
    report["precisions"] = split(precisions);
    report["packs"] = packs;
    report["warmup_packs"] = warmup;
    report["max_tokens"] = max_tokens;
    report["generated_tokens"] = r.generated;
    report["wall_s"] = r.wall_s;
    report["rss_mib"] = {{"start", rss_start},
                         {"loaded", rss_loaded},
                         {"after_warmup", after_warmup},
                         {"last", last},
                         {"peak", peak},
                         {"growth_after_warmup", last - after_warmup},
                         {"slope_per_pack", slope},
                         {"per_pack", r.rss_mib}};
    std::printf("%s\n", report.dump(2).c_str());
    std::fprintf(stderr,
                 "soak: %d packs (%s), %lld tokens in %.1f s; RSS loaded %.1f MiB, after %d packs "
                 "%.1f MiB, after %d %.1f MiB (growth %+.2f MiB, slope %+.4f MiB/pack, peak %.1f)\n",
                 packs, precisions.c_str(), r.generated, r.wall_s, rss_loaded, warmup, after_warmup,
                 packs, last, last - after_warmup, slope, peak);
    if (!out_prefix.empty()) {
        std::ofstream(out_prefix + ".json") << report.dump(2) << "\n";
    }
    return 0;
}

KEV_BENCH("soak", "many packs in one process (sizes, precisions, LoRA vary): resident memory after each",
          run_soak);

}  // namespace kevbench
