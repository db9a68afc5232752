// What keeping only the window of windowed layers saves (KvCache::keep_windows), and what
// it costs, in the same process.
//
//   kev-bench window --model PATH [--precision fp32|bf16|4bit|nf4] [--cards 4] [--prompt 1200]
//                    [--gen 64] [--chunk 128] [--reps 2] [--out PREFIX]
//
// --cards cards of --prompt random tokens (fixed seed) generate --gen tokens each (end of
// sequence ignored), the windowed layers in rings (prompts read --chunk rows per card and
// step) and keeping every slot, alternating, --reps times. Reports the KV cache's bytes
// (allocated at the end, and the most in use at any step), prefill time, decode tok/s and
// whether every card got the same tokens both ways. Then the same rule on published model
// shapes, 4 cards of 2k / 8k / 32k tokens each (within each model's context), checked first
// against the measured run.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "bench.h"
#include "bench_cards.h"
#include "kev/generator.h"
#include "kev/kv_cache.h"
#include "kev/model.h"
#include "kev/prefix_cache.h"
#include "kev/quant.h"

namespace kevbench {

namespace {

// A model's KV shape: what the rule needs.
struct KvShape {
    const char* name;
    long long layers, windowed, kv_heads, head_dim, window;
    long long context;  // the model's max positions
};

// The bytes a pack of `cards` regions of `tokens` slots holds in the KV cache, with the
// windowed layers in rings of max(window, block) + chunk - 1 slots or not (kv_cache.h).
long long kv_bytes(const KvShape& s, long long dtype_bytes, long long cards, long long tokens, long long chunk,
                   bool rings) {
    const long long per_layer_slot = 2 * s.kv_heads * s.head_dim * dtype_bytes;
    const long long ring = std::max<long long>(s.window, kev::PrefixCache::kBlockTokens) + chunk - 1;
    const long long windowed_slots = rings ? std::min(tokens, ring) : tokens;
    return per_layer_slot * cards * ((s.layers - s.windowed) * tokens + s.windowed * windowed_slots);
}

std::string mib(long long bytes) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
    return buf;
}

}  // namespace

int run_window(const Args& args) {
    std::string model_path, out_prefix, precision = "bf16";
    int cards = 4, prompt = 1200, gen = 64, chunk = 128, reps = 2;
    if (!read_options("window", args, {{"--model", &model_path}, {"--precision", &precision}, {"--out", &out_prefix}},
                      {{"--cards", &cards}, {"--prompt", &prompt}, {"--gen", &gen}, {"--chunk", &chunk}, {"--reps", &reps}}))
        return 2;
    if (model_path.empty() || cards < 1 || prompt < 2 || gen < 2 || chunk < 1 || reps < 1) {
        std::fprintf(stderr, "kev-bench window: --model PATH is required (and --cards, --chunk, --reps >= 1, "
                             "--prompt, --gen >= 2)\n");
        return 2;
    }
    kev::LoadOptions load;
    kev::set_precision(load, precision);
    const auto model = kev::Model::load(model_path, load);
    const kev::ModelConfig& c = model->config();
    long long windowed = 0;
    for (std::int64_t l = 0; l < c.num_layers; ++l) windowed += c.layer_windowed(l) ? 1 : 0;
    if (windowed == 0) {
        std::fprintf(stderr, "kev-bench window: the model has no windowed layers\n");
        return 2;
    }
    const int vocab = static_cast<int>(c.vocab_size);
    std::mt19937 rng(4321);
    const std::vector<kev::TokenCard> board = random_board(rng, vocab, cards, prompt, gen);
    kev::Generator generator(*model, nullptr, std::nullopt);
    const kev::PreparedPack pack = generator.prepare_tokens(board, {});

    struct Side {
        std::vector<double> prefill_s, decode_tps;
        long long cache_bytes = 0, peak_bytes = 0;
        long long steps = 0;
        std::vector<std::vector<kev::TokenId>> tokens;
    } side[2];  // 0: rings, 1: every slot
    bool same_tokens = true;
    for (int r = 0; r < reps; ++r) {
        for (int s = 0; s < 2; ++s) {
            kev::RunOptions o;
            o.ignore_end_of_sequence = true;
            o.keep_windows = s == 0;
            o.window_chunk = chunk;
            const kev::GenerationResult res = generator.run(pack, o);
            Side& d = side[s];
            // The prompts are read (in chunks with rings) once every card has its first token.
            double prompts_read = 0.0;
            for (const auto& card : res.cards) prompts_read = std::max(prompts_read, card.stats.time_to_first_token_s);
            d.prefill_s.push_back(prompts_read);
            d.decode_tps.push_back(static_cast<double>(cards) * (gen - 1) / std::max(1e-9, res.total_s - prompts_read));
            d.cache_bytes = res.cache_bytes;
            d.peak_bytes = res.cache_peak_bytes;
            d.steps = res.steps;
            std::vector<std::vector<kev::TokenId>> tokens;
            for (const auto& card : res.cards) tokens.push_back(card.tokens);
            if (d.tokens.empty()) d.tokens = tokens;
            same_tokens = same_tokens && tokens == side[0].tokens && (side[1].tokens.empty() || tokens == side[1].tokens);
            std::fprintf(stderr, "rep %d %-10s prompts read %.2f s, decode %.2f tok/s, KV %s (peak %s)\n", r,
                         s == 0 ? "rings" : "all slots", prompts_read, d.decode_tps.back(), mib(res.cache_bytes).c_str(),
                         mib(res.cache_peak_bytes).c_str());
        }
    }

    const long long dtype_bytes = model->dtype() == kev::DType::F32 ? 4 : 2;
    const KvShape measured{"this model", c.num_layers, windowed, c.num_kv_heads, c.head_dim, c.sliding_window,
                           c.max_positions};
    const long long tokens = prompt + gen;
    const long long rule_rings = kv_bytes(measured, dtype_bytes, cards, tokens, chunk, true);
    const long long rule_all = kv_bytes(measured, dtype_bytes, cards, tokens, chunk, false);
    const bool rule_holds = rule_rings == side[0].peak_bytes && rule_all == side[1].peak_bytes;

    nlohmann::json report = report_start("window", args);
    const std::string cmd = report["command"];
    report.update({{"model", model_path}, {"precision", precision}, {"layers", c.num_layers},
                   {"windowed_layers", windowed}, {"window", c.sliding_window}, {"cards", cards}, {"prompt", prompt},
                   {"gen", gen}, {"chunk", chunk}, {"repetitions", reps}, {"same_tokens", same_tokens},
                   {"rule_matches_measured", rule_holds}});
    for (int s = 0; s < 2; ++s) {
        nlohmann::json j;
        j["kv_cache_bytes"] = side[s].cache_bytes;
        j["kv_peak_in_use_bytes"] = side[s].peak_bytes;
        j["steps"] = side[s].steps;
        j["prompts_read_s_median"] = median(side[s].prefill_s);
        j["decode_tok_s_median"] = median(side[s].decode_tps);
        report[s == 0 ? "rings" : "every_slot"] = j;
    }
    // Published shapes (their config.json): the rule above, bf16, chunk as given.
    const KvShape shapes[] = {
        {"Gemma 3 270M", 18, 15, 1, 256, 512, 32768},  {"Gemma 3 1B", 26, 22, 1, 256, 512, 32768},
        {"Gemma 3 4B", 34, 29, 4, 256, 1024, 131072},  {"Gemma 2 2B", 26, 13, 4, 256, 4096, 8192},
        {"Mistral 7B v0.1", 32, 32, 8, 128, 4096, 32768},
    };
    nlohmann::json table = nlohmann::json::array();
    for (const KvShape& s : shapes) {
        for (long long t : {2048LL, 8192LL, 32768LL}) {
            if (t > s.context) continue;
            const long long with = kv_bytes(s, 2, 4, t, chunk, true), without = kv_bytes(s, 2, 4, t, chunk, false);
            table.push_back({{"model", s.name}, {"cards", 4}, {"tokens_per_card", t}, {"rings_bytes", with},
                             {"every_slot_bytes", without}});
        }
    }
    report["published_shapes_bf16"] = table;
    const std::string json = report.dump(2);
    std::printf("%s\n", json.c_str());

    if (!out_prefix.empty()) {
        std::ofstream(out_prefix + ".json") << json << "\n";
        std::ofstream md(out_prefix + ".md");
        md << "# Windowed layers keep only the window (kev-bench window)\n\n`" << cmd << "`\n\n";
        md << "Model: " << c.num_layers << " layers, " << windowed << " windowed (window " << c.sliding_window
           << "), " << c.num_kv_heads << " KV heads of " << c.head_dim << ", " << precision << "; " << cards
           << " cards of " << prompt << " prompt + " << gen << " new tokens; prompts read " << chunk
           << " rows per card and step with rings. Median of " << reps << ", alternating.\n\n";
        md << "| | rings | every slot | rings / every slot |\n|---|---|---|---|\n";
        auto row = [&md](const char* what, double a, double b, const std::string& sa, const std::string& sb) {
            char ratio[32];
            std::snprintf(ratio, sizeof ratio, "%.3f", b > 0 ? a / b : 0.0);
            md << "| " << what << " | " << sa << " | " << sb << " | " << ratio << " |\n";
        };
        row("KV cache at the end", side[0].cache_bytes, side[1].cache_bytes, mib(side[0].cache_bytes), mib(side[1].cache_bytes));
        row("KV in use, most of any step", side[0].peak_bytes, side[1].peak_bytes, mib(side[0].peak_bytes), mib(side[1].peak_bytes));
        char a[32], b[32];
        const double pa = median(side[0].prefill_s), pb = median(side[1].prefill_s);
        std::snprintf(a, sizeof a, "%.2f s", pa);
        std::snprintf(b, sizeof b, "%.2f s", pb);
        row("prompts read (every card's first token)", pa, pb, a, b);
        const double da = median(side[0].decode_tps), db = median(side[1].decode_tps);
        std::snprintf(a, sizeof a, "%.2f tok/s", da);
        std::snprintf(b, sizeof b, "%.2f tok/s", db);
        row("decode (all cards)", da, db, a, b);
        md << "\nSame tokens both ways: " << (same_tokens ? "yes" : "NO") << ". The rule below gives this run's "
           << "peak bytes exactly: " << (rule_holds ? "yes" : "NO") << ".\n\n";
        md << "## The rule on published shapes (bf16 keys and values, 4 cards)\n\n"
              "| model | tokens per card | every slot | rings | saved |\n|---|---|---|---|---|\n";
        for (const auto& e : table) {
            const long long w = e["rings_bytes"], o = e["every_slot_bytes"];
            char saved[16];
            std::snprintf(saved, sizeof saved, "%.0f%%", 100.0 * (1.0 - static_cast<double>(w) / static_cast<double>(o)));
            md << "| " << e["model"].get<std::string>() << " | " << e["tokens_per_card"].get<long long>() << " | "
               << mib(o) << " | " << mib(w) << " | " << saved << " |\n";
        }
    }
    return same_tokens && rule_holds ? 0 : 1;
}

KEV_BENCH("window", "what keeping only the window of windowed layers saves and costs --model PATH [--precision bf16] "
                    "[--cards 4] [--prompt 1200] [--gen 64] [--chunk 128] [--reps 2] [--out PREFIX]",
          run_window);

}  // namespace kevbench
