#include "run_controller.h"

#include <QHash>
#include <QTimer>

#include <algorithm>

#include "card_state.h"
#include "engine_worker.h"
#include "gauge_panel.h"
#include "kev/engine_info.h"
#include "kev/error.h"
#include "board_document.h"
#include "board_request.h"
#include "pack_view.h"
#include "question_card.h"
#include "token_view.h"
#include "connections.h"
#include "remote_run.h"
#include "server_metrics.h"

namespace kevui {

namespace {

CardAnswer answerFrom(const kev::CardResult& r) {
    CardAnswer a;
    a.text = QString::fromStdString(r.text);
    a.finish = QString::fromLatin1(kev::to_string(r.finish));
    a.promptTokens = r.stats.prompt_tokens;
    a.generatedTokens = r.stats.generated_tokens;
    a.tokensPerS = r.stats.tokens_per_s;
    a.timeToFirstTokenS = r.stats.time_to_first_token_s;
    a.seedUsed = r.seed;
    for (kev::TokenId t : r.tokens) a.tokens.push_back(t);
    a.details = tokenViewsFrom(r);
    return a;
}

// A card as one request: its settings as fields, the board's shared context and system
// prompt (the card's own wins).
kevremote::RemoteCard remoteCard(const CardSettings& s, const BoardInputs& board) {
    kevremote::RemoteCard r;
    r.question = s.question;
    r.system = s.system.isEmpty() ? board.system : s.system;
    r.shared_context = board.sharedContext;
    r.sampling.temperature = s.temperature;
    if (s.topP != 1.0) r.sampling.top_p = s.topP;
    if (s.topK != 0) r.sampling.top_k = s.topK;
    if (s.minP != 0.0) r.sampling.min_p = s.minP;
    if (s.repetitionPenalty != 1.0) r.sampling.repetition_penalty = s.repetitionPenalty;
    r.sampling.max_tokens = s.maxNewTokens;
    r.sampling.stop = s.stopStrings;
    if (s.seed) r.sampling.seed = *s.seed;
    return r;
}

}  // namespace

RunController::RunController(EngineHost* engine, BoardDocument* board, GaugePanel* gauges, PackView* packView,
                             QObject* parent)
    : QObject(parent), engine_(engine), doc_(board), gauges_(gauges), packView_(packView) {
    connect(engine_, &EngineHost::runStarted, this, &RunController::onRunStarted);
    connect(engine_, &EngineHost::stepArrived, this, &RunController::onStep);
    connect(engine_, &EngineHost::runFinished, this, &RunController::onRunFinished);
    connect(engine_, &EngineHost::runFailed, this, &RunController::onRunFailed);
}

RunController::~RunController() = default;

bool RunController::running() const {
    if (engine_->running() || localRunning_ || ending_) return true;
    for (const RemoteGroup& g : remote_)
        if (!g.done) return true;
    return false;
}

kev::LoraUse RunController::loraFor(const CardSettings& s) const { return cardRequest(s, board_).lora; }

QString RunController::problemOf(const QuestionCard* card) const {
    const CardSettings s = card->settings();
    if (s.question.trimmed().isEmpty()) return QStringLiteral("This question is empty: type a question or remove the card.");
    try {
        s.sampling().validate();
        loraFor(s).validate();
    } catch (const kev::Error& e) {
        return QStringLiteral("Invalid setting: %1").arg(QString::fromStdString(e.what()));
    }
    if (!s.engine.isEmpty()) {
        const auto c = connections_ ? connections_->resolve(s.engine) : std::nullopt;
        if (!c) return QStringLiteral("Invalid setting: the engine '%1' is not a saved connection here (Engine ▸ Connections…).").arg(s.engine);
        if (const QString p = kevremote::connection_problem(*c); !p.isEmpty())
            return QStringLiteral("Invalid setting: connection '%1': %2").arg(s.engine, p);
        if (s.lora.value_or(false))
            return QStringLiteral("Invalid setting: a LoRA adapter applies to the local model only, not to '%1'.").arg(s.engine);
    }
    return QString();
}

void RunController::recheck(const QList<QuestionCard*>& cards, QuestionCard* edited) {
    if (!problemsShown_) return;
    if (edited) {
        const QString said = edited->messageText();
        const bool flagged = said.startsWith(QStringLiteral("This question is empty")) ||
                             said.startsWith(QStringLiteral("Invalid setting"));
        if (flagged && problemOf(edited).isEmpty()) edited->clearMessage();
    }
    int problems = 0;
    for (const QuestionCard* card : cards) problems += problemOf(card).isEmpty() ? 0 : 1;
    if (problems == 0) {
        problemsShown_ = false;
        Q_EMIT windowMessage(QString(), Tone::Note);
    } else {
        Q_EMIT windowMessage(QStringLiteral("Nothing ran: %1 card(s) need attention (marked in red).").arg(problems), Tone::Error);
    }
}

bool RunController::runAll(const QList<QuestionCard*>& cards, const QString& sharedContext, const QString& system) {
    if (running()) return false;
    const bool anyLocal = std::any_of(cards.begin(), cards.end(), [](const QuestionCard* c) { return c->settings().engine.isEmpty(); });
    // While another model or precision loads, the loaded model keeps answering.
    if (anyLocal && !engine_->hasModel()) {
        Q_EMIT windowMessage(engine_->loading() ? QStringLiteral("The model is still loading; run again when it is ready.")
                                                : QStringLiteral("No model is loaded: open a model first (File ▸ Open model)."), Tone::Error);
        return false;
    }
    if (cards.isEmpty()) {
        Q_EMIT windowMessage(QStringLiteral("There is no question to answer: add a card first."), Tone::Error);
        return false;
    }
    // Every card is checked before anything is cleared: a run that cannot start leaves
    // every answer in place.
    BoardInputs board = board_;
    board.sharedContext = sharedContext;
    board.system = system;
    int problems = 0;
    QVector<CardSettings> sent;
    for (QuestionCard* card : cards) {
        const QString problem = problemOf(card);
        if (!problem.isEmpty()) {
            card->showMessage(problem);
            ++problems;
            continue;
        }
        card->clearMessage();
        CardSettings s = resolvedSettings(card->settings(), board);
        if (!s.engine.isEmpty()) s.lora = false;  // the toolbar's adapter is the local model's
        sent.push_back(s);
    }
    if (problems > 0) {
        problemsShown_ = true;
        Q_EMIT windowMessage(QStringLiteral("Nothing ran: %1 card(s) need attention (marked in red).").arg(problems), Tone::Error);
        return false;
    }
    problemsShown_ = false;
    Q_EMIT windowMessage(QString(), Tone::Note);
    // Local cards in one pack; remote ones grouped by connection, in board order.
    QVector<CardSettings> localSent;
    QStringList connectionsUsed;
    QHash<QString, QPair<QVector<QuestionCard*>, QVector<CardSettings>>> byConnection;
    kind_ = Kind::Pack;
    cards_.clear();
    rowOfCard_.clear();
    previous_.clear();
    sentBoard_ = board;
    for (int i = 0; i < cards.size(); ++i) {
        const int number = cards[i]->number();
        if (sent[i].engine.isEmpty()) {
            cards_.push_back(cards[i]);
            rowOfCard_.push_back(number - 1);  // gauges and pack view: the card's own colour
            previous_.push_back(doc_->card(number) ? doc_->card(number)->answer : CardAnswer{});
            localSent.push_back(sent[i]);
        } else {
            if (!byConnection.contains(sent[i].engine)) connectionsUsed << sent[i].engine;
            byConnection[sent[i].engine].first.push_back(cards[i]);
            byConnection[sent[i].engine].second.push_back(sent[i]);
        }
        doc_->startAnswer(number);
        cards[i]->setRunning(true);
    }
    sent_ = localSent;
    gauges_->startRun();
    starting_ = true;
    if (!localSent.isEmpty()) {
        kev::GenerationRequest request = boardRequest(localSent, board);
        request.logprobs = kTopAlternatives;  // the comparison view's colours and alternatives
        localRunning_ = true;
        engine_->run(request, rowOfCard_);
    }
    for (const QString& name : connectionsUsed)
        startRemote(name, byConnection[name].first, byConnection[name].second, board);
    starting_ = false;
    maybeEnd();  // every remote card may have failed at once
    return true;
}

void RunController::startRemote(const QString& connection, const QVector<QuestionCard*>& cards,
                                const QVector<CardSettings>& sent, const BoardInputs& board) {
    const kevremote::Connection c = *connections_->resolve(connection);  // problemOf checked it
    QVector<kevremote::RemoteCard> requests;
    for (const CardSettings& s : sent) requests.push_back(remoteCard(s, board));
    RemoteGroup g;
    g.connection = connection;
    g.run = std::make_unique<kevremote::RemoteRun>(c, requests);
    for (QuestionCard* card : cards) g.cards.push_back(card);
    g.sent = sent;
    g.board = board;
    const int group = static_cast<int>(remote_.size());
    connect(g.run.get(), &kevremote::RemoteRun::textArrived, this, [this, group](int i, const QString& delta) {
        RemoteGroup& grp = remote_[static_cast<std::size_t>(group)];
        QuestionCard* card = grp.cards.value(i);
        if (!card) return;  // removed during the run
        const kevremote::CardOutcome& o = grp.run->outcome(i);
        doc_->appendAnswer(card->number(), delta);
        doc_->setProgress(card->number(), o.tokens, o.tokens_per_s, o.time_to_first_token_s);
        if (o.tokens > 2) gauges_->addStep(0.0, {{card->number() - 1, o.tokens_per_s}});
        Q_EMIT answersChanged();
    });
    connect(g.run.get(), &kevremote::RemoteRun::cardFinished, this, [this, group](int i) { onRemoteCardDone(group, i); });
    // The server's own figures, polled while its cards run (and once more at the end).
    g.poller = new kevremote::MetricsPoller(c, 1000, this);
    connect(g.poller, &kevremote::MetricsPoller::figures, this, [this, connection](const kevremote::ServerFigures& f) {
        gauges_->setServerFigures(connection, f.describe());
    });
    connect(g.poller, &kevremote::MetricsPoller::unavailable, this, [this, connection](const QString& why) {
        gauges_->setServerFigures(connection, QStringLiteral("nothing (%1)").arg(why));
    });
    g.poller->start();
    remote_.push_back(std::move(g));
    remote_.back().run->start();
}

void RunController::onRemoteCardDone(int group, int i) {
    RemoteGroup& g = remote_[static_cast<std::size_t>(group)];
    const kevremote::CardOutcome& o = g.run->outcome(i);
    if (QuestionCard* card = g.cards.value(i)) {
        const int number = card->number();
        CardAnswer a;
        a.text = o.text;
        a.generatedTokens = o.tokens;
        a.tokensPerS = o.tokens_per_s;
        a.timeToFirstTokenS = o.time_to_first_token_s;
        switch (o.state) {
            case kevremote::CardState::Finished:
                a.finish = o.finish_reason == QLatin1String("length") ? QString::fromLatin1(kev::to_string(kev::FinishReason::MaxTokens))
                         : o.finish_reason == QLatin1String("stop")   ? QString::fromLatin1(kev::to_string(kev::FinishReason::EndOfSequence))
                                                                      : o.finish_reason;
                break;
            case kevremote::CardState::Stopped: a.finish = QString::fromLatin1(kev::to_string(kev::FinishReason::Cancelled)); break;
            default: a.finish = QStringLiteral("failed");
        }
        a.seedUsed = g.sent.value(i).seed;
        a.ranWith = g.sent.value(i);
        a.ranWithSharedContext = g.board.sharedContext;
        a.ranWithSystem = g.board.system;
        if (const auto saved = connections_ ? connections_->find(g.connection) : std::nullopt)
            a.ranWithModel = QStringLiteral("%1: %2 at %3").arg(g.connection, saved->model, saved->base.toString());
        a.ranWithKev = QString::fromStdString(kev::engine_info().kev_version);
        doc_->setAnswer(number, a);
        card->setRunning(false);
        if (o.state == kevremote::CardState::Failed)
            card->showMessage(QStringLiteral("The server did not answer this card: %1").arg(o.error));
    }
    Q_EMIT answersChanged();
    if (g.run->finished()) {
        g.done = true;
        maybeEnd();
    }
}

void RunController::maybeEnd() {
    if (starting_ || localRunning_ || ending_) return;
    for (const RemoteGroup& g : remote_)
        if (!g.done) return;
    if (remote_.empty()) return endRun();  // the local pack's end is already a queued signal
    // The last remote card may have ended inside a RemoteRun's signal, or inside stop():
    // the run ends from the event loop, and counts as running until then.
    ending_ = true;
    QMetaObject::invokeMethod(this, [this] {
        ending_ = false;
        for (RemoteGroup& g : remote_) {
            g.run.release()->deleteLater();
            if (g.poller) {
                g.poller->stop();
                g.poller->pollNow();  // the figures as the run ended
                QTimer::singleShot(10000, g.poller, &QObject::deleteLater);
            }
        }
        remote_.clear();
        endRun();
    }, Qt::QueuedConnection);
}

bool RunController::replay(QuestionCard* card, const QString& sharedContext, const QString& system) {
    if (running()) return false;
    const CardState* recorded = doc_->card(card->number());
    if (!recorded) return false;
    if (!engine_->hasModel() && !(recorded->answer.ranWith && !recorded->answer.ranWith->engine.isEmpty())) return false;
    const CardAnswer packed = recorded->answer;
    if (packed.ranWith && !packed.ranWith->engine.isEmpty()) return replayRemote(card, packed);
    if (packed.tokens.isEmpty() || !packed.seedUsed) {
        card->showMessage(QStringLiteral("Nothing to replay: run the card first."));
        return false;
    }
    // The inputs the answer ran with, not the card as it is now: an edit made since must
    // not read as an isolation failure.
    BoardInputs board = board_;
    board.sharedContext = sharedContext;
    board.system = system;
    const kev::GenerationRequest request = replayRequest(packed, recorded->settings, board);
    kind_ = Kind::Replay;
    cards_ = {card};
    rowOfCard_ = {card->number() - 1};
    card->showMessage(QStringLiteral("Replaying alone…"), Tone::Note);
    engine_->run(request, rowOfCard_);
    return true;
}

// A server's card alone: the same request again, by itself. Servers give no token ids in
// the stream, so the texts are compared: the board then shows whether this server gives
// a card the same answer alone as in a batch.
bool RunController::replayRemote(QuestionCard* card, const CardAnswer& packed) {
    const CardSettings& then = *packed.ranWith;
    const auto c = connections_ ? connections_->resolve(then.engine) : std::nullopt;
    if (!c) {
        card->showMessage(QStringLiteral("Cannot replay: the engine '%1' is not a saved connection here.").arg(then.engine));
        return false;
    }
    if (packed.text.isEmpty() || packed.finish == QLatin1String("failed")) {
        card->showMessage(QStringLiteral("Nothing to replay: run the card first."));
        return false;
    }
    BoardInputs board = board_;
    board.sharedContext = packed.ranWithSharedContext;
    board.system = packed.ranWithSystem;
    CardSettings s = then;
    s.maxNewTokens = std::max<int>(1, static_cast<int>(packed.generatedTokens));  // the same length to compare
    kind_ = Kind::Replay;
    cards_.clear();
    rowOfCard_.clear();
    ending_ = true;  // running() until the verdict is shown
    auto* run = new kevremote::RemoteRun(*c, {remoteCard(s, board)}, this);
    QPointer<QuestionCard> target(card);
    const QString name = then.engine, before = packed.text;
    connect(run, &kevremote::RemoteRun::allFinished, this, [this, run, target, name, before] {
        const kevremote::CardOutcome o = run->outcome(0);
        run->deleteLater();
        ending_ = false;
        if (target) {
            if (o.state != kevremote::CardState::Finished)
                target->showMessage(QStringLiteral("Replay on %1 failed: %2").arg(name, o.error));
            else if (o.text == before)
                target->showMessage(QStringLiteral("Alone on %1: the same text as in the batch ✓").arg(name), Tone::Note);
            else
                target->showMessage(QStringLiteral("Alone on %1 the text differs from the batch: %2 (this server is not "
                                                   "batch-invariant with these settings)")
                                        .arg(name, divergenceText(before, o.text)));
        }
        endRun();
    });
    card->showMessage(QStringLiteral("Replaying alone on %1…").arg(name), Tone::Note);
    run->start();
    return true;
}

bool RunController::runRequest(const kev::GenerationRequest& request) {
    if (running() || !engine_->hasModel()) return false;
    kind_ = Kind::Request;
    cards_.clear();
    rowOfCard_.clear();
    QVector<int> rows;
    for (std::size_t i = 0; i < request.cards.size(); ++i) rows.push_back(static_cast<int>(i));
    engine_->run(request, rows);
    return true;
}

void RunController::stop() {
    engine_->cancel();
    for (std::size_t i = 0; i < remote_.size(); ++i)
        if (!remote_[i].done) remote_[i].run->stopAll();
}

void RunController::stopCard(QuestionCard* card) {
    const int i = cards_.indexOf(card);
    if (i >= 0) engine_->cancelCard(i);
    for (std::size_t g = 0; g < remote_.size(); ++g)
        if (const int r = remote_[g].cards.indexOf(card); r >= 0 && !remote_[g].done) remote_[g].run->stop(r);
}

void RunController::onRunStarted(RunId, const PackPreview& pack) {
    if (kind_ == Kind::Request) return;
    if (kind_ == Kind::Pack) packView_->setPreview(pack);
    gauges_->setCacheBytes(pack.kvEstimateBytes, GaugePanel::Figure::Planned);
}

void RunController::onStep(RunId, const kev::StepEvent& event) {
    // The toolbar's LoRA label describes the board's last pack, not a one-card replay.
    if (event.step == 0 && kind_ == Kind::Pack) Q_EMIT loraMode(QString::fromLatin1(kev::to_string(event.lora_mode)));
    if (kind_ != Kind::Pack) return;  // a replay's card keeps showing its packed answer
    QVector<QPair<int, double>> rates;
    for (const kev::CardUpdate& u : event.updates) {
        if (u.card < 0 || u.card >= cards_.size()) continue;
        QuestionCard* card = cards_[u.card];
        if (!card) continue;  // removed during the run
        const int number = card->number();
        doc_->appendAnswer(number, QString::fromStdString(u.text));
        doc_->setProgress(number, u.stats.generated_tokens, u.stats.tokens_per_s, u.stats.time_to_first_token_s);
        if (u.finished) {
            card->setRunning(false);
            if (const CardState* c = doc_->card(number)) {
                CardAnswer a = c->answer;
                a.finish = QString::fromLatin1(kev::to_string(*u.finished));
                doc_->setAnswer(number, a);
            }
        }
        rates.push_back({rowOfCard_.value(u.card), u.stats.tokens_per_s});
    }
    // The first decode steps divide a handful of tokens by a tiny time: a spike that would
    // flatten the rest of the plot. The rate is shown from the third forward on.
    constexpr std::int64_t kFirstSteadyStep = 2;
    gauges_->addStep(event.step >= kFirstSteadyStep ? event.aggregate_tokens_per_s : 0.0, rates);
    Q_EMIT answersChanged();
}

void RunController::showReplayVerdict(QuestionCard* card, const kev::CardResult& solo) {
    const CardState* recorded = doc_->card(card->number());
    if (!recorded) return;
    const CardAnswer& answer = recorded->answer;
    const QVector<int>& packed = answer.tokens;
    const qsizetype soloSize = static_cast<qsizetype>(solo.tokens.size());
    const qsizetype common = std::min(packed.size(), soloSize);
    qsizetype diff = -1;
    for (qsizetype i = 0; i < common && diff < 0; ++i)
        if (packed[i] != solo.tokens[static_cast<std::size_t>(i)]) diff = i;
    if (diff < 0 && packed.size() == soloSize) {
        card->showMessage(QStringLiteral("Solo replay: all %1 tokens match the packed run ✓").arg(packed.size()), Tone::Note);
    } else if (diff < 0) {
        card->showMessage(QStringLiteral("Solo replay: the first %1 tokens match; the lengths differ (%2 packed, %3 alone)")
                              .arg(common)
                              .arg(packed.size())
                              .arg(soloSize));
    } else {
        // The texts where they part (packed | alone), then the token ids.
        card->showMessage(QStringLiteral("Solo replay differs at token %1: %2 (packed id %3, alone id %4)")
                              .arg(diff + 1)
                              .arg(divergenceText(answer.text, QString::fromStdString(solo.text)))
                              .arg(packed[diff])
                              .arg(solo.tokens[static_cast<std::size_t>(diff)]));
    }
}

void RunController::onRunFinished(RunId, const kev::GenerationResult& result) {
    if (kind_ == Kind::Request) {
        Q_EMIT requestFinished(result);  // before runDone: the result is shown when the run is over
        endRun();
        return;
    }
    if (kind_ == Kind::Replay) {
        if (QuestionCard* card = cards_.value(0); card && !result.cards.empty())
            showReplayVerdict(card, result.cards.front());
    } else {
        for (std::size_t i = 0; i < result.cards.size() && static_cast<int>(i) < cards_.size(); ++i) {
            if (QuestionCard* card = cards_[static_cast<int>(i)]) {
                CardAnswer a = answerFrom(result.cards[i]);
                if (static_cast<int>(i) < sent_.size()) {
                    a.ranWith = sent_[static_cast<int>(i)];
                    a.ranWith->seed = a.seedUsed;
                    a.ranWithSharedContext = sentBoard_.sharedContext;
                    a.ranWithSystem = sentBoard_.system;
                    a.ranWithLoraScale = sentBoard_.loraScale;
                    a.ranWithAdapter = a.ranWith->lora.value_or(false) ? sentBoard_.adapter : QString();
                    a.ranWithModel = engine_->model().path;
                    a.ranWithModelHash = engine_->model().sha256;
                    a.ranWithWeights = engine_->model().weightFormats;
                    a.ranWithKev = QString::fromStdString(kev::engine_info().kev_version);
                }
                doc_->setAnswer(card->number(), a);
            }
        }
        gauges_->setCacheBytes(result.cache_bytes, GaugePanel::Figure::Measured);
        // Cards stopped by Esc or their Stop button are not "answered".
        int stopped = 0;
        for (const kev::CardResult& r : result.cards) stopped += r.finish == kev::FinishReason::Cancelled ? 1 : 0;
        const int answered = static_cast<int>(result.cards.size()) - stopped;
        const QString what = stopped == 0 ? QStringLiteral("%1 cards answered").arg(answered)
                                          : QStringLiteral("%1 cards answered, %2 stopped").arg(answered).arg(stopped);
        Q_EMIT statusMessage(QStringLiteral("%1 in %2 s (prefill %3 tokens in %4 s, %5 forwards)")
                                 .arg(what)
                                 .arg(result.total_s, 0, 'f', 2)
                                 .arg(result.prefill_tokens)
                                 .arg(result.prefill_s, 0, 'f', 2)
                                 .arg(result.steps));
        localRunning_ = false;
        maybeEnd();
        return;
    }
    endRun();
}

void RunController::onRunFailed(RunId, const QString& message) {
    if (kind_ == Kind::Request) {
        Q_EMIT requestFailed(message);
        endRun();
        return;
    }
    if (kind_ == Kind::Replay && cards_.value(0)) cards_.value(0)->clearMessage();
    bool restored = false;
    if (kind_ == Kind::Pack) {
        // Nothing was answered: every card gets back the answer it had.
        for (int i = 0; i < cards_.size() && i < previous_.size(); ++i) {
            if (QuestionCard* card = cards_[i]) {
                doc_->setAnswer(card->number(), previous_[i]);
                restored = restored || !previous_[i].text.isEmpty();
            }
        }
    }
    Q_EMIT windowMessage(QStringLiteral("The run failed: %1%2")
                             .arg(message, restored ? QStringLiteral(" (the previous answers are kept)") : QString()),
                         Tone::Error);
    if (kind_ == Kind::Pack) {
        localRunning_ = false;
        for (QuestionCard* card : cards_)
            if (card) card->setRunning(false);
        maybeEnd();  // the remote cards go on
        return;
    }
    endRun();
}

void RunController::endRun() {
    for (QuestionCard* card : cards_)
        if (card) card->setRunning(false);
    cards_.clear();
    rowOfCard_.clear();
    previous_.clear();
    Q_EMIT answersChanged();
    Q_EMIT runDone();
}

}  // namespace kevui
