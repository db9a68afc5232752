// The remote engine: each card one streaming request to an OpenAI-compatible server
// (vLLM, SGLang, llama.cpp's server), all sent at once, so the server's continuous
// batching does what the local engine's packed forward does. Lives on the thread that
// creates it (Qt Network is asynchronous); nothing here blocks.
#pragma once

#include <QElapsedTimer>
#include <QNetworkRequest>
#include <QObject>
#include <QString>
#include <QUrl>
#include <QVector>

#include <memory>
#include <vector>

#include "http_stream.h"
#include "openai_wire.h"
#include "sse.h"

namespace kevremote {

struct Connection {
    QUrl base;             // e.g. http://127.0.0.1:8080/v1 (a URL without /v1 gets it)
    QString model;         // an id from the server's /v1/models
    QString api_key;       // sent as "Authorization: Bearer ..."; empty: none
    bool insecure = false; // allow plain http to a host that is not this machine
    int timeout_ms = 120000;  // no byte from the server for this long: the card fails
    Api api = Api::Chat;
};

// Why `c` may not be used, in words, or empty when it may: a URL that is not http(s), or
// plain http to another machine without `insecure` (the key and the questions would
// cross the network readable).
QString connection_problem(const Connection& c);

// The URL of `path` ("chat/completions", "models") below the connection's base.
QUrl api_url(const Connection& c, const QString& path);
// The URL of `path` at the server's root, beside /v1 ("metrics").
QUrl root_url(const Connection& c, const QString& path);
// A GET of `url` as this connection sends it: its key as a bearer token, an idle timeout.
// (The model list and /metrics; completions stream through HttpStream.)
QNetworkRequest get_request(const Connection& c, const QUrl& url, int timeout_ms);

enum class CardState { Waiting, Streaming, Finished, Failed, Stopped };

struct CardOutcome {
    CardState state = CardState::Waiting;
    QString text;
    QString finish_reason;     // the server's ("stop", "length", ...)
    QString error;             // why it failed, with the server's message where it sent one
    int tokens = 0;            // the chunks with text so far; at the end the server's count where it sent one
    double time_to_first_token_s = 0.0;  // measured by Kev, from sending the request
    double tokens_per_s = 0.0;           // measured by Kev: tokens after the first / time since it
    double total_s = 0.0;
    std::vector<TokenLogprob> logprobs;
};

class RemoteRun : public QObject {
    Q_OBJECT
public:
    RemoteRun(Connection connection, QVector<RemoteCard> cards, QObject* parent = nullptr);
    ~RemoteRun() override;

    // Sends every card's request. A connection_problem fails every card at once.
    void start();
    // Closes that card's request (its text so far stays); the others go on.
    void stop(int card);
    void stopAll();

    int size() const { return static_cast<int>(cards_.size()); }
    const CardOutcome& outcome(int card) const { return cards_[static_cast<std::size_t>(card)].outcome; }
    bool finished() const { return remaining_ == 0; }

Q_SIGNALS:
    void textArrived(int card, const QString& delta);
    void cardFinished(int card);  // outcome(card) is final (finished, failed or stopped)
    void allFinished();

private:
    struct Card {
        RemoteCard request;
        CardOutcome outcome;
        std::unique_ptr<HttpStream> http;  // its own connection: requests never queue behind each other
        SseParser parser;
        QElapsedTimer clock;
        double first_token_s = -1.0;
        double last_token_s = 0.0;
        int chunks_with_text = 0;
        int server_tokens = 0;    // "usage.completion_tokens", where the server sent it
        bool done = false;        // [DONE] or a finish_reason came
        bool closed = false;      // cardFinished emitted
        QByteArray error_body;    // what a failing answer said (HTTP >= 400)
    };

    void onData(int card);
    void onFinished(int card);
    void fail(int card, const QString& message);
    void close(int card, CardState state);
    QString httpProblem(const Card& c) const;
    QString endpointText() const;  // the completions URL, for messages

    Connection connection_;
    std::vector<Card> cards_;
    int remaining_ = 0;
};

}  // namespace kevremote
