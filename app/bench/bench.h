// kev-bench is a set of measurements, each in its own file, registered by name:
//   KEV_BENCH("bandwidth", "memory-read bandwidth probe", run_bandwidth);
// Benchmarks print a JSON report on stdout (and may write Markdown next to it).
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kevbench {

using Args = std::vector<std::string>;  // the arguments after the benchmark's name

struct Command {
    const char* name;
    const char* help;
    int (*run)(const Args& args);
};

bool register_command(const Command& command);
const std::vector<Command>& commands();

// "1,4,16" -> {1, 4, 16} (std::stoll on each; throws on a non-number).
std::vector<long long> parse_list(const std::string& s);

// Engine build facts every report starts with.
nlohmann::json engine_header();
// A report's first fields: "engine" (engine_header) and "command" (how it was made).
nlohmann::json report_start(const char* bench, const Args& args);

// "--key value" pairs into the options named (ints by std::stoi). False, after saying
// which, for an unknown key or a key without its value.
bool read_options(const char* bench, const Args& args, const std::map<std::string, std::string*>& strings,
                  const std::map<std::string, int*>& ints);

// Best-of-`reps` memory-read bandwidth in GB/s over a buffer of `bytes` (much larger
// than the caches), the denominator of the decode roofline.
double measure_read_bandwidth_gbs(long long bytes, int reps);

}  // namespace kevbench

#define KEV_BENCH_CONCAT2(a, b) a##b
#define KEV_BENCH_CONCAT(a, b) KEV_BENCH_CONCAT2(a, b)
#define KEV_BENCH(name, help, fn) \
    static const bool KEV_BENCH_CONCAT(kev_bench_registered_, __LINE__) = \
        ::kevbench::register_command({name, help, fn})
