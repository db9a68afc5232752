// What the model weighed for each token of an answer, as the UI keeps it: the Qt-side
// copy of kev::TokenDetail, stored with the answer in the workspace file and drawn by
// the comparison view (comparison_view.h).
#pragma once

#include <QJsonArray>
#include <QString>
#include <QVector>

#include <optional>

#include "kev/generator.h"

namespace kevui {

struct TokenAlternativeView {
    int id = 0;
    QString piece;         // the token's text alone (kev::token_display_text)
    float logprob = 0.0f;  // natural log of its probability
    bool operator==(const TokenAlternativeView& o) const {
        return id == o.id && piece == o.piece && logprob == o.logprob;
    }
};

struct TokenView {
    int id = 0;
    QString piece;         // empty when the engine had no tokenizer
    float logprob = 0.0f;  // of this token, under the model's raw distribution
    float entropy = 0.0f;  // of that distribution, in nats
    QVector<TokenAlternativeView> top;  // most likely first
    bool operator==(const TokenView& o) const {
        return id == o.id && piece == o.piece && logprob == o.logprob && entropy == o.entropy && top == o.top;
    }
};

// Bounds on what is kept and on what a workspace file may hold. Values outside them are
// brought inside when an answer is taken from the engine (a -infinity log-probability
// becomes kMinLogprob: no JSON number holds it) and refused when a file is read.
constexpr int kMaxTokenAlternatives = 20;
constexpr float kMinLogprob = -1000.0f;   // p = e^-1000: nothing
constexpr float kMaxEntropy = 100.0f;     // nats; ln of a 2^31 vocabulary is 21.5
constexpr int kMaxPieceChars = 1024;      // a token's text; the longest real ones are ~100

// The details of a finished card (empty when the run did not ask for them).
QVector<TokenView> tokenViewsFrom(const kev::CardResult& result);

// The workspace form: one object per token, its id left to the answer's "tokens" list:
//   {"piece": " Paris", "logprob": -0.18, "entropy": 0.9, "top": [[12, " Paris", -0.18], ...]}
QJsonArray tokenViewsToJson(const QVector<TokenView>& views);

// Reads what tokenViewsToJson wrote, for the answer whose ids are `tokens` (the details
// take their ids from it and must be as many). The file is untrusted: every field is
// type-checked and bounded. On failure returns nothing and sets `why`, naming the entry
// ("token 17: logprob 3 is outside [-1000, 0]").
std::optional<QVector<TokenView>> tokenViewsFromJson(const QJsonValue& value, const QVector<int>& tokens,
                                                     QString* why);

}  // namespace kevui
