// Applying an attached LoRA adapter: the per-row path of a Linear, and merging into
// (and restoring) the model's weights.
#include <functional>

#include <ATen/ATen.h>

#include "kev/error.h"
#include "kev/lora.h"
#include "kev/model.h"
#include "model/rowwise.h"
#include "model/torch_util.h"

namespace kev {

namespace {

// Every Linear of the decoder an adapter can target, in a fixed order.
void for_each_target(ModelWeights& w, const std::function<void(Linear&, const std::shared_ptr<const LoraFactors>*)>& fn,
                     const LoraAdapter* adapter) {
    for (std::size_t l = 0; l < w.layers.size(); ++l) {
        LayerWeights& lw = w.layers[l];
        const LoraAdapter::Layer* al = adapter ? &adapter->layers[l] : nullptr;
        fn(lw.qkv, al ? &al->qkv : nullptr);
        fn(lw.o, al ? &al->o : nullptr);
        fn(lw.gate_up, al ? &al->gate_up : nullptr);
        fn(lw.down, al ? &al->down : nullptr);
    }
}

}  // namespace

at::Tensor Linear::operator()(const at::Tensor& x, const LoraRows& rows) const {
    at::Tensor y = (*this)(x);  // [S, out]
    if (!lora || !rows.active()) return y;
    // The low-rank product on the same batch-invariant kernels as the base layer.
    Linear down_proj, up_proj;
    down_proj.weight = lora->a;
    up_proj.weight = lora->b;
    const at::Tensor update = up_proj(down_proj(x));  // [S, R] -> [S, out]
    if (y.device().is_cpu()) return add_scaled_rows(y, update, rows.scale);  // row by row (rowwise.h)
    return at::addcmul(y, update, rows.scale);
}

void Model::attach_lora(std::shared_ptr<const LoraAdapter> adapter) {
    if (adapter && adapter->layers.size() != weights_.layers.size())
        throw Error(ErrorCode::Format, "adapter " + adapter->path + " has " + std::to_string(adapter->layers.size()) +
                                                    " layers, this model " + std::to_string(weights_.layers.size()));
    unmerge_lora();
    for_each_target(
        weights_,
        [](Linear& lin, const std::shared_ptr<const LoraFactors>* f) { lin.lora = f ? *f : nullptr; },
        adapter.get());
    lora_ = std::move(adapter);
}

bool Model::lora_mergeable() const {
    if (!lora_) return false;
    bool ok = true;
    for (const LayerWeights& lw : weights_.layers)
        for (const Linear* lin : {&lw.qkv, &lw.o, &lw.gate_up, &lw.down})
            if (lin->lora && lin->quantized()) ok = false;
    return ok;
}

void Model::merge_lora(float scale) {
    LoraUse{true, scale}.validate();
    if (!lora_) throw Error(ErrorCode::InvalidArgument, "merge_lora: no adapter is attached");
    if (!lora_mergeable())
        throw Error(ErrorCode::Unsupported, "adapter " + lora_->path + ": its target weights are 4-bit and cannot be merged");
    if (merged_scale_ && *merged_scale_ == scale) return;
    unmerge_lora();
    const double s = static_cast<double>(scale) * lora_->config.scaling();
    const at::ScalarType dt = scalar_type(dtype_);
    // All merged weights are computed before any is swapped in: a failure (memory)
    // leaves the model as it was.
    std::vector<at::Tensor> merged;
    for_each_target(
        weights_,
        [&](Linear& lin, const std::shared_ptr<const LoraFactors>*) {
            if (!lin.lora) return;
            // W + s B A in fp32, then the working dtype: [out, in]
            merged.push_back(at::addmm(lin.weight.to(at::kFloat), lin.lora->b_f32, lin.lora->a_f32, 1.0, s).to(dt).contiguous());
        },
        nullptr);
    std::size_t i = 0;
    for_each_target(
        weights_,
        [&](Linear& lin, const std::shared_ptr<const LoraFactors>*) {
            if (!lin.lora) return;
            unmerged_weights_.push_back(lin.weight);
            lin.weight = merged[i++];
        },
        nullptr);
    merged_scale_ = scale;
}

void Model::unmerge_lora() {
    if (!merged_scale_) return;
    std::size_t i = 0;
    for_each_target(
        weights_,
        [&](Linear& lin, const std::shared_ptr<const LoraFactors>*) {
            if (lin.lora) lin.weight = unmerged_weights_[i++];
        },
        nullptr);
    unmerged_weights_.clear();
    merged_scale_.reset();
}

}  // namespace kev
