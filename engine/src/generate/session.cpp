#include "kev/session.h"

#include <chrono>
#include <sys/stat.h>

#include "kev/error.h"
#include "kev/gguf.h"
#include "kev/model.h"
#include "kev/safetensors.h"

namespace kev {

namespace {

bool is_dir(const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool exists(const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0;
}

}  // namespace

std::unique_ptr<Session> Session::open(const std::string& path, const SessionOptions& options) {
    const auto t0 = std::chrono::steady_clock::now();
    if (!exists(path)) throw Error(ErrorCode::Io, path + ": no such file or folder");
    std::unique_ptr<Session> s(new Session());
    s->path_ = path;
    // Tokenizer first: it is quick, and a model without one cannot answer anything.
    std::string tokenizer_file = path;
    if (is_dir(path)) {
        if (exists(path + "/tokenizer.json")) {
            tokenizer_file = path + "/tokenizer.json";
            s->tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::from_hf_dir(path));
        } else if (exists(path + "/tokenizer.model")) {
            tokenizer_file = path + "/tokenizer.model";
            const std::string config = path + "/tokenizer_config.json";
            s->tokenizer_ = std::make_unique<Tokenizer>(
                Tokenizer::from_sentencepiece(path + "/tokenizer.model", exists(config) ? config : std::string()));
        } else {
            throw Error(ErrorCode::Format, path + ": the folder has neither tokenizer.json nor tokenizer.model");
        }
    } else {
        refuse_pickle_checkpoint(path);  // named as what it is, not as a GGUF with a bad magic
        const auto gguf = GgufFile::open(path);
        s->tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::from_gguf(*gguf));
    }
    s->model_ = Model::load(path, options.load);
    // A tokenizer with more ids than the embedding has rows is another model's: its ids
    // would index past the embedding. Said here, naming the files, not at the first card.
    check_tokenizer_fits(s->model_->config(), s->tokenizer_->vocab_size(), tokenizer_file);
    if (options.chat_format) {
        s->chat_ = ChatTemplate::for_format(*options.chat_format, s->tokenizer_->bos_text(), s->tokenizer_->eos_text());
    } else {
        try {
            s->chat_ = ChatTemplate::recognise(*s->tokenizer_);
        } catch (const Error& e) {
            s->chat_error_ = e.what();
        }
    }
    s->load_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return s;
}

void Session::load_lora(const std::string& dir) { model_->attach_lora(load_lora_adapter(dir, *model_)); }

void Session::clear_lora() { model_->attach_lora(nullptr); }

}  // namespace kev
