// KEV_TEMPERATURE: per-card default temperatures from the environment.
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <string>

#include "kev/error.h"
#include "kev/sampling.h"

namespace kev {
namespace {

[[noreturn]] void invalid(const std::string& message) {
    throw Error(ErrorCode::InvalidArgument, message);
}

std::string_view trim(std::string_view s) {
    const auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
    while (!s.empty() && blank(s.front())) s.remove_prefix(1);
    while (!s.empty() && blank(s.back())) s.remove_suffix(1);
    return s;
}

}  // namespace

std::optional<float> TemperatureDefaults::for_card(std::size_t card, std::size_t cards) const {
    if (values.empty()) return std::nullopt;
    if (values.size() == 1) return values[0];
    if (values.size() != cards) {
        invalid("KEV_TEMPERATURE lists " + std::to_string(values.size()) +
                " temperatures but there are " + std::to_string(cards) +
                " cards: give one value for all cards, or exactly one per card");
    }
    if (card >= cards) invalid("KEV_TEMPERATURE: card " + std::to_string(card) + " is outside the pack");
    return values[card];
}

TemperatureDefaults parse_temperature_defaults(std::string_view value) {
    TemperatureDefaults out;
    if (trim(value).empty()) return out;
    const std::string quoted = "KEV_TEMPERATURE=\"" + std::string(value) + "\"";
    std::size_t item = 0;
    while (true) {
        ++item;
        const std::size_t comma = value.find(',');
        const std::string_view text = trim(value.substr(0, comma));
        const std::string where = quoted + ": value " + std::to_string(item);
        if (text.empty()) invalid(where + " is empty");
        // from_chars, not strtof: it ignores the locale (a Qt app runs under the
        // user's, where the decimal separator may be a comma).
        float t = 0.0f;
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), t);
        if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(t)) {
            invalid(where + " (\"" + std::string(text) + "\") is not a number");
        }
        if (t < 0.0f || t > kMaxTemperature) {
            invalid(where + " (" + std::string(text) + ") is outside [0, " +
                    std::to_string(static_cast<int>(kMaxTemperature)) + "]");
        }
        if (t > 0.0f && t < kMinPositiveTemperature) {
            invalid(where + " (" + std::string(text) + ") is too small: use 0 for greedy");
        }
        out.values.push_back(t);
        if (comma == std::string_view::npos) break;
        value.remove_prefix(comma + 1);
    }
    return out;
}

TemperatureDefaults temperature_defaults_from_env() {
    const char* value = std::getenv("KEV_TEMPERATURE");
    return value ? parse_temperature_defaults(value) : TemperatureDefaults{};
}

void resolve_temperatures(std::vector<SamplingSettings>& cards, const TemperatureDefaults& defaults) {
    // Compute first, assign after: on a count mismatch `cards` stays as it was.
    std::vector<float> resolved(cards.size());
    for (std::size_t c = 0; c < cards.size(); ++c) {
        const std::optional<float> fallback = defaults.for_card(c, cards.size());
        resolved[c] = cards[c].temperature.value_or(fallback.value_or(kDefaultTemperature));
    }
    for (std::size_t c = 0; c < cards.size(); ++c) cards[c].temperature = resolved[c];
}

}  // namespace kev
