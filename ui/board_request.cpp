#include "board_request.h"

#include <algorithm>

namespace kevui {

namespace {

std::optional<std::string> systemOf(const QString& text) {
    if (text.isEmpty()) return std::nullopt;
    return text.toStdString();
}

}  // namespace

CardSettings resolvedSettings(const CardSettings& card, const BoardInputs& board) {
    CardSettings s = card;
    s.lora = card.lora.value_or(board.loraOn);
    return s;
}

kev::CardRequest cardRequest(const CardSettings& card, const BoardInputs& board) {
    kev::CardRequest c;
    c.question = card.question.toStdString();
    c.sampling = card.sampling();
    c.lora = {card.lora.value_or(board.loraOn), static_cast<float>(board.loraScale)};
    c.system = systemOf(card.system);
    for (const CardTurn& t : card.history) c.history.push_back({t.question.toStdString(), t.answer.toStdString()});
    return c;
}

kev::GenerationRequest boardRequest(const QVector<CardSettings>& cards, const BoardInputs& board) {
    kev::GenerationRequest r;
    r.system = systemOf(board.system);
    r.shared_context = board.sharedContext.toStdString();
    for (const CardSettings& s : cards) r.cards.push_back(cardRequest(s, board));
    return r;
}

kev::GenerationRequest replayRequest(const CardAnswer& answer, const CardSettings& now, const BoardInputs& board) {
    BoardInputs then = board;
    CardSettings s = now;
    if (answer.ranWith) {
        s = *answer.ranWith;  // its LoRA choice is resolved already
        then.loraScale = answer.ranWithLoraScale;
        then.system = answer.ranWithSystem;
        then.sharedContext = answer.ranWithSharedContext;
    }
    s.seed = answer.seedUsed;
    kev::GenerationRequest r = boardRequest({s}, then);
    // Stop where the answer stopped, so both have the same length to compare (a server's
    // answer has no token ids: its count of generated tokens).
    const qint64 length = answer.tokens.isEmpty() ? answer.generatedTokens : answer.tokens.size();
    r.cards.back().sampling.max_new_tokens = std::max<qint64>(1, length);
    return r;
}

}  // namespace kevui
