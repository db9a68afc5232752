// The comparison view: two or more cards' answers aligned token by token, each token
// coloured by its probability or by the entropy of the step, the first divergence
// marked, and the alternatives the model weighed in each token's tooltip.
//
//   ┌ cards ──────┐ Colour tokens by (•) probability ( ) entropy ( ) none  likely ▭▭▭ p ≤ 1 %
//   │ [x] Card 2  │ Cards 2 and 5 part at token 4, after “The·capital·is”: card 2 “·Paris.” — …
//   │ [ ] Card 3  │  1             ▼ part here (4)
//   │ [x] Card 5  │  Card 2 │The│·capital│·is│·Paris│.│
//   └─────────────┘  Card 5 │The│·capital│·is│·Lyon │,│   <- boxed: where they part
//
// Lines wrap: each line shows the same positions for every selected card, so a column
// is one position. Answers saved without token details (older workspaces) are aligned
// by their token ids, shown as ids, without colours; the view says so.
#pragma once

#include <QDialog>
#include <QList>
#include <QVector>

#include "card_state.h"
#include "token_align.h"

class QButtonGroup;
class QLabel;
class QListWidget;
class QScrollArea;

namespace kevui {

class TokenGrid;

class ComparisonDialog : public QDialog {
    Q_OBJECT
public:
    // Non-modal; shows `cards` as they are now (a copy). Every card with an answer starts
    // ticked.
    ComparisonDialog(const QVector<CardState>& cards, QWidget* parent = nullptr);
    ~ComparisonDialog() override;

    // Replaces the cards (after a run); ticked cards that are still there stay ticked.
    void setCards(const QVector<CardState>& cards);
    // Ticks exactly these cards (by number; numbers not on the board are ignored).
    void selectCards(const QList<int>& numbers);
    QList<int> selectedCards() const;  // numbers, in board order

    void setColoring(TokenColoring mode);
    TokenColoring coloring() const { return coloring_; }

    // What the view shows (for tests and for the lead's wiring). Positions count from 0;
    // the view itself numbers them from 1.
    const TokenAlignment& alignment() const { return alignment_; }
    int divergence() const { return alignment_.divergence; }  // -1: none
    QString divergenceText() const;  // "Cards 2 and 5 part at token 4, after …"
    QString noteText() const;        // about answers without details, empty when none
    // Card `number`'s cell at `position`: its token's text with whitespace visible ("·Paris"),
    // "#1234" without details, "∎" just past an answer that ended, "" where there is none.
    QString cellText(int number, int position) const;
    QString toolTipAt(int number, int position) const;  // rich text; "" where there is no cell
    QColor cellColor(int number, int position) const;   // invalid: not coloured
    QRect cellRect(int number, int position) const;     // in grid() coordinates; null if none
    QWidget* grid() const;

    QSize sizeHint() const override { return {1000, 600}; }

private:
    void fillCardList();
    void rebuild();
    void updateLegend();

    QVector<CardState> cards_;
    TokenColoring coloring_ = TokenColoring::Probability;
    TokenAlignment alignment_;
    QListWidget* list_ = nullptr;
    QButtonGroup* coloringButtons_ = nullptr;
    QLabel* legend_ = nullptr;      // the colour scale
    QLabel* legendLow_ = nullptr;   // what its white end means
    QLabel* legendHigh_ = nullptr;  // what its red end means
    QLabel* divergenceLabel_ = nullptr;
    QLabel* note_ = nullptr;
    QScrollArea* scroll_ = nullptr;
    TokenGrid* grid_ = nullptr;
};

}  // namespace kevui
