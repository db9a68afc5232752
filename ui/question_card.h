// A question card: a view of one card of the board (BoardDocument). It shows the card's
// settings and answer as the document holds them and reports what the user changes;
// the window writes those edits into the document. It holds no engine logic.
#pragma once

#include <QFrame>

#include "card_state.h"

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QLineEdit;
class QPlainTextEdit;
class QScrollArea;
class QTextEdit;
class QSlider;
class QSpinBox;
class QToolButton;
class QWidget;

namespace kevui {

class QuestionCard : public QFrame {
    Q_OBJECT
public:
    explicit QuestionCard(QWidget* parent = nullptr);

    CardSettings settings() const;
    void setSettings(const CardSettings& s);
    CardState state() const { return CardState{settings(), answer_, number_, from_}; }
    void setState(const CardState& state);

    // The card's place in the row (1-based in the header) and its colour.
    void setIndex(int index);
    int index() const { return index_; }  // position in the row
    // The card's lasting identity: "Card <number>" in its colour, and the card it came
    // from (a duplicate or a sweep variant), shown beside it.
    void setNumber(int number, int from = 0);
    int number() const { return number_; }
    int from() const { return from_; }

    // Generation feedback.
    void startAnswer();                          // clears the answer, shows "waiting"
    void appendAnswer(const QString& delta);
    void setProgress(qint64 generated, double tokensPerS, double ttftS);
    void finishAnswer(const CardAnswer& answer); // final text, stats and finish reason
    void setRunning(bool running);
    bool isRunning() const { return running_; }
    QString answerText() const { return answer_.text; }
    const CardAnswer& answer() const { return answer_; }
    QString footerText() const;

    // A specific message on this card (empty question, invalid setting, replay result).
    void showMessage(const QString& text, Tone tone = Tone::Error);
    void clearMessage();
    QString messageText() const;

    QPlainTextEdit* questionEdit() const { return question_; }
    QTextEdit* answerView() const { return answerView_; }

    // Finished answers shown as Markdown (headings, lists, code blocks) or as raw text.
    // While an answer streams it is raw text.
    void setRenderMarkdown(bool on);
    // The saved connections a card may target beside the local model (Engine ▸ Connections).
    void setEngineChoices(const QStringList& connections);
    bool rendersMarkdown() const { return markdown_; }

Q_SIGNALS:
    void changed();
    void duplicateRequested();
    void removeRequested();
    void sweepRequested();
    void replayRequested();
    void runRequested();            // answer this card (joining a running pack)
    void followUpRequested();       // its question and answer become a turn; a new question follows
    void stopRequested();
    void moveRequested(int delta);  // -1: one place left, +1: right
    void promptRequested();         // show the prompt as the model sees it

private:
    void updateFooter();
    void updateFollowUp();
    void showHistory();
    void showAnswerText();  // the answer, as Markdown or raw text
    void explainFinish();  // a visible reason for a finish that is a failure
    void setTemperatureFromSlider(int value);
    void setTemperatureFromSpin(double value);
    void selectEngine(const QString& name);

    int index_ = 0;
    int number_ = 0;
    int from_ = 0;
    CardAnswer answer_;
    bool running_ = false;
    bool syncing_ = false;  // true while one temperature control follows the other
    bool markdown_ = true;

    QLabel* title_ = nullptr;
    QPlainTextEdit* question_ = nullptr;
    QSlider* temperatureSlider_ = nullptr;
    QDoubleSpinBox* temperatureSpin_ = nullptr;
    QToolButton* advancedToggle_ = nullptr;
    QWidget* advanced_ = nullptr;
    QScrollArea* advancedScroll_ = nullptr;
    QDoubleSpinBox* topP_ = nullptr;
    QSpinBox* topK_ = nullptr;
    QDoubleSpinBox* minP_ = nullptr;
    QDoubleSpinBox* repetitionPenalty_ = nullptr;
    QSpinBox* maxNewTokens_ = nullptr;
    QLineEdit* seed_ = nullptr;
    QLineEdit* stops_ = nullptr;
    QComboBox* lora_ = nullptr;  // as the toolbar / on / off
    QComboBox* engine_ = nullptr;  // "Local model" (data "") or a connection (data: its name)
    QPlainTextEdit* system_ = nullptr;  // the card's own system prompt
    QLabel* message_ = nullptr;
    QTextEdit* answerView_ = nullptr;
    QLabel* footer_ = nullptr;
    QToolButton* stop_ = nullptr;
    QToolButton* runCard_ = nullptr;
    QToolButton* followUp_ = nullptr;
    QLabel* history_ = nullptr;          // the conversation's earlier turns, when there are any
    QVector<CardTurn> turns_;
    QToolButton* replay_ = nullptr;
};

}  // namespace kevui
