#include "engine_lane.h"

namespace kevui {

RunId EngineLane::run(const kev::GenerationRequest& request, const QVector<int>& cardOfRequest) {
    if (control_) control_->cancel.cancel_all();  // a newer run supersedes the old one
    current_ = nextRun_++;
    control_ = std::make_shared<RunControl>(request.cards.size());
    start(current_, request, control_, cardOfRequest);
    return current_;
}

quint64 EngineLane::join(const kev::CardRequest& card) {
    if (!control_ || !joinsRuns()) return 0;
    const quint64 tag = nextJoin_++;
    control_->joins.push_request(tag, card);
    return tag;
}

void EngineLane::cancel() {
    if (control_) control_->cancel.cancel_all();
}

void EngineLane::cancelCard(int requestCard) {
    if (control_ && requestCard >= 0 && static_cast<std::size_t>(requestCard) < control_->cancel.size())
        control_->cancel.cancel(static_cast<std::size_t>(requestCard));
}

void EngineLane::endRun() {
    current_ = 0;
    control_.reset();  // joins the run did not take are dropped with it (the caller knows them)
}

void EngineLane::relay(LaneWorker* worker) {
    connect(worker, &LaneWorker::runStarted, this, [this](RunId id, const PackPreview& pack) {
        if (id == current_) Q_EMIT runStarted(id, pack);
    });
    connect(worker, &LaneWorker::stepArrived, this, [this](RunId id, const kev::StepEvent& event) {
        if (id == current_) Q_EMIT stepArrived(id, event);
    });
    connect(worker, &LaneWorker::runFinished, this, [this](RunId id, const kev::GenerationResult& result) {
        if (id != current_) return;
        endRun();
        Q_EMIT runFinished(id, result);
    });
    connect(worker, &LaneWorker::runFailed, this, [this](RunId id, const QString& message) {
        if (id != current_) return;
        endRun();
        Q_EMIT runFailed(id, message);
    });
}

void LaneWorker::answer(RunId id, kev::AnswerEngine& engine, const kev::GenerationRequest& request,
                        const RunHandle& control, const std::function<void(const kev::PreparedPack&)>& on_prepared) {
    try {
        kev::RunOptions options;
        options.cancel = &control->cancel;
        options.joins = &control->joins;
        options.on_step = [this, id](const kev::StepEvent& event) { Q_EMIT stepArrived(id, event); };
        const kev::GenerationResult result = engine.answer(request, options, on_prepared);
        Q_EMIT runFinished(id, result);
    } catch (const std::exception& e) {
        Q_EMIT runFailed(id, QString::fromStdString(e.what()));
    }
}

void AnswerWorker::run(RunId id, const kev::GenerationRequest& request, const RunHandle& control) {
    answer(id, *engine_, request, control);
}

AnswerLane::AnswerLane(std::unique_ptr<kev::AnswerEngine> engine, QObject* parent) : EngineLane(parent) {
    registerEngineTypes();
    describe_ = QString::fromStdString(engine->describe());
    tokenIds_ = engine->gives_token_ids();
    thread_.setObjectName(QStringLiteral("kev-lane"));
    worker_ = new AnswerWorker(std::move(engine));
    worker_->moveToThread(&thread_);
    connect(this, &AnswerLane::requestRun, worker_, &AnswerWorker::run);
    relay(worker_);
    thread_.start();
}

AnswerLane::~AnswerLane() {
    cancel();
    thread_.quit();
    thread_.wait();
    delete worker_;  // its thread has ended: safe to destroy from here
}

void AnswerLane::start(RunId id, const kev::GenerationRequest& request, const RunHandle& control,
                       const QVector<int>&) {
    Q_EMIT requestRun(id, request, control);
}

}  // namespace kevui
