// SentencePiece tokenizers (Llama 2 / Mistral style tokenizer.model) through Kev's
// Tokenizer interface: ids and decoded text equal the sentencepiece library's on the
// tokenizer corpus, control tokens are parsed only when asked, and streaming decode
// drops the dummy-prefix space exactly as a full decode does.
//
// The model is trained by the reference script (tests/reference/tokenizer_reference.py
// sentencepiece) into the work folder: small (600 pieces), byte fallback, split digits.
#include <fstream>
#include <memory>

#include <QtTest>

#include <nlohmann/json.hpp>

#include "kev/chat_template.h"
#include "kev/detokenizer.h"
#include "kev/error.h"
#include "kev/gguf.h"
#include "kev/tokenizer.h"
#include "kev_test_env.h"

using kev::TokenId;
using nlohmann::json;

class TestSentencePiece : public QObject {
    Q_OBJECT

private:
    std::unique_ptr<kev::Tokenizer> sp_;
    json ref_;
    std::vector<std::string> texts_;

private Q_SLOTS:
    void initTestCase() {
        const QString dir = kevtest::workDir(QStringLiteral("sentencepiece"));
        kevtest::runReference(QStringLiteral("tokenizer_reference.py"),
                              {QStringLiteral("sentencepiece"), QStringLiteral("--corpus"),
                               kevtest::testDataDir() + QStringLiteral("/tokenizer_corpus/corpus.json"),
                               QStringLiteral("--out-dir"), dir});
        std::ifstream in((dir + QStringLiteral("/sp_reference.json")).toStdString());
        QVERIFY2(in.good(), "the reference script wrote no output (is sentencepiece installed in the venv?)");
        ref_ = json::parse(in);
        texts_ = ref_["texts"].get<std::vector<std::string>>();
        sp_ = std::make_unique<kev::Tokenizer>(
            kev::Tokenizer::from_sentencepiece((dir + QStringLiteral("/sp.model")).toStdString()));
    }

    void properties() {
        QCOMPARE(sp_->kind(), kev::TokenizerKind::SentencePiece);
        QCOMPARE(sp_->vocab_size(), ref_["vocab_size"].get<int>());
        QCOMPARE(sp_->special_ids().bos.value_or(-1), ref_["bos"].get<int>());
        QCOMPARE(sp_->special_ids().eos.value_or(-1), ref_["eos"].get<int>());
        QVERIFY(sp_->adds_bos());
        QVERIFY(sp_->strips_leading_space());
        QCOMPARE(sp_->bos_text(), std::string("<s>"));
        QVERIFY(sp_->is_end_of_generation(ref_["eos"].get<int>()));
        QCOMPARE(sp_->piece_to_id("</s>").value_or(-1), ref_["eos"].get<int>());
        QVERIFY(!sp_->piece_to_id("no such piece").has_value());
    }

    void corpusIdsAndDecode() {
        int failures = 0;
        for (std::size_t i = 0; i < texts_.size(); ++i) {
            const std::vector<TokenId> want = ref_["ids"][i].get<std::vector<TokenId>>();
            const std::vector<TokenId> got = sp_->encode(texts_[i], kev::SpecialTokens::Plain);
            if (got != want) {
                ++failures;
                qWarning("ids differ for text %zu", i);
                continue;
            }
            if (sp_->decode(got) != ref_["decoded"][i].get<std::string>()) {
                ++failures;
                qWarning("decode differs for text %zu", i);
            }
        }
        QCOMPARE(failures, 0);
    }

    void controlTokensParsedOnlyWhenAsked() {
        const auto bos = static_cast<TokenId>(ref_["bos"].get<int>());
        std::vector<TokenId> want{bos};
        for (const json& id : ref_["inst_ids"]) want.push_back(id.get<TokenId>());
        // The Llama 2 prompt Kev renders starts with the BOS text.
        const auto llama2 = kev::ChatTemplate::for_format(kev::ChatFormat::Llama2, sp_->bos_text());
        const std::string prompt = llama2.render({std::nullopt, "hi"});
        QCOMPARE(prompt, std::string("<s>[INST] hi [/INST]"));
        QCOMPARE(sp_->encode(prompt, kev::SpecialTokens::Parse), want);
        const std::vector<TokenId> plain = sp_->encode(prompt, kev::SpecialTokens::Plain);
        QVERIFY(std::find(plain.begin(), plain.end(), bos) == plain.end());
    }

    void streamingMatchesDecode() {
        for (const std::string& text : texts_) {
            const std::vector<TokenId> ids = sp_->encode(text, kev::SpecialTokens::Plain);
            kev::StreamDecoder stream(*sp_);
            std::string joined;
            for (TokenId id : ids) joined += stream.push(id);
            joined += stream.flush();
            QVERIFY2(joined == sp_->decode(ids), text.substr(0, 40).c_str());
        }
    }

    // The same vocabulary read from a GGUF (tokenizer.ggml.model "llama": pieces, scores,
    // types, as llama.cpp writes Llama 2 / Mistral / Gemma files): the same ids and text
    // as the sentencepiece library gives from the .model file.
    void ggufVocabularyEqualsTheModelFile() {
        const QString dir = kevtest::workDir(QStringLiteral("sentencepiece"));
        const auto gguf = kev::GgufFile::open((dir + QStringLiteral("/sp.gguf")).toStdString());
        const kev::Tokenizer tok = kev::Tokenizer::from_gguf(*gguf);
        QCOMPARE(tok.kind(), kev::TokenizerKind::SentencePiece);
        QCOMPARE(tok.vocab_size(), ref_["vocab_size"].get<int>());
        QCOMPARE(tok.special_ids().bos.value_or(-1), ref_["bos"].get<int>());
        QCOMPARE(tok.special_ids().eos.value_or(-1), ref_["eos"].get<int>());
        QVERIFY(tok.adds_bos());
        int failures = 0;
        for (std::size_t i = 0; i < texts_.size(); ++i) {
            const std::vector<TokenId> want = ref_["ids"][i].get<std::vector<TokenId>>();
            const std::vector<TokenId> got = tok.encode(texts_[i], kev::SpecialTokens::Plain);
            if (got != want || tok.decode(got) != ref_["decoded"][i].get<std::string>()) {
                if (++failures <= 5) qWarning("text %zu differs", i);
            }
        }
        QCOMPARE(failures, 0);
        QVERIFY(texts_.size() >= 300);
    }

    void missingModelIsAnIoError() {
        bool threw = false;
        try {
            kev::Tokenizer::from_sentencepiece("/nonexistent/tokenizer.model");
        } catch (const kev::Error& e) {
            threw = e.code() == kev::ErrorCode::Io;
        }
        QVERIFY(threw);
    }
};

QTEST_GUILESS_MAIN(TestSentencePiece)
#include "tst_sentencepiece.moc"
