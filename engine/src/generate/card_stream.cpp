#include "generate/card_stream.h"

#include <algorithm>
#include <limits>

namespace kev {

CardStream::CardStream(const SamplingSettings& settings, const Tokenizer* tokenizer, std::int64_t prompt_tokens,
                       double start_s)
    : sampler_(settings), start_s_(start_s) {
    if (tokenizer) decoder_ = std::make_unique<StreamDecoder>(*tokenizer, settings.stop_strings);
    result_.seed = sampler_.seed();
    result_.temperature = settings.temperature_or_default();
    result_.stats.prompt_tokens = prompt_tokens;
}

SampleResult CardStream::sample(const float* row, const SampleContext& ctx, const std::vector<TokenId>& history) {
    const auto vocab = static_cast<std::size_t>(ctx.vocab);
    std::vector<float>& scratch = scratch_;
    scratch.assign(row, row + vocab);
    if (ctx.keep_logits) result_.logits.emplace_back(scratch.begin(), scratch.end());
    // Ids past the tokenizer's vocabulary (the padding rows some models add to their
    // embedding, e.g. Qwen's 151936 for ~151665 tokens) have no text: never sampled,
    // never offered as alternatives.
    if (ctx.sampled_vocab < ctx.vocab)
        std::fill(scratch.begin() + ctx.sampled_vocab, scratch.end(), std::numeric_limits<float>::lowest());
    LogitSummary summary;
    if (ctx.logprobs > 0) {
        summary = summarize_logits(scratch.data(), scratch.size(), ctx.logprobs);
        result_.logprobs.push_back(summary.top);
    }
    if (ctx.ignore_end_of_sequence && ctx.end_of_sequence) {
        for (TokenId id : *ctx.end_of_sequence) {
            if (id >= 0 && id < ctx.vocab) scratch[static_cast<std::size_t>(id)] = std::numeric_limits<float>::lowest();
        }
    }
    const SampleResult s = sampler_.sample(scratch.data(), scratch.size(), history);
    pending_detail_.reset();
    if (ctx.logprobs > 0) {
        // The chosen token's log-probability from the row as the model gave it (`scratch`
        // now holds the sampler's penalised, scaled copy).
        TokenDetail d;
        d.id = s.token;
        if (d.id >= 0 && d.id < ctx.vocab)
            d.logprob = static_cast<float>(static_cast<double>(row[static_cast<std::size_t>(d.id)]) - summary.log_z);
        d.entropy = static_cast<float>(summary.entropy);
        for (const auto& [id, lp] : result_.logprobs.back()) d.top.push_back({id, std::string(), lp});
        pending_detail_ = std::move(d);
    }
    return s;
}

std::string CardStream::take(TokenId token, double now_s, const Tokenizer* tokenizer) {
    result_.tokens.push_back(token);
    if (pending_detail_) {
        // Text only for the tokens kept: an end-of-sequence step has none.
        TokenDetail& d = *pending_detail_;
        if (tokenizer) {
            d.piece = token_display_text(tokenizer->token_bytes(d.id));
            for (TokenAlternative& a : d.top) a.piece = token_display_text(tokenizer->token_bytes(a.id));
        }
        result_.details.push_back(std::move(d));
        pending_detail_.reset();
    }
    if (first_token_s_ < 0) first_token_s_ = now_s;
    if (!decoder_) return std::string();
    std::string text = decoder_->push(token);
    if (decoder_->stopped()) result_.matched_stop = decoder_->matched_stop();
    result_.text += text;
    return text;
}

std::string CardStream::finish(FinishReason reason) {
    result_.finish = reason;
    if (!decoder_ || decoder_->stopped()) return std::string();
    std::string rest = decoder_->flush();
    result_.text += rest;
    return rest;
}

const CardStats& CardStream::stats(double now_s) {
    CardStats& s = result_.stats;
    s.generated_tokens = static_cast<std::int64_t>(result_.tokens.size());
    s.time_to_first_token_s = first_token_s_ < 0 ? 0.0 : first_token_s_ - start_s_;
    const double span = now_s - first_token_s_;
    s.tokens_per_s = (first_token_s_ >= 0 && span > 0 && result_.tokens.size() > 1)
                         ? static_cast<double>(result_.tokens.size() - 1) / span
                         : 0.0;
    return s;
}

}  // namespace kev
