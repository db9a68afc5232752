// kev-cli's live view of several answers on a terminal: every card gets a labelled
// block with its latest lines and its stats, redrawn in place as the pack decodes;
// when the run ends (or Ctrl-C stops it) the live view is replaced by every answer in
// full, labelled, so the scrollback keeps them. Used only when stdout is a terminal:
// a pipe or a file gets plain text, never escape sequences.
#pragma once

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "kev/generator.h"

namespace kevcli {

// Model text made safe for a terminal: control characters (escape sequences a model
// may produce included) become spaces or are dropped; newlines are kept.
std::string printable(const std::string& text);

// Terminal text split into lines of at most `width` characters (UTF-8 code points).
std::vector<std::string> wrap(const std::string& text, int width);

class LiveView {
public:
    LiveView(std::FILE* out, std::vector<std::string> questions, std::size_t first_index);
    // Takes one step's updates; redraws at most every 80 ms (and at the last step).
    void update(const kev::StepEvent& event);
    // Clears the live block and prints every answer in full.
    void finish(const std::vector<kev::CardResult>& results);

    // The block as it would be drawn now, one string per screen line (for tests and
    // for redraw()).
    std::vector<std::string> render(int width, int height) const;

private:
    struct Card {
        std::string question;
        std::string text;
        std::int64_t tokens = 0;
        double tokens_per_s = 0.0;
        std::string state = "waiting";
    };
    void redraw();

    std::FILE* out_;
    std::size_t first_index_;
    std::vector<Card> cards_;
    std::int64_t step_ = 0;
    int active_ = 0;
    double aggregate_tps_ = 0.0;
    int lines_drawn_ = 0;
    std::chrono::steady_clock::time_point last_draw_{};
};

}  // namespace kevcli
