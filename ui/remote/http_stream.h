// One HTTP/1.1 request whose answer is read as it arrives, on the thread that owns the
// object: the socket's own notifier, no helper thread. Qt's QNetworkAccessManager reads
// HTTP on a thread of its own and hands every read to the caller's thread, ~25 system
// calls per streamed token (measured with strace on a llama.cpp stream); a token here
// costs one wake-up and one read. Plain TCP or TLS (QSslSocket, certificates checked).
#pragma once

#include <QByteArray>
#include <QObject>
#include <QString>
#include <QTimer>
#include <QUrl>
#include <QVector>

#include <memory>
#include <utility>

class QSslSocket;

namespace kevremote {

struct HttpRequest {
    QByteArray method = "POST";
    QUrl url;
    QVector<std::pair<QByteArray, QByteArray>> headers;  // beside Host, Content-Length, Connection
    QByteArray body;
    int timeout_ms = 120000;  // no byte for this long ends the request (Timeout)
};

class HttpStream : public QObject {
    Q_OBJECT
public:
    enum class End { Running, Complete, Closed, Failed, Timeout, Aborted };
    // A header block or a chunk-size line longer than this is a broken server.
    static constexpr qsizetype kMaxHeaderBytes = 64 * 1024;

    explicit HttpStream(QObject* parent = nullptr);
    ~HttpStream() override;

    void start(const HttpRequest& request);
    // Closes the connection; no signal follows.
    void abort();

    int status() const { return status_; }  // 0 until the status line came
    // A response header's value by its name (any case), empty when absent.
    QByteArray header(const QByteArray& name) const;
    // The body bytes decoded since the last call (chunked framing removed).
    QByteArray takeBody();
    End end() const { return end_; }
    QString errorString() const { return error_; }

Q_SIGNALS:
    void headersReceived();
    void bodyArrived();
    void finished();  // end() says how

private:
    void onReadable();
    void onSocketError();
    void finish(End end, const QString& error = {});
    bool parseHeaders();
    bool parseBody();

    std::unique_ptr<QSslSocket> socket_;
    QTimer idle_;
    QByteArray in_;    // bytes read, not yet parsed
    QByteArray body_;  // decoded body not yet taken
    QVector<std::pair<QByteArray, QByteArray>> headers_;
    int status_ = 0;
    bool in_body_ = false;
    bool chunked_ = false;
    qint64 remaining_ = -1;  // Content-Length left, or the current chunk's bytes left; -1: until close
    bool chunk_data_ = false;  // inside a chunk's data (else at a size line)
    bool trailers_ = false;    // after the last chunk
    End end_ = End::Running;
    QString error_;
    int timeout_ms_ = 0;
};

}  // namespace kevremote
