// Chat prompts: [optional system, earlier user/assistant turns, user] -> the text a model
// expects before its answer.
//
// Kev does not run Jinja. It recognises the template families it knows from distinctive
// markers in the model's own template (tokenizer_config.json `chat_template`, GGUF
// `tokenizer.chat_template`) and renders them in C++, reproducing what transformers'
// apply_chat_template(..., add_generation_prompt=True) writes for [system?, user,
// assistant, ..., user], including each template's quirks (SmolLM2 and Qwen2/2.5 insert
// their default system prompt when none is given; Qwen3 has a thinking switch and drops
// the <think> reasoning of earlier answers; Llama 2 opens every user turn with BOS and
// writes the system block only in the first; Llama 2 and Mistral close earlier answers
// with EOS). A template Kev does not recognise is reported (Error Unsupported) and the
// caller chooses a format explicitly.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kev/tokenizer.h"

namespace kev {

enum class ChatFormat {
    ChatML,   // <|im_start|>role\n...<|im_end|>\n   (Qwen2/2.5/3, SmolLM2)
    Llama3,   // <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|>
    Llama2,   // <s>[INST] <<SYS>>\n...\n<</SYS>>\n\n... [/INST]
    Mistral,  // <s>[INST] system\n\nuser [/INST]
    Gemma,    // <bos><start_of_turn>user\nsystem\n\nuser<end_of_turn>\n<start_of_turn>model\n  (Gemma 2, 3)
    Phi3,     // <|system|>\n...<|end|>\n<|user|>\n...<|end|>\n<|assistant|>\n  (Phi-3; Phi-4-mini without the newlines)
};

const char* to_string(ChatFormat format);
// "chatml", "llama3", "llama2", "mistral", "gemma", "phi3"; empty for an unknown name.
std::optional<ChatFormat> chat_format_from_string(std::string_view name);

// Qwen3-style templates can open the answer with an empty thinking block (Off, the
// default: the model answers directly) or leave the model free to think (On).
enum class Thinking { Off, On };

// One earlier exchange of a conversation: what the user wrote and what was answered.
struct ChatTurn {
    std::string user;
    std::string assistant;
};

// The conversation: system, history in order, then `user`, the message to answer. The
// history comes last among the fields so that {system, user} still initialises a
// one-message prompt.
struct ChatPrompt {
    std::optional<std::string> system;  // nullopt: no system message (a default may apply)
    std::string user;
    std::vector<ChatTurn> history = {};  // earlier turns, before `user` in the conversation
};

class ChatTemplate {
public:
    // Recognises the family of `jinja_source`. `bos_text` and `eos_text` are the
    // tokenizer's BOS and EOS spellings, written where the template writes bos_token and
    // eos_token (Llama 2 and Mistral close earlier answers with EOS; an empty `eos_text`
    // writes their usual "</s>"). Throws Error(Unsupported) when the source is empty or
    // matches no known family.
    static ChatTemplate recognise(std::string_view jinja_source, const std::string& bos_text,
                                  const std::string& eos_text = {});
    // The template of a tokenizer's files (its chat_template_source(), bos_text(), eos_text()).
    static ChatTemplate recognise(const Tokenizer& tokenizer);
    // A chosen format, for models whose template is missing or not recognised.
    static ChatTemplate for_format(ChatFormat format, const std::string& bos_text = {}, const std::string& eos_text = {});

    ChatFormat format() const { return format_; }
    // The system prompt the template inserts when the conversation has none ("" = none).
    const std::string& default_system() const { return default_system_; }
    bool has_thinking_switch() const { return thinking_switch_; }

    // The prompt text, ending where the assistant's answer begins. Encode it with
    // SpecialTokens::Parse (it contains the template's special tokens, and BOS where the
    // template writes one, so do not add another).
    std::string render(const ChatPrompt& prompt, Thinking thinking = Thinking::Off) const;

    // The same text, with the byte ranges that came from the prompt (system, user and
    // earlier assistant text) rather than the template: encode it with
    // Tokenizer::encode(text, user_text), so special-token text a user typed, or a model
    // generated, stays text.
    struct Rendered {
        std::string text;
        std::vector<TextRange> user_text;
    };
    Rendered render_marked(const ChatPrompt& prompt, Thinking thinking = Thinking::Off) const;

private:
    ChatFormat format_ = ChatFormat::ChatML;
    std::string bos_text_;
    std::string eos_text_ = "</s>";
    std::string default_system_;
    bool thinking_switch_ = false;
    // Qwen3 / QwQ: earlier answers are written without their <think>...</think> reasoning
    // (Qwen3 keeps it for answers after the last real user query; see render_marked).
    bool drops_reasoning_ = false;
    bool keeps_late_reasoning_ = false;
    // Mistral-7B-Instruct v0.1 writes a space after the EOS that closes an answer.
    bool space_after_eos_ = false;
    // Llama 3.1+: a system block with the knowledge cut-off and date is always written;
    // 3.2+ templates date it today (strftime_now), 3.1 with a fixed default date.
    bool llama31_dates_ = false;
    bool llama_today_ = false;
    // Phi-3 writes a newline after each role tag, Phi-4-mini none; older Phi-3 templates
    // open with bos_token.
    bool role_newline_ = true;
    bool phi_bos_ = false;
};

}  // namespace kev
