#include "kev/chat_template.h"

#include <algorithm>
#include <ctime>


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

ChatTemplate ChatTemplate::for_format(ChatFormat format, const std::string& bos_text) {
    ChatTemplate t;
    t.format_ = format;
    t.bos_text_ = bos_text;
    return t;
}

ChatTemplate ChatTemplate::recognise(const Tokenizer& tokenizer) {
    return recognise(tokenizer.chat_template_source(), tokenizer.bos_text());
}

ChatTemplate ChatTemplate::recognise(std::string_view source, const std::string& bos_text) {
    if (source.empty())
        throw Error(ErrorCode::Unsupported, "the model has no chat template; choose a chat format");
    ChatTemplate t;
    t.bos_text_ = bos_text;
    if (contains(source, "<|im_start|>")) {
        t.format_ = ChatFormat::ChatML;
        t.default_system_ = chatml_default_system(source);
        t.thinking_switch_ = contains(source, "enable_thinking");
    } else if (contains(source, "<|start_header_id|>")) {
        t.format_ = ChatFormat::Llama3;
        t.llama31_dates_ = contains(source, "Cutting Knowledge Date");
        t.llama_today_ = contains(source, "strftime_now");
    } else if (contains(source, "<<SYS>>")) {
        t.format_ = ChatFormat::Llama2;
    } else if (contains(source, "[INST]")) {
        t.format_ = ChatFormat::Mistral;
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
    // Python's str.strip(), with the ranges cut to what is kept.
    Marked stripped() const {
        const char* ws = " \t\n\r\v\f";
        const std::size_t b = text.find_first_not_of(ws);
        Marked out;
        if (b == std::string::npos) return out;
        const std::size_t e = text.find_last_not_of(ws) + 1;
        out.text = text.substr(b, e - b);
        for (const TextRange& r : user) {
            const std::size_t lo = std::max(r.begin, b), hi = std::min(r.end, e);
            if (lo < hi) out.user.push_back(TextRange{lo - b, hi - b});
        }
        return out;
    }
};

Marked typed(std::string_view s) { return Marked().typed(s); }

}  // namespace

ChatTemplate::Rendered ChatTemplate::render_marked(const ChatPrompt& prompt, Thinking thinking) const {
    Marked out;
    switch (format_) {
        case ChatFormat::ChatML: {
            if (prompt.system) out.tmpl("<|im_start|>system\n").typed(*prompt.system).tmpl("<|im_end|>\n");
            else if (!default_system_.empty()) out.tmpl("<|im_start|>system\n" + default_system_ + "<|im_end|>\n");
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
                if (prompt.system) out.append(typed(*prompt.system).stripped());
                out.tmpl("<|eot_id|>");
            } else if (prompt.system) {
                out.tmpl("<|start_header_id|>system<|end_header_id|>\n\n").append(typed(*prompt.system).stripped()).tmpl("<|eot_id|>");
            }
            out.tmpl("<|start_header_id|>user<|end_header_id|>\n\n").append(typed(prompt.user).stripped()).tmpl("<|eot_id|>");
            out.tmpl("<|start_header_id|>assistant<|end_header_id|>\n\n");
            break;
        }
        case ChatFormat::Llama2: {
            Marked content;
            if (prompt.system) content.tmpl("<<SYS>>\n").typed(*prompt.system).tmpl("\n<</SYS>>\n\n");
            content.typed(prompt.user);
            out.tmpl(bos_text_ + "[INST] ").append(content.stripped()).tmpl(" [/INST]");
            break;
        }
        case ChatFormat::Mistral: {
            out.tmpl(bos_text_ + "[INST] ");
            if (prompt.system) out.typed(*prompt.system).tmpl("\n\n");
            out.typed(prompt.user).tmpl(" [/INST]");
            break;
        }
        case ChatFormat::Gemma: {
            // Gemma 3 folds the system message into the first user turn (not trimmed; the
            // user's text is). Gemma 2's template refuses a system message; Kev folds it the
            // same way rather than drop it.
            out.tmpl(bos_text_ + "<start_of_turn>user\n");
            if (prompt.system) out.typed(*prompt.system).tmpl("\n\n");
            out.append(typed(prompt.user).stripped()).tmpl("<end_of_turn>\n<start_of_turn>model\n");
            break;
        }
        case ChatFormat::Phi3: {
            const char* nl = role_newline_ ? "\n" : "";
            if (phi_bos_) out.tmpl(bos_text_);
            if (prompt.system) out.tmpl(std::string("<|system|>") + nl).typed(*prompt.system).tmpl(std::string("<|end|>") + nl);
            out.tmpl(std::string("<|user|>") + nl).typed(prompt.user).tmpl(std::string("<|end|>") + nl + "<|assistant|>" + nl);
            break;
        }
    }
    return Rendered{std::move(out.text), std::move(out.user)};
}

}  // namespace kev
