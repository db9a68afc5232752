// Runs the cards: builds a request from them, streams the engines' events back into
// them, and compares a solo replay with the packed run. MainWindow owns one and only
// forwards to it; the widgets it feeds never see the engine. Every group of cards goes
// to an EngineLane (the local model's, or one per server connection) and comes back as
// the same events: nothing below the lane choice knows which engine answered.
#pragma once

#include <QHash>
#include <QList>
#include <QObject>
#include <QPointer>
#include <QVector>

#include <memory>
#include <vector>

#include "board_request.h"
#include "card_state.h"
#include "engine_types.h"

namespace kevremote {
class ConnectionStore;
class MetricsPoller;
}  // namespace kevremote

namespace kevui {

class BoardDocument;
class EngineHost;
class EngineLane;
class GaugePanel;
class PackView;
class QuestionCard;

class RunController : public QObject {
    Q_OBJECT
public:
    // Answers are written into `board` (the cards show them from there); the cards passed
    // to runAll and replay are the views of the board's cards, for their messages and
    // running state.
    RunController(EngineHost* engine, BoardDocument* board, GaugePanel* gauges, PackView* packView,
                  QObject* parent = nullptr);
    ~RunController() override;
    // The saved connections cards may name as their engine (may be null: local only).
    void setConnections(const kevremote::ConnectionStore* store) { connections_ = store; }

    // Every local card in one pack, and every card whose engine is a saved connection as
    // one streaming request to that server, all at once. Returns false (with a message on each card at fault, or
    // windowMessage) when nothing started.
    // While a pack runs, the cards that are new or changed since they ran join it instead
    // (joinRun).
    bool runAll(const QList<QuestionCard*>& cards, const QString& sharedContext, const QString& system = {});
    // `card` alone: its own pack, or joining the running one (answered again even when
    // it is unchanged).
    bool runCard(QuestionCard* card, const QString& sharedContext, const QString& system = {});
    // Whether Run now adds cards to a running pack (a replay cannot be joined).
    bool canJoin() const;
    // Cards that could not join the pack that ran (another shared context, another LoRA
    // use, or they came as it ended): the window runs them next. Emptied by this call.
    QList<QuestionCard*> takeDeferred();
    // `card` alone, with the inputs, seed and length of its packed answer (the board's
    // system prompt and shared context for answers saved before inputs were recorded).
    bool replay(QuestionCard* card, const QString& sharedContext, const QString& system = {});
    // A request that belongs to no card (a bundle's replay): its result comes back as
    // requestFinished / requestFailed; the cards, gauges and pack view are left alone.
    bool runRequest(const kev::GenerationRequest& request);
    void stop();
    void stopCard(QuestionCard* card);  // also when the card is being removed
    bool running() const;
    // The toolbar's LoRA choice for cards that do not set their own.
    void setLoraDefault(bool on, double scale) { board_.loraOn = on, board_.loraScale = scale; }
    // The adapter folder LoRA cards use (recorded with their answers).
    void setAdapterPath(const QString& path) { board_.adapter = path; }
    // Top-K alternatives kept for every generated token (the comparison view).
    static constexpr int kTopAlternatives = 5;
    kev::LoraUse loraFor(const CardSettings& s) const;
    // The board's inputs as a run would send them (toolbar LoRA, adapter, and these).
    BoardInputs boardInputs(const QString& sharedContext, const QString& system) const {
        BoardInputs b = board_;
        b.sharedContext = sharedContext;
        b.system = system;
        return b;
    }
    // Why a card cannot run as it is (empty question, invalid setting); empty when it can.
    QString problemOf(const QuestionCard* card) const;
    // After an edit: once "Nothing ran" was said, the cards are checked again, so the
    // message and the edited card's mark follow the fixes.
    void recheck(const QList<QuestionCard*>& cards, QuestionCard* edited);

Q_SIGNALS:
    void windowMessage(const QString& text, kevui::Tone tone);
    void statusMessage(const QString& text);
    void answersChanged();  // text streamed in: time for an autosave
    void runDone();         // results (or the failure) reached the cards
    void loraMode(const QString& mode);  // how the run applies LoRA ("merged", "per card", "off")
    void requestFinished(const kev::GenerationResult& result);
    void requestFailed(const QString& message);

private:
    enum class Kind { Pack, Replay, Request };
    struct Joining {
        QPointer<QuestionCard> card;
        CardSettings sent;
        CardAnswer previous;           // put back if it is refused or the run fails
        bool stopped = false;          // its Stop was pressed before the run took it
    };
    // Cards sent to one lane in one run: request card i answers into cards[i] (a card
    // removed mid-run becomes null).
    struct Group {
        EngineLane* lane = nullptr;
        QString connection;            // empty: the local model
        RunId id = 0;
        QVector<QPointer<QuestionCard>> cards;
        QVector<int> rowOfCard;        // request card -> its place in the row (gauge colours)
        // The inputs as sent, recorded into each answer; and the answers the cards had
        // before, put back if the run fails (a run that fails destroys nothing).
        QVector<CardSettings> sent;
        QVector<CardAnswer> previous;
        QPointer<kevremote::MetricsPoller> poller;  // a server's own figures
        // Cards sent to join this group's running pack, by their join tag, until the run
        // takes them (StepEvent::joined) and they get their index.
        QHash<quint64, Joining> joining;
        QVector<qint64> reused;        // per request card: prompt tokens from the prefix cache
        bool done = false;
    };
    struct Place {
        Group* group = nullptr;
        int index = -1;
    };

    // Checks `cards` and gives the settings they are sent with; false (each problem on its
    // card, and said in the window) when any cannot run.
    bool checkCards(const QList<QuestionCard*>& cards, const BoardInputs& board, QVector<CardSettings>* sent);
    // Starts `cards` as one group per engine (the local pack, each server).
    void startCards(const QList<QuestionCard*>& cards, const QVector<CardSettings>& sent, const BoardInputs& board);
    bool joinRun(const QList<QuestionCard*>& cards, const BoardInputs& board, bool force);
    // Why a card with settings `s` cannot join `pack` (null: no local pack runs); empty
    // when it can.
    QString whyNotJoin(const Group* pack, const CardSettings& s, const BoardInputs& board) const;
    static bool sameRunInputs(const BoardInputs& a, const BoardInputs& b);
    Place placeOf(const QuestionCard* card) const;
    Group* joiningGroupOf(const QuestionCard* card) const;
    void onJoined(Group& g, const kev::JoinedCard& joined);
    // A join that did not happen (refused, the run ended or failed first): the card gets
    // back the answer it had and stops showing as running.
    void putBack(const Joining& j);
    // The pack view's line for the latest step, with the latest entries and leaves.
    void showStep(Group& g, const kev::StepEvent& event);
    void logPack(const QString& line);
    void watch(EngineLane* lane);
    Group* groupOf(const EngineLane* lane, RunId id);
    // The lane for `connection` (empty: the local model's); null with a message on `card`
    // when the connection is not saved here.
    EngineLane* laneFor(const QString& connection, QuestionCard* card);
    void startGroup(Group g, const kev::GenerationRequest& request);
    void onRunStarted(Group& g, const PackPreview& pack);
    void onStep(Group& g, const kev::StepEvent& event);
    void onRunFinished(Group& g, const kev::GenerationResult& result);
    void onRunFailed(Group& g, const QString& message);
    CardAnswer recordedAnswer(const Group& g, int i, const kev::CardResult& r) const;
    void showReplayVerdict(const Group& g, const kev::CardResult& solo);
    void maybeEnd();
    void endRun();

    EngineHost* engine_;
    BoardDocument* doc_;
    GaugePanel* gauges_;
    PackView* packView_;
    Kind kind_ = Kind::Pack;
    BoardInputs sentBoard_;
    std::vector<std::unique_ptr<Group>> groups_;  // this run's (stable addresses for the lanes' events)
    const kevremote::ConnectionStore* connections_ = nullptr;
    bool problemsShown_ = false;  // the window says "Nothing ran: N card(s) need attention"
    BoardInputs board_;  // the toolbar's LoRA choice and adapter
    QList<QPointer<QuestionCard>> deferred_;
    QStringList packLog_;  // cards entering and leaving the running pack, latest last
};

}  // namespace kevui
