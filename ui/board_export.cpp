#include "board_export.h"

#include <QStringList>

namespace kevui {

QString answersMarkdown(const Workspace& w) {
    QString md = QStringLiteral("# Kev answers\n\n");
    if (!w.model.isEmpty()) md += QStringLiteral("Model: `%1`\n\n").arg(w.model);
    if (!w.system.isEmpty()) md += QStringLiteral("## System prompt\n\n%1\n\n").arg(w.system);
    if (!w.sharedContext.isEmpty()) md += QStringLiteral("## Shared context\n\n%1\n\n").arg(w.sharedContext);
    int n = 1;
    for (const CardState& c : w.cards) {
        const CardSettings& s = c.settings;
        md += QStringLiteral("## Card %1\n\n**Question:** %2\n\n").arg(c.number > 0 ? c.number : n).arg(s.question);
        ++n;
        md += QStringLiteral("Settings: temperature %1, top-p %2, top-k %3, min-p %6, repetition penalty %7, "
                             "max new tokens %4, seed %5\n\n")
                  .arg(s.temperature, 0, 'f', 2)
                  .arg(s.topP, 0, 'f', 2)
                  .arg(s.topK)
                  .arg(s.maxNewTokens)
                  .arg(c.answer.seedUsed ? QString::number(*c.answer.seedUsed)
                                         : (s.seed ? QString::number(*s.seed) : QStringLiteral("random")))
                  .arg(s.minP, 0, 'f', 2)
                  .arg(s.repetitionPenalty, 0, 'f', 2);
        if (const std::optional<CardSettings>& r = c.answer.ranWith) {
            // What produced the answer, so the export stands on its own as a record.
            md += QStringLiteral("Ran with: model `%1`%6, weights %2, LoRA %3, Kev %4%5\n\n")
                      .arg(c.answer.ranWithModel.isEmpty() ? QStringLiteral("?") : c.answer.ranWithModel,
                           c.answer.ranWithWeights.isEmpty() ? QStringLiteral("?") : c.answer.ranWithWeights,
                           r->lora.value_or(false) ? QStringLiteral("on (`%1`, scale %2)")
                                                         .arg(c.answer.ranWithAdapter.isEmpty() ? QStringLiteral("?")
                                                                                                : c.answer.ranWithAdapter)
                                                         .arg(c.answer.ranWithLoraScale)
                                                   : QStringLiteral("off"),
                           c.answer.ranWithKev.isEmpty() ? QStringLiteral("?") : c.answer.ranWithKev,
                           answerIsStale(c.answer, s) ? QStringLiteral(" — stale: the card was edited after this answer")
                                                      : QString(),
                           c.answer.ranWithModelHash.isEmpty() ? QString()
                                                               : QStringLiteral(" (sha256 `%1`)").arg(c.answer.ranWithModelHash));
        }
        if (!s.system.isEmpty()) md += QStringLiteral("System prompt of this card: %1\n\n").arg(s.system);
        md += QStringLiteral("**Answer:**\n\n%1\n\n").arg(c.answer.text);
        md += QStringLiteral("_%1 prompt tokens, %2 generated, %3 tok/s, first token after %4 s, finished: %5_\n\n")
                  .arg(c.answer.promptTokens)
                  .arg(c.answer.generatedTokens)
                  .arg(c.answer.tokensPerS, 0, 'f', 2)
                  .arg(c.answer.timeToFirstTokenS, 0, 'f', 2)
                  .arg(c.answer.finish.isEmpty() ? QStringLiteral("-") : c.answer.finish);
    }
    return md;
}

namespace {

QString csvField(QString v, bool text) {
    if (text && !v.isEmpty() && QStringLiteral("=+-@").contains(v.front())) v.prepend(QLatin1Char('\''));
    if (v.contains(QLatin1Char(',')) || v.contains(QLatin1Char('"')) || v.contains(QLatin1Char('\n')) ||
        v.contains(QLatin1Char('\r'))) {
        v.replace(QStringLiteral("\""), QStringLiteral("\"\""));
        return QLatin1Char('"') + v + QLatin1Char('"');
    }
    return v;
}

}  // namespace

QString answersCsv(const Workspace& w) {
    const QStringList header{
        QStringLiteral("card"), QStringLiteral("from"), QStringLiteral("question"), QStringLiteral("system_prompt"),
        QStringLiteral("temperature"), QStringLiteral("top_p"), QStringLiteral("top_k"), QStringLiteral("min_p"),
        QStringLiteral("repetition_penalty"), QStringLiteral("max_new_tokens"), QStringLiteral("seed"),
        QStringLiteral("lora"), QStringLiteral("lora_scale"), QStringLiteral("adapter"), QStringLiteral("model"),
        QStringLiteral("model_sha256"), QStringLiteral("weights"), QStringLiteral("kev_version"),
        QStringLiteral("stale"), QStringLiteral("finish"), QStringLiteral("prompt_tokens"),
        QStringLiteral("generated_tokens"), QStringLiteral("tokens_per_s"), QStringLiteral("time_to_first_token_s"),
        QStringLiteral("answer")};
    QString out = header.join(QLatin1Char(',')) + QStringLiteral("\r\n");
    for (const CardState& c : w.cards) {
        const CardAnswer& a = c.answer;
        // The settings the answer ran with when known; the card's otherwise.
        const CardSettings& s = a.ranWith ? *a.ranWith : c.settings;
        const bool lora = s.lora.value_or(false);
        const QString system = s.system.isEmpty() ? (a.ranWith ? a.ranWithSystem : w.system) : s.system;
        const QStringList row{
            QString::number(c.number), c.from > 0 ? QString::number(c.from) : QString(), csvField(s.question, true),
            csvField(system, true), QString::number(s.temperature), QString::number(s.topP), QString::number(s.topK),
            QString::number(s.minP), QString::number(s.repetitionPenalty), QString::number(s.maxNewTokens),
            a.seedUsed ? QString::number(*a.seedUsed) : (s.seed ? QString::number(*s.seed) : QString()),
            lora ? QStringLiteral("on") : QStringLiteral("off"), lora ? QString::number(a.ranWithLoraScale) : QString(),
            csvField(lora ? a.ranWithAdapter : QString(), true), csvField(a.ranWithModel, true), a.ranWithModelHash,
            csvField(a.ranWithWeights, true), csvField(a.ranWithKev, true),
            answerIsStale(a, c.settings) ? QStringLiteral("yes") : QStringLiteral("no"), a.finish,
            QString::number(a.promptTokens), QString::number(a.generatedTokens), QString::number(a.tokensPerS, 'f', 3),
            QString::number(a.timeToFirstTokenS, 'f', 3), csvField(a.text, true)};
        out += row.join(QLatin1Char(',')) + QStringLiteral("\r\n");
    }
    return out;
}

}  // namespace kevui
