#include "cli_remote.h"

#include <QCoreApplication>
#include <QElapsedTimer>
#include <QEventLoop>
#include <QNetworkAccessManager>
#include <QNetworkReply>
#include <QTimer>

#include <nlohmann/json.hpp>

#include <cstdio>

#include "cli_input.h"
#include "remote_run.h"

namespace kevcli {

namespace {

QString q(const std::string& s) { return QString::fromStdString(s); }

// The server's only model, when --server-model is not given; the problem otherwise.
QString pick_model(kevremote::Connection& c) {
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
        return QStringLiteral("cannot list the models of %1: %2").arg(c.base.toString(), reply->errorString());
    QString error;
    const QStringList models = kevremote::parse_models(body, &error);
    if (status >= 400) {
        const QString m = kevremote::error_message(body);
        return QStringLiteral("cannot list the models of %1: HTTP %2%3").arg(c.base.toString()).arg(status).arg(m.isEmpty() ? QString() : ": " + m);
    }
    if (!error.isEmpty()) return error;
    if (models.size() != 1)
        return QStringLiteral("%1 serves %2 models; choose one with --server-model: %3")
            .arg(c.base.toString()).arg(models.size()).arg(models.join(QStringLiteral(", ")));
    c.model = models.front();
    return {};
}

kevremote::RemoteCard remote_card(const kev::GenerationRequest& request, const kev::CardRequest& card, std::int32_t logprobs) {
    kevremote::RemoteCard r;
    r.question = q(card.question);
    if (card.system) r.system = q(*card.system);
    else if (request.system) r.system = q(*request.system);
    r.shared_context = q(request.shared_context);
    const kev::SamplingSettings& s = card.sampling;
    r.sampling.temperature = s.temperature_or_default();
    if (s.top_p != 1.0f) r.sampling.top_p = s.top_p;
    if (s.top_k != 0) r.sampling.top_k = s.top_k;
    if (s.min_p != 0.0f) r.sampling.min_p = s.min_p;
    if (s.repetition_penalty != 1.0f) r.sampling.repetition_penalty = s.repetition_penalty;
    r.sampling.max_tokens = static_cast<int>(std::min<std::int64_t>(s.max_new_tokens, 1 << 30));
    for (const auto& stop : s.stop_strings) r.sampling.stop << q(stop);
    if (s.seed) r.sampling.seed = *s.seed;
    r.sampling.logprobs = logprobs;
    return r;
}

const char* state_name(kevremote::CardState s) {
    switch (s) {
        case kevremote::CardState::Waiting: return "waiting";
        case kevremote::CardState::Streaming: return "streaming";
        case kevremote::CardState::Finished: return "finished";
        case kevremote::CardState::Failed: return "failed";
        case kevremote::CardState::Stopped: return "stopped";
    }
    return "?";
}

nlohmann::json card_json(const kev::CardRequest& card, const kevremote::RemoteCard& sent, const kevremote::CardOutcome& o,
                         std::int32_t logprobs) {
    nlohmann::json j = {{"question", card.question},
                        {"text", o.text.toStdString()},
                        {"state", state_name(o.state)},
                        {"finish_reason", o.finish_reason.toStdString()},
                        {"temperature", sent.sampling.temperature.value_or(0.0)},
                        {"stats",
                         {{"generated_tokens", o.tokens},
                          {"time_to_first_token_s", o.time_to_first_token_s},
                          {"tokens_per_s", o.tokens_per_s},
                          {"total_s", o.total_s},
                          {"measured_by", "kev (from the stream)"}}}};
    if (sent.sampling.seed) j["seed"] = *sent.sampling.seed;
    if (!o.error.isEmpty()) j["error"] = o.error.toStdString();
    if (logprobs > 0) {
        nlohmann::json lp = nlohmann::json::array();
        for (const auto& t : o.logprobs) {
            nlohmann::json top = nlohmann::json::array();
            for (const auto& [token, v] : t.top) top.push_back({{"token", token.toStdString()}, {"logprob", v}});
            lp.push_back({{"token", t.token.toStdString()}, {"logprob", t.logprob}, {"top", top}});
        }
        j["logprobs"] = lp;
    }
    return j;
}

// Runs `run` to its end; a signal's number in `stop` closes every request.
void run_to_end(kevremote::RemoteRun& run, volatile std::sig_atomic_t* stop) {
    QEventLoop loop;
    QObject::connect(&run, &kevremote::RemoteRun::allFinished, &loop, &QEventLoop::quit);
    QTimer poll;  // Ctrl-C / SIGTERM: every request closed, what came so far printed
    QObject::connect(&poll, &QTimer::timeout, [&] {
        if (*stop) run.stopAll();
    });
    poll.start(50);
    run.start();
    if (!run.finished()) loop.exec();
}

}  // namespace

int answer_remote(const RemoteOptions& o, const kev::GenerationRequest& request, volatile std::sig_atomic_t* stop) {
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
    if (const QString problem = kevremote::connection_problem(c); !problem.isEmpty()) {
        std::fprintf(stderr, "kev-cli: %s\n", problem.toUtf8().constData());
        return 2;
    }
    if (o.model.empty()) {
        if (const QString problem = pick_model(c); !problem.isEmpty()) {
            std::fprintf(stderr, "kev-cli: %s\n", problem.toUtf8().constData());
            return 1;
        }
    }

    QVector<kevremote::RemoteCard> cards;
    for (const auto& card : request.cards) cards.push_back(remote_card(request, card, o.logprobs));
    kevremote::RemoteRun run(c, cards);
    const bool stream = !o.json && !o.jsonl && cards.size() == 1;
    if (stream)
        QObject::connect(&run, &kevremote::RemoteRun::textArrived, [](int, const QString& delta) {
            std::fputs(delta.toUtf8().constData(), stdout);
            std::fflush(stdout);
        });
    QElapsedTimer clock;
    clock.start();
    run_to_end(run, stop);
    const double total_s = static_cast<double>(clock.nsecsElapsed()) * 1e-9;

    // --verify-isolation: each finished card alone, compared by its text.
    nlohmann::json diffs = nlohmann::json::array();
    if (o.verify) {
        for (int i = 0; i < run.size() && !*stop; ++i) {
            if (run.outcome(i).state != kevremote::CardState::Finished) continue;
            kevremote::RemoteRun alone(c, {cards[i]});
            run_to_end(alone, stop);
            const kevremote::CardOutcome& a = alone.outcome(0);
            if (a.state != kevremote::CardState::Finished) continue;
            const QString& packed = run.outcome(i).text;
            qsizetype k = 0;
            while (k < a.text.size() && k < packed.size() && a.text[k] == packed[k]) ++k;
            if (k != a.text.size() || k != packed.size())
                diffs.push_back({{"question", i + 1}, {"first_difference_char", k}, {"alone", a.text.toStdString()}});
        }
    }
    int code = diffs.empty() ? 0 : 3;
    for (int i = 0; i < run.size(); ++i) {
        if (run.outcome(i).state != kevremote::CardState::Failed) continue;
        std::fprintf(stderr, "kev-cli: card %d failed: %s\n", i + 1, run.outcome(i).error.toUtf8().constData());
        code = 1;
    }
    const std::size_t n = request.cards.size();
    if (o.json || o.jsonl) {
        nlohmann::json cards_json = nlohmann::json::array();
        for (std::size_t i = 0; i < n; ++i)
            cards_json.push_back(card_json(request.cards[i], cards[static_cast<qsizetype>(i)], run.outcome(static_cast<int>(i)), o.logprobs));
        if (o.json) {
            nlohmann::json out = {{"engine", "remote"}, {"server", o.server}, {"model", c.model.toStdString()},
                                  {"api", o.completions ? "completions" : "chat"}, {"total_s", total_s},
                                  {"interrupted", *stop != 0}, {"cards", cards_json}};
            if (o.verify) out["isolation_differences"] = diffs;
            std::printf("%s\n", dump_json(out, 2).c_str());
        } else {
            for (std::size_t i = 0; i < n; ++i) {
                cards_json[i]["index"] = i + 1;
                cards_json[i]["engine"] = "remote";
                std::printf("%s\n", dump_json(cards_json[i]).c_str());
            }
        }
        if (o.jsonl && o.verify) std::printf("%s\n", dump_json({{"isolation_differences", diffs}}).c_str());
    } else if (stream) {
        std::printf("\n");
    } else {
        for (std::size_t i = 0; i < n; ++i)
            std::printf("--- [%zu] %s\n%s\n", i + 1, request.cards[i].question.c_str(),
                        run.outcome(static_cast<int>(i)).text.toUtf8().constData());
    }
    if (o.verify && !o.json && !o.jsonl)
        std::printf("isolation on this server: %s\n", diffs.empty() ? "every answer equals its answer alone"
                                                                      : ("DIFFERENCES " + dump_json(diffs)).c_str());
    std::fflush(stdout);
    return code;
}

}  // namespace kevcli
