// kev-bench remote: N cards as concurrent streaming requests to an OpenAI-compatible
// server (issue 16), against the same N cards in one pack on Kev's local engine, and the
// client's own CPU time per streamed token. Built only where Qt Network is (kev_remote).
#include <QCoreApplication>
#include <QEventLoop>
#include <QString>

#include <time.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>

#include "bench.h"
#include "kev/session.h"
#include "kev/weights.h"
#include "remote_run.h"

namespace {

// The whole process's CPU time, every thread, user and system (getrusage's is counted in
// scheduler ticks on some kernels; this clock is exact).
double cpu_seconds() {
    timespec t{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string question(long long i) {
    static const char* const kTopics[] = {"rivers", "bridges", "volcanoes", "libraries", "bees", "trains", "clocks", "deserts"};
    return std::string("Write a long, detailed essay about ") + kTopics[i % 8] + " (essay " + std::to_string(i + 1) + ").";
}

struct Figures {
    long long tokens = 0;
    double wall_s = 0.0;
    double mean_ttft_s = 0.0;
    double client_cpu_s = 0.0;
    int failed = 0;
    std::string first_error;
};

Figures run_remote(const kevremote::Connection& c, long long n, long long gen) {
    QVector<kevremote::RemoteCard> cards;
    for (long long i = 0; i < n; ++i) {
        kevremote::RemoteCard card;
        card.question = QString::fromStdString(question(i));
        card.sampling.temperature = 0.0;
        card.sampling.max_tokens = static_cast<int>(gen);
        card.sampling.ignore_eos = true;
        cards.push_back(card);
    }
    kevremote::RemoteRun run(c, cards);
    QEventLoop loop;
    QObject::connect(&run, &kevremote::RemoteRun::allFinished, &loop, &QEventLoop::quit);
    const double cpu0 = cpu_seconds(), t0 = now_s();
    run.start();
    if (!run.finished()) loop.exec();
    Figures f;
    f.wall_s = now_s() - t0;
    f.client_cpu_s = cpu_seconds() - cpu0;
    for (int i = 0; i < run.size(); ++i) {
        const auto& o = run.outcome(i);
        if (o.state != kevremote::CardState::Finished) {
            ++f.failed;
            if (f.first_error.empty()) f.first_error = o.error.toStdString();
        }
        f.tokens += o.tokens;
        f.mean_ttft_s += o.time_to_first_token_s / static_cast<double>(n);
    }
    return f;
}

Figures run_local(const kev::Session& s, long long n, long long gen) {
    kev::GenerationRequest request;
    request.ignore_end_of_sequence = true;
    for (long long i = 0; i < n; ++i) {
        kev::CardRequest card;
        card.question = question(i);
        card.sampling.temperature = 0.0f;
        card.sampling.max_new_tokens = gen;
        request.cards.push_back(card);
    }
    const kev::Generator g = s.generator();
    const double t0 = now_s();
    const kev::GenerationResult r = g.run(g.prepare(request));
    Figures f;
    f.wall_s = now_s() - t0;
    for (const auto& c : r.cards) {
        f.tokens += static_cast<long long>(c.tokens.size());
        f.mean_ttft_s += c.stats.time_to_first_token_s / static_cast<double>(n);
    }
    return f;
}

// A local figure of a report row with `digits` decimals, "-" when the local engine did not run.
std::string fixed(const nlohmann::json& row, const char* key, int digits) {
    if (!row.contains("local")) return "-";
    char b[64];
    std::snprintf(b, sizeof b, "%.*f", digits, row["local"][key].get<double>());
    return b;
}

int run_bench(const kevbench::Args& args) {
    std::string server, model_name = "builtin", local_model, precision = "auto", out;
    std::vector<long long> ns{1, 4, 16};
    long long gen = 64;
    int reps = 1;
    for (std::size_t i = 0; i < args.size(); ++i) {
        auto value = [&]() -> std::string {
            if (i + 1 >= args.size()) throw std::runtime_error(args[i] + " needs a value");
            return args[++i];
        };
        if (args[i] == "--server") server = value();
        else if (args[i] == "--server-model") model_name = value();
        else if (args[i] == "--model") local_model = value();
        else if (args[i] == "--precision") precision = value();
        else if (args[i] == "--n") ns = kevbench::parse_list(value());
        else if (args[i] == "--gen") gen = std::stoll(value());
        else if (args[i] == "--reps") reps = std::stoi(value());
        else if (args[i] == "--out") out = value();
        else throw std::runtime_error("unknown option " + args[i]);
    }
    if (server.empty())
        throw std::runtime_error("usage: kev-bench remote --server URL [--server-model NAME] [--model PATH] [--precision P] "
                                 "[--n 1,4,16] [--gen 64] [--reps 1] [--out report.md]");
    static int argc = 1;
    static char name[] = "kev-bench";
    static char* argv[] = {name, nullptr};
    QCoreApplication app(argc, argv);
    kevremote::Connection c;
    c.base = QUrl(QString::fromStdString(server));
    c.model = QString::fromStdString(model_name);
    c.timeout_ms = 600000;
    if (const QString p = kevremote::connection_problem(c); !p.isEmpty()) throw std::runtime_error(p.toStdString());

    // The remote rows first, before the local engine exists: its thread pool spins for a
    // while after each pack, which would count as the client's CPU time.
    nlohmann::json rows = nlohmann::json::array();
    run_remote(c, 1, 4);  // warm the server (its first request pays for allocation)
    for (long long n : ns) {
        for (int rep = 0; rep < reps; ++rep) {
            const Figures r = run_remote(c, n, gen);
            nlohmann::json row = {{"n", n}, {"rep", rep + 1}, {"gen", gen},
                                  {"remote", {{"tokens", r.tokens}, {"wall_s", r.wall_s},
                                              {"aggregate_tokens_per_s", r.tokens / r.wall_s},
                                              {"mean_ttft_s", r.mean_ttft_s}, {"client_cpu_s", r.client_cpu_s},
                                              {"client_cpu_us_per_token", 1e6 * r.client_cpu_s / std::max<long long>(1, r.tokens)},
                                              // CPU seconds a token x 100 tokens a second, as a share of one core
                                              {"client_core_percent_at_100_tok_s", 1e4 * r.client_cpu_s / std::max<long long>(1, r.tokens)},
                                              {"failed", r.failed}}}};
            if (!r.first_error.empty()) row["remote"]["first_error"] = r.first_error;
            std::fprintf(stderr, "N = %lld: remote %.1f tok/s (ttft %.3f s, client %.1f us/token)\n", n, r.tokens / r.wall_s,
                         r.mean_ttft_s, 1e6 * r.client_cpu_s / std::max<long long>(1, r.tokens));
            rows.push_back(row);
        }
    }
    std::string precision_used;
    if (!local_model.empty()) {
        kev::SessionOptions o;
        if (precision == "auto") {
            const kev::PrecisionChoice ch = kev::choose_auto_precision(local_model);
            kev::set_precision(o.load, ch.name);
            precision_used = ch.name;
        } else {
            kev::set_precision(o.load, precision);
            precision_used = precision;
        }
        const std::unique_ptr<kev::Session> session = kev::Session::open(local_model, o);
        run_local(*session, 1, 4);
        for (auto& row : rows) {
            const Figures l = run_local(*session, row["n"].get<long long>(), gen);
            row["local"] = {{"tokens", l.tokens}, {"wall_s", l.wall_s}, {"aggregate_tokens_per_s", l.tokens / l.wall_s},
                            {"mean_ttft_s", l.mean_ttft_s}};
            std::fprintf(stderr, "N = %lld: local %.1f tok/s\n", row["n"].get<long long>(), l.tokens / l.wall_s);
        }
    }
    nlohmann::json report = kevbench::engine_header();
    report["benchmark"] = "remote";
    report["server"] = server;
    report["server_model"] = model_name;
    report["local_model"] = local_model;
    report["local_precision"] = precision_used;
    report["rows"] = rows;
    std::printf("%s\n", report.dump(2).c_str());
    if (!out.empty()) {
        std::ofstream md(out);
        md << "# kev-bench remote\n\nServer " << server << ", model `" << model_name << "`; local engine: "
           << (local_model.empty() ? std::string("not run") : "`" + local_model + "` at " + precision_used)
           << ". Greedy, " << gen << " tokens a card (ignore_eos), every card a different question.\n\n"
           << "| N | rep | remote tok/s (aggregate) | remote mean TTFT s | local tok/s (aggregate) | local mean TTFT s | "
              "client CPU us / token | client, % of a core at 100 tok/s |\n|---|---|---|---|---|---|---|---|\n";
        for (const auto& r : rows) {
            char line[512];
            std::snprintf(line, sizeof line, "| %lld | %d | %.1f | %.3f | %s | %s | %.1f | %.2f%% |\n", r["n"].get<long long>(),
                          r["rep"].get<int>(), r["remote"]["aggregate_tokens_per_s"].get<double>(),
                          r["remote"]["mean_ttft_s"].get<double>(),
                          fixed(r, "aggregate_tokens_per_s", 1).c_str(), fixed(r, "mean_ttft_s", 3).c_str(),
                          r["remote"]["client_cpu_us_per_token"].get<double>(),
                          r["remote"]["client_core_percent_at_100_tok_s"].get<double>());
            md << line;
        }
    }
    return 0;
}

}  // namespace

KEV_BENCH("remote", "N cards as concurrent streaming requests to an OpenAI-compatible server vs the local pack; client CPU per token",
          run_bench);
