// Reproducibility bundles (kev/bundle.h): writing one, and reading one back as the
// untrusted input it is.
#include "kev/bundle.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <filesystem>
#include <limits>
#include <random>
#include <set>
#include <sstream>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "kev/config.h"
#include "kev/error.h"
#include "kev/model.h"
#include "kev/text_file.h"
#include "tokenizer/unicode.h"

namespace kev {

using nlohmann::json;
using ojson = nlohmann::ordered_json;  // written in the order of the layout in bundle.h

namespace {

namespace fs = std::filesystem;

constexpr std::size_t kMaxPathBytes = 4096;
constexpr std::size_t kMaxShortText = 256;  // versions, names, timestamps, finish reasons
constexpr std::int64_t kMaxCardNumber = 1000000;
constexpr std::int64_t kMaxCount = std::int64_t(1) << 40;  // token counts in stats

// A float as the double nearest its shortest decimal form, so that 0.7f is written as
// 0.7 (not 0.699999988079071) and still reads back as exactly 0.7f.
ojson float_json(float v) {
    char buf[64];
    const auto r = std::to_chars(buf, buf + sizeof buf, v);
    if (r.ec != std::errc()) return static_cast<double>(v);
    *r.ptr = '\0';
    return std::strtod(buf, nullptr);
}

const FinishReason kFinishReasons[] = {FinishReason::EndOfSequence, FinishReason::StopString,
                                       FinishReason::MaxTokens,     FinishReason::Cancelled,
                                       FinishReason::NonFinite,     FinishReason::ContextFull};

std::string quoted(const std::string& key) { return "\"" + key + "\""; }

// The checks of one part of a bundle ("bundle", "bundle card 3"), each naming the field.
class Fields {
public:
    Fields(std::string source, std::string where) : source_(std::move(source)), where_(std::move(where)) {}

    [[noreturn]] void fail(const std::string& what) const {
        throw Error(ErrorCode::Format, (source_.empty() ? std::string() : source_ + ": ") + where_ + ": " + what);
    }

    // `key` may be dotted ("sampling.top_k"): messages name it so.
    const json& required(const json& obj, const std::string& key, const std::string& name) const {
        const auto it = obj.find(key);
        if (it == obj.end()) fail(quoted(name) + " is missing");
        return *it;
    }
    const json* optional(const json& obj, const std::string& key) const {
        const auto it = obj.find(key);
        return it == obj.end() || it->is_null() ? nullptr : &*it;
    }

    const json& object(const json& obj, const std::string& key, const std::string& name) const {
        const json& v = required(obj, key, name);
        if (!v.is_object()) fail(quoted(name) + " must be an object");
        return v;
    }

    std::string text(const json& v, const std::string& name, std::size_t max_bytes) const {
        if (!v.is_string()) fail(quoted(name) + " must be a string");
        const std::string& s = v.get_ref<const std::string&>();
        if (s.size() > max_bytes)
            fail(quoted(name) + " is " + std::to_string(s.size()) + " bytes, over the limit of " + std::to_string(max_bytes));
        if (!tok::is_valid_utf8(s)) fail(quoted(name) + " is not valid UTF-8");
        return s;
    }
    std::string text(const json& obj, const std::string& key, const std::string& name, std::size_t max_bytes) const {
        return text(required(obj, key, name), name, max_bytes);
    }

    bool boolean(const json& obj, const std::string& key, const std::string& name) const {
        const json& v = required(obj, key, name);
        if (!v.is_boolean()) fail(quoted(name) + " must be true or false");
        return v.get<bool>();
    }

    std::int64_t integer(const json& v, const std::string& name, std::int64_t min, std::int64_t max) const {
        const std::string range = " (" + std::to_string(min) + ".." + std::to_string(max) + ")";
        if (v.is_number_unsigned()) {
            const std::uint64_t u = v.get<std::uint64_t>();
            if (u > static_cast<std::uint64_t>(max) || static_cast<std::int64_t>(u) < min)
                fail(quoted(name) + " " + std::to_string(u) + " is out of range" + range);
            return static_cast<std::int64_t>(u);
        }
        if (!v.is_number_integer()) fail(quoted(name) + " must be a whole number");
        const std::int64_t i = v.get<std::int64_t>();
        if (i < min || i > max) fail(quoted(name) + " " + std::to_string(i) + " is out of range" + range);
        return i;
    }
    std::int64_t integer(const json& obj, const std::string& key, const std::string& name, std::int64_t min,
                         std::int64_t max) const {
        return integer(required(obj, key, name), name, min, max);
    }

    std::uint64_t unsigned_integer(const json& obj, const std::string& key, const std::string& name) const {
        const json& v = required(obj, key, name);
        if (!v.is_number_unsigned()) fail(quoted(name) + " must be a whole number from 0 to 18446744073709551615");
        return v.get<std::uint64_t>();
    }

    double real(const json& obj, const std::string& key, const std::string& name, double min, double max) const {
        const json& v = required(obj, key, name);
        if (!v.is_number()) fail(quoted(name) + " must be a number");
        const double d = v.get<double>();
        if (!std::isfinite(d) || d < min || d > max) {
            std::ostringstream s;
            s << quoted(name) << " " << d << " is out of range (" << min << ".." << max << ")";
            fail(s.str());
        }
        return d;
    }
    float real32(const json& obj, const std::string& key, const std::string& name, double min, double max) const {
        return static_cast<float>(real(obj, key, name, min, max));
    }

private:
    std::string source_;
    std::string where_;
};

bool is_sha256_hex(const std::string& s) {
    return s.size() == 64 && std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// "YYYY-MM-DDTHH:MM:SS" then optional fraction, then "Z": the UTC form ISO 8601 allows.
bool is_iso8601_utc(const std::string& s) {
    if (s.size() < 20 || s.back() != 'Z') return false;
    const char* layout = "dddd-dd-ddTdd:dd:dd";
    for (std::size_t i = 0; i < 19; ++i) {
        const bool digit = s[i] >= '0' && s[i] <= '9';
        if (layout[i] == 'd' ? !digit : s[i] != layout[i]) return false;
    }
    if (s.size() == 20) return true;
    if (s[19] != '.' || s.size() < 22) return false;
    return std::all_of(s.begin() + 20, s.end() - 1, [](char c) { return c >= '0' && c <= '9'; });
}

Device parse_device(const Fields& f, const std::string& s) {
    for (Device d : {Device::Cpu, Device::Cuda})
        if (s == to_string(d)) return d;
    f.fail("\"precision.device\" must be \"cpu\" or \"cuda\", got \"" + s + "\"");
}

DType parse_dtype_name(const Fields& f, const std::string& s) {
    for (DType d : {DType::F32, DType::BF16, DType::F16})
        if (s == to_string(d)) return d;
    f.fail("\"precision.dtype\" must be \"fp32\", \"bf16\" or \"fp16\", got \"" + s + "\"");
}

WeightQuant parse_quant(const Fields& f, const std::string& s) {
    for (WeightQuant q : {WeightQuant::None, WeightQuant::Q4, WeightQuant::NF4})
        if (s == to_string(q)) return q;
    f.fail("\"precision.quant\" must be \"dense\", \"4bit\" or \"nf4\", got \"" + s + "\"");
}

ojson card_to_json(const BundleCard& c) {
    const SamplingSettings& s = c.sampling;
    ojson sampling = {{"temperature", s.temperature ? float_json(*s.temperature) : ojson(nullptr)},
                     {"top_p", float_json(s.top_p)},
                     {"top_k", s.top_k},
                     {"min_p", float_json(s.min_p)},
                     {"repetition_penalty", float_json(s.repetition_penalty)},
                     {"max_new_tokens", s.max_new_tokens},
                     {"seed", s.seed ? ojson(*s.seed) : ojson(nullptr)},
                     {"stop", s.stop_strings}};
    ojson j = {{"number", c.number},
               {"label", c.label},
               {"question", c.question},
               {"system", c.system ? ojson(*c.system) : ojson(nullptr)},
               {"sampling", sampling},
               {"lora", {{"on", c.lora.enabled}, {"scale", float_json(c.lora.scale)}}},
               {"text", c.text},
               {"tokens", c.tokens},
               {"finish_reason", to_string(c.finish)},
               {"stop", c.matched_stop},
               {"stats",
                {{"prompt_tokens", c.stats.prompt_tokens},
                 {"generated_tokens", c.stats.generated_tokens},
                 {"time_to_first_token_s", c.stats.time_to_first_token_s},
                 {"tokens_per_s", c.stats.tokens_per_s}}}};
    if (!c.system) j.erase("system");  // absent: the bundle's system message
    if (!c.history.empty()) {
        ojson turns = ojson::array();
        for (const ChatTurn& t : c.history) turns.push_back({{"user", t.user}, {"assistant", t.assistant}});
        j["history"] = std::move(turns);
    }
    return j;
}

BundleCard card_from_json(const json& j, std::size_t index, const std::string& source) {
    // Until the card's number is known, messages count cards from 1 in file order.
    Fields f(source, "bundle card " + std::to_string(index + 1));
    if (!j.is_object()) f.fail("must be an object");
    BundleCard c;
    c.number = static_cast<std::int32_t>(f.integer(j, "number", "number", 1, kMaxCardNumber));
    f = Fields(source, "bundle card " + std::to_string(c.number));
    c.label = f.text(j, "label", "label", kMaxShortText * 16);
    c.question = f.text(j, "question", "question", kMaxBundleBytes);
    if (const json* system = f.optional(j, "system")) c.system = f.text(*system, "system", kMaxBundleBytes);
    if (const json* history = f.optional(j, "history")) {
        if (!history->is_array()) f.fail("\"history\" must be an array of {\"user\", \"assistant\"} turns");
        if (history->size() > kMaxBundleTurns)
            f.fail("\"history\" holds " + std::to_string(history->size()) + " turns, over the limit of " +
                   std::to_string(kMaxBundleTurns));
        for (std::size_t k = 0; k < history->size(); ++k) {
            const json& t = (*history)[k];
            const std::string name = "history[" + std::to_string(k) + "]";
            if (!t.is_object()) f.fail("\"" + name + "\" must be an object with \"user\" and \"assistant\"");
            c.history.push_back({f.text(t, "user", name + ".user", kMaxBundleBytes),
                                 f.text(t, "assistant", name + ".assistant", kMaxBundleBytes)});
        }
    }

    const json& s = f.object(j, "sampling", "sampling");
    SamplingSettings& ss = c.sampling;
    ss.temperature = f.real32(s, "temperature", "sampling.temperature", 0.0, kMaxTemperature);
    ss.top_p = f.real32(s, "top_p", "sampling.top_p", 0.0, 1.0);
    ss.top_k = static_cast<std::int32_t>(f.integer(s, "top_k", "sampling.top_k", 0, std::numeric_limits<std::int32_t>::max()));
    ss.min_p = f.real32(s, "min_p", "sampling.min_p", 0.0, 1.0);
    ss.repetition_penalty = f.real32(s, "repetition_penalty", "sampling.repetition_penalty", 0.0,
                                     std::numeric_limits<float>::max());
    ss.max_new_tokens = f.integer(s, "max_new_tokens", "sampling.max_new_tokens", 1, std::numeric_limits<std::int64_t>::max());
    ss.seed = f.unsigned_integer(s, "seed", "sampling.seed");
    const json& stops = f.required(s, "stop", "sampling.stop");
    if (!stops.is_array()) f.fail("\"sampling.stop\" must be an array of strings");
    if (stops.size() > kMaxBundleStopStrings)
        f.fail("\"sampling.stop\" holds " + std::to_string(stops.size()) + " strings, over the limit of " +
               std::to_string(kMaxBundleStopStrings));
    for (const json& stop : stops) ss.stop_strings.push_back(f.text(stop, "sampling.stop", kMaxShortText * 16));
    try {
        ss.validate();
    } catch (const Error& e) {
        f.fail(std::string("\"sampling\": ") + e.what());
    }

    const json& lora = f.object(j, "lora", "lora");
    c.lora.enabled = f.boolean(lora, "on", "lora.on");
    c.lora.scale = f.real32(lora, "scale", "lora.scale", 0.0, kMaxLoraScale);

    c.text = f.text(j, "text", "text", kMaxBundleBytes);
    const json& tokens = f.required(j, "tokens", "tokens");
    if (!tokens.is_array()) f.fail("\"tokens\" must be an array of token ids");
    if (tokens.size() > kMaxBundleTokensPerCard)
        f.fail("\"tokens\" holds " + std::to_string(tokens.size()) + " ids, over the limit of " +
               std::to_string(kMaxBundleTokensPerCard));
    c.tokens.reserve(tokens.size());
    for (std::size_t k = 0; k < tokens.size(); ++k) {
        const json& t = tokens[k];
        // nlohmann keeps a non-negative whole number as unsigned: anything else (negative,
        // fractional, a string, ...) is not a token id.
        if (!t.is_number_unsigned() || t.get<std::uint64_t>() > static_cast<std::uint64_t>(kMaxBundleTokenId)) {
            f.fail("\"tokens\" must be an array of token ids (whole numbers 0.." + std::to_string(kMaxBundleTokenId) +
                   "); token " + std::to_string(k + 1) + " is " + t.dump());
        }
        c.tokens.push_back(static_cast<TokenId>(t.get<std::int64_t>()));
    }
    const std::string finish = f.text(j, "finish_reason", "finish_reason", kMaxShortText);
    bool known = false;
    for (FinishReason r : kFinishReasons) {
        if (finish == to_string(r)) c.finish = r, known = true;
    }
    if (!known) f.fail("\"finish_reason\" \"" + finish + "\" is not one Kev writes");
    c.matched_stop = f.text(j, "stop", "stop", kMaxShortText * 16);
    if (static_cast<std::int64_t>(c.tokens.size()) > ss.max_new_tokens)
        f.fail("\"tokens\" holds " + std::to_string(c.tokens.size()) + " ids, more than \"sampling.max_new_tokens\" " +
               std::to_string(ss.max_new_tokens));

    const json& stats = f.object(j, "stats", "stats");
    c.stats.prompt_tokens = f.integer(stats, "prompt_tokens", "stats.prompt_tokens", 0, kMaxCount);
    c.stats.generated_tokens = f.integer(stats, "generated_tokens", "stats.generated_tokens", 0, kMaxCount);
    const double big = 1e12;
    c.stats.time_to_first_token_s = f.real(stats, "time_to_first_token_s", "stats.time_to_first_token_s", 0.0, big);
    c.stats.tokens_per_s = f.real(stats, "tokens_per_s", "stats.tokens_per_s", 0.0, big);
    return c;
}

// JSON with 2-space indents, except that an array of numbers or strings (token ids, stop
// strings) stays on one line: a card's tokens are one line, not one line per token.
void write_pretty(const ojson& j, std::string& out, int indent) {
    const std::string pad(static_cast<std::size_t>(indent) + 2, ' ');
    const auto flat = [](const ojson& v) { return !v.is_object() && !v.is_array(); };
    if (j.is_object() && !j.empty()) {
        out += "{\n";
        bool first = true;
        for (auto it = j.begin(); it != j.end(); ++it) {
            out += (first ? "" : ",\n") + pad + ojson(it.key()).dump() + ": ";
            write_pretty(it.value(), out, indent + 2);
            first = false;
        }
        out += "\n" + std::string(static_cast<std::size_t>(indent), ' ') + "}";
    } else if (j.is_array() && !j.empty() && !std::all_of(j.begin(), j.end(), flat)) {
        out += "[\n";
        for (std::size_t i = 0; i < j.size(); ++i) {
            out += (i ? ",\n" : "") + pad;
            write_pretty(j[i], out, indent + 2);
        }
        out += "\n" + std::string(static_cast<std::size_t>(indent), ' ') + "]";
    } else if (j.is_array()) {
        out += "[";
        for (std::size_t i = 0; i < j.size(); ++i) out += (i ? ", " : "") + j[i].dump();
        out += "]";
    } else {
        out += j.dump();
    }
}

// Parser callback: refuse deep nesting before the parser builds it (a bundle is 3 levels
// deep; "[[[[..." would otherwise cost memory and time for nothing).
json parse_json_text(const std::string& text, const std::string& source) {
    const std::string prefix = source.empty() ? std::string() : source + ": ";
    try {
        return json::parse(text, [](int depth, json::parse_event_t, json&) {
            if (depth > kMaxBundleJsonDepth)
                throw Error(ErrorCode::Format, "bundle: nested deeper than " + std::to_string(kMaxBundleJsonDepth) + " levels");
            return true;
        });
    } catch (const json::parse_error& e) {
        throw Error(ErrorCode::Format, prefix + "not a bundle: not valid JSON (" + e.what() + ")");
    } catch (const Error& e) {
        throw Error(e.code(), prefix + e.what());
    }
}

}  // namespace

std::string BundlePrecision::name() const {
    if (quant != WeightQuant::None) return to_string(quant);
    return to_string(dtype);
}

LoadOptions BundlePrecision::load_options() const {
    LoadOptions o;
    o.device = device;
    o.dtype = dtype;
    o.quant = quant;
    return o;
}

BundlePrecision BundlePrecision::of(const LoadOptions& load) { return {load.device, load.dtype, load.quant}; }

std::string iso8601_utc_now() {
    const std::time_t now = std::time(nullptr);
    std::tm utc{};
    gmtime_r(&now, &utc);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &utc);
    return buf;
}

std::string describe_weights(const Model& model) {
    const ModelConfig& c = model.config();
    const WeightMemory m = model.weights().memory();
    auto mib = [](std::int64_t bytes) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
        return std::string(buf);
    };
    char params[32];
    std::snprintf(params, sizeof params, "%.1fM", static_cast<double>(c.parameter_count()) / 1e6);
    std::string s = std::string(to_string(c.arch)) + ", " + std::to_string(c.num_layers) + " layers, hidden " +
                    std::to_string(c.hidden_size) + ", vocab " + std::to_string(c.vocab_size) + ", " + params +
                    " parameters; " + to_string(model.dtype()) + " on " + to_string(model.device()) + "; " +
                    mib(m.total()) + " of weights: " + mib(m.dense) + " " + to_string(model.dtype());
    if (m.q4_0) s += ", " + mib(m.q4_0) + " q4_0";
    if (m.q4_1) s += ", " + mib(m.q4_1) + " q4_1";
    if (m.q4_k) s += ", " + mib(m.q4_k) + " q4_k";
    if (m.q8_0) s += ", " + mib(m.q8_0) + " q8_0";
    if (m.nf4) s += ", " + mib(m.nf4) + " nf4";
    return s;
}

std::string to_json(const Bundle& b) {
    ojson j = {{"format", kBundleFormat},
              {"version", kBundleVersion},
              {"kev_version", b.kev_version},
              {"torch_version", b.torch_version},
              {"cpu_capability", b.cpu_capability},
              {"created", b.created},
              {"model", {{"path", b.model.path}, {"sha256", b.model.sha256}, {"bytes", b.model.bytes}}},
              {"precision",
               {{"name", b.precision.name()},
                {"device", to_string(b.precision.device)},
                {"dtype", to_string(b.precision.dtype)},
                {"quant", to_string(b.precision.quant)}}},
              {"weights", b.weights}};
    if (b.chat) j["chat_format"] = {{"name", to_string(b.chat->format)}, {"chosen", b.chat->chosen}};
    if (b.system) j["system"] = *b.system;
    j["shared_context"] = b.shared_context;
    if (b.adapter)
        j["adapter"] = {{"path", b.adapter->path}, {"sha256", b.adapter->sha256}, {"scale", float_json(b.adapter->scale)}};
    j["ignore_end_of_sequence"] = b.ignore_end_of_sequence;
    ojson cards = ojson::array();
    for (const BundleCard& c : b.cards) cards.push_back(card_to_json(c));
    j["cards"] = std::move(cards);
    std::string text;
    try {
        write_pretty(j, text, 0);  // strict: text that is not UTF-8 throws
        text += "\n";
    } catch (const json::exception& e) {
        throw Error(ErrorCode::InvalidArgument, std::string("bundle: cannot be written: ") + e.what());
    }
    // What is written must read back: the reader's rules are the one definition of a
    // valid bundle.
    try {
        (void)parse_bundle(text);
    } catch (const Error& e) {
        throw Error(ErrorCode::InvalidArgument, std::string("cannot write this bundle: ") + e.what());
    }
    return text;
}

void write_bundle(const Bundle& bundle, const std::string& path) {
    const std::string text = to_json(bundle);
    const fs::path target(path);
    const fs::path folder = target.has_parent_path() ? target.parent_path() : fs::path(".");
    std::random_device rd;
    const std::string tmp =
        (folder / ("." + target.filename().string() + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(rd()))).string();
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        const int err = errno;
        throw Error(ErrorCode::Io, path + ": cannot write the bundle: " + std::strerror(err));
    }
    auto fail = [&](const char* what, int err) {
        ::close(fd);
        ::unlink(tmp.c_str());
        throw Error(ErrorCode::Io, path + ": cannot write the bundle: " + what + ": " + std::strerror(err));
    };
    std::size_t done = 0;
    while (done < text.size()) {
        const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
        if (n < 0) {
            if (errno == EINTR) continue;
            fail("write", errno);
        }
        done += static_cast<std::size_t>(n);
    }
    if (::fsync(fd) != 0) fail("fsync", errno);
    if (::close(fd) != 0) {
        const int err = errno;
        ::unlink(tmp.c_str());
        throw Error(ErrorCode::Io, path + ": cannot write the bundle: close: " + std::strerror(err));
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
        const int err = errno;
        ::unlink(tmp.c_str());
        throw Error(ErrorCode::Io, path + ": cannot write the bundle: " + std::strerror(err));
    }
}

Bundle parse_bundle(const std::string& text, const std::string& source) {
    const json j = parse_json_text(text, source);
    const Fields f(source, "bundle");
    if (!j.is_object()) f.fail("not a bundle: the JSON is not an object");
    const json* format = f.optional(j, "format");
    if (!format || !format->is_string()) f.fail("not a bundle: no \"format\": \"kev-bundle\"");
    if (format->get_ref<const std::string&>() != kBundleFormat)
        f.fail("\"format\" is " + format->dump() + ", not \"" + kBundleFormat + "\"");
    const json& version = f.required(j, "version", "version");
    if (!version.is_number_integer() || version.get<std::int64_t>() != kBundleVersion)
        f.fail("version " + version.dump() + " is not supported (this Kev reads version " + std::to_string(kBundleVersion) + ")");

    Bundle b;
    b.kev_version = f.text(j, "kev_version", "kev_version", kMaxShortText);
    b.torch_version = f.text(j, "torch_version", "torch_version", kMaxShortText);
    b.cpu_capability = f.text(j, "cpu_capability", "cpu_capability", kMaxShortText);
    b.created = f.text(j, "created", "created", kMaxShortText);
    if (!is_iso8601_utc(b.created)) f.fail("\"created\" must be an ISO 8601 UTC time like 2026-12-02T03:04:05Z");

    const json& model = f.object(j, "model", "model");
    b.model.path = f.text(model, "path", "model.path", kMaxPathBytes);
    if (b.model.path.empty()) f.fail("\"model.path\" is empty");
    b.model.sha256 = f.text(model, "sha256", "model.sha256", 64);
    if (!is_sha256_hex(b.model.sha256)) f.fail("\"model.sha256\" must be 64 lowercase hex digits");
    b.model.bytes = f.unsigned_integer(model, "bytes", "model.bytes");

    const json& precision = f.object(j, "precision", "precision");
    b.precision.device = parse_device(f, f.text(precision, "device", "precision.device", kMaxShortText));
    b.precision.dtype = parse_dtype_name(f, f.text(precision, "dtype", "precision.dtype", kMaxShortText));
    b.precision.quant = parse_quant(f, f.text(precision, "quant", "precision.quant", kMaxShortText));
    if (b.precision.quant != WeightQuant::None && b.precision.dtype != DType::BF16)
        f.fail("\"precision\": 4-bit weights work with bf16 activations, not " + std::string(to_string(b.precision.dtype)));
    if (const json* name = f.optional(precision, "name")) {
        const std::string n = f.text(*name, "precision.name", kMaxShortText);
        if (n != b.precision.name())
            f.fail("\"precision.name\" \"" + n + "\" does not match its dtype and quant (" + b.precision.name() + ")");
    }
    b.weights = f.text(j, "weights", "weights", kMaxShortText * 16);

    if (const json* chat = f.optional(j, "chat_format")) {
        if (!chat->is_object()) f.fail("\"chat_format\" must be an object");
        const std::string name = f.text(*chat, "name", "chat_format.name", kMaxShortText);
        const auto format_used = chat_format_from_string(name);
        if (!format_used) f.fail("\"chat_format.name\" \"" + name + "\" is not chatml, llama3, llama2 or mistral");
        b.chat = BundleChat{*format_used, f.boolean(*chat, "chosen", "chat_format.chosen")};
    }
    if (const json* system = f.optional(j, "system")) b.system = f.text(*system, "system", kMaxBundleBytes);
    b.shared_context = f.text(j, "shared_context", "shared_context", kMaxBundleBytes);
    if (const json* adapter = f.optional(j, "adapter")) {
        if (!adapter->is_object()) f.fail("\"adapter\" must be an object");
        BundleAdapter a;
        a.path = f.text(*adapter, "path", "adapter.path", kMaxPathBytes);
        if (a.path.empty()) f.fail("\"adapter.path\" is empty");
        a.sha256 = f.text(*adapter, "sha256", "adapter.sha256", 64);
        if (!is_sha256_hex(a.sha256)) f.fail("\"adapter.sha256\" must be 64 lowercase hex digits");
        a.scale = f.real32(*adapter, "scale", "adapter.scale", 0.0, kMaxLoraScale);
        b.adapter = std::move(a);
    }
    b.ignore_end_of_sequence = f.boolean(j, "ignore_end_of_sequence", "ignore_end_of_sequence");

    const json& cards = f.required(j, "cards", "cards");
    if (!cards.is_array()) f.fail("\"cards\" must be an array of cards");
    if (cards.empty()) f.fail("\"cards\" is empty: a bundle records at least one card");
    if (cards.size() > kMaxBundleCards)
        f.fail("\"cards\" holds " + std::to_string(cards.size()) + " cards, over the limit of " + std::to_string(kMaxBundleCards));
    std::set<std::int32_t> numbers;
    for (std::size_t i = 0; i < cards.size(); ++i) {
        b.cards.push_back(card_from_json(cards[i], i, source));
        const BundleCard& c = b.cards.back();
        const Fields cf(source, "bundle card " + std::to_string(c.number));
        if (!numbers.insert(c.number).second) cf.fail("the card number is used twice");
        if (c.lora.enabled && !b.adapter) cf.fail("\"lora.on\" is true but the bundle names no \"adapter\"");
    }
    return b;
}

Bundle read_bundle(const std::string& path) {
    return parse_bundle(read_text_file(path, kMaxBundleBytes, "a bundle"), path);
}

BundleReplay replay_inputs(const Bundle& b) {
    BundleReplay r;
    r.load = b.precision.load_options();
    if (b.chat && b.chat->chosen) r.chat_format = b.chat->format;
    if (b.adapter) r.adapter = b.adapter->path == "demo" ? demo_adapter_path() : b.adapter->path;
    r.request.system = b.system;
    r.request.shared_context = b.shared_context;
    r.request.ignore_end_of_sequence = b.ignore_end_of_sequence;
    for (const BundleCard& c : b.cards) {
        CardRequest card;
        card.question = c.question;
        card.system = c.system;
        card.history = c.history;
        card.sampling = c.sampling;
        // Stop where the run stopped: a card cut at max tokens or cancelled replays as
        // many tokens as it has (at least one: a card must be allowed to generate).
        if (c.finish == FinishReason::MaxTokens || c.finish == FinishReason::Cancelled)
            card.sampling.max_new_tokens = std::max<std::int64_t>(1, static_cast<std::int64_t>(c.tokens.size()));
        card.lora = c.lora;
        r.request.cards.push_back(std::move(card));
    }
    return r;
}

std::vector<TokenId> comparable_tokens(const BundleCard& recorded, const std::vector<TokenId>& replayed) {
    if (recorded.finish != FinishReason::Cancelled || replayed.size() <= recorded.tokens.size()) return replayed;
    return {replayed.begin(), replayed.begin() + static_cast<std::ptrdiff_t>(recorded.tokens.size())};
}

}  // namespace kev
