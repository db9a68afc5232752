// Undo and redo for the board. Every change is recorded as the board before and after
// it (plain Workspace values, shared copy-on-write, so a step costs little memory):
// adding, duplicating, sweeping, moving and removing cards, editing a card or the board's
// prompt, and replacing the whole board (opening a question set). Edits of one card, or
// of one board field, made in a burst merge into one step.
//
// Two ways to apply a step: Cards reconciles the card widgets with the target by card
// number (a card that still exists keeps its current answer, so undoing an edit made
// before a run does not bring the old answer back; a removed card comes back with the
// answer it had); Replace swaps in the whole target board, answers included.
#pragma once

#include <QElapsedTimer>
#include <QUndoCommand>

#include <functional>

#include "card_state.h"

namespace kevui {

enum class BoardChange { Cards, Replace };

// Merge keys of edits: a card's number (> 0), or one of these board fields. 0: no merge.
constexpr int kBoardSystemEdit = -1;
constexpr int kSharedContextEdit = -2;

class BoardCommand : public QUndoCommand {
public:
    using Apply = std::function<void(const Workspace&, BoardChange)>;

    // Pushed after the change is made: the first redo() does nothing.
    BoardCommand(Apply apply, Workspace before, Workspace after, BoardChange kind, const QString& text,
                 int mergeKey = 0);

    void undo() override;
    void redo() override;
    int id() const override { return mergeKey_ != 0 ? 1 : -1; }
    bool mergeWith(const QUndoCommand* other) override;

    // Edits of one key further apart than this are separate steps.
    static constexpr qint64 kMergeMs = 3000;

private:
    Apply apply_;
    Workspace before_;
    Workspace after_;
    BoardChange kind_;
    int mergeKey_;
    bool done_ = true;  // the change is already on the board when pushed
    QElapsedTimer lastEdit_;
};

// True when the boards ask the same: the same cards (numbers, order, settings), system
// prompt and shared context. Answers are not compared.
bool sameInputs(const Workspace& a, const Workspace& b);

}  // namespace kevui
