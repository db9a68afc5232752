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
#include "engine_lane.h"
#include "remote_engine.h"
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
    // A server's answer has details without token ids (their text only).
    a.details = tokenViewsFrom(r);
    return a;
}

}  // namespace

RunController::RunController(EngineHost* engine, BoardDocument* board, GaugePanel* gauges, PackView* packView,
                             QObject* parent)
    : QObject(parent), engine_(engine), doc_(board), gauges_(gauges), packView_(packView) {
    watch(engine_);
}

RunController::~RunController() = default;

void RunController::watch(EngineLane* lane) {
    connect(lane, &EngineLane::runStarted, this, [this, lane](RunId id, const PackPreview& pack) {
        if (Group* g = groupOf(lane, id)) onRunStarted(*g, pack);
    });
    connect(lane, &EngineLane::stepArrived, this, [this, lane](RunId id, const kev::StepEvent& event) {
        if (Group* g = groupOf(lane, id)) onStep(*g, event);
    });
    connect(lane, &EngineLane::runFinished, this, [this, lane](RunId id, const kev::GenerationResult& result) {
        if (Group* g = groupOf(lane, id)) onRunFinished(*g, result);
    });
    connect(lane, &EngineLane::runFailed, this, [this, lane](RunId id, const QString& message) {
        if (Group* g = groupOf(lane, id)) onRunFailed(*g, message);
    });
}

RunController::Group* RunController::groupOf(const EngineLane* lane, RunId id) {
    for (const auto& g : groups_)
        if (g->lane == lane && g->id == id && !g->done) return g.get();
    return nullptr;
}

bool RunController::running() const {
    for (const auto& g : groups_)
        if (!g->done) return true;
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
    // Local cards in one pack; remote ones grouped by connection, in board order: one
    // group per engine, each one run on its lane.
    kind_ = Kind::Pack;
    sentBoard_ = board;
    QStringList order;
    QHash<QString, Group> byEngine;
    for (int i = 0; i < cards.size(); ++i) {
        const QString& name = sent[i].engine;
        if (!byEngine.contains(name)) order << name;
        Group& g = byEngine[name];
        const int number = cards[i]->number();
        g.connection = name;
        g.cards.push_back(cards[i]);
        g.rowOfCard.push_back(number - 1);  // gauges and pack view: the card's own colour
        g.sent.push_back(sent[i]);
        g.previous.push_back(doc_->card(number) ? doc_->card(number)->answer : CardAnswer{});
    }
    gauges_->startRun();
    for (const QString& name : order) {
        Group g = byEngine.take(name);
        g.lane = laneFor(name, nullptr);  // problemOf checked the connection
        for (const auto& card : g.cards) {
            doc_->startAnswer(card->number());
            card->setRunning(true);
        }
        kev::GenerationRequest request = boardRequest(g.sent, board);
        // The comparison view's colours and alternatives (a server: its top_logprobs).
        request.logprobs = kTopAlternatives;
        startGroup(std::move(g), request);
    }
    return true;
}

EngineLane* RunController::laneFor(const QString& connection, QuestionCard* card) {
    if (connection.isEmpty()) return engine_;
    const auto c = connections_ ? connections_->resolve(connection) : std::nullopt;
    if (!c) {
        if (card) card->showMessage(QStringLiteral("Cannot run: the engine '%1' is not a saved connection here.").arg(connection));
        return nullptr;
    }
    // A lane (a thread) per group and run: it ends with the run.
    auto* lane = new AnswerLane(std::make_unique<kevremote::RemoteEngine>(*c), this);
    watch(lane);
    return lane;
}

void RunController::startGroup(Group g, const kev::GenerationRequest& request) {
    if (!g.connection.isEmpty() && kind_ == Kind::Pack) {
        // The server's own figures, polled while its cards run (and once more at the end).
        const kevremote::Connection c = *connections_->resolve(g.connection);
        g.poller = new kevremote::MetricsPoller(c, 1000, this);
        const QString name = g.connection;
        connect(g.poller, &kevremote::MetricsPoller::figures, this, [this, name](const kevremote::ServerFigures& f) {
            gauges_->setServerFigures(name, f.describe());
        });
        connect(g.poller, &kevremote::MetricsPoller::unavailable, this, [this, name](const QString& why) {
            gauges_->setServerFigures(name, QStringLiteral("nothing (%1)").arg(why));
        });
        g.poller->start();
    }
    groups_.push_back(std::make_unique<Group>(std::move(g)));
    Group& started = *groups_.back();
    started.id = started.lane->run(request, started.rowOfCard);
}

void RunController::maybeEnd() {
    for (const auto& g : groups_)
        if (!g->done) return;
    for (const auto& g : groups_) {
        // A server's lane ends with its run (later: it may be inside its own signal now).
        if (g->lane != engine_) g->lane->deleteLater();
        if (g->poller) {
            g->poller->stop();
            g->poller->pollNow();  // the figures as the run ended
            QTimer::singleShot(10000, g->poller, &QObject::deleteLater);
        }
    }
    endRun();
}

bool RunController::replay(QuestionCard* card, const QString& sharedContext, const QString& system) {
    if (running()) return false;
    const CardState* recorded = doc_->card(card->number());
    if (!recorded) return false;
    const CardAnswer packed = recorded->answer;
    const QString engine = packed.ranWith ? packed.ranWith->engine : QString();
    if (engine.isEmpty() && !engine_->hasModel()) return false;
    const bool tokenIds = engine.isEmpty();
    if (packed.finish == QLatin1String("failed") || !packed.seedUsed ||
        (tokenIds ? packed.tokens.isEmpty() : packed.text.isEmpty())) {
        card->showMessage(QStringLiteral("Nothing to replay: run the card first."));
        return false;
    }
    Group g;
    g.lane = laneFor(engine, card);
    if (!g.lane) return false;
    // The inputs the answer ran with, not the card as it is now: an edit made since must
    // not read as an isolation failure.
    BoardInputs board = board_;
    board.sharedContext = sharedContext;
    board.system = system;
    const kev::GenerationRequest request = replayRequest(packed, recorded->settings, board);
    kind_ = Kind::Replay;
    g.connection = engine;
    g.cards = {card};
    g.rowOfCard = {card->number() - 1};
    card->showMessage(engine.isEmpty() ? QStringLiteral("Replaying alone…") : QStringLiteral("Replaying alone on %1…").arg(engine),
                      Tone::Note);
    startGroup(std::move(g), request);
    return true;
}

bool RunController::runRequest(const kev::GenerationRequest& request) {
    if (running() || !engine_->hasModel()) return false;
    kind_ = Kind::Request;
    Group g;
    g.lane = engine_;
    for (std::size_t i = 0; i < request.cards.size(); ++i) g.rowOfCard.push_back(static_cast<int>(i));
    startGroup(std::move(g), request);
    return true;
}

void RunController::stop() {
    for (const auto& g : groups_)
        if (!g->done) g->lane->cancel();
}

void RunController::stopCard(QuestionCard* card) {
    for (const auto& g : groups_)
        if (const int i = g->cards.indexOf(card); i >= 0 && !g->done) g->lane->cancelCard(i);
}

void RunController::onRunStarted(Group&, const PackPreview& pack) {
    if (kind_ == Kind::Request) return;
    if (kind_ == Kind::Pack) packView_->setPreview(pack);
    gauges_->setCacheBytes(pack.kvEstimateBytes, GaugePanel::Figure::Planned);
}

void RunController::onStep(Group& g, const kev::StepEvent& event) {
    const bool local = g.connection.isEmpty();
    // The toolbar's LoRA label describes the board's last pack, not a one-card replay.
    if (event.step == 0 && kind_ == Kind::Pack && local) Q_EMIT loraMode(QString::fromLatin1(kev::to_string(event.lora_mode)));
    if (kind_ != Kind::Pack) return;  // a replay's card keeps showing its packed answer
    QVector<QPair<int, double>> rates;
    for (const kev::CardUpdate& u : event.updates) {
        if (u.card < 0 || u.card >= g.cards.size()) continue;
        QuestionCard* card = g.cards[u.card];
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
        // A server's first pieces divide a token or two by a tiny time: left out of the plot.
        if (local || u.stats.generated_tokens > 2) rates.push_back({g.rowOfCard.value(u.card), u.stats.tokens_per_s});
    }
    // The first decode steps divide a handful of tokens by a tiny time: a spike that would
    // flatten the rest of the plot. The pack's rate is shown from the third forward on
    // (a server's streams have no pack rate of their own: theirs is per card).
    constexpr std::int64_t kFirstSteadyStep = 2;
    if (local) gauges_->setLiveCache(event.kv_bytes_in_use, event.prefix_cache_bytes);
    if (local || !rates.isEmpty())
        gauges_->addStep(local && event.step >= kFirstSteadyStep ? event.aggregate_tokens_per_s : 0.0, rates);
    Q_EMIT answersChanged();
}

CardAnswer RunController::recordedAnswer(const Group& g, int i, const kev::CardResult& r) const {
    CardAnswer a = answerFrom(r);
    if (i >= g.sent.size()) return a;
    a.ranWith = g.sent[i];
    a.ranWith->seed = a.seedUsed;
    a.ranWithSharedContext = sentBoard_.sharedContext;
    a.ranWithSystem = sentBoard_.system;
    a.ranWithKev = QString::fromStdString(kev::engine_info().kev_version);
    if (g.connection.isEmpty()) {
        a.ranWithLoraScale = sentBoard_.loraScale;
        a.ranWithAdapter = a.ranWith->lora.value_or(false) ? sentBoard_.adapter : QString();
        a.ranWithModel = engine_->model().path;
        a.ranWithModelHash = engine_->model().sha256;
        a.ranWithWeights = engine_->model().weightFormats;
    } else {
        a.ranWithModel = QStringLiteral("%1: %2").arg(g.connection, g.lane->describe());
    }
    return a;
}

void RunController::showReplayVerdict(const Group& g, const kev::CardResult& solo) {
    QuestionCard* card = g.cards.value(0);
    const CardState* recorded = card ? doc_->card(card->number()) : nullptr;
    if (!recorded) return;
    const CardAnswer& answer = recorded->answer;
    const QString alone = QString::fromStdString(solo.text);
    if (!g.lane->givesTokenIds()) {
        // Servers give no token ids in the stream: the texts are compared. The board then
        // shows whether this server gives a card the same answer alone as in a batch.
        const QString& name = g.connection;
        if (solo.finish == kev::FinishReason::Failed)
            card->showMessage(QStringLiteral("Replay on %1 failed: %2").arg(name, QString::fromStdString(solo.error)));
        else if (alone == answer.text)
            card->showMessage(QStringLiteral("Alone on %1: the same text as in the batch ✓").arg(name), Tone::Note);
        else
            card->showMessage(QStringLiteral("Alone on %1 the text differs from the batch: %2 (this server is not "
                                             "batch-invariant with these settings)")
                                  .arg(name, divergenceText(answer.text, alone)));
        return;
    }
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
                              .arg(divergenceText(answer.text, alone))
                              .arg(packed[diff])
                              .arg(solo.tokens[static_cast<std::size_t>(diff)]));
    }
}

void RunController::onRunFinished(Group& g, const kev::GenerationResult& result) {
    g.done = true;
    if (kind_ == Kind::Request) {
        Q_EMIT requestFinished(result);  // before runDone: the result is shown when the run is over
        return maybeEnd();
    }
    if (kind_ == Kind::Replay) {
        if (!result.cards.empty()) showReplayVerdict(g, result.cards.front());
        return maybeEnd();
    }
    for (std::size_t i = 0; i < result.cards.size() && static_cast<int>(i) < g.cards.size(); ++i) {
        QuestionCard* card = g.cards[static_cast<int>(i)];
        if (!card) continue;
        const kev::CardResult& r = result.cards[i];
        doc_->setAnswer(card->number(), recordedAnswer(g, static_cast<int>(i), r));
        card->setRunning(false);
        if (r.finish == kev::FinishReason::Failed)
            card->showMessage(QStringLiteral("The server did not answer this card: %1").arg(QString::fromStdString(r.error)));
    }
    Q_EMIT answersChanged();
    if (g.connection.isEmpty()) {
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
    }
    maybeEnd();
}

void RunController::onRunFailed(Group& g, const QString& message) {
    g.done = true;
    if (kind_ == Kind::Request) {
        Q_EMIT requestFailed(message);
        return maybeEnd();
    }
    if (kind_ == Kind::Replay && g.cards.value(0)) g.cards.value(0)->clearMessage();
    bool restored = false;
    if (kind_ == Kind::Pack) {
        // Nothing was answered: every card gets back the answer it had.
        for (int i = 0; i < g.cards.size() && i < g.previous.size(); ++i) {
            if (QuestionCard* card = g.cards[i]) {
                doc_->setAnswer(card->number(), g.previous[i]);
                card->setRunning(false);
                restored = restored || !g.previous[i].text.isEmpty();
            }
        }
    }
    const QString where = g.connection.isEmpty() ? QString() : QStringLiteral(" on %1").arg(g.connection);
    Q_EMIT windowMessage(QStringLiteral("The run%1 failed: %2%3")
                             .arg(where, message, restored ? QStringLiteral(" (the previous answers are kept)") : QString()),
                         Tone::Error);
    maybeEnd();  // the other engines' cards go on
}

void RunController::endRun() {
    for (const auto& g : groups_)
        for (QuestionCard* card : g->cards)
            if (card) card->setRunning(false);
    groups_.clear();
    Q_EMIT answersChanged();
    Q_EMIT runDone();
}

}  // namespace kevui
