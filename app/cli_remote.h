// kev-cli --server URL: the questions as streaming requests to an OpenAI-compatible
// server (vLLM, SGLang, llama.cpp's server) instead of the local packed engine.
#pragma once

#include <csignal>
#include <cstdint>
#include <string>

#include "kev/generator.h"

namespace kevcli {

struct RemoteOptions {
    std::string server;        // base URL
    std::string model;         // --server-model; empty: the server's only model
    std::string api_key;       // KEV_API_KEY
    bool insecure = false;     // plain http to a host that is not this machine
    bool completions = false;  // /v1/completions (no chat template on the server)
    double timeout_s = 120.0;
    std::int32_t logprobs = 0;
    bool json = false;
    bool jsonl = false;
    // Send every card again alone, one after the other, and report where its text
    // differs from the board's: whether this server gives a card the same answer alone
    // and in a batch (exit 3 on a difference, as for the local engine).
    bool verify = false;
};

// Sends every card of `request` at once and prints the answers as a local run would
// (text, --json or --jsonl). `stop` is polled: a signal's number stops every request.
// Returns 0 when every card finished, 1 when any failed (each failure said on stderr
// and in the JSON), 2 for a connection that may not be used, 3 for an isolation
// difference found by `verify`.
int answer_remote(const RemoteOptions& o, const kev::GenerationRequest& request, volatile std::sig_atomic_t* stop);

}  // namespace kevcli
