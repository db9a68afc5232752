#include "cli_input.h"

#include <sys/stat.h>

#include <cerrno>
#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "kev/error.h"
#include "kev/safetensors.h"
#include "kev/text_file.h"

namespace kevcli {

namespace {

// strtoll and friends skip leading blanks and take a sign; an option value must be the
// number itself.
bool starts_like_a_number(const std::string& v) {
    return !v.empty() && (std::isdigit(static_cast<unsigned char>(v[0])) || v[0] == '-' || v[0] == '+' || v[0] == '.');
}

std::string kind_of(mode_t mode) {
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISSOCK(mode)) return "a socket";
    return "not a regular file";
}

[[noreturn]] void not_regular(const std::string& path, mode_t mode) {
    if (S_ISDIR(mode)) throw kev::Error(kev::ErrorCode::Io, path + ": is a directory, not a file");
    throw kev::Error(kev::ErrorCode::Io, path + ": not a regular file (" + kind_of(mode) + ")");
}


}  // namespace

std::int64_t parse_integer(const std::string& flag, const std::string& value, std::int64_t min, std::int64_t max) {
    const std::string range = " is out of range (" + std::to_string(min) + ".." + std::to_string(max) + ")";
    if (!starts_like_a_number(value)) throw UsageError{flag + " expects a whole number, got '" + value + "'"};
    errno = 0;
    char* end = nullptr;
    const long long v = std::strtoll(value.c_str(), &end, 10);
    if (end == value.c_str() || *end != '\0') throw UsageError{flag + " expects a whole number, got '" + value + "'"};
    if (errno == ERANGE || v < min || v > max) throw UsageError{flag + ": " + value + range};
    return v;
}

std::uint64_t parse_unsigned(const std::string& flag, const std::string& value) {
    // strtoull takes "-1" and wraps it to 2^64-1: a sign is refused before it can.
    if (value.empty() || !std::isdigit(static_cast<unsigned char>(value[0]))) {
        if (!value.empty() && value[0] == '-' && value.size() > 1 && std::isdigit(static_cast<unsigned char>(value[1])))
            throw UsageError{flag + ": " + value + " is out of range (0..18446744073709551615)"};
        throw UsageError{flag + " expects a whole number, got '" + value + "'"};
    }
    errno = 0;
    char* end = nullptr;
    const unsigned long long v = std::strtoull(value.c_str(), &end, 10);
    if (*end != '\0') throw UsageError{flag + " expects a whole number, got '" + value + "'"};
    if (errno == ERANGE) throw UsageError{flag + ": " + value + " is out of range (0..18446744073709551615)"};
    return v;
}

float parse_real(const std::string& flag, const std::string& value) {
    // strtod also reads "nan", "inf" and "infinity": only a finite number is a setting.
    if (!starts_like_a_number(value)) throw UsageError{flag + " expects a number, got '" + value + "'"};
    errno = 0;
    char* end = nullptr;
    const double v = std::strtod(value.c_str(), &end);
    if (end == value.c_str() || *end != '\0') throw UsageError{flag + " expects a number, got '" + value + "'"};
    // ERANGE with a tiny result is underflow to (almost) zero: a number, just small.
    const bool overflow = errno == ERANGE && std::fabs(v) >= 1.0;
    if (!overflow && !std::isfinite(v)) throw UsageError{flag + " expects a finite number, got '" + value + "'"};
    if (overflow || std::fabs(v) > static_cast<double>(FLT_MAX))
        throw UsageError{flag + ": " + value + " is out of range (a setting is at most 3.4e38 in size)"};
    return static_cast<float>(v);
}

std::uint64_t require_regular_file(const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
        const int err = errno;
        if (err == ENOENT) throw kev::Error(kev::ErrorCode::Io, path + ": no such file");
        throw kev::Error(kev::ErrorCode::Io, path + ": cannot read: " + std::strerror(err));
    }
    if (!S_ISREG(st.st_mode)) not_regular(path, st.st_mode);
    return static_cast<std::uint64_t>(st.st_size);
}

std::string read_file_limited(const std::string& path, std::uint64_t max_bytes, const char* what) {
    require_regular_file(path);  // kev-cli's wording for a missing path or a folder
    return kev::read_text_file(path, max_bytes, what);
}

void refuse_unloadable_model_file(const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0 || S_ISDIR(st.st_mode)) return;  // the loader names a missing path
    if (!S_ISREG(st.st_mode)) not_regular(path, st.st_mode);
    kev::refuse_pickle_checkpoint(path);  // by content and by name (engine, as the app does)
}

bool is_valid_utf8(const std::string& text) {
    const auto* p = reinterpret_cast<const unsigned char*>(text.data());
    const auto* end = p + text.size();
    while (p < end) {
        const unsigned char c = *p;
        int extra = 0;
        std::uint32_t cp = 0;
        if (c < 0x80) {
            ++p;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            extra = 1, cp = c & 0x1Fu;
        } else if ((c & 0xF0) == 0xE0) {
            extra = 2, cp = c & 0x0Fu;
        } else if ((c & 0xF8) == 0xF0) {
            extra = 3, cp = c & 0x07u;
        } else {
            return false;
        }
        if (end - p <= extra) return false;
        for (int i = 1; i <= extra; ++i) {
            if ((p[i] & 0xC0) != 0x80) return false;
            cp = (cp << 6) | (p[i] & 0x3Fu);
        }
        static const std::uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
        if (cp < kMin[extra] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
        p += extra + 1;
    }
    return true;
}

std::string dump_json(const nlohmann::json& j, int indent) {
    return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace kevcli
