#include "token_view.h"

#include <QJsonObject>

#include <algorithm>
#include <cmath>
#include <limits>

namespace kevui {

namespace {

float boundedLogprob(float lp) {
    // NaN and -infinity (a masked logit) both mean "nothing": the floor.
    if (!(lp >= kMinLogprob)) return kMinLogprob;
    return std::min(lp, 0.0f);  // rounding can leave a hair above 0 for a certain token
}

float boundedEntropy(float h) {
    if (!(h >= 0.0f)) return 0.0f;
    return std::min(h, kMaxEntropy);
}

// A JSON number that is a whole number in [0, INT_MAX] (a token id).
std::optional<int> tokenId(const QJsonValue& v) {
    if (!v.isDouble()) return std::nullopt;
    const double d = v.toDouble();
    if (!(d >= 0.0 && d <= double(std::numeric_limits<int>::max())) || d != std::floor(d)) return std::nullopt;
    return static_cast<int>(d);
}

// A number in [lo, hi]; sets `why` (naming `what`) when it is not.
std::optional<float> boundedNumber(const QJsonValue& v, const QString& what, float lo, float hi, QString* why) {
    if (!v.isDouble()) {
        *why = QStringLiteral("%1 is not a number").arg(what);
        return std::nullopt;
    }
    const double d = v.toDouble();
    if (!(d >= lo && d <= hi)) {
        *why = QStringLiteral("%1 %2 is outside [%3, %4]").arg(what).arg(d).arg(lo).arg(hi);
        return std::nullopt;
    }
    return static_cast<float>(d);
}

std::optional<QString> piece(const QJsonValue& v, QString* why) {
    if (!v.isString()) {
        *why = QStringLiteral("piece is not a string");
        return std::nullopt;
    }
    if (v.toString().size() > kMaxPieceChars) {
        *why = QStringLiteral("piece is longer than %1 characters").arg(kMaxPieceChars);
        return std::nullopt;
    }
    return v.toString();
}

std::optional<TokenView> tokenViewFromJson(const QJsonValue& value, int id, QString* why) {
    if (!value.isObject()) {
        *why = QStringLiteral("not a JSON object");
        return std::nullopt;
    }
    const QJsonObject o = value.toObject();
    TokenView t;
    t.id = id;
    const std::optional<QString> text = piece(o.value(QStringLiteral("piece")), why);
    const std::optional<float> lp = text ? boundedNumber(o.value(QStringLiteral("logprob")), QStringLiteral("logprob"),
                                                         kMinLogprob, 0.0f, why)
                                         : std::nullopt;
    const std::optional<float> h = lp ? boundedNumber(o.value(QStringLiteral("entropy")), QStringLiteral("entropy"),
                                                      0.0f, kMaxEntropy, why)
                                      : std::nullopt;
    if (!h) return std::nullopt;
    t.piece = *text;
    t.logprob = *lp;
    t.entropy = *h;
    const QJsonValue top = o.value(QStringLiteral("top"));
    if (!top.isArray()) {
        *why = QStringLiteral("top is not a list");
        return std::nullopt;
    }
    const QJsonArray alternatives = top.toArray();
    if (alternatives.size() > kMaxTokenAlternatives) {
        *why = QStringLiteral("%1 alternatives; at most %2 are kept").arg(alternatives.size()).arg(kMaxTokenAlternatives);
        return std::nullopt;
    }
    for (qsizetype k = 0; k < alternatives.size(); ++k) {
        const QJsonArray a = alternatives.at(k).toArray();
        const QString which = QStringLiteral("alternative %1").arg(k + 1);
        if (!alternatives.at(k).isArray() || a.size() != 3) {
            *why = QStringLiteral("%1 is not a [id, piece, logprob] list").arg(which);
            return std::nullopt;
        }
        // A server's answer (no token ids: id -1) names its alternatives by text, id -1 too.
        const bool textOnly = id < 0 && a.at(0).isDouble() && a.at(0).toDouble() == -1.0;
        const std::optional<int> altId = textOnly ? std::optional<int>(-1) : tokenId(a.at(0));
        if (!altId) {
            *why = QStringLiteral("%1: the id is not a token id").arg(which);
            return std::nullopt;
        }
        QString inner;
        const std::optional<QString> altText = piece(a.at(1), &inner);
        const std::optional<float> altLp =
            altText ? boundedNumber(a.at(2), QStringLiteral("logprob"), kMinLogprob, 0.0f, &inner) : std::nullopt;
        if (!altLp) {
            *why = QStringLiteral("%1: %2").arg(which, inner);
            return std::nullopt;
        }
        t.top.push_back({*altId, *altText, *altLp});
    }
    return t;
}

}  // namespace

QVector<TokenView> tokenViewsFrom(const kev::CardResult& result) {
    QVector<TokenView> views;
    views.reserve(static_cast<qsizetype>(result.details.size()));
    for (const kev::TokenDetail& d : result.details) {
        TokenView t;
        t.id = d.id;
        t.piece = QString::fromStdString(d.piece);
        t.logprob = boundedLogprob(d.logprob);
        t.entropy = boundedEntropy(d.entropy);
        const std::size_t n = std::min<std::size_t>(d.top.size(), kMaxTokenAlternatives);
        for (std::size_t k = 0; k < n; ++k)
            t.top.push_back({d.top[k].id, QString::fromStdString(d.top[k].piece), boundedLogprob(d.top[k].logprob)});
        views.push_back(std::move(t));
    }
    return views;
}

QJsonArray tokenViewsToJson(const QVector<TokenView>& views) {
    QJsonArray out;
    for (const TokenView& t : views) {
        QJsonObject o;
        o[QStringLiteral("piece")] = t.piece;
        o[QStringLiteral("logprob")] = double(t.logprob);
        o[QStringLiteral("entropy")] = double(t.entropy);
        QJsonArray top;
        for (const TokenAlternativeView& a : t.top) top.append(QJsonArray{a.id, a.piece, double(a.logprob)});
        o[QStringLiteral("top")] = top;
        out.append(o);
    }
    return out;
}

std::optional<QVector<TokenView>> tokenViewsFromJson(const QJsonValue& value, const QVector<int>& tokens,
                                                     QString* why) {
    QString problem;
    const auto fail = [&](const QString& message) {
        if (why) *why = message;
        return std::nullopt;
    };
    if (!value.isArray()) return fail(QStringLiteral("the token details are not a list"));
    const QJsonArray entries = value.toArray();
    if (entries.size() != tokens.size()) {
        return fail(QStringLiteral("%1 token details for %2 tokens").arg(entries.size()).arg(tokens.size()));
    }
    QVector<TokenView> views;
    views.reserve(entries.size());
    for (qsizetype i = 0; i < entries.size(); ++i) {
        std::optional<TokenView> t = tokenViewFromJson(entries.at(i), tokens[i], &problem);
        if (!t) return fail(QStringLiteral("token %1: %2").arg(i + 1).arg(problem));
        views.push_back(std::move(*t));
    }
    return views;
}

}  // namespace kevui
