// kev-bench linear: one bf16 linear layer per kernel (AMX, AVX512-BF16, libtorch) at
// decode and prefill row counts, for the weight shapes of a model. Reports ms per call
// and the weight bytes streamed per second, kernels alternating in the same run.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include "bench.h"
#include "kev/cpu_kernels.h"
#include "kev/weights.h"

namespace {

int run_linear(const kevbench::Args& args) {
    // Default shapes: Qwen2.5-0.5B's fused qkv, o, gate_up, down.
    std::vector<std::pair<long long, long long>> shapes = {{1152, 896}, {896, 896}, {9728, 896}, {896, 4864}};
    std::vector<long long> rows = {1, 4, 16, 128};
    int reps = 20;
    for (std::size_t i = 0; i + 1 < args.size(); i += 2) {
        if (args[i] == "--rows") rows = kevbench::parse_list(args[i + 1]);
        else if (args[i] == "--reps") reps = std::stoi(args[i + 1]);
        else if (args[i] == "--shape") {
            const auto v = kevbench::parse_list(args[i + 1]);
            if (v.size() != 2) { std::fprintf(stderr, "--shape OUT,IN\n"); return 2; }
            shapes = {{v[0], v[1]}};
        } else { std::fprintf(stderr, "unknown option %s\n", args[i].c_str()); return 2; }
    }
    c10::InferenceMode guard;
    nlohmann::json report = kevbench::engine_header();
    report["benchmark"] = "linear";
    const kev::Bf16Kernel kernels[] = {kev::Bf16Kernel::Amx,    kev::Bf16Kernel::Avx512Bf16, kev::Bf16Kernel::Avx512,
                                       kev::Bf16Kernel::Avx2,   kev::Bf16Kernel::Torch};
    for (auto [O, I] : shapes) {
        kev::Linear lin;
        lin.weight = at::randn({O, I}).to(at::kBFloat16);
        for (long long M : rows) {
            const at::Tensor x = at::randn({M, I}).to(at::kBFloat16);
            for (kev::Bf16Kernel k : kernels) {
                if (!kev::bf16_kernel_available(k)) {
                    std::printf("%-10s not run: this CPU lacks it\n", kev::to_string(k));
                    continue;
                }
                kev::set_bf16_kernel(k);
                for (int w = 0; w < 2; ++w) lin(x);
                std::vector<double> ms;
                for (int r = 0; r < reps; ++r) {
                    const auto t0 = std::chrono::steady_clock::now();
                    lin(x);
                    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
                }
                std::sort(ms.begin(), ms.end());
                const double med = ms[ms.size() / 2];
                const double gbs = static_cast<double>(O * I * 2) / (med * 1e6);
                std::printf("%-10s O=%-6lld I=%-5lld M=%-4lld %8.3f ms %6.1f GB/s %7.1f GFLOP/s\n", kev::to_string(k), O, I, M,
                            med, gbs, 2.0 * M * O * I / (med * 1e6));
                report["rows"].push_back({{"kernel", kev::to_string(k)}, {"out", O}, {"in", I}, {"rows", M},
                                          {"median_ms", med}, {"weight_gb_per_s", gbs}});
            }
        }
    }
    kev::set_bf16_kernel(kev::Bf16Kernel::Auto);
    std::fprintf(stderr, "%s\n", report.dump(2).c_str());
    return 0;
}

}  // namespace

KEV_BENCH("linear", "bf16 linear kernels per shape [--shape OUT,IN] [--rows 1,4,16,128] [--reps N]", run_linear);
