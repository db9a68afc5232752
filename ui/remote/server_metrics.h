// What a server publishes about itself on /metrics (Prometheus text): llama.cpp's server
// (with --metrics), vLLM and SGLang name the same few figures differently. Kev shows
// them as the server's own figures, beside the ones it measures from the streams.
#pragma once

#include <QByteArray>
#include <QHash>
#include <QObject>
#include <QString>
#include <QTimer>

#include <optional>

#include "remote_run.h"

class QNetworkAccessManager;

namespace kevremote {

// Sample values by metric name (labels dropped, samples of one name summed). Lines
// that are not samples are skipped; at most `kMaxBytes` are read.
QHash<QString, double> parse_prometheus(const QByteArray& text);

struct ServerFigures {
    std::optional<double> running;           // requests being generated
    std::optional<double> waiting;           // requests queued
    std::optional<double> kv_usage;          // share of the KV cache in use, 0..1
    std::optional<double> generation_tok_s;  // the server's own generation rate
    std::optional<double> cached_prompt_tokens;  // prompt tokens it reused from its cache (total)
    bool any() const { return running || waiting || kv_usage || generation_tok_s || cached_prompt_tokens; }
    // "2 running, 0 waiting, KV cache 12%, 24.5 tok/s" (what the server gave).
    QString describe() const;
};

ServerFigures summarize(const QHash<QString, double>& metrics);

// Polls one server's /metrics every `interval_ms` on the thread that owns it (Qt Network
// is asynchronous: the UI never waits for it).
class MetricsPoller : public QObject {
    Q_OBJECT
public:
    MetricsPoller(Connection connection, int interval_ms, QObject* parent = nullptr);
    void start();
    void stop();
    void pollNow();

Q_SIGNALS:
    void figures(const kevremote::ServerFigures& figures);
    void unavailable(const QString& why);  // once: no /metrics there, or it is not Prometheus text

private:
    Connection connection_;
    QNetworkAccessManager* network_;
    QTimer timer_;
    bool inFlight_ = false;
    bool saidUnavailable_ = false;
};

}  // namespace kevremote
