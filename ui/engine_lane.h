// One engine answering runs on a thread of its own, seen from the UI thread. The run
// controller talks to lanes only, never to an engine: EngineHost is the lane of the local
// model (it also loads models, previews packs and attaches adapters), AnswerLane the lane
// of any other kev::AnswerEngine (a server). Both hand their runs to a LaneWorker on
// their thread and relay its events here, stale runs dropped.
//
//   UI thread                               lane thread
//   ---------                               -----------
//   lane.run(request) --queued-->           LaneWorker: AnswerEngine::answer (blocks there)
//   lane.cancel()  sets atomics that answer() reads between steps / polls
//   lane.join(card) queues a card the local run takes before its next step
//                  <--queued--              runStarted / stepArrived / runFinished / runFailed
#pragma once

#include <QObject>
#include <QThread>

#include <functional>
#include <memory>

#include "engine_types.h"
#include "kev/answer_engine.h"

namespace kevui {

// Runs requests on its lane's thread and reports them, each event with its run id.
class LaneWorker : public QObject {
    Q_OBJECT
protected:
    // Runs `request` on `engine` here and reports it: its steps, then its result or the
    // failure's message. `on_prepared` as in AnswerEngine::answer.
    void answer(RunId id, kev::AnswerEngine& engine, const kev::GenerationRequest& request, const RunHandle& control,
                const std::function<void(const kev::PreparedPack&)>& on_prepared = {});

Q_SIGNALS:
    void runStarted(kevui::RunId id, const kevui::PackPreview& pack);  // the local engine's pack only
    void stepArrived(kevui::RunId id, const kev::StepEvent& event);
    void runFinished(kevui::RunId id, const kev::GenerationResult& result);
    void runFailed(kevui::RunId id, const QString& message);
};

class EngineLane : public QObject {
    Q_OBJECT
public:
    using QObject::QObject;

    // Starts a run (a newer one supersedes the running one); returns its id.
    // `cardOfRequest[i]` is the window's card for request card i (the pack view's colours).
    RunId run(const kev::GenerationRequest& request, const QVector<int>& cardOfRequest);
    // Stops the current run within one step (every card, or one card of the run: a
    // request card's index, or the index a joined card was given).
    void cancel();
    void cancelCard(int requestCard);
    // Whether cards can join this lane's running run (the local pack can; a server's
    // cards run as requests of their own).
    virtual bool joinsRuns() const { return false; }
    // Queues `card` to join the current run at its next step; the step that takes it
    // says so (StepEvent::joined, with the returned tag, its index in the run or why it
    // was refused). 0: no run to join.
    // A join the run ends before taking is never reported: the caller still waits for
    // it when runFinished / runFailed comes.
    quint64 join(const kev::CardRequest& card);
    bool running() const { return current_ != 0; }
    RunId currentRun() const { return current_; }

    // For the answer's record and messages: the model file, or "<model> at <URL>".
    virtual QString describe() const = 0;
    // Whether answers carry token ids (Replay compares tokens) or text only (a server).
    virtual bool givesTokenIds() const = 0;

Q_SIGNALS:
    // Only for the current run; stale ones are dropped.
    void runStarted(kevui::RunId id, const kevui::PackPreview& pack);
    void stepArrived(kevui::RunId id, const kev::StepEvent& event);
    void runFinished(kevui::RunId id, const kev::GenerationResult& result);
    void runFailed(kevui::RunId id, const QString& message);

protected:
    // Hands the run to the lane's thread (queued).
    virtual void start(RunId id, const kev::GenerationRequest& request, const RunHandle& control,
                       const QVector<int>& cardOfRequest) = 0;
    // Relays `worker`'s events for the current run.
    void relay(LaneWorker* worker);

private:
    void endRun();

    RunHandle control_;
    RunId nextRun_ = 1;
    RunId current_ = 0;
    quint64 nextJoin_ = 1;
};

// Any kev::AnswerEngine (the remote one) on a thread of its own.
class AnswerWorker : public LaneWorker {
    Q_OBJECT
public:
    explicit AnswerWorker(std::unique_ptr<kev::AnswerEngine> engine) : engine_(std::move(engine)) {}
    const kev::AnswerEngine& engine() const { return *engine_; }

public Q_SLOTS:
    void run(kevui::RunId id, const kev::GenerationRequest& request, const kevui::RunHandle& control);

private:
    std::unique_ptr<kev::AnswerEngine> engine_;
};

class AnswerLane : public EngineLane {
    Q_OBJECT
public:
    AnswerLane(std::unique_ptr<kev::AnswerEngine> engine, QObject* parent = nullptr);
    // Cancels whatever runs, then quit() + wait() on the thread.
    ~AnswerLane() override;
    QString describe() const override { return describe_; }
    bool givesTokenIds() const override { return tokenIds_; }

Q_SIGNALS:
    void requestRun(kevui::RunId id, const kev::GenerationRequest& request, const kevui::RunHandle& control);

protected:
    void start(RunId id, const kev::GenerationRequest& request, const RunHandle& control,
               const QVector<int>& cardOfRequest) override;

private:
    QThread thread_;
    AnswerWorker* worker_ = nullptr;
    QString describe_;
    bool tokenIds_ = false;
};

}  // namespace kevui
