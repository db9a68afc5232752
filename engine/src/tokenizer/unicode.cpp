#include "tokenizer/unicode.h"

#include <algorithm>
#include <cstdlib>
#include <memory>

#include <utf8proc.h>

#include "kev/error.h"

namespace kev::tok {

namespace {

// Length of the well-formed sequence starting with lead byte b and the allowed range of
// its second byte (Unicode table 3-7); 0 for a byte that cannot start a character.
struct Lead {
    int len;
    unsigned char lo, hi;
};

Lead lead_info(unsigned char b) {
    if (b < 0x80) return {1, 0, 0};
    if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
    if (b == 0xE0) return {3, 0xA0, 0xBF};
    if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) return {3, 0x80, 0xBF};
    if (b == 0xED) return {3, 0x80, 0x9F};
    if (b == 0xF0) return {4, 0x90, 0xBF};
    if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
    if (b == 0xF4) return {4, 0x80, 0x8F};
    return {0, 0, 0};
}

const char kReplacement[] = "\xEF\xBF\xBD";

}  // namespace

bool is_valid_utf8(std::string_view s) {
    const auto* p = reinterpret_cast<const unsigned char*>(s.data());
    const std::size_t n = s.size();
    std::size_t i = 0;
    while (i < n) {
        if (p[i] < 0x80) { ++i; continue; }
        const Lead l = lead_info(p[i]);
        if (l.len == 0 || i + l.len > n) return false;
        if (p[i + 1] < l.lo || p[i + 1] > l.hi) return false;
        for (int k = 2; k < l.len; ++k)
            if ((p[i + k] & 0xC0) != 0x80) return false;
        i += l.len;
    }
    return true;
}

std::size_t utf8_lossy_append(std::string_view in, std::string& out, bool final) {
    const auto* p = reinterpret_cast<const unsigned char*>(in.data());
    const std::size_t n = in.size();
    std::size_t i = 0;
    while (i < n) {
        const std::size_t run = i;
        while (i < n && p[i] < 0x80) ++i;
        if (i > run) out.append(in.data() + run, i - run);
        if (i >= n) break;
        const Lead l = lead_info(p[i]);
        if (l.len == 0) {
            out += kReplacement;
            ++i;
            continue;
        }
        // Count how many bytes of the sequence are well-formed.
        int good = 1;
        while (good < l.len && i + good < n) {
            const unsigned char c = p[i + good];
            const bool ok = good == 1 ? (c >= l.lo && c <= l.hi) : ((c & 0xC0) == 0x80);
            if (!ok) break;
            ++good;
        }
        if (good == l.len) {
            out.append(in.data() + i, l.len);
            i += l.len;
        } else if (i + good == n && !final) {
            return i;  // an incomplete character at the end: wait for more bytes
        } else {
            out += kReplacement;  // the maximal subpart becomes one U+FFFD
            i += good;
        }
    }
    return n;
}

void append_utf8(std::uint32_t cp, std::string& out) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

std::uint32_t next_code_point(std::string_view s, std::size_t& i) {
    const auto* p = reinterpret_cast<const unsigned char*>(s.data());
    const unsigned char b = p[i];
    if (b < 0x80) { ++i; return b; }
    if (b < 0xE0) { const std::uint32_t cp = ((b & 0x1Fu) << 6) | (p[i + 1] & 0x3Fu); i += 2; return cp; }
    if (b < 0xF0) {
        const std::uint32_t cp = ((b & 0x0Fu) << 12) | ((p[i + 1] & 0x3Fu) << 6) | (p[i + 2] & 0x3Fu);
        i += 3;
        return cp;
    }
    const std::uint32_t cp = ((b & 0x07u) << 18) | ((p[i + 1] & 0x3Fu) << 12) |
                             ((p[i + 2] & 0x3Fu) << 6) | (p[i + 3] & 0x3Fu);
    i += 4;
    return cp;
}

namespace {

std::string utf8proc_normalize(std::string_view s, NormalForm form) {
    int options = UTF8PROC_STABLE;
    switch (form) {
        case NormalForm::NFC: options |= UTF8PROC_COMPOSE; break;
        case NormalForm::NFD: options |= UTF8PROC_DECOMPOSE; break;
        case NormalForm::NFKC: options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
        case NormalForm::NFKD: options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
    }
    utf8proc_uint8_t* result = nullptr;
    const utf8proc_ssize_t len =
        utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                     static_cast<utf8proc_ssize_t>(s.size()), &result,
                     static_cast<utf8proc_option_t>(options));
    if (len < 0) throw Error(ErrorCode::InvalidArgument, std::string("normalizer: ") + utf8proc_errmsg(len));
    std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(result, &std::free);
    return std::string(reinterpret_cast<const char*>(result), static_cast<std::size_t>(len));
}

// True when NFC leaves the character alone whatever surrounds it and nothing before it
// can combine with it: combining class 0, no canonical decomposition, and not the second
// half of any composition (utf8proc marks those with comb_index >= 0x8000; Hangul vowel
// and trailing jamo compose algorithmically and are excluded by range). Normalization
// never crosses such a character, so only the stretches around the others need utf8proc.
bool nfc_boundary(std::uint32_t cp) {
    if (cp < 0x300) return true;
    if (cp >= 0x1100 && cp <= 0x11FF) return false;
    const utf8proc_property_t* p = utf8proc_get_property(static_cast<utf8proc_int32_t>(cp));
    if (p->combining_class != 0) return false;
    if (p->comb_index != UINT16_MAX && p->comb_index >= 0x8000) return false;
    if (p->decomp_seqindex != UINT16_MAX && p->decomp_type == 0) return false;
    return true;
}

std::string nfc(std::string_view s) {
    std::string out;
    std::size_t copied = 0;     // s[0, copied) is in `out`
    std::size_t last_safe = 0;  // start of the latest boundary character
    std::size_t i = 0;
    bool changed_any = false;
    while (i < s.size()) {
        if (static_cast<unsigned char>(s[i]) < 0x80) {
            last_safe = i++;
            continue;
        }
        const std::size_t at = i;
        if (nfc_boundary(next_code_point(s, i))) {
            last_safe = at;
            continue;
        }
        // Normalize from the boundary before this character to the next boundary.
        const std::size_t from = std::max(last_safe, copied);
        std::size_t to = i;
        while (to < s.size()) {
            std::size_t k = to;
            if (nfc_boundary(next_code_point(s, k))) break;
            to = k;
        }
        if (!changed_any) out.reserve(s.size() + 16);
        changed_any = true;
        out.append(s.data() + copied, from - copied);
        out += utf8proc_normalize(s.substr(from, to - from), NormalForm::NFC);
        copied = last_safe = to;
        i = to;
    }
    if (!changed_any) return std::string(s);
    out.append(s.data() + copied, s.size() - copied);
    return out;
}

}  // namespace

std::string normalize(std::string_view s, NormalForm form) {
    if (form == NormalForm::NFC) return nfc(s);
    // ASCII is unchanged by every normal form.
    bool ascii = true;
    for (unsigned char c : s) ascii = ascii && c < 0x80;
    if (ascii) return std::string(s);
    return utf8proc_normalize(s, form);
}

const std::array<std::string, 256>& byte_to_unicode() {
    static const std::array<std::string, 256> table = [] {
        std::array<std::string, 256> t;
        int extra = 0;
        for (int b = 0; b < 256; ++b) {
            const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
            std::uint32_t cp = printable ? static_cast<std::uint32_t>(b) : 256u + extra++;
            append_utf8(cp, t[b]);
        }
        return t;
    }();
    return table;
}

int unicode_to_byte(std::uint32_t cp) {
    static const std::array<int, 512> table = [] {
        std::array<int, 512> t{};
        t.fill(-1);
        const auto& b2u = byte_to_unicode();
        for (int b = 0; b < 256; ++b) {
            std::size_t i = 0;
            t[next_code_point(b2u[b], i)] = b;
        }
        return t;
    }();
    return cp < 512 ? table[cp] : -1;
}

bool is_whitespace(std::uint32_t cp) {
    switch (cp) {
        case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x20: case 0x85: case 0xA0:
        case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
            return true;
        default:
            return cp >= 0x2000 && cp <= 0x200A;
    }
}

bool is_word_char(std::uint32_t cp) {
    if (cp == '_') return true;
    const utf8proc_category_t c = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
    return (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO) ||
           (c >= UTF8PROC_CATEGORY_ND && c <= UTF8PROC_CATEGORY_NO);
}

}  // namespace kev::tok
