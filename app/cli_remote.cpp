#include "cli_remote.h"

#include <QCoreApplication>
#include <QEventLoop>
#include <QNetworkAccessManager>
#include <QNetworkReply>

#include "kev/error.h"
#include "remote_engine.h"

namespace kevcli {

namespace {

QString q(const std::string& s) { return QString::fromStdString(s); }

[[noreturn]] void fail(kev::ErrorCode code, const QString& message) { throw kev::Error(code, message.toStdString()); }

// The server's only model, when --server-model is not given.
void pick_model(kevremote::Connection& c) {
    QNetworkAccessManager network;
    const QNetworkRequest request = kevremote::get_request(c, kevremote::api_url(c, QStringLiteral("models")), c.timeout_ms);
    QNetworkReply* reply = network.get(request);
    QEventLoop loop;
    QObject::connect(reply, &QNetworkReply::finished, &loop, &QEventLoop::quit);
    loop.exec();
    const QByteArray body = reply->readAll();
    const int status = reply->attribute(QNetworkRequest::HttpStatusCodeAttribute).toInt();
    reply->deleteLater();
    if (reply->error() != QNetworkReply::NoError && status < 400)
        fail(kev::ErrorCode::Io, QStringLiteral("cannot list the models of %1: %2").arg(c.base.toString(), reply->errorString()));
    QString error;
    const QStringList models = kevremote::parse_models(body, &error);
    if (status >= 400) {
        const QString m = kevremote::error_message(body);
        fail(kev::ErrorCode::Io, QStringLiteral("cannot list the models of %1: HTTP %2%3")
                                     .arg(c.base.toString()).arg(status).arg(m.isEmpty() ? QString() : ": " + m));
    }
    if (!error.isEmpty()) fail(kev::ErrorCode::Io, error);
    if (models.size() != 1)
        fail(kev::ErrorCode::Io, QStringLiteral("%1 serves %2 models; choose one with --server-model: %3")
                                     .arg(c.base.toString()).arg(models.size()).arg(models.join(QStringLiteral(", "))));
    c.model = models.front();
}

// The server's engine with the application object Qt Network needs (kev-cli has none of
// its own), destroyed after the engine.
class CliRemoteEngine final : public kev::AnswerEngine {
public:
    CliRemoteEngine(std::unique_ptr<QCoreApplication> app, kevremote::Connection c)
        : app_(std::move(app)), engine_(std::move(c)) {}
    std::string describe() const override { return engine_.describe(); }
    bool gives_token_ids() const override { return engine_.gives_token_ids(); }
    kev::GenerationResult answer(const kev::GenerationRequest& request, const kev::RunOptions& options,
                                 const std::function<void(const kev::PreparedPack&)>& on_prepared) override {
        return engine_.answer(request, options, on_prepared);
    }

private:
    std::unique_ptr<QCoreApplication> app_;  // null when the process has one already
    kevremote::RemoteEngine engine_;
};

}  // namespace

std::unique_ptr<kev::AnswerEngine> open_remote_engine(const RemoteOptions& o, RemoteEngineInfo* info) {
    static int argc = 1;
    static char name[] = "kev-cli";
    static char* argv[] = {name, nullptr};
    std::unique_ptr<QCoreApplication> app;
    if (!QCoreApplication::instance()) app = std::make_unique<QCoreApplication>(argc, argv);

    kevremote::Connection c;
    c.base = QUrl(q(o.server));
    c.model = q(o.model);
    c.api_key = q(o.api_key);
    c.insecure = o.insecure;
    c.timeout_ms = static_cast<int>(o.timeout_s * 1000.0);
    c.api = o.completions ? kevremote::Api::Completions : kevremote::Api::Chat;
    if (const QString problem = kevremote::connection_problem(c); !problem.isEmpty())
        fail(kev::ErrorCode::InvalidArgument, problem);
    if (o.model.empty()) pick_model(c);
    if (info) *info = {c.model.toStdString(), o.completions ? "completions" : "chat"};
    return std::make_unique<CliRemoteEngine>(std::move(app), c);
}

}  // namespace kevcli
