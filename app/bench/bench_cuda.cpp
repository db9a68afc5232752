// kev-bench cuda-q4: the CUDA 4-bit kernels (kev/quant.h) checked and timed on a GPU.
//   exact:     every format (q4_0, q4_1, nf4) x activation dtype (fp32, fp16, bf16) x
//              row count, the fixed-order kernel's output equal to the bit to its CPU twin;
//              the tensor-core form (fp16, bf16) within 4e-3 of sum |w x| of the twin;
//   invariant: each row of an M-row call equal to the bit to that row alone (both forms);
//   speed:     ms per call at decode and prompt row counts, weight bytes per second
//              against the HBM bandwidth given (--hbm-gbs, H200: 4800).
// Exit 0 all equal, 1 a mismatch, 2 usage, 4 not run (no device or no kernels).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include "bench.h"
#include "kev/engine_info.h"
#include "kev/model.h"
#include "kev/quant.h"
#include "kev/weights.h"

namespace {

// A random matrix in `format`: NF4 from Gaussian weights; Q4_0/Q4_1 as GGUF blocks of
// random codes with scales (and mins) of the size trained weights have.
kev::QuantMatrix random_quant(kev::QuantFormat format, long long rows, long long cols) {
    if (format == kev::QuantFormat::NF4) return kev::quantize_nf4(at::randn({rows, cols}) * 0.02);
    const int bytes_per_block = format == kev::QuantFormat::Q4_0 ? 18 : 20;
    const long long blocks = rows * cols / 32;
    std::vector<std::uint8_t> data(static_cast<std::size_t>(blocks * bytes_per_block));
    const at::Tensor codes = at::randint(0, 256, {blocks, 16}, at::kInt);
    const at::Tensor d = (at::rand({blocks}) * 0.004 + 0.001).to(at::kHalf);
    const at::Tensor m = (at::rand({blocks}) * -0.03).to(at::kHalf);
    for (long long b = 0; b < blocks; ++b) {
        std::uint8_t* p = data.data() + b * bytes_per_block;
        std::memcpy(p, &d.data_ptr<at::Half>()[b].x, 2);
        if (format == kev::QuantFormat::Q4_1) std::memcpy(p + 2, &m.data_ptr<at::Half>()[b].x, 2);
        for (int j = 0; j < 16; ++j)
            p[bytes_per_block - 16 + j] = static_cast<std::uint8_t>(codes.data_ptr<int>()[b * 16 + j]);
    }
    return kev::quant_from_ggml(format, data.data(), data.size(), rows, cols);
}

bool same_bits(const at::Tensor& a, const at::Tensor& b) {
    const at::Tensor x = a.cpu().contiguous(), y = b.cpu().contiguous();
    return x.sizes() == y.sizes() && x.scalar_type() == y.scalar_type() &&
           std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}

int run_cuda_q4(const kevbench::Args& args) {
    // Qwen2.5-0.5B's fused qkv, o, gate_up, down, and a shape that fills no tile evenly.
    std::vector<std::pair<long long, long long>> shapes = {{1152, 896}, {896, 896}, {9728, 896}, {896, 4864}, {100, 96}};
    std::vector<long long> rows = {1, 2, 3, 8, 9, 16, 17, 40};
    std::vector<long long> timed = {1, 4, 16, 128, 512};
    int reps = 50;
    double hbm_gbs = 4800.0;
    for (std::size_t i = 0; i + 1 < args.size(); i += 2) {
        if (args[i] == "--m") rows = kevbench::parse_list(args[i + 1]);
        else if (args[i] == "--timed") timed = kevbench::parse_list(args[i + 1]);
        else if (args[i] == "--reps") reps = std::stoi(args[i + 1]);
        else if (args[i] == "--hbm-gbs") hbm_gbs = std::stod(args[i + 1]);
        else if (args[i] == "--shape") {
            const auto v = kevbench::parse_list(args[i + 1]);
            if (v.size() != 2) { std::fprintf(stderr, "--shape OUT,IN\n"); return 2; }
            shapes = {{v[0], v[1]}};
        } else { std::fprintf(stderr, "unknown option %s\n", args[i].c_str()); return 2; }
    }
    nlohmann::json report = kevbench::engine_header();
    report["benchmark"] = "cuda-q4";
    if (!kev::quant_cuda_kernels_built() || !kev::engine_info().cuda_available) {
        const char* why = !kev::quant_cuda_kernels_built() ? "this build has no CUDA kernels" : "no CUDA device";
        std::printf("NOT RUN: cuda-q4 (%s)\n", why);
        report["not_run"] = why;
        std::printf("%s\n", report.dump(2).c_str());
        return 4;
    }
    c10::InferenceMode guard;
    at::manual_seed(7);
    const at::TensorOptions cuda = at::TensorOptions().device(at::kCUDA, 0);
    const std::pair<kev::QuantFormat, const char*> formats[] = {
        {kev::QuantFormat::Q4_0, "q4_0"}, {kev::QuantFormat::Q4_1, "q4_1"}, {kev::QuantFormat::NF4, "nf4"}};
    const std::pair<at::ScalarType, const char*> dtypes[] = {
        {at::kFloat, "fp32"}, {at::kHalf, "fp16"}, {at::kBFloat16, "bf16"}};
    int mismatches = 0;
    nlohmann::json checks = nlohmann::json::array(), speed = nlohmann::json::array();
    for (auto [O, I] : shapes) {
        for (auto [format, fname] : formats) {
            const kev::QuantMatrix host = random_quant(format, O, I);
            const kev::QuantMatrix dev = kev::quant_to_cuda(host);
            const at::Tensor bias = at::randn({O}) * 0.1;
            for (auto [dtype, dname] : dtypes) {
                for (long long M : rows) {
                    const at::Tensor x = at::randn({M, I}).to(dtype);
                    const at::Tensor xg = x.to(cuda);
                    const at::Tensor y = kev::quant_linear(xg, dev, bias.to(cuda).to(dtype));
                    const at::Tensor twin = kev::quant_linear_fixed_order(x, host, bias.to(dtype)).to(dtype);
                    bool exact = same_bits(y, twin);
                    bool invariant = true;
                    for (long long r = 0; r < M; ++r) {
                        const at::Tensor alone = kev::quant_linear(xg.narrow(0, r, 1), dev, bias.to(cuda).to(dtype));
                        invariant = invariant && same_bits(alone, y.narrow(0, r, 1));
                    }
                    if (!exact || !invariant) {
                        ++mismatches;
                        std::printf("MISMATCH fma %s %s %lldx%lld M=%lld: %s%s (max |diff| vs twin %g)\n", fname, dname, O, I,
                                    M, exact ? "" : "not equal to the CPU twin ", invariant ? "" : "rows differ alone",
                                    (y.cpu().to(at::kFloat) - twin.to(at::kFloat)).abs().max().item<double>());
                    }
                    checks.push_back({{"format", fname}, {"dtype", dname}, {"out", O}, {"in", I}, {"m", M},
                                      {"form", "fma"}, {"equal_to_cpu_twin", exact}, {"rows_equal_alone", invariant}});
                    if (dtype == at::kFloat) continue;
                    // The tensor-core form: rows alone == packed, and near the twin (the
                    // codes' values in the activations' type; the tensor cores' own sums).
                    kev::set_cuda_q4_form(kev::CudaQ4Form::Tiles);
                    const at::Tensor yt = kev::quant_linear(xg, dev, bias.to(cuda).to(dtype));
                    bool tile_invariant = true;
                    for (long long r = 0; r < M; ++r) {
                        const at::Tensor alone = kev::quant_linear(xg.narrow(0, r, 1), dev, bias.to(cuda).to(dtype));
                        tile_invariant = tile_invariant && same_bits(alone, yt.narrow(0, r, 1));
                    }
                    kev::set_cuda_q4_form(kev::CudaQ4Form::Fma);
                    const at::Tensor w = kev::dequantize(host, at::kFloat);
                    const at::Tensor bound = at::matmul(x.to(at::kFloat).abs(), w.abs().t()) + bias.abs();
                    const double rel = ((yt.cpu().to(at::kFloat) - twin.to(at::kFloat)).abs() / (bound + 1e-30)).max().item<double>();
                    const bool near = rel <= 4e-3;
                    if (!tile_invariant || !near) {
                        ++mismatches;
                        std::printf("MISMATCH tiles %s %s %lldx%lld M=%lld: %s%s (|diff| / sum|w x| up to %g)\n", fname,
                                    dname, O, I, M, tile_invariant ? "" : "rows differ alone ", near ? "" : "far from the twin",
                                    rel);
                    }
                    checks.push_back({{"format", fname}, {"dtype", dname}, {"out", O}, {"in", I}, {"m", M},
                                      {"form", "tiles"}, {"relative_to_twin", rel}, {"rows_equal_alone", tile_invariant}});
                }
            }
            // Speed: bf16 activations (the 4bit precision's), each row count timed in turn,
            // both forms.
            for (long long M : timed) for (kev::CudaQ4Form form : {kev::CudaQ4Form::Fma, kev::CudaQ4Form::Tiles}) {
                kev::set_cuda_q4_form(form);
                const char* form_name = form == kev::CudaQ4Form::Fma ? "fma" : "tiles";
                const at::Tensor xg = at::randn({M, I}, cuda).to(at::kBFloat16);
                for (int w = 0; w < 3; ++w) kev::quant_linear(xg, dev, at::Tensor());
                at::Tensor sync = at::zeros({1}, cuda);
                sync.cpu();
                const auto t0 = std::chrono::steady_clock::now();
                for (int r = 0; r < reps; ++r) kev::quant_linear(xg, dev, at::Tensor());
                sync = at::zeros({1}, cuda);
                sync.cpu();  // waits for the stream
                const double ms =
                    std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / reps;
                const double gbs = static_cast<double>(dev.bytes()) / (ms * 1e-3) / 1e9;
                const double tflops = 2.0 * static_cast<double>(M) * O * I / (ms * 1e-3) / 1e12;
                std::fprintf(stderr, "%-5s %-5s %5lldx%-5lld M=%-4lld %8.4f ms  %7.1f GB/s (%.0f%% of %.0f)  %6.2f TFLOP/s\n",
                             fname, form_name, O, I, M, ms, gbs, 100.0 * gbs / hbm_gbs, hbm_gbs, tflops);
                speed.push_back({{"format", fname}, {"form", form_name}, {"out", O}, {"in", I}, {"m", M}, {"ms", ms},
                                 {"weight_gbs", gbs}, {"of_hbm", gbs / hbm_gbs}, {"tflops", tflops}});
            }
            kev::set_cuda_q4_form(kev::CudaQ4Form::Fma);
        }
    }
    report["checks"] = checks;
    report["speed"] = speed;
    report["hbm_gbs"] = hbm_gbs;
    report["mismatches"] = mismatches;
    std::printf("%s\n", report.dump(2).c_str());
    std::printf("%s: %zu checks, %d mismatches\n", mismatches ? "FAIL" : "PASS", checks.size(), mismatches);
    return mismatches ? 1 : 0;
}

// The dense tensor-core tiles (KEV_CUDA_DENSE=tiles) against libtorch's linear: near
// the fp32 product, rows alone == packed to the bit (checked for cuBLAS too, reported,
// not required), and ms per call side by side.
int run_cuda_dense(const kevbench::Args& args) {
    std::vector<std::pair<long long, long long>> shapes = {{1152, 896}, {896, 896}, {9728, 896}, {896, 4864}, {100, 96}};
    std::vector<long long> rows = {1, 2, 3, 16, 17, 64, 65, 130};
    std::vector<long long> timed = {1, 4, 16, 128, 512, 2048};
    int reps = 50;
    for (std::size_t i = 0; i + 1 < args.size(); i += 2) {
        if (args[i] == "--m") rows = kevbench::parse_list(args[i + 1]);
        else if (args[i] == "--timed") timed = kevbench::parse_list(args[i + 1]);
        else if (args[i] == "--reps") reps = std::stoi(args[i + 1]);
        else { std::fprintf(stderr, "unknown option %s\n", args[i].c_str()); return 2; }
    }
    nlohmann::json report = kevbench::engine_header();
    report["benchmark"] = "cuda-dense";
    if (!kev::quant_cuda_kernels_built() || !kev::engine_info().cuda_available) {
        std::printf("NOT RUN: cuda-dense (%s)\n",
                    !kev::quant_cuda_kernels_built() ? "this build has no CUDA kernels" : "no CUDA device");
        return 4;
    }
    c10::InferenceMode guard;
    at::manual_seed(11);
    const at::TensorOptions cuda = at::TensorOptions().device(at::kCUDA, 0);
    int mismatches = 0;
    nlohmann::json checks = nlohmann::json::array(), speed = nlohmann::json::array();
    for (auto [O, I] : shapes) {
        for (auto dtype : {at::kHalf, at::kBFloat16}) {
            const char* dname = dtype == at::kHalf ? "fp16" : "bf16";
            kev::Linear lin;
            lin.weight = (at::randn({O, I}) * 0.05).to(dtype).to(cuda);
            lin.bias = (at::randn({O}) * 0.1).to(dtype).to(cuda);
            for (long long M : rows) {
                const at::Tensor x = at::randn({M, I}, cuda).to(dtype);
                const at::Tensor ref = at::matmul(x.to(at::kFloat), lin.weight.to(at::kFloat).t()) + lin.bias.to(at::kFloat);
                const at::Tensor bound = at::matmul(x.to(at::kFloat).abs(), lin.weight.to(at::kFloat).abs().t()) + 1e-3;
                bool invariant[2] = {true, true};
                double rel[2] = {0, 0};
                for (int f = 0; f < 2; ++f) {
                    kev::set_cuda_dense_form(f == 0 ? kev::CudaDenseForm::Tiles : kev::CudaDenseForm::Torch);
                    const at::Tensor y = lin.fp32_out(x);
                    rel[f] = ((y - ref).abs() / bound).max().item<double>();
                    for (long long r = 0; r < M; ++r)
                        invariant[f] = invariant[f] && same_bits(lin.fp32_out(x.narrow(0, r, 1)), y.narrow(0, r, 1));
                }
                kev::set_cuda_dense_form(kev::CudaDenseForm::Torch);
                const bool ok = invariant[0] && rel[0] <= 1e-3;
                if (!ok) {
                    ++mismatches;
                    std::printf("MISMATCH dense tiles %s %lldx%lld M=%lld: %s (|diff| / sum|w x| up to %g)\n", dname, O, I,
                                M, invariant[0] ? "" : "rows differ alone", rel[0]);
                }
                checks.push_back({{"dtype", dname}, {"out", O}, {"in", I}, {"m", M}, {"tiles_rows_equal_alone", invariant[0]},
                                  {"tiles_relative_error", rel[0]}, {"torch_rows_equal_alone", invariant[1]},
                                  {"torch_relative_error", rel[1]}});
            }
            for (long long M : timed) {
                const at::Tensor x = at::randn({M, I}, cuda).to(dtype);
                double ms[2] = {0, 0};
                for (int f = 0; f < 2; ++f) {
                    kev::set_cuda_dense_form(f == 0 ? kev::CudaDenseForm::Tiles : kev::CudaDenseForm::Torch);
                    for (int w = 0; w < 3; ++w) lin(x);
                    at::zeros({1}, cuda).cpu();
                    const auto t0 = std::chrono::steady_clock::now();
                    for (int r = 0; r < reps; ++r) lin(x);
                    at::zeros({1}, cuda).cpu();
                    ms[f] = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / reps;
                }
                kev::set_cuda_dense_form(kev::CudaDenseForm::Torch);
                std::fprintf(stderr, "dense %s %5lldx%-5lld M=%-5lld tiles %8.4f ms  cuBLAS %8.4f ms  (%.2fx)\n", dname, O, I,
                             M, ms[0], ms[1], ms[0] / ms[1]);
                speed.push_back({{"dtype", dname}, {"out", O}, {"in", I}, {"m", M}, {"tiles_ms", ms[0]}, {"torch_ms", ms[1]}});
            }
        }
    }
    report["checks"] = checks;
    report["speed"] = speed;
    report["mismatches"] = mismatches;
    std::printf("%s\n", report.dump(2).c_str());
    std::printf("%s: %zu checks, %d mismatches\n", mismatches ? "FAIL" : "PASS", checks.size(), mismatches);
    return mismatches ? 1 : 0;
}

// kev-cli's and the app's VRAM figures (kev::vram_breakdown) against libtorch's CUDA
// allocator in the same process (torch.cuda.memory_allocated / memory_reserved read the
// same counters) and the driver: the weights Kev counts are what loading allocated, the
// cache what make_cache allocated, and the parts add up. Exit 1 when they do not.
int run_cuda_memory(const kevbench::Args& args) {
    std::string model_path, precision = "bf16";
    long long slots = 4096;
    for (std::size_t i = 0; i + 1 < args.size(); i += 2) {
        if (args[i] == "--model") model_path = args[i + 1];
        else if (args[i] == "--precision") precision = args[i + 1];
        else if (args[i] == "--slots") slots = std::stoll(args[i + 1]);
        else { std::fprintf(stderr, "unknown option %s\n", args[i].c_str()); return 2; }
    }
    if (model_path.empty()) { std::fprintf(stderr, "kev-bench cuda-memory: --model PATH\n"); return 2; }
    nlohmann::json report = kevbench::engine_header();
    report["benchmark"] = "cuda-memory";
    if (!kev::cuda_allocator_memory()) {
        std::printf("NOT RUN: cuda-memory (no CUDA device, or a build without the CUDA headers)\n");
        return 4;
    }
    c10::InferenceMode guard;
    const long long before = kev::cuda_allocator_memory()->allocated_bytes;
    kev::LoadOptions load;
    kev::set_precision(load, precision);
    load.device = kev::Device::Cuda;
    const auto model = kev::Model::load(model_path, load);
    const long long after_load = kev::cuda_allocator_memory()->allocated_bytes;
    const long long weights = model->weights().bytes();
    kev::KvCache cache = model->make_cache(slots);
    const long long after_cache = kev::cuda_allocator_memory()->allocated_bytes;
    std::vector<std::int64_t> tokens(64);
    for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::int64_t>(3 + 7 * i);
    model->forward(kev::single_sequence_batch(tokens, 0, true), cache).cpu();
    const auto a = *kev::cuda_allocator_memory();
    const auto v = kev::vram_breakdown(weights, cache.bytes());
    // Loading allocates the weights and a few small tensors (RoPE frequencies); the
    // allocator rounds each block up to 512 bytes.
    const double load_gap = static_cast<double>(after_load - before - weights);
    const double cache_gap = static_cast<double>(after_cache - after_load - cache.bytes());
    const bool ok = v && std::abs(load_gap) <= 0.01 * static_cast<double>(weights) + (1 << 20) &&
                    std::abs(cache_gap) <= (1 << 20) &&
                    v->weights + v->kv_cache + v->activations == a.allocated_bytes &&
                    a.reserved_bytes >= a.allocated_bytes && v->device_used >= a.reserved_bytes &&
                    v->device_total >= v->device_used;
    report["kev_weight_bytes"] = weights;
    report["kev_kv_cache_bytes"] = cache.bytes();
    report["allocated_by_load"] = after_load - before;
    report["allocated_by_cache"] = after_cache - after_load;
    report["memory_allocated"] = a.allocated_bytes;
    report["memory_reserved"] = a.reserved_bytes;
    report["max_memory_allocated"] = a.peak_allocated_bytes;
    if (v) {
        report["gauge"] = {{"weights", v->weights},         {"kv_cache", v->kv_cache},
                           {"activations", v->activations}, {"reserved_unused", v->reserved_unused},
                           {"device_used", v->device_used}, {"device_total", v->device_total}};
    }
    report["consistent"] = ok;
    std::printf("%s\n", report.dump(2).c_str());
    return ok ? 0 : 1;
}

}  // namespace

KEV_BENCH("cuda-dense", "dense fp16/bf16 tensor-core tiles vs libtorch on CUDA: error, rows alone == packed, "
                        "ms [--m 1,17,130 --timed 1,16,512 --reps N]",
          run_cuda_dense);
KEV_BENCH("cuda-memory", "the VRAM gauge's figures against the CUDA allocator and the driver --model PATH "
                         "[--precision bf16 --slots 4096]",
          run_cuda_memory);
KEV_BENCH("cuda-q4", "CUDA 4-bit kernels: exact vs their CPU twin, rows alone == packed, speed vs HBM "
                     "[--shape OUT,IN --m 1,2,17 --timed 1,4,16,128 --reps N --hbm-gbs 4800]",
          run_cuda_q4);
