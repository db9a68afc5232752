// Tokenizer throughput: Kev's encode (one thread) against transformers' fast tokenizer on
// the same text, measured in the same run, plus pathological inputs at two sizes to show
// that time grows linearly with length.
//
//   kev-bench tokenizer [--mb N] [--text FILE] [--reps N] [--qwen-dir DIR] [--python PY]
//                       [--save-text FILE]   (writes the generated corpus, to reproduce)
//
// Run from the repository root (defaults: tests/data/qwen-tokenizer, .venv/bin/python).
// Without --text the corpus is generated: tests/data/tokenizer_corpus/corpus.json (prose,
// code, CJK, Arabic, emoji, ...) interleaved with pseudo-random words, so that the word
// cache does not see the same few words over and over.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <cstdlib>
#include <unistd.h>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench.h"
#include "kev/error.h"
#include "kev/tokenizer.h"

namespace kevbench {

namespace {

using nlohmann::json;

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw kev::Error(kev::ErrorCode::Io, "cannot open " + path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

void write_file(const std::string& path, const std::string& text) {
    std::ofstream out(path, std::ios::binary);
    out << text;
    if (!out) throw kev::Error(kev::ErrorCode::Io, "cannot write " + path);
}

// A fixed-seed mixed corpus of about `bytes` bytes.
std::string mixed_corpus(const std::vector<std::string>& samples, std::size_t bytes) {
    static const char* const kSyllables[] = {
        "ka", "to", "ri", "mon", "sel", "th", "ing", "er", "qu", "ab", "ze", "lo", "str", "ung", "é", "ñ",
        "ö", "ß", "пр", "ив", "ет", "数", "据", "学", "习", "の", "です", "한", "국", "مر", "حب", "ا"};
    std::uint64_t state = 0x9E3779B97F4A7C15ull;
    auto next = [&] {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        return state;
    };
    std::string out;
    out.reserve(bytes + 1024);
    std::size_t sample = 0;
    while (out.size() < bytes) {
        if (next() % 3 == 0) {
            out += samples[sample++ % samples.size()];
            out += '\n';
            continue;
        }
        const int words = 5 + static_cast<int>(next() % 20);
        for (int w = 0; w < words; ++w) {
            const int syl = 1 + static_cast<int>(next() % 4);
            for (int s = 0; s < syl; ++s) out += kSyllables[next() % (sizeof kSyllables / sizeof *kSyllables)];
            const std::uint64_t r = next() % 20;
            if (r == 0) out += ", ";
            else if (r == 1) out += std::to_string(next() % 100000) + " ";
            else if (r == 2) out += ".\n";
            else if (r == 3) out += "  ";
            else out += ' ';
        }
    }
    return out;
}

struct Timing {
    double seconds = 0;
    std::size_t tokens = 0;
};

// Lines of `text`, each keeping its "\n" (as the Python side splits *.lines.txt files).
std::vector<std::string_view> split_lines(const std::string& text) {
    std::vector<std::string_view> lines;
    std::size_t start = 0;
    while (start < text.size()) {
        const std::size_t nl = text.find('\n', start);
        const std::size_t end = nl == std::string::npos ? text.size() : nl + 1;
        lines.emplace_back(text.data() + start, end - start);
        start = end;
    }
    return lines;
}

Timing time_kev(const kev::Tokenizer& tok, const std::string& text, bool by_line, int reps) {
    Timing best{1e30, 0};
    const std::vector<std::string_view> lines = by_line ? split_lines(text) : std::vector<std::string_view>{text};
    for (int r = 0; r < reps; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        std::size_t n = 0;
        for (std::string_view line : lines) n += tok.encode(line, kev::SpecialTokens::Plain).size();
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (s < best.seconds) best = Timing{s, n};
    }
    return best;
}

std::string shell_quote(const std::string& s) {
    std::string q = "'";
    for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
}

json run_python(const std::string& python, const std::string& qwen_dir, const std::vector<std::string>& files, int reps) {
    std::string cmd = shell_quote(python) + " tests/reference/tokenizer_reference.py bench --qwen-dir " +
                      shell_quote(qwen_dir) + " --reps " + std::to_string(reps) + " --text";
    for (const std::string& f : files) cmd += " " + shell_quote(f);
    cmd = "RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false " + cmd;
    FILE* pipe = popen(cmd.c_str(), "r");
    if (!pipe) throw kev::Error(kev::ErrorCode::Io, "cannot run " + python);
    std::string out;
    char buf[4096];
    std::size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, n);
    const int rc = pclose(pipe);
    if (rc != 0) throw kev::Error(kev::ErrorCode::Io, "the reference timing failed: " + cmd);
    return json::parse(out);
}

int run_tokenizer(const Args& args) {
    double mb = 4.0;
    int reps = 3;
    std::string text_file, save_text, qwen_dir = "tests/data/qwen-tokenizer", python = ".venv/bin/python";
    for (std::size_t i = 0; i + 1 < args.size(); i += 2) {
        if (args[i] == "--mb") mb = std::stod(args[i + 1]);
        else if (args[i] == "--text") text_file = args[i + 1];
        else if (args[i] == "--reps") reps = std::stoi(args[i + 1]);
        else if (args[i] == "--qwen-dir") qwen_dir = args[i + 1];
        else if (args[i] == "--python") python = args[i + 1];
        else if (args[i] == "--save-text") save_text = args[i + 1];
        else throw kev::Error(kev::ErrorCode::InvalidArgument, "unknown option " + args[i]);
    }

    const auto load0 = std::chrono::steady_clock::now();
    const kev::Tokenizer tok = kev::Tokenizer::from_hf_dir(qwen_dir);
    const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - load0).count();

    struct Input {
        std::string name;
        std::string text;
        bool by_line = false;  // encoded line by line: many short texts, as prompts are
    };
    std::vector<Input> inputs;
    if (!text_file.empty()) {
        inputs.push_back({"text", read_file(text_file)});
    } else {
        const auto samples = json::parse(read_file("tests/data/tokenizer_corpus/corpus.json")).get<std::vector<std::string>>();
        inputs.push_back({"mixed", mixed_corpus(samples, static_cast<std::size_t>(mb * 1e6))});
    }
    inputs.push_back({inputs[0].name + "_by_line", inputs[0].text, true});
    if (!save_text.empty()) write_file(save_text, inputs[0].text);
    auto repeat = [](const std::string& unit, std::size_t n) {
        std::string s;
        s.reserve(unit.size() * n);
        for (std::size_t i = 0; i < n; ++i) s += unit;
        return s;
    };
    inputs.push_back({"no_spaces_1MB", repeat("a", 1 << 20)});
    inputs.push_back({"no_spaces_4MB", repeat("a", 4 << 20)});
    inputs.push_back({"emoji_100k", repeat("😀", 100000)});
    inputs.push_back({"emoji_400k", repeat("😀", 400000)});
    inputs.push_back({"digits_1MB", repeat("7", 1 << 20)});
    inputs.push_back({"digits_4MB", repeat("7", 4 << 20)});

    // POSIX calls, not std::filesystem: the libtorch wheel exports its own copy of
    // std::filesystem symbols, and mixing the two crashed remove_all.
    // The system's temporary folder ($TMPDIR, else the POSIX default P_tmpdir).
    const char* tmp = std::getenv("TMPDIR");
    std::string dir_template = std::string(tmp && *tmp ? tmp : P_tmpdir) + "/kev-bench-tokenizer-XXXXXX";
    if (!mkdtemp(dir_template.data())) throw kev::Error(kev::ErrorCode::Io, "cannot create a temporary folder in " + dir_template);
    const std::string dir = dir_template;
    std::vector<std::string> files;
    for (const Input& in : inputs) {
        files.push_back(dir + "/" + in.name + (in.by_line ? ".lines.txt" : ".txt"));
        write_file(files.back(), in.text);
    }

    json report;
    report["engine"] = engine_header();
    report["tokenizer"] = qwen_dir;
    report["kev_load_seconds"] = load_s;
    report["reps"] = reps;
    json py;
    try {
        py = run_python(python, qwen_dir, files, reps);
    } catch (const std::exception& e) {
        report["transformers_error"] = e.what();
    }
    json rows = json::array();
    for (std::size_t i = 0; i < inputs.size(); ++i) {
        const double mbytes = static_cast<double>(inputs[i].text.size()) / 1e6;
        const Timing cold = time_kev(tok, inputs[i].text, inputs[i].by_line, 1);  // first pass
        const Timing kev = time_kev(tok, inputs[i].text, inputs[i].by_line, reps);
        json row = {{"input", inputs[i].name},
                    {"bytes", inputs[i].text.size()},
                    {"kev_tokens", kev.tokens},
                    {"kev_seconds", kev.seconds},
                    {"kev_first_pass_seconds", cold.seconds},
                    {"kev_mb_per_s", mbytes / kev.seconds}};
        if (py.is_array() && i < py.size()) {
            const double hs = py[i]["seconds"].get<double>();
            row["hf_tokens"] = py[i]["tokens"];
            row["hf_seconds"] = hs;
            row["hf_mb_per_s"] = mbytes / hs;
            row["speedup"] = hs / kev.seconds;
            row["same_token_count"] = py[i]["tokens"].get<std::size_t>() == kev.tokens;
        }
        rows.push_back(row);
    }
    report["results"] = rows;
    // Linearity: time ratio for 4x the input (1.0 per unit of size would be 4).
    json lin;
    auto ratio = [&](std::size_t a, std::size_t b) {
        return rows[b]["kev_seconds"].get<double>() / rows[a]["kev_seconds"].get<double>();
    };
    lin["no_spaces_4x"] = ratio(2, 3);
    lin["emoji_4x"] = ratio(4, 5);
    lin["digits_4x"] = ratio(6, 7);
    report["kev_time_ratio_for_4x_input"] = lin;
    for (const std::string& f : files) unlink(f.c_str());
    rmdir(dir.c_str());
    std::printf("%s\n", report.dump(2).c_str());
    return 0;
}

}  // namespace

KEV_BENCH("tokenizer", "encode MB/s vs transformers [--mb N] [--text FILE] [--reps N] [--qwen-dir DIR] [--python PY] [--save-text FILE]",
          run_tokenizer);

}  // namespace kevbench
