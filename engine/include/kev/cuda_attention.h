// Which of libtorch's attention kernels (SDPA backends) the forward may use on CUDA.
//
// libtorch picks per call among flash, memory-efficient, cuDNN and math kernels. On an
// H200 (torch 2.11, first GPU check) a packed decode step took 67-91 ms for every pack
// size and model size while the same card's second run took 11-17 ms: the cost of a
// first call per shape, which a decode step meets every step (its key count grows).
// cuDNN's attention builds a graph per shape; the next GPU check measures each choice
// (packaging/gpu-check.sh, "attention backends") before the default moves off libtorch's.
#pragma once

#include <string>

namespace kev {

// KEV_CUDA_SDPA: "auto" (libtorch's choice, the default) or a comma list of the
// backends allowed: flash, efficient, math, cudnn. Parsed here; an unknown name or an
// empty list throws kev::Error (InvalidArgument) naming the valid ones.
struct CudaAttentionChoice {
    bool automatic = true;
    bool flash = true, efficient = true, math = true, cudnn = true;
};
CudaAttentionChoice parse_cuda_attention_choice(const std::string& value);

// Applies KEV_CUDA_SDPA to libtorch's global switches, once per process (a CUDA load
// calls it). Throws kev::Error on a bad value.
void apply_cuda_attention_choice();

// What KEV_CUDA_SDPA allows, in words (kev-cli info, kernel_paths()).
std::string cuda_attention_description();

// The backend libtorch takes for a decode-shaped call ([S, H, 1, D] queries against
// [S, KVH, L, D] keys with a bool mask, GQA) and for a prompt-shaped one ([1, H, S, D],
// causal) in the given half or fp32 dtype, by name ("cudnn", "efficient", "flash",
// "math"); "none" without a CUDA device.
struct CudaAttentionBackends {
    std::string decode, prompt;
};
CudaAttentionBackends cuda_attention_backends(int heads, int kv_heads, int head_dim, const std::string& dtype);

}  // namespace kev
