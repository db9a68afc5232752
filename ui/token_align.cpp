#include "token_align.h"

#include <algorithm>
#include <cmath>

namespace kevui {

TokenAlignment alignTokens(const QVector<QVector<int>>& answers) {
    TokenAlignment a;
    qsizetype shortest = answers.isEmpty() ? 0 : answers.front().size();
    for (const QVector<int>& ids : answers) {
        a.positions = std::max(a.positions, static_cast<int>(ids.size()));
        shortest = std::min(shortest, ids.size());
    }
    if (answers.size() < 2) return a;
    // Up to the shortest answer, compare ids; just past it, one has ended while another
    // goes on (unless all have the same length: then they never part).
    qsizetype at = 0;
    const auto allEqual = [&](qsizetype i) {
        return std::all_of(answers.begin(), answers.end(), [&](const QVector<int>& ids) { return ids[i] == answers.front()[i]; });
    };
    while (at < shortest && allEqual(at)) ++at;
    if (at == shortest && shortest == a.positions) return a;
    a.divergence = static_cast<int>(at);
    // Group by the token at the divergence (first appearance order), the ended apart.
    QVector<int> groupToken;  // the id each group has there (unused for the ended group)
    for (int i = 0; i < answers.size(); ++i) {
        const bool ended = at >= answers[i].size();
        qsizetype g = 0;
        if (ended) {
            g = a.endedGroup >= 0 ? a.endedGroup : groupToken.size();
        } else {
            while (g < groupToken.size() && (g == a.endedGroup || groupToken[g] != answers[i][at])) ++g;
        }
        if (g == groupToken.size()) {
            groupToken.push_back(ended ? 0 : answers[i][at]);
            a.groups.push_back({});
            if (ended) a.endedGroup = static_cast<int>(g);
        }
        a.groups[g].push_back(i);
    }
    return a;
}

QColor heatColor(double heat) {
    const double t = std::clamp(std::isnan(heat) ? 0.0 : heat, 0.0, 1.0);
    // Three stops, interpolated in RGB: each step darker than the one before (lightness
    // falls monotonically), all light enough for black text.
    struct Stop {
        double at;
        double r, g, b;
    };
    static constexpr Stop kStops[] = {{0.0, 248, 248, 246}, {0.5, 255, 211, 128}, {1.0, 240, 112, 100}};
    const Stop& lo = t <= 0.5 ? kStops[0] : kStops[1];
    const Stop& hi = t <= 0.5 ? kStops[1] : kStops[2];
    const double f = (t - lo.at) / (hi.at - lo.at);
    const auto mix = [f](double x, double y) { return static_cast<int>(std::lround(x + (y - x) * f)); };
    return QColor(mix(lo.r, hi.r), mix(lo.g, hi.g), mix(lo.b, hi.b));
}

double probabilityHeat(double p) {
    if (!(p > kRedProbability)) return 1.0;
    if (p >= 1.0) return 0.0;
    return std::log(p) / std::log(kRedProbability);
}

double entropyHeat(double nats) {
    if (!(nats > 0.0)) return 0.0;
    return std::min(1.0, nats / kRedEntropy);
}

QColor tokenColor(const TokenView& token, TokenColoring mode) {
    switch (mode) {
    case TokenColoring::Probability:
        return heatColor(probabilityHeat(std::exp(double(token.logprob))));
    case TokenColoring::Entropy:
        return heatColor(entropyHeat(token.entropy));
    case TokenColoring::None:
        break;
    }
    return QColor();
}

QString visiblePiece(const QString& piece) {
    if (piece.isEmpty()) return QStringLiteral("∅");
    QString out;
    out.reserve(piece.size());
    for (const QChar c : piece) {
        const char16_t u = c.unicode();
        if (u == u' ') out += QChar(u'·');
        else if (u == u'\n') out += QChar(u'⏎');
        else if (u == u'\t') out += QChar(u'→');
        else if (u == u'\r') out += QChar(u'␍');
        else if (u < 0x20) out += QChar(char16_t(0x2400 + u));  // control pictures
        else if (u == 0x7F) out += QChar(u'␡');
        else if (u == 0xA0) out += QChar(u'⍽');                 // no-break space
        else out += c;
    }
    return out;
}

QString percentText(double p) {
    const double percent = 100.0 * std::clamp(std::isnan(p) ? 0.0 : p, 0.0, 1.0);
    if (percent < 0.05) return QStringLiteral("<0.1 %");
    return QStringLiteral("%1 %").arg(percent, 0, 'f', 1);
}

}  // namespace kevui
