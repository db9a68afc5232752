// A loaded model with everything needed to answer questions: weights, tokenizer and
// chat format, found from one path (a .gguf file or a Hugging Face folder). The UI
// worker and kev-cli both start here.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "kev/chat_template.h"
#include "kev/generator.h"
#include "kev/lora.h"
#include "kev/model.h"
#include "kev/tokenizer.h"

namespace kev {

struct SessionOptions {
    LoadOptions load;
    // Overrides the chat format recognised from the model's template (needed when the
    // template is missing or not one Kev recognises).
    std::optional<ChatFormat> chat_format;
};

class Session {
public:
    // Throws kev::Error naming the file and what is wrong. An unrecognised chat template
    // is not an error here: chat() is then empty and chat_error() says why.
    static std::unique_ptr<Session> open(const std::string& path, const SessionOptions& options = {});

    const std::string& path() const { return path_; }
    const Model& model() const { return *model_; }
    const Tokenizer& tokenizer() const { return *tokenizer_; }
    const std::optional<ChatTemplate>& chat() const { return chat_; }
    const std::string& chat_error() const { return chat_error_; }
    Generator generator() const { return Generator(*model_, tokenizer_.get(), chat_); }
    double load_seconds() const { return load_s_; }

    // LoRA: loads a PEFT adapter folder, checked against this model, and attaches it
    // (replacing any other). On failure (kev::Error) the model and the attached adapter
    // are unchanged. Cards then choose it with CardRequest::lora.
    void load_lora(const std::string& dir);
    void clear_lora();
    const LoraAdapter* lora() const { return model_->lora().get(); }

private:
    std::string path_;
    std::unique_ptr<Model> model_;
    std::unique_ptr<Tokenizer> tokenizer_;
    std::optional<ChatTemplate> chat_;
    std::string chat_error_;
    double load_s_ = 0.0;
};

}  // namespace kev
