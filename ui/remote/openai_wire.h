// The OpenAI-compatible completion API as vLLM, SGLang and llama.cpp's server speak it:
// one card's request body, and what one streamed chunk says.
#pragma once

#include <QByteArray>
#include <QString>
#include <QStringList>
#include <QPair>
#include <QVector>

#include <optional>
#include <vector>

namespace kevremote {

// A card's settings as request fields. Unset ones are left out, so the server's default
// applies; top_k and min_p are not OpenAI fields but vLLM, SGLang and llama.cpp take them.
struct RemoteSampling {
    std::optional<double> temperature;
    std::optional<double> top_p;
    std::optional<int> top_k;
    std::optional<double> min_p;
    std::optional<double> repetition_penalty;  // sent under vLLM's name and llama.cpp's (repeat_penalty)
    int max_tokens = 256;
    QStringList stop;
    std::optional<quint64> seed;
    int logprobs = 0;  // top-K alternatives per token; 0 = none asked
    bool ignore_eos = false;  // fixed lengths (benchmarks): vLLM's, SGLang's and llama.cpp's extension
};

struct RemoteCard {
    // Earlier exchanges of the card's conversation (question, answer), oldest first.
    QVector<QPair<QString, QString>> history;
    QString question;
    QString system;          // empty: none
    QString shared_context;  // goes first in every card's prompt (the server's prefix cache computes it once)
    RemoteSampling sampling;
};

// /v1/chat/completions (messages) or /v1/completions (a plain prompt, for a server whose
// model has no chat template).
enum class Api { Chat, Completions };

// The path below the base URL ("chat/completions").
QString endpoint(Api api);

// The JSON body of one streamed request. The shared context opens the system message
// (chat) or the prompt (completions), so every card's prompt starts with the same text.
QByteArray request_body(const RemoteCard& card, const QString& model, Api api);

struct TokenLogprob {
    QString token;
    double logprob = 0.0;
    std::vector<std::pair<QString, double>> top;  // most likely first, as the server sent them
};

// One "data:" payload of the stream.
struct StreamChunk {
    bool done = false;                 // "[DONE]"
    QString text;                      // the new text (may be empty: a role or a finish chunk)
    std::vector<TokenLogprob> logprobs;
    QString finish_reason;             // "stop", "length", ... when the answer ended
    std::optional<int> completion_tokens;  // from "usage", where the server sends it
};

// Parses one payload. Returns the problem in words ("not JSON: ...", the server's
// "error" message) when the payload is not a completion chunk.
std::optional<QString> parse_chunk(const QByteArray& data, StreamChunk& out);

// The message of an error body ({"error": {"message": ...}} or {"error": "..."}), or
// empty when the body is not one.
QString error_message(const QByteArray& body);

// The model ids of a /v1/models answer; the problem in `error` when it is not one.
QStringList parse_models(const QByteArray& body, QString* error);

}  // namespace kevremote
