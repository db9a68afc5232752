// A read-only memory mapping of a whole file. Weights are read straight out of the
// mapping, so loading a model needs no second copy of the file in memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kev {

class MappedFile {
public:
    // Throws kev::Error(Io) naming the path when the file cannot be opened or mapped, or
    // when it is not a regular file (a FIFO, a device, a folder: refused before open()).
    explicit MappedFile(const std::string& path);
    ~MappedFile();
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;

    const std::uint8_t* data() const { return data_; }
    std::size_t size() const { return size_; }
    const std::string& path() const { return path_; }

    // True when [offset, offset + length) lies inside the file (overflow-safe).
    bool contains(std::uint64_t offset, std::uint64_t length) const {
        return offset <= size_ && length <= size_ - offset;
    }

private:
    std::string path_;
    const std::uint8_t* data_ = nullptr;
    std::size_t size_ = 0;
};

}  // namespace kev
