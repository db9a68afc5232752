#include "server_metrics.h"

#include <QNetworkAccessManager>
#include <QNetworkReply>

#include <cmath>

namespace kevremote {

namespace {
constexpr qsizetype kMaxBytes = 4 * 1024 * 1024;
}

QHash<QString, double> parse_prometheus(const QByteArray& text) {
    QHash<QString, double> out;
    for (const QByteArray& raw : text.left(kMaxBytes).split('\n')) {
        const QByteArray line = raw.trimmed();
        if (line.isEmpty() || line.startsWith('#')) continue;
        // name{labels} value [timestamp]; a label value may hold spaces, so the name
        // ends at '{' or the first space and the value follows the closing brace.
        qsizetype nameEnd = 0;
        while (nameEnd < line.size() && line[nameEnd] != '{' && line[nameEnd] != ' ') ++nameEnd;
        qsizetype rest = nameEnd;
        if (rest < line.size() && line[rest] == '{') {
            const qsizetype close = line.indexOf('}', rest);
            if (close < 0) continue;
            rest = close + 1;
        }
        const QList<QByteArray> fields = line.mid(rest).trimmed().split(' ');
        if (fields.isEmpty()) continue;
        bool ok = false;
        const double v = fields.front().toDouble(&ok);
        if (!ok || !std::isfinite(v)) continue;
        out[QString::fromLatin1(line.left(nameEnd))] += v;
    }
    return out;
}

ServerFigures summarize(const QHash<QString, double>& m) {
    auto first = [&m](std::initializer_list<const char*> names) -> std::optional<double> {
        for (const char* n : names)
            if (auto it = m.find(QLatin1String(n)); it != m.end()) return *it;
        return std::nullopt;
    };
    ServerFigures f;
    f.running = first({"llamacpp:requests_processing", "vllm:num_requests_running", "sglang:num_running_reqs"});
    f.waiting = first({"llamacpp:requests_deferred", "vllm:num_requests_waiting", "sglang:num_queue_reqs"});
    f.kv_usage = first({"llamacpp:kv_cache_usage_ratio", "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage"});
    f.generation_tok_s = first({"llamacpp:predicted_tokens_seconds", "sglang:gen_throughput"});
    f.cached_prompt_tokens = first({"llamacpp:prompt_tokens_cached_total", "vllm:prefix_cache_hits_total", "vllm:prefix_cache_hits"});
    return f;
}

QString ServerFigures::describe() const {
    QStringList parts;
    if (running) parts << QStringLiteral("%1 running").arg(*running, 0, 'f', 0);
    if (waiting) parts << QStringLiteral("%1 waiting").arg(*waiting, 0, 'f', 0);
    if (kv_usage) parts << QStringLiteral("KV cache %1%").arg(100.0 * *kv_usage, 0, 'f', 0);
    if (generation_tok_s) parts << QStringLiteral("%1 tok/s generation").arg(*generation_tok_s, 0, 'f', 1);
    if (cached_prompt_tokens) parts << QStringLiteral("%1 prompt tokens reused from its cache").arg(*cached_prompt_tokens, 0, 'f', 0);
    return parts.join(QStringLiteral(", "));
}

MetricsPoller::MetricsPoller(Connection connection, int interval_ms, QObject* parent)
    : QObject(parent), connection_(std::move(connection)), network_(new QNetworkAccessManager(this)) {
    timer_.setInterval(interval_ms);
    connect(&timer_, &QTimer::timeout, this, &MetricsPoller::pollNow);
}

void MetricsPoller::start() {
    pollNow();
    timer_.start();
}

void MetricsPoller::stop() { timer_.stop(); }

void MetricsPoller::pollNow() {
    if (inFlight_ || saidUnavailable_) return;
    // /metrics sits beside /v1, at the server's root.
    const QNetworkRequest request = get_request(connection_, root_url(connection_, QStringLiteral("metrics")), 5000);
    inFlight_ = true;
    QNetworkReply* reply = network_->get(request);
    connect(reply, &QNetworkReply::finished, this, [this, reply] {
        reply->deleteLater();
        inFlight_ = false;
        const int status = reply->attribute(QNetworkRequest::HttpStatusCodeAttribute).toInt();
        const ServerFigures f = status == 200 ? summarize(parse_prometheus(reply->readAll())) : ServerFigures{};
        if (f.any()) return Q_EMIT figures(f);
        if (status == 0) return;  // not reachable now: the cards say why
        saidUnavailable_ = true;
        Q_EMIT unavailable(status == 200 ? QStringLiteral("its /metrics has no figure Kev knows")
                                         : QStringLiteral("it publishes no /metrics (HTTP %1; llama.cpp: --metrics)").arg(status));
    });
}

}  // namespace kevremote
