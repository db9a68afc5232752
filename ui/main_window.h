// The main window: toolbar, the row of question cards, gauges and the pack view.
// The board lives in a BoardDocument; the cards are its views (created, moved, updated
// and removed as its signals say). The window wires widgets to the EngineHost and holds
// no engine logic of its own: requests are built from the document's plain values
// (board_request.h), answers come back as value types and are written into it.
#pragma once

#include <QHash>
#include <QList>
#include <QIcon>
#include <QMainWindow>
#include <QPointer>

#include <memory>

#include "board_history.h"
#include "card_state.h"
#include "engine_types.h"

class QAction;
class QComboBox;
class QDoubleSpinBox;
class QCheckBox;
class QHBoxLayout;
class QLabel;
class QMenu;
class QPlainTextEdit;
class QProgressBar;
class QPushButton;
class QScrollArea;
class QTimer;
class QToolButton;
class QUndoStack;

namespace kevremote {
class ConnectionStore;
}

namespace kevui {

class BoardDocument;
class BundleDialog;
class ConnectionDialog;
class ComparisonDialog;
class EngineHost;
class GaugePanel;
class PackView;
class QuestionCard;
class RunController;

class MainWindow : public QMainWindow {
    Q_OBJECT
public:
    // Opens `modelPath` on the worker thread. The workspace comes from $KEV_WORKSPACE,
    // else the application data folder.
    explicit MainWindow(const QString& modelPath, QWidget* parent = nullptr);
    ~MainWindow() override;

    // The model to open when none is given: the last one used, else the built-in one.
    static QString defaultModelPath();
    static QString workspacePath();

    QString modelPath() const { return modelPath_; }
    QString modelStatus() const;    // the line about the model (load errors land here)
    QString windowMessage() const;  // the window-wide message (run errors, workspace)
    EngineHost* engine() const { return engine_; }
    GaugePanel* gauges() const { return gauges_; }
    PackView* packView() const { return packView_; }

    QList<QuestionCard*> cards() const { return cards_; }
    QuestionCard* addCard(const CardState& state = {});
    QuestionCard* duplicateCard(QuestionCard* card);
    void removeCard(QuestionCard* card);
    void moveCard(QuestionCard* card, int delta);
    // Turns `card` into `n` variants side by side: over temperature (0 to 1.5, one
    // seed) or over seed (one temperature).
    enum class SweepOver { Temperature, Seed };
    void sweepCard(QuestionCard* card, int n, SweepOver over = SweepOver::Temperature);
    void setSharedContext(const QString& text);
    void setBoardSystem(const QString& text);  // the board's system prompt (empty: the template's)

    // Undo/redo of card edits, additions, removals, moves and board replacement (Edit
    // menu; off while a run is going).
    QUndoStack* undoStack() const { return undo_; }
    bool undo();
    bool redo();

    // Answers as Markdown (View menu) or raw text, on every card.
    void setRenderMarkdown(bool on);
    // The prompt of `card` as the model sees it (templated text and tokens), in a dialog
    // once the pack preview for it is ready.
    void showPrompt(QuestionCard* card);

    // Returns false (and says why, on the cards or in the window) when nothing started.
    bool runAll();
    // `card` alone, or joining the running pack (its own Run button).
    bool runCard(QuestionCard* card);
    // The card's question and answer become a turn of its conversation; the card then
    // takes the follow-up question (answered from the conversation so far).
    bool followUp(QuestionCard* card);
    bool replayCard(QuestionCard* card);
    void stop();
    bool isRunning() const;

    Workspace workspace() const;  // every card, those still being created included
    void saveWorkspaceNow();
    // Where autosave writes: the workspace path, or another file when the workspace
    // there could not be read nor moved aside (empty: autosave is off).
    QString autosavePath() const { return autosavePath_; }
    // A large workspace's card views are created a slice at a time from the event loop.
    bool loadingWorkspace() const;
    // The board itself; the cards() widgets are views of it.
    BoardDocument* document() const { return doc_; }
    // Replaces the board with the file's cards, after keeping the current board in a file
    // next to the workspace (refuses when it cannot be kept).
    bool loadQuestionSet(const QString& path);
    // Opens the board the last loadQuestionSet replaced (false when there is none).
    bool restorePreviousBoard();
    QString previousBoardFile() const { return previousBoard_; }
    bool saveQuestionSet(const QString& path);
    bool exportMarkdown(const QString& path);
    bool exportJson(const QString& path);
    bool exportCsv(const QString& path);
    // The board's answers as a reproducibility bundle (false, with a message, when they
    // cannot be one: no answers, answers from another model or precision, ...).
    bool exportBundle(const QString& path);
    // Opens a bundle read-only, in its own window with Replay all; the board is untouched.
    BundleDialog* openBundle(const QString& path);
    // The answers of the ticked cards aligned token by token (`numbers`: the cards to
    // tick; empty: every answered card). One window, kept up to date after each run.
    ComparisonDialog* compareAnswers(const QList<int>& numbers = {});
    void openModel(const QString& path);
    // LoRA: the adapter folder runs use (default: the demo adapter), and the mode the
    // last run applied it in ("merged", "per card"; empty when off).
    QString loraPath() const { return loraPath_; }
    void setLoraPath(const QString& dir);
    QString loraModeText() const;
    // Servers cards may target (Engine ▸ Connections…): kept in $KEV_CONFIG_DIR, else the
    // application's configuration folder; keys in a user-only file beside them.
    kevremote::ConnectionStore* connections() const { return connections_.get(); }
    ConnectionDialog* openConnections();
    // After the store changed: every card's Engine list follows it.
    void refreshEngineChoices();

Q_SIGNALS:
    void modelReady();
    void modelFailed(const QString& message);
    void runDone();  // after a run's results (or its failure) reached the cards
    void workspaceProgress(int done, int total);  // cards created of a workspace being loaded
    void workspaceLoaded();                       // every card of the workspace exists

protected:
    void closeEvent(QCloseEvent* event) override;

private:
    static QIcon kevIcon();
    void openModelFolder();
    void buildActions();
    void buildToolbar();
    void buildMenus();
    void buildCentral();
    void restoreSettings();
    void writeSettings();
    void restoreWorkspace();
    void setWorkspace(const Workspace& w);
    void continueLoading(int generation);
    void createPendingCards(int count);
    void showWorkspaceProgress();
    void renumberCards();  // positions only: numbers and colours stay
    // The views of doc_: created, removed and moved as its cards are.
    void onBoardReset();
    void onCardInserted(int at);
    void onCardRemoved(int number);
    void onCardMoved(int number, int to);
    void onPromptChanged();
    QuestionCard* createCardView(int at);
    QuestionCard* cardView(int number) const;
    void finishLoadingNow();  // every card's view created now
    void showWindowMessage(const QString& text, Tone tone);
    void showModelSummary(const QString& path);
    void showLoadedModelName();
    LoadSettings loadSettings() const;
    void reloadModel();
    void updateActions();
    void scheduleAutosave();
    void schedulePreview();
    void requestPreview();
    void prepareLora(bool forRun);  // attach the adapter if a card wants it; the toolbar default to the runs
    void rebuildRecentMenu();
    void rebuildExamplesMenu();
    void connectCard(QuestionCard* card);
    // Undo: records the change just made (before: the board as last recorded), or only
    // refreshes that record when the board asks the same as before.
    // `before`: the board just before the change, when it holds more than the record
    // (the answer of a card being removed).
    void record(const QString& what, int mergeKey = 0, BoardChange kind = BoardChange::Cards,
                const std::optional<Workspace>& before = std::nullopt);
    void recordEdit(int mergeKey);
    void applyBoard(const Workspace& target, BoardChange kind);
    void showDefaultSystem(const QString& text);
    // The precision menu's rows with what each holds for this model and a warning where
    // a precision is slow on this CPU; the memory gauge's note of what a change frees.
    void showPrecisionCosts(const ModelInfo& info);
    void openPromptDialog(QuestionCard* card, const PackPreview& pack);

    void onModelLoaded(const ModelInfo& info);
    void onLoadFailed(const QString& path, const QString& message);

    QString modelPath_;
    EngineHost* engine_ = nullptr;
    RunController* runs_ = nullptr;
    std::unique_ptr<kevremote::ConnectionStore> connections_;
    QPointer<ConnectionDialog> connectionDialog_;

    QAction* run_ = nullptr;
    QAction* stop_ = nullptr;
    QAction* addCardAction_ = nullptr;
    QAction* openModel_ = nullptr;
    QMenu* recentMenu_ = nullptr;
    QMenu* examplesMenu_ = nullptr;
    QLabel* modelLabel_ = nullptr;
    QComboBox* device_ = nullptr;
    QComboBox* precision_ = nullptr;
    QCheckBox* lora_ = nullptr;
    QDoubleSpinBox* loraScale_ = nullptr;
    QToolButton* loraPick_ = nullptr;
    QLabel* loraMode_ = nullptr;
    QString loraPath_;
    QString loraFailedPath_;  // the adapter folder that last failed to load, until another is chosen
    QProgressBar* loadProgress_ = nullptr;
    QToolButton* cancelLoad_ = nullptr;

    QLabel* modelStatus_ = nullptr;
    QLabel* message_ = nullptr;
    QToolButton* sharedToggle_ = nullptr;
    QPlainTextEdit* sharedContext_ = nullptr;
    QWidget* boardPrompt_ = nullptr;       // system prompt + shared context, shown by sharedToggle_
    QPlainTextEdit* boardSystem_ = nullptr;
    QScrollArea* cardScroll_ = nullptr;
    QWidget* cardRow_ = nullptr;
    QHBoxLayout* cardLayout_ = nullptr;
    QPushButton* addCardButton_ = nullptr;
    GaugePanel* gauges_ = nullptr;
    PackView* packView_ = nullptr;

    BoardDocument* doc_ = nullptr;
    // The card views, in the document's order: all of its cards, or while a large board
    // loads the first ones. loadGeneration_ tells a slice of an older load to stop.
    QList<QuestionCard*> cards_;
    int loadGeneration_ = 0;
    QLabel* workspaceProgress_ = nullptr;
    QString autosavePath_;
    QString previousBoard_;             // where the board replaced by the last open was kept
    QAction* restoreBoard_ = nullptr;
    QLabel* autosaveNote_ = nullptr;
    QTimer* autosave_ = nullptr;
    QTimer* preview_ = nullptr;

    bool restoring_ = false;
    bool applying_ = false;  // an undo or redo is changing the board: nothing is recorded
    bool updatingView_ = false;  // a card view is being set from the document
    QUndoStack* undo_ = nullptr;
    QAction* undoAction_ = nullptr;
    QAction* redoAction_ = nullptr;
    QAction* markdownAction_ = nullptr;
    Workspace recorded_;     // the board as of the last recorded change
    // Cards an undo or redo took off the board, as they were (answers included), so the
    // step that brings one back brings its answer too.
    QHash<int, CardState> takenOff_;
    PackPreview lastPreview_;
    QPointer<QuestionCard> promptCard_;  // waits for a preview to show its prompt
    QPointer<BundleDialog> replaying_;   // the bundle whose replay is running
    QPointer<ComparisonDialog> compare_;
    QAction* compareAction_ = nullptr;
};

}  // namespace kevui
