#include "http_stream.h"

#include <QSslSocket>

namespace kevremote {

HttpStream::HttpStream(QObject* parent) : QObject(parent) {
    idle_.setSingleShot(true);
    connect(&idle_, &QTimer::timeout, this, [this] {
        finish(End::Timeout, QStringLiteral("no byte for %1 s").arg(timeout_ms_ / 1000.0));
    });
}

HttpStream::~HttpStream() { abort(); }

void HttpStream::start(const HttpRequest& r) {
    timeout_ms_ = r.timeout_ms;
    socket_ = std::make_unique<QSslSocket>();
    QSslSocket* s = socket_.get();
    const bool tls = r.url.scheme().compare(QLatin1String("https"), Qt::CaseInsensitive) == 0;
    const quint16 port = static_cast<quint16>(r.url.port(tls ? 443 : 80));
    QByteArray target = r.url.path(QUrl::FullyEncoded).toLatin1();
    if (target.isEmpty()) target = "/";
    if (r.url.hasQuery()) target += '?' + r.url.query(QUrl::FullyEncoded).toLatin1();
    QByteArray head = r.method + ' ' + target + " HTTP/1.1\r\nHost: " + r.url.host(QUrl::FullyEncoded).toLatin1();
    if (r.url.port() > 0) head += ':' + QByteArray::number(r.url.port());
    head += "\r\nConnection: close\r\n";
    for (const auto& [k, v] : r.headers) head += k + ": " + v + "\r\n";
    if (!r.body.isEmpty() || r.method == "POST") head += "Content-Length: " + QByteArray::number(r.body.size()) + "\r\n";
    head += "\r\n";
    const QByteArray bytes = head + r.body;
    connect(s, &QAbstractSocket::readyRead, this, &HttpStream::onReadable);
    connect(s, &QAbstractSocket::errorOccurred, this, &HttpStream::onSocketError);
    connect(s, &QAbstractSocket::disconnected, this, [this] {
        onReadable();
        if (end_ != End::Running) return;
        if (in_body_ && !chunked_ && remaining_ < 0) finish(End::Complete);  // the body ran until close
        else finish(End::Closed, QStringLiteral("the server closed the connection"));
    });
    if (tls) {
        connect(s, &QSslSocket::encrypted, this, [s, bytes] { s->write(bytes); });
        connect(s, &QSslSocket::sslErrors, this, [this](const QList<QSslError>& errors) {
            finish(End::Failed, QStringLiteral("TLS: ") + (errors.isEmpty() ? QStringLiteral("handshake failed") : errors.front().errorString()));
        });
        if (!QSslSocket::supportsSsl()) return finish(End::Failed, QStringLiteral("TLS is not available (no TLS backend for Qt)"));
        s->connectToHostEncrypted(r.url.host(), port);
    } else {
        connect(s, &QAbstractSocket::connected, this, [s, bytes] { s->write(bytes); });
        s->connectToHost(r.url.host(), port);
    }
    idle_.start(timeout_ms_);
}

void HttpStream::abort() {
    if (end_ == End::Running) end_ = End::Aborted;
    idle_.stop();
    if (socket_) {
        socket_->disconnect(this);
        socket_->abort();
    }
}

QByteArray HttpStream::header(const QByteArray& name) const {
    for (const auto& [k, v] : headers_)
        if (k.compare(name, Qt::CaseInsensitive) == 0) return v;
    return {};
}

QByteArray HttpStream::takeBody() { return std::exchange(body_, QByteArray()); }

void HttpStream::onReadable() {
    if (end_ != End::Running || !socket_) return;
    const QByteArray bytes = socket_->readAll();
    if (bytes.isEmpty()) return;
    idle_.start(timeout_ms_);
    in_ += bytes;
    if (!in_body_) {
        if (!parseHeaders()) return;
        if (!in_body_) return;  // more header bytes to come
        Q_EMIT headersReceived();
        if (end_ != End::Running) return;
    }
    const bool complete = parseBody();
    if (end_ != End::Running) return;
    if (!body_.isEmpty()) Q_EMIT bodyArrived();
    if (complete && end_ == End::Running) finish(End::Complete);
}

bool HttpStream::parseHeaders() {
    const qsizetype end = in_.indexOf("\r\n\r\n");
    if (end < 0) {
        if (in_.size() > kMaxHeaderBytes) finish(End::Failed, QStringLiteral("the answer's headers pass 64 KiB"));
        return end_ == End::Running;
    }
    const QList<QByteArray> lines = in_.left(end).split('\n');
    in_.remove(0, end + 4);
    const QList<QByteArray> status = lines.front().trimmed().split(' ');
    bool ok = false;
    status_ = status.size() >= 2 && status[0].startsWith("HTTP/1.") ? status[1].toInt(&ok) : 0;
    if (!ok || status_ < 100 || status_ > 999) {
        finish(End::Failed, QStringLiteral("the server did not answer in HTTP/1.x: ") + QString::fromLatin1(lines.front().left(80).trimmed()));
        return false;
    }
    for (qsizetype i = 1; i < lines.size(); ++i) {
        const qsizetype colon = lines[i].indexOf(':');
        if (colon > 0) headers_.push_back({lines[i].left(colon).trimmed(), lines[i].mid(colon + 1).trimmed()});
    }
    chunked_ = header("transfer-encoding").toLower().contains("chunked");
    const QByteArray length = header("content-length");
    remaining_ = -1;
    if (!chunked_ && !length.isEmpty()) {
        remaining_ = length.toLongLong(&ok);
        if (!ok || remaining_ < 0) {
            finish(End::Failed, QStringLiteral("a Content-Length that is not a size: ") + QString::fromLatin1(length.left(40)));
            return false;
        }
    }
    in_body_ = true;
    return true;
}

// Moves what `in_` holds of the body into `body_`; true when the body is complete.
bool HttpStream::parseBody() {
    if (!chunked_) {
        if (remaining_ < 0) {  // until close
            body_ += in_;
            in_.clear();
            return false;
        }
        const qsizetype take = static_cast<qsizetype>(std::min<qint64>(remaining_, in_.size()));
        body_ += in_.left(take);
        in_.remove(0, take);
        remaining_ -= take;
        return remaining_ == 0;
    }
    qsizetype pos = 0;
    for (;;) {
        if (trailers_) {  // trailer lines end with an empty line
            const qsizetype eol = in_.indexOf("\r\n", pos);
            if (eol < 0) break;
            const bool empty = eol == pos;
            pos = eol + 2;
            if (empty) {
                in_.remove(0, pos);
                return true;
            }
            continue;
        }
        if (chunk_data_) {
            const qsizetype take = static_cast<qsizetype>(std::min<qint64>(remaining_, in_.size() - pos));
            body_ += in_.mid(pos, take);
            pos += take;
            remaining_ -= take;
            if (remaining_ > 0) break;
            if (in_.size() - pos < 2) break;  // the chunk's closing CRLF has not come yet
            pos += 2;
            chunk_data_ = false;
            continue;
        }
        const qsizetype eol = in_.indexOf("\r\n", pos);
        if (eol < 0) {
            if (in_.size() - pos > kMaxHeaderBytes) finish(End::Failed, QStringLiteral("a chunk-size line passes 64 KiB"));
            break;
        }
        QByteArray size = in_.mid(pos, eol - pos);
        if (const qsizetype semi = size.indexOf(';'); semi >= 0) size.truncate(semi);
        bool ok = false;
        const qint64 n = size.trimmed().toLongLong(&ok, 16);
        if (!ok || n < 0) {
            finish(End::Failed, QStringLiteral("a broken chunk size in the answer: ") + QString::fromLatin1(size.left(40)));
            return false;
        }
        pos = eol + 2;
        if (n == 0) trailers_ = true;
        else {
            remaining_ = n;
            chunk_data_ = true;
        }
    }
    in_.remove(0, pos);
    return false;
}

void HttpStream::onSocketError() {
    if (end_ != End::Running || !socket_) return;
    if (socket_->error() == QAbstractSocket::RemoteHostClosedError) return;  // disconnected() decides
    finish(End::Failed, socket_->errorString());
}

void HttpStream::finish(End end, const QString& error) {
    if (end_ != End::Running) return;
    end_ = end;
    error_ = error;
    idle_.stop();
    if (socket_) socket_->disconnect(this);
    if (socket_ && end != End::Complete) socket_->abort();
    Q_EMIT finished();
}

}  // namespace kevremote
