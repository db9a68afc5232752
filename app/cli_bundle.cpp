#include "cli_bundle.h"

#include <cstdio>
#include <filesystem>
#include <system_error>

#include <nlohmann/json.hpp>

#include "kev/engine_info.h"
#include "kev/error.h"
#include "kev/file_hash.h"

#include "cli_input.h"

namespace kevcli {

namespace {

namespace fs = std::filesystem;

std::string absolute_path(const std::string& path) {
    std::error_code ec;
    const fs::path p = fs::absolute(path, ec);
    return ec ? path : p.lexically_normal().string();
}

// "b179c9523d0e…": enough of a hash to tell two apart in a message.
std::string short_hash(const std::string& sha256) { return sha256.substr(0, 12) + "…"; }

// An adapter that does not fit the model is an adapter error (exit 1), never a usage
// error, whatever code the engine gave it (as kev-cli's own loads do).
void load_adapter(kev::Session& session, const std::string& dir) {
    try {
        session.load_lora(dir);
    } catch (const kev::Error& e) {
        if (e.code() != kev::ErrorCode::InvalidArgument) throw;
        throw kev::Error(kev::ErrorCode::Format, e.what());
    }
}

// A token as the report shows it: its text, quoted and escaped ("\n" stays visible).
std::string piece_text(const kev::Tokenizer& tok, kev::TokenId id) {
    if (id < 0 || id >= tok.vocab_size()) return "(not in this model's vocabulary)";
    try {
        return dump_json(nlohmann::json(tok.id_to_piece(id)));
    } catch (const kev::Error&) {
        return "(no text)";
    }
}

struct CardVerdict {
    std::int32_t number = 0;
    std::size_t recorded = 0;  // tokens
    std::size_t now = 0;
    std::optional<std::size_t> difference;  // 0-based index of the first differing token
};

// `now`: the replayed tokens, cut as kev::comparable_tokens cuts them.
CardVerdict compare(const kev::BundleCard& card, const std::vector<kev::TokenId>& now) {
    CardVerdict v{card.number, card.tokens.size(), now.size(), std::nullopt};
    std::size_t k = 0;
    while (k < card.tokens.size() && k < now.size() && card.tokens[k] == now[k]) ++k;
    if (k != card.tokens.size() || k != now.size()) v.difference = k;
    return v;
}

// "card 2 differs at token 5: recorded id 30 ("."), now id 314 (" is")", or the same
// with one side ended.
std::string describe(const CardVerdict& v, const kev::BundleCard& card, const std::vector<kev::TokenId>& now,
                     const kev::Tokenizer& tok) {
    const std::size_t k = *v.difference;
    std::string s = "card " + std::to_string(v.number) + " differs at token " + std::to_string(k + 1) + ": ";
    if (k < card.tokens.size())
        s += "recorded id " + std::to_string(card.tokens[k]) + " (" + piece_text(tok, card.tokens[k]) + ")";
    else
        s += "the recorded answer ends (" + std::to_string(v.recorded) + " tokens)";
    s += ", ";
    if (k < now.size())
        s += "now id " + std::to_string(now[k]) + " (" + piece_text(tok, now[k]) + ")";
    else
        s += "now the answer ends (" + std::to_string(v.now) + " tokens)";
    return s;
}

// The file's hash against the recorded one; a note on stderr when they differ.
nlohmann::json check_hash(const char* what, const std::string& path, const std::string& recorded) {
    const kev::ModelDigest d = kev::model_digest(path);
    const bool same = d.sha256 == recorded;
    if (!same) {
        std::fprintf(stderr, "kev-cli: the %s differs from the one the bundle was made with (sha256 %s, bundle %s): %s\n",
                     what, short_hash(d.sha256).c_str(), short_hash(recorded).c_str(), path.c_str());
    }
    return {{"path", path}, {"sha256", d.sha256}, {"bundle_sha256", recorded}, {"same", same}};
}

}  // namespace

void check_bundle_destination(const std::string& path) {
    std::error_code ec;
    if (fs::is_directory(path, ec)) throw kev::Error(kev::ErrorCode::Io, path + ": is a folder; --bundle needs a file name");
    const fs::path parent = fs::path(path).has_parent_path() ? fs::path(path).parent_path() : fs::path(".");
    if (!fs::is_directory(parent, ec))
        throw kev::Error(kev::ErrorCode::Io, path + ": cannot write the bundle: no folder " + parent.string());
}

kev::Bundle make_run_bundle(const RunRecord& run) {
    const kev::EngineInfo info = kev::engine_info();
    kev::Bundle b;
    b.kev_version = info.kev_version;
    b.torch_version = info.torch_version;
    b.cpu_capability = info.cpu_capability;
    b.created = kev::iso8601_utc_now();
    b.model.path = absolute_path(run.model_path);
    const kev::ModelDigest digest = kev::model_digest(run.model_path);
    b.model.sha256 = digest.sha256;
    b.model.bytes = digest.bytes;
    b.precision = kev::BundlePrecision::of(run.load);
    b.weights = kev::describe_weights(run.session->model());
    if (run.session->chat()) b.chat = kev::BundleChat{run.session->chat()->format(), run.chat_format_chosen};
    b.system = run.request->system;
    b.shared_context = run.request->shared_context;
    if (run.adapter) {
        const std::string dir = *run.adapter == "demo" ? kev::demo_adapter_path() : *run.adapter;
        b.adapter = kev::BundleAdapter{*run.adapter == "demo" ? "demo" : absolute_path(dir), kev::model_hash(dir),
                                       run.lora_scale};
    }
    b.ignore_end_of_sequence = run.ignore_eos;
    const auto& cards = run.request->cards;
    const auto& results = *run.results;
    for (std::size_t i = 0; i < cards.size() && i < results.size(); ++i) {
        const kev::CardResult& r = results[i];
        kev::BundleCard c;
        c.number = static_cast<std::int32_t>(i + 1);
        c.label = i < run.labels.size() ? run.labels[i] : std::string();
        c.question = cards[i].question;
        c.system = cards[i].system;
        c.history = cards[i].history;
        c.sampling = cards[i].sampling;
        c.sampling.temperature = r.temperature;  // resolved (KEV_TEMPERATURE applied)
        c.sampling.seed = r.seed;                // the one its sampler used
        c.lora = cards[i].lora;
        c.text = r.text;
        c.tokens = r.tokens;
        c.finish = r.finish;
        c.matched_stop = r.matched_stop;
        c.stats = r.stats;
        b.cards.push_back(std::move(c));
    }
    return b;
}

int replay(const std::string& bundle_path, const std::optional<std::string>& model, bool json,
           const ReplayHooks& hooks) {
    const kev::Bundle bundle = kev::read_bundle(bundle_path);
    const kev::BundleReplay inputs = kev::replay_inputs(bundle);
    const kev::EngineInfo info = kev::engine_info();
    if (bundle.kev_version != info.kev_version) {
        std::fprintf(stderr, "kev-cli: note: the bundle was made by Kev %s; this is Kev %s\n", bundle.kev_version.c_str(),
                     info.kev_version.c_str());
    }
    if (bundle.cpu_capability != info.cpu_capability) {
        std::fprintf(stderr, "kev-cli: note: the bundle was made with %s kernels; this machine runs %s\n",
                     bundle.cpu_capability.c_str(), info.cpu_capability.c_str());
    }

    const std::string model_path = model ? *model : bundle.model.path;
    std::error_code ec;
    if (!model && !fs::exists(model_path, ec)) {
        throw kev::Error(kev::ErrorCode::Io, model_path +
                                                 ": no such file or folder (the model the bundle was made with; "
                                                 "point at it with --model PATH)");
    }
    nlohmann::json out = {{"bundle", bundle_path}};
    out["model"] = check_hash("model file", model_path, bundle.model.sha256);

    kev::SessionOptions options{inputs.load, inputs.chat_format};
    std::unique_ptr<kev::Session> session = hooks.open(model_path, options);
    if (bundle.chat && !bundle.chat->chosen && session->chat() && session->chat()->format() != bundle.chat->format) {
        std::fprintf(stderr, "kev-cli: note: the model's chat template is now read as %s; the bundle's run used %s\n",
                     kev::to_string(session->chat()->format()), kev::to_string(bundle.chat->format));
    }
    if (inputs.adapter) {
        out["adapter"] = check_hash("adapter", *inputs.adapter, bundle.adapter->sha256);
        load_adapter(*session, *inputs.adapter);
    }

    const kev::GenerationResult result = hooks.run(*session, inputs.request);
    const kev::Tokenizer& tok = session->tokenizer();
    bool all_match = true;
    nlohmann::json cards = nlohmann::json::array();
    std::string text;
    for (std::size_t i = 0; i < bundle.cards.size(); ++i) {
        const kev::BundleCard& card = bundle.cards[i];
        const std::vector<kev::TokenId> now =
            i < result.cards.size() ? kev::comparable_tokens(card, result.cards[i].tokens) : std::vector<kev::TokenId>{};
        const CardVerdict v = compare(card, now);
        nlohmann::json j = {{"card", v.number}, {"recorded_tokens", v.recorded}, {"replayed_tokens", v.now},
                            {"match", !v.difference}};
        if (v.difference) {
            all_match = false;
            const std::size_t k = *v.difference;
            j["first_difference"] = k + 1;  // 1-based, as the text says it
            j["recorded"] = k < card.tokens.size() ? nlohmann::json(card.tokens[k]) : nlohmann::json(nullptr);
            j["now"] = k < now.size() ? nlohmann::json(now[k]) : nlohmann::json(nullptr);
            text += describe(v, card, now, tok) + "\n";
        } else {
            text += "card " + std::to_string(v.number) + ": all " + std::to_string(v.recorded) + " tokens match\n";
        }
        cards.push_back(std::move(j));
    }
    out["cards"] = std::move(cards);
    out["match"] = all_match;
    if (json) {
        std::printf("%s\n", dump_json(out, 2).c_str());
    } else {
        std::fputs(text.c_str(), stdout);
        if (all_match) {
            std::printf("replay: every card's tokens match the bundle\n");
        } else {
            std::size_t differing = 0;
            for (const auto& c : out["cards"]) differing += c["match"].get<bool>() ? 0 : 1;
            std::printf("replay: %zu of %zu cards differ from the bundle\n", differing, bundle.cards.size());
        }
    }
    return all_match ? 0 : kExitReplayDiffers;
}

}  // namespace kevcli
