#include "kev/text_file.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kev/error.h"

namespace kev {

namespace {

const char* kind_of(mode_t mode) {
    if (S_ISDIR(mode)) return "a folder";
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISSOCK(mode)) return "a socket";
    return "not a plain file";
}

std::string not_regular(const std::string& path, mode_t mode, const char* what) {
    std::string msg = path + ": not a regular file (" + kind_of(mode) + ")";
    if (what && *what) msg += std::string(", so it cannot be read as a ") + what;
    return msg;
}

std::string size_text(std::uint64_t bytes) {
    if (bytes % (std::uint64_t(1) << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
    return std::to_string(bytes) + " bytes";
}

}  // namespace

std::uint64_t require_regular_file(const std::string& path, const char* what) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
        const int err = errno;
        throw Error(ErrorCode::Io, path + ": cannot open: " + std::strerror(err));
    }
    if (!S_ISREG(st.st_mode)) throw Error(ErrorCode::Io, not_regular(path, st.st_mode, what));
    return static_cast<std::uint64_t>(st.st_size);
}

std::string read_text_file(const std::string& path, std::uint64_t max_bytes, const char* what) {
    const std::uint64_t size = require_regular_file(path, nullptr);
    auto too_big = [&](std::uint64_t n) {
        return Error(ErrorCode::Io, path + ": " + std::to_string(n) + " bytes, over the " + size_text(max_bytes) +
                                        " limit for " + (what && *what ? what : "this file"));
    };
    if (size > max_bytes) throw too_big(size);
    // O_NONBLOCK: should the path be swapped for a FIFO between stat() and open(), the
    // open does not wait for a writer; the fstat() below then refuses it.
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        const int err = errno;
        throw Error(ErrorCode::Io, path + ": cannot open: " + std::strerror(err));
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        const mode_t mode = st.st_mode;
        ::close(fd);
        throw Error(ErrorCode::Io, not_regular(path, mode, nullptr));
    }
    std::string out;
    out.reserve(static_cast<std::size_t>(size));
    char buf[1 << 16];
    for (;;) {
        const ssize_t n = ::read(fd, buf, sizeof buf);
        if (n < 0) {
            if (errno == EINTR) continue;
            const int err = errno;
            ::close(fd);
            throw Error(ErrorCode::Io, path + ": read error: " + std::strerror(err));
        }
        if (n == 0) break;
        out.append(buf, static_cast<std::size_t>(n));
        if (out.size() > max_bytes) {  // the file grew after stat()
            ::close(fd);
            throw too_big(out.size());
        }
    }
    ::close(fd);
    return out;
}

}  // namespace kev
