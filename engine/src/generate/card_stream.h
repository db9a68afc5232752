// One card's side of a run: its Sampler, its StreamDecoder (whole UTF-8 characters, stop
// strings across tokens), its result and stats. The run loop hands it the logits row of
// each step it samples at and the token the planner kept; it hands back the text that
// became safe to show. Nothing in here knows about the other cards.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "kev/detokenizer.h"
#include "kev/generator.h"

namespace kev {

// What sampling a card's row needs from the run (the same for every card).
struct SampleContext {
    std::int64_t vocab = 0;          // columns of a logits row
    std::int64_t sampled_vocab = 0;  // ids >= this have no text: never sampled
    const std::vector<TokenId>* end_of_sequence = nullptr;
    bool ignore_end_of_sequence = false;
    std::int32_t logprobs = 0;
    bool keep_logits = false;
};

class CardStream {
public:
    // `tokenizer` may be null (no text); `start_s` is when the card entered the run.
    CardStream(const SamplingSettings& settings, const Tokenizer* tokenizer, std::int64_t prompt_tokens,
               double start_s);

    // Samples from one logits row (`row` holds ctx.vocab floats as the model gave them);
    // `history` is what the repetition penalty looks at (read only when it is on).
    SampleResult sample(const float* row, const SampleContext& ctx, const std::vector<TokenId>& history);
    bool wants_history() const { return sampler_.settings().repetition_penalty != 1.0f; }

    // The planner kept `token` at time `now_s`: appends it, returns the new text. After
    // it, stopped() says whether the text now holds a stop string.
    std::string take(TokenId token, double now_s, const Tokenizer* tokenizer);
    bool stopped() const { return decoder_ && decoder_->stopped(); }
    // The card finished: records why, returns the text held back (none after a stop).
    std::string finish(FinishReason reason);

    // Its stats at `now_s` (time to first token from its start).
    const CardStats& stats(double now_s);
    CardResult& result() { return result_; }

private:
    Sampler sampler_;
    std::unique_ptr<StreamDecoder> decoder_;
    CardResult result_;
    std::vector<float> scratch_;                 // the row as the sampler changes it
    std::optional<TokenDetail> pending_detail_;  // of the last sample, until take() keeps it
    double start_s_ = 0.0;
    double first_token_s_ = -1.0;
};

}  // namespace kev
