// Memory-read bandwidth: decoding streams every weight once per step, so
// weight bytes / this number is the fastest a decode step can be (the roofline).
// The probe reads a buffer much larger than the caches with one std::thread per
// core, four independent AVX2 accumulators each, and reports the best repetition.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include <immintrin.h>

#include "bench.h"

namespace kevbench {

namespace {

__attribute__((target("avx2"))) std::uint64_t sum_avx2(const std::uint64_t* p, std::size_t n) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    std::size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        a0 = _mm256_add_epi64(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
        a1 = _mm256_add_epi64(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 4)));
        a2 = _mm256_add_epi64(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 8)));
        a3 = _mm256_add_epi64(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 12)));
    }
    a0 = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
    std::uint64_t r[4];
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(r), a0);
    std::uint64_t s = r[0] + r[1] + r[2] + r[3];
    for (; i < n; ++i) s += p[i];
    return s;
}

std::uint64_t sum_scalar(const std::uint64_t* p, std::size_t n) {
    std::uint64_t s0 = 0, s1 = 0;
    std::size_t i = 0;
    for (; i + 2 <= n; i += 2) {
        s0 += p[i];
        s1 += p[i + 1];
    }
    if (i < n) s0 += p[i];
    return s0 + s1;
}

}  // namespace

double measure_read_bandwidth_gbs(long long bytes, int reps) {
    const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
    const std::size_t n = static_cast<std::size_t>(bytes) / 8 / (16 * threads) * (16 * threads);
    std::unique_ptr<std::uint64_t, decltype(&std::free)> buf(
        static_cast<std::uint64_t*>(std::aligned_alloc(64, n * 8)), &std::free);
    if (!buf) return 0.0;
    std::memset(buf.get(), 1, n * 8);  // touch every page before timing
    const bool avx2 = __builtin_cpu_supports("avx2");
    double best = 0.0;
    std::vector<std::uint64_t> sums(threads);
    for (int r = 0; r < reps; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        std::vector<std::thread> pool;
        const std::size_t chunk = n / threads;
        for (unsigned t = 0; t < threads; ++t) {
            pool.emplace_back([&, t] {
                const std::uint64_t* p = buf.get() + chunk * t;
                sums[t] = avx2 ? sum_avx2(p, chunk) : sum_scalar(p, chunk);
            });
        }
        for (auto& th : pool) th.join();
        const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (sums[0] == 0) return 0.0;  // keeps the reads from being optimised away
        best = std::max(best, static_cast<double>(n * 8) / sec / 1e9);
    }
    return best;
}

namespace {

int run_bandwidth(const Args& args) {
    long long mib = 1024;
    int reps = 9;
    for (std::size_t i = 0; i + 1 < args.size(); ++i) {
        if (args[i] == "--mib") mib = std::stoll(args[i + 1]);
        if (args[i] == "--reps") reps = std::stoi(args[i + 1]);
    }
    nlohmann::json report;
    report["engine"] = engine_header();
    report["buffer_mib"] = mib;
    report["threads"] = std::max(1u, std::thread::hardware_concurrency());
    report["read_bandwidth_gbs"] = measure_read_bandwidth_gbs(mib << 20, reps);
    std::printf("%s\n", report.dump(2).c_str());
    return 0;
}

}  // namespace

KEV_BENCH("bandwidth", "memory-read bandwidth probe [--mib N] [--reps N]", run_bandwidth);

}  // namespace kevbench
