#include "main_window.h"

#include <QAction>
#include <algorithm>
#include <cmath>
#include <QCheckBox>
#include <QCloseEvent>
#include <QDateTime>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QElapsedTimer>
#include <QDir>
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QInputDialog>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLabel>
#include <QLocale>
#include <QMenu>
#include <QPlainTextEdit>
#include <QPointer>
#include <QProgressBar>
#include <QPushButton>
#include <QSaveFile>
#include <QScrollArea>
#include <QSettings>
#include <QStandardPaths>
#include <QStatusBar>
#include <QSet>
#include <QTimer>
#include <QUndoStack>
#include <QToolButton>

#include "engine_worker.h"
#include "board_bundle.h"
#include "board_document.h"
#include "board_export.h"
#include "bundle_view.h"
#include "comparison_view.h"
#include "connection_dialog.h"
#include "connections.h"
#include "board_request.h"
#include "gauge_panel.h"
#include "kev/engine_info.h"
#include "kev/error.h"
#include "kev/weights.h"
#include "main_window_keys.h"
#include "model_summary.h"
#include "pack_view.h"
#include "precision_costs.h"
#include "prompt_dialog.h"
#include "question_card.h"
#include "run_controller.h"

namespace kevui {

using namespace window;

namespace {

constexpr int kAutosaveMs = 700;
constexpr int kPreviewMs = 400;
// A workspace's first cards are created at once (a small one appears whole with the
// window); the rest in slices of about kLoadSliceMs between which the event loop runs.
constexpr int kFirstCards = 24;
constexpr int kLoadSliceMs = 25;

QVector<CardState> firstRunCards() {
    QVector<CardState> cards;
    const double temps[] = {0.0, 0.7, 1.2};
    const QString questions[] = {QStringLiteral("What is the capital of France?"),
                                 QStringLiteral("Write a haiku about the sea."),
                                 QStringLiteral("Explain in two sentences why the sky is blue.")};
    for (int i = 0; i < 3; ++i) {
        CardState c;
        c.settings.question = questions[i];
        c.settings.temperature = temps[i];
        cards.push_back(c);
    }
    return cards;
}

}  // namespace

QString MainWindow::defaultModelPath() {
    const QString last = QSettings().value(QLatin1String(kSettingLastModel)).toString();
    if (!last.isEmpty() && QFileInfo::exists(last)) return last;
    return QString::fromStdString(kev::builtin_model_path());
}

QString MainWindow::workspacePath() {
    const QString env = qEnvironmentVariable("KEV_WORKSPACE");
    if (!env.isEmpty()) return env;
    const QString dir = QStandardPaths::writableLocation(QStandardPaths::AppDataLocation);
    QDir().mkpath(dir);
    return dir + QStringLiteral("/workspace.json");
}

MainWindow::MainWindow(const QString& modelPath, QWidget* parent)
    : QMainWindow(parent), modelPath_(modelPath) {
    setWindowTitle(QStringLiteral("Kev"));
    setObjectName(QStringLiteral("kevMainWindow"));
    setWindowIcon(kevIcon());
    resize(1280, 820);

    engine_ = new EngineHost(this);
    connect(engine_, &EngineHost::modelLoaded, this, &MainWindow::onModelLoaded);
    connect(engine_, &EngineHost::loadFailed, this, &MainWindow::onLoadFailed);
    connect(engine_, &EngineHost::loadProgress, this, [this](int done, int total) {
        loadProgress_->setRange(0, std::max(1, total));
        loadProgress_->setValue(done);
    });
    connect(engine_, &EngineHost::previewReady, this, [this](const PackPreview& p) {
        packView_->setPreview(p);
        lastPreview_ = p;
        if (QuestionCard* card = promptCard_) openPromptDialog(card, p);
        promptCard_.clear();
    });
    connect(engine_, &EngineHost::previewFailed, this, [this](const QString& m) {
        packView_->setMessage(m);
        if (QuestionCard* card = promptCard_) card->showMessage(QStringLiteral("No prompt to show: %1").arg(m));
        promptCard_.clear();
    });
    connect(engine_, &EngineHost::runStarted, this, [this](RunId, const PackPreview& p) { lastPreview_ = p; });

    autosave_ = new QTimer(this);
    autosave_->setSingleShot(true);
    autosave_->setInterval(kAutosaveMs);
    connect(autosave_, &QTimer::timeout, this, &MainWindow::saveWorkspaceNow);
    preview_ = new QTimer(this);
    preview_->setSingleShot(true);
    preview_->setInterval(kPreviewMs);
    connect(preview_, &QTimer::timeout, this, &MainWindow::requestPreview);

    doc_ = new BoardDocument(this);
    undo_ = new QUndoStack(this);
    undo_->setUndoLimit(200);
    connect(undo_, &QUndoStack::indexChanged, this, [this] { updateActions(); });
    buildActions();
    buildToolbar();
    buildMenus();
    buildCentral();
    runs_ = new RunController(engine_, doc_, gauges_, packView_, this);
    {
        QString dir = qEnvironmentVariable("KEV_CONFIG_DIR");
        if (dir.isEmpty()) dir = QStandardPaths::writableLocation(QStandardPaths::AppConfigLocation);
        connections_ = std::make_unique<kevremote::ConnectionStore>(dir);
        QString error;
        if (!connections_->load(&error))
            QTimer::singleShot(0, this, [this, error] {
                showWindowMessage(QStringLiteral("Server connections not read: %1").arg(error), Tone::Error);
            });
        runs_->setConnections(connections_.get());
    }
    // The card widgets are views of the document.
    connect(doc_, &BoardDocument::wasReset, this, &MainWindow::onBoardReset);
    connect(doc_, &BoardDocument::cardInserted, this, &MainWindow::onCardInserted);
    connect(doc_, &BoardDocument::cardRemoved, this, &MainWindow::onCardRemoved);
    connect(doc_, &BoardDocument::cardMoved, this, &MainWindow::onCardMoved);
    connect(doc_, &BoardDocument::promptChanged, this, &MainWindow::onPromptChanged);
    connect(doc_, &BoardDocument::settingsChanged, this, [this](int number) {
        QuestionCard* card = cardView(number);
        const CardState* c = doc_->card(number);
        if (!card || !c || card->settings() == c->settings) return;  // the view's own edit
        const CardSettings wanted = c->settings;
        updatingView_ = true;  // the view's field-by-field update is not an edit of its own
        card->setSettings(wanted);
        updatingView_ = false;
        schedulePreview();
    });
    connect(doc_, &BoardDocument::answerStarted, this, [this](int number) {
        if (QuestionCard* card = cardView(number)) card->startAnswer();
    });
    connect(doc_, &BoardDocument::answerAppended, this, [this](int number, const QString& delta) {
        if (QuestionCard* card = cardView(number)) card->appendAnswer(delta);
    });
    connect(doc_, &BoardDocument::progressChanged, this, [this](int number) {
        const CardState* c = doc_->card(number);
        if (QuestionCard* card = cardView(number); card && c)
            card->setProgress(c->answer.generatedTokens, c->answer.tokensPerS, c->answer.timeToFirstTokenS);
    });
    connect(doc_, &BoardDocument::answerChanged, this, [this](int number) {
        const CardState* c = doc_->card(number);
        if (QuestionCard* card = cardView(number); card && c) card->finishAnswer(c->answer);
    });
    connect(doc_, &BoardDocument::changed, this, &MainWindow::scheduleAutosave);
    connect(runs_, &RunController::windowMessage, this, &MainWindow::showWindowMessage);
    connect(runs_, &RunController::statusMessage, this, [this](const QString& m) { statusBar()->showMessage(m); });
    connect(runs_, &RunController::answersChanged, this, &MainWindow::scheduleAutosave);
    connect(runs_, &RunController::loraMode, this, [this](const QString& mode) {
        loraMode_->setText(mode == QLatin1String("off") ? QString() : QStringLiteral("LoRA: %1").arg(mode));
    });
    connect(engine_, &EngineHost::loraFailed, this, [this](const QString& path, const QString& message) {
        loraFailedPath_ = path;
        showWindowMessage(QStringLiteral("LoRA adapter %1 cannot be used: %2").arg(path, message), Tone::Error);
    });
    connect(runs_, &RunController::requestFinished, this, [this](const kev::GenerationResult& result) {
        if (replaying_) replaying_->showReplay(result);
        replaying_.clear();
    });
    connect(runs_, &RunController::requestFailed, this, [this](const QString& message) {
        if (replaying_) replaying_->showReplayFailed(message);
        replaying_.clear();
    });
    connect(runs_, &RunController::runDone, this, [this] {
        recorded_ = workspace();  // answers are not undo steps; the record follows them
        if (compare_) compare_->setCards(recorded_.cards);
        saveWorkspaceNow();
        updateActions();
        schedulePreview();
        Q_EMIT runDone();
        // Cards that could not join the pack that ended run now, together.
        if (const QList<QuestionCard*> waiting = runs_->takeDeferred(); !waiting.isEmpty()) {
            prepareLora(/*forRun=*/true);
            runs_->runAll(waiting, sharedContext_->toPlainText(), boardSystem_->toPlainText());
            updateActions();
        }
    });
    restoreSettings();
    // Saved as they change, not only on a clean quit: after a crash the app comes back
    // with the precision and adapter the user chose.
    const auto saveSettings = [this] {
        if (!restoring_) writeSettings();
    };
    connect(precision_, qOverload<int>(&QComboBox::currentIndexChanged), this, saveSettings);
    connect(device_, qOverload<int>(&QComboBox::currentIndexChanged), this, saveSettings);
    connect(lora_, &QCheckBox::toggled, this, saveSettings);
    connect(loraScale_, qOverload<double>(&QDoubleSpinBox::valueChanged), this, saveSettings);
    restoreWorkspace();

    const kev::EngineInfo info = kev::engine_info();
    statusBar()->showMessage(QStringLiteral("libtorch %1 · CPU %2 · %3 threads%4")
                                 .arg(QString::fromStdString(info.torch_version),
                                      QString::fromStdString(info.cpu_capability))
                                 .arg(info.cpu_threads)
                                 .arg(info.cuda_available ? QStringLiteral(" · CUDA") : QString()));
    openModel(modelPath_);
    updateActions();
}

MainWindow::~MainWindow() {
    if (autosave_->isActive()) saveWorkspaceNow();
    writeSettings();
}

// ---- Settings and workspace ----------------------------------------------------------

void MainWindow::restoreSettings() {
    QSettings s;
    restoring_ = true;
    restoreGeometry(s.value(QLatin1String(kSettingGeometry)).toByteArray());
    restoreState(s.value(QLatin1String(kSettingState)).toByteArray());
    // A settings file edited by hand (or by another version) may hold anything: what
    // cannot be used is named in the window and replaced by the default.
    QStringList ignored;
    bool ok = false;
    const QVariant precisionValue = s.value(QLatin1String(kSettingPrecision), kPrecisionAuto);
    const int precision = precisionValue.toInt(&ok);
    markdownAction_->setChecked(s.value(QLatin1String(kSettingMarkdown), true).toBool());
    if (ok && precision >= kPrecision4Bit && precision <= kPrecisionAuto) precision_->setCurrentIndex(precision);
    else ignored << QStringLiteral("%1 = %2 is not a precision row 0 to 3 (using auto)")
                        .arg(QLatin1String(kSettingPrecision), precisionValue.toString());
    const int device = s.value(QLatin1String(kSettingDevice), 0).toInt();
    if (device == 1 && kev::engine_info().cuda_available) device_->setCurrentIndex(1);
    // A remembered adapter folder that is gone (moved, deleted) falls back to the demo.
    const QString demo = QString::fromStdString(kev::demo_adapter_path());
    const QString saved = s.value(QLatin1String(kSettingLoraPath), demo).toString();
    setLoraPath(QFileInfo(saved).isDir() ? saved : demo);
    lora_->setChecked(s.value(QLatin1String(kSettingLoraOn), false).toBool());
    const QVariant scaleValue = s.value(QLatin1String(kSettingLoraScale), 1.0);
    const double scale = scaleValue.toDouble(&ok);
    if (ok && std::isfinite(scale) && scale >= loraScale_->minimum() && scale <= loraScale_->maximum()) {
        loraScale_->setValue(scale);
    } else {
        loraScale_->setValue(1.0);
        ignored << QStringLiteral("%1 = %2 is not a number from %3 to %4 (using 1)")
                       .arg(QLatin1String(kSettingLoraScale), scaleValue.toString())
                       .arg(loraScale_->minimum())
                       .arg(loraScale_->maximum());
    }
    // A folder that is not an adapter is reported when the adapter is loaded.
    if (saved != demo && !QFileInfo(saved).isDir()) {
        ignored << QStringLiteral("%1 = %2 is not a folder (using the demo adapter)").arg(QLatin1String(kSettingLoraPath), saved);
    }
    if (!ignored.isEmpty())
        showWindowMessage(QStringLiteral("Settings in %1 were ignored: %2.").arg(s.fileName(), ignored.join(QStringLiteral("; "))),
                          Tone::Error);
    restoring_ = false;
}

void MainWindow::writeSettings() {
    QSettings s;
    s.setValue(QLatin1String(kSettingGeometry), saveGeometry());
    s.setValue(QLatin1String(kSettingState), saveState());
    s.setValue(QLatin1String(kSettingPrecision), precision_->currentIndex());
    s.setValue(QLatin1String(kSettingDevice), device_->currentIndex());
    s.setValue(QLatin1String(kSettingLoraPath), loraPath_);
    s.setValue(QLatin1String(kSettingLoraOn), lora_->isChecked());
    s.setValue(QLatin1String(kSettingLoraScale), loraScale_->value());
    s.setValue(QLatin1String(kSettingMarkdown), markdownAction_->isChecked());
}

void MainWindow::setLoraPath(const QString& dir) {
    loraPath_ = dir;
    loraFailedPath_.clear();
    loraPick_->setToolTip(QStringLiteral("LoRA adapter: %1\nClick to choose another PEFT adapter folder").arg(dir));
    if (!restoring_) writeSettings();
}

QString MainWindow::loraModeText() const { return loraMode_->text(); }

void MainWindow::restoreWorkspace() {
    const QString path = workspacePath();
    const LoadedWorkspace loaded = loadWorkspace(path);
    autosavePath_ = path;
    QString message = loaded.error;
    if (loaded.keptInPlace) {
        // The unreadable file is still at `path`: saving there would destroy it.
        autosavePath_ = freeSiblingName(path, QStringLiteral("unsaved"), QDateTime::currentDateTime());
        const QString note = autosavePath_.isEmpty()
                                 ? QStringLiteral("Autosave is off: the workspace file %1 is unreadable and was not "
                                                  "replaced. Save your cards with File ▸ Save question set.").arg(path)
                                 : QStringLiteral("Autosave writes to %1: the workspace file %2 is unreadable and was "
                                                  "not replaced.").arg(autosavePath_, path);
        message += QStringLiteral(". ") + note;
        autosaveNote_->setText(autosavePath_.isEmpty() ? QStringLiteral("Autosave off")
                                                       : QStringLiteral("Autosave: %1").arg(QFileInfo(autosavePath_).fileName()));
        autosaveNote_->setToolTip(note);
        autosaveNote_->setVisible(true);
    }
    if (!message.isEmpty()) showWindowMessage(message, Tone::Error);
    Workspace w;
    if (loaded.workspace && !loaded.workspace->cards.isEmpty()) {
        w = *loaded.workspace;
    } else {
        w.cards = firstRunCards();
    }
    setWorkspace(w);
}

void MainWindow::setWorkspace(const Workspace& w) {
    doc_->reset(w);  // the views follow (onBoardReset)
    recorded_ = workspace();
    if (!loadingWorkspace()) Q_EMIT workspaceLoaded();
}

// ---- The board's views ---------------------------------------------------------------
// The cards are views of doc_: these follow its signals. While a large board loads, the
// card widgets are a prefix of the document's cards, created a slice at a time.

void MainWindow::onBoardReset() {
    restoring_ = true;
    for (QuestionCard* c : cards_) {
        c->hide();
        c->deleteLater();
    }
    cards_.clear();
    ++loadGeneration_;
    const Workspace& w = doc_->board();
    if (sharedContext_->toPlainText() != w.sharedContext) sharedContext_->setPlainText(w.sharedContext);
    if (boardSystem_->toPlainText() != w.system) boardSystem_->setPlainText(w.system);
    if (!w.sharedContext.isEmpty() || !w.system.isEmpty()) sharedToggle_->setChecked(true);
    createPendingCards(kFirstCards);
    restoring_ = false;
    if (loadingWorkspace()) {
        showWorkspaceProgress();
        QTimer::singleShot(0, this, [this, g = loadGeneration_] { continueLoading(g); });
    }
    scheduleAutosave();
    schedulePreview();
}

QuestionCard* MainWindow::createCardView(int at) {
    const CardState& state = doc_->cards()[at];
    auto* card = new QuestionCard(cardRow_);
    card->setEngineChoices(connections_ ? connections_->names() : QStringList());
    card->setState(state);
    card->setNumber(state.number, state.from);
    connectCard(card);
    cards_.insert(at, card);
    cardLayout_->insertWidget(at, card);  // cards come first in the row layout, in order
    renumberCards();
    return card;
}

QuestionCard* MainWindow::cardView(int number) const {
    for (QuestionCard* c : cards_)
        if (c->number() == number) return c;
    return nullptr;
}

void MainWindow::onCardInserted(int at) {
    // While loading, a card past the created prefix gets its view with the others.
    const bool wasLoading = cards_.size() < doc_->size() - 1;
    if (at > cards_.size() || (wasLoading && at == cards_.size())) return;
    createCardView(at);
}

void MainWindow::onCardRemoved(int number) {
    QuestionCard* card = cardView(number);
    if (!card) return;
    runs_->stopCard(card);
    cards_.removeOne(card);
    cardLayout_->removeWidget(card);
    card->hide();
    card->deleteLater();  // it may be the sender of the click that removes it
    renumberCards();
}

void MainWindow::onCardMoved(int number, int to) {
    QuestionCard* card = cardView(number);
    if (!card || to >= cards_.size()) return;
    cards_.move(cards_.indexOf(card), to);
    cardLayout_->removeWidget(card);
    cardLayout_->insertWidget(to, card);
    renumberCards();
}

void MainWindow::createPendingCards(int count) {
    for (int i = 0; i < count && loadingWorkspace(); ++i) createCardView(static_cast<int>(cards_.size()));
}

void MainWindow::continueLoading(int generation) {
    if (generation != loadGeneration_ || !loadingWorkspace()) return;
    QElapsedTimer slice;
    slice.start();
    restoring_ = true;
    while (loadingWorkspace() && slice.elapsed() < kLoadSliceMs) createPendingCards(1);
    restoring_ = false;
    showWorkspaceProgress();
    if (loadingWorkspace()) {
        QTimer::singleShot(0, this, [this, generation] { continueLoading(generation); });
        return;
    }
    updateActions();
    schedulePreview();
    Q_EMIT workspaceLoaded();
}

void MainWindow::finishLoadingNow() {
    restoring_ = true;
    while (loadingWorkspace()) createPendingCards(1);
    restoring_ = false;
    showWorkspaceProgress();
}

void MainWindow::showWorkspaceProgress() {
    const int total = doc_->size();
    const int done = static_cast<int>(cards_.size());
    workspaceProgress_->setText(QStringLiteral("Loading workspace: %1 / %2 cards").arg(done).arg(total));
    workspaceProgress_->setVisible(loadingWorkspace());
    Q_EMIT workspaceProgress(done, total);
}

bool MainWindow::loadingWorkspace() const { return cards_.size() < doc_->size(); }

Workspace MainWindow::workspace() const {
    Workspace w = doc_->board();
    w.model = engine_->hasModel() ? engine_->model().path : modelPath_;
    return w;
}

void MainWindow::saveWorkspaceNow() {
    autosave_->stop();
    if (autosavePath_.isEmpty()) {
        statusBar()->showMessage(autosaveNote_->toolTip());
        return;
    }
    QString error;
    if (!saveWorkspace(autosavePath_, workspace(), WithAnswers::Yes, &error))
        showWindowMessage(QStringLiteral("Autosave failed: %1").arg(error), Tone::Error);
}

void MainWindow::scheduleAutosave() {
    // Not restarted by every change: while answers stream, a save still happens at least
    // every kAutosaveMs, so a killed process loses at most that much.
    if (!restoring_ && !autosave_->isActive()) autosave_->start();
}

bool MainWindow::loadQuestionSet(const QString& path) {
    QString error;
    const std::optional<QByteArray> bytes = readWorkspaceBytes(path, &error);
    if (!bytes) {
        showWindowMessage(QStringLiteral("Cannot open the question set %1: %2").arg(path, error), Tone::Error);
        return false;
    }
    const std::optional<Workspace> w = workspaceFromJson(*bytes, &error);
    if (!w || w->cards.isEmpty()) {
        showWindowMessage(QStringLiteral("%1 is not a usable question set: %2")
                              .arg(path, w ? QStringLiteral("it has no cards") : error), Tone::Error);
        return false;
    }
    // The board being replaced is kept whole first (cards, answers, what they ran with),
    // and File ▸ Restore the board before Open brings it back. If it cannot be kept,
    // nothing is replaced.
    const Workspace current = workspace();
    const bool worthKeeping = std::any_of(current.cards.begin(), current.cards.end(), [](const CardState& c) {
        return !c.settings.question.trimmed().isEmpty() || !c.answer.text.isEmpty();
    });
    QString kept;
    if (worthKeeping) {
        const QString base = autosavePath_.isEmpty() ? workspacePath() : autosavePath_;
        kept = freeSiblingName(base, QStringLiteral("before-open"), QDateTime::currentDateTime());
        QString why = QStringLiteral("no free name next to %1").arg(base);
        if (kept.isEmpty() || !saveWorkspace(kept, current, WithAnswers::Yes, &why)) {
            showWindowMessage(QStringLiteral("Did not open %1: the current board could not be kept first (%2)").arg(path, why),
                              Tone::Error);
            return false;
        }
        previousBoard_ = kept;
        restoreBoard_->setEnabled(true);
    }
    if (isRunning()) stop();
    setWorkspace(*w);
    if (!applying_)
        undo_->push(new BoardCommand([this](const Workspace& b, BoardChange k) { applyBoard(b, k); }, current,
                                     workspace(), BoardChange::Replace,
                                     QStringLiteral("Open %1").arg(QFileInfo(path).fileName())));
    QString message = QStringLiteral("Loaded %1 questions from %2").arg(w->cards.size()).arg(QFileInfo(path).fileName());
    if (!kept.isEmpty())
        message += QStringLiteral(". The previous board was kept as %1 (File ▸ Restore the board before Open).")
                       .arg(QFileInfo(kept).fileName());
    showWindowMessage(message, Tone::Note);
    return true;
}

bool MainWindow::restorePreviousBoard() {
    if (previousBoard_.isEmpty()) return false;
    const QString from = previousBoard_;
    // Opening it keeps the board it replaces in turn, so Restore can be undone the same way.
    if (!loadQuestionSet(from)) return false;
    showWindowMessage(QStringLiteral("Restored the board kept in %1; the one it replaced is in %2.")
                          .arg(QFileInfo(from).fileName(), QFileInfo(previousBoard_).fileName()),
                      Tone::Note);
    return true;
}

bool MainWindow::saveQuestionSet(const QString& path) {
    QString error;
    if (!saveWorkspace(path, workspace(), WithAnswers::No, &error)) {
        showWindowMessage(error, Tone::Error);
        return false;
    }
    return true;
}

bool MainWindow::exportMarkdown(const QString& path) {
    QSaveFile file(path);
    if (file.open(QIODevice::WriteOnly)) {
        file.write(answersMarkdown(workspace()).toUtf8());
        if (file.commit()) return true;
    }
    showWindowMessage(QStringLiteral("Cannot write %1: %2").arg(path, file.errorString()), Tone::Error);
    return false;
}

bool MainWindow::exportCsv(const QString& path) {
    QSaveFile file(path);
    if (file.open(QIODevice::WriteOnly)) {
        file.write(answersCsv(workspace()).toUtf8());
        if (file.commit()) return true;
    }
    showWindowMessage(QStringLiteral("Cannot write %1: %2").arg(path, file.errorString()), Tone::Error);
    return false;
}

bool MainWindow::exportBundle(const QString& path) {
    if (!engine_->hasModel()) {
        showWindowMessage(QStringLiteral("No bundle written: no model is loaded."), Tone::Error);
        return false;
    }
    const BoardBundle made = bundleFromBoard(workspace(), engine_->model(), kev::iso8601_utc_now());
    if (!made.bundle) {
        showWindowMessage(QStringLiteral("No bundle written: %1.").arg(made.why), Tone::Error);
        return false;
    }
    try {
        kev::write_bundle(*made.bundle, path.toStdString());
    } catch (const std::exception& e) {
        showWindowMessage(QStringLiteral("No bundle written: %1").arg(QString::fromStdString(e.what())), Tone::Error);
        return false;
    }
    QString note = QStringLiteral("Wrote a bundle of %1 cards to %2").arg(made.bundle->cards.size()).arg(path);
    if (!made.skipped.isEmpty()) note += QStringLiteral(" (left out: %1)").arg(made.skipped.join(QStringLiteral(", ")));
    showWindowMessage(note, Tone::Note);
    return true;
}

ComparisonDialog* MainWindow::compareAnswers(const QList<int>& numbers) {
    if (!compare_) {
        compare_ = new ComparisonDialog(workspace().cards, this);
        compare_->setAttribute(Qt::WA_DeleteOnClose);
    } else {
        compare_->setCards(workspace().cards);
    }
    if (!numbers.isEmpty()) compare_->selectCards(numbers);
    compare_->show();
    compare_->raise();
    return compare_;
}

BundleDialog* MainWindow::openBundle(const QString& path) {
    kev::Bundle bundle;
    try {
        bundle = kev::read_bundle(path.toStdString());
    } catch (const std::exception& e) {
        showWindowMessage(QStringLiteral("Cannot open the bundle: %1").arg(QString::fromStdString(e.what())), Tone::Error);
        return nullptr;
    }
    auto* dialog = new BundleDialog(bundle, path, this);
    dialog->setAttribute(Qt::WA_DeleteOnClose);
    dialog->setLoadedModel(engine_->hasModel() ? &engine_->model() : nullptr);
    const auto follow = [this, dialog = QPointer<BundleDialog>(dialog)] {
        if (dialog) dialog->setLoadedModel(engine_->hasModel() ? &engine_->model() : nullptr);
    };
    connect(engine_, &EngineHost::modelLoaded, dialog, follow);
    connect(engine_, &EngineHost::modelHashed, dialog, follow);
    connect(dialog, &BundleDialog::replayRequested, this, [this, dialog] {
        if (isRunning()) {
            dialog->showReplayFailed(QStringLiteral("a run is going; replay when it has finished"));
            return;
        }
        const kev::BundleReplay inputs = kev::replay_inputs(dialog->bundle());
        if (inputs.adapter) engine_->setLora(QString::fromStdString(*inputs.adapter));
        kev::GenerationRequest request = inputs.request;
        replaying_ = dialog;
        dialog->setReplaying(true);
        if (!runs_->runRequest(request)) {
            replaying_.clear();
            dialog->showReplayFailed(QStringLiteral("no model is loaded"));
        }
        updateActions();
    });
    dialog->show();
    return dialog;
}

bool MainWindow::exportJson(const QString& path) {
    QJsonObject o = toJson(workspace(), WithAnswers::Yes);
    if (engine_->hasModel()) {
        const ModelInfo& m = engine_->model();
        o[QStringLiteral("model_info")] = QJsonObject{
            {QStringLiteral("path"), m.path},
            {QStringLiteral("architecture"), m.architecture},
            {QStringLiteral("device"), QString::fromLatin1(kev::to_string(m.device))},
            {QStringLiteral("dtype"), QString::fromLatin1(kev::to_string(m.dtype))},
            {QStringLiteral("weight_bytes"), m.weightBytes},
            {QStringLiteral("parameters"), m.parameters}};
    }
    QSaveFile file(path);
    if (file.open(QIODevice::WriteOnly)) {
        file.write(QJsonDocument(o).toJson(QJsonDocument::Indented));
        if (file.commit()) return true;
    }
    showWindowMessage(QStringLiteral("Cannot write %1: %2").arg(path, file.errorString()), Tone::Error);
    return false;
}

// ---- Cards ---------------------------------------------------------------------------

void MainWindow::connectCard(QuestionCard* card) {
    card->setRenderMarkdown(markdownAction_->isChecked());
    connect(card, &QuestionCard::changed, this, [this, card] {
        if (updatingView_) return;
        // The view reports the user's edit into the document.
        doc_->setSettings(card->number(), card->settings());
        schedulePreview();
        if (!restoring_ && !applying_) {
            runs_->recheck(cards_, card);
            recordEdit(card->number());
            // Its answer no longer belongs to the card: that card stops, the others go on.
            if (card->isRunning()) {
                runs_->stopCard(card);
                card->showMessage(QStringLiteral("Stopped: edited while it ran. Run answers it again (it joins the pack)."),
                                  Tone::Note);
            }
        }
    });
    connect(card, &QuestionCard::runRequested, this, [this, card] { runCard(card); });
    connect(card, &QuestionCard::followUpRequested, this, [this, card] { followUp(card); });
    connect(card, &QuestionCard::promptRequested, this, [this, card] { showPrompt(card); });
    connect(card, &QuestionCard::duplicateRequested, this, [this, card] { duplicateCard(card); });
    connect(card, &QuestionCard::removeRequested, this, [this, card] { removeCard(card); });
    connect(card, &QuestionCard::moveRequested, this, [this, card](int delta) { moveCard(card, delta); });
    connect(card, &QuestionCard::replayRequested, this, [this, card] { replayCard(card); });
    connect(card, &QuestionCard::sweepRequested, this, [this, card] {
        const QStringList kinds{QStringLiteral("Temperature (0 to 1.5, one seed)"),
                                QStringLiteral("Seed (same temperature)")};
        bool ok = false;
        const QString kind = QInputDialog::getItem(this, QStringLiteral("Sweep"), QStringLiteral("Vary:"), kinds, 0, false, &ok);
        if (!ok) return;
        const int n = QInputDialog::getInt(this, QStringLiteral("Sweep"), QStringLiteral("Variants, side by side in one pack:"),
                                           4, 2, 8, 1, &ok);
        if (ok) sweepCard(card, n, kind == kinds[0] ? SweepOver::Temperature : SweepOver::Seed);
    });
    connect(card, &QuestionCard::stopRequested, this, [this, card] { runs_->stopCard(card); });
}

QuestionCard* MainWindow::addCard(const CardState& state) {
    finishLoadingNow();  // a new card goes after every card of the board
    const int number = doc_->insertCard(doc_->size(), state);
    QuestionCard* card = cardView(number);
    if (!restoring_ && !applying_) {
        record(QStringLiteral("Add card %1").arg(number));
        card->questionEdit()->setFocus();
        QTimer::singleShot(0, this, [this, card = QPointer<QuestionCard>(card)] {
            if (card) cardScroll_->ensureWidgetVisible(card);
        });
    }
    return card;
}

QuestionCard* MainWindow::duplicateCard(QuestionCard* card) {
    const CardState* source = doc_->card(card->number());
    if (!source) return nullptr;
    CardState state;
    state.settings = source->settings;
    state.from = source->number;
    // The side-by-side use: the same question at another temperature.
    state.settings.temperature = state.settings.temperature + 0.3 <= 2.0 ? state.settings.temperature + 0.3 : 0.0;
    const int number = doc_->insertCard(doc_->indexOf(source->number) + 1, state);
    record(QStringLiteral("Duplicate card %1").arg(card->number()));
    return cardView(number);
}

bool MainWindow::followUp(QuestionCard* card) {
    const CardState* c = doc_->card(card->number());
    if (!c || card->isRunning() || c->answer.text.isEmpty()) return false;
    // The question and the answer it got become the conversation so far; the card waits
    // for the next question. The turn keeps the answer's text (Undo puts the question back
    // in the card without its answer: Run answers it again).
    const int number = card->number();
    CardSettings s = c->settings;
    s.history.push_back({s.question, c->answer.text});
    s.question.clear();
    doc_->setSettings(number, s);
    doc_->setAnswer(number, CardAnswer{});
    record(QStringLiteral("Follow up on card %1").arg(number));
    card->questionEdit()->setFocus();
    schedulePreview();
    return true;
}

void MainWindow::removeCard(QuestionCard* card) {
    const int number = card->number();
    if (doc_->indexOf(number) < 0) return;
    const Workspace before = workspace();  // with the card's answer, for undo
    doc_->takeCard(number);
    record(QStringLiteral("Remove card %1").arg(number), 0, BoardChange::Cards, before);
}

void MainWindow::moveCard(QuestionCard* card, int delta) {
    finishLoadingNow();
    const int number = card->number();
    const int from = doc_->indexOf(number);
    if (from < 0 || !doc_->moveCard(number, from + delta)) return;
    record(QStringLiteral("Move card %1").arg(number));
}

void MainWindow::sweepCard(QuestionCard* card, int n, SweepOver over) {
    const CardState* source = doc_->card(card->number());
    if (!source || n < 2) return;
    const int number = source->number;
    CardSettings base = source->settings;
    if (!base.seed) base.seed = static_cast<quint64>(QDateTime::currentMSecsSinceEpoch()) & 0xffffffffu;
    // A seed sweep at temperature 0 would give n identical greedy answers.
    if (over == SweepOver::Seed && base.temperature == 0.0) base.temperature = 0.8;
    constexpr double kSweepTop = 1.5;
    for (int k = 0; k < n; ++k) {
        // Everything but the swept setting stays, so differences come from it alone.
        CardSettings s = base;
        if (over == SweepOver::Temperature) s.temperature = kSweepTop * k / (n - 1);
        else s.seed = *base.seed + static_cast<quint64>(k);
        if (k == 0) {
            doc_->setSettings(number, s);
            continue;
        }
        CardState variant;
        variant.settings = s;
        variant.from = number;
        doc_->insertCard(doc_->indexOf(number) + k, variant);  // grouped after their source, in order
    }
    record(QStringLiteral("Sweep card %1").arg(number));
}

void MainWindow::renumberCards() {
    for (int i = 0; i < cards_.size(); ++i) cards_[i]->setIndex(i);
}

void MainWindow::setSharedContext(const QString& text) {
    doc_->setSharedContext(text);
    if (!text.isEmpty()) sharedToggle_->setChecked(true);
}

void MainWindow::setBoardSystem(const QString& text) {
    doc_->setSystem(text);
    if (!text.isEmpty()) sharedToggle_->setChecked(true);
}

void MainWindow::onPromptChanged() {
    const Workspace& w = doc_->board();
    if (sharedContext_->toPlainText() != w.sharedContext) sharedContext_->setPlainText(w.sharedContext);
    if (boardSystem_->toPlainText() != w.system) boardSystem_->setPlainText(w.system);
}

void MainWindow::showDefaultSystem(const QString& text) {
    boardSystem_->setPlaceholderText(text.isEmpty() ? QStringLiteral("none (the model's template adds no system prompt)")
                                                    : QStringLiteral("the template's: %1").arg(text));
}

void MainWindow::setRenderMarkdown(bool on) {
    if (markdownAction_->isChecked() != on) markdownAction_->setChecked(on);  // comes back here
    for (QuestionCard* card : cards_) card->setRenderMarkdown(on);
    if (!restoring_) writeSettings();
}

void MainWindow::showPrecisionCosts(const ModelInfo& info) {
    constexpr int kBaseTipRole = Qt::UserRole + 1;
    struct Row {
        int index;
        PrecisionRow row;
        QString name;
    };
    const Row rows[] = {{kPrecision4Bit, PrecisionRow::FourBit, QStringLiteral("4-bit")},
                        {kPrecisionHalf, PrecisionRow::Half, QStringLiteral("half")},
                        {kPrecisionF32, PrecisionRow::F32, QStringLiteral("fp32")}};
    const int loaded = info.quant != kev::WeightQuant::None ? kPrecision4Bit
                       : info.dtype == kev::DType::F32      ? kPrecisionF32
                                                            : kPrecisionHalf;
    QStringList others;
    QStringList warnings;
    for (const Row& r : rows) {
        if (!precision_->itemData(r.index, kBaseTipRole).isValid())
            precision_->setItemData(r.index, precision_->itemData(r.index, Qt::ToolTipRole), kBaseTipRole);
        PrecisionCost cost = precisionCost(info.shape, r.row, info.device == kev::Device::Cuda);
        if (r.index == loaded) cost.weightBytes = info.weightBytes;  // what is held, not an estimate
        precision_->setItemText(r.index, precisionLabel(r.name, cost));
        QString tip = precision_->itemData(r.index, kBaseTipRole).toString() +
                      QStringLiteral("\nWeights of this model: about %1").arg(QLocale().formattedDataSize(cost.weightBytes, 0));
        if (!cost.warning.isEmpty()) {
            tip += QStringLiteral("\nSlow here: %1").arg(cost.warning);
            warnings << QStringLiteral("%1: %2").arg(r.name, cost.warning);
        }
        precision_->setItemData(r.index, tip, Qt::ToolTipRole);
        if (r.index == loaded) continue;
        const qint64 delta = cost.weightBytes - info.weightBytes;
        others << QStringLiteral("%1 ~%2 (%3 %4)")
                      .arg(r.name, QLocale().formattedDataSize(cost.weightBytes, 0),
                           delta < 0 ? QStringLiteral("frees") : QStringLiteral("needs"),
                           QLocale().formattedDataSize(std::abs(delta), 0));
    }
    gauges_->setPrecisionNote(QStringLiteral("Instead: %1").arg(others.join(QStringLiteral(" · "))));
    // Loaded at a precision that is slow on this CPU: say so where the user looks.
    const Row& now = rows[loaded == kPrecision4Bit ? 0 : loaded == kPrecisionHalf ? 1 : 2];
    const PrecisionCost here = precisionCost(info.shape, now.row, info.device == kev::Device::Cuda);
    if (!here.warning.isEmpty())
        showWindowMessage(QStringLiteral("Loaded at %1, but %2. fp32 or auto is faster on this CPU.").arg(now.name, here.warning),
                          Tone::Error);
}

// ---- Undo ----------------------------------------------------------------------------

void MainWindow::record(const QString& what, int mergeKey, BoardChange kind, const std::optional<Workspace>& before) {
    if (restoring_ || applying_ || loadingWorkspace()) return;
    const Workspace now = workspace();
    if (kind == BoardChange::Cards && sameInputs(recorded_, now)) {
        recorded_ = now;
        return;
    }
    undo_->push(new BoardCommand([this](const Workspace& b, BoardChange k) { applyBoard(b, k); },
                                 before.value_or(recorded_), now, kind, what, mergeKey));
    recorded_ = now;
}

void MainWindow::recordEdit(int mergeKey) {
    if (mergeKey == kBoardSystemEdit) record(QStringLiteral("Edit the system prompt"), mergeKey);
    else if (mergeKey == kSharedContextEdit) record(QStringLiteral("Edit the shared context"), mergeKey);
    else record(QStringLiteral("Edit card %1").arg(mergeKey), mergeKey);
}

bool MainWindow::undo() {
    if (isRunning() || loadingWorkspace() || !undo_->canUndo()) return false;
    undo_->undo();
    return true;
}

bool MainWindow::redo() {
    if (isRunning() || loadingWorkspace() || !undo_->canRedo()) return false;
    undo_->redo();
    return true;
}

void MainWindow::applyBoard(const Workspace& target, BoardChange kind) {
    applying_ = true;
    if (kind == BoardChange::Replace) {
        takenOff_.clear();  // card numbers belong to a board
        setWorkspace(target);
    } else {
        finishLoadingNow();
        doc_->setSharedContext(target.sharedContext);
        doc_->setSystem(target.system);
        // Cards are matched by their number: one that still exists keeps its current
        // answer; one that is gone comes back whole, as it was taken off (answer included).
        QSet<int> wanted;
        for (const CardState& c : target.cards) wanted.insert(c.number);
        const QVector<CardState> now = doc_->cards();
        for (const CardState& c : now)
            if (!wanted.contains(c.number)) takenOff_.insert(c.number, doc_->takeCard(c.number));
        for (int i = 0; i < target.cards.size(); ++i) {
            const CardState& c = target.cards[i];
            if (doc_->indexOf(c.number) >= 0) {
                doc_->setSettings(c.number, c.settings);
                doc_->moveCard(c.number, i);
            } else {
                const CardState taken = takenOff_.take(c.number);
                doc_->insertCard(i, taken.number == c.number && taken.settings == c.settings ? taken : c);
            }
        }
    }
    applying_ = false;
    recorded_ = workspace();
    scheduleAutosave();
    schedulePreview();
    updateActions();
}

// ---- Prompt as the model sees it -----------------------------------------------------

void MainWindow::showPrompt(QuestionCard* card) {
    if (!engine_->hasModel()) {
        card->showMessage(QStringLiteral("No prompt to show: no model is loaded."));
        return;
    }
    if (card->settings().question.trimmed().isEmpty()) {
        card->showMessage(QStringLiteral("No prompt to show: the question is empty."));
        return;
    }
    if (isRunning()) {  // the running pack is the one on show
        openPromptDialog(card, lastPreview_);
        return;
    }
    promptCard_ = card;  // shown when the preview of the board as it is now arrives
    preview_->stop();
    requestPreview();
}

void MainWindow::openPromptDialog(QuestionCard* card, const PackPreview& pack) {
    const int request = static_cast<int>(pack.cardOfRequest.indexOf(card->number() - 1));
    if (request < 0 || request >= pack.plan.cards()) {
        card->showMessage(QStringLiteral("No prompt to show: this card is not in the pack."));
        return;
    }
    PromptView view;
    view.cardNumber = card->number();
    view.text = pack.prompts.value(request);
    for (const kev::PackSegment& seg : pack.plan.segment_table) {
        if (seg.segment != kev::PackPlan::kSharedSegment && seg.segment != request) continue;
        for (std::int64_t row = seg.row_begin; row < seg.row_end; ++row) {
            const auto r = static_cast<std::size_t>(row);
            if (r >= pack.plan.tokens.size()) break;
            view.ids.push_back(pack.plan.tokens[r]);
            view.pieces.push_back(pack.rowPieces.value(static_cast<int>(row)));
            if (seg.segment == kev::PackPlan::kSharedSegment) ++view.sharedTokens;
        }
    }
    auto* dialog = new PromptDialog(view, this);
    dialog->setAttribute(Qt::WA_DeleteOnClose);
    dialog->show();
}

// ---- Model ---------------------------------------------------------------------------

LoadSettings MainWindow::loadSettings() const {
    LoadSettings s;
    s.device = device_->currentIndex() == 1 ? kev::Device::Cuda : kev::Device::Cpu;
    int choice = precision_->currentIndex();
    if (choice == kPrecisionAuto) {
        // Auto says in its row what it chose for this file and why (the tooltip).
        QString name = QStringLiteral("half"), why = QStringLiteral("fp16 on CUDA");
        choice = kPrecisionHalf;
        if (s.device == kev::Device::Cpu) {
            try {
                const kev::PrecisionChoice c = kev::choose_auto_precision(modelPath_.toStdString());
                choice = c.name == "4bit" ? kPrecision4Bit : c.name == "bf16" ? kPrecisionHalf : kPrecisionF32;
                name = choice == kPrecision4Bit ? QStringLiteral("4-bit") : choice == kPrecisionHalf ? QStringLiteral("half")
                                                                                                      : QStringLiteral("fp32");
                why = QString::fromStdString(c.why);
            } catch (const kev::Error& e) {
                choice = kPrecisionF32;  // the load itself will say what is wrong with the file
                name = QStringLiteral("fp32");
                why = QString::fromUtf8(e.what());
            }
        }
        precision_->setItemText(kPrecisionAuto, QStringLiteral("auto: %1").arg(name));
        precision_->setItemData(kPrecisionAuto, QStringLiteral("auto chose %1 for this file: %2").arg(name, why),
                                Qt::ToolTipRole);
    }
    if (choice == kPrecisionHalf) {
        s.dtype = s.device == kev::Device::Cuda ? kev::DType::F16 : kev::DType::BF16;
    } else if (choice == kPrecision4Bit) {
        s.dtype = kev::DType::BF16;  // embeddings, norms, activations; 4-bit runs on the CPU
        s.quant = kev::WeightQuant::Q4;
    } else {
        s.dtype = kev::DType::F32;
    }
    return s;
}

void MainWindow::showModelSummary(const QString& path) {
    if (QFileInfo(path).isDir()) {
        modelLabel_->setText(QFileInfo(path).fileName());
        modelStatus_->setText(QStringLiteral("%1 · Hugging Face folder · loading…").arg(path));
        return;
    }
    const ModelSummary s = summarizeModel(path);
    if (!s.ok) {
        modelLabel_->setText(QStringLiteral("No model"));
        modelStatus_->setText(s.error);
        return;
    }
    modelLabel_->setText(s.name);
    modelStatus_->setText(QStringLiteral("%1 · %2 · %3 tensors · %4 · loading…")
                              .arg(s.name, s.architecture)
                              .arg(s.tensorCount)
                              .arg(QLocale().formattedDataSize(s.fileBytes)));
}

void MainWindow::showLoadedModelName() {
    // After a failed open the toolbar names the model that still answers, not "No model".
    if (engine_->hasModel()) {
        modelLabel_->setText(engine_->model().name);
        modelPath_ = engine_->model().path;
    } else {
        modelLabel_->setText(QStringLiteral("No model"));
    }
}

void MainWindow::openModel(const QString& path) {
    modelPath_ = path;
    showModelSummary(path);
    if (!QFileInfo::exists(path)) {
        modelStatus_->setText(QStringLiteral("Model not found: %1").arg(path));
        showLoadedModelName();
        Q_EMIT modelFailed(modelStatus_->text());
        updateActions();
        return;
    }
    reloadModel();
}

void MainWindow::reloadModel() {
    if (modelPath_.isEmpty() || !QFileInfo::exists(modelPath_)) return;
    if (isRunning()) stop();
    loadProgress_->setRange(0, 0);
    loadProgress_->setVisible(true);
    cancelLoad_->setVisible(true);
    engine_->load(modelPath_, loadSettings());
    updateActions();
}

void MainWindow::onModelLoaded(const ModelInfo& info) {
    loadProgress_->setVisible(false);
    cancelLoad_->setVisible(false);
    modelPath_ = info.path;
    modelStatus_->setText(QStringLiteral("%1 · %2 · %3 parameters · %4 %5 on %6 · loaded in %7 s%8")
                              .arg(info.name, info.architecture)
                              .arg(QLocale().toString(info.parameters))
                              .arg(QLocale().formattedDataSize(info.weightBytes), info.weightFormats,
                                   QString::fromLatin1(kev::to_string(info.device)))
                              .arg(info.loadSeconds, 0, 'f', 1)
                              .arg(info.chatNote.isEmpty() ? QString() : QStringLiteral(" · ") + info.chatNote));
    gauges_->setModelBytes(info.weightBytes, info.weightBytes4Bit, info.weightFormats);
    gauges_->setDeviceIsCuda(info.device == kev::Device::Cuda);
    showDefaultSystem(info.defaultSystem);
    showPrecisionCosts(info);
    QSettings s;
    s.setValue(QLatin1String(kSettingLastModel), info.path);
    QStringList recent = s.value(QLatin1String(kSettingRecent)).toStringList();
    recent.removeAll(info.path);
    recent.prepend(info.path);
    while (recent.size() > kMaxRecentModels) recent.removeLast();
    s.setValue(QLatin1String(kSettingRecent), recent);
    rebuildRecentMenu();
    updateActions();
    schedulePreview();
    Q_EMIT modelReady();
}

void MainWindow::onLoadFailed(const QString& path, const QString& message) {
    loadProgress_->setVisible(false);
    cancelLoad_->setVisible(false);
    QString text = QStringLiteral("Could not load %1: %2").arg(path, message);
    if (engine_->hasModel()) {
        text += QStringLiteral(" (still using %1 as %2)")
                    .arg(engine_->model().name, engine_->model().weightFormats);
        // The combos show what is loaded, not what failed.
        restoring_ = true;
        device_->setCurrentIndex(engine_->model().device == kev::Device::Cuda ? 1 : 0);
        if (precision_->currentIndex() != kPrecisionAuto)
            precision_->setCurrentIndex(engine_->model().quant != kev::WeightQuant::None ? kPrecision4Bit
                                        : engine_->model().dtype == kev::DType::F32   ? kPrecisionF32
                                                                                      : kPrecisionHalf);
        restoring_ = false;
        modelPath_ = engine_->model().path;
    }
    showLoadedModelName();
    modelStatus_->setText(text);
    updateActions();
    Q_EMIT modelFailed(text);
}

// ---- Running -------------------------------------------------------------------------

bool MainWindow::isRunning() const { return runs_->running(); }

ConnectionDialog* MainWindow::openConnections() {
    if (!connectionDialog_) {
        connectionDialog_ = new ConnectionDialog(connections_.get(), this);
        connect(connectionDialog_, &ConnectionDialog::connectionsChanged, this, &MainWindow::refreshEngineChoices);
    }
    connectionDialog_->show();
    connectionDialog_->raise();
    return connectionDialog_;
}

void MainWindow::refreshEngineChoices() {
    const QStringList names = connections_->names();
    for (QuestionCard* card : cards_) card->setEngineChoices(names);
}

void MainWindow::prepareLora(bool forRun) {
    // The adapter is attached (on the worker, before the run or preview that follows)
    // only when a card wants it. A preview does not retry a folder that just failed (it
    // would repeat the error at every keystroke); a run does, and says why again.
    bool wantsLora = lora_->isChecked();
    for (const CardState& card : doc_->cards()) wantsLora = wantsLora || card.settings.lora.value_or(false);
    const bool retry = forRun || loraPath_ != loraFailedPath_;
    if (wantsLora && retry && !runs_->running() && engine_->hasModel()) engine_->setLora(loraPath_);
    runs_->setLoraDefault(lora_->isChecked(), loraScale_->value());
    runs_->setAdapterPath(loraPath_);
}

bool MainWindow::runAll() {
    if (loadingWorkspace()) {
        showWindowMessage(QStringLiteral("The workspace is still loading (%1 / %2 cards); run again when it is done.")
                              .arg(cards_.size()).arg(doc_->size()), Tone::Error);
        return false;
    }
    prepareLora(/*forRun=*/true);
    const bool started = runs_->runAll(cards_, sharedContext_->toPlainText(), boardSystem_->toPlainText());
    updateActions();
    return started;
}

bool MainWindow::runCard(QuestionCard* card) {
    if (cards_.indexOf(card) < 0) return false;
    prepareLora(/*forRun=*/true);  // attaches nothing while a pack runs
    const bool started = runs_->runCard(card, sharedContext_->toPlainText(), boardSystem_->toPlainText());
    updateActions();
    return started;
}

bool MainWindow::replayCard(QuestionCard* card) {
    if (cards_.indexOf(card) < 0) return false;
    const bool started = runs_->replay(card, sharedContext_->toPlainText(), boardSystem_->toPlainText());
    updateActions();
    return started;
}

void MainWindow::stop() { runs_->stop(); }

// ---- Small helpers -------------------------------------------------------------------

void MainWindow::schedulePreview() {
    if (!restoring_) preview_->start();
}

void MainWindow::requestPreview() {
    if (!engine_->hasModel()) {
        packView_->setMessage(QStringLiteral("The pack appears here once a model is loaded."));
        return;
    }
    if (isRunning() || loadingWorkspace()) return;  // the run's own pack is on show; or cards are still coming
    // Cards that differ in LoRA cannot share the shared context's keys and values: the
    // preview asks with each card's LoRA use, so it draws the pack the run will make.
    prepareLora(/*forRun=*/false);
    QVector<CardSettings> packable;
    QVector<int> cardOfRequest;
    for (const CardState& c : doc_->cards()) {
        if (c.settings.question.trimmed().isEmpty()) continue;  // not packable yet
        packable.push_back(c.settings);
        cardOfRequest.push_back(c.number - 1);  // its colour and label in the pack view
    }
    const kev::GenerationRequest request = boardRequest(packable, runs_->boardInputs(sharedContext_->toPlainText(),
                                                                                      boardSystem_->toPlainText()));
    if (request.cards.empty()) {
        packView_->setMessage(QStringLiteral("Type a question to see how the cards are packed."));
        return;
    }
    engine_->preview(request, cardOfRequest);
}

void MainWindow::updateActions() {
    const bool running = isRunning();
    // While another precision or model loads, the loaded one keeps answering.
    // While a pack runs, Run adds the new and edited cards to it.
    run_->setEnabled(engine_->hasModel() && (!running || runs_->canJoin()));
    undoAction_->setEnabled(!running && undo_->canUndo());
    redoAction_->setEnabled(!running && undo_->canRedo());
    undoAction_->setText(undo_->canUndo() ? QStringLiteral("Undo %1").arg(undo_->undoText()) : QStringLiteral("Undo"));
    redoAction_->setText(undo_->canRedo() ? QStringLiteral("Redo %1").arg(undo_->redoText()) : QStringLiteral("Redo"));
    stop_->setEnabled(running);
    device_->setEnabled(!running && !engine_->loading());
    precision_->setEnabled(!running && !engine_->loading());
    openModel_->setEnabled(!running);
}

void MainWindow::showWindowMessage(const QString& text, Tone tone) {
    message_->setText(text);
    message_->setStyleSheet(tone == Tone::Error ? QStringLiteral("QLabel { color: #b00020; font-weight: bold; }")
                                    : QStringLiteral("QLabel { color: #1b5e20; }"));
    message_->setVisible(!text.isEmpty());
}

QString MainWindow::modelStatus() const { return modelStatus_->text(); }
QString MainWindow::windowMessage() const { return message_->text(); }

void MainWindow::closeEvent(QCloseEvent* event) {
    saveWorkspaceNow();
    writeSettings();
    event->accept();
}

}  // namespace kevui
