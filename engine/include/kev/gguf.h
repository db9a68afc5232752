// GGUF container reader (versions 2 and 3): metadata key/values, tensor infos and
// the tensor data region, all read from a memory mapping. Every count, length and
// offset in the header is checked against the file size before it is used; a
// malformed file throws kev::Error(Format) naming the file and the key or tensor.
//
// Tensor dims are kept in ggml order (dims[0] is the fastest-varying axis), which is
// the reverse of the PyTorch/Hugging Face shape: a [out, in] weight has dims {in, out}.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kev/mapped_file.h"

namespace kev {

// ggml tensor types Kev can read (numbers as in ggml.h).
enum class GgmlType : std::uint32_t {
    F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8,
    Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, BF16 = 30,
};

const char* to_string(GgmlType type);
// Elements per block and bytes per block of a type; false for a type Kev cannot read.
bool ggml_block_layout(GgmlType type, std::int64_t* block_elems, std::int64_t* block_bytes);

// Decodes n consecutive elements (n a multiple of the block size) of `type` starting at
// src into fp32. src must hold the bytes those blocks occupy. Throws Unsupported for a
// type it cannot decode.
void ggml_dequantize(GgmlType type, const std::uint8_t* src, float* dst, std::int64_t n);

// How many non-finite (NaN/Inf) values `n` elements of `type` at src hold in the places
// a corrupt file makes every decoded value wrong: the fp16 scales (d, and m/dmin) of
// each block of a quantised type, every value of F32/F16/BF16. Cheap: a quantised
// tensor reads one or two 16-bit words per block.
std::int64_t ggml_count_nonfinite_scales(GgmlType type, const std::uint8_t* src, std::int64_t n);

enum class GgufValueType : std::uint32_t {
    U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, Bool = 7,
    String = 8, Array = 9, U64 = 10, I64 = 11, F64 = 12,
};

struct GgufValue {
    GgufValueType type = GgufValueType::U8;
    GgufValueType elem_type = GgufValueType::U8;  // for arrays
    // Exactly one of these is meaningful, chosen by `type` (and `elem_type` for arrays).
    std::int64_t i = 0;        // integers and bool
    double f = 0.0;            // floats
    std::string s;             // string
    std::vector<std::int64_t> ints;       // integer / bool arrays
    std::vector<double> floats;           // float arrays
    std::vector<std::string> strings;     // string arrays
};

struct GgufTensorInfo {
    std::string name;
    std::vector<std::int64_t> dims;  // ggml order, dims[0] fastest
    GgmlType type = GgmlType::F32;
    std::uint64_t offset = 0;        // absolute offset in the file (checked)
    std::uint64_t nbytes = 0;        // bytes the tensor occupies (checked)
    std::int64_t numel() const;
};

class GgufFile {
public:
    // Opens and validates the whole header. Throws kev::Error (Io or Format).
    static std::unique_ptr<GgufFile> open(const std::string& path);

    const std::string& path() const { return file_->path(); }
    std::uint32_t version() const { return version_; }
    std::size_t alignment() const { return alignment_; }

    bool has(const std::string& key) const { return kv_.count(key) != 0; }
    const GgufValue* find(const std::string& key) const;
    const std::map<std::string, GgufValue>& metadata() const { return kv_; }

    // Typed accessors: empty when the key is absent; Error(Format) naming the key when
    // it is present with an incompatible type. Integers of any width convert to int64,
    // and integers convert to double.
    std::optional<std::int64_t> get_int(const std::string& key) const;
    std::optional<double> get_float(const std::string& key) const;
    std::optional<bool> get_bool(const std::string& key) const;
    std::optional<std::string> get_string(const std::string& key) const;
    // An array of strings is not copied (a vocabulary's tokens and merges): the
    // pointer is null when the key is absent and valid while this object lives.
    const std::vector<std::string>* get_strings(const std::string& key) const;
    std::optional<std::vector<std::int64_t>> get_ints(const std::string& key) const;
    std::optional<std::vector<double>> get_floats(const std::string& key) const;

    const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
    const GgufTensorInfo* find_tensor(const std::string& name) const;
    // Pointer to the tensor's bytes inside the mapping (valid while this object lives).
    const std::uint8_t* tensor_data(const GgufTensorInfo& info) const {
        return file_->data() + info.offset;
    }
    // Decodes a whole tensor to fp32 (numel floats written to dst).
    void dequantize(const GgufTensorInfo& info, float* dst) const;

private:
    GgufFile() = default;
    std::unique_ptr<MappedFile> file_;
    std::uint32_t version_ = 0;
    std::size_t alignment_ = 32;
    std::map<std::string, GgufValue> kv_;
    std::vector<GgufTensorInfo> tensors_;
    std::map<std::string, std::size_t> tensor_index_;
};

}  // namespace kev
