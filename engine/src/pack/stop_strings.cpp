#include <algorithm>

#include "kev/sampling.h"

namespace kev {

StopStringMatcher::StopStringMatcher(std::vector<std::string> stop_strings) {
    for (std::string& s : stop_strings) {
        if (!s.empty()) stops_.push_back(std::move(s));
    }
}

StopStringMatcher::Result StopStringMatcher::feed(std::string_view delta) {
    Result r;
    if (stopped_) return r;
    held_.append(delta);
    // The earliest complete stop string wins.
    std::size_t stop_at = std::string::npos;
    for (const std::string& s : stops_) stop_at = std::min(stop_at, held_.find(s));
    if (stop_at != std::string::npos) {
        stopped_ = true;
        r.stopped = true;
        r.text = held_.substr(0, stop_at);
        held_.clear();
        return r;
    }
    // Hold back the longest suffix that is a proper prefix of some stop string: any stop
    // string that will complete later starts there (or later), never in what is shown.
    std::size_t keep = 0;
    for (const std::string& s : stops_) {
        for (std::size_t n = std::min(s.size() - 1, held_.size()); n > keep; --n) {
            if (held_.compare(held_.size() - n, n, s, 0, n) == 0) {
                keep = n;
                break;
            }
        }
    }
    r.text = held_.substr(0, held_.size() - keep);
    held_.erase(0, held_.size() - keep);
    return r;
}

std::string StopStringMatcher::flush() {
    std::string out;
    out.swap(held_);
    return out;
}

}  // namespace kev
