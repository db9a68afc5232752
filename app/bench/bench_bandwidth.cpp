// Memory-read bandwidth: decoding streams every weight once per step, so
// weight bytes / this number is the fastest a decode step can be (the roofline).
#include <algorithm>
#include <chrono>
#include <cstdio>

#include <ATen/ATen.h>

#include "bench.h"

namespace kevbench {

double measure_read_bandwidth_gbs(long long bytes, int reps) {
    at::Tensor buf = at::ones({bytes / 4}, at::kFloat);  // [bytes/4]
    double best = 0.0;
    for (int r = 0; r < reps; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        const float s = buf.sum().item<float>();
        const auto t1 = std::chrono::steady_clock::now();
        if (s <= 0.f) return 0.0;
        const double sec = std::chrono::duration<double>(t1 - t0).count();
        best = std::max(best, static_cast<double>(bytes) / sec / 1e9);
    }
    return best;
}

namespace {

int run_bandwidth(const Args& args) {
    long long mib = 1024;
    for (std::size_t i = 0; i + 1 < args.size(); ++i) {
        if (args[i] == "--mib") mib = std::stoll(args[i + 1]);
    }
    nlohmann::json report;
    report["engine"] = engine_header();
    report["buffer_mib"] = mib;
    report["read_bandwidth_gbs"] = measure_read_bandwidth_gbs(mib << 20, 7);
    std::printf("%s\n", report.dump(2).c_str());
    return 0;
}

}  // namespace

KEV_BENCH("bandwidth", "memory-read bandwidth probe [--mib N]", run_bandwidth);

}  // namespace kevbench
