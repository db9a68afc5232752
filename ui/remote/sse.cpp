#include "sse.h"

namespace kevremote {

std::vector<SseEvent> SseParser::feed(const QByteArray& bytes) {
    std::vector<SseEvent> out;
    if (overflow_) return out;
    buffer_ += bytes;
    qsizetype start = 0;
    if (skip_lf_ && !buffer_.isEmpty()) {
        if (buffer_[0] == '\n') start = 1;
        skip_lf_ = false;
    }
    for (;;) {
        qsizetype end = start;
        while (end < buffer_.size() && buffer_[end] != '\n' && buffer_[end] != '\r') ++end;
        if (end == buffer_.size()) break;
        qsizetype next = end + 1;
        if (buffer_[end] == '\r') {
            if (next == buffer_.size()) skip_lf_ = true;  // "\r\n" may be split across two reads
            else if (buffer_[next] == '\n') ++next;
        }
        line(buffer_.mid(start, end - start), out);
        start = next;
    }
    buffer_.remove(0, start);
    if (pending() > kMaxEventBytes) {
        overflow_ = true;
        buffer_.clear();
        current_ = SseEvent{};
    }
    return out;
}

void SseParser::line(const QByteArray& text, std::vector<SseEvent>& out) {
    if (text.isEmpty()) {
        if (has_data_) out.push_back(std::move(current_));
        current_ = SseEvent{};
        has_data_ = false;
        return;
    }
    if (text[0] == ':') return;
    const qsizetype colon = text.indexOf(':');
    const QByteArray field = colon < 0 ? text : text.left(colon);
    QByteArray value = colon < 0 ? QByteArray() : text.mid(colon + 1);
    if (value.startsWith(' ')) value.remove(0, 1);
    if (field == "data") {
        if (has_data_) current_.data += '\n';
        current_.data += value;
        has_data_ = true;
    } else if (field == "event") {
        current_.event = value;
    }  // "id" and "retry" mean nothing for a completion stream
}

}  // namespace kevremote
