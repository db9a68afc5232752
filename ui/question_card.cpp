#include "question_card.h"

#include <QApplication>
#include <QCheckBox>
#include <QClipboard>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QLocale>
#include <QPlainTextEdit>
#include <QRegularExpressionValidator>
#include <QScrollArea>
#include <QScrollBar>
#include <QSignalBlocker>
#include <QSlider>
#include <QSpinBox>
#include <QTextDocument>
#include <QTextEdit>
#include <QTextCursor>
#include <QToolButton>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>

#include "card_colors.h"

namespace kevui {

namespace {

constexpr int kSliderSteps = 200;  // 0.00 .. 2.00 in steps of 0.01
constexpr double kMaxUiTemperature = 2.0;
const QString kStopSeparator = QStringLiteral("|");

// 100000 as "100000", not "1e+05"; 1e308 as "1e+308".
QString shortest(double v) {
    if (std::isfinite(v) && v == std::trunc(v) && std::abs(v) < 1e15) return QString::number(static_cast<qint64>(v));
    return QString::number(v, 'g', QLocale::FloatingPointShortest);
}

QToolButton* toolButton(const QString& text, const QString& tip, const QString& name, QWidget* parent) {
    auto* b = new QToolButton(parent);
    b->setText(text);
    b->setToolTip(tip);
    b->setObjectName(name);
    b->setAccessibleName(tip);
    b->setAutoRaise(true);
    return b;
}

}  // namespace

QuestionCard::QuestionCard(QWidget* parent) : QFrame(parent) {
    setObjectName(QStringLiteral("questionCard"));
    setFrameShape(QFrame::StyledPanel);
    setFixedWidth(380);
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(8, 6, 8, 6);

    auto* header = new QHBoxLayout;
    title_ = new QLabel(this);
    title_->setObjectName(QStringLiteral("cardTitle"));
    auto* left = toolButton(QStringLiteral("◀"), QStringLiteral("Move this card left"), QStringLiteral("moveLeftButton"), this);
    auto* right = toolButton(QStringLiteral("▶"), QStringLiteral("Move this card right"), QStringLiteral("moveRightButton"), this);
    header->addWidget(left);
    header->addWidget(title_, 1);
    header->addWidget(right);
    connect(left, &QToolButton::clicked, this, [this] { Q_EMIT moveRequested(-1); });
    connect(right, &QToolButton::clicked, this, [this] { Q_EMIT moveRequested(+1); });
    auto* sweep = toolButton(QStringLiteral("Sweep"), QStringLiteral("Turn this card into variants over temperature, run side by side"),
                             QStringLiteral("sweepButton"), this);
    replay_ = toolButton(QStringLiteral("Replay"), QStringLiteral("Re-run this card alone and check its tokens match the packed run"),
                         QStringLiteral("replayButton"), this);
    replay_->setEnabled(false);
    auto* prompt = toolButton(QStringLiteral("Prompt"),
                              QStringLiteral("Show the prompt as the model sees it: the templated text and its tokens"),
                              QStringLiteral("promptButton"), this);
    header->addWidget(prompt);
    connect(prompt, &QToolButton::clicked, this, &QuestionCard::promptRequested);
    auto* dup = toolButton(QStringLiteral("Duplicate"), QStringLiteral("Same question, another temperature, side by side"),
                           QStringLiteral("duplicateButton"), this);
    auto* remove = toolButton(QStringLiteral("✕"), QStringLiteral("Remove this card"), QStringLiteral("removeButton"), this);
    header->addWidget(dup);
    header->addWidget(remove);
    layout->addLayout(header);
    connect(sweep, &QToolButton::clicked, this, &QuestionCard::sweepRequested);
    connect(replay_, &QToolButton::clicked, this, &QuestionCard::replayRequested);
    connect(dup, &QToolButton::clicked, this, &QuestionCard::duplicateRequested);
    connect(remove, &QToolButton::clicked, this, &QuestionCard::removeRequested);

    history_ = new QLabel(this);
    history_->setObjectName(QStringLiteral("cardHistory"));
    history_->setWordWrap(true);
    history_->setTextFormat(Qt::PlainText);
    history_->setStyleSheet(QStringLiteral("QLabel { color: palette(mid); }"));
    history_->hide();
    layout->addWidget(history_);

    question_ = new QPlainTextEdit(this);
    question_->setObjectName(QStringLiteral("questionEdit"));
    question_->setAccessibleName(QStringLiteral("Question"));
    question_->setPlaceholderText(QStringLiteral("Type a question…"));
    question_->setFixedHeight(72);
    question_->setTabChangesFocus(true);
    layout->addWidget(question_);
    connect(question_, &QPlainTextEdit::textChanged, this, [this] {
        if (!question_->toPlainText().trimmed().isEmpty()) clearMessage();
        Q_EMIT changed();
    });

    auto* tempRow = new QHBoxLayout;
    auto* tempLabel = new QLabel(QStringLiteral("Temperature"), this);
    tempLabel->setToolTip(QStringLiteral("0 = greedy (always the most likely token)"));
    temperatureSlider_ = new QSlider(Qt::Horizontal, this);
    temperatureSlider_->setObjectName(QStringLiteral("temperatureSlider"));
    temperatureSlider_->setAccessibleName(QStringLiteral("Temperature"));
    temperatureSlider_->setRange(0, kSliderSteps);
    temperatureSpin_ = new QDoubleSpinBox(this);
    temperatureSpin_->setObjectName(QStringLiteral("temperatureSpin"));
    temperatureSpin_->setAccessibleName(QStringLiteral("Temperature value"));
    temperatureSpin_->setRange(0.0, kMaxUiTemperature);
    temperatureSpin_->setDecimals(2);
    temperatureSpin_->setSingleStep(0.05);
    tempRow->addWidget(tempLabel);
    tempRow->addWidget(temperatureSlider_, 1);
    tempRow->addWidget(temperatureSpin_);
    layout->addLayout(tempRow);
    connect(temperatureSlider_, &QSlider::valueChanged, this, &QuestionCard::setTemperatureFromSlider);
    connect(temperatureSpin_, qOverload<double>(&QDoubleSpinBox::valueChanged), this,
            &QuestionCard::setTemperatureFromSpin);

    advancedToggle_ = new QToolButton(this);
    advancedToggle_->setObjectName(QStringLiteral("advancedToggle"));
    advancedToggle_->setAccessibleName(QStringLiteral("Advanced settings"));
    advancedToggle_->setText(QStringLiteral("Advanced settings"));
    advancedToggle_->setCheckable(true);
    advancedToggle_->setToolButtonStyle(Qt::ToolButtonTextBesideIcon);
    advancedToggle_->setArrowType(Qt::RightArrow);
    advancedToggle_->setAutoRaise(true);
    layout->addWidget(advancedToggle_);

    advanced_ = new QWidget(this);
    advanced_->setObjectName(QStringLiteral("advancedSettings"));
    auto* form = new QFormLayout(advanced_);
    form->setContentsMargins(12, 0, 0, 0);
    topP_ = new QDoubleSpinBox(advanced_);
    topP_->setObjectName(QStringLiteral("topPSpin"));
    topP_->setAccessibleName(QStringLiteral("Top-p"));
    topP_->setRange(0.01, 1.0);
    topP_->setSingleStep(0.05);
    topP_->setDecimals(2);
    topP_->setToolTip(QStringLiteral("Keep the smallest set of tokens with this much probability (1 = off)"));
    topK_ = new QSpinBox(advanced_);
    topK_->setObjectName(QStringLiteral("topKSpin"));
    topK_->setAccessibleName(QStringLiteral("Top-k"));
    topK_->setRange(0, 100000);
    topK_->setSpecialValueText(QStringLiteral("off"));
    minP_ = new QDoubleSpinBox(advanced_);
    minP_->setObjectName(QStringLiteral("minPSpin"));
    minP_->setAccessibleName(QStringLiteral("Min-p"));
    minP_->setRange(0.0, 0.99);
    minP_->setSingleStep(0.01);
    minP_->setDecimals(2);
    minP_->setSpecialValueText(QStringLiteral("off"));
    minP_->setToolTip(QStringLiteral("Drop tokens less likely than this fraction of the most likely one (0 = off)"));
    repetitionPenalty_ = new QDoubleSpinBox(advanced_);
    repetitionPenalty_->setObjectName(QStringLiteral("repetitionPenaltySpin"));
    repetitionPenalty_->setAccessibleName(QStringLiteral("Repetition penalty"));
    repetitionPenalty_->setRange(0.5, 3.0);
    repetitionPenalty_->setSingleStep(0.05);
    repetitionPenalty_->setDecimals(2);
    repetitionPenalty_->setValue(1.0);
    repetitionPenalty_->setToolTip(QStringLiteral("Make tokens already in the prompt or answer less likely (> 1) "
                                                  "or more likely (< 1), as transformers does (1 = off)"));
    maxNewTokens_ = new QSpinBox(advanced_);
    maxNewTokens_->setObjectName(QStringLiteral("maxNewTokensSpin"));
    maxNewTokens_->setAccessibleName(QStringLiteral("Max new tokens"));
    maxNewTokens_->setRange(1, 32768);
    seed_ = new QLineEdit(advanced_);
    seed_->setObjectName(QStringLiteral("seedEdit"));
    seed_->setAccessibleName(QStringLiteral("Seed"));
    seed_->setPlaceholderText(QStringLiteral("random"));
    seed_->setValidator(new QRegularExpressionValidator(QRegularExpression(QStringLiteral("[0-9]{0,20}")), seed_));
    stops_ = new QLineEdit(advanced_);
    stops_->setObjectName(QStringLiteral("stopStringsEdit"));
    stops_->setAccessibleName(QStringLiteral("Stop strings"));
    stops_->setPlaceholderText(QStringLiteral("none"));
    stops_->setToolTip(QStringLiteral("Stop strings, separated by |"));
    lora_ = new QComboBox(advanced_);
    lora_->setObjectName(QStringLiteral("cardLoraCombo"));
    lora_->setAccessibleName(QStringLiteral("LoRA for this card"));
    lora_->addItems({QStringLiteral("as the toolbar"), QStringLiteral("on"), QStringLiteral("off")});
    lora_->setToolTip(QStringLiteral("LoRA adapter for this card. Cards that differ run side by side in one pack "
                                     "(per card); when all agree the adapter is merged into the weights."));
    form->addRow(QStringLiteral("Top-p"), topP_);
    form->addRow(QStringLiteral("Top-k"), topK_);
    form->addRow(QStringLiteral("Min-p"), minP_);
    form->addRow(QStringLiteral("Repetition penalty"), repetitionPenalty_);
    form->addRow(QStringLiteral("Max new tokens"), maxNewTokens_);
    form->addRow(QStringLiteral("Seed"), seed_);
    form->addRow(QStringLiteral("Stop strings"), stops_);
    form->addRow(QStringLiteral("LoRA"), lora_);
    engine_ = new QComboBox(advanced_);
    engine_->setObjectName(QStringLiteral("cardEngineCombo"));
    engine_->setAccessibleName(QStringLiteral("Engine of this card"));
    engine_->addItem(QStringLiteral("Local model"), QString());
    engine_->setToolTip(QStringLiteral("Where this card is answered: the local model (every local card in one pack) "
                                       "or a saved server connection (Engine ▸ Connections…), one request per card."));
    form->addRow(QStringLiteral("Engine"), engine_);
    system_ = new QPlainTextEdit(advanced_);
    system_->setObjectName(QStringLiteral("cardSystemEdit"));
    system_->setAccessibleName(QStringLiteral("System prompt of this card"));
    system_->setPlaceholderText(QStringLiteral("the board's"));
    system_->setToolTip(QStringLiteral("This card's own system message, instead of the board's (empty: the board's)"));
    system_->setTabChangesFocus(true);
    system_->setFixedHeight(44);
    form->addRow(QStringLiteral("System prompt"), system_);
    // The settings scroll inside the card when it is short, so the answer and the footer
    // (stats, Stop, Sweep, Replay, Copy) stay in view whatever is expanded.
    advancedScroll_ = new QScrollArea(this);
    advancedScroll_->setObjectName(QStringLiteral("advancedScroll"));
    advancedScroll_->setFrameShape(QFrame::NoFrame);
    advancedScroll_->setWidgetResizable(true);
    advancedScroll_->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    advancedScroll_->setWidget(advanced_);
    advancedScroll_->setMaximumHeight(advanced_->sizeHint().height() + 2);
    advancedScroll_->setMinimumHeight(60);
    advancedScroll_->setVisible(false);
    layout->addWidget(advancedScroll_);
    connect(advancedToggle_, &QToolButton::toggled, this, [this](bool on) {
        advancedScroll_->setVisible(on);
        advancedToggle_->setArrowType(on ? Qt::DownArrow : Qt::RightArrow);
    });
    const auto emitChanged = [this] { Q_EMIT changed(); };
    connect(this, &QuestionCard::changed, this, &QuestionCard::updateFooter);  // "stale" follows edits
    connect(topP_, qOverload<double>(&QDoubleSpinBox::valueChanged), this, emitChanged);
    connect(topK_, qOverload<int>(&QSpinBox::valueChanged), this, emitChanged);
    connect(minP_, qOverload<double>(&QDoubleSpinBox::valueChanged), this, emitChanged);
    connect(repetitionPenalty_, qOverload<double>(&QDoubleSpinBox::valueChanged), this, emitChanged);
    connect(maxNewTokens_, qOverload<int>(&QSpinBox::valueChanged), this, emitChanged);
    connect(seed_, &QLineEdit::textChanged, this, emitChanged);
    connect(stops_, &QLineEdit::textChanged, this, emitChanged);
    connect(lora_, qOverload<int>(&QComboBox::currentIndexChanged), this, emitChanged);
    connect(engine_, qOverload<int>(&QComboBox::currentIndexChanged), this, emitChanged);
    connect(system_, &QPlainTextEdit::textChanged, this, emitChanged);

    message_ = new QLabel(this);
    message_->setObjectName(QStringLiteral("cardMessage"));
    message_->setWordWrap(true);
    message_->setVisible(false);
    layout->addWidget(message_);

    answerView_ = new QTextEdit(this);
    answerView_->setObjectName(QStringLiteral("answerView"));
    answerView_->setAccessibleName(QStringLiteral("Answer"));
    answerView_->setReadOnly(true);
    answerView_->setAcceptRichText(false);
    answerView_->setMinimumHeight(60);
    answerView_->setPlaceholderText(QStringLiteral("The answer streams in here."));
    layout->addWidget(answerView_, 1);

    auto* footerRow = new QHBoxLayout;
    footer_ = new QLabel(this);
    footer_->setObjectName(QStringLiteral("cardFooter"));
    footer_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    footer_->setWordWrap(true);
    layout->addWidget(footer_);
    stop_ = toolButton(QStringLiteral("Stop"), QStringLiteral("Stop this card only"), QStringLiteral("cardStopButton"), this);
    stop_->setEnabled(false);
    followUp_ = toolButton(QStringLiteral("Follow up"),
                           QStringLiteral("Ask a follow-up: this question and its answer become the conversation so far"),
                           QStringLiteral("followUpButton"), this);
    followUp_->setEnabled(false);
    runCard_ = toolButton(QStringLiteral("Run"), QStringLiteral("Answer this card (it joins the pack if one is running)"),
                          QStringLiteral("cardRunButton"), this);
    auto* copy = toolButton(QStringLiteral("Copy"), QStringLiteral("Copy the answer"), QStringLiteral("copyButton"), this);
    footerRow->addStretch(1);
    footerRow->addWidget(followUp_);
    footerRow->addWidget(runCard_);
    footerRow->addWidget(stop_);
    footerRow->addWidget(sweep);
    footerRow->addWidget(replay_);
    footerRow->addWidget(copy);
    layout->addLayout(footerRow);
    connect(stop_, &QToolButton::clicked, this, &QuestionCard::stopRequested);
    connect(runCard_, &QToolButton::clicked, this, &QuestionCard::runRequested);
    connect(followUp_, &QToolButton::clicked, this, &QuestionCard::followUpRequested);
    connect(copy, &QToolButton::clicked, this, [this] { QApplication::clipboard()->setText(answer_.text); });

    // Tab follows what the eye does: the header left to right, the question and its
    // settings top to bottom, the answer, then the footer's buttons.
    advancedScroll_->setFocusPolicy(Qt::NoFocus);
    const QList<QWidget*> order{left,   right,          prompt,        dup,    remove,       question_,
                                temperatureSlider_,     temperatureSpin_,      advancedToggle_, topP_,
                                topK_,  minP_,          repetitionPenalty_,    maxNewTokens_, seed_,
                                stops_, lora_,          engine_,       system_,     answerView_, followUp_, runCard_, stop_, sweep,
                                replay_, copy};
    for (int i = 1; i < order.size(); ++i) setTabOrder(order[i - 1], order[i]);

    setSettings(CardSettings{});
    setNumber(1);
    updateFooter();
}

void QuestionCard::setTemperatureFromSlider(int value) {
    if (syncing_) return;
    syncing_ = true;
    temperatureSpin_->setValue(value / 100.0);
    syncing_ = false;
    Q_EMIT changed();
}

void QuestionCard::setTemperatureFromSpin(double value) {
    if (syncing_) return;
    syncing_ = true;
    temperatureSlider_->setValue(qRound(value * 100.0));
    syncing_ = false;
    Q_EMIT changed();
}

CardSettings QuestionCard::settings() const {
    CardSettings s;
    s.history = turns_;
    s.question = question_->toPlainText();
    s.temperature = temperatureSpin_->value();
    s.topP = topP_->value();
    s.topK = topK_->value();
    s.minP = minP_->value();
    s.repetitionPenalty = repetitionPenalty_->value();
    s.maxNewTokens = maxNewTokens_->value();
    bool ok = false;
    const quint64 seed = seed_->text().toULongLong(&ok);
    if (ok) s.seed = seed;
    for (const QString& stop : stops_->text().split(kStopSeparator, Qt::SkipEmptyParts)) s.stopStrings.push_back(stop);
    if (lora_->currentIndex() > 0) s.lora = lora_->currentIndex() == 1;
    s.system = system_->toPlainText();
    s.engine = engine_->currentData().toString();
    return s;
}

void QuestionCard::setEngineChoices(const QStringList& connections) {
    const QString current = engine_->currentData().toString();
    const QSignalBlocker quiet(engine_);
    engine_->clear();
    engine_->addItem(QStringLiteral("Local model"), QString());
    for (const QString& name : connections) engine_->addItem(name, name);
    selectEngine(current);
}

// A connection the list lacks (removed, or a workspace from another machine) stays the
// card's choice, marked: running it says so instead of quietly running locally.
void QuestionCard::selectEngine(const QString& name) {
    int i = engine_->findData(name);
    if (i < 0) {
        engine_->addItem(QStringLiteral("%1 (not saved here)").arg(name), name);
        i = engine_->count() - 1;
    }
    engine_->setCurrentIndex(i);
}

void QuestionCard::setSettings(const CardSettings& s) {
    const bool newHistory = turns_ != s.history;
    turns_ = s.history;
    showHistory();
    if (question_->toPlainText() != s.question) question_->setPlainText(s.question);
    else if (newHistory) Q_EMIT changed();
    // Values from a file may be outside what the controls hold (or not numbers at all):
    // the card says which one it changed instead of quietly running with another.
    const CardSettings defaults;
    QStringList changed;
    const auto fit = [&changed](const QString& name, double value, double low, double high, double fallback) {
        if (std::isfinite(value) && value >= low && value <= high) return value;
        const double used = std::isfinite(value) ? std::clamp(value, low, high) : fallback;
        changed << QStringLiteral("%1 %2 is outside %3 to %4, using %5")
                       .arg(name, shortest(value), shortest(low), shortest(high), shortest(used));
        return used;
    };
    temperatureSpin_->setValue(fit(QStringLiteral("temperature"), s.temperature, 0.0, kMaxUiTemperature, defaults.temperature));
    topP_->setValue(fit(QStringLiteral("top-p"), s.topP, topP_->minimum(), topP_->maximum(), defaults.topP));
    topK_->setValue(static_cast<int>(fit(QStringLiteral("top-k"), s.topK, topK_->minimum(), topK_->maximum(), defaults.topK)));
    minP_->setValue(fit(QStringLiteral("min-p"), s.minP, minP_->minimum(), minP_->maximum(), defaults.minP));
    repetitionPenalty_->setValue(fit(QStringLiteral("repetition penalty"), s.repetitionPenalty, repetitionPenalty_->minimum(),
                                     repetitionPenalty_->maximum(), defaults.repetitionPenalty));
    maxNewTokens_->setValue(static_cast<int>(fit(QStringLiteral("max new tokens"), s.maxNewTokens, maxNewTokens_->minimum(),
                                                 maxNewTokens_->maximum(), defaults.maxNewTokens)));
    if (!changed.isEmpty()) showMessage(QStringLiteral("Changed settings: %1.").arg(changed.join(QStringLiteral("; "))));
    seed_->setText(s.seed ? QString::number(*s.seed) : QString());
    stops_->setText(s.stopStrings.join(kStopSeparator));
    lora_->setCurrentIndex(s.lora ? (*s.lora ? 1 : 2) : 0);
    if (system_->toPlainText() != s.system) system_->setPlainText(s.system);
    selectEngine(s.engine);
}

namespace {

// A local answer replays by its token ids; a server's by its text (servers stream no ids).
bool replayable(const CardAnswer& a) {
    if (a.ranWith && !a.ranWith->engine.isEmpty()) return !a.text.isEmpty() && a.finish != QLatin1String("failed");
    return !a.tokens.isEmpty();
}

}  // namespace

void QuestionCard::setState(const CardState& state) {
    setSettings(state.settings);
    answer_ = state.answer;
    showAnswerText();
    replay_->setEnabled(!answer_.finish.isEmpty() && replayable(answer_));
    updateFooter();
    explainFinish();
}

void QuestionCard::showHistory() {
    history_->setVisible(!turns_.isEmpty());
    if (turns_.isEmpty()) return;
    // The last exchange in short on the card; the whole conversation on hover.
    constexpr int kShort = 60;
    const auto shortened = [](QString t) {
        t = t.simplified();
        return t.size() > kShort ? t.left(kShort) + QStringLiteral("…") : t;
    };
    const CardTurn& last = turns_.back();
    history_->setText(QStringLiteral("Turn %1 · before: “%2” → “%3”")
                          .arg(turns_.size() + 1)
                          .arg(shortened(last.question), shortened(last.answer)));
    QStringList whole;
    for (const CardTurn& t : turns_) whole << QStringLiteral("You: %1\nModel: %2").arg(t.question, t.answer);
    history_->setToolTip(whole.join(QStringLiteral("\n\n")));
}

void QuestionCard::updateFollowUp() {
    followUp_->setEnabled(!running_ && !answer_.text.isEmpty() && !answer_.finish.isEmpty() &&
                          answer_.finish != QLatin1String(kev::to_string(kev::FinishReason::Failed)));
}

void QuestionCard::setIndex(int index) { index_ = index; }

void QuestionCard::setNumber(int number, int from) {
    // Unchanged: nothing to do (a style sheet change repolishes the whole card).
    if (number == number_ && from == from_ && !title_->text().isEmpty()) return;
    number_ = number;
    from_ = from;
    title_->setText(from > 0 ? QStringLiteral("<b>Card %1</b> · from %2").arg(number).arg(from)
                             : QStringLiteral("<b>Card %1</b>").arg(number));
    const QColor c = cardColor(number - 1);
    title_->setStyleSheet(QStringLiteral("QLabel { background: %1; padding: 2px 6px; border-radius: 3px; }").arg(c.name()));
}

void QuestionCard::startAnswer() {
    answer_ = CardAnswer{};
    answerView_->clear();
    clearMessage();
    replay_->setEnabled(false);
    updateFooter();
}

void QuestionCard::appendAnswer(const QString& delta) {
    if (delta.isEmpty()) return;
    answer_.text += delta;
    QScrollBar* bar = answerView_->verticalScrollBar();
    const bool atEnd = bar->value() == bar->maximum();
    QTextCursor cursor(answerView_->document());
    cursor.movePosition(QTextCursor::End);
    cursor.insertText(delta);
    if (atEnd) bar->setValue(bar->maximum());
}

void QuestionCard::setProgress(qint64 generated, double tokensPerS, double ttftS) {
    answer_.generatedTokens = generated;
    answer_.tokensPerS = tokensPerS;
    answer_.timeToFirstTokenS = ttftS;
    updateFooter();
}

void QuestionCard::finishAnswer(const CardAnswer& answer) {
    // The final text may be shorter than what streamed (a stop string is cut off).
    answer_ = answer;
    showAnswerText();
    replay_->setEnabled(replayable(answer_));
    updateFooter();
    explainFinish();
}

void QuestionCard::explainFinish() {
    // Without this the card would end with an empty or cut answer and no reason.
    if (answer_.finish != QString::fromLatin1(kev::to_string(kev::FinishReason::NonFinite))) return;
    showMessage(QStringLiteral("Stopped: the model produced NaN/Inf at token %1 (its logits were not finite numbers), "
                               "so nothing more could be sampled. The model's weights or the chosen precision are "
                               "broken; try fp32 or another model file.")
                    .arg(answer_.generatedTokens + 1));
}

void QuestionCard::setRenderMarkdown(bool on) {
    if (markdown_ == on) return;
    markdown_ = on;
    showAnswerText();
}

void QuestionCard::showAnswerText() {
    // Model output is untrusted: Markdown without raw HTML, so an answer cannot restyle
    // the card or pull in resources.
    constexpr auto kFeatures =
        QTextDocument::MarkdownFeatures(QTextDocument::MarkdownDialectGitHub | QTextDocument::MarkdownNoHTML);
    if (markdown_ && !running_) answerView_->document()->setMarkdown(answer_.text, kFeatures);
    else answerView_->setPlainText(answer_.text);
}

void QuestionCard::setRunning(bool running) {
    const bool ended = running_ && !running;
    running_ = running;
    if (ended && markdown_) showAnswerText();
    stop_->setEnabled(running);
    runCard_->setEnabled(!running);
    updateFooter();
}

QString QuestionCard::footerText() const { return footer_->text(); }

void QuestionCard::updateFooter() {
    updateFollowUp();
    if (running_ && answer_.generatedTokens == 0) {
        footer_->setText(QStringLiteral("waiting for the first token…"));
        return;
    }
    if (answer_.generatedTokens == 0 && answer_.finish.isEmpty()) {
        footer_->setText(QString());
        return;
    }
    QString text = QStringLiteral("%1 tokens · %2 tok/s · TTFT %3 s")
                       .arg(answer_.generatedTokens)
                       .arg(answer_.tokensPerS, 0, 'f', 1)
                       .arg(answer_.timeToFirstTokenS, 0, 'f', 2);
    if (!answer_.finish.isEmpty()) text += QStringLiteral(" · ") + answer_.finish;
    // Edited after it answered: the answer no longer belongs to what the card shows
    // (Replay still replays what it ran with).
    if (!running_ && answerIsStale(answer_, settings())) text += QStringLiteral(" · stale: edited since");
    footer_->setText(text);
    if (answer_.seedUsed) footer_->setToolTip(QStringLiteral("seed %1").arg(*answer_.seedUsed));
}

void QuestionCard::showMessage(const QString& text, Tone tone) {
    message_->setText(text);
    message_->setStyleSheet(tone == Tone::Error ? QStringLiteral("QLabel { color: #b00020; font-weight: bold; }")
                                    : QStringLiteral("QLabel { color: #1b5e20; }"));
    message_->setVisible(true);
}

void QuestionCard::clearMessage() {
    message_->clear();
    message_->setVisible(false);
}

QString QuestionCard::messageText() const { return message_->text(); }

}  // namespace kevui
