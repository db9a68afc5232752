// The CPU kernels a bf16 linear layer can run on, and a switch for tests and
// benchmarks. Auto picks, for decode shapes (up to 16 rows), AMX when the CPU and the
// OS allow it, else AVX512-BF16; and libtorch's own linear (oneDNN) for more rows.
// Amx asked for explicitly also takes more rows (for tests). The environment variable KEV_BF16_KERNEL=amx|avx512|torch
// (or the older KEV_BF16_GEMV=0, meaning torch) sets the starting choice.
#pragma once

namespace kev {

enum class Bf16Kernel { Auto, Amx, Avx512, Torch };

// Process-wide; takes effect at the next linear call. A kernel the CPU lacks falls
// back to the next one down.
void set_bf16_kernel(Bf16Kernel kernel);
Bf16Kernel requested_bf16_kernel();
bool bf16_kernel_available(Bf16Kernel kernel);
const char* to_string(Bf16Kernel kernel);

}  // namespace kev
