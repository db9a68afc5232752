// The CPU kernel families, the switches that force them, and the names of the kernels
// each path of the forward runs on.
//
// Every path of Kev's CPU forward (linear layers in every precision, norms, RoPE, the
// gated MLP, decode attention) computes a row's result independently of the other rows
// of the call and of how many there are: a card's logits are the same bits alone or in
// any pack (DESIGN.md invariant 1). Kernels come in instruction-set families:
//   scalar   any x86-64: the portable twins the tests compare the others with;
//   avx2     AVX2 + FMA + F16C (Intel since Haswell, AMD since Zen);
//   avx512   AVX-512 F/BW/VL, plus VNNI or BF16 where a kernel's instructions need them;
//   amx      AMX tiles (Intel since Sapphire Rapids).
// A ceiling keeps every kernel at or below one family, so the AVX2 kernels can be run
// and tested on an AVX-512 machine: KEV_ISA=scalar|avx2|avx512|amx in the environment,
// or set_isa_limit(). A family the CPU cannot run is refused, never quietly replaced by
// a lower one.
//
// The bf16 linear layer has its own switch, KEV_BF16_KERNEL (set_bf16_kernel), naming
// one kernel: amx (tile multiply), avx512bf16 (vdpbf16ps), or the fixed-order FMA
// kernels avx512 / avx2 / scalar (bf16 -> fp32 by a shift, then the fp32 FMA arithmetic
// of the fp32 layers: these three compute the same bits), or torch (libtorch's linear,
// which is NOT batch-invariant: for benchmarks only). Auto picks the fastest
// batch-invariant one under the ceiling.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace kev {

enum class Isa { Scalar, Avx2, Avx512, Amx };
const char* to_string(Isa isa);
// "scalar", "avx2", "avx512", "amx"; throws InvalidArgument for anything else.
Isa parse_isa(const std::string& name);
Isa cpu_isa();                 // the widest family this CPU (and OS) runs
bool isa_supported(Isa isa);   // isa <= cpu_isa()
// Process-wide ceiling, read from KEV_ISA at first use (default: cpu_isa()); takes effect
// at the next kernel call. Throws Unsupported for a family this CPU cannot run.
void set_isa_limit(Isa isa);
Isa isa_limit();

// CPU features the kernels ask for, cached (GCC's __builtin_cpu_supports names).
bool cpu_has_avx2_fma();     // AVX2, FMA and F16C
bool cpu_has_avx_vnni();     // AVX2 + FMA + F16C and AVX-VNNI (vpdpbusd on ymm, VEX)
bool cpu_has_avx512();       // AVX-512 F, BW and VL
bool cpu_has_avx512_vnni();  // the above and VNNI
bool cpu_has_avx512_bf16();  // the above and BF16
bool cpu_has_amx_bf16();     // AMX tiles with BF16, granted by the OS
bool cpu_has_amx_int8();     // AMX tiles with INT8, granted by the OS

enum class Bf16Kernel { Auto, Amx, Avx512Bf16, Avx512, Avx2, Scalar, Torch };

// Process-wide; takes effect at the next linear call. Throws Unsupported for a kernel
// this CPU cannot run (the environment's choice is checked at the first bf16 call).
void set_bf16_kernel(Bf16Kernel kernel);
Bf16Kernel requested_bf16_kernel();
bool bf16_kernel_available(Bf16Kernel kernel);
const char* to_string(Bf16Kernel kernel);
// "auto", "amx", "avx512bf16", "avx512", "avx2", "scalar", "torch"; throws InvalidArgument.
Bf16Kernel parse_bf16_kernel(const std::string& name);
// The kernel a bf16 linear layer runs on now (never Auto), whatever its number of rows.
Bf16Kernel active_bf16_kernel();

// What each path of the forward runs on now, for kev-cli info, kev-bench and the app:
// {"bf16 linear", "avx512bf16 (vdpbf16ps)"}, {"4-bit decode", ...}, ...
std::vector<std::pair<std::string, std::string>> kernel_paths();

}  // namespace kev
