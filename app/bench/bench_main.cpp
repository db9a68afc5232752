#include <cstdio>
#include <string>

#include "bench.h"
#include "kev/buffer_pool.h"
#include "kev/cpu_kernels.h"
#include "kev/engine_info.h"
#include "kev/error.h"

namespace kevbench {

namespace {
std::vector<Command>& registry() {
    static std::vector<Command> commands;
    return commands;
}
}  // namespace

bool register_command(const Command& command) {
    registry().push_back(command);
    return true;
}

const std::vector<Command>& commands() { return registry(); }

std::vector<long long> parse_list(const std::string& s) {
    std::vector<long long> out;
    std::size_t start = 0;
    while (start <= s.size()) {
        const std::size_t comma = s.find(',', start);
        out.push_back(std::stoll(s.substr(start, comma - start)));
        if (comma == std::string::npos) break;
        start = comma + 1;
    }
    return out;
}

nlohmann::json engine_header() {
    const kev::EngineInfo info = kev::engine_info();
    return {{"kev", info.kev_version},
            {"torch", info.torch_version},
            {"cpu_capability", info.cpu_capability},
            {"threads", info.cpu_threads},
            {"kernel_threads", kev::kernel_threads()},
            {"cuda", info.cuda_available},
            {"buffer_pool", kev::to_string(kev::buffer_pool_mode())},
            {"kernels", [] {
                 nlohmann::json k = nlohmann::json::object();
                 for (const auto& [what, kernel] : kev::kernel_paths()) k[what] = kernel;
                 return k;
             }()}};
}

nlohmann::json report_start(const char* bench, const Args& args) {
    nlohmann::json report;
    report["engine"] = engine_header();
    std::string cmd = std::string("kev-bench ") + bench;
    for (const auto& a : args) cmd += " " + a;
    report["command"] = cmd;
    return report;
}

bool read_options(const char* bench, const Args& args, const std::map<std::string, std::string*>& strings,
                  const std::map<std::string, int*>& ints) {
    for (std::size_t i = 0; i < args.size(); i += 2) {
        const std::string& k = args[i];
        if (i + 1 == args.size()) {
            std::fprintf(stderr, "kev-bench %s: %s needs a value\n", bench, k.c_str());
            return false;
        }
        if (const auto s = strings.find(k); s != strings.end()) *s->second = args[i + 1];
        else if (const auto n = ints.find(k); n != ints.end()) *n->second = std::stoi(args[i + 1]);
        else {
            std::fprintf(stderr, "kev-bench %s: unknown option %s\n", bench, k.c_str());
            return false;
        }
    }
    return true;
}

}  // namespace kevbench

static void usage(std::FILE* out) {
    std::fprintf(out, "usage: kev-bench COMMAND [options]\n\ncommands:\n");
    for (const auto& c : kevbench::commands()) std::fprintf(out, "  %-12s %s\n", c.name, c.help);
}

int main(int argc, char** argv) {
    if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const std::string name = argv[1];
    for (const auto& c : kevbench::commands()) {
        if (name == c.name) {
            try {
                return c.run(kevbench::Args(argv + 2, argv + argc));
            } catch (const kev::Error& e) {
                std::fprintf(stderr, "kev-bench %s: %s\n", c.name, e.what());
                return 1;
            }
        }
    }
    std::fprintf(stderr, "kev-bench: unknown command '%s'\n", name.c_str());
    usage(stderr);
    return 2;
}
