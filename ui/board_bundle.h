// The board as a reproducibility bundle (kev/bundle.h) and back: what File ▸ Export
// bundle writes, and what the read-only bundle view replays. A bundle records one run:
// every answered card with the inputs it ran with and its tokens, the model by hash, the
// precision, the adapter by hash.
#pragma once

#include <QString>
#include <QStringList>

#include <optional>

#include "card_state.h"
#include "engine_types.h"
#include "kev/bundle.h"

namespace kevui {

struct BoardBundle {
    std::optional<kev::Bundle> bundle;  // empty when the board cannot be one (see why)
    QString why;                        // why not, naming the cards at fault
    QStringList skipped;                // cards left out: "card 3 (no answer)"
};

// The answered cards of `board`, as they ran on `model` (the loaded model: its hash,
// precision and weights must be those the answers record). `createdUtc`: ISO 8601.
BoardBundle bundleFromBoard(const Workspace& board, const ModelInfo& model, const std::string& createdUtc);

// How a replayed card compares with its record: "all 12 tokens match", or where and how
// it differs ("differs at token 4: recorded id 11 …, now id 27 …" with the texts).
struct ReplayVerdict {
    bool match = false;
    QString text;
};
ReplayVerdict replayVerdict(const kev::BundleCard& recorded, const kev::CardResult& replayed);

}  // namespace kevui
