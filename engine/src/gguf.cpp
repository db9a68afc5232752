// GGUF reader. The header is parsed with a cursor that checks every read against
// the end of the mapping, so a truncated or hostile file fails with a message and
// never reads out of bounds or allocates by an unchecked count.
#include "kev/gguf.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "kev/error.h"
#include "half.h"

namespace kev {

namespace {

constexpr std::uint64_t kMaxStringBytes = std::uint64_t(1) << 30;  // sanity bound, 1 GiB
constexpr std::uint32_t kMaxDims = 4;                               // GGML_MAX_DIMS

constexpr std::uint64_t kNoIndex = ~std::uint64_t(0);

class Cursor {
public:
    Cursor(const MappedFile& file) : file_(file) {}

    std::uint64_t pos() const { return pos_; }

    template <typename T>
    T read(const char* what) {
        need(sizeof(T), what);
        T v;
        std::memcpy(&v, file_.data() + pos_, sizeof(T));
        pos_ += sizeof(T);
        return v;
    }

    std::string read_string(const std::string& what) { return read_string(what, kNoIndex); }

    // The string `what[index]` of an array (`what` alone for kNoIndex). The name is
    // spelled only when a message needs it: a vocabulary has ~50-150 thousand strings.
    std::string read_string(const std::string& what, std::uint64_t index) {
        auto name = [&] { return index == kNoIndex ? what : what + "[" + std::to_string(index) + "]"; };
        if (!file_.contains(pos_, 8)) fail("unexpected end of file reading " + name());
        std::uint64_t len = 0;
        std::memcpy(&len, file_.data() + pos_, 8);
        pos_ += 8;
        if (len > kMaxStringBytes) fail(name() + ": string length " + std::to_string(len) + " is absurd");
        if (!file_.contains(pos_, len)) fail("unexpected end of file reading " + name());
        std::string s(reinterpret_cast<const char*>(file_.data() + pos_), static_cast<std::size_t>(len));
        pos_ += len;
        return s;
    }

    // Checks that `count` items of at least `min_bytes` each can still fit in the file
    // before anything is allocated for them.
    void need_items(std::uint64_t count, std::uint64_t min_bytes, const std::string& what) {
        const std::uint64_t left = file_.size() - pos_;
        if (min_bytes != 0 && count > left / min_bytes) {
            fail(what + ": count " + std::to_string(count) + " does not fit in the " +
                 std::to_string(left) + " bytes left in the file");
        }
    }

    [[noreturn]] void fail(const std::string& msg) const {
        throw Error(ErrorCode::Format, file_.path() + ": " + msg + " (at byte " + std::to_string(pos_) + ")");
    }

private:
    void need(std::uint64_t n, const char* what) {
        if (!file_.contains(pos_, n)) fail(std::string("unexpected end of file reading ") + what);
    }

    const MappedFile& file_;
    std::uint64_t pos_ = 0;
};

std::uint64_t scalar_size(GgufValueType t) {
    switch (t) {
        case GgufValueType::U8: case GgufValueType::I8: case GgufValueType::Bool: return 1;
        case GgufValueType::U16: case GgufValueType::I16: return 2;
        case GgufValueType::U32: case GgufValueType::I32: case GgufValueType::F32: return 4;
        case GgufValueType::U64: case GgufValueType::I64: case GgufValueType::F64: return 8;
        case GgufValueType::String: return 8;  // at least the length prefix
        case GgufValueType::Array: return 12;  // at least type + count
    }
    return 0;
}

bool is_int(GgufValueType t) {
    switch (t) {
        case GgufValueType::U8: case GgufValueType::I8: case GgufValueType::U16:
        case GgufValueType::I16: case GgufValueType::U32: case GgufValueType::I32:
        case GgufValueType::U64: case GgufValueType::I64: case GgufValueType::Bool: return true;
        default: return false;
    }
}

bool is_float(GgufValueType t) { return t == GgufValueType::F32 || t == GgufValueType::F64; }

bool valid_type(std::uint32_t t) { return t <= static_cast<std::uint32_t>(GgufValueType::F64); }

// Reads one scalar of integer or float type into value.i / value.f.
void read_scalar(Cursor& c, GgufValueType t, std::int64_t* i, double* f, const std::string& key) {
    const char* k = key.c_str();
    switch (t) {
        case GgufValueType::U8: *i = c.read<std::uint8_t>(k); return;
        case GgufValueType::I8: *i = c.read<std::int8_t>(k); return;
        case GgufValueType::U16: *i = c.read<std::uint16_t>(k); return;
        case GgufValueType::I16: *i = c.read<std::int16_t>(k); return;
        case GgufValueType::U32: *i = c.read<std::uint32_t>(k); return;
        case GgufValueType::I32: *i = c.read<std::int32_t>(k); return;
        case GgufValueType::U64: {
            const auto v = c.read<std::uint64_t>(k);
            if (v > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
                c.fail(key + ": value " + std::to_string(v) + " does not fit in int64");
            *i = static_cast<std::int64_t>(v);
            return;
        }
        case GgufValueType::I64: *i = c.read<std::int64_t>(k); return;
        case GgufValueType::Bool: {
            const auto v = c.read<std::uint8_t>(k);
            if (v > 1) c.fail(key + ": bool value " + std::to_string(v) + " is neither 0 nor 1");
            *i = v;
            return;
        }
        case GgufValueType::F32: *f = c.read<float>(k); return;
        case GgufValueType::F64: *f = c.read<double>(k); return;
        default: c.fail(key + ": not a scalar type");
    }
}

GgufValue read_value(Cursor& c, GgufValueType type, const std::string& key) {
    GgufValue v;
    v.type = type;
    if (type == GgufValueType::String) {
        v.s = c.read_string(key);
    } else if (type == GgufValueType::Array) {
        const auto et = c.read<std::uint32_t>(key.c_str());
        if (!valid_type(et)) c.fail(key + ": unknown array element type " + std::to_string(et));
        v.elem_type = static_cast<GgufValueType>(et);
        if (v.elem_type == GgufValueType::Array) c.fail(key + ": nested arrays are not supported");
        const auto n = c.read<std::uint64_t>(key.c_str());
        c.need_items(n, scalar_size(v.elem_type), key);
        if (v.elem_type == GgufValueType::String) {
            v.strings.reserve(static_cast<std::size_t>(n));
            for (std::uint64_t j = 0; j < n; ++j) v.strings.push_back(c.read_string(key, j));
        } else if (is_float(v.elem_type)) {
            v.floats.resize(static_cast<std::size_t>(n));
            std::int64_t unused = 0;
            for (std::uint64_t j = 0; j < n; ++j) read_scalar(c, v.elem_type, &unused, &v.floats[j], key);
        } else {
            v.ints.resize(static_cast<std::size_t>(n));
            double unused = 0;
            for (std::uint64_t j = 0; j < n; ++j) read_scalar(c, v.elem_type, &v.ints[j], &unused, key);
        }
    } else {
        read_scalar(c, type, &v.i, &v.f, key);
    }
    return v;
}

[[noreturn]] void wrong_type(const std::string& path, const std::string& key, const char* want) {
    throw Error(ErrorCode::Format, path + ": metadata key '" + key + "' is not " + want);
}

}  // namespace

const char* to_string(GgmlType type) {
    switch (type) {
        case GgmlType::F32: return "F32";
        case GgmlType::F16: return "F16";
        case GgmlType::Q4_0: return "Q4_0";
        case GgmlType::Q4_1: return "Q4_1";
        case GgmlType::Q5_0: return "Q5_0";
        case GgmlType::Q5_1: return "Q5_1";
        case GgmlType::Q8_0: return "Q8_0";
        case GgmlType::Q2_K: return "Q2_K";
        case GgmlType::Q3_K: return "Q3_K";
        case GgmlType::Q4_K: return "Q4_K";
        case GgmlType::Q5_K: return "Q5_K";
        case GgmlType::Q6_K: return "Q6_K";
        case GgmlType::BF16: return "BF16";
    }
    return "unknown";
}

bool ggml_block_layout(GgmlType type, std::int64_t* block_elems, std::int64_t* block_bytes) {
    std::int64_t e = 0, b = 0;
    switch (type) {
        case GgmlType::F32: e = 1; b = 4; break;
        case GgmlType::F16: e = 1; b = 2; break;
        case GgmlType::BF16: e = 1; b = 2; break;
        case GgmlType::Q4_0: e = 32; b = 18; break;
        case GgmlType::Q4_1: e = 32; b = 20; break;
        case GgmlType::Q5_0: e = 32; b = 22; break;
        case GgmlType::Q5_1: e = 32; b = 24; break;
        case GgmlType::Q8_0: e = 32; b = 34; break;
        case GgmlType::Q4_K: e = 256; b = 144; break;
        case GgmlType::Q5_K: e = 256; b = 176; break;
        case GgmlType::Q6_K: e = 256; b = 210; break;
        default: return false;
    }
    if (block_elems) *block_elems = e;
    if (block_bytes) *block_bytes = b;
    return true;
}

std::int64_t GgufTensorInfo::numel() const {
    std::int64_t n = 1;
    for (auto d : dims) n *= d;
    return n;
}

std::unique_ptr<GgufFile> GgufFile::open(const std::string& path) {
    std::unique_ptr<GgufFile> g(new GgufFile());
    g->file_ = std::make_unique<MappedFile>(path);
    const MappedFile& f = *g->file_;
    Cursor c(f);

    const auto magic = c.read<std::uint32_t>("magic");
    // A pickle given as a model is named by refuse_pickle_checkpoint before this.
    if (std::memcmp(&magic, "GGUF", 4) != 0) c.fail("not a GGUF file (bad magic)");
    g->version_ = c.read<std::uint32_t>("version");
    if (g->version_ != 2 && g->version_ != 3) {
        c.fail("GGUF version " + std::to_string(g->version_) + " is not supported (2 and 3 are)");
    }
    const auto n_tensors = c.read<std::uint64_t>("tensor count");
    const auto n_kv = c.read<std::uint64_t>("metadata count");
    c.need_items(n_kv, 8 + 4, "metadata count");
    c.need_items(n_tensors, 8 + 4 + 4 + 8, "tensor count");

    for (std::uint64_t k = 0; k < n_kv; ++k) {
        std::string key = c.read_string("metadata key #" + std::to_string(k));
        const auto t = c.read<std::uint32_t>(key.c_str());
        if (!valid_type(t)) c.fail("metadata key '" + key + "': unknown value type " + std::to_string(t));
        GgufValue v = read_value(c, static_cast<GgufValueType>(t), "metadata key '" + key + "'");
        if (g->kv_.count(key)) c.fail("metadata key '" + key + "' appears twice");
        g->kv_.emplace(std::move(key), std::move(v));
    }

    if (auto a = g->get_int("general.alignment")) {
        if (*a <= 0 || *a > 1 << 20 || (*a & (*a - 1)) != 0) {
            c.fail("general.alignment " + std::to_string(*a) + " is not a power of two");
        }
        g->alignment_ = static_cast<std::size_t>(*a);
    }

    struct Pending { GgufTensorInfo info; std::uint64_t rel_offset; };
    std::vector<Pending> pending;
    pending.reserve(static_cast<std::size_t>(n_tensors));
    for (std::uint64_t i = 0; i < n_tensors; ++i) {
        Pending p;
        p.info.name = c.read_string("tensor name #" + std::to_string(i));
        const std::string what = "tensor '" + p.info.name + "'";
        const auto n_dims = c.read<std::uint32_t>(what.c_str());
        if (n_dims == 0 || n_dims > kMaxDims) c.fail(what + ": " + std::to_string(n_dims) + " dimensions");
        std::int64_t numel = 1;
        for (std::uint32_t d = 0; d < n_dims; ++d) {
            const auto dim = c.read<std::uint64_t>(what.c_str());
            if (dim == 0 || dim > (std::uint64_t(1) << 40) ||
                static_cast<std::uint64_t>(numel) > (std::uint64_t(1) << 42) / dim) {
                c.fail(what + ": dimension " + std::to_string(dim) + " is out of range");
            }
            numel *= static_cast<std::int64_t>(dim);
            p.info.dims.push_back(static_cast<std::int64_t>(dim));
        }
        const auto type = c.read<std::uint32_t>(what.c_str());
        p.info.type = static_cast<GgmlType>(type);
        std::int64_t be = 0, bb = 0;
        if (!ggml_block_layout(p.info.type, &be, &bb)) {
            throw Error(ErrorCode::Unsupported, path + ": " + what + " has ggml type " +
                                                    std::to_string(type) + " (" + to_string(p.info.type) +
                                                    "), which Kev cannot read");
        }
        if (p.info.dims[0] % be != 0) {
            c.fail(what + ": row length " + std::to_string(p.info.dims[0]) + " is not a multiple of the " +
                   to_string(p.info.type) + " block size " + std::to_string(be));
        }
        p.info.nbytes = static_cast<std::uint64_t>(numel / be * bb);
        p.rel_offset = c.read<std::uint64_t>(what.c_str());
        if (g->tensor_index_.count(p.info.name)) c.fail(what + " appears twice");
        g->tensor_index_[p.info.name] = pending.size();
        pending.push_back(std::move(p));
    }

    // The data section starts at the next multiple of the alignment after the header.
    const std::uint64_t align = g->alignment_;
    const std::uint64_t data_start = (c.pos() + align - 1) / align * align;
    if (data_start > f.size()) c.fail("the tensor data section starts past the end of the file");
    g->tensors_.reserve(pending.size());
    for (auto& p : pending) {
        if (p.rel_offset % align != 0) {
            c.fail("tensor '" + p.info.name + "': offset " + std::to_string(p.rel_offset) +
                   " is not aligned to " + std::to_string(align));
        }
        if (p.rel_offset > f.size() || !f.contains(data_start + p.rel_offset, p.info.nbytes)) {
            throw Error(ErrorCode::Format,
                        path + ": tensor '" + p.info.name + "' (" + std::to_string(p.info.nbytes) +
                            " bytes at data offset " + std::to_string(p.rel_offset) +
                            ") lies outside the file (" + std::to_string(f.size()) +
                            " bytes); the file is truncated or corrupt");
        }
        p.info.offset = data_start + p.rel_offset;
        g->tensors_.push_back(std::move(p.info));
    }
    // Two tensors sharing bytes would each read the other's values (a retyped tensor
    // reads its neighbours'): refused, as the safetensors reader does.
    std::vector<const GgufTensorInfo*> by_offset;
    by_offset.reserve(g->tensors_.size());
    for (const GgufTensorInfo& t : g->tensors_)
        if (t.nbytes > 0) by_offset.push_back(&t);
    std::sort(by_offset.begin(), by_offset.end(),
              [](const GgufTensorInfo* a, const GgufTensorInfo* b) { return a->offset < b->offset; });
    for (std::size_t i = 1; i < by_offset.size(); ++i) {
        const GgufTensorInfo& a = *by_offset[i - 1];
        const GgufTensorInfo& b = *by_offset[i];
        if (b.offset < a.offset + a.nbytes) {
            throw Error(ErrorCode::Format,
                        path + ": the data of tensors '" + a.name + "' (" + std::to_string(a.nbytes) +
                            " bytes at data offset " + std::to_string(a.offset - data_start) + ") and '" + b.name +
                            "' (at data offset " + std::to_string(b.offset - data_start) +
                            ") overlap; the file is corrupt");
        }
    }
    return g;
}

const GgufValue* GgufFile::find(const std::string& key) const {
    auto it = kv_.find(key);
    return it == kv_.end() ? nullptr : &it->second;
}

std::optional<std::int64_t> GgufFile::get_int(const std::string& key) const {
    const GgufValue* v = find(key);
    if (!v) return std::nullopt;
    if (!is_int(v->type)) wrong_type(path(), key, "an integer");
    return v->i;
}

std::optional<double> GgufFile::get_float(const std::string& key) const {
    const GgufValue* v = find(key);
    if (!v) return std::nullopt;
    if (is_float(v->type)) return v->f;
    if (is_int(v->type)) return static_cast<double>(v->i);
    wrong_type(path(), key, "a number");
}

std::optional<bool> GgufFile::get_bool(const std::string& key) const {
    const GgufValue* v = find(key);
    if (!v) return std::nullopt;
    if (!is_int(v->type)) wrong_type(path(), key, "a bool");
    return v->i != 0;
}

std::optional<std::string> GgufFile::get_string(const std::string& key) const {
    const GgufValue* v = find(key);
    if (!v) return std::nullopt;
    if (v->type != GgufValueType::String) wrong_type(path(), key, "a string");
    return v->s;
}

const std::vector<std::string>* GgufFile::get_strings(const std::string& key) const {
    const GgufValue* v = find(key);
    if (!v) return nullptr;
    if (v->type != GgufValueType::Array || v->elem_type != GgufValueType::String)
        wrong_type(path(), key, "an array of strings");
    return &v->strings;
}

std::optional<std::vector<std::int64_t>> GgufFile::get_ints(const std::string& key) const {
    const GgufValue* v = find(key);
    if (!v) return std::nullopt;
    if (v->type != GgufValueType::Array || !is_int(v->elem_type) || !v->strings.empty())
        wrong_type(path(), key, "an array of integers");
    return v->ints;
}

std::optional<std::vector<double>> GgufFile::get_floats(const std::string& key) const {
    const GgufValue* v = find(key);
    if (!v) return std::nullopt;
    if (v->type != GgufValueType::Array) wrong_type(path(), key, "an array of numbers");
    if (is_float(v->elem_type)) return v->floats;
    if (is_int(v->elem_type)) return std::vector<double>(v->ints.begin(), v->ints.end());
    wrong_type(path(), key, "an array of numbers");
}

const GgufTensorInfo* GgufFile::find_tensor(const std::string& name) const {
    auto it = tensor_index_.find(name);
    return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

void GgufFile::dequantize(const GgufTensorInfo& info, float* dst) const {
    ggml_dequantize(info.type, tensor_data(info), dst, info.numel());
}

}  // namespace kev
