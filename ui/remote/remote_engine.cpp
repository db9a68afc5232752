#include "remote_engine.h"

#include <QElapsedTimer>
#include <QEventLoop>
#include <QTimer>

#include <algorithm>
#include <cmath>
#include <random>

#include "kev/error.h"

namespace kevremote {

namespace {

QString q(const std::string& s) { return QString::fromStdString(s); }

kev::FinishReason finish_of(const CardOutcome& o) {
    switch (o.state) {
        case CardState::Stopped: return kev::FinishReason::Cancelled;
        case CardState::Failed: return kev::FinishReason::Failed;
        default: break;
    }
    // OpenAI's "stop" covers the end-of-sequence token and a stop sequence alike; "length"
    // is max_tokens; anything else a server invents ("content_filter") ended the answer.
    return o.finish_reason == QLatin1String("length") ? kev::FinishReason::MaxTokens : kev::FinishReason::EndOfSequence;
}

kev::CardStats stats_of(const CardOutcome& o) {
    kev::CardStats s;
    s.generated_tokens = o.tokens;
    s.time_to_first_token_s = o.time_to_first_token_s;
    s.tokens_per_s = o.tokens_per_s;
    return s;
}

}  // namespace

RemoteCard remote_card(const kev::GenerationRequest& request, const kev::CardRequest& card) {
    RemoteCard r;
    r.question = q(card.question);
    for (const kev::ChatTurn& t : card.history) r.history.push_back({q(t.user), q(t.assistant)});
    if (card.system) r.system = q(*card.system);
    else if (request.system) r.system = q(*request.system);
    r.shared_context = q(request.shared_context);
    const kev::SamplingSettings& s = card.sampling;
    r.sampling.temperature = s.temperature_or_default();
    if (s.top_p != 1.0f) r.sampling.top_p = s.top_p;
    if (s.top_k != 0) r.sampling.top_k = s.top_k;
    if (s.min_p != 0.0f) r.sampling.min_p = s.min_p;
    if (s.repetition_penalty != 1.0f) r.sampling.repetition_penalty = s.repetition_penalty;
    r.sampling.max_tokens = static_cast<int>(std::min<std::int64_t>(s.max_new_tokens, 1 << 30));
    for (const auto& stop : s.stop_strings) r.sampling.stop << q(stop);
    if (s.seed) r.sampling.seed = *s.seed;
    r.sampling.logprobs = request.logprobs;
    r.sampling.ignore_eos = request.ignore_end_of_sequence;
    return r;
}

kev::CardResult card_result(const CardOutcome& o, const RemoteCard& sent) {
    kev::CardResult r;
    r.text = o.text.toStdString();
    r.finish = finish_of(o);
    r.error = o.error.toStdString();
    r.seed = sent.sampling.seed.value_or(0);
    r.temperature = static_cast<float>(sent.sampling.temperature.value_or(0.0));
    r.stats = stats_of(o);
    for (const TokenLogprob& t : o.logprobs) {
        kev::TokenDetail d;
        d.id = -1;  // a server's stream names the token by its text only
        d.piece = t.token.toStdString();
        d.logprob = static_cast<float>(t.logprob);
        // The server sends the top-K only: the entropy of those K and of the rest taken as
        // one outcome, a lower bound of the distribution's (exact when the rest is nothing).
        double rest = 1.0;
        for (const auto& [token, lp] : t.top) {
            d.top.push_back({-1, token.toStdString(), static_cast<float>(lp)});
            const double p = std::exp(lp);
            if (p > 0.0) d.entropy -= static_cast<float>(p * lp);
            rest -= p;
        }
        if (rest > 1e-9) d.entropy -= static_cast<float>(rest * std::log(rest));
        r.details.push_back(std::move(d));
    }
    return r;
}

RemoteEngine::RemoteEngine(Connection connection) : connection_(std::move(connection)) {}

std::string RemoteEngine::describe() const {
    return (connection_.model + QStringLiteral(" at ") + connection_.base.toString()).toStdString();
}

kev::GenerationResult RemoteEngine::answer(const kev::GenerationRequest& request, const kev::RunOptions& options,
                                           const std::function<void(const kev::PreparedPack&)>&) {
    if (const QString problem = connection_problem(connection_); !problem.isEmpty())
        throw kev::Error(kev::ErrorCode::InvalidArgument, problem.toStdString());
    QVector<RemoteCard> cards;
    std::random_device entropy;
    for (const kev::CardRequest& card : request.cards) {
        card.sampling.validate();
        RemoteCard r = remote_card(request, card);
        // 31 bits: every server takes it (some parse seeds as 32-bit or as doubles).
        if (!r.sampling.seed) r.sampling.seed = entropy() & 0x7fffffffu;
        cards.push_back(r);
    }
    RemoteRun run(connection_, cards);
    QElapsedTimer clock;
    clock.start();
    std::int64_t step = 0;
    std::int64_t tokens = 0;
    double first_token_s = -1.0;
    // Each piece of a stream is a step of its own card: the gauges and the cards see the
    // same events as from the local engine.
    const auto report = [&](int card, const QString& delta, std::optional<kev::FinishReason> finished) {
        if (!options.on_step) return;
        const double now = static_cast<double>(clock.nsecsElapsed()) * 1e-9;
        kev::StepEvent ev;
        ev.step = ++step;
        ev.kind = kev::StepKind::Decode;
        ev.elapsed_s = now;
        for (int i = 0; i < run.size(); ++i)
            ev.active_cards += run.outcome(i).state == CardState::Streaming ? 1 : 0;
        if (first_token_s >= 0.0 && now > first_token_s) ev.aggregate_tokens_per_s = static_cast<double>(tokens) / (now - first_token_s);
        kev::CardUpdate u;
        u.card = card;
        u.text = delta.toStdString();
        u.finished = finished;
        u.stats = stats_of(run.outcome(card));
        ev.updates.push_back(std::move(u));
        options.on_step(ev);
    };
    QObject::connect(&run, &RemoteRun::textArrived, [&](int card, const QString& delta) {
        if (first_token_s < 0.0) first_token_s = static_cast<double>(clock.nsecsElapsed()) * 1e-9;
        ++tokens;
        report(card, delta, std::nullopt);
    });
    QObject::connect(&run, &RemoteRun::cardFinished, [&](int card) { report(card, QString(), finish_of(run.outcome(card))); });
    QEventLoop loop;
    QObject::connect(&run, &RemoteRun::allFinished, &loop, &QEventLoop::quit);
    // The caller's cancel flags (set from any thread) close requests within 20 ms.
    QTimer poll;
    std::vector<bool> closed(static_cast<std::size_t>(run.size()), false);
    QObject::connect(&poll, &QTimer::timeout, [&] {
        if (!options.cancel) return;
        if (options.cancel->all()) return run.stopAll();
        for (int i = 0; i < run.size(); ++i) {
            if (!closed[static_cast<std::size_t>(i)] && options.cancel->card(static_cast<std::size_t>(i))) {
                closed[static_cast<std::size_t>(i)] = true;
                run.stop(i);
            }
        }
    });
    poll.start(20);
    if (options.cancel && options.cancel->all()) run.stopAll();
    run.start();
    if (!run.finished()) loop.exec();
    poll.stop();

    kev::GenerationResult result;
    for (int i = 0; i < run.size(); ++i) result.cards.push_back(card_result(run.outcome(i), cards[i]));
    result.steps = step;
    result.total_s = static_cast<double>(clock.nsecsElapsed()) * 1e-9;
    return result;
}

}  // namespace kevremote
