// The boards the generation benchmarks run: random prompt tokens from a seeded generator,
// greedy cards (or sampled at a temperature, each card seeded), and the median the
// reports quote.
#pragma once

#include <algorithm>
#include <random>
#include <vector>

#include "kev/generator.h"

namespace kevbench {

inline std::vector<kev::TokenId> random_tokens(std::mt19937& rng, int vocab, int n) {
    std::uniform_int_distribution<int> tok(3, vocab - 1);
    std::vector<kev::TokenId> v(static_cast<std::size_t>(n));
    for (auto& t : v) t = tok(rng);
    return v;
}

inline kev::SamplingSettings greedy(int max_new) {
    kev::SamplingSettings s;
    s.temperature = 0.0f;
    s.max_new_tokens = max_new;
    return s;
}

// `cards` cards of `prompt` random tokens, `gen` new tokens each: greedy, or sampled at
// `temperature` (> 0) with card c seeded c + 1.
inline std::vector<kev::TokenCard> random_board(std::mt19937& rng, int vocab, int cards, int prompt, int gen,
                                                float temperature = 0.0f) {
    std::vector<kev::TokenCard> board;
    for (int c = 0; c < cards; ++c) {
        kev::SamplingSettings s = greedy(gen);
        if (temperature > 0.0f) {
            s.temperature = temperature;
            s.seed = static_cast<std::uint64_t>(c + 1);
        }
        board.push_back({random_tokens(rng, vocab, prompt), s});
    }
    return board;
}

inline double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
}

}  // namespace kevbench
