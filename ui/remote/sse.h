// Server-Sent Events (text/event-stream), the format OpenAI-compatible servers stream
// completions in, parsed incrementally from whatever pieces the socket delivers.
#pragma once

#include <QByteArray>

#include <vector>

namespace kevremote {

struct SseEvent {
    QByteArray event;  // the "event:" field, empty for the default "message"
    QByteArray data;   // the "data:" lines joined by '\n'
};

class SseParser {
public:
    // An event (or a line) longer than this is refused: a server streaming one token a
    // chunk never comes near it, a broken or hostile one would grow the buffer forever.
    static constexpr qsizetype kMaxEventBytes = 8 << 20;

    // Appends `bytes` and returns the events they complete, in order. Lines end with
    // "\n", "\r\n" or "\r"; ":" lines are comments; a blank line ends an event (one
    // without data is dropped). After overflow() nothing more is parsed.
    std::vector<SseEvent> feed(const QByteArray& bytes);
    bool overflowed() const { return overflow_; }
    // Bytes read that belong to no finished event yet (a stream cut here lost them).
    qsizetype pending() const { return buffer_.size() + current_.data.size(); }

private:
    void line(const QByteArray& text, std::vector<SseEvent>& out);

    QByteArray buffer_;  // the unfinished line
    SseEvent current_;
    bool has_data_ = false;
    bool overflow_ = false;
    bool skip_lf_ = false;  // the last read ended in '\r': a '\n' opening the next belongs to it
};

}  // namespace kevremote
