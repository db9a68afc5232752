// The board as a document: every card's settings, answer and identity (number, the card
// it came from), the board's system prompt and shared context, as plain values. It is
// the one place the board lives. The card widgets are views of it: they show what it
// holds and report the user's edits into it; runs write answers into it; saving, the
// exports, bundles, the comparison view and undo read it. Every change is a signal, so
// views follow whoever made it (an edit, a run, an undo, an open).
#pragma once

#include <QObject>
#include <QString>

#include "card_state.h"

namespace kevui {

class BoardDocument : public QObject {
    Q_OBJECT
public:
    explicit BoardDocument(QObject* parent = nullptr);

    const Workspace& board() const { return board_; }
    const QVector<CardState>& cards() const { return board_.cards; }
    int size() const { return static_cast<int>(board_.cards.size()); }
    int indexOf(int number) const;          // -1: no such card
    const CardState* card(int number) const;  // null: no such card

    // Replaces the whole board. Card numbers are kept where they are valid (1 and up) and
    // unique; the others get new ones.
    void reset(const Workspace& board);
    // Puts `state` at position `at` (clamped to the board) under its number when that is
    // free, else under a new one; returns the number.
    int insertCard(int at, CardState state);
    // Removes a card; returns it as it was (an empty state with number 0 when none).
    CardState takeCard(int number);
    bool moveCard(int number, int to);

    void setSettings(int number, const CardSettings& settings);
    void setSystem(const QString& text);
    void setSharedContext(const QString& text);

    // Answers, as a run writes them: started (empty), streamed text and progress, then
    // the whole answer (or the previous one put back).
    void startAnswer(int number);
    void appendAnswer(int number, const QString& delta);
    void setProgress(int number, qint64 generated, double tokensPerS, double ttftS);
    void setAnswer(int number, const CardAnswer& answer);

Q_SIGNALS:
    void wasReset();
    void cardInserted(int at);
    void cardRemoved(int number);
    void cardMoved(int number, int to);
    void settingsChanged(int number);
    void promptChanged();  // system prompt or shared context
    void answerStarted(int number);
    void answerAppended(int number, const QString& delta);
    void progressChanged(int number);
    void answerChanged(int number);
    void changed();  // after any of the above

private:
    CardState* find(int number);
    int freshNumber();

    Workspace board_;
    int nextNumber_ = 1;  // numbers are never reused on one board (undo brings cards back under theirs)
};

}  // namespace kevui
