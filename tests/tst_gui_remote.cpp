// The window with server connections: a saved connection (through the dialog, key in a
// user-only file, never in the workspace), a mixed board (two local cards in one pack,
// two cards on a real llama.cpp server) with all four answers, Stop closing the remote
// requests, a server gone (that card fails with the reason; the local card and the
// question text stay), and a card naming a connection this machine lacks.
#include <QCheckBox>
#include <QComboBox>
#include <QFile>
#include <QLineEdit>
#include <QSignalSpy>
#include <QtTest>

#include <memory>

#include "connection_dialog.h"
#include "connections.h"
#include "gauge_panel.h"
#include "kev_test_env.h"
#include "llama_server.h"
#include "main_window.h"
#include "question_card.h"
#include "remote_run.h"

namespace {

kevui::CardSettings settings(const QString& question, double temperature, int maxNewTokens, const QString& engine = {}) {
    kevui::CardSettings s;
    s.question = question;
    s.temperature = temperature;
    s.maxNewTokens = maxNewTokens;
    s.seed = 7;
    s.engine = engine;
    return s;
}

void setBoard(kevui::MainWindow& w, const QVector<kevui::CardSettings>& cards) {
    while (w.cards().size() > cards.size()) w.removeCard(w.cards().last());
    while (w.cards().size() < cards.size()) w.addCard();
    for (int i = 0; i < cards.size(); ++i) w.cards()[i]->setSettings(cards[i]);
}

}  // namespace

class TestGuiRemote : public QObject {
    Q_OBJECT
    std::unique_ptr<kevui::MainWindow> w_;
    kevtest::LlamaServer server_;
    QString configDir_;

private Q_SLOTS:
    void initTestCase() {
        QStandardPaths::setTestModeEnabled(true);
        const QString ws = kevtest::workDir() + QStringLiteral("/remote-workspace.json");
        QFile::remove(ws);
        qputenv("KEV_WORKSPACE", ws.toUtf8());
        configDir_ = kevtest::workDir(QStringLiteral("remote-config"));
        QFile::remove(configDir_ + "/connections.json");
        QFile::remove(configDir_ + "/keys.json");
        qputenv("KEV_CONFIG_DIR", configDir_.toUtf8());
        const QString why = server_.start({"--api-key", "secret-key", "--metrics"});
        QVERIFY2(why.isEmpty(), qPrintable(why));
        w_ = std::make_unique<kevui::MainWindow>(kevtest::builtinModel());
        QSignalSpy ready(w_.get(), &kevui::MainWindow::modelReady);
        w_->show();
        QVERIFY(QTest::qWaitForWindowExposed(w_.get()));
        QVERIFY2(ready.wait(180000), qPrintable(w_->modelStatus()));
    }

    void cleanupTestCase() { w_.reset(); }

    void aConnectionIsSavedWithItsKeyApart() {
        kevui::ConnectionDialog* d = w_->openConnections();
        d->findChild<QComboBox*>("connectionName")->setCurrentText("llama");
        d->findChild<QLineEdit*>("connectionUrl")->setText("http://10.9.8.7:8080/v1");
        d->findChild<QLineEdit*>("connectionKey")->setText("secret-key");
        d->findChild<QComboBox*>("connectionModel")->setCurrentText("smollm2");
        QVERIFY(!d->saveCurrent());  // plain http to another machine
        QVERIFY(d->statusText().contains("unencrypted"));
        d->findChild<QLineEdit*>("connectionUrl")->setText(server_.url().toString());
        d->fetchModels();  // the server's /v1/models, with the key
        QTRY_VERIFY_WITH_TIMEOUT(d->statusText().contains("model(s) on the server"), 30000);
        QVERIFY(!d->findChild<QComboBox*>("connectionModel")->currentText().isEmpty());
        QVERIFY(d->saveCurrent());
        d->close();
        QFile connections(configDir_ + "/connections.json"), keys(configDir_ + "/keys.json");
        QVERIFY(connections.open(QIODevice::ReadOnly) && keys.open(QIODevice::ReadOnly));
        QVERIFY(!connections.readAll().contains("secret-key"));
        QVERIFY(keys.readAll().contains("secret-key"));
        QCOMPARE(keys.permissions() & (QFileDevice::ReadGroup | QFileDevice::ReadOther | QFileDevice::WriteGroup |
                                        QFileDevice::WriteOther),
                 QFileDevice::Permissions());
        // Every card can now pick it.
        w_->addCard();
        QVERIFY(w_->cards().last()->findChild<QComboBox*>("cardEngineCombo")->findData("llama") >= 0);
    }

    void aMixedBoardAnswersEveryCard() {
        kevui::MainWindow& w = *w_;
        setBoard(w, {settings("What is the capital of France?", 0.0, 16), settings("Name three colours.", 0.8, 16),
                     settings("What is 2+2?", 0.0, 16, "llama"), settings("Say hello in French.", 1.0, 16, "llama")});
        QSignalSpy done(&w, &kevui::MainWindow::runDone);
        QVERIFY(w.runAll());
        QVERIFY(w.isRunning());
        QVERIFY(done.wait(120000));
        for (int i = 0; i < 4; ++i) {
            const kevui::CardAnswer& a = w.cards()[i]->answer();
            QVERIFY2(!a.text.isEmpty(), qPrintable(w.cards()[i]->messageText()));
            QVERIFY(a.generatedTokens > 0 && a.generatedTokens <= 16);
            QVERIFY(a.timeToFirstTokenS > 0.0);
            QCOMPARE(a.ranWithModel.contains("llama: "), i >= 2);  // the server's cards say where they ran
            // The comparison view's details: token ids locally, the server's top_logprobs by text.
            QVERIFY(!a.details.isEmpty() && !a.details[0].top.isEmpty());
            QCOMPARE(a.tokens.isEmpty(), i >= 2);
        }
        // Kev's own figures and the server's, each said to be what it is.
        QVERIFY(w.gauges()->text().contains("measured by Kev"));
        QTRY_VERIFY_WITH_TIMEOUT(w.gauges()->text().contains("Server llama, as it reports:"), 10000);
        QVERIFY2(w.gauges()->text().contains("running"), qPrintable(w.gauges()->text()));
        // The engine choice is part of the card, saved with the workspace.
        const kevui::Workspace ws = w.workspace();
        QCOMPARE(ws.cards[2].settings.engine, QStringLiteral("llama"));
        QVERIFY(ws.cards[0].settings.engine.isEmpty());
        QVERIFY(!kevui::toJson(ws, kevui::WithAnswers::Yes).contains("secret-key"));
        // Replay on a server's card sends it again alone and says whether the text is the same.
        kevui::QuestionCard* remote = w.cards()[2];
        const QString before = remote->answer().text;
        QVERIFY(w.replayCard(remote));
        QVERIFY(w.isRunning());
        QVERIFY(done.wait(120000));
        QVERIFY2(remote->messageText().startsWith("Alone on llama"), qPrintable(remote->messageText()));
        QCOMPARE(remote->answer().text, before);  // the board's answer stays; the verdict is a message
        qInfo("%s", qPrintable(remote->messageText()));
    }

    void stopClosesTheRemoteRequests() {
        kevui::MainWindow& w = *w_;
        setBoard(w, {settings("Tell a long story about a dragon.", 0.8, 400, "llama"),
                     settings("Tell a long story about a ship.", 0.8, 400, "llama")});
        QSignalSpy done(&w, &kevui::MainWindow::runDone);
        QVERIFY(w.runAll());
        QTRY_VERIFY_WITH_TIMEOUT(!w.cards()[0]->answer().text.isEmpty(), 60000);
        w.stop();
        QVERIFY(done.wait(30000));
        for (int i = 0; i < 2; ++i) {
            QCOMPARE(w.cards()[i]->answer().finish, QStringLiteral("cancelled"));
            QVERIFY(w.cards()[i]->answer().generatedTokens < 400);
        }
    }

    void aMissingConnectionIsNamed() {
        kevui::MainWindow& w = *w_;
        setBoard(w, {settings("Hi", 0.0, 4, "elsewhere")});
        QVERIFY(!w.runAll());
        QVERIFY(w.cards()[0]->messageText().contains("'elsewhere' is not a saved connection"));
        QCOMPARE(w.cards()[0]->settings().engine, QStringLiteral("elsewhere"));  // the choice is kept, not dropped
    }

    void aConnectionCanSendPlainCompletions() {
        // The dialog's API choice, saved with the connection and read back by a fresh store.
        kevui::ConnectionDialog* d = w_->openConnections();
        auto* name = d->findChild<QComboBox*>("connectionName");
        auto* api = d->findChild<QComboBox*>("connectionApi");
        QVERIFY(api);
        name->setCurrentText("plain");
        d->findChild<QLineEdit*>("connectionUrl")->setText(server_.url().toString());
        d->findChild<QLineEdit*>("connectionKey")->setText("secret-key");
        d->findChild<QComboBox*>("connectionModel")->setCurrentText("builtin");
        QCOMPARE(api->currentData().toInt(), int(kevremote::Api::Chat));  // the default
        api->setCurrentIndex(api->findData(int(kevremote::Api::Completions)));
        QVERIFY(api->currentText().contains("/v1/completions"));
        QVERIFY2(d->saveCurrent(), qPrintable(d->statusText()));
        kevremote::ConnectionStore store(configDir_);
        QString error;
        QVERIFY2(store.load(&error), qPrintable(error));
        const auto plain = store.resolve("plain");
        QVERIFY(plain);
        QCOMPARE(plain->api, kevremote::Api::Completions);
        QCOMPARE(store.resolve("llama")->api, kevremote::Api::Chat);  // the other connection keeps its own
        // Switching between connections shows each one's choice.
        name->setCurrentText("llama");
        QCOMPARE(api->currentData().toInt(), int(kevremote::Api::Chat));
        name->setCurrentText("plain");
        QCOMPARE(api->currentData().toInt(), int(kevremote::Api::Completions));
        d->close();
        // A card on it runs through /v1/completions: its greedy answer is the one the server
        // gives that endpoint for the bare question, not the chat endpoint's.
        kevui::MainWindow& w = *w_;
        setBoard(w, {settings("The capital of France is", 0.0, 12, "plain")});
        const kevui::Workspace ws = w.workspace();
        QSignalSpy done(&w, &kevui::MainWindow::runDone);
        QVERIFY(w.runAll());
        QVERIFY(done.wait(60000));
        const QString answer = w.cards()[0]->answer().text;
        QVERIFY2(!answer.isEmpty(), qPrintable(w.cards()[0]->messageText()));
        auto direct = [&](kevremote::Api which) {
            kevremote::Connection c = *plain;
            c.api = which;
            kevremote::RemoteCard r;
            r.question = "The capital of France is";
            r.system = ws.system;
            r.shared_context = ws.sharedContext;
            r.sampling.temperature = 0.0;
            r.sampling.seed = 7;
            r.sampling.max_tokens = 12;
            kevremote::RemoteRun run(c, {r});
            QSignalSpy all(&run, &kevremote::RemoteRun::allFinished);
            run.start();
            if (!run.finished()) all.wait(60000);
            return run.outcome(0).text;
        };
        const QString completions = direct(kevremote::Api::Completions), chat = direct(kevremote::Api::Chat);
        QVERIFY2(completions != chat, qPrintable(chat));  // else this check could not tell them apart
        QCOMPARE(answer, completions);
        qInfo("plain completions: '%s'; chat: '%s'", qPrintable(completions), qPrintable(chat));
    }

    // A card's own Stop closes only its request, and a card removed mid-run drops out;
    // the others on the same server finish, and the run ends.
    void aCardsStopEndsOnlyThatRemoteCard() {
        kevui::MainWindow& w = *w_;
        setBoard(w, {settings("Tell a long story about a dragon.", 0.8, 300, "llama"), settings("Name a fruit.", 0.0, 12, "llama"),
                     settings("Tell a long story about a ship.", 0.8, 300, "llama")});
        QSignalSpy done(&w, &kevui::MainWindow::runDone);
        QVERIFY(w.runAll());
        QTRY_VERIFY_WITH_TIMEOUT(!w.cards()[0]->answer().text.isEmpty() && !w.cards()[2]->answer().text.isEmpty(), 60000);
        Q_EMIT w.cards()[0]->stopRequested();  // its Stop button
        w.removeCard(w.cards()[2]);
        QVERIFY(done.wait(120000));
        QVERIFY(!w.isRunning());
        QCOMPARE(w.cards().size(), 2);
        QCOMPARE(w.cards()[0]->answer().finish, QStringLiteral("cancelled"));
        QVERIFY(w.cards()[0]->answer().generatedTokens < 300);
        QVERIFY(!w.cards()[0]->answer().text.isEmpty());  // what came before the stop stays
        QVERIFY2(!w.cards()[1]->answer().text.isEmpty(), qPrintable(w.cards()[1]->messageText()));
        QVERIFY(w.cards()[1]->answer().finish != QStringLiteral("cancelled"));
        QVERIFY(w.cards()[1]->answer().seedUsed.has_value());
    }

    void aServerGoneFailsOnlyItsCards() {
        kevui::MainWindow& w = *w_;
        server_.kill();
        setBoard(w, {settings("What is the capital of Spain?", 0.0, 12), settings("Why is the sky blue?", 0.0, 12, "llama")});
        QSignalSpy done(&w, &kevui::MainWindow::runDone);
        QVERIFY(w.runAll());
        QVERIFY(done.wait(120000));
        QVERIFY(!w.cards()[0]->answer().text.isEmpty());
        QCOMPARE(w.cards()[1]->answer().finish, QStringLiteral("failed"));
        QVERIFY2(w.cards()[1]->messageText().contains("127.0.0.1"), qPrintable(w.cards()[1]->messageText()));
        QCOMPARE(w.cards()[1]->settings().question, QStringLiteral("Why is the sky blue?"));
    }
};

QTEST_MAIN(TestGuiRemote)
#include "tst_gui_remote.moc"
