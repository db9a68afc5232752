#include "kev/answer_engine.h"

#include <algorithm>

#include "kev/session.h"

namespace kev {

LocalEngine::LocalEngine(const Session& session, TemperatureDefaults defaults, PrefixCache* prefix_cache)
    : session_(session), defaults_(defaults), prefix_cache_(prefix_cache) {}

std::string LocalEngine::describe() const {
    const std::string& path = session_.path();
    const std::size_t slash = path.find_last_of('/');
    return slash == std::string::npos ? path : path.substr(slash + 1);
}

GenerationResult LocalEngine::answer(const GenerationRequest& request, const RunOptions& options,
                                     const std::function<void(const PreparedPack&)>& on_prepared) {
    const Generator generator = session_.generator();
    const PreparedPack pack = generator.prepare(request, defaults_);
    if (on_prepared) on_prepared(pack);
    RunOptions run = options;
    run.ignore_end_of_sequence = run.ignore_end_of_sequence || request.ignore_end_of_sequence;
    run.logprobs = std::max(run.logprobs, request.logprobs);
    if (!run.prefix_cache) run.prefix_cache = prefix_cache_;
    if (!run.joins) return generator.run(pack, run);
    // Cards the user adds while this pack runs are formatted as this request's cards are,
    // on this thread, for as long as the run takes them.
    run.joins->set_preparer([&](const CardRequest& card) { return generator.prepare_join(request, card, defaults_); });
    struct Unset {
        JoinQueue* q;
        ~Unset() { q->set_preparer({}); }
    } unset{run.joins};
    return generator.run(pack, run);
}

std::int64_t first_difference(const AnswerEngine& engine, const CardResult& packed, const CardResult& alone) {
    const auto differ = [](const auto& a, const auto& b) -> std::int64_t {
        const std::size_t n = std::min(a.size(), b.size());
        const auto at = std::mismatch(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(n), b.begin());
        const auto k = static_cast<std::int64_t>(at.first - a.begin());
        return static_cast<std::size_t>(k) == a.size() && a.size() == b.size() ? -1 : k;
    };
    return engine.gives_token_ids() ? differ(packed.tokens, alone.tokens) : differ(packed.text, alone.text);
}

}  // namespace kev
