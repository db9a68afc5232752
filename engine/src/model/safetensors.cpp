#include "kev/safetensors.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "kev/error.h"
#include "text_file.h"

namespace kev {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// The header is JSON text; a real one is at most a few MB. The bound keeps a hostile
// length from making the parser walk gigabytes.
constexpr std::uint64_t kMaxHeaderBytes = 100ull << 20;

[[noreturn]] void format_error(const std::string& path, const std::string& what) {
    throw Error(ErrorCode::Format, path + ": " + what);
}

bool parse_dtype(const std::string& s, SafetensorsDType* out) {
    if (s == "F32") *out = SafetensorsDType::F32;
    else if (s == "F16") *out = SafetensorsDType::F16;
    else if (s == "BF16") *out = SafetensorsDType::BF16;
    else return false;
    return true;
}

}  // namespace

const char* to_string(SafetensorsDType dtype) {
    switch (dtype) {
        case SafetensorsDType::F32: return "F32";
        case SafetensorsDType::F16: return "F16";
        case SafetensorsDType::BF16: return "BF16";
    }
    return "?";
}

std::size_t element_size(SafetensorsDType dtype) { return dtype == SafetensorsDType::F32 ? 4 : 2; }

std::int64_t SafetensorsTensor::numel() const {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
}

std::unique_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
    std::unique_ptr<SafetensorsFile> st(new SafetensorsFile());
    st->file_ = std::make_unique<MappedFile>(path);
    const MappedFile& f = *st->file_;
    if (f.size() < 8) format_error(path, "file of " + std::to_string(f.size()) + " bytes is too short for a safetensors header");
    std::uint64_t header_len = 0;
    for (int i = 7; i >= 0; --i) header_len = header_len << 8 | f.data()[i];
    if (!f.contains(8, header_len))
        format_error(path, "header length " + std::to_string(header_len) + " runs past the end of the file (" +
                               std::to_string(f.size()) + " bytes)");
    if (header_len > kMaxHeaderBytes) format_error(path, "header length " + std::to_string(header_len) + " is implausibly large");
    const std::uint64_t data_begin = 8 + header_len;
    const std::uint64_t data_size = f.size() - data_begin;

    json header;
    try {
        header = json::parse(reinterpret_cast<const char*>(f.data()) + 8,
                             reinterpret_cast<const char*>(f.data()) + data_begin);
    } catch (const json::exception& e) {
        format_error(path, std::string("header is not valid JSON: ") + e.what());
    }
    if (!header.is_object()) format_error(path, "header is not a JSON object");

    // Intervals [begin, end) in the data region, to reject overlapping tensors.
    std::vector<std::pair<std::uint64_t, std::uint64_t>> spans;
    for (auto it = header.begin(); it != header.end(); ++it) {
        const std::string& name = it.key();
        if (name == "__metadata__") continue;
        const json& v = it.value();
        const std::string where = "tensor '" + name + "'";
        if (!v.is_object()) format_error(path, where + ": entry is not an object");
        auto dt = v.find("dtype");
        auto sh = v.find("shape");
        auto off = v.find("data_offsets");
        if (dt == v.end() || !dt->is_string()) format_error(path, where + ": missing or non-string 'dtype'");
        if (sh == v.end() || !sh->is_array()) format_error(path, where + ": missing or non-array 'shape'");
        if (off == v.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
            !(*off)[1].is_number_unsigned())
            format_error(path, where + ": 'data_offsets' is not a pair of non-negative integers");

        SafetensorsTensor t;
        t.name = name;
        const std::string dtype = dt->get<std::string>();
        if (!parse_dtype(dtype, &t.dtype))
            throw Error(ErrorCode::Unsupported,
                        path + ": " + where + " has dtype " + dtype + " (Kev reads F32, F16 and BF16)");
        // numel computed with an overflow bound: every dim <= data size.
        std::uint64_t numel = 1;
        for (const auto& d : *sh) {
            if (!d.is_number_unsigned()) format_error(path, where + ": shape holds a non-integer or negative value");
            const std::uint64_t dim = d.get<std::uint64_t>();
            if (dim > data_size + 1 || (dim != 0 && numel > data_size / dim + 1))
                format_error(path, where + ": shape is larger than the file");
            numel *= dim;
            t.shape.push_back(static_cast<std::int64_t>(dim));
        }
        const std::uint64_t begin = (*off)[0].get<std::uint64_t>();
        const std::uint64_t end = (*off)[1].get<std::uint64_t>();
        if (end < begin) format_error(path, where + ": data_offsets end before they begin");
        if (end > data_size)
            format_error(path, where + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                                   ") run past the data region (" + std::to_string(data_size) + " bytes)");
        const std::uint64_t expect = numel * element_size(t.dtype);
        if (end - begin != expect)
            format_error(path, where + ": data_offsets span " + std::to_string(end - begin) + " bytes but " + dtype +
                                   " shape needs " + std::to_string(expect));
        t.offset = data_begin + begin;
        t.nbytes = end - begin;
        if (t.nbytes > 0) spans.emplace_back(begin, end);
        st->tensors_.emplace(name, std::move(t));
    }
    std::sort(spans.begin(), spans.end());
    for (std::size_t i = 1; i < spans.size(); ++i) {
        if (spans[i].first < spans[i - 1].second) format_error(path, "two tensors' data_offsets overlap");
    }
    return st;
}

const SafetensorsTensor* SafetensorsFile::find(const std::string& name) const {
    auto it = tensors_.find(name);
    return it == tensors_.end() ? nullptr : &it->second;
}

std::unique_ptr<SafetensorsModel> SafetensorsModel::open(const std::string& dir) {
    auto model = std::make_unique<SafetensorsModel>();
    const fs::path single = fs::path(dir) / "model.safetensors";
    const fs::path index = fs::path(dir) / "model.safetensors.index.json";
    std::error_code ec;
    if (fs::exists(single, ec)) {
        model->files_.push_back(SafetensorsFile::open(single.string()));
        for (const auto& [name, t] : model->files_.back()->tensors())
            model->entries_[name] = Entry{model->files_.back().get(), &t};
        return model;
    }
    if (!fs::exists(index, ec)) {
        refuse_pickle_checkpoint(dir);
        throw Error(ErrorCode::Io, dir + ": no model.safetensors or model.safetensors.index.json");
    }
    const std::string text = read_text_file(index.string());
    json j;
    try {
        j = json::parse(text);
    } catch (const json::exception& e) {
        format_error(index.string(), std::string("invalid JSON: ") + e.what());
    }
    auto wm = j.find("weight_map");
    if (!j.is_object() || wm == j.end() || !wm->is_object()) format_error(index.string(), "missing object 'weight_map'");
    std::map<std::string, const SafetensorsFile*> shards;
    for (auto it = wm->begin(); it != wm->end(); ++it) {
        if (!it.value().is_string()) format_error(index.string(), "weight_map entry '" + it.key() + "' is not a string");
        const std::string shard = it.value().get<std::string>();
        // Shards live next to the index: no path components allowed.
        if (shard.empty() || shard.find('/') != std::string::npos || shard == "." || shard == "..")
            format_error(index.string(), "shard name '" + shard + "' is not a plain file name");
        auto s = shards.find(shard);
        if (s == shards.end()) {
            model->files_.push_back(SafetensorsFile::open((fs::path(dir) / shard).string()));
            s = shards.emplace(shard, model->files_.back().get()).first;
        }
        const SafetensorsTensor* t = s->second->find(it.key());
        if (!t) format_error(s->second->path(), "index says it holds tensor '" + it.key() + "' but it does not");
        model->entries_[it.key()] = Entry{s->second, t};
    }
    return model;
}

const SafetensorsModel::Entry* SafetensorsModel::find(const std::string& name) const {
    auto it = entries_.find(name);
    return it == entries_.end() ? nullptr : &it->second;
}

void refuse_pickle_checkpoint(const std::string& path) {
    const std::string why =
        ": pickle checkpoints are refused because loading a pickle can run arbitrary code. "
        "Convert it to safetensors once, in a Python you trust: "
        "`from transformers import AutoModelForCausalLM; "
        "AutoModelForCausalLM.from_pretrained(DIR).save_pretrained(OUT, safe_serialization=True)` "
        "(or safetensors.torch.save_file(torch.load(FILE, weights_only=True), 'model.safetensors')).";
    auto pickle_ext = [](const fs::path& p) {
        const std::string ext = p.extension().string();
        return ext == ".bin" || ext == ".pt" || ext == ".pth" || ext == ".ckpt" || ext == ".pkl";
    };
    std::error_code ec;
    const fs::path p(path);
    if (fs::is_directory(p, ec)) {
        // Only a folder's model checkpoint counts (not e.g. training_args.bin); callers
        // ask only when the folder has no safetensors weights.
        for (const auto& e : fs::directory_iterator(p, ec)) {
            const std::string name = e.path().filename().string();
            const bool model_file = name.rfind("pytorch_model", 0) == 0 || e.path().extension() == ".pt" ||
                                    e.path().extension() == ".pth" || e.path().extension() == ".ckpt";
            if (e.is_regular_file(ec) && model_file && pickle_ext(e.path()))
                throw Error(ErrorCode::Refused, e.path().string() + why);
        }
    } else {
        // By content first: a pickle renamed to .gguf is still a pickle. A safetensors
        // header length can begin with a pickle's two bytes, so those files are not asked.
        unsigned char magic[4] = {};
        std::size_t n = 0;
        if (fs::is_regular_file(p, ec) && p.extension() != ".safetensors") {
            // Only a regular file is opened: a FIFO would block the open.
            if (std::FILE* f = std::fopen(path.c_str(), "rb")) {
                n = std::fread(magic, 1, sizeof magic, f);
                std::fclose(f);
            }
        }
        const bool zip = n == 4 && magic[0] == 'P' && magic[1] == 'K' && magic[2] == 3 && magic[3] == 4;
        const bool pickle = n == 4 && magic[0] == 0x80 && magic[1] >= 2 && magic[1] <= 5;  // PROTO opcode
        if (zip || pickle)
            throw Error(ErrorCode::Refused,
                        path + ": a PyTorch pickle checkpoint (" +
                            (zip ? std::string("torch.save zip archive") : "pickle protocol " + std::to_string(magic[1])) +
                            "); Kev never loads pickles, which can run arbitrary code (convert to safetensors once, in a "
                            "Python you trust: safetensors.torch.save_file(torch.load(FILE, weights_only=True), "
                            "'model.safetensors'), or give a .gguf)");
        if (pickle_ext(p)) throw Error(ErrorCode::Refused, path + why);
    }
}

}  // namespace kev
