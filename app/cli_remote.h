// kev-cli --server URL: the remote engine (an OpenAI-compatible server: vLLM, SGLang,
// llama.cpp's server) behind the same kev::AnswerEngine as the local packed engine, so
// every answering option (--json, --jsonl, --logprobs, --sequential, --verify-isolation)
// is one code path for both.
#pragma once

#include <memory>
#include <string>

#include "kev/answer_engine.h"

namespace kevcli {

struct RemoteOptions {
    std::string server;        // base URL
    std::string model;         // --server-model; empty: the server's only model
    std::string api_key;       // KEV_API_KEY
    bool insecure = false;     // plain http to a host that is not this machine
    bool completions = false;  // /v1/completions (no chat template on the server)
    double timeout_s = 120.0;
};

struct RemoteEngineInfo {
    std::string model;  // the served model's id (named, or the server's only one)
    std::string api;    // "chat" or "completions"
};

// The server's engine. Throws kev::Error: InvalidArgument for a connection that may not
// be used (plain http to another machine without --insecure, not http(s)), Io when the
// model list cannot be read or names several models and none was chosen.
std::unique_ptr<kev::AnswerEngine> open_remote_engine(const RemoteOptions& o, RemoteEngineInfo* info);

}  // namespace kevcli
