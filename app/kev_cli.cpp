// kev-cli: the engine from a terminal, for scripts and people without a display.
//
//   kev-cli [options] QUESTION...      answer the questions in one pack
//   kev-cli info [--model PATH]        what the engine and the model are
//   kev-cli replay BUNDLE              run a bundle (--bundle) again, compare the tokens
//
// Exit codes (the end of kUsage says the same to users): 0 success; 1 a model, adapter,
// question-file, bundle or run error (non-finite logits included), and any unexpected
// exception; 2 usage error; 3 isolation difference (--verify-isolation) or a replay whose
// tokens differ from the bundle's; 4 out of memory; 128+N
// stopped by signal N (130 SIGINT, 143 SIGTERM), with what was generated still printed.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <iterator>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <unistd.h>
#include <vector>

#include <nlohmann/json.hpp>

#include "kev/answer_engine.h"
#include "kev/cpu_kernels.h"
#include "kev/engine_info.h"
#include "kev/error.h"
#include "kev/gguf.h"
#include "kev/session.h"

#include "cli.h"
#include "cli_bundle.h"
#include "cli_input.h"
#include "cli_questions.h"
#include "cli_remote.h"
#include "cli_terminal.h"

namespace {

constexpr int kExitError = 1;
constexpr int kExitUsage = 2;
constexpr int kExitIsolation = 3;
constexpr int kExitOutOfMemory = 4;
constexpr int kExitSignalBase = 128;  // + the signal's number: 130 SIGINT, 143 SIGTERM

using kevcli::UsageError;

const char* kUsage =
    "usage: kev-cli [options] QUESTION...\n"
    "       kev-cli info [--model PATH] [--json]\n"
    "       kev-cli tokenize [--model PATH] [--text TEXT] [--json]   (text from stdin without --text)\n"
    "       kev-cli replay BUNDLE [--model PATH] [--json]\n"
    "\n"
    "Answers every QUESTION in one packed forward pass; each answer is isolated from\n"
    "the others, exactly as if it ran alone.\n"
    "\n"
    "model:\n"
    "  --model PATH              .gguf file or Hugging Face folder (default: built-in SmolLM2-135M)\n"
    "  --precision auto|fp32|half|bf16|fp16|4bit|nf4  working precision (default auto: the fastest\n"
    "                            on this CPU for the file, see info; half = bf16 on CPU, fp16 on\n"
    "                            CUDA; 4bit = 4-bit linear layers, GGUF Q4_0/Q4_1/Q4_K/Q8_0\n"
    "                            blocks kept, others NF4, bf16 activations; nf4 = NF4 for\n"
    "                            every linear layer)\n"
    "  --device cpu|cuda         (default cpu)\n"
    "  --chat-format NAME        chatml, llama3, llama2, mistral, gemma or phi3: the prompt\n"
    "                            format, for a model whose chat template is missing or not one\n"
    "                            Kev recognises\n"
    "                            (default: the model's own template)\n"
    "LoRA (PEFT adapter folder; merged when every question uses it alike, else per question):\n"
    "  --lora PATH|demo          adapter for every question (demo: the built-in capitals adapter)\n"
    "  --lora-scale S            multiplier of alpha/r, 0 to 2 (default 1)\n"
    "questions:\n"
    "  --file FILE               questions.json (array of strings or objects) or .jsonl (one per line),\n"
    "                            at most 16 MiB; an object is {\"question\": ..., and optionally\n"
    "                            \"temperature\", \"top_p\", \"top_k\", \"min_p\", \"repetition_penalty\",\n"
    "                            \"max_new_tokens\", \"seed\", \"stop\", \"lora\": true|false, \"lora_scale\"}\n"
    "                            (LoRA without --lora: the demo adapter); \"messages\": [{\"role\":\n"
    "                            \"system\"|\"user\"|\"assistant\", \"content\": ...}] instead of \"question\"\n"
    "                            continues a conversation (system first, turns alternate, last: user)\n"
    "prompt:\n"
    "  --system TEXT             system message for every question\n"
    "  --shared-context TEXT|@FILE  text every question sees, computed once (a file: at most 16 MiB)\n"
    "sampling (for every question; KEV_TEMPERATURE may give per-question defaults):\n"
    "  --temperature T           0 = greedy (default), up to 2 in the app, at most 10\n"
    "  --top-k K                 keep the K most likely tokens: 0 (off, the default) to 2147483647\n"
    "  --top-p P                 (0, 1], 1 = off       --min-p P   [0, 1), 0 = off\n"
    "  --repetition-penalty R    more than 0, 1 = off\n"
    "  --max-new-tokens N        1 or more (default 256)\n"
    "  --seed S                  random seed, 0 to 2^64-1 (per question: S, S+1, ...)\n"
    "  --stop TEXT               stop string (repeatable)\n"
    "run:\n"
    "  --sequential              answer one question at a time (for comparison)\n"
    "  --verify-isolation        run packed and one at a time; exit 3 on any difference\n"
    "  --ignore-eos              never stop at end-of-sequence (fixed lengths)\n"
    "  --logprobs K              top-K log-probabilities of every generated token (JSON), 0 to 100\n"
    "  --json                    machine-readable output: one JSON document\n"
    "  --jsonl                   machine-readable output: one JSON line per question\n"
    "  --bundle OUT.json         also write a reproducibility bundle of the run: the model's and\n"
    "                            adapter's SHA-256, the precision, every question with its settings,\n"
    "                            the seed it used, its tokens, text and timings\n"
    "remote engine (an OpenAI-compatible server: vLLM, SGLang, llama.cpp's server):\n"
    "  --server URL              send each question as one streaming request to URL (e.g.\n"
    "                            https://host:8000/v1); the API key comes from KEV_API_KEY\n"
    "  --server-model NAME       one of the server's /v1/models (default: its only one)\n"
    "  --completions             /v1/completions instead of /v1/chat/completions\n"
    "  --insecure                allow plain http to a host that is not this machine\n"
    "  --timeout S               a card fails after S seconds without a byte (default 120)\n"
    "                            (--verify-isolation: every card again alone; exit 3 when the server's\n"
    "                            answer alone differs from its answer in the batch)\n"
    "  -h, --help                this text\n"
    "\n"
    "On a terminal several answers stream side by side, each in its own labelled block;\n"
    "into a pipe or a file they are printed whole, labelled, with nothing decorative.\n"
    "`info` loads the model as a run would, so it fails wherever a run would fail.\n"
    "`replay BUNDLE` loads the bundle's model (--model PATH: a moved copy) at the recorded\n"
    "precision, says on stderr when the model file or adapter differs from the recorded\n"
    "SHA-256, runs every card again in one pack exactly as recorded (seeds included) and\n"
    "prints \"card N: all K tokens match\" or \"card N differs at token T: ...\" per card.\n"
    "\n"
    "exit codes: 0 done; 1 model, adapter, question-file, shared-context-file or bundle error,\n"
    "or a card stopped by non-finite logits (NaN/Inf: a broken model; said on stderr); 2 usage\n"
    "error (an option or its value); 3 isolation difference (--verify-isolation), or a replay\n"
    "whose tokens differ from the bundle's; 4 out of memory (the run was refused before it\n"
    "started); 130 interrupted by SIGINT (Ctrl-C), 143 by SIGTERM: what was generated so far\n"
    "is still printed, JSON included.\n";

// The signal that asked kev-cli to stop (SIGINT or SIGTERM), 0 while none has.
volatile std::sig_atomic_t g_signal = 0;
kev::CancelFlags* volatile g_cancel = nullptr;

void on_stop_signal(int signo) {
    g_signal = signo;
    if (g_cancel) g_cancel->cancel_all();  // an atomic store: async-signal-safe
}

int interrupted_code() { return kExitSignalBase + static_cast<int>(g_signal); }

// SIGINT and SIGTERM cancel the run; what was generated is printed and the exit code
// says which signal it was. Installed from .preinit_array (below), before any shared
// library's initialisers: libtorch's take ~0.5 s before main() starts, and a signal in
// that time would otherwise kill the process outright.
void install_signal_handlers() {
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
}

void preinit_signal_handlers(int, char**, char**) { install_signal_handlers(); }

}  // namespace

// Run by the dynamic loader before the initialisers of every shared library (ELF
// executables only; glibc passes argc, argv, envp).
__attribute__((section(".preinit_array"), used)) void (*const kev_cli_preinit)(int, char**, char**) =
    preinit_signal_handlers;

namespace {

struct Options {
    std::string command;  // "" = answer, "info", "tokenize", "replay"
    std::string model = kev::builtin_model_path();
    bool model_given = false;  // --model was given
    kev::LoadOptions load;
    std::optional<kev::ChatFormat> chat_format;  // --chat-format
    bool auto_precision = true;  // --precision auto (the default): resolved once the model is known
    bool half = false;           // --precision half: bf16 on the CPU, fp16 on CUDA
    std::optional<std::string> system;
    std::string shared_context;
    std::string shared_context_file;  // @FILE's path, for messages
    kev::SamplingSettings sampling;
    bool sequential = false;
    bool verify = false;
    bool ignore_eos = false;
    bool json = false;
    bool jsonl = false;
    std::int32_t logprobs = 0;
    std::vector<std::string> questions;
    // Per-question settings from --file (same length as questions when a file was read).
    std::vector<std::optional<kev::SamplingSettings>> per_question;
    std::optional<std::string> lora;  // --lora
    float lora_scale = 1.0f;
    std::vector<std::optional<kev::LoraUse>> per_question_lora;  // "lora"/"lora_scale" in --file
    // "messages" in --file: a question's own system message and earlier turns.
    std::vector<std::optional<std::string>> per_question_system;
    std::vector<std::vector<kev::ChatTurn>> per_question_history;
    std::optional<std::string> text;  // tokenize --text
    std::string file;
    std::size_t file_first = std::numeric_limits<std::size_t>::max();  // the first question from --file
    std::string bundle_out;          // --bundle
    std::string replay_bundle;       // replay BUNDLE
    std::vector<std::string> flags;  // every option given, for the commands that take few
    kevcli::RemoteOptions remote;    // --server and its options
};

// --shared-context: the text itself, or @FILE for a file's contents.
std::string read_text_arg(const std::string& value) {
    if (value.empty() || value[0] != '@') return value;
    return kevcli::read_file_limited(value.substr(1), kevcli::kMaxSharedContextBytes, "a shared-context file");
}

void read_question_file(Options& o) {
    // Questions given on the command line keep their place, without overrides.
    o.per_question.assign(o.questions.size(), std::nullopt);
    o.per_question_lora.assign(o.questions.size(), std::nullopt);
    o.per_question_system.assign(o.questions.size(), std::nullopt);
    o.per_question_history.assign(o.questions.size(), {});
    o.file_first = o.questions.size();
    for (auto& q : kevcli::read_question_file(o.file, o.sampling, o.lora_scale)) {
        o.questions.push_back(std::move(q.question));
        o.per_question.push_back(std::move(q.sampling));
        o.per_question_lora.push_back(q.lora);
        o.per_question_system.push_back(std::move(q.system));
        o.per_question_history.push_back(std::move(q.history));
    }
}

Options parse(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a.size() > 1 && a[0] == '-' && a != "--") o.flags.push_back(a);
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) throw UsageError{a + " needs a value"};
            return argv[++i];
        };
        if (a == "-h" || a == "--help") {
            o.command = "help";
        } else if (a == "--version") {
            o.command = "version";
        } else if (a == "--model") {
            o.model = value();
            o.model_given = true;
        } else if (a == "--precision") {
            const std::string p = value();
            o.auto_precision = p == "auto";
            o.half = p == "half";  // resolved once the device is known (below)
            try {
                if (!o.auto_precision && !o.half) kev::set_precision(o.load, p);
            } catch (const kev::Error&) {
                throw UsageError{"--precision must be auto, fp32, half, bf16, fp16, 4bit or nf4, got '" + p + "'"};
            }
        } else if (a == "--chat-format") {
            const std::string f = value();
            o.chat_format = kev::chat_format_from_string(f);
            if (!o.chat_format) throw UsageError{"--chat-format must be chatml, llama3, llama2, mistral, gemma or phi3, got '" + f + "'"};
        } else if (a == "--device") {
            const std::string d = value();
            if (d == "cpu") o.load.device = kev::Device::Cpu;
            else if (d == "cuda") o.load.device = kev::Device::Cuda;
            else throw UsageError{"--device must be cpu or cuda, got '" + d + "'"};
        } else if (a == "--lora") {
            o.lora = value();
        } else if (a == "--lora-scale") {
            o.lora_scale = kevcli::parse_real(a, value());
        } else if (a == "--system") {
            o.system = value();
        } else if (a == "--shared-context") {
            const std::string v = value();
            o.shared_context = read_text_arg(v);
            o.shared_context_file = v.empty() || v[0] != '@' ? std::string() : v.substr(1);
        } else if (a == "--temperature") {
            o.sampling.temperature = kevcli::parse_real(a, value());
        } else if (a == "--top-k") {
            o.sampling.top_k = static_cast<std::int32_t>(
                kevcli::parse_integer(a, value(), 0, std::numeric_limits<std::int32_t>::max()));
        } else if (a == "--top-p") {
            o.sampling.top_p = kevcli::parse_real(a, value());
        } else if (a == "--min-p") {
            o.sampling.min_p = kevcli::parse_real(a, value());
        } else if (a == "--repetition-penalty") {
            o.sampling.repetition_penalty = kevcli::parse_real(a, value());
        } else if (a == "--max-new-tokens") {
            o.sampling.max_new_tokens = kevcli::parse_integer(a, value(), 1, std::numeric_limits<std::int64_t>::max());
        } else if (a == "--seed") {
            o.sampling.seed = kevcli::parse_unsigned(a, value());
        } else if (a == "--stop") {
            o.sampling.stop_strings.push_back(value());
        } else if (a == "--sequential") {
            o.sequential = true;
        } else if (a == "--verify-isolation") {
            o.verify = true;
        } else if (a == "--ignore-eos") {
            o.ignore_eos = true;
        } else if (a == "--logprobs") {
            o.logprobs = static_cast<std::int32_t>(kevcli::parse_integer(a, value(), 0, 100));
        } else if (a == "--json") {
            o.json = true;
        } else if (a == "--jsonl") {
            o.jsonl = true;
        } else if (a == "--file") {
            o.file = value();
        } else if (a == "--text") {
            o.text = value();
        } else if (a == "--server") {
            o.remote.server = value();
            if (o.remote.server.empty()) throw UsageError{"--server needs a URL"};
        } else if (a == "--server-model") {
            o.remote.model = value();
        } else if (a == "--insecure") {
            o.remote.insecure = true;
        } else if (a == "--completions") {
            o.remote.completions = true;
        } else if (a == "--timeout") {
            o.remote.timeout_s = kevcli::parse_real(a, value());
            if (!(o.remote.timeout_s >= 0.1 && o.remote.timeout_s <= 86400.0))
                throw UsageError{"--timeout must be 0.1 to 86400 seconds"};
        } else if (a == "--bundle") {
            o.bundle_out = value();
            if (o.bundle_out.empty()) throw UsageError{"--bundle needs a file name"};
        } else if (a == "tokenize" && o.command.empty() && o.questions.empty()) {
            o.command = "tokenize";
        } else if (a == "info" && o.command.empty() && o.questions.empty()) {
            o.command = "info";
        } else if (a == "replay" && o.command.empty() && o.questions.empty()) {
            o.command = "replay";
        } else if (a.size() > 1 && a[0] == '-' && a != "--") {
            throw UsageError{"unknown option '" + a + "'"};
        } else {
            o.questions.push_back(a == "--" && i + 1 < argc ? argv[++i] : a);
        }
    }
    try {
        o.sampling.validate();
        kev::LoraUse{true, o.lora_scale}.validate();
    } catch (const kev::Error& e) {
        throw UsageError{e.what()};
    }
    // Text the tokenizer would refuse after the model loaded is refused now, by name.
    // half: bf16 on the CPU (its fast kernels are bf16), fp16 on CUDA (every GPU Kev builds
    // for runs both at one tensor-core rate; fp16 keeps 3 more mantissa bits).
    if (o.half) kev::set_precision(o.load, o.load.device == kev::Device::Cuda ? "fp16" : "bf16");
    for (std::size_t q = 0; q < o.questions.size(); ++q) {
        if (!kevcli::is_valid_utf8(o.questions[q]))
            throw UsageError{"question " + std::to_string(q + 1) + " is not valid UTF-8"};
    }
    if (o.system && !kevcli::is_valid_utf8(*o.system)) throw UsageError{"--system: the text is not valid UTF-8"};
    for (const std::string& stop : o.sampling.stop_strings)
        if (!kevcli::is_valid_utf8(stop)) throw UsageError{"--stop: the text is not valid UTF-8"};
    if (!kevcli::is_valid_utf8(o.shared_context)) {
        if (o.shared_context_file.empty()) throw UsageError{"--shared-context: the text is not valid UTF-8"};
        throw kev::Error(kev::ErrorCode::Format, o.shared_context_file + ": not valid UTF-8 text");
    }
    if (o.command == "replay") {
        for (const std::string& flag : o.flags)
            if (flag != "--model" && flag != "--json") throw UsageError{"replay takes only --model PATH and --json, not " + flag};
        if (o.questions.size() != 1) throw UsageError{"replay needs one bundle file: kev-cli replay BUNDLE"};
        o.replay_bundle = o.questions.front();
        o.questions.clear();
        return o;
    }
    if (!o.bundle_out.empty() && !o.command.empty()) throw UsageError{"--bundle is for answering questions, not " + o.command};
    if (!o.file.empty()) read_question_file(o);
    if (o.command.empty() && o.questions.empty()) throw UsageError{"no question given"};
    if (o.json && o.jsonl) throw UsageError{"--json and --jsonl exclude each other"};
    const bool remote = !o.remote.server.empty();
    for (const std::string& flag : o.flags) {
        static const char* const kRemoteOnly[] = {"--server-model", "--insecure", "--completions", "--timeout"};
        static const char* const kLocalOnly[] = {"--model", "--precision", "--device", "--chat-format", "--lora",
                                                 "--lora-scale", "--bundle"};
        if (!remote)
            for (const char* f : kRemoteOnly)
                if (flag == f) throw UsageError{flag + " is for --server URL"};
        if (remote)
            for (const char* f : kLocalOnly)
                if (flag == f) throw UsageError{flag + " is for the local engine, not --server (the server chose its model and precision)"};
    }
    if (remote && !o.command.empty()) throw UsageError{"--server answers questions; " + o.command + " is for the local engine"};
    if (remote) {
        if (const char* key = std::getenv("KEV_API_KEY")) o.remote.api_key = key;
    }
    return o;
}

// Standard input, at most `max_bytes` of it (stdin may be /dev/zero).
std::string read_stdin(std::uint64_t max_bytes) {
    std::string text;
    char buf[1 << 16];
    while (std::cin.read(buf, sizeof buf) || std::cin.gcount() > 0) {
        text.append(buf, static_cast<std::size_t>(std::cin.gcount()));
        if (text.size() > max_bytes) {
            throw kev::Error(kev::ErrorCode::Io, "standard input: more than " + std::to_string(max_bytes >> 20) +
                                                     " MiB, over the limit for text to tokenize");
        }
    }
    return text;
}

// Any error while reading a model is a model error (exit 1), whatever code the engine
// gave it: only the command line itself is a usage error. Out of memory and a stop by
// signal keep their own exit codes.
template <typename F>
auto as_model_error(F&& load) -> decltype(load()) {
    try {
        return load();
    } catch (const kev::Error& e) {
        if (e.code() != kev::ErrorCode::InvalidArgument) throw;
        throw kev::Error(kev::ErrorCode::Format, e.what());
    }
}

int tokenize(const Options& o) {
    kevcli::refuse_unloadable_model_file(o.model);
    const kev::Tokenizer tok = as_model_error([&] { return kevcli::load_tokenizer(o.model); });
    const std::string text = o.text ? *o.text : read_stdin(kevcli::kMaxSharedContextBytes);
    const std::vector<kev::TokenId> ids = tok.encode(text, kev::SpecialTokens::Parse);
    if (o.json) {
        nlohmann::json pieces = nlohmann::json::array();
        for (kev::TokenId id : ids) pieces.push_back(tok.id_to_piece(id));
        std::printf("%s\n", kevcli::dump_json({{"ids", ids}, {"pieces", pieces}, {"count", ids.size()}}).c_str());
    } else {
        for (kev::TokenId id : ids) std::printf("%d\t%s\n", id, tok.id_to_piece(id).c_str());
        std::fprintf(stderr, "%zu tokens\n", ids.size());
    }
    return 0;
}

// A question's LoRA use: --lora for all, a file entry's "lora"/"lora_scale" over it.
kev::LoraUse card_lora(const Options& o, std::size_t index) {
    if (index < o.per_question_lora.size() && o.per_question_lora[index]) return *o.per_question_lora[index];
    return {o.lora.has_value(), o.lora_scale};
}

kev::GenerationRequest make_request(const Options& o, const std::vector<std::string>& questions,
                                    std::size_t first_index) {
    kev::GenerationRequest r;
    r.system = o.system;
    r.shared_context = o.shared_context;
    for (std::size_t q = 0; q < questions.size(); ++q) {
        const std::size_t index = first_index + q;
        kev::CardRequest card;
        card.question = questions[q];
        card.sampling = o.sampling;
        if (o.sampling.seed) card.sampling.seed = *o.sampling.seed + index;
        if (index < o.per_question.size() && o.per_question[index]) card.sampling = *o.per_question[index];
        card.lora = card_lora(o, index);
        if (index < o.per_question_system.size() && o.per_question_system[index]) card.system = o.per_question_system[index];
        if (index < o.per_question_history.size()) card.history = o.per_question_history[index];
        r.cards.push_back(std::move(card));
    }
    return r;
}

// Runs one pack on `engine` (local or a server): Ctrl-C cancels it, one card streams its
// text, several show progress.
kev::GenerationResult run_request(kev::AnswerEngine& engine, const kev::GenerationRequest& request, bool stream,
                                  kevcli::LiveView* live = nullptr) {
    const std::size_t cards = request.cards.size();
    kev::CancelFlags cancel(cards);
    g_cancel = &cancel;
    if (g_signal) cancel.cancel_all();
    kev::RunOptions run;
    run.cancel = &cancel;
    const bool one = cards == 1;
    // One question streams its text; several stream into the live view when stdout is a
    // terminal, else they are printed whole, labelled, at the end, with a progress line
    // on stderr meanwhile (only on a terminal: nothing decorative goes into a pipe).
    const bool progress = !live && ::isatty(STDERR_FILENO) != 0;
    std::int64_t tokens = 0;
    run.on_step = [&](const kev::StepEvent& ev) {
        if (live) live->update(ev);
        for (const auto& u : ev.updates) {
            tokens += static_cast<std::int64_t>(u.tokens.size());
            if (stream && one && !u.text.empty()) std::printf("%s", u.text.c_str());
        }
        if (stream && one) std::fflush(stdout);
        if (progress && !one) {
            std::fprintf(stderr, "\r\033[Kgenerating: step %lld, %d of %zu cards active, %lld tokens, %.1f tok/s",
                         static_cast<long long>(ev.step), ev.active_cards, cards,
                         static_cast<long long>(tokens), ev.aggregate_tokens_per_s);
        }
    };
    struct Clear {  // the progress line and the signal's target go whatever happens
        bool line;
        ~Clear() {
            if (line) std::fprintf(stderr, "\r\033[K");
            g_cancel = nullptr;
        }
    } clear{progress && !one};
    return engine.answer(request, run);
}

kev::GenerationResult run_pack(kev::AnswerEngine& engine, const Options& o, const std::vector<std::string>& questions,
                               std::size_t first_index, bool stream, kevcli::LiveView* live = nullptr) {
    kev::GenerationRequest request = make_request(o, questions, first_index);
    request.ignore_end_of_sequence = o.ignore_eos;
    request.logprobs = o.logprobs;
    return run_request(engine, request, stream, live);
}

nlohmann::json card_json(const std::string& question, const kev::CardResult& c, std::int32_t logprobs,
                         bool token_ids) {
    const char* state = c.finish == kev::FinishReason::Failed      ? "failed"
                        : c.finish == kev::FinishReason::Cancelled ? "stopped"
                                                                   : "finished";
    nlohmann::json j = {{"question", question},
                        {"text", c.text},
                        {"state", state},
                        {"finish_reason", kev::to_string(c.finish)},
                        {"seed", c.seed},
                        {"temperature", c.temperature},
                        {"stats",
                         {{"prompt_tokens", c.stats.prompt_tokens},
                          {"prompt_tokens_reused", c.stats.reused_tokens},
                          {"prompt_tokens_computed", c.stats.prompt_tokens - c.stats.reused_tokens},
                          {"generated_tokens", c.stats.generated_tokens},
                          {"time_to_first_token_s", c.stats.time_to_first_token_s},
                          {"tokens_per_s", c.stats.tokens_per_s}}}};
    if (token_ids) j["tokens"] = c.tokens;
    else j["stats"]["measured_by"] = "kev (from the stream)";
    if (!c.error.empty()) j["error"] = c.error;
    if (!c.matched_stop.empty()) j["stop"] = c.matched_stop;
    if (logprobs > 0 && token_ids) {
        nlohmann::json lp = nlohmann::json::array();
        for (const auto& step : c.logprobs) {
            nlohmann::json top = nlohmann::json::array();
            for (const auto& [id, v] : step) top.push_back({{"token", id}, {"logprob", v}});
            lp.push_back(top);
        }
        j["logprobs"] = lp;
    } else if (logprobs > 0) {  // a server's: the tokens by their text, as it sent them
        nlohmann::json lp = nlohmann::json::array();
        for (const kev::TokenDetail& d : c.details) {
            nlohmann::json top = nlohmann::json::array();
            for (const kev::TokenAlternative& a : d.top) top.push_back({{"token", a.piece}, {"logprob", a.logprob}});
            lp.push_back({{"token", d.piece}, {"logprob", d.logprob}, {"top", top}});
        }
        j["logprobs"] = lp;
    }
    return j;
}

// The model as a run loads it (`info` loads it the same way, to fail where a run would):
// the precision resolved, a progress bar on a terminal, the chat format checked. `loaded`
// (may be null) receives the load options as used ("auto" resolved).
std::unique_ptr<kev::Session> open_session(const Options& o, kev::PrecisionChoice& precision,
                                           kev::LoadOptions* loaded = nullptr) {
    kevcli::refuse_unloadable_model_file(o.model);
    kev::SessionOptions session_options{o.load, o.chat_format};
    precision = {kev::to_string(o.load.dtype), "asked for"};
    if (o.load.quant != kev::WeightQuant::None) precision.name = kev::to_string(o.load.quant);
    const bool bar = ::isatty(STDERR_FILENO) != 0;
    session_options.load.progress = [bar](int done, int total) {
        // A signal during a long load stops it here, between tensors.
        if (g_signal) {
            if (bar) std::fprintf(stderr, "\r\033[K");
            throw kev::Error(kev::ErrorCode::Cancelled, "interrupted while loading the model");
        }
        if (!bar) return;
        const int width = 30;
        const int filled = total > 0 ? done * width / total : width;
        std::fprintf(stderr, "\r\033[Kloading model [%s%s] %d/%d", std::string(static_cast<std::size_t>(filled), '#').c_str(),
                     std::string(static_cast<std::size_t>(width - filled), ' ').c_str(), done, total);
        if (done >= total) std::fprintf(stderr, "\r\033[K");
    };
    auto session = as_model_error([&] {
        if (o.auto_precision && o.load.device == kev::Device::Cpu) {  // CUDA keeps fp32 unless asked
            precision = kev::choose_auto_precision(o.model);
            kev::set_precision(session_options.load, precision.name);
        }
        return kev::Session::open(o.model, session_options);
    });
    if (loaded) {
        *loaded = session_options.load;
        loaded->progress = nullptr;
    }
    if (!session->chat() && (o.command.empty() || o.command == "replay")) {
        std::string why = session->chat_error();
        const std::string tail = "choose a chat format";
        if (why.size() >= tail.size() && why.compare(why.size() - tail.size(), tail.size(), tail) == 0)
            why.resize(why.size() - tail.size());
        else
            why += "; ";
        throw kev::Error(kev::ErrorCode::Unsupported,
                         o.model + ": " + why + "choose a chat format with --chat-format chatml, llama3, llama2, mistral, gemma or phi3");
    }
    return session;
}

// "kev-cli: card 2: stopped: ..." on stderr for every card whose logits became NaN or
// infinite (a broken model or adapter): its answer is cut there, not finished. True when
// there was one.
bool report_non_finite(const std::vector<kev::CardResult>& results) {
    bool any = false;
    for (std::size_t q = 0; q < results.size(); ++q) {
        if (results[q].finish != kev::FinishReason::NonFinite) continue;
        std::fprintf(stderr, "kev-cli: card %zu: stopped: the model produced non-finite logits (NaN/Inf) at token %zu\n",
                     q + 1, results[q].tokens.size() + 1);
        any = true;
    }
    return any;
}

// --bundle: the run as one file (kev/bundle.h), every card as one pack would run it.
void write_run_bundle(const Options& o, const kev::Session& session, const kev::LoadOptions& loaded, bool wants_lora,
                      const std::vector<kev::CardResult>& results) {
    kev::GenerationRequest request = make_request(o, o.questions, 0);
    request.ignore_end_of_sequence = o.ignore_eos;
    kevcli::RunRecord run;
    run.model_path = o.model;
    run.load = loaded;
    run.session = &session;
    run.chat_format_chosen = o.chat_format.has_value();
    if (wants_lora) run.adapter = o.lora ? *o.lora : std::string("demo");
    run.lora_scale = o.lora_scale;
    run.ignore_eos = o.ignore_eos;
    run.request = &request;
    for (std::size_t q = 0; q < o.questions.size(); ++q) {
        run.labels.push_back(q < o.file_first ? std::string("command line")
                                              : o.file + " entry " + std::to_string(q - o.file_first + 1));
    }
    run.results = &results;
    kev::write_bundle(kevcli::make_run_bundle(run), o.bundle_out);
    std::fprintf(stderr, "kev-cli: bundle written to %s\n", o.bundle_out.c_str());
}

// "kev-cli: card 2 failed: HTTP 503: ..." on stderr for every card a server did not
// answer. True when there was one.
bool report_failed(const std::vector<kev::CardResult>& results) {
    bool any = false;
    for (std::size_t q = 0; q < results.size(); ++q) {
        if (results[q].finish != kev::FinishReason::Failed) continue;
        std::fprintf(stderr, "kev-cli: card %zu failed: %s\n", q + 1, results[q].error.c_str());
        any = true;
    }
    return any;
}

int answer(const Options& o) {
    if (!o.bundle_out.empty()) kevcli::check_bundle_destination(o.bundle_out);
    // The engine: the packed forward on this machine, or a server (--server). Everything
    // below talks to kev::AnswerEngine only; what is the local model's alone (precision,
    // LoRA, bundles) reads `session`, which a server run does not have.
    const bool remote = !o.remote.server.empty();
    kev::PrecisionChoice precision;
    kev::LoadOptions loaded;
    std::unique_ptr<kev::Session> session;
    std::unique_ptr<kev::AnswerEngine> engine;
    kevcli::RemoteEngineInfo server;
    bool wants_lora = false;
    std::string lora_path;
    if (remote) {
        engine = kevcli::open_remote_engine(o.remote, &server);
    } else {
        session = open_session(o, precision, &loaded);
        wants_lora = o.lora.has_value();
        for (const auto& l : o.per_question_lora) wants_lora = wants_lora || (l && l->enabled);
        lora_path = !o.lora || *o.lora == "demo" ? kev::demo_adapter_path() : *o.lora;
        if (wants_lora) {
            // An adapter that does not fit the model is an adapter error (exit 1), not a
            // usage error, whatever code the engine gave it.
            as_model_error([&] { session->load_lora(lora_path); });
        }
        engine = std::make_unique<kev::LocalEngine>(*session, kev::temperature_defaults_from_env());
    }
    const bool stream = !o.json && !o.jsonl;

    std::vector<kev::CardResult> results;
    double total_s = 0.0;
    std::string lora_mode;  // as the run(s) applied it; "merged, off" when sequential runs differ
    auto note_mode = [&](kev::LoraMode m) {
        const std::string name = kev::to_string(m);
        if (lora_mode.find(name) == std::string::npos) lora_mode += (lora_mode.empty() ? "" : ", ") + name;
    };
    if (o.sequential) {
        for (std::size_t q = 0; q < o.questions.size() && !g_signal; ++q) {
            if (stream && o.questions.size() > 1) std::printf("--- [%zu] %s\n", q + 1, o.questions[q].c_str());
            auto r = run_pack(*engine, o, {o.questions[q]}, q, stream);
            if (stream) std::printf("\n");
            total_s += r.total_s;
            note_mode(r.lora_mode);
            results.push_back(std::move(r.cards[0]));
        }
    } else {
        std::unique_ptr<kevcli::LiveView> live;
        if (stream && o.questions.size() > 1 && ::isatty(STDOUT_FILENO))
            live = std::make_unique<kevcli::LiveView>(stdout, o.questions, 0);
        auto r = run_pack(*engine, o, o.questions, 0, stream && o.questions.size() == 1, live.get());
        total_s = r.total_s;
        note_mode(r.lora_mode);
        results = std::move(r.cards);
        if (live) {
            live->finish(results);
        } else if (stream && o.questions.size() > 1) {
            for (std::size_t q = 0; q < results.size(); ++q) {
                std::printf("--- [%zu] %s\n%s\n", q + 1, o.questions[q].c_str(), results[q].text.c_str());
            }
        } else if (stream) {
            std::printf("\n");
        }
    }
    if (session && session->lora() && !o.json) std::fprintf(stderr, "LoRA %s: %s\n", session->lora()->path.c_str(), lora_mode.c_str());

    // A stop by signal wins (the user asked for it), then a broken or failed card, then
    // an isolation difference found below.
    const bool broken = report_non_finite(results);
    int code = report_failed(results) || broken ? kExitError : 0;
    nlohmann::json out = {{"engine", remote ? "remote" : "local"}, {"packed", !o.sequential}, {"total_s", total_s}};
    if (remote) {
        out["server"] = o.remote.server;
        out["model"] = server.model;
        out["api"] = server.api;
    } else {
        out["model"] = o.model;
        out["precision"] = {{"name", precision.name}, {"auto", o.auto_precision}, {"why", precision.why}};
    }
    if (wants_lora) out["lora"] = {{"adapter", lora_path}, {"mode", lora_mode}};
    if (o.verify && !g_signal) {
        // Every answered card again alone, with the seed it ran with: the same engine must
        // give the same tokens (a server: the same text) whatever ran beside it.
        nlohmann::json diffs = nlohmann::json::array();
        const auto answered = [](const kev::CardResult& c) {
            return c.finish != kev::FinishReason::Failed && c.finish != kev::FinishReason::Cancelled;
        };
        for (std::size_t q = 0; q < o.questions.size() && !g_signal; ++q) {
            if (!answered(results[q])) continue;
            kev::GenerationRequest request = make_request(o, {o.questions[q]}, q);
            request.ignore_end_of_sequence = o.ignore_eos;
            request.cards[0].sampling.seed = results[q].seed;
            const auto alone = run_request(*engine, request, false);
            if (!answered(alone.cards[0])) continue;
            const std::int64_t k = kev::first_difference(*engine, results[q], alone.cards[0]);
            if (k >= 0) {
                diffs.push_back({{"question", q + 1}, {"first_difference", k},
                                 {"compared", engine->gives_token_ids() ? "tokens" : "text (bytes)"}});
                if (!engine->gives_token_ids()) diffs.back()["alone"] = alone.cards[0].text;
                if (code == 0) code = kExitIsolation;
            }
        }
        out["isolation_differences"] = diffs;
        if (stream) {
            std::printf("isolation%s: %s\n", remote ? " on this server" : "",
                        diffs.empty() ? "every answer equals its solo run"
                                      : ("DIFFERENCES " + kevcli::dump_json(diffs)).c_str());
        }
    }
    if (o.json) {
        nlohmann::json cards = nlohmann::json::array();
        for (std::size_t q = 0; q < results.size(); ++q) {
            cards.push_back(card_json(o.questions[q], results[q], o.logprobs, engine->gives_token_ids()));
            const kev::LoraUse lora = card_lora(o, q);
            if (wants_lora) cards.back()["lora"] = {{"on", lora.enabled}, {"scale", lora.scale}};
        }
        out["cards"] = cards;
        out["interrupted"] = g_signal != 0;
        std::printf("%s\n", kevcli::dump_json(out, 2).c_str());
    } else if (o.jsonl) {
        // One line per question, in order; the run's facts on each line, so any line
        // stands alone in a pipeline.
        for (std::size_t q = 0; q < results.size(); ++q) {
            nlohmann::json line = card_json(o.questions[q], results[q], o.logprobs, engine->gives_token_ids());
            line["index"] = q + 1;
            line["engine"] = out["engine"];
            line["packed"] = !o.sequential;
            line["interrupted"] = g_signal != 0;
            std::printf("%s\n", kevcli::dump_json(line).c_str());
        }
        if (out.contains("isolation_differences"))
            std::printf("%s\n", kevcli::dump_json({{"isolation_differences", out["isolation_differences"]}}).c_str());
    }
    std::fflush(stdout);
    if (!o.bundle_out.empty()) write_run_bundle(o, *session, loaded, wants_lora, results);
    return g_signal ? interrupted_code() : code;
}

// `replay BUNDLE`: kev-cli's own loading (progress, signals, chat-format check) and
// running (Ctrl-C) under cli_bundle's comparison.
int replay(const Options& o) {
    kevcli::ReplayHooks hooks;
    hooks.open = [&o](const std::string& model, const kev::SessionOptions& options) {
        Options load = o;
        load.model = model;
        load.load = options.load;
        load.chat_format = options.chat_format;
        load.auto_precision = false;  // the recorded precision, whatever "auto" would choose here
        kev::PrecisionChoice precision;
        return open_session(load, precision);
    };
    // Every recorded card has its temperature: KEV_TEMPERATURE plays no part in a replay.
    hooks.run = [](kev::Session& session, const kev::GenerationRequest& request) {
        kev::LocalEngine engine(session);
        return run_request(engine, request, false);
    };
    const int code = kevcli::replay(o.replay_bundle, o.model_given ? std::optional<std::string>(o.model) : std::nullopt,
                                    o.json, hooks);
    return g_signal ? interrupted_code() : code;
}

#ifndef KEV_HAVE_REMOTE
}  // namespace
// A kev-cli configured without Qt (the GPU machine's build) has no remote engine.
std::unique_ptr<kev::AnswerEngine> kevcli::open_remote_engine(const RemoteOptions&, RemoteEngineInfo*) {
    throw UsageError{"this kev-cli was built without Qt Network: --server is not available"};
}
namespace {
#endif

int run(int argc, char** argv) {
    const Options o = parse(argc, argv);
    // A server answers the same cards as a local run would (settings, seeds S, S+1, ...,
    // file entries) through the same path.
    if (!o.remote.server.empty() && o.command.empty()) return answer(o);
    if (o.command == "help") {
        std::fputs(kUsage, stdout);
        return 0;
    }
    if (o.command == "version") {
        std::printf("kev-cli %s\n", kev::engine_info().kev_version.c_str());
        return 0;
    }
    // The kernel switches (KEV_ISA, KEV_BF16_KERNEL) are checked before anything slow:
    // one this CPU cannot run is refused here, by name.
    (void)kev::isa_limit();
    (void)kev::requested_bf16_kernel();
    if (g_signal) {
        std::fprintf(stderr, "kev-cli: interrupted before the model was loaded\n");
        return interrupted_code();
    }
    if (o.command == "info") {
        kev::PrecisionChoice precision;
        const auto session = open_session(o, precision);
        return kevcli::print_model_info(o.model, o.json, {precision.name, session->load_seconds()});
    }
    if (o.command == "tokenize") return tokenize(o);
    if (o.command == "replay") return replay(o);
    return answer(o);
}

// Leaves the process once everything it printed is out. Everything kev-cli writes
// to a file is closed (renamed into place) before run() returns, and its threads
// are done, so the only work left to a normal exit is libtorch's static
// destructors: a tenth of a second or more on a cold answer (about an eighth of
// `kev-cli info` in perf), spent on nothing the user sees. Sanitizer builds exit
// normally, so that LeakSanitizer still checks every run.
[[noreturn]] void leave(int code) {
    std::cout.flush();
    std::cerr.flush();
    std::fflush(nullptr);
#if defined(__SANITIZE_ADDRESS__)
    std::exit(code);
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
    std::exit(code);
#else
    std::_Exit(code);
#endif
#else
    std::_Exit(code);
#endif
}

int exit_code(int argc, char** argv) {
    // Every failure ends here with a message and an exit code: nothing reaches
    // std::terminate (an abort and a core dump are no answer to a bad file).
    try {
        return run(argc, argv);
    } catch (const UsageError& e) {
        std::fprintf(stderr, "kev-cli: %s\n(kev-cli --help for usage)\n", e.message.c_str());
        return kExitUsage;
    } catch (const kev::Error& e) {
        std::fprintf(stderr, "kev-cli: %s\n", e.what());
        if (e.code() == kev::ErrorCode::Cancelled && g_signal) return interrupted_code();
        if (e.code() == kev::ErrorCode::OutOfMemory) return kExitOutOfMemory;
        return e.code() == kev::ErrorCode::InvalidArgument ? kExitUsage : kExitError;
    } catch (const std::bad_alloc&) {
        std::fprintf(stderr, "kev-cli: out of memory\n");
        return kExitOutOfMemory;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "kev-cli: unexpected error: %s\n", e.what());
        return kExitError;
    } catch (...) {
        std::fprintf(stderr, "kev-cli: unexpected error (an exception of unknown type)\n");
        return kExitError;
    }
}

}  // namespace

int main(int argc, char** argv) {
    install_signal_handlers();  // again, for a loader that skipped .preinit_array
    leave(exit_code(argc, argv));
}
