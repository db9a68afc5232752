#include "kev/detokenizer.h"

#include "tokenizer/unicode.h"

namespace kev {

std::string token_display_text(std::string_view bytes) {
    std::string out;
    out.reserve(bytes.size());
    std::size_t i = 0;
    while (i < bytes.size()) {
        const auto lead = static_cast<unsigned char>(bytes[i]);
        const std::size_t len = lead < 0x80 ? 1 : lead >= 0xC2 && lead <= 0xDF ? 2
                              : lead >= 0xE0 && lead <= 0xEF ? 3 : lead >= 0xF0 && lead <= 0xF4 ? 4 : 0;
        if (len > 0 && i + len <= bytes.size() && tok::is_valid_utf8(bytes.substr(i, len))) {
            out.append(bytes.substr(i, len));
            i += len;
            continue;
        }
        static const char kHex[] = "0123456789ABCDEF";
        out += "<0x";
        out += kHex[lead >> 4];
        out += kHex[lead & 0xF];
        out += '>';
        ++i;
    }
    return out;
}

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, std::vector<std::string> stop_strings,
                             SpecialText special)
    : tokenizer_(&tokenizer), special_(special) {
    for (std::string& s : stop_strings)
        if (!s.empty()) stops_.push_back(std::move(s));
}

std::string StreamDecoder::push(TokenId id) {
    if (stopped_) return std::string();
    if (tokenizer_->is_special(id) && special_ == SpecialText::Hide) return std::string();
    std::string bytes = tokenizer_->token_bytes(id);
    if (!started_ && !bytes.empty()) {
        started_ = true;
        bytes = tokenizer_->first_token_text(std::move(bytes));
    }
    pending_bytes_ += bytes;
    return release(false);
}

std::string StreamDecoder::flush() {
    if (stopped_) return std::string();
    return release(true);
}

std::string StreamDecoder::release(bool final) {
    std::string text;
    const std::size_t used = tok::utf8_lossy_append(pending_bytes_, text, final);
    pending_bytes_.erase(0, used);
    held_ += text;

    // A complete stop string anywhere in the held text: emit what precedes it and stop.
    std::size_t first = std::string::npos;
    for (const std::string& stop : stops_) {
        const std::size_t at = held_.find(stop);
        if (at < first) {
            first = at;
            matched_stop_ = stop;
        }
    }
    std::string out;
    if (first != std::string::npos) {
        out = held_.substr(0, first);
        stopped_ = true;
        held_.clear();
        pending_bytes_.clear();
    } else if (final) {
        out.swap(held_);
    } else {
        // Keep the longest tail that is a proper prefix of some stop string. Stop strings
        // start on a character boundary, so the cut does too.
        std::size_t keep = 0;
        for (const std::string& stop : stops_) {
            const std::size_t max_k = std::min(stop.size() - 1, held_.size());
            for (std::size_t k = max_k; k > keep; --k) {
                if (held_.compare(held_.size() - k, k, stop, 0, k) == 0) {
                    keep = k;
                    break;
                }
            }
        }
        out = held_.substr(0, held_.size() - keep);
        held_.erase(0, held_.size() - keep);
    }
    emitted_ += out;
    return out;
}

}  // namespace kev
