// CPU features, the kernel-family ceiling and the bf16 kernel switch (kev/cpu_kernels.h).
#include "kev/cpu_kernels.h"

#include <atomic>
#include <cstdlib>

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "kev/cuda_attention.h"
#include "kev/error.h"
#include "kev/quant.h"
#include "model/linear_dense.h"
#include "model/rowwise.h"

namespace kev {

namespace {

bool has_f16c() {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && ((ecx >> 29) & 1u);
}

// AMX needs the CPU feature, the OS saving tile state (XCR0 bits 17-18) and, on Linux,
// a one-time per-process permission for the 8 KB of tile data.
bool amx_granted() {
    static const bool ok = [] {
        unsigned a = 0, b = 0, c = 0, d = 0;
        if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
        const bool amx_tile = (d >> 24) & 1u;
        if (!amx_tile || !cpu_has_avx512_bf16()) return false;
        if (!__get_cpuid(1, &a, &b, &c, &d) || !((c >> 27) & 1u)) return false;  // OSXSAVE
        unsigned xcr0_lo = 0, xcr0_hi = 0;
        __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
        if ((xcr0_lo & (3u << 17)) != (3u << 17)) return false;
        constexpr long kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
        return syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0;
    }();
    return ok;
}

bool amx_feature(unsigned edx_bit) {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __get_cpuid_count(7, 0, &a, &b, &c, &d) && ((d >> edx_bit) & 1u) && amx_granted();
}

Isa isa_from_env() {
    const char* e = std::getenv("KEV_ISA");
    if (!e || !*e) return cpu_isa();
    const Isa want = parse_isa(e);
    if (!isa_supported(want))
        throw Error(ErrorCode::Unsupported, std::string("KEV_ISA=") + e + ": this CPU cannot run the " + e + " kernels");
    return want;
}

std::atomic<Isa>& ceiling() {
    static std::atomic<Isa> limit{isa_from_env()};
    return limit;
}

Bf16Kernel bf16_from_env() {
    const char* e = std::getenv("KEV_BF16_KERNEL");
    if (!e || !*e) return Bf16Kernel::Auto;
    const Bf16Kernel k = parse_bf16_kernel(e);
    if (!bf16_kernel_available(k))
        throw Error(ErrorCode::Unsupported, std::string("KEV_BF16_KERNEL=") + e + ": this CPU cannot run that kernel");
    return k;
}

std::atomic<Bf16Kernel>& bf16_request() {
    static std::atomic<Bf16Kernel> k{bf16_from_env()};
    return k;
}

}  // namespace

bool cpu_has_avx2_fma() {
    static const bool has = [] {
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
    }();
    return has;
}
bool cpu_has_avx_vnni() {
    static const bool has = cpu_has_avx2_fma() && __builtin_cpu_supports("avxvnni");
    return has;
}
bool cpu_has_avx512() {
    static const bool has = cpu_has_avx2_fma() && __builtin_cpu_supports("avx512f") &&
                            __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
    return has;
}
bool cpu_has_avx512_vnni() {
    static const bool has = cpu_has_avx512() && __builtin_cpu_supports("avx512vnni");
    return has;
}
bool cpu_has_avx512_bf16() {
    static const bool has = cpu_has_avx512() && __builtin_cpu_supports("avx512bf16");
    return has;
}
bool cpu_has_amx_bf16() {
    static const bool has = amx_feature(22);
    return has;
}
bool cpu_has_amx_int8() {
    static const bool has = amx_feature(25) && cpu_has_avx512_vnni();
    return has;
}

const char* to_string(Isa isa) {
    switch (isa) {
        case Isa::Scalar: return "scalar";
        case Isa::Avx2: return "avx2";
        case Isa::Avx512: return "avx512";
        case Isa::Amx: return "amx";
    }
    return "?";
}

Isa parse_isa(const std::string& name) {
    for (Isa i : {Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Amx})
        if (name == to_string(i)) return i;
    throw Error(ErrorCode::InvalidArgument, "unknown kernel family '" + name + "' (scalar, avx2, avx512, amx)");
}

Isa cpu_isa() {
    static const Isa best = [] {
        if (cpu_has_amx_bf16()) return Isa::Amx;
        if (cpu_has_avx512()) return Isa::Avx512;
        if (cpu_has_avx2_fma()) return Isa::Avx2;
        return Isa::Scalar;
    }();
    return best;
}

bool isa_supported(Isa isa) { return static_cast<int>(isa) <= static_cast<int>(cpu_isa()); }

void set_isa_limit(Isa isa) {
    if (!isa_supported(isa))
        throw Error(ErrorCode::Unsupported, std::string("this CPU cannot run the ") + to_string(isa) + " kernels");
    ceiling().store(isa, std::memory_order_relaxed);
}

Isa isa_limit() { return ceiling().load(std::memory_order_relaxed); }

const char* to_string(Bf16Kernel kernel) {
    switch (kernel) {
        case Bf16Kernel::Auto: return "auto";
        case Bf16Kernel::Amx: return "amx";
        case Bf16Kernel::Avx512Bf16: return "avx512bf16";
        case Bf16Kernel::Avx512: return "avx512";
        case Bf16Kernel::Avx2: return "avx2";
        case Bf16Kernel::Scalar: return "scalar";
        case Bf16Kernel::Torch: return "torch";
    }
    return "?";
}

Bf16Kernel parse_bf16_kernel(const std::string& name) {
    for (Bf16Kernel k : {Bf16Kernel::Auto, Bf16Kernel::Amx, Bf16Kernel::Avx512Bf16, Bf16Kernel::Avx512,
                         Bf16Kernel::Avx2, Bf16Kernel::Scalar, Bf16Kernel::Torch})
        if (name == to_string(k)) return k;
    throw Error(ErrorCode::InvalidArgument,
                "unknown bf16 kernel '" + name + "' (auto, amx, avx512bf16, avx512, avx2, scalar, torch)");
}

bool bf16_kernel_available(Bf16Kernel kernel) {
    switch (kernel) {
        case Bf16Kernel::Amx: return cpu_has_amx_bf16();
        case Bf16Kernel::Avx512Bf16: return cpu_has_avx512_bf16();
        case Bf16Kernel::Avx512: return cpu_has_avx512();
        case Bf16Kernel::Avx2: return cpu_has_avx2_fma();
        default: return true;
    }
}

void set_bf16_kernel(Bf16Kernel kernel) {
    if (!bf16_kernel_available(kernel))
        throw Error(ErrorCode::Unsupported, std::string("this CPU cannot run the ") + to_string(kernel) + " bf16 kernel");
    bf16_request().store(kernel, std::memory_order_relaxed);
}

Bf16Kernel requested_bf16_kernel() { return bf16_request().load(std::memory_order_relaxed); }

// Auto: AMX where present (its tiles read the weights in place: 1 and 16 rows cost the
// same); else vdpbf16ps where the CPU has AVX512-BF16 (32 multiply-adds an instruction:
// measured with kev-bench linear on a Zen 4, 2.0-2.3x the FMA kernel at 4-128 rows and
// level with libtorch's oneDNN at 128); else the fixed-order FMA kernel of the widest
// family allowed. Each computes a row alike whatever the number of rows.
Bf16Kernel active_bf16_kernel() {
    const Bf16Kernel want = requested_bf16_kernel();
    if (want != Bf16Kernel::Auto) return want;
    const Isa limit = isa_limit();
    if (limit == Isa::Amx && cpu_has_amx_bf16()) return Bf16Kernel::Amx;
    if (static_cast<int>(limit) >= static_cast<int>(Isa::Avx512) && cpu_has_avx512_bf16()) return Bf16Kernel::Avx512Bf16;
    if (static_cast<int>(limit) >= static_cast<int>(Isa::Avx512) && cpu_has_avx512()) return Bf16Kernel::Avx512;
    if (static_cast<int>(limit) >= static_cast<int>(Isa::Avx2) && cpu_has_avx2_fma()) return Bf16Kernel::Avx2;
    return Bf16Kernel::Scalar;
}

namespace {
const char* cuda_architectures() {
#if defined(KEV_CUDA_ARCHS)
    return KEV_CUDA_ARCHS;
#else
    return "-";
#endif
}
}  // namespace

std::vector<std::pair<std::string, std::string>> kernel_paths() {
    const char* dense = dense_kernel_name();
    const Int8Kernel q8 = quant_int8_kernel();
    const Bf16Kernel bf = active_bf16_kernel();
    std::string bf16 = to_string(bf);
    if (bf == Bf16Kernel::Amx) bf16 += " (bf16 tiles)";
    else if (bf == Bf16Kernel::Avx512Bf16) bf16 += " (vdpbf16ps)";
    else if (bf == Bf16Kernel::Torch) bf16 += " (libtorch; not batch-invariant)";
    else bf16 += " (fixed-order fp32 FMA)";
    return {
        {"kernel family", std::string(to_string(isa_limit())) + " (CPU: " + to_string(cpu_isa()) + ")"},
        {"fp32 linear", std::string(dense) + " (fixed-order fp32 FMA)"},
        {"bf16 linear", bf16},
        {"4-bit decode", quant_int8_available() ? to_string(q8 == Int8Kernel::Amx ? Int8Kernel::Vnni : q8)
                                                : to_string(quant_kernel())},
        {"4-bit prompt", quant_int8_available() ? quant_int8_prompt_kernel() : to_string(quant_kernel())},
        {"4-bit, fp32 activations", to_string(quant_kernel())},
        {"Q8_0 kept blocks", std::string(quant_int8_available() ? to_string(q8 == Int8Kernel::Amx ? Int8Kernel::Vnni : q8)
                                                                 : to_string(quant_kernel())) +
                                 " (half activations); " + to_string(quant_kernel()) + " byte kernels (fp32 activations)"},
        {"K-quant kept blocks", std::string(quant_int8_available() ? to_string(q8 == Int8Kernel::Amx ? Int8Kernel::Vnni : q8)
                                                                       : to_string(quant_kernel())) +
                                       " (half activations); " + to_string(quant_kernel()) +
                                       " row / byte kernels (fp32 activations)"},
        {"attention (prompt)", std::string("kev rows ") + attention_rows_kernel(64) + " (each row its own slots)"},
        {"attention (decode)", std::string("kev rows ") + attention_rows_kernel(64) + " (each row its own slots)"},
        {"RMSNorm, RoPE, SiLU gate",
         std::string("kev rows (portable") +
             (row_kernels_avx2() ? "; the gate's exp avx2)" : ")")},
        {"4-bit on CUDA", quant_cuda_kernels_built()
                              ? std::string("kev fused kernels, one fixed order (built for sm ") + cuda_architectures() + ")"
                              : std::string("not built (no nvcc when this build was configured)")},
        {"attention on CUDA", cuda_attention_description()},
    };
}

}  // namespace kev
