// Packed generation: N cards answered together. The first forward carries every prompt;
// each later step is one forward with one row per answering card, plus chunks of the
// prompts of cards that joined the running pack.
//
//   cards --prepare()--> PackPlan --run()--> plan step --> batch --> forward --> sample --> stream
//                                              ^ Planner    step_batch  Model     CardStream (per card)
//
// prepare() turns questions into chat prompts, tokens and a PackPlan (what the pack
// view draws); run() executes it with a Planner deciding each step and one CardStream
// per card (its Sampler with its own settings and random generator, its StreamDecoder
// for whole UTF-8 characters and stop strings, its stats). Cards may join a running
// pack (RunOptions::joins) and leave it (cancel). A card's answer never depends on the
// other cards of the pack, nor on when it joined: that is the isolation invariant the
// tests check.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kev/chat_template.h"
#include "kev/lora.h"
#include "kev/pack_plan.h"
#include "kev/planner.h"
#include "kev/prefix_cache.h"
#include "kev/sampling.h"
#include "kev/tokenizer.h"

namespace kev {

class Model;

struct CardRequest {
    std::string question;       // what the user typed (must not be blank)
    SamplingSettings sampling;  // temperature unset: KEV_TEMPERATURE's default, else greedy
    LoraUse lora = {};          // the model's attached adapter for this card (off by default)
    // This card's own system message, instead of the request's (nullopt: the request's).
    std::optional<std::string> system = std::nullopt;
    // The card's earlier turns, oldest first, written before `question` as the chat
    // template writes a conversation. Each user text must not be blank; an answer may be
    // empty.
    std::vector<ChatTurn> history = {};
};

struct GenerationRequest {
    std::vector<CardRequest> cards;
    std::optional<std::string> system;  // a system message for every card without its own (none: template default)
    // Text every card sees (a document, instructions), computed once and shared. It
    // becomes part of the system message; the tokens all prompts have in common are
    // stored once, first in the cache.
    std::string shared_context;
    // Benchmarks only: never stop at an end-of-sequence token (fixed answer lengths).
    bool ignore_end_of_sequence = false;
    // Top-K log-probabilities of every generated token (0 = off), for kev-cli --logprobs
    // and the comparison view. Generator::run reads RunOptions::logprobs: callers copy it.
    std::int32_t logprobs = 0;
};

// A card's prompt as tokens, for callers that tokenize themselves (tests, benchmarks).
struct TokenCard {
    std::vector<TokenId> prompt;
    SamplingSettings sampling;
    LoraUse lora = {};
};

struct CardStats {
    std::int64_t prompt_tokens = 0;      // its own prompt, without the shared context
    std::int64_t generated_tokens = 0;
    double time_to_first_token_s = 0.0;  // from the start of the run (a joining card: from its join)
    double tokens_per_s = 0.0;           // generated / time since its first token
    std::int64_t reused_tokens = 0;      // of prompt_tokens, copied from the prefix cache (not computed)
};

// What changed for one card during a step.
struct CardUpdate {
    std::int32_t card = 0;
    std::string text;                    // newly completed text (may be empty)
    std::vector<TokenId> tokens;         // tokens sampled this step
    std::optional<FinishReason> finished;
    CardStats stats;
};

// A card that joined the running pack at this step (or was refused).
struct JoinedCard {
    std::uint64_t tag = 0;               // JoiningCard::tag, as the caller gave it
    std::int32_t card = -1;              // its index in the run (GenerationResult::cards); -1: refused
    std::string error;                   // why it was refused
};

struct StepEvent {
    std::int64_t step = 0;               // 0 = the first forward
    StepKind kind = StepKind::Prefill;
    std::int32_t active_cards = 0;       // cards that sampled a token this step
    std::int64_t rows = 0;               // rows of this step's forward
    std::int64_t prompt_rows = 0;        // of which prompt tokens (cards reading their prompt)
    std::vector<JoinedCard> joined;
    std::int64_t kv_bytes_in_use = 0;    // the shared context and the running cards' regions
    std::int64_t prefix_cache_bytes = 0; // held by RunOptions::prefix_cache (0 without one)
    std::int64_t shared_reused_tokens = 0; // of the shared context, copied from the prefix cache
    double step_s = 0.0;                 // this step: forward + sampling
    double elapsed_s = 0.0;              // since the start of the run
    double aggregate_tokens_per_s = 0.0; // generated tokens of all cards / decode time
    LoraMode lora_mode = LoraMode::Off;  // how this run applies the LoRA adapter
    std::vector<CardUpdate> updates;
};

// One of the tokens the model weighed at a step (the top-K of its raw distribution).
struct TokenAlternative {
    TokenId id = 0;
    std::string piece;    // its text, as TokenDetail::piece
    float logprob = 0.0f;
};

// What the model's distribution looked like when it produced one token: what the
// comparison view colours and explains. The numbers are those of the raw logits (before
// repetition penalty, temperature, top-k, top-p and min-p), as for the top-K logprobs,
// so they describe the model and not the card's sampling; ids past the tokenizer's
// vocabulary are excluded as they are from sampling.
struct TokenDetail {
    TokenId id = 0;
    // The token's text alone (token_display_text): a token that holds part of a UTF-8
    // character shows that part as <0xE4>-style bytes. Empty without a tokenizer.
    std::string piece;
    float logprob = 0.0f;                 // log p of this token
    float entropy = 0.0f;                 // of the whole distribution at this step, in nats
    std::vector<TokenAlternative> top;    // the top-K, most likely first (may hold `id`)
};

struct CardResult {
    std::string text;                    // the answer (up to a stop string, if one matched)
    std::vector<TokenId> tokens;         // generated ids (an end-of-sequence id not included)
    FinishReason finish = FinishReason::MaxTokens;
    std::string matched_stop;
    std::string error;                   // FinishReason::Failed: why, in words (a server's message)
    std::uint64_t seed = 0;              // the seed its sampler used (to replay it)
    float temperature = 0.0f;            // the temperature it ran with, resolved
    CardStats stats;
    // Per sampled token, the top-K (token, log-probability) before sampling. A final
    // end-of-sequence token has an entry here but none in `tokens`.
    std::vector<std::vector<std::pair<TokenId, float>>> logprobs;
    // Per token of `tokens` (same length, same order): what the model weighed. Filled
    // only when RunOptions::logprobs > 0 (its K alternatives per token).
    std::vector<TokenDetail> details;
    // Per generated token, the raw logits row (only when RunOptions::keep_logits).
    std::vector<std::vector<float>> logits;
};

struct GenerationResult {
    std::vector<CardResult> cards;
    std::int64_t prefill_tokens = 0;
    std::int64_t steps = 0;              // forwards, the prefill included
    std::int64_t cache_bytes = 0;        // the KV cache's tensors at the end of the run
    std::int64_t cache_peak_bytes = 0;   // the most KvCache::bytes_in_use of any step
    double prefill_s = 0.0;
    double total_s = 0.0;
    double sample_s = 0.0;               // of total_s, the time spent drawing the cards' tokens
    LoraMode lora_mode = LoraMode::Off;  // how the run applied the LoRA adapter
};

// Cancellation requests, set from any thread, read between steps.
class CancelFlags {
public:
    explicit CancelFlags(std::size_t cards);
    void cancel_all() { all_.store(true, std::memory_order_relaxed); }
    void cancel(std::size_t card);
    bool all() const { return all_.load(std::memory_order_relaxed); }
    bool card(std::size_t card) const;
    std::size_t size() const { return n_; }

private:
    std::atomic<bool> all_{false};
    std::unique_ptr<std::atomic<bool>[]> cards_;
    std::size_t n_ = 0;
};

// A card that joins a running pack: a whole token prompt (the shared context's tokens
// first, when it has the run's shared context), as Generator::prepare_join makes it.
struct JoiningCard {
    std::uint64_t tag = 0;                 // the caller's id for it, echoed in StepEvent::joined
    std::vector<TokenId> prompt;
    SamplingSettings sampling;             // temperature resolved (prepare_join does it)
    LoraUse lora = {};
    std::string prompt_text;               // for the caller's view; not read by the run
    std::string error;                     // non-empty: it could not be prepared (refused, with this)
};

// Cards waiting to join a running pack: pushed from any thread, taken by the run between
// steps (thread-safe).
class JoinQueue {
public:
    JoinQueue();
    ~JoinQueue();
    void push(JoiningCard card);
    // A card as the user wrote it, chat-formatted and tokenized on the run's thread by the
    // preparer of the engine running the pack (LocalEngine sets it for the run: the run's
    // system message, shared context and temperature defaults). Until a preparer is set
    // it stays queued; pending_requests() then gives it back.
    void push_request(std::uint64_t tag, CardRequest card);
    void set_preparer(std::function<JoiningCard(const CardRequest&)> preparer);
    // Everything queued, requests prepared (a request the preparer refuses comes back with
    // its error set); requests wait while no preparer is set.
    std::vector<JoiningCard> take();
    // The tags of requests no run has taken.
    std::vector<std::uint64_t> pending_requests() const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

struct PreparedPack {
    PackPlan plan;
    std::vector<std::string> prompts;      // each card's whole prompt text (shared part included)
    std::vector<SamplingSettings> sampling;  // temperatures resolved
    std::vector<LoraUse> lora;               // per card
};

struct RunOptions {
    bool ignore_end_of_sequence = false;
    // > 0: CardResult::logprobs and CardResult::details, with this many alternatives.
    std::int32_t logprobs = 0;
    bool keep_logits = false;              // tests: keep every generated row's logits
    // Prefill and decode with one dense mask over the whole cache (every row reads every
    // slot up to the highest one, masked) instead of reading each card's own slots only
    // (per-card attention in the prefill, gathered slots in decode steps). The reference
    // path the tests compare the fast paths with; slower for larger packs.
    bool dense_mask = false;
    std::function<void(const StepEvent&)> on_step;
    // Per-card cancels; a card that joined later has the next index (flags past
    // CancelFlags::size() are never set, so make it as large as the run may grow).
    CancelFlags* cancel = nullptr;         // may be null
    // Cards that join the running pack: taken before every step (may be null). The run
    // ends when every card has finished and the queue is empty.
    JoinQueue* joins = nullptr;
    // Prompt rows one step carries beside answering cards: a joining card reads its prompt
    // in chunks of this many tokens, so the answering cards wait one chunk at most.
    // 0: 3/4 as many as the answering cards (PlannerOptions::prompt_rows_beside_answers).
    std::int64_t prompt_rows_beside_answers = 0;
    // Keys and values kept across runs (may be null): cards start from the blocks of their
    // prompt found there, and store theirs when they finish. The run owns it while it runs.
    PrefixCache* prefix_cache = nullptr;
    // Tests: fill a finished card's cache region with NaN when it is freed, so a row that
    // read it after free would show in its logits.
    bool poison_freed = false;
    // Windowed layers (sliding-window attention) keep only each region's window on the CPU
    // (KvCache::keep_windows): prompts are then read in chunks of at most `window_chunk`
    // rows per region and step, and the rings hold max(window, PrefixCache::kBlockTokens) +
    // window_chunk - 1 slots. False keeps every slot in every layer (tests compare the two).
    bool keep_windows = true;
    std::int64_t window_chunk = 128;
};

class Generator {
public:
    // `tokenizer` may be null for token-level use (no text, no stop strings). Both must
    // outlive the generator.
    Generator(const Model& model, const Tokenizer* tokenizer, std::optional<ChatTemplate> chat);
    // The same, allowed to merge the model's LoRA adapter into its weights (and to undo
    // that) when a run's cards all want it at one scale. A generator over a const model
    // always applies LoRA per row.
    Generator(Model& model, const Tokenizer* tokenizer, std::optional<ChatTemplate> chat);

    // Chat-formats and tokenizes the cards and lays out the pack; resolves temperatures
    // from `defaults` (KEV_TEMPERATURE) where a card has none. Throws InvalidArgument
    // naming the card (blank question, bad settings, too long for the context).
    PreparedPack prepare(const GenerationRequest& request,
                         const TemperatureDefaults& defaults = {}) const;
    // One card to join a run of `request`'s pack (its shared context and system message
    // as prepare() would give them): chat-formatted and tokenized, the temperature
    // resolved. Throws InvalidArgument as prepare() does.
    JoiningCard prepare_join(const GenerationRequest& request, const CardRequest& card,
                             const TemperatureDefaults& defaults = {}) const;
    // The same for token prompts (no chat formatting).
    PreparedPack prepare_tokens(const std::vector<TokenCard>& cards,
                                const std::vector<TokenId>& shared_context,
                                const TemperatureDefaults& defaults = {}) const;

    // How run() will apply LoRA to this pack: Off when no card wants it; Merged when every
    // card wants it at one scale, no target weight is 4-bit and this generator may change
    // the model; PerCard otherwise (one pack, LoRA-on and LoRA-off rows side by side).
    LoraMode lora_mode(const PreparedPack& pack) const;

    // Runs a prepared pack to the end (every card finished or cancelled). Merges or
    // unmerges the model's adapter first as lora_mode() says (the merge is left in place
    // for the next run that wants it; unmerging restores the original weights exactly).
    GenerationResult run(const PreparedPack& pack, const RunOptions& options = {}) const;

    // The PackLimits this model imposes: context length, vocabulary, and the memory a run
    // may take (KV cache slots, prefill attention scores) from the memory budget, so a
    // pack that cannot fit is refused before it starts (Error OutOfMemory), never halfway.
    PackLimits limits() const;
    // Bytes a run may use for its cache and activations; 0 (the default) = 80% of the
    // memory the machine has available when the run is prepared.
    void set_memory_budget(std::int64_t bytes) { memory_budget_ = bytes; }

private:
    struct Rendered {
        std::string text;
        std::vector<TokenId> tokens;
    };
    // One card's chat prompt (system message, shared context, question) and its tokens.
    Rendered render(const GenerationRequest& request, const CardRequest& card, std::size_t index) const;

    const Model& model_;
    Model* mutable_model_ = nullptr;  // set when merging is allowed
    const Tokenizer* tokenizer_;
    std::optional<ChatTemplate> chat_;
    std::int64_t memory_budget_ = 0;
};

}  // namespace kev
