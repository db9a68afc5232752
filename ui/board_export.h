// Exports of a board's answers as documents: Markdown (to read) and CSV (to analyse).
// Both carry, per answer, what produced it: model file and hash, weights (precision),
// adapter and scale, Kev's version, and whether the card was edited since.
#pragma once

#include <QString>

#include "card_state.h"

namespace kevui {

// Markdown with the model, each card's settings, answer and stats.
QString answersMarkdown(const Workspace& w);

// One header row, then one row per card (RFC 4180: fields with a comma, quote or line
// break are quoted, quotes doubled). A text field that starts with = + - or @ gets a
// leading apostrophe, so a spreadsheet shows it instead of running it as a formula.
QString answersCsv(const Workspace& w);

}  // namespace kevui
