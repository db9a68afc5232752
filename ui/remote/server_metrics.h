// What a server publishes about itself: Prometheus text on /metrics (llama.cpp's server
// with --metrics, vLLM and SGLang name the same few figures differently) and llama.cpp's
// JSON slot list on /slots (on by default; --no-slots answers 501). Kev shows them as the
// server's own figures, beside the ones it measures from the streams.
#pragma once

#include <QByteArray>
#include <QHash>
#include <QObject>
#include <QString>
#include <QTimer>

#include <optional>

#include "remote_run.h"

class QNetworkAccessManager;
class QNetworkReply;

namespace kevremote {

// Sample values by metric name (labels dropped, samples of one name summed). Lines
// that are not samples are skipped; at most `kMaxBytes` are read.
QHash<QString, double> parse_prometheus(const QByteArray& text);

// llama.cpp's /slots: one entry per parallel slot (its --parallel / -np), as this build
// writes it when one slot is generating and another is idle (the "params" of the slot's
// last task left out):
//   [{"id":0,"n_ctx":1024,"speculative":false,"is_processing":false},
//    {"id":2,"n_ctx":1024,"speculative":false,"is_processing":true,"id_task":34,
//     "n_prompt_tokens":160,"params":{...},
//     "next_token":[{"has_next_token":true,"n_remain":748,"n_decoded":152}]}]
// Older servers say "state" (0 idle, otherwise busy) instead of "is_processing", and
// "next_token" is one object instead of a list.
struct SlotFigures {
    int total = 0;                         // slots the server has
    int busy = 0;                          // slots working on a request now
    std::optional<qint64> context_per_slot;  // "n_ctx" where every slot gives the same
    qint64 decoded_by_busy = 0;            // tokens the busy slots have generated so far
};

// The figures of a /slots answer, or nothing when it is not a slot list (not JSON, not
// an array of objects, empty, over `kMaxBytes`). The answer is the server's, so it is
// untrusted: fields that are missing or of another type are skipped, never trusted.
std::optional<SlotFigures> parse_slots(const QByteArray& json);

struct ServerFigures {
    std::optional<double> running;           // requests being generated
    std::optional<double> waiting;           // requests queued
    std::optional<double> kv_usage;          // share of the KV cache in use, 0..1
    std::optional<double> generation_tok_s;  // the server's own generation rate
    std::optional<double> cached_prompt_tokens;  // prompt tokens it reused from its cache (total)
    std::optional<SlotFigures> slots;        // from /slots, not /metrics
    bool any() const { return running || waiting || kv_usage || generation_tok_s || cached_prompt_tokens || slots; }
    // "2 running, 0 waiting, KV cache 12%, 24.5 tok/s, slots 2 of 4 busy, ..." (what the server gave).
    QString describe() const;
};

// The /metrics part of the figures (`slots` left empty).
ServerFigures summarize(const QHash<QString, double>& metrics);

// Polls one server's /metrics and /slots every `interval_ms` on the thread that owns it
// (Qt Network is asynchronous: the UI never waits for it). At most one request of each
// kind is in flight: a poll that finds one still out skips that kind. A kind the server
// refuses (HTTP 404/501, an answer Kev cannot read) is not asked again; the other one
// still gives figures.
class MetricsPoller : public QObject {
    Q_OBJECT
public:
    MetricsPoller(Connection connection, int interval_ms, QObject* parent = nullptr);
    void start();
    void stop();
    void pollNow();

Q_SIGNALS:
    // After each answer: the latest of both kinds (a kind that failed this time is absent).
    void figures(const kevremote::ServerFigures& figures);
    // Once, when neither /metrics nor /slots gives figures Kev knows.
    void unavailable(const QString& why);

private:
    enum class Kind { Metrics, Slots };
    struct Source {
        bool inFlight = false;
        QString unavailable;  // why it is not asked again; empty while it is
    };
    Source& source(Kind kind) { return kind == Kind::Metrics ? metrics_ : slots_; }
    void ask(Kind kind);
    void onAnswer(Kind kind, QNetworkReply* reply);

    Connection connection_;
    QNetworkAccessManager* network_;
    QTimer timer_;
    Source metrics_;
    Source slots_;
    ServerFigures latest_;  // the metrics part and the slots part, each from its last answer
    bool saidUnavailable_ = false;
};

}  // namespace kevremote
