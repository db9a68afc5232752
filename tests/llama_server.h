// A real llama.cpp server on 127.0.0.1 for the remote-engine tests: built from PyPI's
// llama-cpp-python sdist by packaging/setup.sh test (.venv/bin/llama-server), serving
// the built-in model, stopped with the object.
#pragma once

#include <QElapsedTimer>
#include <QFileInfo>
#include <QNetworkAccessManager>
#include <QNetworkReply>
#include <QProcess>
#include <QSignalSpy>
#include <QTcpServer>
#include <QtTest>

#include "kev_test_env.h"

namespace kevtest {

inline QString llamaServerPath() { return QStringLiteral(KEV_LLAMA_SERVER); }

// A port nothing listens on now (the OS's choice, released at once).
inline quint16 freePort() {
    QTcpServer probe;
    if (!probe.listen(QHostAddress::LocalHost, 0)) return 0;
    return probe.serverPort();
}

// GET url until it answers `wantStatus`, at most timeoutMs.
inline bool waitForHttp(const QUrl& url, int wantStatus, int timeoutMs) {
    QNetworkAccessManager network;
    QElapsedTimer clock;
    clock.start();
    while (clock.elapsed() < timeoutMs) {
        QNetworkRequest request(url);
        request.setTransferTimeout(2000);
        QNetworkReply* reply = network.get(request);
        QSignalSpy done(reply, &QNetworkReply::finished);
        done.wait(3000);
        const int status = reply->attribute(QNetworkRequest::HttpStatusCodeAttribute).toInt();
        reply->deleteLater();
        if (status == wantStatus) return true;
        QTest::qWait(200);
    }
    return false;
}

// llama.cpp's server on 127.0.0.1, serving the built-in model; stopped with the object.
class LlamaServer {
public:
    // Starts it and waits for /health; `extra`: more server options (--api-key ...).
    QString start(const QStringList& extra = {}) {
        if (!QFileInfo(llamaServerPath()).isExecutable())
            return QStringLiteral("no llama.cpp server at %1: packaging/setup.sh test builds it").arg(llamaServerPath());
        port_ = freePort();
        process_.setProgram(llamaServerPath());
        process_.setArguments(QStringList{"-m", kevtest::builtinModel(), "--host", "127.0.0.1", "--port", QString::number(port_),
                                          "-np", "4", "-c", "4096", "-t", "2", "--no-webui"} + extra);
        process_.setProcessChannelMode(QProcess::MergedChannels);
        process_.start();
        if (!process_.waitForStarted(30000)) return QStringLiteral("cannot start %1").arg(llamaServerPath());
        if (!waitForHttp(url(QStringLiteral("/health")), 200, 120000))
            return QStringLiteral("llama-server did not become healthy: ") + QString::fromUtf8(process_.readAll().right(2000));
        return {};
    }
    QUrl url(const QString& path = QStringLiteral("/v1")) const {
        return QUrl(QStringLiteral("http://127.0.0.1:%1%2").arg(port_).arg(path));
    }
    void kill() {
        process_.kill();
        process_.waitForFinished(10000);
    }
    ~LlamaServer() {
        if (process_.state() != QProcess::NotRunning) {
            process_.terminate();
            if (!process_.waitForFinished(10000)) kill();
        }
    }

private:
    QProcess process_;
    quint16 port_ = 0;
};

}  // namespace kevtest
