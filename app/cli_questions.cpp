#include "cli_questions.h"

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>

#include <nlohmann/json.hpp>

#include "cli_input.h"
#include "kev/error.h"

namespace kevcli {

namespace {

using json = nlohmann::json;

// Deeper than any question file needs; refused before nlohmann builds (and later
// destroys) a tower of nested values.
constexpr int kMaxDepth = 32;

[[noreturn]] void fail(const std::string& where, const std::string& what) {
    throw kev::Error(kev::ErrorCode::Format, where + ": " + what);
}

// nlohmann's message without its "[json.exception.parse_error.101] " tag.
std::string untagged(const char* what) {
    const std::string s = what;
    const std::size_t close = s.find("] ");
    return s.rfind("[json.exception.", 0) == 0 && close != std::string::npos ? s.substr(close + 2) : s;
}

// Where the parser is, for the one error nlohmann reports without a position: a number
// that overflows a double ("1e400", out_of_range 406) is found while the value is read,
// before any entry exists to name. The parse callback follows entries and keys.
struct Tracker {
    explicit Tracker(int depth) : entry_depth(depth) {}
    int entry_depth;              // depth of one question entry (1 in a JSON array, 0 on a JSONL line)
    std::size_t finished = 0;     // entries completed
    std::string key;              // the last key seen inside the current entry
    json::parser_callback_t callback() {
        return [this](int depth, json::parse_event_t event, json& parsed) {
            using E = json::parse_event_t;
            if (depth > kMaxDepth) throw kev::Error(kev::ErrorCode::Format, "nested deeper than " + std::to_string(kMaxDepth));
            if (event == E::key && depth == entry_depth + 1) key = parsed.get<std::string>();
            if ((event == E::value || event == E::object_end || event == E::array_end) && depth == entry_depth) {
                ++finished;
                key.clear();
            }
            return true;
        };
    }
};

std::string overflow_message(const json::out_of_range& e) {
    // "number overflow parsing '1e400'" -> "number 1e400 is out of range"
    const std::string s = untagged(e.what());
    const std::size_t open = s.find('\''), close = s.rfind('\'');
    if (e.id == 406 && open != std::string::npos && close > open)
        return "number " + s.substr(open + 1, close - open - 1) + " is out of range";
    return s;
}

// The typed settings of an entry: every value is checked against its type and range here
// (nlohmann's get<> would wrap 4294967297 into an int32 or abort on a string).
std::string type_of(const json& v) { return v.type_name(); }

float real(const json& v, const std::string& at) {
    if (!v.is_number()) fail(at, "expected a number, got " + type_of(v));
    const double d = v.get<double>();
    if (!std::isfinite(d) || std::fabs(d) > static_cast<double>(FLT_MAX))
        fail(at, "number " + v.dump() + " is out of range (a setting is at most 3.4e38 in size)");
    return static_cast<float>(d);
}

std::int64_t whole(const json& v, const std::string& at, std::int64_t min, std::int64_t max) {
    const std::string range = " is out of range (" + std::to_string(min) + ".." + std::to_string(max) + ")";
    if (!v.is_number_integer()) fail(at, "expected a whole number, got " + (v.is_number() ? v.dump() : type_of(v)));
    if (v.is_number_unsigned()) {
        const std::uint64_t u = v.get<std::uint64_t>();
        if (u > static_cast<std::uint64_t>(max)) fail(at, v.dump() + range);
        return static_cast<std::int64_t>(u);
    }
    const std::int64_t i = v.get<std::int64_t>();
    if (i < min || i > max) fail(at, v.dump() + range);
    return i;
}

std::uint64_t seed(const json& v, const std::string& at) {
    if (!v.is_number_integer()) fail(at, "expected a whole number, got " + (v.is_number() ? v.dump() : type_of(v)));
    if (!v.is_number_unsigned()) fail(at, v.dump() + " is out of range (0..18446744073709551615)");
    return v.get<std::uint64_t>();
}

// "messages": [system?, user, assistant, ..., user] -> the question (the last user
// message), the system message and the earlier turns.
void read_conversation(const json& v, const std::string& at, FileQuestion& q) {
    if (!v.is_array()) fail(at, "expected an array of {\"role\", \"content\"} objects, got " + type_of(v));
    if (v.empty()) fail(at, "the list is empty: it needs at least the user message to answer");
    std::string expected = "user";  // the role the next message must have (after an optional system)
    std::string pending_user;
    for (std::size_t i = 0; i < v.size(); ++i) {
        const json& m = v[i];
        const std::string here = at + ": message " + std::to_string(i + 1);
        if (!m.is_object()) fail(here, "expected an object with \"role\" and \"content\", got " + type_of(m));
        for (const auto& [key, x] : m.items()) {
            (void)x;
            if (key != "role" && key != "content") fail(here, "unknown key \"" + key + "\" (a message has \"role\" and \"content\")");
        }
        if (!m.contains("role") || !m["role"].is_string())
            fail(here, "\"role\" must be a string: system, user or assistant" + (m.contains("role") ? ", got " + type_of(m["role"]) : std::string()));
        if (!m.contains("content") || !m["content"].is_string())
            fail(here, "\"content\" must be a string" + (m.contains("content") ? ", got " + type_of(m["content"]) : std::string(", and is missing")));
        const std::string& role = m["role"].get_ref<const std::string&>();
        const std::string& content = m["content"].get_ref<const std::string&>();
        if (role != "system" && role != "user" && role != "assistant")
            fail(here, "unknown role \"" + role + "\" (expected system, user or assistant)");
        if (role == "system") {
            if (i != 0) fail(here, "a system message may only come first");
            q.system = content;
            continue;
        }
        if (role != expected) {
            fail(here, std::string(expected == "user" ? "expected a user" : "expected an assistant") + " message, got " + role +
                           " (user and assistant take turns)");
        }
        if (role == "user") {
            if (content.empty()) fail(here, "the user message is empty");
            pending_user = content;
            expected = "assistant";
        } else {
            q.history.push_back({pending_user, content});
            expected = "user";
        }
    }
    if (expected != "assistant") {
        fail(at, v.size() == 1 && q.system ? std::string("there is no user message to answer, only a system message")
                                           : "the last message must be the user message to answer, not an assistant message");
    }
    q.question = pending_user;
}

FileQuestion entry(const json& item, const std::string& where, const kev::SamplingSettings& defaults,
                   float default_lora_scale) {
    if (item.is_string()) {
        if (item.get_ref<const std::string&>().empty()) fail(where, "the question is empty");
        return {item.get<std::string>(), std::nullopt, std::nullopt};
    }
    FileQuestion q;
    const bool conversation = item.is_object() && item.contains("messages");
    if (conversation) {
        if (item.contains("question")) fail(where, "give either \"question\" or \"messages\", not both");
        read_conversation(item["messages"], where + ": messages", q);
    } else {
        if (!item.is_object() || !item.contains("question") || !item["question"].is_string())
            fail(where, "expected a string or an object with a \"question\" string or a \"messages\" array");
        if (item["question"].get_ref<const std::string&>().empty()) fail(where + ": question", "the question is empty");
        q.question = item["question"].get<std::string>();
    }
    kev::SamplingSettings s = defaults;
    std::optional<kev::LoraUse> lora;
    for (const auto& [key, v] : item.items()) {
        const std::string at = where + ": " + key;
        if (key == "question" || key == "messages") continue;
        if (key == "lora") {
            if (!v.is_boolean()) fail(at, "expected true or false, got " + type_of(v));
            lora = kev::LoraUse{v.get<bool>(), lora ? lora->scale : default_lora_scale};
        } else if (key == "lora_scale") {
            lora = kev::LoraUse{lora ? lora->enabled : true, real(v, at)};
        } else if (key == "temperature") {
            s.temperature = real(v, at);
        } else if (key == "top_p") {
            s.top_p = real(v, at);
        } else if (key == "top_k") {
            s.top_k = static_cast<std::int32_t>(whole(v, at, 0, std::numeric_limits<std::int32_t>::max()));
        } else if (key == "min_p") {
            s.min_p = real(v, at);
        } else if (key == "repetition_penalty") {
            s.repetition_penalty = real(v, at);
        } else if (key == "max_new_tokens") {
            s.max_new_tokens = whole(v, at, 1, std::numeric_limits<std::int64_t>::max());
        } else if (key == "seed") {
            s.seed = seed(v, at);
        } else if (key == "stop") {
            s.stop_strings.clear();
            if (v.is_string()) {
                s.stop_strings.push_back(v.get<std::string>());
            } else if (v.is_array()) {
                for (const json& x : v) {
                    if (!x.is_string()) fail(at, "expected a string or an array of strings, got an array holding a " + type_of(x));
                    s.stop_strings.push_back(x.get<std::string>());
                }
            } else {
                fail(at, "expected a string or an array of strings, got " + type_of(v));
            }
        } else {
            fail(where, "unknown setting \"" + key + "\"");
        }
    }
    try {
        s.validate();
        if (lora) lora->validate();
    } catch (const kev::Error& e) {
        fail(where, e.what());  // a setting's rule broken in the file: a file error
    }
    q.sampling = s;
    q.lora = lora;
    return q;
}

}  // namespace

std::vector<FileQuestion> read_question_file(const std::string& path, const kev::SamplingSettings& defaults,
                                             float default_lora_scale) {
    const std::string text = read_file_limited(path, kMaxQuestionFileBytes, "a question file");
    const bool jsonl = path.size() > 6 && path.compare(path.size() - 6, 6, ".jsonl") == 0;
    std::vector<FileQuestion> out;
    if (jsonl) {
        std::size_t start = 0;
        for (std::size_t n = 1; start < text.size(); ++n) {
            std::size_t stop = text.find('\n', start);
            if (stop == std::string::npos) stop = text.size();
            const std::string line = text.substr(start, stop - start);
            start = stop + 1;
            if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
            const std::string where = path + " line " + std::to_string(n);
            Tracker t(0);
            json item;
            try {
                item = json::parse(line, t.callback());
            } catch (const json::parse_error& e) {
                // nlohmann counts lines within the one line it was given: the column is
                // its byte offset, the line is ours.
                std::string why = untagged(e.what());
                const std::size_t colon = why.find(": ");
                if (why.rfind("parse error at line", 0) == 0 && colon != std::string::npos) why = why.substr(colon + 2);
                fail(where + ", column " + std::to_string(e.byte), "not valid JSON: " + why);
            } catch (const json::out_of_range& e) {
                fail(where + (t.key.empty() ? "" : ": " + t.key), overflow_message(e));
            } catch (const kev::Error& e) {
                fail(where, e.what());
            }
            out.push_back(entry(item, where, defaults, default_lora_scale));
        }
    } else {
        Tracker t(1);
        json doc;
        try {
            doc = json::parse(text, t.callback());
        } catch (const json::parse_error& e) {
            fail(path, "not valid JSON: " + untagged(e.what()));
        } catch (const json::out_of_range& e) {
            fail(path + " item " + std::to_string(t.finished + 1) + (t.key.empty() ? "" : ": " + t.key),
                 overflow_message(e));
        } catch (const kev::Error& e) {
            fail(path, e.what());
        }
        if (!doc.is_array()) fail(path, "expected a JSON array of questions");
        for (std::size_t i = 0; i < doc.size(); ++i)
            out.push_back(entry(doc[i], path + " item " + std::to_string(i + 1), defaults, default_lora_scale));
    }
    if (out.empty()) fail(path, "no questions in the file");
    return out;
}

}  // namespace kevcli
