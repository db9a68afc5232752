// Which SDPA backends the forward may use on CUDA (kev/cuda_attention.h).
#include "kev/cuda_attention.h"

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <utility>

#include <ATen/ATen.h>
#include <ATen/Context.h>

#include "kev/engine_info.h"
#include "kev/error.h"

namespace kev {

CudaAttentionChoice parse_cuda_attention_choice(const std::string& value) {
    CudaAttentionChoice c;
    if (value.empty() || value == "auto") return c;
    c.automatic = false;
    c.flash = c.efficient = c.math = c.cudnn = false;
    std::size_t from = 0;
    while (from <= value.size()) {
        const std::size_t comma = std::min(value.find(',', from), value.size());
        const std::string name = value.substr(from, comma - from);
        from = comma + 1;
        if (name == "flash") c.flash = true;
        else if (name == "efficient") c.efficient = true;
        else if (name == "math") c.math = true;
        else if (name == "cudnn") c.cudnn = true;
        else
            throw Error(ErrorCode::InvalidArgument,
                        "KEV_CUDA_SDPA: unknown attention backend \"" + name +
                            "\" (valid: auto, or a comma list of flash, efficient, math, cudnn)");
    }
    return c;
}

void apply_cuda_attention_choice() {
    static std::once_flag once;
    static CudaAttentionChoice choice;
    static std::string failure;
    std::call_once(once, [] {
        const char* env = std::getenv("KEV_CUDA_SDPA");
        try {
            choice = parse_cuda_attention_choice(env ? env : "");
        } catch (const Error& e) {
            failure = e.what();
            return;
        }
        if (choice.automatic) return;
        at::Context& ctx = at::globalContext();
        ctx.setSDPUseFlash(choice.flash);
        ctx.setSDPUseMemEfficient(choice.efficient);
        ctx.setSDPUseMath(choice.math);
        ctx.setSDPUseCuDNN(choice.cudnn);
    });
    if (!failure.empty()) throw Error(ErrorCode::InvalidArgument, failure);
}

std::string cuda_attention_description() {
    const char* env = std::getenv("KEV_CUDA_SDPA");
    try {
        const CudaAttentionChoice c = parse_cuda_attention_choice(env ? env : "");
        if (c.automatic) return "libtorch SDPA, libtorch's choice of kernel (KEV_CUDA_SDPA=auto)";
        std::string allowed;
        for (const auto& [on, name] : {std::pair<bool, const char*>{c.flash, "flash"}, {c.efficient, "efficient"},
                                       {c.math, "math"}, {c.cudnn, "cudnn"}})
            if (on) allowed += std::string(allowed.empty() ? "" : ", ") + name;
        return "libtorch SDPA limited to " + allowed + " (KEV_CUDA_SDPA)";
    } catch (const Error& e) {
        return std::string("invalid: ") + e.what();
    }
}

CudaAttentionBackends cuda_attention_backends(int heads, int kv_heads, int head_dim, const std::string& dtype) {
    if (!engine_info().cuda_available) return {"none", "none"};
    const at::ScalarType st = dtype == "fp16" ? at::kHalf : dtype == "bf16" ? at::kBFloat16 : at::kFloat;
    const auto opts = at::TensorOptions().dtype(st).device(at::kCUDA);
    const auto name = [](std::int64_t b) -> std::string {
        switch (b) {
            case 0: return "math";
            case 1: return "flash";
            case 2: return "efficient";
            case 3: return "cudnn";
            case 4: return "overrideable";
            default: return "none";
        }
    };
    const std::int64_t S = 4, L = 200;
    const at::Tensor q = at::zeros({S, heads, 1, head_dim}, opts);
    const at::Tensor kv = at::zeros({S, kv_heads, L, head_dim}, opts);
    const at::Tensor valid = at::ones({S, 1, 1, L}, opts.dtype(at::kBool));
    const at::Tensor qp = at::zeros({1, heads, 128, head_dim}, opts);
    const at::Tensor kvp = at::zeros({1, kv_heads, 128, head_dim}, opts);
    CudaAttentionBackends b;
    b.decode = name(at::_fused_sdp_choice(q, kv, kv, valid, 0.0, false, std::nullopt, kv_heads != heads));
    b.prompt = name(at::_fused_sdp_choice(qp, kvp, kvp, std::nullopt, 0.0, true, std::nullopt, kv_heads != heads));
    return b;
}

}  // namespace kev
