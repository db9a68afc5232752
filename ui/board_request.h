// The one place a board becomes an engine request. The run, the pack preview and
// Replay all build their kev::GenerationRequest here, from plain card values, so what
// the preview draws, what runs and what an answer records are the same inputs.
#pragma once

#include <QString>
#include <QVector>

#include "card_state.h"
#include "kev/generator.h"

namespace kevui {

// What the board adds to every card: the toolbar's LoRA choice (for cards that leave it
// to the toolbar), the board's system prompt and the shared context.
struct BoardInputs {
    bool loraOn = false;
    double loraScale = 1.0;
    QString system;         // empty: the template's own (or none)
    QString sharedContext;
    QString adapter;        // the adapter folder LoRA cards use (recorded, not sent)
};

// The card as it will run: its LoRA choice resolved against the toolbar. This is what an
// answer records as `ranWith` (with the seed the engine reports).
CardSettings resolvedSettings(const CardSettings& card, const BoardInputs& board);

// One card's part of a request.
kev::CardRequest cardRequest(const CardSettings& card, const BoardInputs& board);

// The request for `cards`, in order (every card is sent; the caller leaves out those
// that cannot run).
kev::GenerationRequest boardRequest(const QVector<CardSettings>& cards, const BoardInputs& board);

// Replay of an answer: the inputs it ran with (seed, LoRA and scale, system prompt,
// shared context), whatever the card and the board show now, stopping after as many
// tokens as the answer has. An answer saved before inputs were recorded replays `now`
// with the board as it is. `logprobs` as in GenerationRequest.
kev::GenerationRequest replayRequest(const CardAnswer& answer, const CardSettings& now, const BoardInputs& board);

}  // namespace kevui
