// MainWindow, part two: how the window is put together (actions, toolbar, menus, the
// central area). Behaviour lives in main_window.cpp.
#include <QAction>
#include <QApplication>
#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QKeySequence>
#include <QLabel>
#include <QMenu>
#include <QMenuBar>
#include <QMessageBox>
#include <QPainter>
#include <QPixmap>
#include <QPlainTextEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QScrollArea>
#include <QSettings>
#include <QSplitter>
#include <QStatusBar>
#include <QToolBar>
#include <QToolButton>
#include <QVBoxLayout>

#include "board_document.h"
#include "card_colors.h"
#include "engine_worker.h"
#include "gauge_panel.h"
#include "kev/engine_info.h"
#include "kev/quant.h"
#include "main_window.h"
#include "main_window_keys.h"
#include "pack_view.h"

namespace kevui {

using namespace window;

namespace {

void disableComboItem(QComboBox* combo, int row, const QString& why) {
    // Qt::UserRole - 1 is the item flags role of QStandardItemModel: 0 = not selectable.
    combo->setItemData(row, 0, Qt::UserRole - 1);
    combo->setItemData(row, why, Qt::ToolTipRole);
}

}  // namespace

// The window icon, drawn like resources/icons/kev.svg (no SVG plugin needed).
QIcon MainWindow::kevIcon() {
    QPixmap pm(64, 64);
    pm.fill(Qt::transparent);
    QPainter p(&pm);
    p.setRenderHint(QPainter::Antialiasing);
    p.setPen(Qt::NoPen);
    p.setBrush(QColor(0x26, 0x32, 0x38));
    p.drawRoundedRect(QRectF(2, 2, 60, 60), 10, 10);
    for (int i = 0; i < 3; ++i) {
        p.setBrush(cardColor(i));
        p.drawRoundedRect(QRectF(8 + i * 17, 14, 14, 36), 3, 3);
    }
    return QIcon(pm);
}

void MainWindow::buildActions() {
    run_ = new QAction(QStringLiteral("Run"), this);
    run_->setObjectName(QStringLiteral("runAction"));
    run_->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_Return));
    run_->setToolTip(QStringLiteral("Answer every card in one packed pass (Ctrl+Return)"));
    connect(run_, &QAction::triggered, this, [this] { runAll(); });
    stop_ = new QAction(QStringLiteral("Stop"), this);
    stop_->setObjectName(QStringLiteral("stopAction"));
    stop_->setShortcut(QKeySequence(Qt::Key_Escape));
    stop_->setToolTip(QStringLiteral("Stop every card after the current step (Esc)"));
    connect(stop_, &QAction::triggered, this, &MainWindow::stop);
    addCardAction_ = new QAction(QStringLiteral("Add question"), this);
    addCardAction_->setObjectName(QStringLiteral("addCardAction"));
    addCardAction_->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_N));
    connect(addCardAction_, &QAction::triggered, this, [this] { addCard(); });
    openModel_ = new QAction(QStringLiteral("Open model…"), this);
    openModel_->setObjectName(QStringLiteral("openModelAction"));
    openModel_->setShortcut(QKeySequence::Open);
    connect(openModel_, &QAction::triggered, this, [this] {
        const QString file = QFileDialog::getOpenFileName(this, QStringLiteral("Open a model"), QFileInfo(modelPath_).path(),
                                                          QStringLiteral("GGUF models (*.gguf);;All files (*)"));
        if (!file.isEmpty()) openModel(file);
    });
    // Undo/redo of the board. A focused text field keeps Ctrl+Z for its own text.
    undoAction_ = new QAction(QStringLiteral("Undo"), this);
    undoAction_->setObjectName(QStringLiteral("undoAction"));
    undoAction_->setShortcut(QKeySequence::Undo);
    connect(undoAction_, &QAction::triggered, this, [this] { undo(); });
    redoAction_ = new QAction(QStringLiteral("Redo"), this);
    redoAction_->setObjectName(QStringLiteral("redoAction"));
    redoAction_->setShortcut(QKeySequence::Redo);
    connect(redoAction_, &QAction::triggered, this, [this] { redo(); });
    compareAction_ = new QAction(QStringLiteral("Compare answers…"), this);
    compareAction_->setObjectName(QStringLiteral("compareAction"));
    compareAction_->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_C));
    compareAction_->setToolTip(QStringLiteral("Answers of two or more cards aligned token by token: where they part, "
                                              "each token's probability, the alternatives (Ctrl+Shift+C)"));
    connect(compareAction_, &QAction::triggered, this, [this] { compareAnswers(); });
    markdownAction_ = new QAction(QStringLiteral("Render answers as Markdown"), this);
    markdownAction_->setObjectName(QStringLiteral("markdownAction"));
    markdownAction_->setCheckable(true);
    markdownAction_->setChecked(true);
    markdownAction_->setToolTip(QStringLiteral("Headings, lists and code blocks rendered; off: the raw text"));
    connect(markdownAction_, &QAction::toggled, this, &MainWindow::setRenderMarkdown);
}

void MainWindow::openModelFolder() {
    const QString dir = QFileDialog::getExistingDirectory(this, QStringLiteral("Open a Hugging Face model folder"),
                                                          QFileInfo(modelPath_).path());
    if (!dir.isEmpty()) openModel(dir);
}

void MainWindow::buildToolbar() {
    QToolBar* bar = addToolBar(QStringLiteral("Main"));
    bar->setObjectName(QStringLiteral("mainToolbar"));
    bar->setMovable(false);

    modelLabel_ = new QLabel(bar);
    modelLabel_->setObjectName(QStringLiteral("modelLabel"));
    bar->addWidget(modelLabel_);
    bar->addAction(openModel_);
    bar->addSeparator();

    device_ = new QComboBox(bar);
    device_->setObjectName(QStringLiteral("deviceCombo"));
    device_->setAccessibleName(QStringLiteral("Device"));
    device_->setToolTip(QStringLiteral("Where the model runs"));
    device_->addItem(QStringLiteral("CPU"));
    device_->addItem(QStringLiteral("CUDA"));
    if (!kev::engine_info().cuda_available)
        disableComboItem(device_, 1, QStringLiteral("No CUDA device is visible to this libtorch"));
    bar->addWidget(device_);

    precision_ = new QComboBox(bar);
    precision_->setObjectName(QStringLiteral("precisionCombo"));
    precision_->setAccessibleName(QStringLiteral("Precision"));
    precision_->addItems({QStringLiteral("4-bit"), QStringLiteral("half"), QStringLiteral("fp32"), QStringLiteral("auto")});
    if (kev::engine_info().cuda_available) {
        precision_->setItemData(kPrecision4Bit,
                                kev::quant_cuda_kernels_built()
                                    ? QStringLiteral("4-bit linear layers (GGUF Q4_0/Q4_1 blocks kept, others NF4), "
                                                     "bf16 activations; on CUDA by Kev's fused 4-bit kernels (Q4_K "
                                                     "and Q8_0 blocks are kept on the CPU only)")
                                    : QStringLiteral("4-bit linear layers (GGUF Q4_0/Q4_1 blocks kept, others NF4), "
                                                     "bf16 activations; CPU only in this build (built without nvcc)"),
                                Qt::ToolTipRole);
    } else {
        precision_->setItemData(kPrecision4Bit,
                                QStringLiteral("4-bit linear layers (GGUF Q4_0/Q4_1/Q4_K/Q8_0 blocks kept, others NF4); "
                                               "embeddings, norms and activations in bf16"),
                                Qt::ToolTipRole);
    }
    precision_->setItemData(kPrecisionHalf,
                            QStringLiteral("bf16 on CPU (this libtorch has no fast fp16 CPU kernels), fp16 on CUDA"),
                            Qt::ToolTipRole);
    precision_->setItemData(kPrecisionF32, QStringLiteral("32-bit floats: exact, twice the memory of half"), Qt::ToolTipRole);
    precision_->setItemData(kPrecisionAuto,
                            QStringLiteral("The fastest on this CPU for the file: 4-bit for Q4_0/Q4_1/Q4_K/Q8_0 GGUF files, "
                                           "half where a SIMD bf16 kernel runs, else fp32"),
                            Qt::ToolTipRole);
    precision_->setCurrentIndex(kPrecisionAuto);
    bar->addWidget(precision_);

    lora_ = new QCheckBox(QStringLiteral("LoRA"), bar);
    lora_->setObjectName(QStringLiteral("loraCheck"));
    lora_->setAccessibleName(QStringLiteral("Use the LoRA adapter"));
    lora_->setToolTip(QStringLiteral("Apply the LoRA adapter to every card (a card's advanced settings can override)"));
    bar->addWidget(lora_);
    connect(lora_, &QCheckBox::toggled, this, [this] { schedulePreview(); });
    loraScale_ = new QDoubleSpinBox(bar);
    loraScale_->setObjectName(QStringLiteral("loraScaleSpin"));
    loraScale_->setAccessibleName(QStringLiteral("LoRA scale"));
    loraScale_->setRange(0.0, static_cast<double>(kev::kMaxLoraScale));
    loraScale_->setSingleStep(0.1);
    loraScale_->setDecimals(2);
    loraScale_->setValue(1.0);
    loraScale_->setPrefix(QStringLiteral("× "));
    loraScale_->setToolTip(QStringLiteral("LoRA scale, times alpha/r (0 to 2)"));
    bar->addWidget(loraScale_);
    loraPick_ = new QToolButton(bar);
    loraPick_->setObjectName(QStringLiteral("loraPickButton"));
    loraPick_->setAccessibleName(QStringLiteral("Choose a LoRA adapter folder"));
    loraPick_->setText(QStringLiteral("Adapter…"));
    connect(loraPick_, &QToolButton::clicked, this, [this] {
        const QString dir = QFileDialog::getExistingDirectory(this, QStringLiteral("LoRA adapter folder (PEFT)"), loraPath_);
        if (!dir.isEmpty()) setLoraPath(dir);
    });
    bar->addWidget(loraPick_);
    loraMode_ = new QLabel(bar);
    loraMode_->setObjectName(QStringLiteral("loraModeLabel"));
    loraMode_->setToolTip(QStringLiteral("How the last run applied LoRA: merged into the weights (every card alike) "
                                         "or per card (LoRA-on and LoRA-off cards in one pack)"));
    bar->addWidget(loraMode_);
    bar->addSeparator();
    bar->addAction(run_);
    bar->addAction(stop_);
    bar->addAction(addCardAction_);
    bar->addAction(compareAction_);

    const auto reload = [this](int) {
        if (!restoring_) reloadModel();
    };
    connect(device_, qOverload<int>(&QComboBox::currentIndexChanged), this, reload);
    connect(precision_, qOverload<int>(&QComboBox::currentIndexChanged), this, reload);

    loadProgress_ = new QProgressBar(this);
    loadProgress_->setObjectName(QStringLiteral("loadProgress"));
    loadProgress_->setMaximumWidth(160);
    loadProgress_->setVisible(false);
    cancelLoad_ = new QToolButton(this);
    cancelLoad_->setText(QStringLiteral("Cancel load"));
    cancelLoad_->setAccessibleName(QStringLiteral("Cancel loading the model"));
    cancelLoad_->setObjectName(QStringLiteral("cancelLoadButton"));
    cancelLoad_->setVisible(false);
    connect(cancelLoad_, &QToolButton::clicked, this, [this] { engine_->cancelLoad(); });
    statusBar()->addPermanentWidget(loadProgress_);
    statusBar()->addPermanentWidget(cancelLoad_);
    workspaceProgress_ = new QLabel(this);
    workspaceProgress_->setObjectName(QStringLiteral("workspaceProgress"));
    workspaceProgress_->setVisible(false);
    statusBar()->addPermanentWidget(workspaceProgress_);
    autosaveNote_ = new QLabel(this);
    autosaveNote_->setObjectName(QStringLiteral("autosaveNote"));
    autosaveNote_->setStyleSheet(QStringLiteral("QLabel { color: #b00020; font-weight: bold; }"));
    autosaveNote_->setVisible(false);
    statusBar()->addPermanentWidget(autosaveNote_);
}

void MainWindow::buildMenus() {
    QMenu* file = menuBar()->addMenu(QStringLiteral("&File"));
    file->addAction(openModel_);
    file->addAction(QStringLiteral("Open model folder…"), this, &MainWindow::openModelFolder);
    recentMenu_ = file->addMenu(QStringLiteral("Recent models"));
    file->addSeparator();
    file->addAction(QStringLiteral("Open question set…"), this, [this] {
        const QString path = QFileDialog::getOpenFileName(this, QStringLiteral("Open a question set"), QString(),
                                                          QStringLiteral("Question sets (*.json)"));
        if (!path.isEmpty()) loadQuestionSet(path);
    });
    restoreBoard_ = file->addAction(QStringLiteral("Restore the board before Open"), this, [this] { restorePreviousBoard(); });
    restoreBoard_->setObjectName(QStringLiteral("restoreBoardAction"));
    restoreBoard_->setEnabled(false);
    file->addAction(QStringLiteral("Save question set…"), this, [this] {
        const QString path = QFileDialog::getSaveFileName(this, QStringLiteral("Save the question set"), QString(),
                                                          QStringLiteral("Question sets (*.json)"));
        if (!path.isEmpty()) saveQuestionSet(path);
    });
    examplesMenu_ = file->addMenu(QStringLiteral("Example question sets"));
    file->addSeparator();
    file->addAction(QStringLiteral("Export answers as Markdown…"), this, [this] {
        const QString path = QFileDialog::getSaveFileName(this, QStringLiteral("Export answers"), QString(),
                                                          QStringLiteral("Markdown (*.md)"));
        if (!path.isEmpty()) exportMarkdown(path);
    });
    file->addAction(QStringLiteral("Export answers as JSON…"), this, [this] {
        const QString path = QFileDialog::getSaveFileName(this, QStringLiteral("Export answers"), QString(),
                                                          QStringLiteral("JSON (*.json)"));
        if (!path.isEmpty()) exportJson(path);
    });
    file->addAction(QStringLiteral("Export reproducibility bundle…"), this, [this] {
        const QString path = QFileDialog::getSaveFileName(this, QStringLiteral("Export a reproducibility bundle"), QString(),
                                                          QStringLiteral("Kev bundles (*.kevbundle.json *.json)"));
        if (!path.isEmpty()) exportBundle(path);
    });
    file->addAction(QStringLiteral("Open reproducibility bundle…"), this, [this] {
        const QString path = QFileDialog::getOpenFileName(this, QStringLiteral("Open a reproducibility bundle"), QString(),
                                                          QStringLiteral("Kev bundles (*.kevbundle.json *.json)"));
        if (!path.isEmpty()) openBundle(path);
    });
    file->addAction(QStringLiteral("Export answers as CSV…"), this, [this] {
        const QString path = QFileDialog::getSaveFileName(this, QStringLiteral("Export answers"), QString(),
                                                          QStringLiteral("CSV (*.csv)"));
        if (!path.isEmpty()) exportCsv(path);
    });
    file->addSeparator();
    QAction* quit = file->addAction(QStringLiteral("Quit"), this, &QWidget::close);
    quit->setShortcut(QKeySequence::Quit);

    QMenu* edit = menuBar()->addMenu(QStringLiteral("&Edit"));
    edit->addAction(undoAction_);
    edit->addAction(redoAction_);
    QMenu* view = menuBar()->addMenu(QStringLiteral("&View"));
    view->addAction(compareAction_);
    view->addAction(markdownAction_);

    QMenu* run = menuBar()->addMenu(QStringLiteral("&Run"));
    run->addAction(run_);
    run->addAction(stop_);
    run->addAction(addCardAction_);

    QMenu* engines = menuBar()->addMenu(QStringLiteral("E&ngine"));
    QAction* connectionsAction = engines->addAction(QStringLiteral("Connections…"), this, [this] { openConnections(); });
    connectionsAction->setObjectName(QStringLiteral("connectionsAction"));
    connectionsAction->setToolTip(QStringLiteral("Servers (vLLM, SGLang, llama.cpp) a card can send its question to"));

    QMenu* help = menuBar()->addMenu(QStringLiteral("&Help"));
    help->addAction(QStringLiteral("Keyboard shortcuts"), this, [this] {
        QMessageBox::information(this, QStringLiteral("Keyboard shortcuts"),
                                 QStringLiteral("Ctrl+Return\tRun every card\nEsc\tStop\nCtrl+N\tAdd a question\n"
                                                "Ctrl+O\tOpen a model\nCtrl+Q\tQuit"));
    });
    help->addAction(QStringLiteral("About Kev"), this, [this] {
        QMessageBox::about(this, QStringLiteral("About Kev"),
                           QStringLiteral("<b>Kev %1</b><p>Answers several questions in one packed forward pass, "
                                          "each isolated from the others, each with its own temperature.</p>")
                               .arg(QApplication::applicationVersion()));
    });
    rebuildRecentMenu();
    rebuildExamplesMenu();
}

void MainWindow::buildCentral() {
    auto* central = new QWidget(this);
    auto* layout = new QVBoxLayout(central);
    layout->setContentsMargins(6, 4, 6, 4);

    modelStatus_ = new QLabel(central);
    modelStatus_->setObjectName(QStringLiteral("modelStatus"));
    modelStatus_->setWordWrap(true);
    modelStatus_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    layout->addWidget(modelStatus_);

    message_ = new QLabel(central);
    message_->setObjectName(QStringLiteral("windowMessage"));
    message_->setWordWrap(true);
    message_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    message_->setVisible(false);
    layout->addWidget(message_);

    sharedToggle_ = new QToolButton(central);
    sharedToggle_->setObjectName(QStringLiteral("sharedContextToggle"));
    sharedToggle_->setAccessibleName(QStringLiteral("Show the system prompt and the shared context"));
    sharedToggle_->setText(QStringLiteral("System prompt and shared context (seen by every card)"));
    sharedToggle_->setCheckable(true);
    sharedToggle_->setAutoRaise(true);
    sharedToggle_->setArrowType(Qt::RightArrow);
    sharedToggle_->setToolButtonStyle(Qt::ToolButtonTextBesideIcon);
    layout->addWidget(sharedToggle_);
    // The board's prompt, visible rather than hidden in the template: the system prompt
    // (the template's default shows as the placeholder) and the shared context.
    boardPrompt_ = new QWidget(central);
    auto* form = new QFormLayout(boardPrompt_);
    form->setContentsMargins(0, 0, 0, 0);
    boardSystem_ = new QPlainTextEdit(boardPrompt_);
    boardSystem_->setObjectName(QStringLiteral("boardSystemEdit"));
    boardSystem_->setAccessibleName(QStringLiteral("System prompt of the board"));
    boardSystem_->setToolTip(QStringLiteral("The system message of every card that has none of its own. "
                                            "Empty: the model's template decides."));
    boardSystem_->setMaximumHeight(44);
    sharedContext_ = new QPlainTextEdit(boardPrompt_);
    sharedContext_->setObjectName(QStringLiteral("sharedContextEdit"));
    sharedContext_->setAccessibleName(QStringLiteral("Shared context"));
    sharedContext_->setPlaceholderText(QStringLiteral("A document or instructions every card asks about (optional; "
                                                      "computed once for the whole pack)"));
    sharedContext_->setMaximumHeight(64);
    auto* systemLabel = new QLabel(QStringLiteral("&System prompt:"), boardPrompt_);
    systemLabel->setBuddy(boardSystem_);
    auto* sharedLabel = new QLabel(QStringLiteral("Shared &context:"), boardPrompt_);
    sharedLabel->setBuddy(sharedContext_);
    form->addRow(systemLabel, boardSystem_);
    form->addRow(sharedLabel, sharedContext_);
    boardPrompt_->setVisible(false);
    layout->addWidget(boardPrompt_);
    showDefaultSystem(QString());
    connect(sharedToggle_, &QToolButton::toggled, this, [this](bool on) {
        boardPrompt_->setVisible(on);
        sharedToggle_->setArrowType(on ? Qt::DownArrow : Qt::RightArrow);
    });
    for (QPlainTextEdit* edit : {sharedContext_, boardSystem_}) {
        connect(edit, &QPlainTextEdit::textChanged, this, [this, edit] {
            if (edit == boardSystem_) doc_->setSystem(edit->toPlainText());
            else doc_->setSharedContext(edit->toPlainText());
            schedulePreview();
            recordEdit(edit == boardSystem_ ? kBoardSystemEdit : kSharedContextEdit);
        });
    }

    auto* splitter = new QSplitter(Qt::Vertical, central);
    cardScroll_ = new QScrollArea(splitter);
    cardScroll_->setObjectName(QStringLiteral("cardScroll"));
    cardScroll_->setWidgetResizable(true);
    cardScroll_->setHorizontalScrollBarPolicy(Qt::ScrollBarAsNeeded);
    cardRow_ = new QWidget(cardScroll_);
    cardLayout_ = new QHBoxLayout(cardRow_);
    cardLayout_->setContentsMargins(2, 2, 2, 2);
    addCardButton_ = new QPushButton(QStringLiteral("+\nAdd question"), cardRow_);
    addCardButton_->setObjectName(QStringLiteral("addCardButton"));
    addCardButton_->setAccessibleName(QStringLiteral("Add a question card"));
    addCardButton_->setFixedWidth(120);
    addCardButton_->setSizePolicy(QSizePolicy::Fixed, QSizePolicy::Expanding);
    connect(addCardButton_, &QPushButton::clicked, this, [this] { addCard(); });
    cardLayout_->addWidget(addCardButton_);
    cardLayout_->addStretch(1);
    cardScroll_->setWidget(cardRow_);
    splitter->addWidget(cardScroll_);

    auto* bottom = new QWidget(splitter);
    auto* bottomLayout = new QHBoxLayout(bottom);
    bottomLayout->setContentsMargins(0, 0, 0, 0);
    gauges_ = new GaugePanel(bottom);
    packView_ = new PackView(bottom);
    bottomLayout->addWidget(gauges_, 1);
    bottomLayout->addWidget(packView_, 1);
    splitter->addWidget(bottom);
    splitter->setStretchFactor(0, 3);
    splitter->setStretchFactor(1, 1);
    splitter->setSizes({560, 240});
    layout->addWidget(splitter, 1);
    setCentralWidget(central);
}

void MainWindow::rebuildRecentMenu() {
    recentMenu_->clear();
    const QStringList recent = QSettings().value(QLatin1String(kSettingRecent)).toStringList();
    for (const QString& path : recent) {
        recentMenu_->addAction(path, this, [this, path] { openModel(path); });
    }
    recentMenu_->setEnabled(!recent.isEmpty());
}

void MainWindow::rebuildExamplesMenu() {
    examplesMenu_->clear();
    const QDir dir(QStringLiteral(":/examples"));
    for (const QString& name : dir.entryList({QStringLiteral("*.json")}, QDir::Files, QDir::Name)) {
        const QString path = dir.filePath(name);
        QString title = QFileInfo(name).completeBaseName().replace(QLatin1Char('-'), QLatin1Char(' '));
        examplesMenu_->addAction(title, this, [this, path] { loadQuestionSet(path); });
    }
    examplesMenu_->setEnabled(!examplesMenu_->isEmpty());
}

}  // namespace kevui
