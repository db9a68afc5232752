#include "board_history.h"

#include <utility>

namespace kevui {

BoardCommand::BoardCommand(Apply apply, Workspace before, Workspace after, BoardChange kind, const QString& text,
                           int mergeKey)
    : QUndoCommand(text),
      apply_(std::move(apply)),
      before_(std::move(before)),
      after_(std::move(after)),
      kind_(kind),
      mergeKey_(mergeKey) {
    lastEdit_.start();
}

void BoardCommand::undo() {
    apply_(before_, kind_);
    done_ = false;
}

void BoardCommand::redo() {
    if (done_) return;  // pushed after the change was made
    apply_(after_, kind_);
    done_ = true;
}

bool BoardCommand::mergeWith(const QUndoCommand* other) {
    const auto* next = dynamic_cast<const BoardCommand*>(other);
    if (!next || next->mergeKey_ != mergeKey_ || mergeKey_ == 0 || next->kind_ != kind_) return false;
    if (lastEdit_.elapsed() > kMergeMs) return false;
    after_ = next->after_;
    lastEdit_.restart();
    return true;
}

bool sameInputs(const Workspace& a, const Workspace& b) {
    if (a.sharedContext != b.sharedContext || a.system != b.system || a.cards.size() != b.cards.size()) return false;
    for (qsizetype i = 0; i < a.cards.size(); ++i) {
        const CardState& x = a.cards[i];
        const CardState& y = b.cards[i];
        if (x.number != y.number || x.from != y.from || !(x.settings == y.settings)) return false;
    }
    return true;
}

}  // namespace kevui
