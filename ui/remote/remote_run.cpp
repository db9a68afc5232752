#include "remote_run.h"

#include <QHostAddress>

namespace kevremote {

namespace {

constexpr qsizetype kMaxErrorBody = 64 * 1024;  // of a refusal, kept for its message

bool is_loopback(const QString& host) {
    if (host.compare(QStringLiteral("localhost"), Qt::CaseInsensitive) == 0) return true;
    const QHostAddress a(host);
    return !a.isNull() && a.isLoopback();
}

QString seconds(int ms) { return QString::number(ms / 1000.0, 'g', 3) + QStringLiteral(" s"); }

}  // namespace

QString connection_problem(const Connection& c) {
    const QUrl& u = c.base;
    if (!u.isValid() || u.host().isEmpty())
        return QStringLiteral("'%1' is not a server URL (like https://host:8000/v1)").arg(u.toString());
    const QString scheme = u.scheme().toLower();
    if (scheme != QLatin1String("http") && scheme != QLatin1String("https"))
        return QStringLiteral("'%1': only http and https servers are supported, not %2").arg(u.toString(), scheme);
    if (scheme == QLatin1String("http") && !is_loopback(u.host()) && !c.insecure)
        return QStringLiteral("plain http to %1 would send the questions and the API key unencrypted: use https, "
                              "or allow insecure connections to this server")
            .arg(u.host());
    if (c.timeout_ms <= 0) return QStringLiteral("the timeout must be positive");
    return {};
}

namespace {

// The base URL's path without trailing slashes or its /v1.
QString server_root(const Connection& c) {
    QString p = c.base.path();
    while (p.endsWith(QLatin1Char('/'))) p.chop(1);
    if (p.endsWith(QLatin1String("/v1"))) p.chop(3);
    return p;
}

const QString kNotAnApi =
    QStringLiteral("an HTML page answered, not an OpenAI-compatible API (is the base URL right? it usually ends in /v1)");

}  // namespace

QUrl api_url(const Connection& c, const QString& path) {
    QUrl u = c.base;
    u.setPath(server_root(c) + QStringLiteral("/v1/") + path);
    return u;
}

QUrl root_url(const Connection& c, const QString& path) {
    QUrl u = c.base;
    u.setPath(server_root(c) + QLatin1Char('/') + path);
    return u;
}

QNetworkRequest get_request(const Connection& c, const QUrl& url, int timeout_ms) {
    QNetworkRequest request(url);
    if (!c.api_key.isEmpty()) request.setRawHeader("Authorization", "Bearer " + c.api_key.toUtf8());
    request.setTransferTimeout(timeout_ms);
    return request;
}

RemoteRun::RemoteRun(Connection connection, QVector<RemoteCard> cards, QObject* parent)
    : QObject(parent), connection_(std::move(connection)), cards_(static_cast<std::size_t>(cards.size())) {
    for (qsizetype i = 0; i < cards.size(); ++i) cards_[static_cast<std::size_t>(i)].request = cards[i];
    remaining_ = static_cast<int>(cards_.size());
}

RemoteRun::~RemoteRun() {
    for (Card& c : cards_) {
        c.closed = true;
        if (c.http) c.http->abort();
    }
}

void RemoteRun::start() {
    if (const QString problem = connection_problem(connection_); !problem.isEmpty()) {
        for (int i = 0; i < size(); ++i) fail(i, problem);
        return;
    }
    if (connection_.model.isEmpty()) {
        for (int i = 0; i < size(); ++i) fail(i, QStringLiteral("no model chosen for %1 (pick one of its /v1/models)").arg(connection_.base.toString()));
        return;
    }
    HttpRequest request;
    request.url = api_url(connection_, endpoint(connection_.api));
    request.headers = {{"Content-Type", "application/json"}, {"Accept", "text/event-stream"}};
    if (!connection_.api_key.isEmpty()) request.headers.push_back({"Authorization", "Bearer " + connection_.api_key.toUtf8()});
    request.timeout_ms = connection_.timeout_ms;
    for (int i = 0; i < size(); ++i) {
        Card& c = cards_[static_cast<std::size_t>(i)];
        request.body = request_body(c.request, connection_.model, connection_.api);
        c.http = std::make_unique<HttpStream>();
        connect(c.http.get(), &HttpStream::bodyArrived, this, [this, i] { onData(i); });
        connect(c.http.get(), &HttpStream::finished, this, [this, i] { onFinished(i); });
        c.outcome.state = CardState::Streaming;
        c.clock.start();
        c.http->start(request);
    }
}

void RemoteRun::stop(int card) {
    Card& c = cards_[static_cast<std::size_t>(card)];
    if (c.closed) return;
    close(card, CardState::Stopped);
    if (c.http) c.http->abort();
}

void RemoteRun::stopAll() {
    for (int i = 0; i < size(); ++i) stop(i);
}

QString RemoteRun::endpointText() const {
    return api_url(connection_, endpoint(connection_.api)).toString(QUrl::RemoveUserInfo | QUrl::RemoveQuery);
}

QString RemoteRun::httpProblem(const Card& c) const {
    const int status = c.http->status();
    const QByteArray type = c.http->header("content-type");
    const QString where = endpointText();
    const QString server = error_message(c.error_body);
    const bool html = type.contains("html") || c.error_body.trimmed().startsWith('<');
    QString m = QStringLiteral("HTTP %1 from %2").arg(status).arg(where);
    if (status == 401 || status == 403) m += QStringLiteral(": the server refused the API key");
    if (!server.isEmpty()) m += QStringLiteral(": ") + server;
    else if (html) m += QStringLiteral(": ") + kNotAnApi;
    return m;
}

void RemoteRun::onData(int card) {
    Card& c = cards_[static_cast<std::size_t>(card)];
    if (c.closed || !c.http) return;
    const int status = c.http->status();
    const QByteArray bytes = c.http->takeBody();
    if (status >= 400 || status < 200) {  // a refusal's body: its message is read when the answer ends
        c.error_body += bytes.left(kMaxErrorBody - c.error_body.size());
        return;
    }
    const QByteArray type = c.http->header("content-type");
    if (!type.contains("event-stream")) {
        // A JSON body (an error some servers send with 200) is read at the end; anything
        // else is not an OpenAI-compatible stream.
        c.error_body += bytes.left(kMaxErrorBody - c.error_body.size());
        if (!type.contains("json")) {
            const bool html = type.contains("html") || c.error_body.trimmed().startsWith('<');
            fail(card, QStringLiteral("%1 answered with %2, not an event stream: %3")
                           .arg(endpointText(),
                                type.isEmpty() ? QStringLiteral("no content type") : QString::fromLatin1(type),
                                html ? kNotAnApi
                                     : QString::fromUtf8(c.error_body.left(120).simplified())));
        }
        return;
    }
    for (const SseEvent& e : c.parser.feed(bytes)) {
        StreamChunk chunk;
        if (auto problem = parse_chunk(e.data, chunk)) {
            fail(card, *problem);
            return;
        }
        if (chunk.done) {
            c.done = true;
            continue;
        }
        if (!chunk.finish_reason.isEmpty()) {
            c.outcome.finish_reason = chunk.finish_reason;
            c.done = true;
        }
        if (chunk.completion_tokens) c.server_tokens = *chunk.completion_tokens;
        for (auto& t : chunk.logprobs) c.outcome.logprobs.push_back(std::move(t));
        if (!chunk.text.isEmpty()) {
            const double now = static_cast<double>(c.clock.nsecsElapsed()) * 1e-9;
            if (c.first_token_s < 0.0) c.first_token_s = now;
            c.last_token_s = now;
            ++c.chunks_with_text;
            c.outcome.text += chunk.text;
            // Live figures (close() settles them on the server's count where it sent one).
            c.outcome.tokens = c.chunks_with_text;
            c.outcome.time_to_first_token_s = c.first_token_s;
            if (now > c.first_token_s) c.outcome.tokens_per_s = (c.chunks_with_text - 1) / (now - c.first_token_s);
            Q_EMIT textArrived(card, chunk.text);
            if (c.closed) return;  // a slot stopped it
        }
    }
    if (c.parser.overflowed())
        fail(card, QStringLiteral("the server sent an event longer than %1 MiB").arg(SseParser::kMaxEventBytes >> 20));
}

void RemoteRun::onFinished(int card) {
    Card& c = cards_[static_cast<std::size_t>(card)];
    if (c.closed || !c.http) return;
    onData(card);  // whatever arrived with the end
    if (c.closed) return;
    const int status = c.http->status();
    const HttpStream::End end = c.http->end();
    if (status >= 400 && (end == HttpStream::End::Complete || end == HttpStream::End::Closed)) return fail(card, httpProblem(c));
    const QString host = connection_.base.host();
    const QString so_far = c.chunks_with_text > 0 ? QStringLiteral(" after %1 tokens").arg(c.chunks_with_text) : QString();
    if (end == HttpStream::End::Timeout)
        return fail(card, QStringLiteral("no answer from %1 for %2 (timeout)%3").arg(host, seconds(connection_.timeout_ms), so_far));
    if (end == HttpStream::End::Failed)
        return fail(card, QStringLiteral("the connection to %1 failed%2: %3").arg(host, so_far, c.http->errorString()));
    if (end == HttpStream::End::Closed && status == 0)
        return fail(card, QStringLiteral("%1 closed the connection without an answer").arg(host));
    if (status >= 400) return fail(card, httpProblem(c));
    if (!c.error_body.isEmpty()) {  // 200 with JSON, not a stream
        const QString m = error_message(c.error_body);
        return fail(card, m.isEmpty() ? QStringLiteral("the server answered with JSON, not an event stream: ") +
                                            QString::fromUtf8(c.error_body.left(120).simplified())
                                      : QStringLiteral("the server reported an error: ") + m);
    }
    if (!c.done) return fail(card, QStringLiteral("%1 closed the stream before the answer finished%2").arg(host, so_far));
    close(card, CardState::Finished);
}

void RemoteRun::fail(int card, const QString& message) {
    Card& c = cards_[static_cast<std::size_t>(card)];
    if (c.closed) return;
    c.outcome.error = message;
    close(card, CardState::Failed);
    if (c.http) c.http->abort();
}

void RemoteRun::close(int card, CardState state) {
    Card& c = cards_[static_cast<std::size_t>(card)];
    c.closed = true;
    CardOutcome& o = c.outcome;
    o.state = state;
    o.total_s = c.clock.isValid() ? static_cast<double>(c.clock.nsecsElapsed()) * 1e-9 : 0.0;
    o.tokens = c.server_tokens > 0 ? c.server_tokens : c.chunks_with_text;
    if (c.first_token_s >= 0.0) {
        o.time_to_first_token_s = c.first_token_s;
        const double span = c.last_token_s - c.first_token_s;
        if (o.tokens > 1 && span > 0.0) o.tokens_per_s = (o.tokens - 1) / span;
    }
    if (c.http) c.http->disconnect(this);
    --remaining_;
    Q_EMIT cardFinished(card);
    if (remaining_ == 0) Q_EMIT allFinished();
}

}  // namespace kevremote
