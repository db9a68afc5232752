#include "kev/chat_template.h"

#include <algorithm>
#include <ctime>
#include <utility>


#include "kev/error.h"
#include "kev/tokenizer.h"

namespace kev {

namespace {

bool contains(std::string_view s, std::string_view needle) { return s.find(needle) != std::string_view::npos; }

// The default system prompt a ChatML template writes when the conversation has none:
// a literal "<|im_start|>system\n....<|im_end|>" with no expression inside. The newline is
// either real or the two characters \n inside a Jinja string.
std::string chatml_default_system(std::string_view source) {
    const std::string open = "<|im_start|>system";
    const std::string close = "<|im_end|>";
    std::size_t at = 0;
    while ((at = source.find(open, at)) != std::string_view::npos) {
        std::size_t p = at + open.size();
        at = p;
        if (source.compare(p, 2, "\\n") == 0) p += 2;
        else if (p < source.size() && source[p] == '\n') p += 1;
        else continue;
        const std::size_t end = source.find(close, p);
        if (end == std::string_view::npos) continue;
        const std::string_view body = source.substr(p, end - p);
        // A literal only: no quote (which would end the Jinja string) and no expression.
        if (body.empty() || body.find_first_of("'\"") != std::string_view::npos ||
            body.find("{{") != std::string_view::npos || body.find("{%") != std::string_view::npos)
            continue;
        // Undo the Jinja string escapes (\n, \t, \\) the literal may use.
        std::string text;
        for (std::size_t i = 0; i < body.size(); ++i) {
            if (body[i] == '\\' && i + 1 < body.size()) {
                const char e = body[++i];
                text += e == 'n' ? '\n' : e == 't' ? '\t' : e;
            } else {
                text += body[i];
            }
        }
        return text;
    }
    return std::string();
}

std::string today() {
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    char buf[32];
    std::strftime(buf, sizeof buf, "%d %b %Y", &local);
    return buf;
}

}  // namespace

const char* to_string(ChatFormat format) {
    switch (format) {
        case ChatFormat::ChatML: return "chatml";
        case ChatFormat::Llama3: return "llama3";
        case ChatFormat::Llama2: return "llama2";
        case ChatFormat::Mistral: return "mistral";
        case ChatFormat::Gemma: return "gemma";
        case ChatFormat::Phi3: return "phi3";
    }
    return "?";
}

std::optional<ChatFormat> chat_format_from_string(std::string_view name) {
    for (ChatFormat f : {ChatFormat::ChatML, ChatFormat::Llama3, ChatFormat::Llama2, ChatFormat::Mistral, ChatFormat::Gemma,
                         ChatFormat::Phi3})
        if (name == to_string(f)) return f;
    return std::nullopt;
}

ChatTemplate ChatTemplate::for_format(ChatFormat format, const std::string& bos_text, const std::string& eos_text) {
    ChatTemplate t;
    t.format_ = format;
    t.bos_text_ = bos_text;
    if (!eos_text.empty()) t.eos_text_ = eos_text;
    return t;
}

ChatTemplate ChatTemplate::recognise(const Tokenizer& tokenizer) {
    return recognise(tokenizer.chat_template_source(), tokenizer.bos_text(), tokenizer.eos_text());
}

ChatTemplate ChatTemplate::recognise(std::string_view source, const std::string& bos_text, const std::string& eos_text) {
    if (source.empty())
        throw Error(ErrorCode::Unsupported, "the model has no chat template; choose a chat format");
    ChatTemplate t;
    t.bos_text_ = bos_text;
    if (!eos_text.empty()) t.eos_text_ = eos_text;
    if (contains(source, "<|im_start|>")) {
        t.format_ = ChatFormat::ChatML;
        t.default_system_ = chatml_default_system(source);
        t.thinking_switch_ = contains(source, "enable_thinking");
        t.drops_reasoning_ = contains(source, "split('</think>')");
        t.keeps_late_reasoning_ = t.drops_reasoning_ && contains(source, "last_query_index");
    } else if (contains(source, "<|start_header_id|>")) {
        t.format_ = ChatFormat::Llama3;
        t.llama31_dates_ = contains(source, "Cutting Knowledge Date");
        t.llama_today_ = contains(source, "strftime_now");
    } else if (contains(source, "<<SYS>>")) {
        t.format_ = ChatFormat::Llama2;
    } else if (contains(source, "[INST]")) {
        t.format_ = ChatFormat::Mistral;
        t.space_after_eos_ = contains(source, "eos_token + ' '");
    } else if (contains(source, "<start_of_turn>")) {
        t.format_ = ChatFormat::Gemma;
    } else if (contains(source, "<|user|>") ||
               (contains(source, "'<|' + message['role'] + '|>'") && contains(source, "<|end|>"))) {
        t.format_ = ChatFormat::Phi3;
        // Phi-4-mini joins the tag and the text: '<|' + message['role'] + '|>' + message['content'].
        t.role_newline_ = !contains(source, "'|>' + message['content']");
        t.phi_bos_ = contains(source, "bos_token");
    } else {
        throw Error(ErrorCode::Unsupported,
                    "the model's chat template is not one Kev recognises (ChatML, Llama 3, Llama 2, Mistral, Gemma, Phi-3); "
                    "choose a chat format");
    }
    return t;
}

std::string ChatTemplate::render(const ChatPrompt& prompt, Thinking thinking) const {
    return render_marked(prompt, thinking).text;
}

namespace {

// The byte length of the character at s[i] when Python's str.isspace() holds for it, else
// 0. Jinja's trim and Python's strip() remove these, not only ASCII blanks.
std::size_t space_at(std::string_view s, std::size_t i) {
    const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
    const unsigned char c = b(i);
    if (c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F)) return 1;
    if (c == 0xC2 && i + 1 < s.size() && (b(i + 1) == 0x85 || b(i + 1) == 0xA0)) return 2;
    if (i + 2 >= s.size()) return 0;
    const unsigned cp = (c & 0x0Fu) << 12 | (b(i + 1) & 0x3Fu) << 6 | (b(i + 2) & 0x3Fu);
    if ((c & 0xF0) != 0xE0 || (b(i + 1) & 0xC0) != 0x80 || (b(i + 2) & 0xC0) != 0x80) return 0;
    const bool space = cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
                       cp == 0x202F || cp == 0x205F || cp == 0x3000;
    return space ? 3 : 0;
}

// [begin, end) of s without the white space Python's str.strip() removes.
std::pair<std::size_t, std::size_t> strip_bounds(std::string_view s) {
    std::size_t b = 0, e = s.size();
    while (b < e) {
        const std::size_t n = space_at(s, b);
        if (n == 0) break;
        b += n;
    }
    while (e > b) {
        std::size_t start = e - 1;  // the start of the last character
        while (start > b && e - start < 4 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
        if (space_at(s, start) != e - start) break;
        e = start;
    }
    return {b, e};
}

// Python's s.lstrip('\n') / rstrip('\n') / strip('\n').
std::string_view lstrip_newlines(std::string_view s) { return s.substr(std::min(s.size(), s.find_first_not_of('\n'))); }
std::string_view rstrip_newlines(std::string_view s) {
    const std::size_t last = s.find_last_not_of('\n');
    return last == std::string_view::npos ? std::string_view() : s.substr(0, last + 1);
}

// Text built from template pieces and prompt pieces, remembering where the latter are.
struct Marked {
    std::string text;
    std::vector<TextRange> user;

    Marked& tmpl(std::string_view s) {
        text += s;
        return *this;
    }
    Marked& typed(std::string_view s) {
        if (!s.empty()) user.push_back(TextRange{text.size(), text.size() + s.size()});
        text += s;
        return *this;
    }
    Marked& append(const Marked& m) {
        for (const TextRange& r : m.user) user.push_back(TextRange{text.size() + r.begin, text.size() + r.end});
        text += m.text;
        return *this;
    }
    // Python's str.strip() (Jinja's trim), with the ranges cut to what is kept.
    Marked stripped() const {
        const auto [b, e] = strip_bounds(text);
        Marked out;
        out.text = text.substr(b, e - b);
        for (const TextRange& r : user) {
            const std::size_t lo = std::max(r.begin, b), hi = std::min(r.end, e);
            if (lo < hi) out.user.push_back(TextRange{lo - b, hi - b});
        }
        return out;
    }
};

Marked typed(std::string_view s) { return Marked().typed(s); }
Marked trimmed(std::string_view s) { return typed(s).stripped(); }

// Qwen3's template reads an answer that holds "</think>" as reasoning + content: the text
// after the last "</think>" (leading newlines dropped) and the text before the first one,
// from its last "<think>" on, without the newlines around it.
struct Reasoned {
    std::string_view reasoning;
    std::string_view content;
};
Reasoned split_reasoning(std::string_view answer) {
    const std::string_view close = "</think>", open = "<think>";
    const std::size_t last = answer.rfind(close);
    if (last == std::string_view::npos) return {std::string_view(), answer};
    std::string_view reasoning = rstrip_newlines(answer.substr(0, answer.find(close)));
    const std::size_t o = reasoning.rfind(open);
    if (o != std::string_view::npos) reasoning = reasoning.substr(o + open.size());
    return {lstrip_newlines(reasoning), lstrip_newlines(answer.substr(last + close.size()))};
}

bool wrapped_tool_response(std::string_view s) {
    const std::string_view open = "<tool_response>", close = "</tool_response>";
    return s.size() >= open.size() && s.compare(0, open.size(), open) == 0 && s.size() >= close.size() &&
           s.compare(s.size() - close.size(), close.size(), close) == 0;
}

}  // namespace

ChatTemplate::Rendered ChatTemplate::render_marked(const ChatPrompt& prompt, Thinking thinking) const {
    Marked out;
    const std::vector<ChatTurn>& history = prompt.history;
    switch (format_) {
        case ChatFormat::ChatML: {
            if (prompt.system) out.tmpl("<|im_start|>system\n").typed(*prompt.system).tmpl("<|im_end|>\n");
            else if (!default_system_.empty()) out.tmpl("<|im_start|>system\n" + default_system_ + "<|im_end|>\n");
            // Qwen3 keeps the reasoning of answers after the last user query (the last user
            // message not wrapped in <tool_response> tags); the others lose it.
            std::size_t last_query = history.size();
            if (keeps_late_reasoning_ && wrapped_tool_response(prompt.user)) {
                while (last_query > 0 && wrapped_tool_response(history[last_query - 1].user)) --last_query;
                if (last_query == 0) last_query = history.size();  // none: the template's default, the last message
                else --last_query;
            }
            for (std::size_t i = 0; i < history.size(); ++i) {
                out.tmpl("<|im_start|>user\n").typed(history[i].user).tmpl("<|im_end|>\n<|im_start|>assistant\n");
                if (!drops_reasoning_) {
                    out.typed(history[i].assistant);
                } else {
                    const Reasoned r = split_reasoning(history[i].assistant);
                    if (i >= last_query && !r.reasoning.empty()) {
                        out.tmpl("<think>\n").typed(rstrip_newlines(r.reasoning)).tmpl("\n</think>\n\n");
                        out.typed(lstrip_newlines(r.content));
                    } else {
                        out.typed(r.content);
                    }
                }
                out.tmpl("<|im_end|>\n");
            }
            out.tmpl("<|im_start|>user\n").typed(prompt.user).tmpl("<|im_end|>\n<|im_start|>assistant\n");
            // Qwen3: enable_thinking=false writes an empty thinking block; true writes nothing.
            if (thinking_switch_ && thinking == Thinking::Off) out.tmpl("<think>\n\n</think>\n\n");
            break;
        }
        case ChatFormat::Llama3: {
            out.tmpl(bos_text_);
            if (llama31_dates_) {
                // Llama 3.1's template: date_string defaults to "26 Jul 2024"; 3.2's asks
                // strftime_now("%d %b %Y"), which transformers answers with today's date.
                out.tmpl("<|start_header_id|>system<|end_header_id|>\n\n"
                         "Cutting Knowledge Date: December 2023\nToday Date: " +
                         (llama_today_ ? today() : std::string("26 Jul 2024")) + "\n\n");
                if (prompt.system) out.append(trimmed(*prompt.system));
                out.tmpl("<|eot_id|>");
            } else if (prompt.system) {
                out.tmpl("<|start_header_id|>system<|end_header_id|>\n\n").append(trimmed(*prompt.system)).tmpl("<|eot_id|>");
            }
            const auto turn = [&](const char* role, std::string_view text) {
                out.tmpl(std::string("<|start_header_id|>") + role + "<|end_header_id|>\n\n").append(trimmed(text)).tmpl("<|eot_id|>");
            };
            for (const ChatTurn& t : history) {
                turn("user", t.user);
                turn("assistant", t.assistant);
            }
            turn("user", prompt.user);
            out.tmpl("<|start_header_id|>assistant<|end_header_id|>\n\n");
            break;
        }
        case ChatFormat::Llama2: {
            // Every user turn opens with BOS; the system block goes into the first one only;
            // answers are written " answer </s>", each text stripped.
            const auto user_turn = [&](const Marked& content) {
                out.tmpl(bos_text_ + "[INST] ").append(content.stripped()).tmpl(" [/INST]");
            };
            Marked first;
            if (prompt.system) first.tmpl("<<SYS>>\n").typed(*prompt.system).tmpl("\n<</SYS>>\n\n");
            first.typed(history.empty() ? prompt.user : history.front().user);
            user_turn(first);
            for (std::size_t i = 0; i < history.size(); ++i) {
                out.tmpl(" ").append(trimmed(history[i].assistant)).tmpl(" " + eos_text_);
                user_turn(typed(i + 1 < history.size() ? history[i + 1].user : prompt.user));
            }
            break;
        }
        case ChatFormat::Mistral: {
            // Kev's Mistral form is Mistral-7B-Instruct's '[INST] ' + user + ' [/INST]' with
            // answers closed by EOS, and the system message folded into the first user turn.
            out.tmpl(bos_text_ + "[INST] ");
            if (prompt.system) out.typed(*prompt.system).tmpl("\n\n");
            for (const ChatTurn& t : history) {
                out.typed(t.user).tmpl(" [/INST]").typed(t.assistant).tmpl(eos_text_ + (space_after_eos_ ? " " : "") + "[INST] ");
            }
            out.typed(prompt.user).tmpl(" [/INST]");
            break;
        }
        case ChatFormat::Gemma: {
            // Gemma 3 folds the system message into the first user turn (not trimmed; the
            // user's text is). Gemma 2's template refuses a system message; Kev folds it the
            // same way rather than drop it. Answers are the "model" role's turns.
            out.tmpl(bos_text_ + "<start_of_turn>user\n");
            if (prompt.system) out.typed(*prompt.system).tmpl("\n\n");
            for (const ChatTurn& t : history) {
                out.append(trimmed(t.user)).tmpl("<end_of_turn>\n<start_of_turn>model\n");
                out.append(trimmed(t.assistant)).tmpl("<end_of_turn>\n<start_of_turn>user\n");
            }
            out.append(trimmed(prompt.user)).tmpl("<end_of_turn>\n<start_of_turn>model\n");
            break;
        }
        case ChatFormat::Phi3: {
            const std::string nl = role_newline_ ? "\n" : "";
            const auto turn = [&](const char* role, std::string_view text) {
                out.tmpl(std::string("<|") + role + "|>" + nl).typed(text).tmpl("<|end|>" + nl);
            };
            if (phi_bos_) out.tmpl(bos_text_);
            if (prompt.system) turn("system", *prompt.system);
            for (const ChatTurn& t : history) {
                turn("user", t.user);
                turn("assistant", t.assistant);
            }
            turn("user", prompt.user);
            out.tmpl("<|assistant|>" + nl);
            break;
        }
    }
    return Rendered{std::move(out.text), std::move(out.user)};
}

}  // namespace kev
