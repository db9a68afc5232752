// Answers side by side, token by token: the pure part of the comparison view (no
// widgets), so it can be tested on hand-made answers.
//
// Position i holds every answer's token i. The answers part at the first position where
// their ids are not all equal; an answer that has ended counts as different from one
// that goes on:
//
//   position      0     1      2       3
//   card 2       The  ·cap   ital    ·is
//   card 5       The  ·cap   ital    ·was      <- first divergence: 3
//   card 7       The  ·cap   ital             <- ended: also parts at 3
#pragma once

#include <QColor>
#include <QString>
#include <QVector>

#include "token_view.h"

namespace kevui {

struct TokenAlignment {
    int positions = 0;     // the longest answer's length: the columns to show
    int divergence = -1;   // the first position where the answers part; -1: they never do
    // At the divergence, the answers grouped by what they have there (indices into the
    // input, in order of first appearance); an answer that has ended there is a group
    // of its own, marked by `endedGroup`. Empty when there is no divergence.
    QVector<QVector<int>> groups;
    int endedGroup = -1;   // the index in `groups` of the answers that ended there; -1: none
};

// Aligns answers given as their token ids (two or more for a divergence; fewer never
// part).
TokenAlignment alignTokens(const QVector<QVector<int>>& answers);

// How token cells are coloured.
enum class TokenColoring { None, Probability, Entropy };

// The background of a token cell: neutral (near white) for a sure or unremarkable token,
// through amber to red for a surprising or uncertain one; black text stays readable on
// every shade. `heat` in [0, 1] (clamped) is how far along that scale.
QColor heatColor(double heat);

// Probability p of the chosen token -> heat, on a log scale (what a reader notices is
// "one in ten" vs "one in a hundred", not 0.90 vs 0.99): p = 1 -> 0, p = 0.1 -> 0.5,
// p <= kRedProbability -> 1. Decreasing in p.
constexpr double kRedProbability = 0.01;
double probabilityHeat(double p);
// Entropy of the step's distribution (nats) -> heat: 0 -> 0, >= kRedEntropy -> 1,
// linear between. Increasing in the entropy.
constexpr double kRedEntropy = 4.0;
double entropyHeat(double nats);

// The cell colour of a token in a mode; an invalid QColor for TokenColoring::None.
QColor tokenColor(const TokenView& token, TokenColoring mode);

// A token's text with its whitespace made visible: space ·, newline ⏎, tab →, carriage
// return ␍, other control characters as their Unicode control pictures (␀ ␛ ...). Empty
// text shows as ∅.
QString visiblePiece(const QString& piece);

// A probability as the view writes it: "83.2 %", "0.4 %", "<0.1 %".
QString percentText(double p);

}  // namespace kevui
