// Helpers shared by the libFuzzer targets: the engine's parsers take paths, libFuzzer
// hands bytes, so each input is written to a file in a private scratch folder first.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace kevfuzz {

// A scratch folder for this process (in /dev/shm when there is one: no disk writes),
// removed at exit.
inline const std::string& scratch_dir() {
    static const std::string dir = [] {
        const char* base = std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : "/tmp";
        std::string templ = std::string(base) + "/kev-fuzz-XXXXXX";
        if (!mkdtemp(templ.data())) std::abort();
        static std::string to_remove = templ;
        std::atexit([] {
            std::error_code ec;
            std::filesystem::remove_all(to_remove, ec);
        });
        return templ;
    }();
    return dir;
}

// Writes the input to `name` in the scratch folder (replacing it) and returns its path.
inline std::string write_file(const std::string& name, const void* data, std::size_t size) {
    const std::string path = scratch_dir() + "/" + name;
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) std::abort();
    const auto* p = static_cast<const char*>(data);
    while (size > 0) {
        const ssize_t n = ::write(fd, p, size);
        if (n <= 0) std::abort();
        p += n;
        size -= static_cast<std::size_t>(n);
    }
    ::close(fd);
    return path;
}

inline std::string write_file(const std::string& name, const std::string& text) {
    return write_file(name, text.data(), text.size());
}

}  // namespace kevfuzz
