// Sampling, pure: one settings struct and one random generator per card.
//
// The pipeline is fixed, and every stage is a function over one card's logits
// (a float span of the vocabulary size V) so it can be tested on hand-made numbers:
//
//   raw logits -> non-finite check -> repetition penalty -> temperature (once)
//              -> top-k -> top-p / min-p -> draw(u)
//
// Temperature 0 is greedy: the largest logit after the penalty, ties to the lowest id.
// The random number is an argument (u in [0, 1)), as in llama2.c; the Sampler class
// below owns a card's generator and feeds it. A Sampler draws exactly one number per
// token, greedy or not, so a card's draws depend only on its own seed and how many
// tokens it has produced: never on the other cards of the pack.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kev/pack_plan.h"  // TokenId

namespace kev {

// The temperature used when neither the card nor KEV_TEMPERATURE sets one: greedy, so
// an answer is reproducible by default.
constexpr float kDefaultTemperature = 0.0f;
// The UI offers 0..2; up to this is accepted (a flat distribution, but a deliberate one).
constexpr float kMaxTemperature = 10.0f;
// Below this a positive temperature would blow the logits up to infinity: use 0.
constexpr float kMinPositiveTemperature = 1e-3f;

struct SamplingSettings {
    // Unset: KEV_TEMPERATURE's value for this card, else kDefaultTemperature
    // (see resolve_temperatures). 0 = greedy.
    std::optional<float> temperature;
    std::int32_t top_k = 0;              // keep the k most likely tokens; 0 = off
    float top_p = 1.0f;                  // keep the smallest set with mass >= top_p; 1 = off
    float min_p = 0.0f;                  // drop tokens with p < min_p * p_max; 0 = off
    float repetition_penalty = 1.0f;     // HF semantics (see apply_repetition_penalty); 1 = off
    std::int64_t max_new_tokens = 256;
    std::optional<std::uint64_t> seed;   // unset: the Sampler picks one and reports it
    std::vector<std::string> stop_strings;

    // Throws kev::Error(InvalidArgument) naming the setting and the value: a
    // temperature that is negative, NaN, above kMaxTemperature or positive below
    // kMinPositiveTemperature; top_k < 0; top_p outside (0, 1]; min_p outside [0, 1);
    // repetition_penalty not positive or not finite; max_new_tokens < 1; an empty stop
    // string.
    void validate() const;
    float temperature_or_default() const { return temperature.value_or(kDefaultTemperature); }
};

// ---- The pipeline, stage by stage ---------------------------------------------------

// True when every logit is a finite number. A NaN or an infinity means the forward went
// wrong; the card is finished with FinishReason::NonFinite rather than sampled.
bool all_finite(const float* logits, std::size_t vocab);

// Hugging Face's repetition penalty: for every distinct token of `history`, a positive
// logit is divided by `penalty` and a negative one multiplied by it (so penalty > 1
// always makes a seen token less likely). Ids outside [0, vocab) are ignored.
void apply_repetition_penalty(float* logits, std::size_t vocab, const TokenId* history,
                              std::size_t history_len, float penalty);

// Divides every logit by `temperature` (> 0). Applied once, by sample_token; a caller
// that calls it itself must not hand the result to sample_token again.
void apply_temperature(float* logits, std::size_t vocab, float temperature);

// The largest logit; ties go to the lowest id; NaNs are skipped. Throws InvalidArgument
// for vocab 0.
TokenId argmax(const float* logits, std::size_t vocab);

// The reference stages, over a sorted candidate list. sample_token runs the same
// pipeline without sorting the whole vocabulary; the tests hold the two equal.
//
// The tokens still in the running, most likely first (ties: lower id first), with
// unnormalised weights exp(logit - max logit); a probability is weight / total().
struct Candidates {
    std::vector<TokenId> ids;
    std::vector<double> weights;
    std::size_t size() const { return ids.size(); }
    double total() const;
};

// Every token of the vocabulary, sorted (the softmax, unnormalised).
Candidates sorted_candidates(const float* logits, std::size_t vocab);
// Keeps the `top_k` most likely (0 = off).
void apply_top_k(Candidates& c, std::int32_t top_k);
// Keeps the smallest prefix whose probability mass is >= top_p (at least one token;
// top_p = 1 keeps everything).
void apply_top_p(Candidates& c, float top_p);
// Drops tokens with p < min_p * p_max (the most likely always stays; 0 = off).
void apply_min_p(Candidates& c, float min_p);
// The first candidate whose cumulative mass exceeds u * total() (u in [0, 1)); the
// last one if rounding leaves none.
TokenId draw(const Candidates& c, double u);

// What one card's sampling step gives back to the planner.
struct SampleResult {
    TokenId token = -1;        // valid unless non_finite
    bool non_finite = false;   // the logits held a NaN or an infinity: nothing was drawn
};

// The whole pipeline for one card's logits, given its random number `u` in [0, 1).
// `settings` must be valid; its temperature is taken as resolved (unset = default).
// `logits` is scratch: the penalties and the temperature are applied to it in place.
// `history` is what the penalty looks at (the card's context: shared context, prompt
// and the tokens generated so far). Cost on a 152k vocabulary (this CPU, one thread):
// about 0.2 ms greedy, 1 ms sampled with an LM-like peaked distribution, up to ~5 ms
// for a flat one; it keeps a thread-local scratch of 12 bytes per vocabulary entry.
SampleResult sample_token(float* logits, std::size_t vocab, const SamplingSettings& settings,
                          const TokenId* history, std::size_t history_len, double u);

// The top `k` tokens of the raw logits with their log-probabilities (for --logprobs),
// most likely first. Call it before sample_token, which changes the logits.
std::vector<std::pair<TokenId, float>> top_logprobs(const float* logits, std::size_t vocab,
                                                    std::int32_t k);

// The softmax of one row of raw logits, summarised for the comparison view:
//   log_z   = log sum_i exp(l_i), so that log p(t) = l_t - log_z;
//   entropy = -sum_i p_i log p_i, in nats: 0 when one token takes all the mass,
//             log(V) when all V are equally likely.
// One pass after the maximum, in double: with w_i = exp(l_i - m), S = sum w_i and
// T = sum w_i (l_i - m), log_z = m + log S and entropy = log S - T / S. Logits of
// -infinity or float's lowest (the padding ids the generator masks) weigh nothing.
// Throws InvalidArgument for vocab 0. Call it before sample_token, which changes the
// logits.
// With `top_k` > 0 it also keeps, in the same pass, the top_k tokens with their
// log-probabilities, most likely first (what top_logprobs returns).
struct LogitSummary {
    double log_z = 0.0;
    double entropy = 0.0;
    std::vector<std::pair<TokenId, float>> top;
};
LogitSummary summarize_logits(const float* logits, std::size_t vocab, std::int32_t top_k = 0);

// ---- Per-card sampler --------------------------------------------------------------

// A card's sampler: its settings and its own generator (std::mt19937_64 seeded with the
// card's seed). The uniform numbers are made from the generator's raw 64-bit output
// (53 bits -> [0, 1)), not std::uniform_real_distribution, whose algorithm differs
// between standard libraries: the same seed gives the same answer everywhere.
class Sampler {
public:
    // Validates the settings (throws InvalidArgument). Without a seed in the settings one
    // is taken from std::random_device; seed() says which, so a run can be replayed.
    explicit Sampler(SamplingSettings settings);

    const SamplingSettings& settings() const { return settings_; }
    std::uint64_t seed() const { return seed_; }

    // Draws the next uniform number and runs the pipeline (see sample_token).
    SampleResult sample(float* logits, std::size_t vocab, const TokenId* history,
                        std::size_t history_len);
    SampleResult sample(float* logits, std::size_t vocab, const std::vector<TokenId>& history) {
        return sample(logits, vocab, history.data(), history.size());
    }

    // The next number of this card's stream, in [0, 1).
    double next_uniform();

private:
    SamplingSettings settings_;
    std::uint64_t seed_ = 0;
    std::mt19937_64 rng_;
};

// ---- Stop strings ------------------------------------------------------------------

// Finds a card's stop strings in its streamed text (the detokenizer's deltas). Text
// that could be the start of a stop string is held back until it is known not to be,
// so a stop string never shows, even when it arrives split over several tokens:
//
//   stops {"\n\nUser:"}:  feed("Hi")       -> "Hi"
//                          feed(".\n\nUs") -> "."            ("\n\nUs" held back)
//                          feed("er: x")    -> "", stopped    (the answer ends at ".")
//
// On `stopped` the caller reports it with Planner::report_stop_string(card).
class StopStringMatcher {
public:
    // Empty stop strings are ignored (SamplingSettings::validate refuses them).
    explicit StopStringMatcher(std::vector<std::string> stop_strings);

    struct Result {
        std::string text;      // safe to show now
        bool stopped = false;  // a stop string completed: `text` is all that precedes it
    };
    // Feeds the next delta. It stops on the first delta after which the text holds a
    // stop string, cutting before the earliest occurrence. After a stop, further deltas
    // give nothing.
    Result feed(std::string_view delta);
    // The text held back, at the end of a card that did not stop on a stop string.
    std::string flush();
    bool stopped() const { return stopped_; }

private:
    std::vector<std::string> stops_;
    std::string held_;
    bool stopped_ = false;
};

// ---- KEV_TEMPERATURE -----------------------------------------------------------------

// Per-card default temperatures from the environment: one value for every card, or a
// comma-separated list with one value per card ("0.2,0.7,1.0"). Only cards whose own
// temperature is unset take it: an explicit setting wins.
struct TemperatureDefaults {
    std::vector<float> values;  // empty: no defaults; 1: every card; n: one per card

    // The default for card `card` of a pack of `cards`; empty when there are none.
    // Throws InvalidArgument when a list's length is not `cards`.
    std::optional<float> for_card(std::size_t card, std::size_t cards) const;
};

// Parses a KEV_TEMPERATURE value. An empty or blank value means no defaults. Throws
// InvalidArgument quoting the value and naming the item for a malformed number, an
// empty item, or a value outside [0, kMaxTemperature].
TemperatureDefaults parse_temperature_defaults(std::string_view value);

// Reads and parses the KEV_TEMPERATURE environment variable (unset = no defaults).
TemperatureDefaults temperature_defaults_from_env();

// Fills every card's unset temperature from `defaults` (else kDefaultTemperature), so
// that afterwards every card has exactly one temperature, which its Sampler applies
// once. Cards with an explicit temperature are left alone; calling it twice changes
// nothing. Throws InvalidArgument (count mismatch) with `cards` unchanged.
void resolve_temperatures(std::vector<SamplingSettings>& cards, const TemperatureDefaults& defaults);

}  // namespace kev
