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

bool RunController::checkCards(const QList<QuestionCard*>& cards, const BoardInputs& board, QVector<CardSettings>* sent) {
    // Every card is checked before anything is cleared: a run that cannot start leaves
    // every answer in place.
    int problems = 0;
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
        sent->push_back(s);
    }
    if (problems > 0) {
        problemsShown_ = true;
        Q_EMIT windowMessage(QStringLiteral("Nothing ran: %1 card(s) need attention (marked in red).").arg(problems), Tone::Error);
        return false;
    }
    problemsShown_ = false;
    Q_EMIT windowMessage(QString(), Tone::Note);
    return true;
}

bool RunController::runAll(const QList<QuestionCard*>& cards, const QString& sharedContext, const QString& system) {
    const BoardInputs board = boardInputs(sharedContext, system);
    if (running()) return joinRun(cards, board, /*force=*/false);
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
    QVector<CardSettings> sent;
    if (!checkCards(cards, board, &sent)) return false;
    kind_ = Kind::Pack;
    sentBoard_ = board;
    packLog_.clear();
    gauges_->startRun();
    startCards(cards, sent, board);
    return true;
}

bool RunController::runCard(QuestionCard* card, const QString& sharedContext, const QString& system) {
    if (running()) return joinRun({card}, boardInputs(sharedContext, system), /*force=*/true);
    return runAll({card}, sharedContext, system);
}

void RunController::startCards(const QList<QuestionCard*>& cards, const QVector<CardSettings>& sent, const BoardInputs& board) {
    // Local cards in one pack; remote ones grouped by connection, in board order: one
    // group per engine, each one run on its lane.
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
}

RunController::Place RunController::placeOf(const QuestionCard* card) const {
    for (const auto& g : groups_) {
        if (g->done) continue;
        if (const int i = g->cards.indexOf(card); i >= 0) return {g.get(), i};
    }
    return {};
}

RunController::Group* RunController::joiningGroupOf(const QuestionCard* card) const {
    for (const auto& g : groups_)
        for (const Joining& j : g->joining)
            if (j.card == card && !g->done) return g.get();
    return nullptr;
}

bool RunController::sameRunInputs(const BoardInputs& a, const BoardInputs& b) {
    return a.sharedContext == b.sharedContext && a.system == b.system && a.loraScale == b.loraScale &&
           a.adapter == b.adapter;
}

QString RunController::whyNotJoin(const Group* pack, const CardSettings& s, const BoardInputs& board) const {
    if (!sameRunInputs(board, sentBoard_))
        return QStringLiteral("the shared context, system prompt or LoRA scale changed since the pack started");
    if (!pack || !s.engine.isEmpty()) return QString();
    const Group& g = *pack;
    // A pack whose every card wants the adapter at one scale may run with it merged into
    // the weights: only a card with the same LoRA use can join it. A card wanting LoRA
    // when no card of the pack did may need the adapter attached first.
    const kev::LoraUse want = loraFor(s);
    bool anyOn = false;
    bool allOnAlike = !g.sent.isEmpty();
    const kev::LoraUse first = g.sent.isEmpty() ? kev::LoraUse{} : loraFor(g.sent.front());
    for (const CardSettings& o : g.sent) {
        const kev::LoraUse u = loraFor(o);
        anyOn = anyOn || u.enabled;
        allOnAlike = allOnAlike && u.enabled && u == first;
    }
    if (allOnAlike && !(want == first)) return QStringLiteral("the running pack has the LoRA adapter merged at another setting");
    if (want.enabled && !anyOn) return QStringLiteral("no card of the running pack uses the LoRA adapter");
    return QString();
}

bool RunController::joinRun(const QList<QuestionCard*>& cards, const BoardInputs& board, bool force) {
    if (kind_ != Kind::Pack) {
        Q_EMIT windowMessage(QStringLiteral("A replay is running: run again when it has finished."), Tone::Error);
        return false;
    }
    // What joins: new cards and cards whose question or settings changed since they ran
    // (or failed); a running card that was edited is stopped and starts again. Unchanged
    // cards keep their answers (a card's own Run answers it again whatever it holds).
    QList<QuestionCard*> wanted;
    for (QuestionCard* card : cards) {
        if (joiningGroupOf(card) || deferred_.contains(card)) continue;  // on its way already
        const CardState* state = doc_->card(card->number());
        if (!state) continue;
        const Place place = placeOf(card);
        bool stale = false;
        if (place.group && card->isRunning()) {
            CardAnswer sentAnswer;
            sentAnswer.ranWith = place.group->sent.value(place.index);
            stale = answerIsStale(sentAnswer, card->settings());
        } else {
            const CardAnswer& a = state->answer;
            stale = !a.ranWith || answerIsStale(a, card->settings()) ||
                    a.finish == QLatin1String(kev::to_string(kev::FinishReason::Failed));
        }
        if (stale || (force && !card->isRunning())) wanted << card;
    }
    if (wanted.isEmpty()) {
        Q_EMIT windowMessage(QStringLiteral("Every card is answered or running: edit a card or add one, then Run to have it join."),
                             Tone::Note);
        return false;
    }
    QVector<CardSettings> sent;
    if (!checkCards(wanted, board, &sent)) return false;
    Group* pack = nullptr;
    for (const auto& g : groups_)
        if (!g->done && g->lane == engine_) pack = g.get();
    QList<QuestionCard*> fresh;  // cards that start runs of their own (servers; the local model when idle)
    QVector<CardSettings> freshSent;
    int joined = 0;
    int waiting = 0;
    for (int i = 0; i < wanted.size(); ++i) {
        QuestionCard* card = wanted[i];
        const CardSettings& s = sent[i];
        const bool local = s.engine.isEmpty();
        if (const QString why = whyNotJoin(pack, s, board); !why.isEmpty()) {
            deferred_ << card;
            card->showMessage(QStringLiteral("Waits for the running pack to end: %1.").arg(why), Tone::Note);
            ++waiting;
            continue;
        }
        // A card still running from the last Run is stopped there; it starts again here.
        if (const Place old = placeOf(card); old.group) {
            old.group->lane->cancelCard(old.index);
            old.group->cards[old.index] = nullptr;
        }
        if (!local || !pack) {
            fresh << card;
            freshSent << s;
            continue;
        }
        Joining j;
        j.card = card;
        j.sent = s;
        j.previous = doc_->card(card->number())->answer;
        const quint64 tag = engine_->join(cardRequest(s, board));
        if (tag == 0) {  // the run ended on the UI thread's side already: the next run takes it
            deferred_ << card;
            ++waiting;
            continue;
        }
        pack->joining.insert(tag, j);
        doc_->startAnswer(card->number());
        card->setRunning(true);
        ++joined;
    }
    if (!fresh.isEmpty()) startCards(fresh, freshSent, board);
    const int started = joined + static_cast<int>(fresh.size());
    Q_EMIT statusMessage(waiting == 0 ? QStringLiteral("%1 card(s) joined the running pack").arg(started)
                                      : QStringLiteral("%1 card(s) joined the running pack, %2 wait for it to end")
                                            .arg(started)
                                            .arg(waiting));
    return started > 0 || waiting > 0;
}

QList<QuestionCard*> RunController::takeDeferred() {
    QList<QuestionCard*> cards;
    for (const QPointer<QuestionCard>& c : deferred_)
        if (c) cards << c;
    deferred_.clear();
    return cards;
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
    for (const auto& g : groups_) {
        if (g->done) continue;
        if (const int i = g->cards.indexOf(card); i >= 0) g->lane->cancelCard(i);
        for (Joining& j : g->joining)
            if (j.card == card) j.stopped = true;  // cancelled as soon as the run takes it
    }
    if (deferred_.removeAll(card) > 0) card->clearMessage();
}

void RunController::putBack(const Joining& j) {
    if (!j.card) return;  // removed meanwhile
    doc_->setAnswer(j.card->number(), j.previous);
    j.card->setRunning(false);
}

bool RunController::canJoin() const { return running() && kind_ == Kind::Pack; }

void RunController::onJoined(Group& g, const kev::JoinedCard& joined) {
    const auto it = g.joining.find(joined.tag);
    if (it == g.joining.end()) return;
    const Joining j = it.value();
    g.joining.erase(it);
    QuestionCard* card = j.card;
    if (joined.card < 0) {
        // Refused (too long for the context, a setting the run cannot take): the card keeps
        // the answer it had and says why.
        putBack(j);
        if (card) card->showMessage(QStringLiteral("Could not join the running pack: %1").arg(QString::fromStdString(joined.error)));
        return;
    }
    const int i = joined.card;
    if (i >= g.cards.size()) {
        g.cards.resize(i + 1);
        g.rowOfCard.resize(i + 1);
        g.sent.resize(i + 1);
        g.previous.resize(i + 1);
    }
    g.cards[i] = card;
    g.sent[i] = j.sent;
    g.previous[i] = j.previous;
    g.rowOfCard[i] = card ? card->number() - 1 : -1;
    if (j.stopped || !card) g.lane->cancelCard(i);
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
    // Cards that joined at this step first: their first tokens may be in this step.
    for (const kev::JoinedCard& j : event.joined) {
        onJoined(g, j);
        if (j.card >= 0 && j.card < g.cards.size() && g.cards[j.card])
            logPack(QStringLiteral("card %1 joined at step %2").arg(g.cards[j.card]->number()).arg(event.step));
    }
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
            if (local) logPack(QStringLiteral("card %1 left at step %2").arg(number).arg(event.step));
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
    if (local) {
        gauges_->setLiveCache(event.kv_bytes_in_use, event.prefix_cache_bytes);
        showStep(g, event);
    }
    if (event.rows == 0 && event.updates.empty()) return;  // only joins refused as the run ended
    if (local || !rates.isEmpty())
        gauges_->addStep(local && event.step >= kFirstSteadyStep ? event.aggregate_tokens_per_s : 0.0, rates);
    Q_EMIT answersChanged();
}

void RunController::logPack(const QString& line) {
    constexpr int kLines = 3;  // the latest entries and leaves, beside the step
    packLog_.push_back(line);
    while (packLog_.size() > kLines) packLog_.pop_front();
}

void RunController::showStep(Group& g, const kev::StepEvent& event) {
    for (const kev::CardUpdate& u : event.updates) {
        if (u.card < 0) continue;
        if (u.card >= g.reused.size()) g.reused.resize(u.card + 1);
        g.reused[u.card] = u.stats.reused_tokens;
    }
    int reading = 0;
    for (const Joining& j : g.joining) reading += j.card ? 1 : 0;
    QString line = QStringLiteral("step %1 · %2 rows").arg(event.step).arg(event.rows);
    if (event.prompt_rows > 0 && event.prompt_rows < event.rows)
        line += QStringLiteral(" (%1 of them prompt)").arg(event.prompt_rows);
    line += QStringLiteral(" · %1 answering").arg(event.active_cards);
    if (reading > 0) line += QStringLiteral(" · %1 waiting to join").arg(reading);
    for (const QString& l : packLog_) line += QStringLiteral(" · ") + l;
    packView_->setRunLine(line);
    packView_->setReused(event.shared_reused_tokens, g.reused);
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
    // Cards queued to join as the run ended wait for the next one, as do any the run
    // never reported.
    for (const Joining& j : g.joining) {
        putBack(j);
        if (j.card && !j.stopped) deferred_ << j.card;
    }
    g.joining.clear();
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
        for (const Joining& j : g.joining) putBack(j);
        g.joining.clear();
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
