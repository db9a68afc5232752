#include "kev/file_hash.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <memory>
#include <sys/stat.h>
#include <system_error>
#include <unistd.h>
#include <utility>
#include <vector>

#include "kev/error.h"
#include "kev/text_file.h"

namespace kev {

namespace {

namespace fs = std::filesystem;

// FIPS 180-4, 4.2.2: the first 32 bits of the fractional parts of the cube roots of the
// first 64 primes.
constexpr std::uint32_t kRound[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

constexpr std::size_t kChunkBytes = std::size_t(1) << 20;  // one read() of a file

inline std::uint32_t rotr(std::uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

inline std::uint32_t load_be32(const unsigned char* p) {
    return (std::uint32_t(p[0]) << 24) | (std::uint32_t(p[1]) << 16) | (std::uint32_t(p[2]) << 8) | std::uint32_t(p[3]);
}

std::string errno_text(int err) { return std::strerror(err); }

}  // namespace

Sha256::Sha256()
    : state_{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19},
      buffer_{} {}

// One 64-byte block into the state (FIPS 180-4, 6.2.2). The message schedule is kept
// as a 16-word ring: w[t] for t >= 16 needs only the last 16 words.
void Sha256::compress(const unsigned char* block) {
    std::uint32_t w[16];
    for (int t = 0; t < 16; ++t) w[t] = load_be32(block + 4 * t);
    std::uint32_t a = state_[0], b = state_[1], c = state_[2], d = state_[3];
    std::uint32_t e = state_[4], f = state_[5], g = state_[6], h = state_[7];
    for (int t = 0; t < 64; ++t) {
        if (t >= 16) {
            const std::uint32_t w15 = w[(t - 15) & 15], w2 = w[(t - 2) & 15];
            const std::uint32_t s0 = rotr(w15, 7) ^ rotr(w15, 18) ^ (w15 >> 3);
            const std::uint32_t s1 = rotr(w2, 17) ^ rotr(w2, 19) ^ (w2 >> 10);
            w[t & 15] += s0 + w[(t - 7) & 15] + s1;
        }
        const std::uint32_t t1 = h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + kRound[t] + w[t & 15];
        const std::uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        h = g;
        g = f;
        f = e;
        e = d + t1;
        d = c;
        c = b;
        b = a;
        a = t1 + t2;
    }
    state_[0] += a, state_[1] += b, state_[2] += c, state_[3] += d;
    state_[4] += e, state_[5] += f, state_[6] += g, state_[7] += h;
}

void Sha256::update(const void* data, std::size_t size) {
    const auto* p = static_cast<const unsigned char*>(data);
    total_bytes_ += size;
    if (buffered_ > 0) {
        const std::size_t take = std::min(size, sizeof buffer_ - buffered_);
        std::memcpy(buffer_ + buffered_, p, take);
        buffered_ += take;
        p += take;
        size -= take;
        if (buffered_ < sizeof buffer_) return;
        compress(buffer_);
        buffered_ = 0;
    }
    for (; size >= 64; p += 64, size -= 64) compress(p);  // whole blocks straight from the input
    if (size > 0) std::memcpy(buffer_, p, size);
    buffered_ = size;
}

std::string Sha256::hex_digest() {
    if (finished_) return digest_;
    // Padding (5.1.1): a 1 bit, zeros up to 56 mod 64 bytes, the length in bits (64-bit
    // big-endian).
    const std::uint64_t bits = total_bytes_ * 8;
    unsigned char pad[72] = {0x80};
    const std::size_t pad_len = (buffered_ < 56 ? 56 : 120) - buffered_;
    for (int i = 0; i < 8; ++i) pad[pad_len + i] = static_cast<unsigned char>(bits >> (56 - 8 * i));
    update(pad, pad_len + 8);
    static const char kHex[] = "0123456789abcdef";
    digest_.resize(64);
    for (int i = 0; i < 8; ++i)
        for (int k = 0; k < 8; ++k) digest_[static_cast<std::size_t>(8 * i + k)] = kHex[(state_[i] >> (28 - 4 * k)) & 0xF];
    finished_ = true;
    return digest_;
}

std::string sha256_hex(const void* data, std::size_t size) {
    Sha256 h;
    h.update(data, size);
    return h.hex_digest();
}

std::string sha256_file(const std::string& path) {
    (void)require_regular_file(path, "file to hash");
    // O_NONBLOCK: should the path become a FIFO between the stat() and the open(), the
    // open does not wait for a writer; the fstat() below refuses it.
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        const int err = errno;
        throw Error(ErrorCode::Io, path + ": cannot open: " + errno_text(err));
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        ::close(fd);
        throw Error(ErrorCode::Io, path + ": not a regular file, so it cannot be hashed");
    }
    const std::unique_ptr<unsigned char[]> chunk(new unsigned char[kChunkBytes]);
    Sha256 h;
    for (;;) {
        const ssize_t n = ::read(fd, chunk.get(), kChunkBytes);
        if (n < 0) {
            if (errno == EINTR) continue;
            const int err = errno;
            ::close(fd);
            throw Error(ErrorCode::Io, path + ": read error: " + errno_text(err));
        }
        if (n == 0) break;
        h.update(chunk.get(), static_cast<std::size_t>(n));
    }
    ::close(fd);
    return h.hex_digest();
}

ModelDigest model_digest(const std::string& path) {
    std::error_code ec;
    const fs::file_status status = fs::status(path, ec);
    if (ec || !fs::exists(status)) throw Error(ErrorCode::Io, path + ": no such file or folder");
    ModelDigest digest;
    if (!fs::is_directory(status)) {
        digest.bytes = require_regular_file(path, "model file");
        digest.sha256 = sha256_file(path);
        digest.files = 1;
        return digest;
    }
    std::vector<std::pair<std::string, fs::path>> files;  // (name, path)
    fs::directory_iterator it(path, ec);
    if (ec) throw Error(ErrorCode::Io, path + ": cannot list the folder: " + ec.message());
    for (; it != fs::directory_iterator(); it.increment(ec)) {
        if (ec) break;
        std::error_code kind_ec;
        if (!it->is_regular_file(kind_ec) || kind_ec) continue;  // follows symbolic links
        files.emplace_back(it->path().filename().string(), it->path());
    }
    if (ec) throw Error(ErrorCode::Io, path + ": cannot list the folder: " + ec.message());
    if (files.empty()) throw Error(ErrorCode::Io, path + ": the folder holds no file to hash");
    std::sort(files.begin(), files.end());  // std::string's < is bytewise
    Sha256 h;
    for (const auto& [name, file] : files) {
        digest.bytes += require_regular_file(file.string(), "model file");
        const std::string line = name + '\0' + sha256_file(file.string()) + '\n';
        h.update(line.data(), line.size());
        ++digest.files;
    }
    digest.sha256 = h.hex_digest();
    return digest;
}

}  // namespace kev
