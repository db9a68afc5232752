#include "kev/weights.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <set>

#include <ATen/ATen.h>

#include "kev/cpu_kernels.h"
#include "kev/cuda_attention.h"
#include "kev/error.h"
#include "kev/gguf.h"
#include "kev/quant.h"
#include "kev/safetensors.h"
#include "model/linear_bf16.h"
#include "model/linear_cuda.h"
#include "model/linear_dense.h"
#include "model/torch_util.h"

namespace kev {

namespace fs = std::filesystem;

const char* to_string(DType dtype) {
    switch (dtype) {
        case DType::F32: return "fp32";
        case DType::BF16: return "bf16";
        case DType::F16: return "fp16";
    }
    return "?";
}

DType parse_dtype(const std::string& name) {
    if (name == "fp32" || name == "f32" || name == "float32" || name == "float") return DType::F32;
    if (name == "bf16" || name == "bfloat16") return DType::BF16;
    if (name == "fp16" || name == "f16" || name == "float16" || name == "half") return DType::F16;
    throw Error(ErrorCode::InvalidArgument, "unknown precision '" + name + "' (fp32, bf16, fp16)");
}

void set_precision(LoadOptions& options, const std::string& name) {
    if (name == "4bit" || name == "nf4") {
        options.dtype = DType::BF16;
        options.quant = name == "4bit" ? WeightQuant::Q4 : WeightQuant::NF4;
        return;
    }
    options.dtype = parse_dtype(name);
    options.quant = WeightQuant::None;
}

PrecisionChoice choose_auto_precision(const std::string& path) {
    if (!fs::exists(path)) throw Error(ErrorCode::Io, path + ": no such file or folder");
    if (!fs::is_directory(path)) {
        const auto gguf = GgufFile::open(path);
        std::int64_t q4 = 0, q4k = 0, q5k = 0, q6k = 0, q8 = 0, q5 = 0, linear = 0;
        for (const auto& t : gguf->tensors()) {
            if (t.name.find("_norm") != std::string::npos || t.name.find("token_embd") != std::string::npos) continue;
            if (t.dims.size() != 2) continue;
            ++linear;
            if (t.type == GgmlType::Q4_0 || t.type == GgmlType::Q4_1) ++q4;
            if (t.type == GgmlType::Q4_K) ++q4k;
            if (t.type == GgmlType::Q5_K) ++q5k;
            if (t.type == GgmlType::Q6_K) ++q6k;
            if (t.type == GgmlType::Q8_0) ++q8;
            if (t.type == GgmlType::Q5_0) ++q5;
        }
        const std::string int8 = quant_int8_available() ? to_string(quant_int8_kernel()) : to_string(quant_kernel());
        if (q4 > 0 && q4k + q5k + q6k + q8 + q5 == 0)
            return {"4bit", std::to_string(q4) + " of " + std::to_string(linear) +
                                " weight matrices are Q4_0/Q4_1 blocks: kept as they are, multiplied by the " +
                                int8 + " kernel"};
        const std::int64_t kept = q4 + q4k + q5k + q6k + q8 + q5;
        if (kept > 0) {
            std::vector<std::string> kinds;
            if (q4 > 0) kinds.push_back("Q4_0/Q4_1");
            if (q4k > 0) kinds.push_back("Q4_K");
            if (q5k > 0) kinds.push_back("Q5_K");
            if (q6k > 0) kinds.push_back("Q6_K");
            if (q8 > 0) kinds.push_back("Q8_0");
            if (q5 > 0) kinds.push_back("Q5_0 exactly as 8-bit codes");
            std::string why = std::to_string(kept) + " of " + std::to_string(linear) +
                              " weight matrices are Q4_0/Q4_1/Q4_K/Q5_K/Q6_K/Q8_0/Q5_0 blocks: kept as they are (";
            for (std::size_t i = 0; i < kinds.size(); ++i) why += (i ? ", " : "") + kinds[i];
            why += " by the " + int8 + " kernel";
            why += kept < linear ? "), the other linear layers NF4" : ")";
            return {"4bit", why};
        }
    }
    const Bf16Kernel bf16 = active_bf16_kernel();
    if (bf16 != Bf16Kernel::Scalar)
        return {"bf16", std::string("the ") + to_string(bf16) +
                            " bf16 kernel runs here: a decode step streams half the bytes of fp32"};
    return {"fp32", "no SIMD bf16 kernel under the kernel family " + std::string(to_string(isa_limit()))};
}

void check_device_dtype(Device device, DType dtype) {
    if (device == Device::Cuda && !engine_info().cuda_available)
        throw Error(ErrorCode::Unsupported, "device cuda: this libtorch has no CUDA or no CUDA device is present");
    if (device == Device::Cuda) apply_cuda_attention_choice();  // KEV_CUDA_SDPA
    // Run each kind of op the forward uses once on tiny tensors: a build without a
    // kernel fails here, before a model is loaded, not in the middle of a run.
    try {
        const auto opts = tensor_options(device, dtype);
        at::Tensor x = at::ones({2, 8}, opts);
        at::Tensor w = at::ones({4, 8}, opts);
        at::Tensor y = at::linear(x, w, at::ones({4}, opts));  // [2, 4]
        at::Tensor n = x.to(at::kFloat).pow(2).mean(-1, true).add(1e-6).rsqrt();
        at::Tensor q = at::ones({1, 2, 2, 4}, opts);
        at::Tensor mask = at::ones({2, 2}, at::TensorOptions().dtype(at::kBool).device(torch_device(device)));
        at::Tensor a = at::scaled_dot_product_attention(q, q.narrow(1, 0, 1), q.narrow(1, 0, 1), mask, 0.0, false,
                                                        std::nullopt, /*enable_gqa=*/true);
        at::Tensor s = at::silu(y) * y;
        at::Tensor e = at::embedding(w, at::zeros({1}, at::TensorOptions().dtype(at::kLong).device(torch_device(device))));
        (void)(s.sum().item<float>() + a.sum().item<float>() + n.sum().item<float>() + e.sum().item<float>());
    } catch (const c10::Error& e) {
        throw Error(ErrorCode::Unsupported, std::string("precision ") + to_string(dtype) + " is not usable on " +
                                                to_string(device) + " with this libtorch: " + e.what_without_backtrace());
    }
}

const char* to_string(WeightQuant quant) {
    switch (quant) {
        case WeightQuant::None: return "dense";
        case WeightQuant::Q4: return "4bit";
        case WeightQuant::NF4: return "nf4";
    }
    return "?";
}

namespace {

// A dense layer on the CPU's batch-invariant kernels (kev/cpu_kernels.h): a row's result
// never depends on the other rows. x [M, I]; the result in fp32 when `fp32_out` (the sums
// unrounded), else in x's dtype. libtorch's linear only when asked for by name
// (KEV_BF16_KERNEL=torch, benchmarks).
at::Tensor dense_product(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, bool fp32_out) {
    const bool bf16 = x.scalar_type() == at::kBFloat16 && weight.scalar_type() == at::kBFloat16;
    const Bf16Kernel k = bf16 ? active_bf16_kernel() : Bf16Kernel::Auto;
    if ((k == Bf16Kernel::Amx || k == Bf16Kernel::Avx512Bf16) && bf16_kernel_applies(x, weight))
        return bf16_linear(x, weight, bias, k, fp32_out ? at::kFloat : at::kBFloat16);
    if (k == Bf16Kernel::Torch) {
        const at::Tensor y = bias.defined() ? at::linear(x, weight, bias) : at::linear(x, weight);
        return fp32_out ? y.to(at::kFloat) : y;
    }
    const Isa isa = k == Bf16Kernel::Avx512 ? Isa::Avx512
                    : k == Bf16Kernel::Avx2 ? Isa::Avx2
                    : k == Bf16Kernel::Scalar ? Isa::Scalar
                                              : dense_kernel_isa();
    // The FMA kernel widens activations to fp32 exactly either way; fp32 in, fp32 out.
    return dense_linear(fp32_out ? x.to(at::kFloat) : x, weight, bias, isa);
}

at::Tensor with_leading_dims(const at::Tensor& y, const at::Tensor& x, std::int64_t out) {
    if (x.dim() == 2) return y;
    std::vector<std::int64_t> shape = x.sizes().vec();
    shape.back() = out;
    return y.view(shape);
}

// x times the stacked parts: each part's kernel on its own rows of the weight (and of the
// bias), the outputs concatenated along the last dimension.
at::Tensor parts_linear(const at::Tensor& x, const std::vector<std::shared_ptr<const QuantMatrix>>& parts,
                        const at::Tensor& bias) {
    std::vector<at::Tensor> ys;
    std::int64_t row = 0;
    for (const auto& p : parts) {
        ys.push_back(quant_linear(x, *p, bias.defined() ? bias.narrow(0, row, p->rows) : at::Tensor()));
        row += p->rows;
    }
    return at::cat(ys, -1);
}

}  // namespace

std::int64_t Linear::in_features() const {
    if (quant) return quant->cols;
    if (!quant_parts.empty()) return quant_parts.front()->cols;
    return weight.size(1);
}

at::Tensor Linear::operator()(const at::Tensor& x) const {
    if (quant) return quant_linear(x, *quant, bias);
    if (!quant_parts.empty()) return parts_linear(x, quant_parts, bias);
    const at::Tensor x2 = x.dim() == 2 ? x : x.reshape({-1, x.size(-1)});  // [M, I]
    if (cuda_dense_tiles_apply(x2, weight))
        return with_leading_dims(cuda_dense_tiles(x2, weight, bias).to(x.scalar_type()), x, weight.size(0));
    if (!dense_kernel_applies(x2, weight)) return bias.defined() ? at::linear(x, weight, bias) : at::linear(x, weight);
    return with_leading_dims(dense_product(x2, weight, bias, false), x, weight.size(0));
}

at::Tensor Linear::fp32_out(const at::Tensor& x) const {
    if (quant) return quant_linear(x.to(at::kFloat), *quant, bias);  // int8 kernel: the same sums, fp32 out
    if (!quant_parts.empty()) return parts_linear(x.to(at::kFloat), quant_parts, bias);
    const at::Tensor x2 = x.dim() == 2 ? x : x.reshape({-1, x.size(-1)});  // [M, I]
    if (cuda_dense_tiles_apply(x2, weight))  // the tiles' fp32 sums, never rounded to half
        return with_leading_dims(cuda_dense_tiles(x2, weight, bias), x, weight.size(0));
    if (!dense_kernel_applies(x2, weight)) return (*this)(x).to(at::kFloat);
    return with_leading_dims(dense_product(x2, weight, bias, true), x, weight.size(0));
}

std::int64_t ModelWeights::bytes() const { return memory().total(); }

WeightMemory ModelWeights::memory() const {
    std::set<const void*> seen;
    WeightMemory m;
    auto add = [&](const at::Tensor& t) {
        if (!t.defined() || !seen.insert(t.data_ptr()).second) return;
        m.dense += static_cast<std::int64_t>(t.nbytes());
    };
    auto add_linear = [&](const Linear& lin) {
        if (lin.weight.defined() && !seen.count(lin.weight.data_ptr()))
            m.dense_linear += static_cast<std::int64_t>(lin.weight.nbytes());
        add(lin.weight);
        add(lin.bias);
        std::vector<const QuantMatrix*> mats;
        if (lin.quant) mats.push_back(lin.quant.get());
        for (const auto& p : lin.quant_parts) mats.push_back(p.get());
        for (const QuantMatrix* q : mats) {
            if (!seen.insert(q).second) continue;
            const std::int64_t b = q->bytes();
            switch (q->format) {
                case QuantFormat::NF4: m.nf4 += b; break;
                case QuantFormat::Q4_0: m.q4_0 += b; break;
                case QuantFormat::Q4_1: m.q4_1 += b; break;
                case QuantFormat::Q4_K: m.q4_k += b; break;
                case QuantFormat::Q8_0: m.q8_0 += b; break;
                case QuantFormat::Q6_K: m.q6_k += b; break;
                case QuantFormat::Q5_K: m.q5_k += b; break;
            }
            if (q->interleaved) m.int8_kernel += b;
        }
    };
    add(embed);  // embed_quant, when set, is the tied head's own blocks: counted with lm_head
    add(final_norm);
    add_linear(lm_head);
    for (const auto& l : layers) {
        for (const at::Tensor* t : {&l.attn_norm, &l.q_norm, &l.k_norm, &l.mlp_norm, &l.post_attn_norm, &l.post_mlp_norm}) add(*t);
        for (const Linear* lin : {&l.qkv, &l.o, &l.gate_up, &l.down}) add_linear(*lin);
    }
    return m;
}

namespace {

// ---------------------------------------------------------------------------
// Where tensors come from. A source lists names (in its own naming scheme) and
// hands out a CPU tensor for a name: a view of the mapping (safetensors, GGUF float
// types) or an fp32 dequantized buffer (quantized GGUF types). The caller copies it into its
// working-dtype place and never writes into it (a view of a read-only mapping).
class TensorSource {
public:
    virtual ~TensorSource() = default;
    virtual const std::string& path() const = 0;
    virtual std::vector<std::string> names() const = 0;
    virtual bool has(const std::string& name) const = 0;
    virtual std::vector<std::int64_t> shape(const std::string& name) const = 0;  // torch order
    virtual at::Tensor read(const std::string& name) const = 0;
    virtual bool is_gguf() const = 0;
    // The GGUF entry of a tensor (its ggml type and bytes), or null.
    virtual const GgufTensorInfo* gguf_info(const std::string&) const { return nullptr; }
    virtual const std::uint8_t* gguf_data(const GgufTensorInfo&) const { return nullptr; }
    // The file holding a tensor (a shard of a folder), for messages.
    virtual const std::string& file_of(const std::string&) const { return path(); }
};

class SafetensorsSource : public TensorSource {
public:
    explicit SafetensorsSource(const std::string& dir) : dir_(dir), model_(SafetensorsModel::open(dir)) {}
    const std::string& path() const override { return dir_; }
    std::vector<std::string> names() const override {
        std::vector<std::string> n;
        for (const auto& kv : model_->tensors()) n.push_back(kv.first);
        return n;
    }
    bool has(const std::string& name) const override { return model_->find(name) != nullptr; }
    std::vector<std::int64_t> shape(const std::string& name) const override { return model_->find(name)->tensor->shape; }
    at::Tensor read(const std::string& name) const override {
        const auto* e = model_->find(name);
        at::ScalarType st = at::kFloat;
        if (e->tensor->dtype == SafetensorsDType::F16) st = at::kHalf;
        if (e->tensor->dtype == SafetensorsDType::BF16) st = at::kBFloat16;
        // A read-only view of the mapping; the caller only ever copies out of it.
        return at::from_blob(const_cast<std::uint8_t*>(e->file->data(*e->tensor)), e->tensor->shape,
                             at::TensorOptions().dtype(st));
    }
    bool is_gguf() const override { return false; }
    const std::string& file_of(const std::string& name) const override { return model_->find(name)->file->path(); }

private:
    std::string dir_;
    std::unique_ptr<SafetensorsModel> model_;
};

class GgufSource : public TensorSource {
public:
    explicit GgufSource(const GgufFile& g) : g_(g) {}
    const std::string& path() const override { return g_.path(); }
    std::vector<std::string> names() const override {
        std::vector<std::string> n;
        for (const auto& t : g_.tensors()) n.push_back(t.name);
        return n;
    }
    bool has(const std::string& name) const override { return g_.find_tensor(name) != nullptr; }
    std::vector<std::int64_t> shape(const std::string& name) const override {
        const auto& d = g_.find_tensor(name)->dims;
        return std::vector<std::int64_t>(d.rbegin(), d.rend());
    }
    at::Tensor read(const std::string& name) const override {
        const GgufTensorInfo* info = g_.find_tensor(name);
        // Float types are read where they lie, like safetensors': copying a bf16 matrix
        // into a bf16 weight is then one pass, not a widening into a fresh fp32 buffer
        // and a narrowing out of it (the same values: bf16 and fp16 widen exactly).
        if (info->type == GgmlType::F32 || info->type == GgmlType::F16 || info->type == GgmlType::BF16) {
            const at::ScalarType st = info->type == GgmlType::F32   ? at::kFloat
                                      : info->type == GgmlType::F16 ? at::kHalf
                                                                    : at::kBFloat16;
            return at::from_blob(const_cast<std::uint8_t*>(g_.tensor_data(*info)), shape(name), at::TensorOptions().dtype(st));
        }
        at::Tensor t = at::empty({info->numel()}, at::kFloat);
        g_.dequantize(*info, t.data_ptr<float>());
        return t.view(shape(name));
    }
    bool is_gguf() const override { return true; }
    const GgufTensorInfo* gguf_info(const std::string& name) const override { return g_.find_tensor(name); }
    const std::uint8_t* gguf_data(const GgufTensorInfo& info) const override { return g_.tensor_data(info); }

private:
    const GgufFile& g_;
};

// ---------------------------------------------------------------------------
// The one table from checkpoint names to model fields. Per-layer names are relative
// to "model.layers.{i}." (HF) and "blk.{i}." (GGUF).
enum class Field {
    AttnNorm, Q, K, V, QKV, QBias, KBias, VBias, QNorm, KNorm, O, OBias, MlpNorm, Gate, Up, GateUp, Down,
    PostAttnNorm, PostMlpNorm,
};

struct NameRow {
    Field field;
    const char* hf;
    const char* gguf;
};

constexpr NameRow kLayerNames[] = {
    {Field::AttnNorm, "input_layernorm.weight", "attn_norm.weight"},
    {Field::Q, "self_attn.q_proj.weight", "attn_q.weight"},
    {Field::K, "self_attn.k_proj.weight", "attn_k.weight"},
    {Field::V, "self_attn.v_proj.weight", "attn_v.weight"},
    {Field::QKV, "self_attn.qkv_proj.weight", "attn_qkv.weight"},  // Phi-3: rows q | k | v
    {Field::QBias, "self_attn.q_proj.bias", "attn_q.bias"},
    {Field::KBias, "self_attn.k_proj.bias", "attn_k.bias"},
    {Field::VBias, "self_attn.v_proj.bias", "attn_v.bias"},
    {Field::QNorm, "self_attn.q_norm.weight", "attn_q_norm.weight"},
    {Field::KNorm, "self_attn.k_norm.weight", "attn_k_norm.weight"},
    {Field::O, "self_attn.o_proj.weight", "attn_output.weight"},
    {Field::OBias, "self_attn.o_proj.bias", "attn_output.bias"},
    {Field::MlpNorm, "post_attention_layernorm.weight", "ffn_norm.weight"},
    {Field::Gate, "mlp.gate_proj.weight", "ffn_gate.weight"},
    {Field::Up, "mlp.up_proj.weight", "ffn_up.weight"},
    {Field::GateUp, "mlp.gate_up_proj.weight", "ffn_up.weight"},  // Phi-3: rows gate | up (GGUF too)
    {Field::Down, "mlp.down_proj.weight", "ffn_down.weight"},
    {Field::PostAttnNorm, "post_attention_layernorm.weight", "post_attention_norm.weight"},  // Gemma
    {Field::PostMlpNorm, "post_feedforward_layernorm.weight", "post_ffw_norm.weight"},       // Gemma
};
// Gemma's pre-MLP norm: Hugging Face names it pre_feedforward_layernorm (its
// post_attention_layernorm is the norm of the attention output); GGUF keeps ffn_norm.
constexpr const char* kGemmaHfMlpNorm = "pre_feedforward_layernorm.weight";

struct GlobalNames {
    const char* hf;
    const char* gguf;
};
constexpr GlobalNames kEmbedName{"model.embed_tokens.weight", "token_embd.weight"};
constexpr GlobalNames kFinalNormName{"model.norm.weight", "output_norm.weight"};
constexpr GlobalNames kLmHeadName{"lm_head.weight", "output.weight"};
constexpr const char* kGgufRopeFreqs = "rope_freqs.weight";
constexpr const char* kGgufRopeShort = "rope_factors_short.weight";  // Phi-3 LongRoPE, [R/2] fp32
constexpr const char* kGgufRopeLong = "rope_factors_long.weight";

// Whether a field exists for this config, and its torch shape.
bool field_present(const ModelConfig& c, Field f) {
    switch (f) {
        case Field::QBias: case Field::KBias: case Field::VBias: return c.qkv_bias;
        case Field::QNorm: case Field::KNorm: return c.qk_norm;
        case Field::OBias: return c.o_bias;
        case Field::Q: case Field::K: case Field::V: return !c.fused_qkv;
        case Field::QKV: return c.fused_qkv;
        case Field::Gate: case Field::Up: return !c.fused_gate_up;
        case Field::GateUp: return c.fused_gate_up;
        case Field::PostAttnNorm: case Field::PostMlpNorm: return c.gemma_norms;
        default: return true;
    }
}

std::vector<std::int64_t> field_shape(const ModelConfig& c, Field f) {
    switch (f) {
        case Field::AttnNorm: case Field::MlpNorm: case Field::PostAttnNorm: case Field::PostMlpNorm: return {c.hidden_size};
        case Field::Q: return {c.q_size(), c.hidden_size};
        case Field::K: case Field::V: return {c.kv_size(), c.hidden_size};
        case Field::QKV: return {c.q_size() + 2 * c.kv_size(), c.hidden_size};
        case Field::QBias: return {c.q_size()};
        case Field::KBias: case Field::VBias: return {c.kv_size()};
        case Field::QNorm: case Field::KNorm: return {c.head_dim};
        case Field::O: return {c.hidden_size, c.q_size()};
        case Field::OBias: return {c.hidden_size};
        case Field::Gate: case Field::Up: return {c.intermediate_size, c.hidden_size};
        case Field::GateUp: return {2 * c.intermediate_size, c.hidden_size};
        case Field::Down: return {c.hidden_size, c.intermediate_size};
    }
    return {};
}

std::string shape_str(const std::vector<std::int64_t>& s) {
    std::string r = "[";
    for (std::size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
    return r + "]";
}

// The format 4-bit keeps a GGUF tensor of `type` in, as its own blocks; NF4 where it
// re-quantizes instead.
QuantFormat kept_format_on(GgmlType type, std::int64_t cols, bool cpu) {
    switch (type) {
        case GgmlType::Q4_0: return QuantFormat::Q4_0;
        case GgmlType::Q4_1: return QuantFormat::Q4_1;
        case GgmlType::Q4_K: return cpu && cols % 256 == 0 ? QuantFormat::Q4_K : QuantFormat::NF4;
        case GgmlType::Q6_K: return cpu && cols % 256 == 0 ? QuantFormat::Q6_K : QuantFormat::NF4;
        case GgmlType::Q5_K: return cpu && cols % 256 == 0 ? QuantFormat::Q5_K : QuantFormat::NF4;
        case GgmlType::Q8_0: case GgmlType::Q5_0: return cpu ? QuantFormat::Q8_0 : QuantFormat::NF4;
        default: return QuantFormat::NF4;
    }
}

class Loader {
public:
    Loader(const TensorSource& src, const ModelConfig& config, const LoadOptions& options)
        : src_(src), c_(config), opts_(tensor_options(options.device, options.dtype)), quant_(options.quant),
          progress_(options.progress) {
        for (const auto& n : src_.names()) unused_.insert(n);
        // llama.cpp permutes q/k rows of llama-architecture models only.
        unpermute_ = src_.is_gguf() && c_.arch == Arch::Llama;
        total_ = static_cast<int>(unused_.size());
    }

    ModelWeights load() {
        ModelWeights w;
        // Everything is checked before any big allocation: names and shapes first.
        check_all();
        check_finite();
        // A tied head that keeps the file's blocks: on the CPU the lookup decodes rows
        // from them too, and no dense copy is made (the built-in model: 57 MB of bf16
        // and the fp32 decode of 28 M values at load).
        std::vector<std::shared_ptr<const QuantMatrix>> kept_head;
        if (c_.tie_word_embeddings && quant_ != WeightQuant::None)
            kept_head = kept_blocks({{global(kEmbedName), c_.vocab_size, 0}}, c_.hidden_size, false);
        if (!kept_head.empty() && opts_.device().is_cpu()) {
            w.embed_quant = kept_head[0];  // one part: one format
            unused_.erase(global(kEmbedName));
            if (progress_) progress_(++done_, total_);
        } else {
            w.embed = take(global(kEmbedName), {c_.vocab_size, c_.hidden_size});
        }
        w.final_norm = norm(global(kFinalNormName), c_.hidden_size);
        if (c_.tie_word_embeddings) {
            w.lm_head.weight = w.embed;
            unused_.erase(global(kLmHeadName));  // some tied checkpoints store a duplicate
            if (quant_ != WeightQuant::None) {
                // The embedding stays dense for the lookup (unless kept as blocks above);
                // the head multiplies by a 4-bit copy.
                if (!kept_head.empty()) w.lm_head.quant = kept_head[0];
                if (!w.lm_head.quant && c_.hidden_size % 32 == 0)
                    w.lm_head.quant = prepared(quantize_nf4(w.embed));
                if (w.lm_head.quant) w.lm_head.weight = at::Tensor();
            }
        } else {
            fill_linear(w.lm_head, {{global(kLmHeadName), c_.vocab_size, 0}}, c_.hidden_size);
        }
        if (src_.is_gguf() && src_.has(kGgufRopeFreqs)) {
            w.rope_freq_divisors = src_.read(kGgufRopeFreqs).to(at::kFloat).contiguous().clone();
            unused_.erase(kGgufRopeFreqs);
        }
        for (std::int64_t i = 0; i < c_.num_layers; ++i) w.layers.push_back(load_layer(i));
        return w;
    }

private:
    std::string global(const GlobalNames& g) const { return src_.is_gguf() ? g.gguf : g.hf; }
    std::string layer_name(std::int64_t i, Field f) const {
        if (f == Field::MlpNorm && c_.gemma_norms && !src_.is_gguf())
            return "model.layers." + std::to_string(i) + "." + kGemmaHfMlpNorm;
        for (const auto& r : kLayerNames) {
            if (r.field == f)
                return src_.is_gguf() ? "blk." + std::to_string(i) + "." + r.gguf
                                      : "model.layers." + std::to_string(i) + "." + r.hf;
        }
        return {};
    }

    void expect(const std::string& name, const std::vector<std::int64_t>& shape) const {
        if (!src_.has(name))
            throw Error(ErrorCode::Format, src_.path() + ": missing tensor '" + name + "' (expected " + shape_str(shape) + ")");
        const auto got = src_.shape(name);
        if (got != shape)
            throw Error(ErrorCode::Format, src_.path() + ": tensor '" + name + "' has shape " + shape_str(got) +
                                               " but the config implies " + shape_str(shape));
    }

    void check_all() {
        std::set<std::string> expected;
        auto want = [&](const std::string& n, const std::vector<std::int64_t>& s) {
            expect(n, s);
            expected.insert(n);
        };
        want(global(kEmbedName), {c_.vocab_size, c_.hidden_size});
        want(global(kFinalNormName), {c_.hidden_size});
        if (!c_.tie_word_embeddings) want(global(kLmHeadName), {c_.vocab_size, c_.hidden_size});
        else if (src_.has(global(kLmHeadName))) want(global(kLmHeadName), {c_.vocab_size, c_.hidden_size});
        if (src_.is_gguf() && src_.has(kGgufRopeFreqs)) want(kGgufRopeFreqs, {c_.rope_dim() / 2});
        for (const char* n : {kGgufRopeShort, kGgufRopeLong})  // read into the config by load_weights
            if (src_.is_gguf() && src_.has(n)) want(n, {c_.rope_dim() / 2});
        for (std::int64_t i = 0; i < c_.num_layers; ++i) {
            for (const auto& r : kLayerNames) {
                if (field_present(c_, r.field)) want(layer_name(i, r.field), field_shape(c_, r.field));
            }
        }
        for (const auto& n : unused_) {
            if (expected.count(n)) continue;
            // Buffers older transformers saved; recomputed from the config.
            if (n.find("rotary_emb.inv_freq") != std::string::npos) continue;
            throw Error(ErrorCode::Format, src_.path() + ": unexpected tensor '" + n + "' (not part of a " +
                                               to_string(c_.arch) + " model with this config)");
        }
    }

    // NaN/Inf where one value spoils every answer: a norm weight, a bias, the scales of a
    // quantised block (each multiplies 32 or 256 weights). Dense matrices are not
    // scanned (their cost is the whole file); a NaN there still shows up as non-finite
    // logits at run time. Cost: see scan_nonfinite_ms in the load tests.
    void check_finite() const {
        for (const std::string& name : src_.names()) {
            const GgufTensorInfo* info = src_.gguf_info(name);
            const bool quantised = info && info->type != GgmlType::F32 && info->type != GgmlType::F16 &&
                                   info->type != GgmlType::BF16;
            const bool small = name.find("norm") != std::string::npos || ends_with(name, ".bias") ||
                               name == kGgufRopeFreqs;
            std::int64_t bad = 0;
            const char* what = "values";
            if (quantised) {
                bad = ggml_count_nonfinite_scales(info->type, src_.gguf_data(*info), info->numel());
                what = "block scales";
            } else if (small) {
                bad = info ? ggml_count_nonfinite_scales(info->type, src_.gguf_data(*info), info->numel())
                           : (~at::isfinite(src_.read(name))).sum().item<std::int64_t>();
            }
            if (bad > 0)
                throw Error(ErrorCode::Format, src_.file_of(name) + ": tensor '" + name + "': " + std::to_string(bad) +
                                                   " non-finite " + what + " (NaN/Inf)");
        }
    }

    static bool ends_with(const std::string& s, const char* suffix) {
        const std::size_t n = std::strlen(suffix);
        return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
    }

    // Copies a checkpoint tensor into `dst` (already in working dtype/device),
    // undoing the GGUF q/k permutation when `permute_heads` > 0.
    void copy_into(at::Tensor dst, const std::string& name, std::int64_t permute_heads = 0) {
        at::Tensor src = src_.read(name);
        if (permute_heads > 0 && unpermute_) {
            // llama.cpp stored each head's rows as [D/2, 2] (interleaved pairs);
            // transformers' rotate_half wants [2, D/2] (two halves). Swap back.
            const auto shape = src.sizes().vec();
            const std::int64_t rows = src.size(0);
            const at::Tensor m = src.reshape({rows, -1});  // [rows, in] (bias: in = 1)
            src = m.view({permute_heads, rows / permute_heads / 2, 2, m.size(1)}).transpose(1, 2).reshape(shape);
        }
        dst.copy_(src);
        unused_.erase(name);
        if (progress_) progress_(++done_, total_);
    }

    at::Tensor take(const std::string& name, const std::vector<std::int64_t>& shape) {
        at::Tensor t = at::empty(shape, opts_);
        copy_into(t, name);
        return t;
    }

    // One checkpoint tensor of a (possibly fused) linear weight.
    struct Part {
        std::string name;
        std::int64_t rows = 0;
        std::int64_t permute_heads = 0;  // > 0: q/k rows to un-permute (llama GGUF)
    };

    // The weight of `lin`: `parts` stacked row-wise, each [rows, cols]. Dense in the
    // working dtype, or 4-bit when asked: GGUF Q4_0/Q4_1 blocks kept (WeightQuant::Q4,
    // every part of one such type), otherwise NF4 from the values read. A width that is
    // not whole 32-element groups stays dense.
    void fill_linear(Linear& lin, const std::vector<Part>& parts, std::int64_t cols) {
        if (quant_ != WeightQuant::None) {
            auto kept = kept_blocks(parts, cols, true);
            if (kept.size() == 1) lin.quant = std::move(kept[0]);
            else lin.quant_parts = std::move(kept);
            if (lin.quantized()) return;
        }
        std::int64_t rows = 0;
        for (const auto& p : parts) rows += p.rows;
        const bool to_nf4 = quant_ != WeightQuant::None && cols % 32 == 0;
        // NF4 is made from fp32 values, not from a rounded working copy.
        at::Tensor dense = at::empty({rows, cols}, to_nf4 ? at::TensorOptions().dtype(at::kFloat) : opts_);
        std::int64_t r = 0;
        for (const auto& p : parts) {
            copy_into(dense.narrow(0, r, p.rows), p.name, p.permute_heads);
            r += p.rows;
        }
        if (to_nf4) lin.quant = prepared(quantize_nf4(dense));
        else lin.weight = dense;
    }

    // A 4-bit matrix in the layout its kernel reads (the int8 one for half activations
    // on CPUs with VNNI; kev/quant.h), or moved to CUDA memory for the CUDA kernels.
    std::shared_ptr<const QuantMatrix> prepared(QuantMatrix q) const {
        if (opts_.device().is_cuda()) return std::make_shared<const QuantMatrix>(quant_to_cuda(std::move(q)));
        return std::make_shared<const QuantMatrix>(prepare_quant(std::move(q), opts_.dtype().toScalarType()));
    }

    // The format GGUF blocks of `type` are kept in (Q5_0 as Q8_0-format byte codes, the
    // same values), or NF4 where Kev keeps no such blocks here (K-quants, Q8_0 and Q5_0
    // on CUDA, where Kev has no kernel for them; K-quant rows not whole super-blocks).
    QuantFormat kept_format(GgmlType type, std::int64_t cols) const {
        return kept_format_on(type, cols, !opts_.device().is_cuda());
    }

    // GGUF Q4_0/Q4_1/Q4_K/Q5_K/Q6_K/Q8_0 blocks of `parts` taken over as they are (Q5_0 exactly,
    // as byte codes): one matrix per run of parts kept in the same format (a fused q | k |
    // v of Q4_K and Q6_K parts is two), or none when the mode or the file does not allow it
    // (a part Kev keeps no blocks of here; kept_format). `count` marks the tensors read.
    std::vector<std::shared_ptr<const QuantMatrix>> kept_blocks(const std::vector<Part>& parts, std::int64_t cols,
                                                                bool count) {
        if (quant_ != WeightQuant::Q4 || cols % 32 != 0) return {};
        std::vector<const GgufTensorInfo*> infos;
        std::vector<QuantFormat> formats;
        for (const auto& p : parts) {
            const GgufTensorInfo* info = src_.gguf_info(p.name);
            const QuantFormat f = info ? kept_format(info->type, cols) : QuantFormat::NF4;
            if (f == QuantFormat::NF4) return {};
            formats.push_back(f);
            infos.push_back(info);
        }
        std::vector<std::shared_ptr<const QuantMatrix>> out;
        std::vector<QuantMatrix> run;  // parts of one format, to be stacked
        for (std::size_t k = 0; k < parts.size(); ++k) {
            const Part& p = parts[k];
            std::vector<std::int64_t> order;
            if (p.permute_heads > 0 && unpermute_) {
                // The same row shuffle copy_into applies to dense rows, as an index list.
                const at::Tensor idx = at::arange(p.rows, at::kLong)
                                           .view({p.permute_heads, p.rows / p.permute_heads / 2, 2})
                                           .transpose(1, 2)
                                           .reshape({p.rows})
                                           .contiguous();
                order.assign(idx.data_ptr<std::int64_t>(), idx.data_ptr<std::int64_t>() + p.rows);
            }
            run.push_back(infos[k]->type == GgmlType::Q5_0
                              ? quant_from_ggml_q5_0(src_.gguf_data(*infos[k]), infos[k]->nbytes, p.rows, cols, order)
                              : quant_from_ggml(formats[k], src_.gguf_data(*infos[k]), infos[k]->nbytes, p.rows, cols, order));
            if (count) {
                unused_.erase(p.name);
                if (progress_) progress_(++done_, total_);
            }
            if (k + 1 == parts.size() || formats[k + 1] != formats[k]) {
                out.push_back(prepared(run.size() == 1 ? std::move(run[0]) : concat_rows(run)));
                run.clear();
            }
        }
        return out;
    }

    // A norm weight [n]. Gemma's are used as 1 + w in fp32: kept that way, as fp32 1 + w
    // (GGUF files hold 1 + w already: llama.cpp's converter adds the one).
    at::Tensor norm(const std::string& name, std::int64_t n) {
        at::Tensor t = take(name, {n});
        if (!c_.gemma_norms) return t;
        t = t.to(at::kFloat);
        return (src_.is_gguf() ? t : t + 1.0).contiguous();
    }

    LayerWeights load_layer(std::int64_t i) {
        LayerWeights l;
        const std::int64_t qs = c_.q_size(), kvs = c_.kv_size(), hid = c_.hidden_size, inter = c_.intermediate_size;
        l.attn_norm = norm(layer_name(i, Field::AttnNorm), hid);
        l.mlp_norm = norm(layer_name(i, Field::MlpNorm), hid);
        if (c_.gemma_norms) {
            l.post_attn_norm = norm(layer_name(i, Field::PostAttnNorm), hid);
            l.post_mlp_norm = norm(layer_name(i, Field::PostMlpNorm), hid);
        }
        if (c_.fused_qkv)  // Phi-3 stores them fused already (never permuted)
            fill_linear(l.qkv, {{layer_name(i, Field::QKV), qs + 2 * kvs, 0}}, hid);
        else
            fill_linear(l.qkv,  // rows q | k | v
                        {{layer_name(i, Field::Q), qs, c_.num_heads},
                         {layer_name(i, Field::K), kvs, c_.num_kv_heads},
                         {layer_name(i, Field::V), kvs, 0}},
                        hid);
        if (c_.qkv_bias) {
            // Biases are per output row, so they need the same un-permutation as the rows.
            l.qkv.bias = at::empty({qs + 2 * kvs}, opts_);
            copy_into(l.qkv.bias.narrow(0, 0, qs), layer_name(i, Field::QBias), c_.num_heads);
            copy_into(l.qkv.bias.narrow(0, qs, kvs), layer_name(i, Field::KBias), c_.num_kv_heads);
            copy_into(l.qkv.bias.narrow(0, qs + kvs, kvs), layer_name(i, Field::VBias));
        }
        if (c_.qk_norm) {
            l.q_norm = norm(layer_name(i, Field::QNorm), c_.head_dim);
            l.k_norm = norm(layer_name(i, Field::KNorm), c_.head_dim);
        }
        fill_linear(l.o, {{layer_name(i, Field::O), hid, 0}}, qs);
        if (c_.o_bias) l.o.bias = take(layer_name(i, Field::OBias), {hid});
        if (c_.fused_gate_up)
            fill_linear(l.gate_up, {{layer_name(i, Field::GateUp), 2 * inter, 0}}, hid);
        else
            fill_linear(l.gate_up, {{layer_name(i, Field::Gate), inter, 0}, {layer_name(i, Field::Up), inter, 0}},
                        hid);  // rows gate | up
        fill_linear(l.down, {{layer_name(i, Field::Down), hid, 0}}, inter);
        return l;
    }

    const TensorSource& src_;
    const ModelConfig& c_;
    at::TensorOptions opts_;
    WeightQuant quant_ = WeightQuant::None;
    std::function<void(int, int)> progress_;
    std::set<std::string> unused_;
    bool unpermute_ = false;
    int done_ = 0;
    int total_ = 0;
};

bool is_gguf_path(const std::string& path) {
    const fs::path p(path);
    return p.extension() == ".gguf";
}

// Phi-3 GGUF (llama.cpp's converter): LongRoPE as two tensors of per-frequency factors,
// the original context length and the attention factor in the metadata.
void read_gguf_longrope(const GgufSource& src, const GgufFile& g, ModelConfig& c) {
    const bool has_short = src.has(kGgufRopeShort), has_long = src.has(kGgufRopeLong);
    if (!has_short && !has_long) return;
    const std::string& path = g.path();
    if (!has_short || !has_long)
        throw Error(ErrorCode::Format, path + ": " + kGgufRopeShort + " and " + kGgufRopeLong + " come together; the file has one");
    if (c.arch != Arch::Phi3)
        throw Error(ErrorCode::Unsupported, path + ": LongRoPE factors are supported for phi3 only, not " + c.gguf_arch);
    auto factors = [&](const char* name) {
        const std::vector<std::int64_t> want{c.rope_dim() / 2};
        if (src.shape(name) != want)
            throw Error(ErrorCode::Format, path + ": tensor '" + name + "' has shape " + shape_str(src.shape(name)) +
                                               " but the rotary size implies " + shape_str(want));
        const at::Tensor t = src.read(name).to(at::kFloat).contiguous();
        return std::vector<double>(t.data_ptr<float>(), t.data_ptr<float>() + t.numel());
    };
    RopeScaling& r = c.rope_scaling;
    r.kind = RopeScalingKind::LongRope;
    r.short_factor = factors(kGgufRopeShort);
    r.long_factor = factors(kGgufRopeLong);
    r.original_max_positions = g.get_int(c.gguf_arch + ".rope.scaling.original_context_length").value_or(c.max_positions);
    const double factor = static_cast<double>(c.max_positions) / static_cast<double>(r.original_max_positions);
    r.attention_factor = g.get_float(c.gguf_arch + ".rope.scaling.attn_factor")
                             .value_or(longrope_default_attention_factor(factor, r.original_max_positions));
    validate(c);
}

}  // namespace

std::int64_t kept_embedding_bytes(const std::string& path) {
    if (fs::is_directory(path)) return 0;
    const auto gguf = GgufFile::open(path);
    const GgufTensorInfo* t = gguf->find_tensor(kEmbedName.gguf);
    if (!t || t->dims.size() != 2 || t->dims[0] % 32 != 0) return 0;
    const std::int64_t n = t->numel();
    // QuantMatrix::bytes() of what quant_from_ggml makes: codes, fp16 scales (and mins),
    // the K-quants' sub-block scales; Q5_0 is kept as Q8_0's byte codes.
    switch (kept_format_on(t->type, t->dims[0], true)) {
        case QuantFormat::Q4_0: return n / 2 + n / 32 * 2;
        case QuantFormat::Q4_1: return n / 2 + n / 32 * 4;
        case QuantFormat::Q4_K: return n / 2 + n / 256 * 4 + n / 32 * 2;
        case QuantFormat::Q5_K: return n + n / 256 * 4 + n / 32 * 2;
        case QuantFormat::Q6_K: return n + n / 256 * 2 + n / 16;
        case QuantFormat::Q8_0: return n + n / 32 * 2;
        case QuantFormat::NF4: return 0;
    }
    return 0;
}

LoadedWeights load_weights(const std::string& path, const LoadOptions& options) {
    std::error_code ec;
    // A folder is refused only when it has no safetensors (SafetensorsModel::open);
    // many Hugging Face folders hold both formats.
    if (!fs::is_directory(path, ec)) refuse_pickle_checkpoint(path);
    LoadedWeights out;
    try {
        if (fs::is_directory(path, ec)) {
            out.config = load_hf_config(path);
            SafetensorsSource src(path);
            out.weights = Loader(src, out.config, options).load();
        } else if (is_gguf_path(path)) {
            auto g = GgufFile::open(path);
            out.config = config_from_gguf(*g);
            GgufSource src(*g);
            read_gguf_longrope(src, *g, out.config);
            out.weights = Loader(src, out.config, options).load();
        } else if (fs::exists(path, ec)) {
            throw Error(ErrorCode::Unsupported,
                        path + ": not a model folder or a .gguf file (a .safetensors file needs its folder with config.json)");
        } else {
            throw Error(ErrorCode::Io, path + ": no such file or folder");
        }
    } catch (const c10::Error& e) {
        // Allocation failures of the working copy arrive as c10 errors.
        const std::string what = e.what_without_backtrace();
        if (what.find("alloc") != std::string::npos || what.find("memory") != std::string::npos)
            throw Error(ErrorCode::OutOfMemory, path + ": not enough memory for the weights: " + what);
        throw Error(ErrorCode::Format, path + ": " + what);
    }
    return out;
}

}  // namespace kev
