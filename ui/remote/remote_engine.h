// The remote engine behind kev::AnswerEngine: every card of a request as one streaming
// request to an OpenAI-compatible server (RemoteRun), all at once, so the server's
// continuous batching does what the local engine's packed forward does. kev-cli and the
// app's lanes call it exactly as they call the local engine.
#pragma once

#include "kev/answer_engine.h"
#include "remote_run.h"

namespace kevremote {

// A card of `request` as a request: its settings as fields (unset ones left to the
// server), the request's shared context and system message (the card's own wins).
RemoteCard remote_card(const kev::GenerationRequest& request, const kev::CardRequest& card);

// A finished request's outcome as the engine's result: the server's finish_reason
// ("length" -> max tokens, "stop" -> end of sequence), a failure with its message, the
// figures Kev measured from the stream, and the server's logprobs as token details
// (their text only: a server sends no token ids; the entropy a lower bound from its top-K).
kev::CardResult card_result(const CardOutcome& outcome, const RemoteCard& sent);

class RemoteEngine final : public kev::AnswerEngine {
public:
    explicit RemoteEngine(Connection connection);
    // "<model> at <base URL>"
    std::string describe() const override;
    bool gives_token_ids() const override { return false; }
    // Runs an event loop on the calling thread until every card has ended (the thread needs
    // a QCoreApplication; the app calls it from a lane thread of its own). A card without a
    // seed is sent one drawn here and reports it, so Replay sends the same request again.
    // A connection that may not be used (connection_problem) throws InvalidArgument.
    kev::GenerationResult answer(const kev::GenerationRequest& request, const kev::RunOptions& options,
                                 const std::function<void(const kev::PreparedPack&)>& on_prepared = {}) override;

    const Connection& connection() const { return connection_; }

private:
    Connection connection_;
};

}  // namespace kevremote
