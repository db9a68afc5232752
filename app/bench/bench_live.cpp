// The live pack: what a board that changes while it runs costs, in the same process.
//
//   kev-bench live --model PATH [--precision fp32|bf16|4bit|nf4] [--cards 8] [--context 1000]
//                  [--prompt 64] [--gen 32] [--join-prompt 256] [--conversation 500]
//                  [--chunk 0] [--reps 3] [--out PREFIX]
//
// Random prompt tokens (fixed seed), end-of-sequence ignored. Three measurements, each the
// median of --reps, each against its own baseline measured alternately in the same run:
//   edit     a board of --cards cards sharing a --context-token context runs once; one
//            card's last prompt token is edited and the board runs again: the edited
//            card's time to first token with the prefix cache against without it.
//   join     a card with a --join-prompt-token prompt joins a running --cards-card pack
//            after its 4th step: the joining card's time to first token (from its join),
//            and the longest step while it reads its prompt (the longest wait of a
//            running card for its next token) against the median steady step before it.
//   followup a --conversation-token conversation (prompt + answer) is continued by a
//            16-token turn: time to first token with the prefix cache against without it.
// The steady decode of the --cards-card pack is in the join runs' steps before the join.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "bench.h"
#include "bench_cards.h"
#include "kev/generator.h"
#include "kev/model.h"
#include "kev/prefix_cache.h"
#include "kev/quant.h"

namespace kevbench {

namespace {

kev::GenerationResult run(const kev::Model& model, const std::vector<kev::TokenCard>& cards,
                          const std::vector<kev::TokenId>& shared, kev::RunOptions options) {
    kev::Generator gen(model, nullptr, std::nullopt);
    options.ignore_end_of_sequence = true;
    return gen.run(gen.prepare_tokens(cards, shared), options);
}

}  // namespace

int run_live(const Args& args) {
    std::string model_path, out_prefix, precision = "fp32";
    int cards = 8, context = 1000, prompt = 64, gen = 32, join_prompt = 256, conversation = 500, reps = 3;
    int chunk = 0;  // --chunk: prompt rows beside answering cards (0: the engine's default)
    if (!read_options("live", args, {{"--model", &model_path}, {"--precision", &precision}, {"--out", &out_prefix}},
                      {{"--cards", &cards}, {"--context", &context}, {"--prompt", &prompt}, {"--gen", &gen},
                       {"--join-prompt", &join_prompt}, {"--conversation", &conversation}, {"--reps", &reps},
                       {"--chunk", &chunk}}))
        return 2;
    if (model_path.empty() || cards < 1 || reps < 1 || prompt < 2 || gen < 8 || conversation < 32) {
        std::fprintf(stderr, "kev-bench live: --model PATH is required (and --cards, --reps >= 1, --prompt >= 2, "
                             "--gen >= 8, --conversation >= 32)\n");
        return 2;
    }
    kev::LoadOptions load;
    kev::set_precision(load, precision);
    const auto model = kev::Model::load(model_path, load);
    const int vocab = static_cast<int>(model->config().vocab_size);
    std::mt19937 rng(1234);

    nlohmann::json report = report_start("live", args);
    report["model"] = model_path;
    report["precision"] = precision;
    report["repetitions"] = reps;
    run(*model, {{random_tokens(rng, vocab, 8), greedy(2)}}, {}, {});  // warm-up

    // --- edit: re-run a board after editing one card -----------------------------------
    const auto shared = random_tokens(rng, vocab, context);
    const std::vector<kev::TokenCard> board = random_board(rng, vocab, cards, prompt, gen);
    auto edited = board;
    edited[0].prompt.back() = (edited[0].prompt.back() + 1) % vocab;
    std::vector<double> edit_cached, edit_fresh, board_first;
    std::int64_t reused = 0;
    for (int r = 0; r < reps; ++r) {
        kev::PrefixCache cache(4ll << 30);
        kev::RunOptions with;
        with.prefix_cache = &cache;
        board_first.push_back(run(*model, board, shared, with).cards[0].stats.time_to_first_token_s);
        const auto again = run(*model, edited, shared, with);
        edit_cached.push_back(again.cards[0].stats.time_to_first_token_s);
        reused = again.cards[0].stats.reused_tokens;
        edit_fresh.push_back(run(*model, edited, shared, {}).cards[0].stats.time_to_first_token_s);
    }
    const double e_cached = median(edit_cached), e_fresh = median(edit_fresh);
    report["edit"] = {{"cards", cards},
                      {"shared_context_tokens", context},
                      {"prompt_tokens", prompt},
                      {"edited_card_reused_prompt_tokens", reused},
                      {"first_run_ttft_s", median(board_first)},
                      {"edited_ttft_with_prefix_cache_s", e_cached},
                      {"edited_ttft_without_s", e_fresh},
                      {"speedup", e_cached > 0 ? e_fresh / e_cached : 0.0},
                      {"target_speedup", 10.0}};

    // --- join: a card joins a running pack -----------------------------------------------
    std::vector<kev::TokenCard> running;
    for (int c = 0; c < cards; ++c) running.push_back({random_tokens(rng, vocab, prompt), greedy(4 * gen)});
    const auto joiner = random_tokens(rng, vocab, join_prompt);
    std::vector<double> join_ttft, max_gap, steady, ratio;
    std::int64_t join_steps = 0;
    for (int r = 0; r < reps; ++r) {
        kev::JoinQueue queue;
        std::vector<double> before;
        double gap = 0.0, joined_at = -1.0, first = -1.0;
        std::int64_t joined_step = -1, prompt_steps = 0;
        kev::RunOptions o;
        o.joins = &queue;
        o.prompt_rows_beside_answers = chunk;
        o.on_step = [&](const kev::StepEvent& ev) {
            if (ev.step == 4) {
                kev::JoiningCard j;
                j.tag = 1;
                j.prompt = joiner;
                j.sampling = greedy(8);
                queue.push(j);
                joined_at = ev.elapsed_s;
            }
            if (!ev.joined.empty()) joined_step = ev.step;
            if (ev.step >= 1 && joined_step < 0) before.push_back(ev.step_s);
            if (joined_step >= 0 && first < 0) {
                gap = std::max(gap, ev.step_s);
                ++prompt_steps;
                for (const auto& u : ev.updates)
                    if (u.card == cards && !u.tokens.empty()) first = ev.elapsed_s;
            }
        };
        run(*model, running, {}, o);
        const double s = median(before);
        join_ttft.push_back(first - joined_at);
        max_gap.push_back(gap);
        steady.push_back(s);
        ratio.push_back(s > 0 ? gap / s : 0.0);
        join_steps = prompt_steps;
    }
    report["join"] = {{"running_cards", cards},
                      {"chunk", chunk > 0 ? std::to_string(chunk) : std::string("default")},
                      {"join_prompt_tokens", join_prompt},
                      {"joining_card_ttft_s", median(join_ttft)},
                      {"steps_to_read_its_prompt", join_steps},
                      {"steady_step_s", median(steady)},
                      {"steady_aggregate_tokens_per_s", median(steady) > 0 ? cards / median(steady) : 0.0},
                      {"longest_step_while_joining_s", median(max_gap)},
                      {"longest_step_over_steady", median(ratio)},
                      {"target_ratio", 2.0}};

    // --- followup: continue a conversation ------------------------------------------------
    std::vector<double> f_cached, f_fresh;
    std::int64_t f_reused = 0;
    const int opening = conversation - gen;
    for (int r = 0; r < reps; ++r) {
        kev::PrefixCache cache(4ll << 30);
        kev::RunOptions with;
        with.prefix_cache = &cache;
        const kev::TokenCard first{random_tokens(rng, vocab, opening), greedy(gen)};
        const auto answer = run(*model, {first}, {}, with).cards[0].tokens;
        kev::TokenCard next{first.prompt, greedy(8)};
        next.prompt.insert(next.prompt.end(), answer.begin(), answer.end());
        const auto turn = random_tokens(rng, vocab, 16);
        next.prompt.insert(next.prompt.end(), turn.begin(), turn.end());
        const auto cont = run(*model, {next}, {}, with);
        f_cached.push_back(cont.cards[0].stats.time_to_first_token_s);
        f_reused = cont.cards[0].stats.reused_tokens;
        f_fresh.push_back(run(*model, {next}, {}, {}).cards[0].stats.time_to_first_token_s);
    }
    const double fc = median(f_cached), ff = median(f_fresh);
    report["followup"] = {{"conversation_tokens", conversation},
                          {"turn_tokens", 16},
                          {"reused_tokens", f_reused},
                          {"ttft_with_prefix_cache_s", fc},
                          {"ttft_without_s", ff},
                          {"speedup", fc > 0 ? ff / fc : 0.0},
                          {"target_speedup", 5.0}};

    const std::string text = report.dump(2);
    std::printf("%s\n", text.c_str());
    if (!out_prefix.empty()) std::ofstream(out_prefix + ".json") << text << "\n";
    return 0;
}

KEV_BENCH("live", "a board that changes while it runs --model PATH [--precision fp32|bf16|4bit|nf4] [--cards 8] "
                  "[--context 1000] [--prompt 64] [--gen 32] [--join-prompt 256] [--conversation 500] [--chunk 0] [--reps 3] "
                  "[--out PREFIX]",
          run_live);

}  // namespace kevbench
