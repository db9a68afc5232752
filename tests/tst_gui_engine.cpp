// The engine worker without widgets: loads on its thread, streams events that carry
// their run id, drops a superseded run's events, cancels one card or all of them through
// the shared atomics, and reports failures as messages.
#include <QSignalSpy>
#include <QThread>
#include <QtTest>

#include "engine_worker.h"
#include "kev_test_env.h"

namespace {

kev::GenerationRequest request(const QStringList& questions, int maxNewTokens) {
    kev::GenerationRequest r;
    for (const QString& q : questions) {
        kev::CardRequest c;
        c.question = q.toStdString();
        c.sampling.temperature = 0.0f;
        c.sampling.max_new_tokens = maxNewTokens;
        r.cards.push_back(c);
    }
    return r;
}

}  // namespace

class TestGuiEngine : public QObject {
    Q_OBJECT
    std::unique_ptr<kevui::EngineHost> host_;

private Q_SLOTS:
    void initTestCase() {
        host_ = std::make_unique<kevui::EngineHost>();
        QSignalSpy loaded(host_.get(), &kevui::EngineHost::modelLoaded);
        QSignalSpy progress(host_.get(), &kevui::EngineHost::loadProgress);
        host_->load(kevtest::builtinModel(), kevui::LoadSettings{});
        QVERIFY(host_->loading());
        QVERIFY(loaded.wait(180000));
        QVERIFY(!host_->loading());
        QVERIFY(host_->hasModel());
        QVERIFY(progress.count() > 0);  // the progress bar had something to show
        const kevui::ModelInfo info = loaded.at(0).at(0).value<kevui::ModelInfo>();
        QVERIFY(info.weightBytes > 0);
        QVERIFY(info.kvBytesPerSlot > 0);
        QCOMPARE(info.dtype, kev::DType::F32);
    }

    void cleanupTestCase() { host_.reset(); }

    void eventsCarryTheRunIdAndArriveOnTheUiThread() {
        QSignalSpy steps(host_.get(), &kevui::EngineHost::stepArrived);
        QSignalSpy started(host_.get(), &kevui::EngineHost::runStarted);
        QSignalSpy finished(host_.get(), &kevui::EngineHost::runFinished);
        bool onUiThread = true;
        const auto conn = connect(host_.get(), &kevui::EngineHost::stepArrived, this,
                                  [&] { onUiThread = onUiThread && QThread::currentThread() == thread(); });
        const kevui::RunId id = host_->run(request({QStringLiteral("Hi"), QStringLiteral("Count to three.")}, 6), {0, 1});
        QVERIFY(host_->running());
        QVERIFY(finished.wait(120000));
        disconnect(conn);
        QVERIFY(!host_->running());
        QVERIFY(onUiThread);
        QCOMPARE(started.count(), 1);
        QCOMPARE(started.at(0).at(0).value<kevui::RunId>(), id);
        const kevui::PackPreview pack = started.at(0).at(1).value<kevui::PackPreview>();
        QCOMPARE(pack.plan.cards(), 2);
        QCOMPARE(pack.rowPieces.size(), static_cast<qsizetype>(pack.plan.rows()));
        QVERIFY(pack.kvEstimateBytes > 0);
        QVERIFY(steps.count() >= 2);
        for (const auto& args : steps) QCOMPARE(args.at(0).value<kevui::RunId>(), id);
        const auto result = finished.at(0).at(1).value<kev::GenerationResult>();
        QCOMPARE(result.cards.size(), std::size_t(2));
        QVERIFY(result.cache_bytes > 0);
    }

    void aSupersededRunIsDropped() {
        QSignalSpy steps(host_.get(), &kevui::EngineHost::stepArrived);
        QSignalSpy finished(host_.get(), &kevui::EngineHost::runFinished);
        const kevui::RunId first = host_->run(request({QStringLiteral("Tell a long story.")}, 300), {0});
        const kevui::RunId second = host_->run(request({QStringLiteral("Say yes.")}, 4), {0});
        QVERIFY(second != first);
        QVERIFY(finished.wait(120000));
        QTest::qWait(200);  // nothing from the first run may follow
        QCOMPARE(finished.count(), 1);
        QCOMPARE(finished.at(0).at(0).value<kevui::RunId>(), second);
        for (const auto& args : steps) QCOMPARE(args.at(0).value<kevui::RunId>(), second);
    }

    void cancelOneCardThenAll() {
        QSignalSpy finished(host_.get(), &kevui::EngineHost::runFinished);
        int stepsSeen = 0;
        const auto conn = connect(host_.get(), &kevui::EngineHost::stepArrived, this, [&] {
            // Set from the UI thread while the worker is inside Generator::run.
            if (++stepsSeen == 2) host_->cancelCard(1);
            if (stepsSeen == 6) host_->cancel();
        });
        host_->run(request({QStringLiteral("Write a poem about rain."), QStringLiteral("Write a poem about snow.")}, 200),
                   {0, 1});
        QVERIFY(finished.wait(120000));
        disconnect(conn);
        const auto result = finished.at(0).at(1).value<kev::GenerationResult>();
        QCOMPARE(result.cards[1].finish, kev::FinishReason::Cancelled);
        QCOMPARE(result.cards[0].finish, kev::FinishReason::Cancelled);
        // Card 1 stopped first (within a step of its cancel); card 0 ran on until the end.
        QVERIFY(result.cards[1].tokens.size() < result.cards[0].tokens.size());
        QVERIFY(result.cards[0].tokens.size() < 200);
    }

    void failuresAreMessages() {
        QSignalSpy failed(host_.get(), &kevui::EngineHost::runFailed);
        host_->run(request({QStringLiteral("   ")}, 4), {0});  // blank: the engine refuses it
        QVERIFY(failed.wait(60000));
        QVERIFY(!failed.at(0).at(1).toString().isEmpty());
        QVERIFY(!host_->running());

        QSignalSpy loadFailed(host_.get(), &kevui::EngineHost::loadFailed);
        host_->load(QStringLiteral("/nonexistent/model.gguf"), kevui::LoadSettings{});
        QVERIFY(loadFailed.wait(60000));
        QVERIFY2(loadFailed.at(0).at(1).toString().contains(QStringLiteral("/nonexistent/model.gguf")),
                 qPrintable(loadFailed.at(0).at(1).toString()));
        QVERIFY(host_->hasModel());  // the loaded model stays
    }
};

QTEST_MAIN(TestGuiEngine)
#include "tst_gui_engine.moc"
