#include "board_bundle.h"

#include <algorithm>

#include "kev/engine_info.h"
#include "kev/error.h"
#include "kev/file_hash.h"

namespace kevui {

namespace {

std::optional<kev::FinishReason> finishOf(const QString& name) {
    for (kev::FinishReason r : {kev::FinishReason::EndOfSequence, kev::FinishReason::StopString,
                                kev::FinishReason::MaxTokens, kev::FinishReason::Cancelled,
                                kev::FinishReason::NonFinite, kev::FinishReason::ContextFull}) {
        if (name == QLatin1String(kev::to_string(r))) return r;
    }
    return std::nullopt;
}

QString cardList(const QList<int>& numbers) {
    QStringList s;
    for (int n : numbers) s << QString::number(n);
    return (numbers.size() == 1 ? QStringLiteral("card ") : QStringLiteral("cards ")) + s.join(QStringLiteral(", "));
}

}  // namespace

BoardBundle bundleFromBoard(const Workspace& board, const ModelInfo& model, const std::string& createdUtc) {
    BoardBundle out;
    if (model.sha256.isEmpty()) {
        out.why = QStringLiteral("the model file's hash is still being computed; try again in a moment");
        return out;
    }
    QVector<const CardState*> answered;
    for (const CardState& c : board.cards) {
        const CardAnswer& a = c.answer;
        if (!a.ranWith || a.tokens.isEmpty() || !a.seedUsed || !finishOf(a.finish)) {
            out.skipped << QStringLiteral("card %1 (%2)").arg(c.number).arg(
                               a.text.isEmpty() ? QStringLiteral("no answer")
                                                : QStringLiteral("its answer does not record what it ran with"));
            continue;
        }
        answered.push_back(&c);
    }
    if (answered.isEmpty()) {
        out.why = QStringLiteral("no card has an answer that records what it ran with: run the board first");
        return out;
    }
    // One bundle is one run: the answers must share the model, the weights and the board's
    // inputs. A board whose answers come from several runs is run again first.
    const CardAnswer& first = answered.front()->answer;
    QList<int> otherModel, otherBoard;
    for (const CardState* c : answered) {
        const CardAnswer& a = c->answer;
        if (a.ranWithModelHash != model.sha256 || a.ranWithWeights != model.weightFormats) otherModel << c->number;
        else if (a.ranWithSharedContext != first.ranWithSharedContext || a.ranWithSystem != first.ranWithSystem)
            otherBoard << c->number;
    }
    if (!otherModel.isEmpty()) {
        out.why = QStringLiteral("%1 answered with another model file or precision than the one loaded (%2): run the "
                                 "board again to record it")
                      .arg(cardList(otherModel), model.weightFormats);
        return out;
    }
    if (!otherBoard.isEmpty()) {
        out.why = QStringLiteral("%1 ran with another system prompt or shared context than card %2: run the board "
                                 "again to record it as one run")
                      .arg(cardList(otherBoard))
                      .arg(answered.front()->number);
        return out;
    }

    kev::Bundle b;
    const kev::EngineInfo info = kev::engine_info();
    b.kev_version = info.kev_version;
    b.torch_version = info.torch_version;
    b.cpu_capability = info.cpu_capability;
    b.created = createdUtc;
    b.model.path = model.path.toStdString();
    b.model.sha256 = model.sha256.toStdString();
    b.model.bytes = static_cast<std::uint64_t>(std::max<qint64>(0, model.fileBytes));
    b.precision = {model.device, model.dtype, model.quant};
    b.weights = model.weightFormats.toStdString();
    if (!first.ranWithSystem.isEmpty()) b.system = first.ranWithSystem.toStdString();
    b.shared_context = first.ranWithSharedContext.toStdString();
    for (const CardState* c : answered) {
        const CardAnswer& a = c->answer;
        kev::BundleCard card;
        card.number = c->number;
        if (c->from > 0) card.label = QStringLiteral("from card %1").arg(c->from).toStdString();
        card.question = a.ranWith->question.toStdString();
        if (!a.ranWith->system.isEmpty()) card.system = a.ranWith->system.toStdString();
        for (const CardTurn& t : a.ranWith->history) card.history.push_back({t.question.toStdString(), t.answer.toStdString()});
        card.sampling = a.ranWith->sampling();
        card.sampling.seed = *a.seedUsed;
        const bool lora = a.ranWith->lora.value_or(false);
        card.lora = {lora, static_cast<float>(a.ranWithLoraScale)};
        if (lora && !b.adapter) {
            kev::BundleAdapter adapter;
            const std::string path = a.ranWithAdapter.toStdString();
            adapter.path = path == kev::demo_adapter_path() ? std::string("demo") : path;
            try {
                adapter.sha256 = kev::model_hash(path);
            } catch (const kev::Error& e) {
                out.why = QStringLiteral("card %1's adapter %2 cannot be read: %3")
                              .arg(c->number)
                              .arg(a.ranWithAdapter, QString::fromStdString(e.what()));
                return out;
            }
            adapter.scale = static_cast<float>(a.ranWithLoraScale);
            b.adapter = adapter;
        }
        card.text = a.text.toStdString();
        for (int t : a.tokens) card.tokens.push_back(t);
        card.finish = *finishOf(a.finish);
        card.stats.prompt_tokens = a.promptTokens;
        card.stats.generated_tokens = a.generatedTokens;
        card.stats.time_to_first_token_s = a.timeToFirstTokenS;
        card.stats.tokens_per_s = a.tokensPerS;
        b.cards.push_back(std::move(card));
    }
    out.bundle = std::move(b);
    return out;
}

ReplayVerdict replayVerdict(const kev::BundleCard& recorded, const kev::CardResult& replayed) {
    const std::vector<kev::TokenId> now = kev::comparable_tokens(recorded, replayed.tokens);
    const std::vector<kev::TokenId>& then = recorded.tokens;
    const std::size_t common = std::min(now.size(), then.size());
    std::size_t at = 0;
    while (at < common && now[at] == then[at]) ++at;
    if (at == common && now.size() == then.size())
        return {true, QStringLiteral("all %1 tokens match ✓").arg(then.size())};
    const QString texts = divergenceText(QString::fromStdString(recorded.text), QString::fromStdString(replayed.text));
    if (at == common) {
        return {false, QStringLiteral("the first %1 tokens match; the lengths differ (%2 recorded, %3 now): %4")
                           .arg(common)
                           .arg(then.size())
                           .arg(now.size())
                           .arg(texts)};
    }
    return {false, QStringLiteral("differs at token %1 (recorded id %2, now id %3): %4")
                       .arg(at + 1)
                       .arg(then[at])
                       .arg(now[at])
                       .arg(texts)};
}

}  // namespace kevui
