// A reproducibility bundle: one JSON file that records a board's run completely enough
// to run it again and check that every card gets the very same tokens. It names the
// model by hash (kev/file_hash.h), the precision it loaded at, the adapter by hash and
// scale, and for every card its inputs (question, sampling settings, the seed its
// sampler used, LoRA) and its outcome (text, token ids, finish reason, timings).
//
//   {
//     "format": "kev-bundle",
//     "version": 1,
//     "kev_version": "0.1.0",
//     "torch_version": "2.11.0",
//     "cpu_capability": "AVX512",
//     "created": "2026-12-02T05:35:55Z",
//     "model": {"path": "/abs/SmolLM2-135M-Instruct.Q4_1.gguf", "sha256": "b179c952…", "bytes": 98362432},
//     "precision": {"name": "4bit", "device": "cpu", "dtype": "bf16", "quant": "4bit"},
//     "weights": "llama, 30 layers, hidden 576, vocab 49152, 134.5M parameters; bf16 on cpu; ...",
//     "chat_format": {"name": "chatml", "chosen": false},        (absent: no chat format)
//     "system": "You are terse.",                                (absent: the template's default)
//     "shared_context": "",
//     "adapter": {"path": "demo", "sha256": "280b7ad0…", "scale": 1.0},   (absent: none loaded)
//     "ignore_end_of_sequence": false,
//     "cards": [
//       {
//         "number": 1,
//         "label": "command line",
//         "question": "Name a fruit.",
//         "system": "Answer in French.",                         (absent: the bundle's)
//         "sampling": {"temperature": 0.9, "top_p": 1.0, "top_k": 0, "min_p": 0.0,
//                      "repetition_penalty": 1.0, "max_new_tokens": 10, "seed": 3, "stop": ["xyz"]},
//         "lora": {"on": true, "scale": 1.0},
//         "text": "THE FLAVOR IS THE SFFER",
//         "tokens": [15964, 426, 5963, 70, 2460, 4042, 6462, 334, 10209, 1754],
//         "finish_reason": "max tokens",
//         "stop": "",
//         "stats": {"prompt_tokens": 34, "generated_tokens": 10,
//                   "time_to_first_token_s": 0.22, "tokens_per_s": 66.0}
//       }
//     ]
//   }
//
// (Objects are written one key a line; arrays of numbers or strings stay on one line.)
// Unknown keys are ignored on reading (notes a tool may add); a field that changes what
// a replay runs needs a new version number, so an older Kev refuses it instead.
//
// A bundle read back is untrusted input (it may come from anyone): read_bundle checks
// the size before reading, every field's type and range, and refuses an unknown format
// or version, with a message that names the field.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kev/chat_template.h"
#include "kev/engine_info.h"
#include "kev/generator.h"
#include "kev/lora.h"
#include "kev/planner.h"
#include "kev/sampling.h"
#include "kev/weights.h"

namespace kev {

class Model;

constexpr const char* kBundleFormat = "kev-bundle";
constexpr int kBundleVersion = 1;

// Limits on what read_bundle accepts: far above any real board, low enough that a hostile
// file cannot make the reader (or a replay) allocate without bound.
constexpr std::uint64_t kMaxBundleBytes = std::uint64_t(64) << 20;  // checked before reading
constexpr std::size_t kMaxBundleCards = 1024;
constexpr std::size_t kMaxBundleTokensPerCard = std::size_t(1) << 20;
constexpr TokenId kMaxBundleTokenId = (1 << 24) - 1;  // ids are in [0, this]; vocabularies are < 1M
constexpr std::size_t kMaxBundleStopStrings = 64;
constexpr std::size_t kMaxBundleTurns = 4096;  // earlier turns of one card's conversation
constexpr int kMaxBundleJsonDepth = 8;

struct BundleModel {
    std::string path;         // absolute where it was known
    std::string sha256;       // model_hash(path): 64 lowercase hex digits
    std::uint64_t bytes = 0;  // model_digest(path).bytes
};

// How the weights were loaded: what LoadOptions says, after "auto" was resolved.
struct BundlePrecision {
    Device device = Device::Cpu;
    DType dtype = DType::F32;
    WeightQuant quant = WeightQuant::None;
    // The --precision value that loads this: "4bit", "nf4" (both bf16 activations), or
    // the dtype's name ("fp32", "bf16", "fp16").
    std::string name() const;
    LoadOptions load_options() const;  // device, dtype and quant set; no progress callback
    static BundlePrecision of(const LoadOptions& load);
};

struct BundleChat {
    ChatFormat format = ChatFormat::ChatML;  // the prompt format the run used
    bool chosen = false;  // chosen by the user (kev-cli --chat-format), not the model's own template
};

struct BundleAdapter {
    std::string path;    // the adapter folder, or "demo" for the built-in demo adapter
    std::string sha256;  // model_hash of the folder (adapter_config.json + adapter_model.safetensors, ...)
    float scale = 1.0f;  // the board's LoRA scale (cards record their own, see BundleCard::lora)
};

struct BundleCard {
    std::int32_t number = 0;   // the stable card number the user saw (1-based), unique in a bundle
    std::string label;         // where the card came from or what the user called it; may be empty
    std::string question;
    // The card's own system message, instead of the bundle's (CardRequest::system).
    std::optional<std::string> system;
    // The conversation before `question`, oldest first (CardRequest::history); written as
    // "history": [{"user": ..., "assistant": ...}] when there is one.
    std::vector<ChatTurn> history;
    // As the card ran: the temperature resolved (KEV_TEMPERATURE applied), the seed its
    // sampler used (set even for a greedy card), every other setting as given.
    SamplingSettings sampling;
    LoraUse lora;
    // The outcome.
    std::string text;
    std::vector<TokenId> tokens;
    FinishReason finish = FinishReason::MaxTokens;
    std::string matched_stop;  // the stop string that ended it ("" when none did)
    CardStats stats;
};

struct Bundle {
    // Facts of the engine that made it (written from engine_info(); read back as found).
    std::string kev_version;
    std::string torch_version;
    std::string cpu_capability;
    std::string created;  // ISO 8601 UTC, "2026-12-02T03:04:05Z", given by the caller
    BundleModel model;
    BundlePrecision precision;
    std::string weights;  // a one-line description of the loaded weights (describe_weights)
    std::optional<BundleChat> chat;
    std::optional<std::string> system;
    std::string shared_context;
    std::optional<BundleAdapter> adapter;
    bool ignore_end_of_sequence = false;
    std::vector<BundleCard> cards;
};

// The current time as ISO 8601 UTC with seconds ("2026-12-02T03:04:05Z").
std::string iso8601_utc_now();

// A one-line description of loaded weights for Bundle::weights: architecture, layers,
// parameters, working dtype and the bytes held by format.
std::string describe_weights(const Model& model);

// The bundle as JSON text (2-space indent, a final newline). Throws InvalidArgument when
// the bundle breaks a rule read_bundle enforces (a card number twice, a negative token
// id, text that is not UTF-8, ...): what is written can always be read back.
std::string to_json(const Bundle& bundle);

// Writes to_json(bundle) atomically: a temporary file in the same folder, flushed, then
// renamed over `path`; on failure `path` is unchanged and the temporary file removed.
// Throws kev::Error(Io) naming the path.
void write_bundle(const Bundle& bundle, const std::string& path);

// Parses bundle JSON text, untrusted. `source` prefixes messages (a path, or "" for
// none). Throws kev::Error(Format) naming the field, e.g.
//   "b.json: bundle card 3: \"tokens\" must be an array of token ids",
//   "b.json: bundle: \"format\" is \"zip\", not \"kev-bundle\"",
//   "b.json: bundle: version 7 is not supported (this Kev reads version 1)".
Bundle parse_bundle(const std::string& text, const std::string& source = {});

// Reads and parses a bundle file: a regular file of at most kMaxBundleBytes (checked
// before reading). Throws kev::Error: Io (missing, not a regular file, too big), Format.
Bundle read_bundle(const std::string& path);

// What a replay runs: the recorded inputs, exactly.
struct BundleReplay {
    LoadOptions load;                        // the recorded device, dtype and quant
    std::optional<ChatFormat> chat_format;   // set when the recorded format was chosen by the user
    std::optional<std::string> adapter;      // the adapter folder to load ("demo" resolved)
    // Every card with its recorded settings, its recorded seed and resolved temperature;
    // max_new_tokens is the number of tokens recorded for a card that stopped at max
    // tokens or was cancelled (so the replay stops where the run stopped), the recorded
    // max_new_tokens otherwise. ignore_end_of_sequence as recorded (copy it to
    // RunOptions).
    GenerationRequest request;
};
BundleReplay replay_inputs(const Bundle& bundle);

// The replayed tokens a recorded card is compared with: all of them, except for a card
// that was cancelled, whose replay is cut to the length it had when it was cancelled.
std::vector<TokenId> comparable_tokens(const BundleCard& recorded, const std::vector<TokenId>& replayed);

}  // namespace kev
