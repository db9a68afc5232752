// Whatever answers a board's cards: the local packed engine (a Session's Generator) or a
// server (kevremote::RemoteEngine, beside the app in ui/remote). kev-cli and the app's
// engine threads call only this interface; neither knows which engine it has.
//
//   kev-cli / app lane           AnswerEngine::answer(request, options, on_prepared)
//   ------------------           ----------------------------------------------------
//   options.cancel (atomics) --> read between steps (local) or polled (server)
//   options.on_step          <-- text and tokens as they come, per card
//   return value             <-- every card's CardResult once all have ended
//
// The call blocks on the calling thread until every card has ended; a caller that must
// stay responsive calls it from a thread of its own (the app does, one per engine).
#pragma once

#include <functional>
#include <string>

#include "kev/generator.h"

namespace kev {

class Session;

class AnswerEngine {
public:
    virtual ~AnswerEngine() = default;

    // For people and for an answer's record: "SmolLM2-135M-Instruct.Q4_1.gguf" or
    // "qwen2.5-72b at https://gpu-box:8000/v1".
    virtual std::string describe() const = 0;
    // True when results carry the model's token ids, so a card alone and in the pack are
    // compared token by token. A server's stream gives text only: compared as text.
    virtual bool gives_token_ids() const = 0;

    // Answers every card of `request`: text streams through options.on_step, a card set in
    // options.cancel stops at its next step. The request's `logprobs` and
    // `ignore_end_of_sequence` hold for both engines (RunOptions' keep_logits and
    // dense_mask are the local engine's test switches). Returns when every card has ended. A card that
    // fails on its own (a server's error for that request) ends with FinishReason::Failed
    // and CardResult::error, and the others go on; a failure of the whole run (a card the
    // engine cannot take, a model error) throws kev::Error and no card is answered.
    // `on_prepared` (may be empty) sees the local engine's pack before its first forward:
    // the pack view's picture. A server has no pack and does not call it.
    virtual GenerationResult answer(const GenerationRequest& request, const RunOptions& options,
                                    const std::function<void(const PreparedPack&)>& on_prepared = {}) = 0;
};

// The packed forward on this machine: every card in one pack (Generator::prepare + run).
// Cards without a temperature take `defaults` (KEV_TEMPERATURE); LoRA cards use the
// session's attached adapter.
class LocalEngine final : public AnswerEngine {
public:
    // `prefix_cache` (may be null, then nothing is kept between runs): keys and values of
    // earlier runs' prompts, reused by later runs (RunOptions::prefix_cache); its owner
    // keeps it across runs of one loaded model.
    explicit LocalEngine(const Session& session, TemperatureDefaults defaults = {},
                         PrefixCache* prefix_cache = nullptr);
    std::string describe() const override;
    bool gives_token_ids() const override { return true; }
    GenerationResult answer(const GenerationRequest& request, const RunOptions& options,
                            const std::function<void(const PreparedPack&)>& on_prepared = {}) override;

private:
    const Session& session_;
    TemperatureDefaults defaults_;
    PrefixCache* prefix_cache_ = nullptr;
};

// Where a card alone and in the pack first differ: the token index (engines with token
// ids) or the byte index of the text (servers), or -1 when the two answers are the same.
std::int64_t first_difference(const AnswerEngine& engine, const CardResult& packed, const CardResult& alone);

}  // namespace kev
