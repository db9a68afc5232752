// SHA-256 (FIPS 180-4) of bytes, files and model folders: what a reproducibility bundle
// (kev/bundle.h) records to say which weights and which adapter a run used.
//
// Written here rather than taken from a library: it is ~150 lines, the engine links no
// crypto library, and it only identifies files (nothing here is a security boundary).
// Files are read in 1 MiB chunks, never whole: a model is hashed in constant memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kev {

// The running hash. update() any number of times, then hex_digest() once.
class Sha256 {
public:
    Sha256();
    void update(const void* data, std::size_t size);
    // The 64 lowercase hex digits of the hash of everything fed. The object is spent
    // afterwards (a second call gives the same digest; update() after it is undefined).
    std::string hex_digest();

private:
    void compress(const unsigned char* block);

    std::uint32_t state_[8];
    unsigned char buffer_[64];
    std::size_t buffered_ = 0;
    std::uint64_t total_bytes_ = 0;
    bool finished_ = false;
    std::string digest_;
};

// The hash of `size` bytes, as 64 lowercase hex digits.
std::string sha256_hex(const void* data, std::size_t size);
inline std::string sha256_hex(const std::string& bytes) { return sha256_hex(bytes.data(), bytes.size()); }

// The hash of a regular file's contents (symbolic links followed). Throws kev::Error(Io)
// naming the path when it is missing, not a regular file (a folder, a FIFO, a device:
// refused before any open) or cannot be read.
std::string sha256_file(const std::string& path);

// What identifies a model (or adapter) on disk.
struct ModelDigest {
    std::string sha256;       // see model_hash
    std::uint64_t bytes = 0;  // the file's size; for a folder, the sum over the files hashed
    int files = 0;            // 1 for a file; for a folder, how many files were hashed
};

// A model's identity: for a file (.gguf), its SHA-256. For a folder (Hugging Face layout:
// config.json, *.safetensors, tokenizer files; also a PEFT adapter folder) the SHA-256 of
// the concatenation, sorted by file name (bytewise), of
//
//     name + '\0' + sha256_file(name) as 64 lowercase hex digits + '\n'
//
// over the regular files directly in the folder (symbolic links to regular files
// followed; subfolders and other kinds of entries skipped). Renaming, adding, removing
// or changing any top-level file changes it. Throws kev::Error(Io) naming the path: no
// such file or folder, not a regular file or folder, an unreadable file, or a folder
// with no regular file in it.
ModelDigest model_digest(const std::string& path);
inline std::string model_hash(const std::string& path) { return model_digest(path).sha256; }

}  // namespace kev
