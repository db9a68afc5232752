// The remote engine (ui/remote/) against a real llama.cpp server on 127.0.0.1, built
// from PyPI's llama-cpp-python sdist by packaging/setup.sh test and serving the built-in
// model; the wire format and the event-stream parser on their own. No mock server: the
// refusals come from llama.cpp (401), Python's http.server (an HTML page) and a socket
// that never answers (a slow server).
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QNetworkAccessManager>
#include <QNetworkReply>
#include <QProcess>
#include <QSignalSpy>
#include <QTcpServer>
#include <QTcpSocket>
#include <QTemporaryDir>
#include <QtTest>

#include <memory>

#include "kev_test_env.h"
#include "llama_server.h"
#include "connections.h"
#include "openai_wire.h"
#include "kev/error.h"
#include "remote_engine.h"
#include "remote_run.h"
#include "server_metrics.h"
#include "sse.h"

using namespace kevremote;

namespace {

using kevtest::freePort;
using kevtest::LlamaServer;
using kevtest::waitForHttp;

Connection connectionTo(const LlamaServer& server, const QString& key = {}) {
    Connection c;
    c.base = server.url();
    c.model = QStringLiteral("builtin");  // llama.cpp serves its one model under any name
    c.api_key = key;
    c.timeout_ms = 60000;
    return c;
}

RemoteCard card(const QString& question, std::optional<double> temperature, std::optional<quint64> seed, int maxTokens) {
    RemoteCard c;
    c.question = question;
    c.sampling.temperature = temperature;
    c.sampling.seed = seed;
    c.sampling.max_tokens = maxTokens;
    return c;
}

// Python's http.server on 127.0.0.1 serving the files of `dir`: its port once `path`
// answers 200, or 0 when it did not start.
quint16 serveFolder(QProcess& web, const QString& dir, const QString& path) {
    const quint16 port = freePort();
    web.start(kevtest::python(), {"-m", "http.server", QString::number(port), "--bind", "127.0.0.1", "--directory", dir});
    if (!web.waitForStarted(30000)) return 0;
    return waitForHttp(QUrl(QStringLiteral("http://127.0.0.1:%1/%2").arg(port).arg(path)), 200, 30000) ? port : 0;
}

// Runs `run` to its end (every card finished, failed or stopped) within timeoutMs.
bool finish(RemoteRun& run, int timeoutMs = 120000) {
    QSignalSpy all(&run, &RemoteRun::allFinished);
    run.start();
    if (run.finished()) return true;
    return all.wait(timeoutMs) || run.finished();
}

}  // namespace

class TestRemote : public QObject {
    Q_OBJECT
private Q_SLOTS:
    // ---- the event-stream parser and the wire format, on their own ----
    void sseParsesWhateverPiecesArrive() {
        const QByteArray stream = ": comment\r\ndata: {\"a\":1}\r\n\r\nevent: x\ndata: one\ndata:two\n\ndata: [DONE]\r\r";
        // Every split of the stream into two reads gives the same events.
        for (qsizetype cut = 0; cut <= stream.size(); ++cut) {
            SseParser p;
            auto events = p.feed(stream.left(cut));
            for (auto& e : p.feed(stream.mid(cut))) events.push_back(e);
            QCOMPARE(int(events.size()), 3);
            QCOMPARE(events[0].data, QByteArray("{\"a\":1}"));
            QCOMPARE(events[1].event, QByteArray("x"));
            QCOMPARE(events[1].data, QByteArray("one\ntwo"));
            QCOMPARE(events[2].data, QByteArray("[DONE]"));
        }
        // Byte by byte too.
        SseParser p;
        int n = 0;
        for (char ch : stream) n += int(p.feed(QByteArray(1, ch)).size());
        QCOMPARE(n, 3);
        // A line that never ends is refused past the limit, not buffered forever.
        SseParser big;
        QVERIFY(big.feed("data: " + QByteArray(SseParser::kMaxEventBytes + 10, 'x')).empty());
        QVERIFY(big.overflowed());
    }

    void chunksOfEveryShapeAreRead() {
        StreamChunk c;
        QVERIFY(!parse_chunk(R"({"choices":[{"delta":{"content":"Hel"},"finish_reason":null}]})", c));
        QCOMPARE(c.text, QStringLiteral("Hel"));
        QVERIFY(c.finish_reason.isEmpty());
        QVERIFY(!parse_chunk(R"({"choices":[{"text":"lo","finish_reason":"length"}],"usage":{"completion_tokens":7}})", c));
        QCOMPARE(c.text, QStringLiteral("lo"));
        QCOMPARE(c.finish_reason, QStringLiteral("length"));
        QCOMPARE(*c.completion_tokens, 7);
        QVERIFY(!parse_chunk(R"({"choices":[{"delta":{"content":"a"},"logprobs":{"content":[{"token":"a","logprob":-0.5,)"
                             R"("top_logprobs":[{"token":"a","logprob":-0.5},{"token":"b","logprob":-1.5}]}]}}]})", c));
        QCOMPARE(int(c.logprobs.size()), 1);
        QCOMPARE(c.logprobs[0].top[1].first, QStringLiteral("b"));
        QVERIFY(!parse_chunk(R"({"choices":[{"text":"x","logprobs":{"tokens":["x"],"token_logprobs":[-0.25],)"
                             R"("top_logprobs":[{"y":-3.0,"x":-0.25}]}}]})", c));
        QCOMPARE(c.logprobs[0].logprob, -0.25);
        QCOMPARE(c.logprobs[0].top[0].first, QStringLiteral("x"));  // most likely first
        QVERIFY(!parse_chunk("[DONE]", c));
        QVERIFY(c.done);
        const auto notJson = parse_chunk("<html>", c);
        QVERIFY(notJson && notJson->contains("not JSON"));
        const auto error = parse_chunk(R"({"error":{"message":"context full","code":500}})", c);
        QVERIFY(error && error->contains("context full"));
        const auto noChoices = parse_chunk(R"({"id":"x"})", c);
        QVERIFY(noChoices && noChoices->contains("choices"));
    }

    void requestBodyCarriesTheCardsSettings() {
        RemoteCard c = card("Why?", 0.7, 42, 16);
        c.system = "Be brief.";
        c.shared_context = "DOC";
        c.sampling.top_p = 0.9;
        c.sampling.top_k = 40;
        c.sampling.min_p = 0.05;
        c.sampling.stop = QStringList{"\n\n"};
        c.sampling.logprobs = 3;
        const QJsonObject chat = QJsonDocument::fromJson(request_body(c, "m", Api::Chat)).object();
        QCOMPARE(chat["model"].toString(), QStringLiteral("m"));
        QVERIFY(chat["stream"].toBool());
        QCOMPARE(chat["temperature"].toDouble(), 0.7);
        QCOMPARE(chat["seed"].toInteger(), 42);
        QCOMPARE(chat["max_tokens"].toInt(), 16);
        QCOMPARE(chat["top_k"].toInt(), 40);
        QCOMPARE(chat["stop"].toArray().first().toString(), QStringLiteral("\n\n"));
        QVERIFY(chat["logprobs"].toBool());
        QCOMPARE(chat["top_logprobs"].toInt(), 3);
        // The shared context opens the system message, so every card's prompt starts alike.
        const QJsonArray m = chat["messages"].toArray();
        QCOMPARE(m[0].toObject()["content"].toString(), QStringLiteral("DOC\n\nBe brief."));
        QCOMPARE(m[1].toObject()["content"].toString(), QStringLiteral("Why?"));
        const QJsonObject plain = QJsonDocument::fromJson(request_body(c, "m", Api::Completions)).object();
        QVERIFY(plain["prompt"].toString().startsWith("DOC"));
        QCOMPARE(plain["logprobs"].toInt(), 3);
        // A card's earlier turns go as user / assistant messages before its question (and
        // as paragraphs of a plain prompt).
        c.history = {{QStringLiteral("Who?"), QStringLiteral("Ada.")}};
        const QJsonArray turns = QJsonDocument::fromJson(request_body(c, "m", Api::Chat)).object()["messages"].toArray();
        QCOMPARE(turns.size(), 4);
        QCOMPARE(turns[1].toObject()["role"].toString(), QStringLiteral("user"));
        QCOMPARE(turns[1].toObject()["content"].toString(), QStringLiteral("Who?"));
        QCOMPARE(turns[2].toObject()["role"].toString(), QStringLiteral("assistant"));
        QCOMPARE(turns[2].toObject()["content"].toString(), QStringLiteral("Ada."));
        QCOMPARE(turns[3].toObject()["content"].toString(), QStringLiteral("Why?"));
        QCOMPARE(QJsonDocument::fromJson(request_body(c, "m", Api::Completions)).object()["prompt"].toString(),
                 QStringLiteral("DOC\n\nBe brief.\n\nWho?\n\nAda.\n\nWhy?"));
        // Unset settings are left to the server.
        const QJsonObject bare = QJsonDocument::fromJson(request_body(card("q", std::nullopt, std::nullopt, 8), "m", Api::Chat)).object();
        QVERIFY(!bare.contains("temperature") && !bare.contains("seed") && !bare.contains("top_p"));
    }

    void plainHttpOnlyToThisMachine() {
        Connection c;
        c.model = "m";
        c.base = QUrl("http://127.0.0.1:8080/v1");
        QVERIFY(connection_problem(c).isEmpty());
        c.base = QUrl("http://localhost:8080");
        QVERIFY(connection_problem(c).isEmpty());
        QCOMPARE(api_url(c, "models").toString(), QStringLiteral("http://localhost:8080/v1/models"));
        c.base = QUrl("http://gpu-node-7:8000/v1");
        QVERIFY(connection_problem(c).contains("unencrypted"));
        c.insecure = true;
        QVERIFY(connection_problem(c).isEmpty());
        c.base = QUrl("https://gpu-node-7:8000/v1/");
        c.insecure = false;
        QVERIFY(connection_problem(c).isEmpty());
        QCOMPARE(api_url(c, "chat/completions").toString(), QStringLiteral("https://gpu-node-7:8000/v1/chat/completions"));
        c.base = QUrl("ftp://host/v1");
        QVERIFY(connection_problem(c).contains("only http and https"));
        // A refused connection fails every card at once, with the reason, without a request.
        c.base = QUrl("http://example.org/v1");
        RemoteRun run(c, {card("q", 0.0, std::nullopt, 4), card("r", 0.0, std::nullopt, 4)});
        QVERIFY(finish(run, 1000));
        QCOMPARE(run.outcome(1).state, CardState::Failed);
        QVERIFY(run.outcome(1).error.contains("unencrypted"));
    }

    void serverMetricsAreRead() {
        // llama.cpp's server (--metrics) as this build writes it, and vLLM's labelled samples.
        const QByteArray llama = "# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed\n"
                                 "# TYPE llamacpp:prompt_tokens_total counter\n"
                                 "llamacpp:prompt_tokens_cached_total 1640\n"
                                 "llamacpp:predicted_tokens_seconds 24.5489\n"
                                 "llamacpp:requests_processing 2\n"
                                 "llamacpp:requests_deferred 0\n";
        const kevremote::ServerFigures l = kevremote::summarize(kevremote::parse_prometheus(llama));
        QCOMPARE(*l.running, 2.0);
        QCOMPARE(*l.waiting, 0.0);
        QCOMPARE(*l.cached_prompt_tokens, 1640.0);
        QVERIFY(!l.kv_usage);
        QCOMPARE(l.describe(), QStringLiteral("2 running, 0 waiting, 24.5 tok/s generation, 1640 prompt tokens reused from its cache"));
        const QByteArray vllm = "vllm:num_requests_running{model_name=\"m a\",engine=\"0\"} 3\n"
                                "vllm:num_requests_running{model_name=\"m a\",engine=\"1\"} 1\n"
                                "vllm:num_requests_waiting{model_name=\"m\"} 5.0\n"
                                "vllm:kv_cache_usage_perc{model_name=\"m\"} 0.125 1712345678\n"
                                "garbage line\nvllm:broken{ 1\n";
        const kevremote::ServerFigures v = kevremote::summarize(kevremote::parse_prometheus(vllm));
        QCOMPARE(*v.running, 4.0);  // summed over engines
        QCOMPARE(*v.waiting, 5.0);
        QCOMPARE(*v.kv_usage, 0.125);
        QVERIFY(v.describe().contains("KV cache 13%"));
        QVERIFY(!kevremote::summarize(kevremote::parse_prometheus("<html>nope</html>")).any());
    }

    void slotListsAreRead() {
        // llama.cpp's /slots as this build writes it: slot 2 generating, slot 3 idle after
        // a task (its last task's fields stay), 0 and 1 never used.
        const QByteArray now = R"([{"id":0,"n_ctx":1024,"speculative":false,"is_processing":false},
            {"id":1,"n_ctx":1024,"speculative":false,"is_processing":false},
            {"id":2,"n_ctx":1024,"speculative":false,"is_processing":true,"id_task":34,"n_prompt_tokens":160,
             "params":{"seed":4294967295,"temperature":0.8,"samplers":["top_k","temperature"],"lora":[]},
             "next_token":[{"has_next_token":true,"has_new_line":false,"n_remain":748,"n_decoded":152}]},
            {"id":3,"n_ctx":1024,"speculative":false,"is_processing":false,"id_task":1,
             "next_token":[{"has_next_token":false,"has_new_line":false,"n_remain":-1,"n_decoded":300}]}])";
        const auto s = kevremote::parse_slots(now);
        QVERIFY(s);
        QCOMPARE(s->total, 4);
        QCOMPARE(s->busy, 1);
        QCOMPARE(*s->context_per_slot, qint64(1024));
        QCOMPARE(s->decoded_by_busy, qint64(152));  // the idle slot's 300 are not counted
        kevremote::ServerFigures f;
        f.slots = s;
        QVERIFY(f.any());
        QCOMPARE(f.describe(), QStringLiteral("slots 1 of 4 busy (152 tokens generated in them), 1024 context tokens a slot"));
        // Older servers: "state" (0 idle) and "next_token" as one object.
        const auto old = kevremote::parse_slots(R"([{"id":0,"n_ctx":512,"state":1,"next_token":{"n_decoded":7}},
                                                    {"id":1,"n_ctx":512,"state":0,"next_token":{"n_decoded":9}}])");
        QVERIFY(old);
        QCOMPARE(old->busy, 1);
        QCOMPARE(old->decoded_by_busy, qint64(7));
        // Not a slot list: nothing, never a crash.
        for (const QByteArray& notSlots :
             {QByteArray(), QByteArray("<html>Not Found</html>"), QByteArray(R"({"id":0,"n_ctx":1024})"), QByteArray("[]"),
              QByteArray("[1,2,3]"), QByteArray(R"([{"id":0},"slot"])"), QByteArray(R"([{"id":0,"n_ctx":10)"),
              QByteArray(R"({"error":{"code":501,"message":"This server does not support slots endpoint."}})"),
              QByteArray(200000, '[') + QByteArray(200000, ']')})
            QVERIFY2(!kevremote::parse_slots(notSlots), notSlots.left(60).constData());
        // Over 4 MiB: not read, however well formed.
        QByteArray huge = "[";
        const QByteArray one = R"({"id":0,"n_ctx":1024,"is_processing":true,"next_token":[{"n_decoded":1}]},)";
        while (huge.size() <= 4 * 1024 * 1024) huge += one;
        huge.chop(1);
        huge += "]";
        QVERIFY(!kevremote::parse_slots(huge));
        QCOMPARE(kevremote::parse_slots("[" + one.repeated(1000).chopped(1) + "]")->decoded_by_busy, qint64(1000));  // smaller, it is read
        // Fields of the wrong type or out of range are skipped; the slots still count.
        const auto odd = kevremote::parse_slots(R"([{"id":"zero","n_ctx":"1024","is_processing":"yes","next_token":"many"},
            {"n_ctx":-5,"is_processing":true,"next_token":[{"n_decoded":1e300},{"n_decoded":-3},{"n_decoded":"4"},7,{"n_decoded":2.5}]},
            {"is_processing":true,"next_token":[{"n_decoded":9007199254740991}]},
            {"state":"busy","next_token":{"n_decoded":5}}, {}])");
        QVERIFY(odd);
        QCOMPARE(odd->total, 5);
        QCOMPARE(odd->busy, 2);               // "yes" and "busy" are not answers
        QVERIFY(!odd->context_per_slot);      // no slot gave a usable n_ctx
        QCOMPARE(odd->decoded_by_busy, qint64(0));  // 1e300, -3, "4", 2.5 and 2^53 - 1 (over 2^40) are not counts
        // Slots of different sizes: no single context per slot to show.
        const auto mixed = kevremote::parse_slots(R"([{"n_ctx":1024},{"n_ctx":2048}])");
        QVERIFY(mixed && !mixed->context_per_slot && mixed->busy == 0);
        // Beside /metrics figures, after them.
        kevremote::ServerFigures both = kevremote::summarize(kevremote::parse_prometheus("llamacpp:requests_processing 1\n"));
        both.slots = mixed;
        QCOMPARE(both.describe(), QStringLiteral("1 running, slots 0 of 2 busy"));
    }

    void connectionsKeepKeysApart() {
        QTemporaryDir dir;
        ConnectionStore store(dir.path());
        QString error;
        QVERIFY(store.load(&error));  // no files yet: an empty store
        QVERIFY(store.names().isEmpty());
        SavedConnection c;
        c.name = "cluster";
        c.base = QUrl("https://gpu-head:8000/v1");
        c.model = "meta-llama/Llama-3.3-70B-Instruct";
        c.timeout_s = 30;
        store.put(c, "sk-secret");
        QVERIFY2(store.save(&error), qPrintable(error));
        QFile keys(store.keysPath());
        QCOMPARE(keys.permissions() & ~(QFileDevice::ReadOwner | QFileDevice::WriteOwner | QFileDevice::ReadUser | QFileDevice::WriteUser),
                 QFileDevice::Permissions());
        QFile list(store.connectionsPath());
        QVERIFY(list.open(QIODevice::ReadOnly));
        QVERIFY(!list.readAll().contains("sk-secret"));
        ConnectionStore again(dir.path());
        QVERIFY(again.load(&error));
        const auto r = again.resolve("cluster");
        QVERIFY(r);
        QCOMPARE(r->api_key, QStringLiteral("sk-secret"));
        QCOMPARE(r->timeout_ms, 30000);
        QCOMPARE(r->model, c.model);
        QVERIFY(!again.resolve("other"));
        again.remove("cluster");
        QVERIFY(again.save(&error));
        QFile keysAfter(again.keysPath());
        QVERIFY(keysAfter.open(QIODevice::ReadOnly));
        QVERIFY(!keysAfter.readAll().contains("sk-secret"));
        // A file that is not JSON is named, and the store stays empty.
        QFile broken(store.connectionsPath());
        QVERIFY(broken.open(QIODevice::WriteOnly | QIODevice::Truncate));
        broken.write("{not json");
        broken.close();
        ConnectionStore bad(dir.path());
        QVERIFY(!bad.load(&error));
        QVERIFY(error.contains("connections.json"));
        QVERIFY(bad.names().isEmpty());
    }

    // ---- against a real llama.cpp server ----
    void fourCardsStreamConcurrently() {
        LlamaServer server;
        const QString why = server.start();
        QVERIFY2(why.isEmpty(), qPrintable(why));
        QVector<RemoteCard> cards = {card("Name three colours.", 0.0, std::nullopt, 24), card("Count to five.", 0.5, 1, 24),
                                     card("What is a cat?", 1.0, 2, 24), card("Say hello.", 1.5, 3, 24)};
        RemoteRun run(connectionTo(server), cards);
        QVector<int> deltas(4, 0);
        int firstDeltasBeforeAnyFinish = 0;
        bool anyFinished = false;
        connect(&run, &RemoteRun::textArrived, this, [&](int i, const QString&) {
            if (deltas[i]++ == 0 && !anyFinished) ++firstDeltasBeforeAnyFinish;
        });
        connect(&run, &RemoteRun::cardFinished, this, [&](int) { anyFinished = true; });
        QVERIFY(finish(run));
        for (int i = 0; i < 4; ++i) {
            const CardOutcome& o = run.outcome(i);
            QVERIFY2(o.state == CardState::Finished, qPrintable(o.error));
            QVERIFY(!o.text.isEmpty());
            QVERIFY(o.finish_reason == "stop" || o.finish_reason == "length");
            QVERIFY(o.tokens > 0 && o.tokens <= 24);
            QVERIFY(o.time_to_first_token_s > 0.0 && o.time_to_first_token_s <= o.total_s);
            QVERIFY(deltas[i] > 1);  // streamed, not delivered whole
        }
        // The requests ran side by side: every card had text before the first one ended.
        QCOMPARE(firstDeltasBeforeAnyFinish, 4);
    }

    void seedsReproduceAndLogprobsArrive() {
        LlamaServer server;
        const QString why = server.start();
        QVERIFY2(why.isEmpty(), qPrintable(why));
        auto once = [&](quint64 seed) {
            RemoteCard c = card("Write a short poem about rain.", 1.0, seed, 20);
            c.sampling.logprobs = 2;
            RemoteRun run(connectionTo(server), {c});
            finish(run);
            return run.outcome(0);
        };
        const CardOutcome a = once(7), b = once(7);
        QVERIFY2(a.state == CardState::Finished && b.state == CardState::Finished, qPrintable(a.error + b.error));
        QCOMPARE(a.text, b.text);
        QCOMPARE(int(a.logprobs.size()), a.tokens);
        QCOMPARE(int(a.logprobs[0].top.size()), 2);
        QVERIFY(a.logprobs[0].logprob <= 0.0);
    }

    void oneCardStopsTheOthersGoOn() {
        LlamaServer server;
        const QString why = server.start();
        QVERIFY2(why.isEmpty(), qPrintable(why));
        RemoteRun run(connectionTo(server), {card("Tell a long story about a dragon.", 0.8, 5, 160),
                                             card("Tell a long story about a ship.", 0.0, std::nullopt, 48)});
        int seen = 0;
        connect(&run, &RemoteRun::textArrived, this, [&](int i, const QString&) {
            if (i == 0 && ++seen == 3) run.stop(0);
        });
        QVERIFY(finish(run));
        QCOMPARE(run.outcome(0).state, CardState::Stopped);
        QCOMPARE(run.outcome(0).tokens, 3);
        QVERIFY2(run.outcome(1).state == CardState::Finished, qPrintable(run.outcome(1).error));
        QVERIFY(run.outcome(1).tokens > 3);
        // stopAll closes whatever still runs.
        RemoteRun all(connectionTo(server), {card("Tell a long story.", 0.8, 1, 300), card("Another long story.", 0.8, 2, 300)});
        connect(&all, &RemoteRun::textArrived, this, [&](int, const QString&) { all.stopAll(); });
        QVERIFY(finish(all));
        QCOMPARE(all.outcome(0).state, CardState::Stopped);
        QCOMPARE(all.outcome(1).state, CardState::Stopped);
    }

    void aServerKilledMidStreamFailsOnlyItsCard() {
        LlamaServer doomed, healthy;
        QString why = doomed.start();
        QVERIFY2(why.isEmpty(), qPrintable(why));
        why = healthy.start();
        QVERIFY2(why.isEmpty(), qPrintable(why));
        RemoteRun a(connectionTo(doomed), {card("Tell a long story about a dragon.", 0.0, std::nullopt, 300)});
        RemoteRun b(connectionTo(healthy), {card("Name three colours.", 0.0, std::nullopt, 32)});
        connect(&a, &RemoteRun::textArrived, this, [&](int, const QString&) {
            if (a.outcome(0).text.size() > 8) doomed.kill();
        });
        QSignalSpy bDone(&b, &RemoteRun::allFinished);
        QVERIFY(finish(a));
        QCOMPARE(a.outcome(0).state, CardState::Failed);
        QVERIFY2(a.outcome(0).error.contains("127.0.0.1"), qPrintable(a.outcome(0).error));
        QVERIFY(!a.outcome(0).text.isEmpty());  // what came before stays
        b.start();
        QVERIFY(b.finished() || bDone.wait(120000));
        QVERIFY2(b.outcome(0).state == CardState::Finished, qPrintable(b.outcome(0).error));
    }

    void aWrongKeyIsRefusedByName() {
        LlamaServer server;
        const QString why = server.start({"--api-key", "right-key"});
        QVERIFY2(why.isEmpty(), qPrintable(why));
        RemoteRun wrong(connectionTo(server, "wrong-key"), {card("Hi", 0.0, std::nullopt, 4)});
        QVERIFY(finish(wrong));
        QCOMPARE(wrong.outcome(0).state, CardState::Failed);
        QVERIFY2(wrong.outcome(0).error.contains("HTTP 401") && wrong.outcome(0).error.contains("refused the API key"),
                 qPrintable(wrong.outcome(0).error));
        RemoteRun right(connectionTo(server, "right-key"), {card("Hi", 0.0, std::nullopt, 4)});
        QVERIFY(finish(right));
        QVERIFY2(right.outcome(0).state == CardState::Finished, qPrintable(right.outcome(0).error));
    }

    void anHtmlPageIsNotAnApi() {
        QTemporaryDir dir;
        QFile page(dir.filePath("index.html"));
        QVERIFY(page.open(QIODevice::WriteOnly));
        page.write("<html><body>Welcome to nginx!</body></html>");
        page.close();
        QProcess web;
        const quint16 port = serveFolder(web, dir.path(), QString());
        QVERIFY(port != 0);
        Connection c;
        c.base = QUrl(QStringLiteral("http://127.0.0.1:%1/").arg(port));
        c.model = "m";
        RemoteRun run(c, {card("Hi", 0.0, std::nullopt, 4)});
        QVERIFY(finish(run, 30000));
        web.kill();
        web.waitForFinished();
        QCOMPARE(run.outcome(0).state, CardState::Failed);
        QVERIFY2(run.outcome(0).error.contains("HTML page") && run.outcome(0).error.contains("not an OpenAI-compatible API"),
                 qPrintable(run.outcome(0).error));
    }

    void aSilentServerTimesOut() {
        QTcpServer silent;  // accepts, reads, never answers
        QVERIFY(silent.listen(QHostAddress::LocalHost, 0));
        std::vector<std::unique_ptr<QTcpSocket>> held;
        connect(&silent, &QTcpServer::newConnection, this, [&] {
            while (QTcpSocket* s = silent.nextPendingConnection()) held.emplace_back(s);
        });
        Connection c;
        c.base = QUrl(QStringLiteral("http://127.0.0.1:%1/v1").arg(silent.serverPort()));
        c.model = "m";
        c.timeout_ms = 1500;
        RemoteRun run(c, {card("Hi", 0.0, std::nullopt, 4)});
        QElapsedTimer clock;
        clock.start();
        QVERIFY(finish(run, 30000));
        QCOMPARE(run.outcome(0).state, CardState::Failed);
        QVERIFY2(run.outcome(0).error.contains("timeout") && run.outcome(0).error.contains("1.5 s"), qPrintable(run.outcome(0).error));
        QVERIFY(clock.elapsed() >= 1400);
        // And a port nobody listens on: refused, at once.
        c.base = QUrl(QStringLiteral("http://127.0.0.1:%1/v1").arg(freePort()));
        RemoteRun refused(c, {card("Hi", 0.0, std::nullopt, 4)});
        QVERIFY(finish(refused, 30000));
        QVERIFY2(refused.outcome(0).error.contains("refused"), qPrintable(refused.outcome(0).error));
    }

    void tlsCertificatesAreChecked() {
        // A real HTTPS server (Python's http.server over ssl) with a self-signed
        // certificate: the handshake happens, the certificate is not trusted, the card
        // fails saying so, and no request is sent in the clear.
        const quint16 port = freePort();
        const QString tls = kevtest::testDataDir() + "/tls";
        QProcess web;
        web.setProcessChannelMode(QProcess::MergedChannels);
        web.start(kevtest::python(),
                  {"-c",
                   "import http.server, ssl, sys\n"
                   "ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)\n"
                   "ctx.load_cert_chain(sys.argv[2], sys.argv[3])\n"
                   "srv = http.server.HTTPServer(('127.0.0.1', int(sys.argv[1])), http.server.SimpleHTTPRequestHandler)\n"
                   "srv.socket = ctx.wrap_socket(srv.socket, server_side=True)\n"
                   "srv.serve_forever()\n",
                   QString::number(port), tls + "/cert.pem", tls + "/key.pem"});
        QVERIFY(web.waitForStarted(30000));
        QElapsedTimer clock;
        clock.start();
        bool listening = false;
        while (!listening && clock.elapsed() < 30000) {
            QTcpSocket probe;
            probe.connectToHost(QHostAddress::LocalHost, port);
            listening = probe.waitForConnected(500);
            if (!listening) QTest::qWait(100);
        }
        QVERIFY2(listening, web.readAll().constData());
        Connection c;
        c.base = QUrl(QStringLiteral("https://127.0.0.1:%1/v1").arg(port));
        c.model = "m";
        c.timeout_ms = 20000;
        RemoteRun run(c, {card("Hi", 0.0, std::nullopt, 4)});
        QVERIFY(finish(run, 30000));
        web.kill();
        web.waitForFinished();
        QCOMPARE(run.outcome(0).state, CardState::Failed);
        QVERIFY2(run.outcome(0).error.contains("TLS") && run.outcome(0).error.contains("certificate", Qt::CaseInsensitive),
                 qPrintable(run.outcome(0).error));
        qInfo("%s", qPrintable(run.outcome(0).error));
    }

    void serverSlotsArePolled() {
        // The helper's server: -np 4, /slots on (llama.cpp's default), no --metrics. The
        // poller's figures come from /slots alone, and show a slot busy while a card runs.
        LlamaServer server;
        const QString why = server.start();
        QVERIFY2(why.isEmpty(), qPrintable(why));
        MetricsPoller poller(connectionTo(server), 100);
        std::optional<ServerFigures> last;
        int mostBusy = 0;
        qint64 mostDecoded = 0;
        QStringList unavailable;
        connect(&poller, &MetricsPoller::figures, this, [&](const ServerFigures& f) {
            last = f;
            if (!f.slots) return;
            mostBusy = std::max(mostBusy, f.slots->busy);
            mostDecoded = std::max(mostDecoded, f.slots->decoded_by_busy);
        });
        connect(&poller, &MetricsPoller::unavailable, this, [&](const QString& w) { unavailable << w; });
        poller.start();
        QTRY_VERIFY_WITH_TIMEOUT(last && last->slots, 10000);
        QCOMPARE(last->slots->total, 4);  // the helper's -np 4
        QCOMPARE(*last->slots->context_per_slot, qint64(1024));  // -c 4096 shared by 4
        QVERIFY(!last->running && !last->kv_usage);  // no --metrics: those are not made up
        RemoteCard long_ = card("Tell a long story about a dragon.", 0.8, 5, 400);
        long_.sampling.ignore_eos = true;
        RemoteRun run(connectionTo(server), {long_});
        run.start();
        QTRY_VERIFY_WITH_TIMEOUT(mostBusy == 1 && mostDecoded > 0, 30000);
        QVERIFY2(mostDecoded <= 400, qPrintable(QString::number(mostDecoded)));
        run.stopAll();
        QTRY_VERIFY_WITH_TIMEOUT(last && last->slots && last->slots->busy == 0, 10000);  // the stopped request frees its slot
        QVERIFY2(unavailable.isEmpty(), qPrintable(unavailable.join('|')));  // /metrics' 501 alone says nothing
        QVERIFY2(last->describe().startsWith("slots 0 of 4 busy"), qPrintable(last->describe()));
    }

    void aServerWithoutFiguresSaysSoOnce() {
        // llama.cpp with --no-slots and no --metrics: both refused (501), said once, and not asked again.
        LlamaServer server;
        const QString why = server.start({"--no-slots"});
        QVERIFY2(why.isEmpty(), qPrintable(why));
        MetricsPoller poller(connectionTo(server), 50);
        QSignalSpy figures(&poller, &MetricsPoller::figures), unavailable(&poller, &MetricsPoller::unavailable);
        poller.start();
        QVERIFY(unavailable.wait(10000));
        const QString said = unavailable[0][0].toString();
        QVERIFY2(said.contains("/metrics: HTTP 501") && said.contains("--metrics") && said.contains("/slots: HTTP 501") &&
                     said.contains("--slots"),
                 qPrintable(said));
        QTest::qWait(300);
        QCOMPARE(unavailable.size(), 1);
        QCOMPARE(figures.size(), 0);
        // A server that answers /slots with more than Kev reads: cut off, and said so.
        QTemporaryDir dir;
        QFile slots(dir.filePath("slots"));
        QVERIFY(slots.open(QIODevice::WriteOnly));
        slots.write(QByteArray(5 * 1024 * 1024, '['));
        slots.close();
        QProcess web;
        const quint16 port = serveFolder(web, dir.path(), QStringLiteral("slots"));
        QVERIFY(port != 0);
        Connection c;
        c.base = QUrl(QStringLiteral("http://127.0.0.1:%1/v1").arg(port));
        MetricsPoller big(c, 1000);
        QSignalSpy bigUnavailable(&big, &MetricsPoller::unavailable);
        big.start();
        QVERIFY(bigUnavailable.wait(10000));
        web.kill();
        web.waitForFinished();
        const QString bigSaid = bigUnavailable[0][0].toString();
        QVERIFY2(bigSaid.contains("/slots: over 4 MiB") && bigSaid.contains("/metrics: HTTP 404"), qPrintable(bigSaid));
    }

    void thePollerAsksOneOfEachKindAtATime() {
        // A server that reads and never answers: however often the poller is asked, one
        // /metrics and one /slots request are out, and nothing blocks meanwhile.
        QTcpServer silent;
        QVERIFY(silent.listen(QHostAddress::LocalHost, 0));
        std::vector<std::unique_ptr<QTcpSocket>> held;
        QByteArray received;
        connect(&silent, &QTcpServer::newConnection, this, [&] {
            while (QTcpSocket* s = silent.nextPendingConnection()) {
                held.emplace_back(s);
                connect(s, &QTcpSocket::readyRead, this, [&received, s] { received += s->readAll(); });
            }
        });
        Connection c;
        c.base = QUrl(QStringLiteral("http://127.0.0.1:%1/v1").arg(silent.serverPort()));
        MetricsPoller poller(c, 20);
        QElapsedTimer clock;
        clock.start();
        poller.start();
        for (int i = 0; i < 50; ++i) poller.pollNow();
        QVERIFY(clock.elapsed() < 1000);  // asking returns at once
        QTest::qWait(1500);  // 75 timer polls, all within the requests' 5 s timeout
        QCOMPARE(received.count("GET /metrics HTTP"), 1);
        QCOMPARE(received.count("GET /slots HTTP"), 1);
    }

    // The remote engine behind kev::AnswerEngine, as kev-cli and the app's lanes call it:
    // streamed pieces as step events, a per-card cancel, seeds drawn and reported so the
    // same request again gives the same text, failures per card instead of exceptions.
    void theRemoteEngineAnswersThroughTheInterface() {
        LlamaServer server;
        const QString why = server.start();
        QVERIFY2(why.isEmpty(), qPrintable(why));
        RemoteEngine remote(connectionTo(server));
        kev::AnswerEngine& engine = remote;
        QVERIFY(!engine.gives_token_ids());
        QVERIFY(QString::fromStdString(engine.describe()).startsWith("builtin at http://127.0.0.1:"));
        kev::GenerationRequest request;
        for (const char* q : {"Name a fruit.", "Tell a long story about a dragon.", "Name a tree."}) {
            kev::CardRequest c;
            c.question = q;
            c.sampling.temperature = 0.8f;
            c.sampling.max_new_tokens = std::string(q).find("story") != std::string::npos ? 300 : 12;
            request.cards.push_back(c);
        }
        request.logprobs = 2;
        kev::CancelFlags cancel(3);
        std::vector<std::string> streamed(3);
        std::vector<std::optional<kev::FinishReason>> ended(3);
        kev::RunOptions options;
        options.cancel = &cancel;
        options.on_step = [&](const kev::StepEvent& ev) {
            QCOMPARE(ev.updates.size(), std::size_t{1});  // one piece of one stream per event
            const kev::CardUpdate& u = ev.updates[0];
            streamed[static_cast<std::size_t>(u.card)] += u.text;
            if (u.finished) ended[static_cast<std::size_t>(u.card)] = u.finished;
            if (u.card == 1 && u.stats.generated_tokens >= 3) cancel.cancel(1);  // its Stop button
        };
        const kev::GenerationResult result = engine.answer(request, options);
        QCOMPARE(result.cards.size(), std::size_t{3});
        for (std::size_t c = 0; c < 3; ++c) {
            const kev::CardResult& r = result.cards[c];
            QCOMPARE(r.text, streamed[c]);
            QVERIFY(ended[c].has_value());
            QCOMPARE(*ended[c], r.finish);
            QVERIFY(r.tokens.empty());  // a stream names tokens by their text only
            QVERIFY(r.seed > 0 && r.seed <= 0x7fffffffu);  // drawn here and sent, 31 bits
            QVERIFY(!r.details.empty() && r.details[0].top.size() == 2);
        }
        QCOMPARE(result.cards[1].finish, kev::FinishReason::Cancelled);
        QVERIFY(result.cards[1].stats.generated_tokens < 300);
        for (std::size_t c : {0, 2}) {  // sampled: a short answer may end before its 12 tokens
            QVERIFY(result.cards[c].finish == kev::FinishReason::MaxTokens ||
                    result.cards[c].finish == kev::FinishReason::EndOfSequence);
        }
        // The drawn seed reproduces: the first card again with the seed it reported, twice
        // alone (alone against alone: llama.cpp is not batch-invariant across pack sizes).
        kev::GenerationRequest again;
        again.cards.push_back(request.cards[0]);
        again.cards[0].sampling.seed = result.cards[0].seed;
        const kev::GenerationResult second = engine.answer(again, {});
        const kev::GenerationResult third = engine.answer(again, {});
        QCOMPARE(second.cards[0].seed, result.cards[0].seed);
        QVERIFY(!second.cards[0].text.empty());
        QCOMPARE(kev::first_difference(engine, second.cards[0], third.cards[0]), std::int64_t{-1});
        kev::CardResult other = second.cards[0];
        other.text.insert(3, "x");
        QCOMPARE(kev::first_difference(engine, second.cards[0], other), std::int64_t{3});
        // A refused key fails each card with the server's reason; nothing is thrown.
        LlamaServer locked;
        QVERIFY(locked.start({"--api-key", "right"}).isEmpty());
        RemoteEngine wrongKey(connectionTo(locked, "wrong"));
        const kev::GenerationResult refused = wrongKey.answer(again, {});
        QCOMPARE(refused.cards[0].finish, kev::FinishReason::Failed);
        QVERIFY2(QString::fromStdString(refused.cards[0].error).contains("401"), refused.cards[0].error.c_str());
        // A connection that may not be used is refused before anything is sent.
        Connection open = connectionTo(server);
        open.base = QUrl("http://10.1.2.3:8000/v1");
        RemoteEngine plain(open);
        QVERIFY_THROWS_EXCEPTION(kev::Error, plain.answer(again, {}));
    }

    void kevCliAnswersThroughTheServer() {
        LlamaServer server;
        const QString why = server.start({"--api-key", "cli-key"});
        QVERIFY2(why.isEmpty(), qPrintable(why));
        QProcess cli;
        QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
        env.insert("KEV_API_KEY", "cli-key");
        cli.setProcessEnvironment(env);
        cli.start(kevtest::binDir() + "/kev-cli",
                  {"--server", server.url("").toString(), "--json", "--logprobs", "3", "--max-new-tokens", "12",
                   "--temperature", "0.8", "--seed", "11", "Name a fruit.", "Name a tree."});
        QVERIFY(cli.waitForFinished(120000));
        const QByteArray err = cli.readAllStandardError();
        QVERIFY2(cli.exitCode() == 0, err.constData());
        const QJsonObject out = QJsonDocument::fromJson(cli.readAllStandardOutput()).object();
        QCOMPARE(out["engine"].toString(), QStringLiteral("remote"));
        QVERIFY(!out["model"].toString().isEmpty());  // the server's only model, from /v1/models
        const QJsonArray cards = out["cards"].toArray();
        QCOMPARE(cards.size(), 2);
        for (int i = 0; i < 2; ++i) {
            const QJsonObject c = cards[i].toObject();
            QCOMPARE(c["state"].toString(), QStringLiteral("finished"));
            QCOMPARE(c["seed"].toInteger(), 11 + i);  // S, S+1 as a local run
            QVERIFY(!c["text"].toString().isEmpty());
            const QJsonArray lp = c["logprobs"].toArray();
            QCOMPARE(lp.size(), c["stats"].toObject()["generated_tokens"].toInt());
            QCOMPARE(lp[0].toObject()["top"].toArray().size(), 3);
        }
        // --verify-isolation: every card again alone; the report and the exit code agree.
        cli.start(kevtest::binDir() + "/kev-cli",
                  {"--server", server.url().toString(), "--json", "--verify-isolation", "--max-new-tokens", "16",
                   "What is the capital of France?", "Name three colors.", "Count to five."});
        QVERIFY(cli.waitForFinished(120000));
        const QJsonObject iso = QJsonDocument::fromJson(cli.readAllStandardOutput()).object();
        QVERIFY(iso["isolation_differences"].isArray());
        const QJsonArray diffs = iso["isolation_differences"].toArray();
        QCOMPARE(cli.exitCode(), diffs.isEmpty() ? 0 : 3);
        for (const QJsonValue& d : diffs) QVERIFY(d.toObject()["question"].toInt() >= 1 && d.toObject()["question"].toInt() <= 3);
        qInfo("llama.cpp server, 3 greedy cards alone vs together: %d differ", int(diffs.size()));
        // Without the key: exit 1, the card's failure on stderr; usage errors by name.
        env.remove("KEV_API_KEY");
        cli.setProcessEnvironment(env);
        cli.start(kevtest::binDir() + "/kev-cli", {"--server", server.url().toString(), "Hi"});
        QVERIFY(cli.waitForFinished(60000));
        QCOMPARE(cli.exitCode(), 1);
        QVERIFY(cli.readAllStandardError().contains("HTTP 401"));
        cli.start(kevtest::binDir() + "/kev-cli", {"--server", server.url().toString(), "--precision", "4bit", "Hi"});
        QVERIFY(cli.waitForFinished(60000));
        QCOMPARE(cli.exitCode(), 2);
        QVERIFY(cli.readAllStandardError().contains("--precision is for the local engine"));
        cli.start(kevtest::binDir() + "/kev-cli", {"--server", "http://10.1.2.3:8000/v1", "Hi"});
        QVERIFY(cli.waitForFinished(60000));
        QCOMPARE(cli.exitCode(), 2);
        QVERIFY(cli.readAllStandardError().contains("unencrypted"));
    }
};

QTEST_GUILESS_MAIN(TestRemote)
#include "tst_remote.moc"
