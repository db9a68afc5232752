#include "server_metrics.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QNetworkAccessManager>
#include <QNetworkReply>

#include <algorithm>
#include <cmath>

namespace kevremote {

namespace {
// The most of one answer that is read: a /metrics text or a /slots list (a slot with its
// last task's settings is about 1.5 KB, so thousands of slots fit).
constexpr qsizetype kMaxBytes = 4 * 1024 * 1024;
// No count of tokens is larger; a bigger one is a server's mistake (and would overflow
// the sum).
constexpr qint64 kMaxTokens = qint64(1) << 40;
// Set on a reply cut off for its size.
constexpr const char* kTooLarge = "kevTooLarge";

// A count of tokens or a context size: a whole number in [0, kMaxTokens], or nothing.
std::optional<qint64> count(const QJsonValue& v) {
    const qint64 n = v.toInteger(-1);
    if (n < 0 || n > kMaxTokens) return std::nullopt;
    return n;
}

// Whether a slot is working on a request: "is_processing" (newer servers) or "state"
// (older ones: 0 is idle, every other state is some stage of a request).
bool slotBusy(const QJsonObject& slot) {
    if (const QJsonValue p = slot.value(QLatin1String("is_processing")); p.isBool()) return p.toBool();
    if (const auto state = count(slot.value(QLatin1String("state")))) return *state != 0;
    return false;
}

// The tokens a slot has generated for its request: "next_token" is a list of
// {"n_decoded": ...} (newer servers) or one such object (older ones).
qint64 slotDecoded(const QJsonObject& slot) {
    const QJsonValue next = slot.value(QLatin1String("next_token"));
    QJsonArray entries = next.toArray();
    if (next.isObject()) entries.append(next);
    qint64 sum = 0;
    for (const QJsonValue e : entries) sum += count(e.toObject().value(QLatin1String("n_decoded"))).value_or(0);
    return std::min(sum, kMaxTokens);
}
}  // namespace

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

std::optional<SlotFigures> parse_slots(const QByteArray& json) {
    if (json.size() > kMaxBytes) return std::nullopt;
    QJsonParseError error;
    const QJsonDocument doc = QJsonDocument::fromJson(json, &error);
    if (error.error != QJsonParseError::NoError || !doc.isArray()) return std::nullopt;
    const QJsonArray list = doc.array();
    if (list.isEmpty()) return std::nullopt;
    SlotFigures f;
    std::optional<qint64> context;
    bool contextsAgree = true;
    for (const QJsonValue v : list) {
        if (!v.isObject()) return std::nullopt;  // some other list, not slots
        const QJsonObject slot = v.toObject();
        ++f.total;
        if (const auto n = count(slot.value(QLatin1String("n_ctx")))) {
            if (context && *context != *n) contextsAgree = false;
            context = n;
        }
        if (!slotBusy(slot)) continue;
        ++f.busy;
        f.decoded_by_busy += slotDecoded(slot);  // under 2^40 a slot, under 2^21 slots in kMaxBytes: no overflow
    }
    if (contextsAgree) f.context_per_slot = context;
    return f;
}

QString ServerFigures::describe() const {
    QStringList parts;
    if (running) parts << QStringLiteral("%1 running").arg(*running, 0, 'f', 0);
    if (waiting) parts << QStringLiteral("%1 waiting").arg(*waiting, 0, 'f', 0);
    if (kv_usage) parts << QStringLiteral("KV cache %1%").arg(100.0 * *kv_usage, 0, 'f', 0);
    if (generation_tok_s) parts << QStringLiteral("%1 tok/s generation").arg(*generation_tok_s, 0, 'f', 1);
    if (cached_prompt_tokens) parts << QStringLiteral("%1 prompt tokens reused from its cache").arg(*cached_prompt_tokens, 0, 'f', 0);
    if (slots) {
        QString s = QStringLiteral("slots %1 of %2 busy").arg(slots->busy).arg(slots->total);
        if (slots->busy > 0) s += QStringLiteral(" (%1 tokens generated in them)").arg(slots->decoded_by_busy);
        if (slots->context_per_slot) s += QStringLiteral(", %1 context tokens a slot").arg(*slots->context_per_slot);
        parts << s;
    }
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
    ask(Kind::Metrics);
    ask(Kind::Slots);
}

void MetricsPoller::ask(Kind kind) {
    Source& src = source(kind);
    if (src.inFlight || !src.unavailable.isEmpty()) return;
    // Both sit beside /v1, at the server's root.
    const QString path = kind == Kind::Metrics ? QStringLiteral("metrics") : QStringLiteral("slots");
    src.inFlight = true;
    QNetworkReply* reply = network_->get(get_request(connection_, root_url(connection_, path), 5000));
    // An answer past kMaxBytes is not read to its end: the server is not trusted with
    // this process's memory.
    connect(reply, &QNetworkReply::downloadProgress, this, [reply](qint64 received, qint64 total) {
        if (received <= kMaxBytes && total <= kMaxBytes) return;
        reply->setProperty(kTooLarge, true);
        reply->abort();
    });
    connect(reply, &QNetworkReply::finished, this, [this, kind, reply] { onAnswer(kind, reply); });
}

void MetricsPoller::onAnswer(Kind kind, QNetworkReply* reply) {
    reply->deleteLater();
    Source& src = source(kind);
    src.inFlight = false;
    const bool metrics = kind == Kind::Metrics;
    const QString what = metrics ? QStringLiteral("/metrics") : QStringLiteral("/slots");
    const int status = reply->attribute(QNetworkRequest::HttpStatusCodeAttribute).toInt();
    const bool tooLarge = reply->property(kTooLarge).toBool();
    const bool whole = status == 200 && reply->error() == QNetworkReply::NoError;
    // What this kind gives now; a kind that failed this time drops its old figures, so
    // the other's are never shown beside stale ones.
    bool gave = false;
    if (metrics) {
        const ServerFigures m = whole ? summarize(parse_prometheus(reply->readAll())) : ServerFigures{};
        latest_.running = m.running;
        latest_.waiting = m.waiting;
        latest_.kv_usage = m.kv_usage;
        latest_.generation_tok_s = m.generation_tok_s;
        latest_.cached_prompt_tokens = m.cached_prompt_tokens;
        gave = m.any();
    } else {
        latest_.slots = whole ? parse_slots(reply->readAll()) : std::nullopt;
        gave = latest_.slots.has_value();
    }
    // Not reachable now, cut off, or a server error (503 while a model loads): the cards
    // say why, and the next poll asks again. Anything else is the server's "no".
    const bool passing = status == 0 || (status >= 500 && status != 501) || (status == 200 && !whole && !tooLarge);
    if (!gave && !passing) {
        src.unavailable = tooLarge        ? QStringLiteral("%1: over %2 MiB").arg(what).arg(kMaxBytes >> 20)
                          : status != 200 ? QStringLiteral("%1: HTTP %2, llama.cpp publishes it with %3")
                                                .arg(what)
                                                .arg(status)
                                                .arg(metrics ? QStringLiteral("--metrics") : QStringLiteral("--slots"))
                          : metrics       ? QStringLiteral("/metrics: no figure Kev knows")
                                          : QStringLiteral("/slots: not llama.cpp's slot list");
    }
    if (latest_.any()) return Q_EMIT figures(latest_);
    if (saidUnavailable_ || metrics_.unavailable.isEmpty() || slots_.unavailable.isEmpty()) return;
    saidUnavailable_ = true;
    Q_EMIT unavailable(metrics_.unavailable + QStringLiteral("; ") + slots_.unavailable);
}

}  // namespace kevremote
