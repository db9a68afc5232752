// kev-cli's reproducibility bundles (kev/bundle.h): `--bundle OUT.json` on an answering
// run writes one; `kev-cli replay BUNDLE` runs it again and compares every card's tokens.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kev/bundle.h"
#include "kev/session.h"

namespace kevcli {

// The exit code of a replay whose tokens differ from the recorded ones (the code
// --verify-isolation uses for a difference too).
constexpr int kExitReplayDiffers = 3;

// What an answering run knows, for its bundle.
struct RunRecord {
    std::string model_path;             // as given (made absolute in the bundle)
    kev::LoadOptions load;              // as loaded: --precision auto resolved
    const kev::Session* session = nullptr;
    bool chat_format_chosen = false;    // --chat-format was given
    std::optional<std::string> adapter; // "demo" or the folder, when an adapter was loaded
    float lora_scale = 1.0f;            // --lora-scale
    bool ignore_eos = false;
    // The cards as requested (in order; one pack of all of them) and what each gave.
    const kev::GenerationRequest* request = nullptr;
    std::vector<std::string> labels;    // one per card, may be empty
    const std::vector<kev::CardResult>* results = nullptr;
};

// The bundle of a run: the model and adapter hashed, seeds and temperatures as the
// samplers used them, the current time. Throws kev::Error (Io) when a file cannot be
// hashed.
kev::Bundle make_run_bundle(const RunRecord& run);

// Before a run: refuses (kev::Error Io) a --bundle path whose folder does not exist or
// that names a folder, so a long run does not end in a write that cannot succeed.
void check_bundle_destination(const std::string& path);

// How `replay` loads and runs, supplied by kev-cli's main file (its progress bar, signal
// handling and chat-format checks).
struct ReplayHooks {
    std::function<std::unique_ptr<kev::Session>(const std::string& model, const kev::SessionOptions& options)> open;
    std::function<kev::GenerationResult(kev::Session& session, const kev::GenerationRequest& request)> run;
};

// `kev-cli replay BUNDLE [--model PATH] [--json]`: loads the bundle's model (or `model`)
// at the recorded precision, says on stderr when the model or adapter differ from the
// recorded hashes, runs every card in one pack as recorded and compares token ids.
// Prints per card "card N: all K tokens match" or "card N differs at token T: ..." (or
// one JSON document). Returns 0 when every card matches, kExitReplayDiffers otherwise.
// Throws kev::Error for an unreadable bundle, model or adapter.
int replay(const std::string& bundle_path, const std::optional<std::string>& model, bool json, const ReplayHooks& hooks);

}  // namespace kevcli
