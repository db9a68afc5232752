// safetensors reader: an 8-byte little-endian header length, a JSON header
// {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}, then the
// data region. The file is memory-mapped; nothing is copied until a tensor is loaded.
// Every header field is checked against the file before use: header length within
// the file, valid JSON, known dtype, shape x dtype size == end - begin, offsets
// inside the data region. A malformed file throws kev::Error(Format) naming the file
// and the tensor.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kev/mapped_file.h"

namespace kev {

enum class SafetensorsDType { F32, F16, BF16 };

const char* to_string(SafetensorsDType dtype);
std::size_t element_size(SafetensorsDType dtype);

struct SafetensorsTensor {
    std::string name;
    SafetensorsDType dtype = SafetensorsDType::F32;
    std::vector<std::int64_t> shape;  // PyTorch order
    std::uint64_t offset = 0;         // absolute offset in the file (checked)
    std::uint64_t nbytes = 0;
    std::int64_t numel() const;
};

class SafetensorsFile {
public:
    // Throws kev::Error: Io (cannot open/map), Format (malformed), Unsupported (a
    // dtype other than F32/F16/BF16, named with the tensor).
    static std::unique_ptr<SafetensorsFile> open(const std::string& path);

    const std::string& path() const { return file_->path(); }
    const std::map<std::string, SafetensorsTensor>& tensors() const { return tensors_; }
    const SafetensorsTensor* find(const std::string& name) const;
    const std::uint8_t* data(const SafetensorsTensor& t) const { return file_->data() + t.offset; }

private:
    SafetensorsFile() = default;
    std::unique_ptr<MappedFile> file_;
    std::map<std::string, SafetensorsTensor> tensors_;
};

// A model's tensors spread over one or more safetensors files: model.safetensors or
// model.safetensors.index.json ({"weight_map": {tensor: shard file}}).
class SafetensorsModel {
public:
    // `dir` is a Hugging Face model folder. Throws Io when neither file exists,
    // Format when the index names a shard that lacks the tensor, or is malformed.
    static std::unique_ptr<SafetensorsModel> open(const std::string& dir);

    struct Entry {
        const SafetensorsFile* file;
        const SafetensorsTensor* tensor;
    };
    const std::map<std::string, Entry>& tensors() const { return entries_; }
    const Entry* find(const std::string& name) const;

private:
    std::vector<std::unique_ptr<SafetensorsFile>> files_;
    std::map<std::string, Entry> entries_;
};

// Throws kev::Error(Refused) when `path` is a pickle checkpoint file (a regular file
// whose first bytes are a torch.save zip archive or a pickle PROTO opcode, whatever its
// name, or one named *.bin, *.pt, *.pth, *.ckpt, *.pkl) or a folder holding one
// (pytorch_model*.bin, *.pt, ...):
// unpickling can run arbitrary code, so Kev does not do it. The message says how to
// convert. Returns normally otherwise. Loaders call it for folders only when they
// have no safetensors weights.
void refuse_pickle_checkpoint(const std::string& path);

}  // namespace kev
