// UTF-8 helpers shared by the tokenizers: validation, lossy decoding that can stop at an
// incomplete character (streaming), NFC, and GPT-2's byte <-> printable-character table.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace kev::tok {

bool is_valid_utf8(std::string_view s);

// Appends `in` to `out` as valid UTF-8, replacing each maximal invalid subpart with U+FFFD
// (the rule Rust's from_utf8_lossy and Python's errors="replace" follow). When `final` is
// false, a trailing sequence that is an incomplete but so-far valid character is not
// consumed; the return value is the number of bytes of `in` consumed.
std::size_t utf8_lossy_append(std::string_view in, std::string& out, bool final);

void append_utf8(std::uint32_t cp, std::string& out);
// Decodes the code point at s[i] (valid UTF-8 assumed); advances i.
std::uint32_t next_code_point(std::string_view s, std::size_t& i);

enum class NormalForm { NFC, NFD, NFKC, NFKD };
// Normalizes valid UTF-8. NFC calls utf8proc only on the stretches around characters
// that can change or combine; other text (nearly all of it) is copied as is.
std::string normalize(std::string_view s, NormalForm form);

// GPT-2's byte-level alphabet: every byte has a printable stand-in character
// (0x20 ' ' -> U+0120 'Ġ'), so BPE vocabularies can be written as text.
const std::array<std::string, 256>& byte_to_unicode();
// The byte a stand-in character encodes, or -1.
int unicode_to_byte(std::uint32_t cp);

// Unicode White_Space, as Rust's char::is_whitespace.
bool is_whitespace(std::uint32_t cp);
// Letters, marks-free alphanumerics and '_' (word characters for single_word tokens).
bool is_word_char(std::uint32_t cp);

}  // namespace kev::tok
