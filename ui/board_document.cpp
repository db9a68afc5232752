#include "board_document.h"

#include <QSet>

#include <algorithm>

namespace kevui {

BoardDocument::BoardDocument(QObject* parent) : QObject(parent) {}

int BoardDocument::indexOf(int number) const {
    for (int i = 0; i < size(); ++i)
        if (board_.cards[i].number == number) return i;
    return -1;
}

const CardState* BoardDocument::card(int number) const {
    const int i = indexOf(number);
    return i < 0 ? nullptr : &board_.cards[i];
}

CardState* BoardDocument::find(int number) {
    const int i = indexOf(number);
    return i < 0 ? nullptr : &board_.cards[i];
}

int BoardDocument::freshNumber() { return nextNumber_++; }

void BoardDocument::reset(const Workspace& board) {
    board_ = board;
    nextNumber_ = 1;
    for (const CardState& c : board_.cards) nextNumber_ = std::max(nextNumber_, c.number + 1);
    QSet<int> seen;
    for (CardState& c : board_.cards) {
        if (c.number <= 0 || seen.contains(c.number)) c.number = freshNumber();
        seen.insert(c.number);
    }
    Q_EMIT wasReset();
    Q_EMIT changed();
}

int BoardDocument::insertCard(int at, CardState state) {
    if (state.number <= 0 || indexOf(state.number) >= 0) state.number = freshNumber();
    nextNumber_ = std::max(nextNumber_, state.number + 1);
    at = std::clamp(at, 0, size());
    board_.cards.insert(at, state);
    Q_EMIT cardInserted(at);
    Q_EMIT changed();
    return state.number;
}

CardState BoardDocument::takeCard(int number) {
    const int i = indexOf(number);
    if (i < 0) return CardState{};
    const CardState taken = board_.cards.takeAt(i);
    Q_EMIT cardRemoved(number);
    Q_EMIT changed();
    return taken;
}

bool BoardDocument::moveCard(int number, int to) {
    const int from = indexOf(number);
    if (from < 0 || to < 0 || to >= size() || from == to) return false;
    board_.cards.move(from, to);
    Q_EMIT cardMoved(number, to);
    Q_EMIT changed();
    return true;
}

void BoardDocument::setSettings(int number, const CardSettings& settings) {
    CardState* c = find(number);
    if (!c || c->settings == settings) return;
    c->settings = settings;
    Q_EMIT settingsChanged(number);
    Q_EMIT changed();
}

void BoardDocument::setSystem(const QString& text) {
    if (board_.system == text) return;
    board_.system = text;
    Q_EMIT promptChanged();
    Q_EMIT changed();
}

void BoardDocument::setSharedContext(const QString& text) {
    if (board_.sharedContext == text) return;
    board_.sharedContext = text;
    Q_EMIT promptChanged();
    Q_EMIT changed();
}

void BoardDocument::startAnswer(int number) {
    CardState* c = find(number);
    if (!c) return;
    c->answer = CardAnswer{};
    Q_EMIT answerStarted(number);
    Q_EMIT changed();
}

void BoardDocument::appendAnswer(int number, const QString& delta) {
    CardState* c = find(number);
    if (!c || delta.isEmpty()) return;
    c->answer.text += delta;
    Q_EMIT answerAppended(number, delta);
    Q_EMIT changed();
}

void BoardDocument::setProgress(int number, qint64 generated, double tokensPerS, double ttftS) {
    CardState* c = find(number);
    if (!c) return;
    c->answer.generatedTokens = generated;
    c->answer.tokensPerS = tokensPerS;
    c->answer.timeToFirstTokenS = ttftS;
    Q_EMIT progressChanged(number);
}

void BoardDocument::setAnswer(int number, const CardAnswer& answer) {
    CardState* c = find(number);
    if (!c) return;
    c->answer = answer;
    Q_EMIT answerChanged(number);
    Q_EMIT changed();
}

}  // namespace kevui
