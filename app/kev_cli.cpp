// kev-cli: the engine from a terminal, for scripts and people without a display.
//
//   kev-cli [options] QUESTION...      answer the questions in one pack
//   kev-cli info [--model PATH]        what the engine and the model are
//
// Exit codes: 0 success, 1 model or run error, 2 usage error, 3 isolation difference
// (--verify-isolation), 130 interrupted (what was generated is still printed).
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <optional>
#include <sys/stat.h>
#include <iterator>
#include <memory>
#include <sstream>
#include <map>
#include <string>
#include <unistd.h>
#include <vector>

#include <nlohmann/json.hpp>

#include "kev/cpu_kernels.h"
#include "kev/engine_info.h"
#include "kev/error.h"
#include "kev/gguf.h"
#include "kev/session.h"

#include "cli.h"
#include "cli_terminal.h"

namespace {

constexpr int kExitError = 1;
constexpr int kExitUsage = 2;
constexpr int kExitIsolation = 3;
constexpr int kExitOutOfMemory = 4;
constexpr int kExitInterrupted = 130;

const char* kUsage =
    "usage: kev-cli [options] QUESTION...\n"
    "       kev-cli info [--model PATH] [--json]\n"
    "       kev-cli tokenize [--model PATH] [--text TEXT] [--json]   (text from stdin without --text)\n"
    "\n"
    "Answers every QUESTION in one packed forward pass; each answer is isolated from\n"
    "the others, exactly as if it ran alone.\n"
    "\n"
    "model:\n"
    "  --model PATH              .gguf file or Hugging Face folder (default: built-in SmolLM2-135M)\n"
    "  --precision auto|fp32|half|4bit|nf4  working precision (default auto: the fastest on this\n"
    "                            CPU for the file, see info; half = bf16 on CPU; 4bit =\n"
    "                            4-bit linear layers, GGUF Q4_0/Q4_1 blocks kept, others NF4, bf16\n"
    "                            activations; nf4 = NF4 for every linear layer)\n"
    "  --device cpu|cuda         (default cpu)\n"
    "LoRA (PEFT adapter folder; merged when every question uses it alike, else per question):\n"
    "  --lora PATH|demo          adapter for every question (demo: the built-in capitals adapter)\n"
    "  --lora-scale S            multiplier of alpha/r, 0 to 2 (default 1)\n"
    "questions:\n"
    "  --file FILE               questions.json (array of strings or objects) or .jsonl (one per line);\n"
    "                            an object is {\"question\": ..., and optionally \"temperature\", \"top_p\",\n"
    "                            \"top_k\", \"min_p\", \"repetition_penalty\", \"max_new_tokens\", \"seed\", \"stop\",\n"
    "                            \"lora\": true|false, \"lora_scale\"} (LoRA without --lora: the demo adapter)\n"
    "prompt:\n"
    "  --system TEXT             system message for every question\n"
    "  --shared-context TEXT|@FILE  text every question sees, computed once\n"
    "sampling (for every question; KEV_TEMPERATURE may give per-question defaults):\n"
    "  --temperature T           0 = greedy (default), up to 2 in the app\n"
    "  --top-k K  --top-p P  --min-p P  --repetition-penalty R\n"
    "  --max-new-tokens N        (default 256)\n"
    "  --seed S                  random seed (per question: S, S+1, ...)\n"
    "  --stop TEXT               stop string (repeatable)\n"
    "run:\n"
    "  --sequential              answer one question at a time (for comparison)\n"
    "  --verify-isolation        run packed and one at a time; exit 3 on any difference\n"
    "  --ignore-eos              never stop at end-of-sequence (fixed lengths)\n"
    "  --logprobs K              top-K log-probabilities of every generated token (JSON)\n"
    "  --json                    machine-readable output: one JSON document\n"
    "  --jsonl                   machine-readable output: one JSON line per question\n"
    "  -h, --help                this text\n"
    "\n"
    "On a terminal several answers stream side by side, each in its own labelled block;\n"
    "into a pipe or a file they are printed whole, labelled, with nothing decorative.\n"
    "\n"
    "exit codes: 0 done, 1 model, adapter or file error, 2 usage error, 3 isolation\n"
    "difference (--verify-isolation), 4 out of memory (the run was refused before it\n"
    "started), 130 interrupted (Ctrl-C: what was generated so far is still printed).\n";

volatile std::sig_atomic_t g_interrupted = 0;
kev::CancelFlags* g_cancel = nullptr;

void on_sigint(int) {
    g_interrupted = 1;
    if (g_cancel) g_cancel->cancel_all();  // an atomic store: async-signal-safe
}

struct UsageError {
    std::string message;
};

struct Options {
    std::string command;  // "" = answer, "info"
    std::string model = kev::builtin_model_path();
    kev::LoadOptions load;
    bool auto_precision = true;  // --precision auto (the default): resolved once the model is known
    std::optional<std::string> system;
    std::string shared_context;
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
    std::optional<std::string> text;  // tokenize --text
    std::string file;
};

double parse_number(const std::string& flag, const std::string& value) {
    try {
        std::size_t used = 0;
        const double v = std::stod(value, &used);
        if (used != value.size()) throw std::invalid_argument(value);
        return v;
    } catch (const std::exception&) {
        throw UsageError{flag + " expects a number, got '" + value + "'"};
    }
}

std::int64_t parse_integer(const std::string& flag, const std::string& value) {
    try {
        std::size_t used = 0;
        const long long v = std::stoll(value, &used);
        if (used != value.size()) throw std::invalid_argument(value);
        return v;
    } catch (const std::exception&) {
        throw UsageError{flag + " expects a whole number, got '" + value + "'"};
    }
}

std::string read_text_arg(const std::string& value) {
    if (value.empty() || value[0] != '@') return value;
    std::ifstream in(value.substr(1), std::ios::binary);
    if (!in) throw UsageError{"cannot read " + value.substr(1)};
    return std::string(std::istreambuf_iterator<char>(in), {});
}

// One question from a file entry: a string, or an object with "question" and settings
// that override the command line's.
void add_question(Options& o, const nlohmann::json& item, const std::string& where) {
    if (item.is_string()) {
        o.questions.push_back(item.get<std::string>());
        o.per_question.emplace_back(std::nullopt);
        o.per_question_lora.emplace_back(std::nullopt);
        return;
    }
    if (!item.is_object() || !item.contains("question") || !item["question"].is_string()) {
        throw UsageError{where + ": expected a string or an object with a \"question\" string"};
    }
    kev::SamplingSettings s = o.sampling;
    std::optional<kev::LoraUse> lora;
    try {
        for (const auto& [key, v] : item.items()) {
            if (key == "question") continue;
            else if (key == "lora") lora = kev::LoraUse{v.get<bool>(), lora ? lora->scale : o.lora_scale};
            else if (key == "lora_scale") lora = kev::LoraUse{lora ? lora->enabled : true, v.get<float>()};
            else if (key == "temperature") s.temperature = v.get<float>();
            else if (key == "top_p") s.top_p = v.get<float>();
            else if (key == "top_k") s.top_k = v.get<std::int32_t>();
            else if (key == "min_p") s.min_p = v.get<float>();
            else if (key == "repetition_penalty") s.repetition_penalty = v.get<float>();
            else if (key == "max_new_tokens") s.max_new_tokens = v.get<std::int64_t>();
            else if (key == "seed") s.seed = v.get<std::uint64_t>();
            else if (key == "stop") s.stop_strings = v.is_string() ? std::vector<std::string>{v.get<std::string>()}
                                                                   : v.get<std::vector<std::string>>();
            else throw UsageError{where + ": unknown setting \"" + key + "\""};
        }
        s.validate();
        if (lora) lora->validate();
    } catch (const nlohmann::json::exception&) {
        throw UsageError{where + ": a setting has the wrong type"};
    } catch (const kev::Error& e) {
        throw UsageError{where + ": " + e.what()};
    }
    o.questions.push_back(item["question"].get<std::string>());
    o.per_question.emplace_back(s);
    o.per_question_lora.push_back(lora);
}

void read_question_file(Options& o) {
    std::ifstream in(o.file, std::ios::binary);
    if (!in) throw UsageError{"cannot read " + o.file};
    // Questions given on the command line keep their place, without overrides.
    o.per_question.assign(o.questions.size(), std::nullopt);
    o.per_question_lora.assign(o.questions.size(), std::nullopt);
    const bool jsonl = o.file.size() > 6 && o.file.compare(o.file.size() - 6, 6, ".jsonl") == 0;
    try {
        if (jsonl) {
            std::string line;
            for (int n = 1; std::getline(in, line); ++n) {
                if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
                add_question(o, nlohmann::json::parse(line), o.file + " line " + std::to_string(n));
            }
        } else {
            const nlohmann::json doc = nlohmann::json::parse(in);
            if (!doc.is_array()) throw UsageError{o.file + ": expected a JSON array of questions"};
            for (std::size_t i = 0; i < doc.size(); ++i) add_question(o, doc[i], o.file + " item " + std::to_string(i + 1));
        }
    } catch (const nlohmann::json::parse_error& e) {
        throw UsageError{o.file + ": not valid JSON (" + e.what() + ")"};
    }
    if (o.questions.empty()) throw UsageError{o.file + ": no questions in the file"};
}

Options parse(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
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
        } else if (a == "--precision") {
            const std::string p = value();
            o.auto_precision = p == "auto";
            try {
                if (!o.auto_precision) kev::set_precision(o.load, p == "half" ? "bf16" : p);  // half: bf16, what CPUs have
            } catch (const kev::Error&) {
                throw UsageError{"--precision must be auto, fp32, half, 4bit or nf4, got '" + p + "'"};
            }
        } else if (a == "--device") {
            const std::string d = value();
            if (d == "cpu") o.load.device = kev::Device::Cpu;
            else if (d == "cuda") o.load.device = kev::Device::Cuda;
            else throw UsageError{"--device must be cpu or cuda, got '" + d + "'"};
        } else if (a == "--lora") {
            o.lora = value();
        } else if (a == "--lora-scale") {
            o.lora_scale = static_cast<float>(parse_number(a, value()));
        } else if (a == "--system") {
            o.system = value();
        } else if (a == "--shared-context") {
            o.shared_context = read_text_arg(value());
        } else if (a == "--temperature") {
            o.sampling.temperature = static_cast<float>(parse_number(a, value()));
        } else if (a == "--top-k") {
            o.sampling.top_k = static_cast<std::int32_t>(parse_integer(a, value()));
        } else if (a == "--top-p") {
            o.sampling.top_p = static_cast<float>(parse_number(a, value()));
        } else if (a == "--min-p") {
            o.sampling.min_p = static_cast<float>(parse_number(a, value()));
        } else if (a == "--repetition-penalty") {
            o.sampling.repetition_penalty = static_cast<float>(parse_number(a, value()));
        } else if (a == "--max-new-tokens") {
            o.sampling.max_new_tokens = parse_integer(a, value());
        } else if (a == "--seed") {
            o.sampling.seed = static_cast<std::uint64_t>(parse_integer(a, value()));
        } else if (a == "--stop") {
            o.sampling.stop_strings.push_back(value());
        } else if (a == "--sequential") {
            o.sequential = true;
        } else if (a == "--verify-isolation") {
            o.verify = true;
        } else if (a == "--ignore-eos") {
            o.ignore_eos = true;
        } else if (a == "--logprobs") {
            o.logprobs = static_cast<std::int32_t>(parse_integer(a, value()));
            if (o.logprobs < 0 || o.logprobs > 100) throw UsageError{"--logprobs must be between 0 and 100"};
        } else if (a == "--json") {
            o.json = true;
        } else if (a == "--jsonl") {
            o.jsonl = true;
        } else if (a == "--file") {
            o.file = value();
        } else if (a == "--text") {
            o.text = value();
        } else if (a == "tokenize" && o.command.empty() && o.questions.empty()) {
            o.command = "tokenize";
        } else if (a == "info" && o.command.empty() && o.questions.empty()) {
            o.command = "info";
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
    if (!o.file.empty()) read_question_file(o);
    if (o.command.empty() && o.questions.empty()) throw UsageError{"no question given"};
    if (o.json && o.jsonl) throw UsageError{"--json and --jsonl exclude each other"};
    return o;
}

int tokenize(const Options& o) {
    const kev::Tokenizer tok = kevcli::load_tokenizer(o.model);
    const std::string text = o.text ? *o.text : std::string(std::istreambuf_iterator<char>(std::cin), {});
    const std::vector<kev::TokenId> ids = tok.encode(text, kev::SpecialTokens::Parse);
    if (o.json) {
        nlohmann::json pieces = nlohmann::json::array();
        for (kev::TokenId id : ids) pieces.push_back(tok.id_to_piece(id));
        std::printf("%s\n", nlohmann::json{{"ids", ids}, {"pieces", pieces}, {"count", ids.size()}}.dump().c_str());
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
        kev::CardRequest card{questions[q], o.sampling};
        if (o.sampling.seed) card.sampling.seed = *o.sampling.seed + index;
        if (index < o.per_question.size() && o.per_question[index]) card.sampling = *o.per_question[index];
        card.lora = card_lora(o, index);
        r.cards.push_back(std::move(card));
    }
    return r;
}

kev::GenerationResult run_pack(const kev::Session& s, const Options& o, const std::vector<std::string>& questions,
                               std::size_t first_index, bool stream, kevcli::LiveView* live = nullptr) {
    const kev::Generator gen = s.generator();
    const kev::PreparedPack pack = gen.prepare(make_request(o, questions, first_index), kev::temperature_defaults_from_env());
    kev::CancelFlags cancel(questions.size());
    g_cancel = &cancel;
    if (g_interrupted) cancel.cancel_all();
    kev::RunOptions run;
    run.ignore_end_of_sequence = o.ignore_eos;
    run.logprobs = o.logprobs;
    run.cancel = &cancel;
    const bool one = questions.size() == 1;
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
                         static_cast<long long>(ev.step), ev.active_cards, questions.size(),
                         static_cast<long long>(tokens), ev.aggregate_tokens_per_s);
        }
    };
    kev::GenerationResult result = gen.run(pack, run);
    if (progress && !one) std::fprintf(stderr, "\r\033[K");
    if (s.lora() && !o.json) {
        std::fprintf(stderr, "LoRA %s: %s\n", s.lora()->path.c_str(), kev::to_string(result.lora_mode));
    }
    g_cancel = nullptr;
    return result;
}

nlohmann::json card_json(const std::string& question, const kev::CardResult& c, std::int32_t logprobs) {
    nlohmann::json j = {{"question", question},
                        {"text", c.text},
                        {"tokens", c.tokens},
                        {"finish_reason", kev::to_string(c.finish)},
                        {"seed", c.seed},
                        {"temperature", c.temperature},
                        {"stats",
                         {{"prompt_tokens", c.stats.prompt_tokens},
                          {"generated_tokens", c.stats.generated_tokens},
                          {"time_to_first_token_s", c.stats.time_to_first_token_s},
                          {"tokens_per_s", c.stats.tokens_per_s}}}};
    if (!c.matched_stop.empty()) j["stop"] = c.matched_stop;
    if (logprobs > 0) {
        nlohmann::json lp = nlohmann::json::array();
        for (const auto& step : c.logprobs) {
            nlohmann::json top = nlohmann::json::array();
            for (const auto& [id, v] : step) top.push_back({{"token", id}, {"logprob", v}});
            lp.push_back(top);
        }
        j["logprobs"] = lp;
    }
    return j;
}

int answer(const Options& o) {
    kev::SessionOptions session_options{o.load, std::nullopt};
    kev::PrecisionChoice precision{kev::to_string(o.load.dtype), "asked for"};
    if (o.load.quant != kev::WeightQuant::None) precision.name = kev::to_string(o.load.quant);
    if (o.auto_precision && o.load.device == kev::Device::Cpu) {  // CUDA keeps fp32 unless asked
        precision = kev::choose_auto_precision(o.model);
        kev::set_precision(session_options.load, precision.name);
    }
    if (::isatty(STDERR_FILENO)) {
        session_options.load.progress = [](int done, int total) {
            const int width = 30;
            const int filled = total > 0 ? done * width / total : width;
            std::fprintf(stderr, "\r\033[Kloading model [%s%s] %d/%d", std::string(static_cast<std::size_t>(filled), '#').c_str(),
                         std::string(static_cast<std::size_t>(width - filled), ' ').c_str(), done, total);
            if (done >= total) std::fprintf(stderr, "\r\033[K");
        };
    }
    const auto session = kev::Session::open(o.model, session_options);
    if (!session->chat()) throw kev::Error(kev::ErrorCode::Unsupported, session->chat_error());
    bool wants_lora = o.lora.has_value();
    for (const auto& l : o.per_question_lora) wants_lora = wants_lora || (l && l->enabled);
    const std::string lora_path = !o.lora || *o.lora == "demo" ? kev::demo_adapter_path() : *o.lora;
    if (wants_lora) {
        try {
            session->load_lora(lora_path);
        } catch (const kev::Error& e) {
            // An adapter that does not fit the model is an adapter error (exit 1), not a
            // usage error, whatever code the engine gave it.
            if (e.code() == kev::ErrorCode::OutOfMemory) throw;
            throw kev::Error(kev::ErrorCode::Format, e.what());
        }
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
        for (std::size_t q = 0; q < o.questions.size() && !g_interrupted; ++q) {
            if (stream && o.questions.size() > 1) std::printf("--- [%zu] %s\n", q + 1, o.questions[q].c_str());
            auto r = run_pack(*session, o, {o.questions[q]}, q, stream);
            if (stream) std::printf("\n");
            total_s += r.total_s;
            note_mode(r.lora_mode);
            results.push_back(std::move(r.cards[0]));
        }
    } else {
        std::unique_ptr<kevcli::LiveView> live;
        if (stream && o.questions.size() > 1 && ::isatty(STDOUT_FILENO))
            live = std::make_unique<kevcli::LiveView>(stdout, o.questions, 0);
        auto r = run_pack(*session, o, o.questions, 0, stream && o.questions.size() == 1, live.get());
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

    int code = g_interrupted ? kExitInterrupted : 0;
    nlohmann::json out = {{"model", o.model}, {"packed", !o.sequential}, {"total_s", total_s},
                          {"precision", {{"name", precision.name}, {"auto", o.auto_precision}, {"why", precision.why}}}};
    if (wants_lora) out["lora"] = {{"adapter", lora_path}, {"mode", lora_mode}};
    if (o.verify && !g_interrupted) {
        nlohmann::json diffs = nlohmann::json::array();
        for (std::size_t q = 0; q < o.questions.size(); ++q) {
            const auto alone = run_pack(*session, o, {o.questions[q]}, q, false);
            const auto& a = alone.cards[0].tokens;
            const auto& p = results[q].tokens;
            std::size_t k = 0;
            while (k < a.size() && k < p.size() && a[k] == p[k]) ++k;
            if (k != a.size() || k != p.size()) {
                diffs.push_back({{"question", q + 1}, {"first_difference", k}});
                code = kExitIsolation;
            }
        }
        out["isolation_differences"] = diffs;
        if (stream) {
            std::printf("isolation: %s\n", diffs.empty() ? "every answer equals its solo run"
                                                         : ("DIFFERENCES " + diffs.dump()).c_str());
        }
    }
    if (o.json) {
        nlohmann::json cards = nlohmann::json::array();
        for (std::size_t q = 0; q < results.size(); ++q) {
            cards.push_back(card_json(o.questions[q], results[q], o.logprobs));
            const kev::LoraUse lora = card_lora(o, q);
            if (wants_lora) cards.back()["lora"] = {{"on", lora.enabled}, {"scale", lora.scale}};
        }
        out["cards"] = cards;
        out["interrupted"] = g_interrupted != 0;
        std::printf("%s\n", out.dump(2).c_str());
    } else if (o.jsonl) {
        // One line per question, in order; the run's facts on each line, so any line
        // stands alone in a pipeline.
        for (std::size_t q = 0; q < results.size(); ++q) {
            nlohmann::json line = card_json(o.questions[q], results[q], o.logprobs);
            line["index"] = q + 1;
            line["packed"] = !o.sequential;
            line["interrupted"] = g_interrupted != 0;
            std::printf("%s\n", line.dump().c_str());
        }
        if (out.contains("isolation_differences"))
            std::printf("%s\n", nlohmann::json{{"isolation_differences", out["isolation_differences"]}}.dump().c_str());
    }
    return code;
}

}  // namespace

int main(int argc, char** argv) {
    Options o;
    try {
        o = parse(argc, argv);
    } catch (const UsageError& e) {
        std::fprintf(stderr, "kev-cli: %s\n(kev-cli --help for usage)\n", e.message.c_str());
        return kExitUsage;
    }
    if (o.command == "help") {
        std::fputs(kUsage, stdout);
        return 0;
    }
    if (o.command == "version") {
        std::printf("kev-cli %s\n", kev::engine_info().kev_version.c_str());
        return 0;
    }
    std::signal(SIGINT, on_sigint);
    try {
        // The kernel switches (KEV_ISA, KEV_BF16_KERNEL) are checked before anything slow:
        // one this CPU cannot run is refused here, by name.
        (void)kev::isa_limit();
        (void)kev::requested_bf16_kernel();
        if (o.command == "info") return kevcli::print_model_info(o.model, o.json);
        if (o.command == "tokenize") return tokenize(o);
        return answer(o);
    } catch (const kev::Error& e) {
        std::fprintf(stderr, "kev-cli: %s\n", e.what());
        if (e.code() == kev::ErrorCode::OutOfMemory) return kExitOutOfMemory;
        return e.code() == kev::ErrorCode::InvalidArgument ? kExitUsage : kExitError;
    }
}
