#include "cli_terminal.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>

namespace kevcli {

namespace {

bool is_continuation(unsigned char c) { return (c & 0xC0) == 0x80; }

// Code points in a UTF-8 string.
int columns(const std::string& s) {
    int n = 0;
    for (unsigned char c : s) n += !is_continuation(c);
    return n;
}

// At most `width` code points of `s`, with an ellipsis when cut.
std::string clip(const std::string& s, int width) {
    if (columns(s) <= width) return s;
    std::string out;
    int n = 0;
    for (std::size_t i = 0; i < s.size(); ++i) {
        const unsigned char c = static_cast<unsigned char>(s[i]);
        if (!is_continuation(c) && ++n > width - 1) break;
        out += s[i];
    }
    return out + "\u2026";
}

void terminal_size(int& width, int& height) {
    width = 80;
    height = 24;
    winsize ws{};
    if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 && ws.ws_row > 0) {
        width = ws.ws_col;
        height = ws.ws_row;
    }
}

std::string one_line(const std::string& s) {
    std::string out = s;
    std::replace(out.begin(), out.end(), '\n', ' ');
    return out;
}

}  // namespace

std::string printable(const std::string& text) {
    std::string out;
    out.reserve(text.size());
    for (std::size_t i = 0; i < text.size(); ++i) {
        const unsigned char c = static_cast<unsigned char>(text[i]);
        if (c == '\n') out += '\n';
        else if (c == '\t') out += "    ";
        else if (c == 0x1B || c == 0x7F || c < 0x20) out += c == '\r' ? "" : " ";
        else if (c == 0xC2 && i + 1 < text.size() && static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
                 static_cast<unsigned char>(text[i + 1]) <= 0x9F) {
            ++i;  // a C1 control character (U+0080..U+009F), CSI among them
            out += ' ';
        } else out += static_cast<char>(c);
    }
    return out;
}

std::vector<std::string> wrap(const std::string& text, int width) {
    std::vector<std::string> lines(1);
    int n = 0;
    for (std::size_t i = 0; i < text.size(); ++i) {
        const unsigned char c = static_cast<unsigned char>(text[i]);
        if (c == '\n') {
            lines.emplace_back();
            n = 0;
            continue;
        }
        if (!is_continuation(c) && n == width) {
            lines.emplace_back();
            n = 0;
        }
        if (!is_continuation(c)) ++n;
        lines.back() += static_cast<char>(c);
    }
    return lines;
}

LiveView::LiveView(std::FILE* out, std::vector<std::string> questions, std::size_t first_index)
    : out_(out), first_index_(first_index) {
    for (auto& q : questions) cards_.push_back({printable(one_line(q)), {}, 0, 0.0, "waiting"});
}

void LiveView::update(const kev::StepEvent& event) {
    step_ = event.step;
    active_ = event.active_cards;
    aggregate_tps_ = event.aggregate_tokens_per_s;
    for (const kev::CardUpdate& u : event.updates) {
        if (u.card < 0 || static_cast<std::size_t>(u.card) >= cards_.size()) continue;
        Card& c = cards_[static_cast<std::size_t>(u.card)];
        c.text += printable(u.text);
        c.tokens = u.stats.generated_tokens;
        c.tokens_per_s = u.stats.tokens_per_s;
        c.state = u.finished ? std::string("done: ") + kev::to_string(*u.finished) : "answering";
    }
    const auto now = std::chrono::steady_clock::now();
    if (active_ > 0 && now - last_draw_ < std::chrono::milliseconds(80)) return;
    last_draw_ = now;
    redraw();
}

std::vector<std::string> LiveView::render(int width, int height) const {
    const int n = static_cast<int>(cards_.size());
    const int w = std::max(20, width - 1);  // never touch the last column (no auto-wrap)
    std::vector<std::string> lines;
    const int room = height - 2;            // one line for the footer, one spare
    // Lines of answer per card: as many as fit, 1 to 4; 0 = one line per card.
    const int body = std::min(4, room / std::max(1, n) - 1);
    for (int i = 0; i < n && static_cast<int>(lines.size()) < room; ++i) {
        const Card& c = cards_[static_cast<std::size_t>(i)];
        char stats[96];
        std::snprintf(stats, sizeof stats, " \u00b7 %lld tok \u00b7 %.1f tok/s \u00b7 %s", static_cast<long long>(c.tokens),
                      c.tokens_per_s, c.state.c_str());
        const std::string label = "[" + std::to_string(first_index_ + static_cast<std::size_t>(i) + 1) + "] ";
        if (body <= 0) {  // compact: label, stats, then the tail of the answer on one line
            std::string tail = one_line(c.text);
            const int keep = w - columns(label) - columns(stats) - 3;
            while (keep > 0 && columns(tail) > keep) {
                std::size_t cut = 1;
                while (cut < tail.size() && is_continuation(static_cast<unsigned char>(tail[cut]))) ++cut;
                tail.erase(0, cut);
            }
            lines.push_back(clip(label + (keep > 0 ? tail : std::string()) + " \u2502" + stats, w));
            continue;
        }
        const int question_room = std::max(4, w - columns(label) - columns(stats));
        lines.push_back("\033[1m" + label + "\033[0m" + clip(c.question, question_room) + "\033[2m" + stats + "\033[0m");
        std::vector<std::string> wrapped = wrap(c.text, w - 2);
        const int from = std::max(0, static_cast<int>(wrapped.size()) - body);
        for (int k = 0; k < body; ++k) {
            const int idx = from + k;
            lines.push_back("  " + (idx < static_cast<int>(wrapped.size()) ? wrapped[static_cast<std::size_t>(idx)] : std::string()));
        }
    }
    char footer[160];
    std::snprintf(footer, sizeof footer, "\033[2mstep %lld \u00b7 %d of %d cards answering \u00b7 %.1f tok/s in all\033[0m",
                  static_cast<long long>(step_), active_, n, aggregate_tps_);
    lines.emplace_back(footer);
    return lines;
}

void LiveView::redraw() {
    int width = 80, height = 24;
    terminal_size(width, height);
    const std::vector<std::string> lines = render(width, height);
    std::string frame;
    if (lines_drawn_ > 0) frame += "\r\033[" + std::to_string(lines_drawn_) + "A";
    frame += "\033[J";
    for (const auto& l : lines) frame += l + "\n";
    std::fputs(frame.c_str(), out_);
    std::fflush(out_);
    lines_drawn_ = static_cast<int>(lines.size());
}

void LiveView::finish(const std::vector<kev::CardResult>& results) {
    std::string frame;
    if (lines_drawn_ > 0) frame += "\r\033[" + std::to_string(lines_drawn_) + "A\033[J";
    lines_drawn_ = 0;
    for (std::size_t i = 0; i < cards_.size() && i < results.size(); ++i) {
        frame += "\033[1m--- [" + std::to_string(first_index_ + i + 1) + "] " + cards_[i].question + "\033[0m\n";
        frame += printable(results[i].text) + "\n";
    }
    std::fputs(frame.c_str(), out_);
    std::fflush(out_);
}

}  // namespace kevcli
