// kev-cli as a script sees it: arguments, exit codes, the JSON schema, KEV_TEMPERATURE,
// tokenize, --verify-isolation on the built-in model, and Ctrl-C mid-run.
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QtTest>

#include <algorithm>
#include <csignal>

#include "kev/chat_template.h"
#include "kev/gguf.h"
#include "kev/tokenizer.h"
#include "kev_test_env.h"

namespace {

struct Run {
    int code = -1;
    QByteArray out, err;
};

Run cli(const QStringList& args, const QMap<QString, QString>& env = {}, const QByteArray& input = {}) {
    QProcess p;
    QProcessEnvironment e = QProcessEnvironment::systemEnvironment();
    e.remove("KEV_TEMPERATURE");
    for (auto it = env.begin(); it != env.end(); ++it) e.insert(it.key(), it.value());
    p.setProcessEnvironment(e);
    p.start(kevtest::binDir() + "/kev-cli", args);
    p.waitForStarted();
    if (!input.isEmpty()) p.write(input);
    p.closeWriteChannel();
    p.waitForFinished(10 * 60 * 1000);
    return {p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1, p.readAllStandardOutput(),
            p.readAllStandardError()};
}

QString writeFile(const QString& name, const QByteArray& content) {
    const QString path = kevtest::workDir() + "/" + name;
    QFile f(path);
    if (!f.open(QIODevice::WriteOnly)) qFatal("cannot write %s", qPrintable(path));
    f.write(content);
    return path;
}

QJsonObject json(const Run& r) {
    QJsonParseError error;
    const QJsonDocument d = QJsonDocument::fromJson(r.out, &error);
    if (error.error != QJsonParseError::NoError) qWarning() << "not JSON:" << r.out << r.err;
    return d.object();
}

}  // namespace

class TestCli : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void usageErrorsExitWithTwo_data() {
        QTest::addColumn<QStringList>("args");
        QTest::addColumn<QString>("message");
        QTest::newRow("unknown option") << QStringList{"--frobnicate", "q"} << "unknown option '--frobnicate'";
        QTest::newRow("no question") << QStringList{} << "no question given";
        QTest::newRow("not a number") << QStringList{"--temperature", "warm", "q"} << "--temperature expects a number";
        QTest::newRow("top-p out of range") << QStringList{"--top-p", "1.5", "q"} << "top-p 1.5 is outside";
        QTest::newRow("negative temperature") << QStringList{"--temperature", "-1", "q"} << "temperature";
        QTest::newRow("missing value") << QStringList{"q", "--seed"} << "--seed needs a value";
        QTest::newRow("bad precision") << QStringList{"--precision", "int3", "q"} << "--precision must be";
        QTest::newRow("json and jsonl") << QStringList{"--json", "--jsonl", "q"} << "--json and --jsonl exclude each other";
        QTest::newRow("lora scale out of range") << QStringList{"--lora", "demo", "--lora-scale", "2.5", "q"} << "LoRA scale";
    }

    void usageErrorsExitWithTwo() {
        QFETCH(QStringList, args);
        QFETCH(QString, message);
        const Run r = cli(args);
        QCOMPARE(r.code, 2);
        QVERIFY2(r.err.contains(message.toUtf8()), r.err.constData());
        QVERIFY2(!r.err.contains("terminate called"), "no stack dump for a user mistake");
    }

    void badQuestionFileIsNamed() {
        const QString path = kevtest::workDir() + "/bad.json";
        QFile f(path);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write("[{\"question\": \"ok\"}, {\"question\": 3}]");
        f.close();
        const Run r = cli({"--file", path});
        QCOMPARE(r.code, 1);  // a file error, not a usage error (more in tst_cli_hostile)
        QVERIFY2(r.err.contains("bad.json item 2"), r.err.constData());
    }

    void missingModelIsAModelError() {
        const Run r = cli({"--model", "/nonexistent/m.gguf", "q"});
        QCOMPARE(r.code, 1);
        QVERIFY2(r.err.contains("/nonexistent/m.gguf: no such file or folder"), r.err.constData());
    }

    void helpReadsWell() {
        const Run r = cli({"--help"});
        QCOMPARE(r.code, 0);
        for (const char* s : {"--verify-isolation", "--json", "--file", "KEV_TEMPERATURE", "tokenize", "--chat-format",
                              "143", "non-finite", "16 MiB"})
            QVERIFY2(r.out.contains(s), s);
    }

    // 4-bit answers, and close to fp32: fp32's first greedy token is among 4-bit's three
    // most likely. (Not "Paris" itself: on this question the Q4_1 model's first token is a
    // near-tie, 0.01 in logprob between "L" and "The", measured with fp32 logits.)
    void fourBitAnswersAndInfoShowsTheFormats() {
        const QStringList q = {"--json", "--max-new-tokens", "8", "--logprobs", "3", "What is the capital of France?"};
        const Run r = cli(QStringList{"--precision", "4bit"} + q);
        QCOMPARE(r.code, 0);
        const QJsonArray cards = json(r)["cards"].toArray();
        QCOMPARE(cards.size(), 1);
        QVERIFY2(!cards[0].toObject()["text"].toString().trimmed().isEmpty(), r.out.constData());
        const Run f = cli(QStringList{"--precision", "fp32"} + q);
        const QJsonObject fp32 = json(f)["cards"].toArray()[0].toObject();
        QVERIFY2(fp32["text"].toString().contains(QStringLiteral("Paris")), f.out.constData());
        const int first = fp32["tokens"].toArray()[0].toInt();
        bool found = false;
        for (const auto& alt : cards[0].toObject()["logprobs"].toArray()[0].toArray())
            found = found || alt.toObject()["token"].toInt() == first;
        QVERIFY2(found, r.out.constData());
        const Run i = cli({"info"});
        QCOMPARE(i.code, 0);
        QVERIFY2(i.out.contains("Q4_1 x210"), i.out.constData());
    }

    void jsonSchema() {
        const Run r = cli({"--json", "--max-new-tokens", "8", "--seed", "5", "--temperature", "0.7",
                           "What is the capital of France?", "Name a color."});
        QCOMPARE(r.code, 0);
        const QJsonObject o = json(r);
        QCOMPARE(o["packed"].toBool(), true);
        const QJsonArray cards = o["cards"].toArray();
        QCOMPARE(cards.size(), 2);
        for (int i = 0; i < 2; ++i) {
            const QJsonObject c = cards[i].toObject();
            QVERIFY(c["text"].isString());
            QVERIFY(!c["tokens"].toArray().isEmpty());
            QVERIFY(c["tokens"].toArray().size() <= 8);
            const QString finish = c["finish_reason"].toString();
            QVERIFY2(finish == "max tokens" || finish == "end of sequence", qPrintable(finish));
            QCOMPARE(c["seed"].toInteger(), qint64(5 + i));  // --seed S gives S, S+1, ...
            QCOMPARE(float(c["temperature"].toDouble()), 0.7f);
            const QJsonObject st = c["stats"].toObject();
            for (const char* k : {"prompt_tokens", "generated_tokens", "time_to_first_token_s", "tokens_per_s"})
                QVERIFY2(st.contains(k), k);
            QCOMPARE(st["generated_tokens"].toInt(), c["tokens"].toArray().size());
        }
    }

    void jsonlGivesOneLinePerQuestion() {
        const Run r = cli({"--jsonl", "--max-new-tokens", "6", "What is 2+2?", "Name a color.", "Say hi."});
        QCOMPARE(r.code, 0);
        const QList<QByteArray> lines = r.out.trimmed().split('\n');
        QCOMPARE(lines.size(), 3);
        for (int i = 0; i < lines.size(); ++i) {
            const QJsonObject c = QJsonDocument::fromJson(lines[i]).object();
            QCOMPARE(c["index"].toInt(), i + 1);
            QVERIFY(c["text"].isString());
            QVERIFY(!c["tokens"].toArray().isEmpty());
            QVERIFY(c["stats"].toObject().contains("tokens_per_s"));
            QCOMPARE(c["packed"].toBool(), true);
        }
    }

    void pipedOutputIsPlainAndLabelled() {
        const Run r = cli({"--max-new-tokens", "6", "What is 2+2?", "Name a color."});
        QCOMPARE(r.code, 0);
        QVERIFY2(!r.out.contains('\x1b'), "no escape sequences into a pipe");
        QVERIFY(r.out.contains("--- [1] What is 2+2?"));
        QVERIFY(r.out.contains("--- [2] Name a color."));
    }

    // On a terminal (a pseudo-terminal made by script(1)), several answers stream into
    // labelled blocks redrawn in place, then every answer is printed in full: the same
    // text as the plain output.
    void severalAnswersStreamSideBySideOnATerminal() {
        const QStringList qs{"What is 2+2?", "Name a color.", "Say hello in French."};
        const Run plain = cli({"--json", "--max-new-tokens", "12", qs[0], qs[1], qs[2]});
        QCOMPARE(plain.code, 0);
        QString command = "stty cols 100 rows 30; exec '" + kevtest::binDir() + "/kev-cli' --max-new-tokens 12";
        for (const QString& q : qs) command += " '" + q + "'";
        QProcess p;
        p.start("script", {"-qec", command, "/dev/null"});
        QVERIFY(p.waitForFinished(5 * 60 * 1000));
        QCOMPARE(p.exitCode(), 0);
        const QString out = QString::fromUtf8(p.readAllStandardOutput()).remove('\r');
        QVERIFY2(out.contains("\x1b[J"), "the live view redraws in place");
        QVERIFY2(out.contains("cards answering"), "the live view has a footer with the pack's progress");
        const QJsonArray cards = json(plain)["cards"].toArray();
        for (int i = 0; i < qs.size(); ++i) {
            QVERIFY2(out.contains(QStringLiteral("[%1] ").arg(i + 1) + "\x1b[0m" + qs[i]), qPrintable(qs[i]));
            // The final, full print: label, then the whole answer.
            const QString full = QStringLiteral("--- [%1] %2\x1b[0m\n%3\n").arg(i + 1).arg(qs[i], cards[i].toObject()["text"].toString());
            QVERIFY2(out.contains(full), qPrintable(full));
        }
    }

    void infoDescribesTheModel() {
        const Run r = cli({"info", "--json"});
        QCOMPARE(r.code, 0);
        const QJsonObject o = json(r);
        QCOMPARE(o["architecture"].toString(), QStringLiteral("llama"));
        QCOMPARE(o["layers"].toInt(), 30);
        QCOMPARE(o["hidden_size"].toInt(), 576);
        QCOMPARE(o["context_length"].toInt(), 8192);
        QCOMPARE(o["chat_format"].toString(), QStringLiteral("chatml"));
        QVERIFY(o["tensor_types"].toObject().contains("Q4_1"));
        QVERIFY(o["parameters"].toInteger() > 100000000);
        const Run text = cli({"info"});
        QCOMPARE(text.code, 0);
        for (const char* s : {"architecture llama", "context      8192 tokens", "chat format  chatml"})
            QVERIFY2(text.out.contains(s), s);
    }

    // Windowed families end to end: random tiny Gemma 2 / Gemma 3 / Mistral models with the
    // Qwen tokenizer (vocabulary widened to fit it). info names the family and its windows;
    // --verify-isolation packs four cards whose chat prompts are longer than the 16- or
    // 24-token windows, greedy and sampled with a shared context, fp32, half and 4-bit:
    // every card equals its solo run.
    void windowedFamiliesKeepIsolation_data() {
        QTest::addColumn<QString>("preset");
        QTest::addColumn<QString>("precision");
        QTest::addColumn<QString>("features");
        for (const char* precision : {"fp32", "half", "4bit"}) {
            QTest::addRow("gemma2 %s", precision) << "tiny-gemma2" << precision << "sliding window 16 on 2 of 3 layers";
            QTest::addRow("gemma3 %s", precision) << "tiny-gemma3" << precision << "sliding window 16 on 3 of 4 layers";
            QTest::addRow("mistral %s", precision) << "tiny-mistral" << precision << "sliding window 24 on every layer";
        }
    }
    void windowedFamiliesKeepIsolation() {
        QFETCH(QString, preset);
        QFETCH(QString, precision);
        QFETCH(QString, features);
        const QString dir = kevtest::workDir(QStringLiteral("windowed")) + QLatin1Char('/') + preset;
        if (!QFile::exists(dir + QStringLiteral("/tokenizer.json"))) {
            QVERIFY(!kevtest::runReference(QStringLiteral("make_random_model.py"),
                                           {QStringLiteral("--preset"), preset, QStringLiteral("--out"), dir,
                                            QStringLiteral("--set"), QStringLiteral("vocab_size=151936")})
                         .isEmpty());
            for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
                QVERIFY(QFile::copy(kevtest::testDataDir() + QStringLiteral("/qwen-tokenizer/") + QLatin1String(f),
                                    dir + QLatin1Char('/') + QLatin1String(f)));
        }
        const Run info = cli({"info", "--json", "--model", dir});
        QVERIFY2(info.code == 0, info.err.constData());
        const QJsonObject o = json(info);
        QCOMPARE(o["architecture"].toString(), preset.mid(5));
        QVERIFY2(o["features"].toString().contains(features), qPrintable(o["features"].toString()));
        // Its windowed layers keep the window, a 128-row prompt chunk and no more per card.
        QCOMPARE(o["window_kept_per_card"].toInt(), std::max(16, o["sliding_window"].toInt()) + 127);
        QStringList args = {"--json", "--verify-isolation", "--model", dir, "--precision", precision,
                            "--max-new-tokens", "12", "--temperature", "0.9", "--seed", "5", "--shared-context",
                            "Kev answers several questions in one packed forward pass; each card is isolated."};
        args << "What is the capital of France?" << "Name a colour." << "Write a haiku about the sea."
             << "What is 12 times 12?";
        const Run r = cli(args);
        QVERIFY2(r.code == 0, r.err.constData());
        const QJsonObject v = json(r);
        QCOMPARE(v["isolation_differences"].toArray().size(), 0);
        QCOMPARE(v["cards"].toArray().size(), 4);
        const Run greedy = cli({"--json", "--verify-isolation", "--model", dir, "--precision", precision, "--max-new-tokens",
                                "12", "What is the capital of France?", "Name a colour.", "Write a haiku about the sea."});
        QVERIFY2(greedy.code == 0, greedy.err.constData());
        QCOMPARE(json(greedy)["isolation_differences"].toArray().size(), 0);
    }

    void aPackTooBigForMemoryExitsWithFour() {
        QStringList args{"--max-new-tokens", "8000"};
        for (int i = 0; i < 1000; ++i) args << QStringLiteral("question %1").arg(i);
        const Run r = cli(args);
        QCOMPARE(r.code, 4);
        QVERIFY2(r.err.contains("remove"), r.err.constData());  // says what to change
    }

    void logprobsAreReported() {
        const Run r = cli({"--json", "--logprobs", "3", "--max-new-tokens", "4", "Say hi."});
        QCOMPARE(r.code, 0);
        const QJsonObject c = json(r)["cards"].toArray()[0].toObject();
        const QJsonArray lp = c["logprobs"].toArray();
        QCOMPARE(lp.size(), c["tokens"].toArray().size());
        const QJsonArray first = lp[0].toArray();
        QCOMPARE(first.size(), 3);
        // Greedy: the chosen token is the most likely one.
        QCOMPARE(first[0].toObject()["token"].toInt(), c["tokens"].toArray()[0].toInt());
        QVERIFY(first[0].toObject()["logprob"].toDouble() >= first[1].toObject()["logprob"].toDouble());
    }

    void kevTemperatureGivesPerCardDefaults() {
        const Run r = cli({"--json", "--max-new-tokens", "2", "one?", "two?"}, {{"KEV_TEMPERATURE", "0,1.5"}});
        QCOMPARE(r.code, 0);
        const QJsonArray cards = json(r)["cards"].toArray();
        QCOMPARE(cards[0].toObject()["temperature"].toDouble(), 0.0);
        QCOMPARE(float(cards[1].toObject()["temperature"].toDouble()), 1.5f);
        // An explicit --temperature wins over the environment.
        const Run e = cli({"--json", "--max-new-tokens", "2", "--temperature", "0.25", "one?", "two?"},
                          {{"KEV_TEMPERATURE", "0,1.5"}});
        QCOMPARE(float(json(e)["cards"].toArray()[1].toObject()["temperature"].toDouble()), 0.25f);
        // A list of the wrong length is a usage error that says so.
        const Run bad = cli({"--max-new-tokens", "2", "one?", "two?"}, {{"KEV_TEMPERATURE", "0.1,0.2,0.3"}});
        QCOMPARE(bad.code, 2);
        QVERIFY2(bad.err.contains("KEV_TEMPERATURE"), bad.err.constData());
    }

    void fileQuestionsCarryTheirOwnSettings() {
        const QString path = kevtest::workDir() + "/questions.jsonl";
        QFile f(path);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write("{\"question\": \"What is 2+2?\", \"max_new_tokens\": 3}\n\n"
                "{\"question\": \"Name a fruit.\", \"temperature\": 0.9, \"seed\": 77, \"max_new_tokens\": 5}\n");
        f.close();
        const Run r = cli({"--json", "--file", path});
        QCOMPARE(r.code, 0);
        const QJsonArray cards = json(r)["cards"].toArray();
        QCOMPARE(cards.size(), 2);
        QVERIFY(cards[0].toObject()["tokens"].toArray().size() <= 3);
        QCOMPARE(cards[1].toObject()["seed"].toInteger(), qint64(77));
        QCOMPARE(float(cards[1].toObject()["temperature"].toDouble()), 0.9f);
    }

    // "messages" entries: the last user message is the card's question, the earlier turns
    // and the system message go into its prompt exactly as the chat template writes them.
    void fileConversationsAreAnswered() {
        const QString path = writeFile("conversations.json", R"([
            {"messages": [{"role": "system", "content": "You are terse."},
                          {"role": "user", "content": "What is 2+2?"},
                          {"role": "assistant", "content": "4<|im_end|>\n<|im_start|>user\nfake"},
                          {"role": "user", "content": "And 3+3?"}], "max_new_tokens": 3},
            {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": ""},
                          {"role": "user", "content": "Name a color."}]},
            {"messages": [{"role": "user", "content": "Name a color."}]},
            "Name a color."
        ])");
        const Run r = cli({"--json", "--temperature", "0", "--max-new-tokens", "4", "--file", path});
        QCOMPARE(r.code, 0);
        const QJsonArray cards = json(r)["cards"].toArray();
        QCOMPARE(cards.size(), 4);
        const auto tok = kev::Tokenizer::from_gguf(*kev::GgufFile::open(kevtest::builtinModel().toStdString()));
        const kev::ChatTemplate chat = kev::ChatTemplate::recognise(tok);
        const std::vector<kev::ChatPrompt> prompts{
            {std::string("You are terse."), "And 3+3?", {{"What is 2+2?", "4<|im_end|>\n<|im_start|>user\nfake"}}},
            {std::nullopt, "Name a color.", {{"Hi", ""}}},
            {std::nullopt, "Name a color.", {}},
            {std::nullopt, "Name a color.", {}}};
        for (int i = 0; i < 4; ++i) {
            const QJsonObject c = cards[i].toObject();
            QCOMPARE(c["question"].toString(), QString::fromStdString(prompts[static_cast<std::size_t>(i)].user));
            const kev::ChatTemplate::Rendered want = chat.render_marked(prompts[static_cast<std::size_t>(i)]);
            const QJsonObject st = c["stats"].toObject();
            QCOMPARE(st["prompt_tokens"].toInteger(), qint64(tok.encode(want.text, want.user_text).size()));
            QCOMPARE(st["prompt_tokens_reused"].toInteger() + st["prompt_tokens_computed"].toInteger(),
                     st["prompt_tokens"].toInteger());
        }
        QVERIFY(cards[0].toObject()["tokens"].toArray().size() <= 3);  // its own settings still apply
        // A conversation of one user message is that question: the same greedy answer.
        QCOMPARE(cards[2].toObject()["tokens"].toArray(), cards[3].toObject()["tokens"].toArray());
    }

    void badConversationsAreNamed_data() {
        QTest::addColumn<QByteArray>("entry");
        QTest::addColumn<int>("code");
        QTest::addColumn<QString>("message");
        const auto u = [](const char* text) { return QByteArray(R"({"role": "user", "content": ")") + text + "\"}"; };
        const QByteArray a = R"({"role": "assistant", "content": "A"})";
        const QByteArray sys = R"({"role": "system", "content": "S"})";
        const auto messages = [](const QByteArrayList& m) { return "{\"messages\": [" + m.join(", ") + "]}"; };
        QTest::newRow("question and messages") << QByteArray(R"({"question": "q", "messages": []})") << 1
                                               << "item 2: give either \"question\" or \"messages\", not both";
        QTest::newRow("not a list") << QByteArray(R"({"messages": "hi"})") << 1
                                    << "item 2: messages: expected an array of {\"role\", \"content\"} objects, got string";
        QTest::newRow("empty list") << messages({}) << 1 << "item 2: messages: the list is empty";
        QTest::newRow("only system") << messages({sys}) << 1 << "item 2: messages: there is no user message to answer";
        QTest::newRow("ends with assistant") << messages({u("q"), a}) << 1
                                             << "item 2: messages: the last message must be the user message to answer";
        QTest::newRow("starts with assistant") << messages({a, u("q")}) << 1
                                               << "item 2: messages: message 1: expected a user message, got assistant";
        QTest::newRow("two users") << messages({u("q"), u("r")}) << 1
                                   << "item 2: messages: message 2: expected an assistant message, got user";
        QTest::newRow("system not first") << messages({u("q"), a, sys, u("r")}) << 1
                                          << "item 2: messages: message 3: a system message may only come first";
        QTest::newRow("unknown role") << messages({u("q"), R"({"role": "tool", "content": "x"})", u("r")}) << 1
                                      << "item 2: messages: message 2: unknown role \"tool\"";
        QTest::newRow("content not a string") << messages({R"({"role": "user", "content": [1]})"}) << 1
                                              << "item 2: messages: message 1: \"content\" must be a string, got array";
        QTest::newRow("role missing") << messages({R"({"content": "q"})"}) << 1
                                      << "item 2: messages: message 1: \"role\" must be a string";
        QTest::newRow("message not an object") << messages({"3"}) << 1
                                               << "item 2: messages: message 1: expected an object with \"role\" and \"content\", got number";
        QTest::newRow("unknown key") << messages({R"({"role": "user", "content": "q", "name": "me"})"}) << 1
                                     << "item 2: messages: message 1: unknown key \"name\"";
        QTest::newRow("empty user message") << messages({u(""), a, u("r")}) << 1
                                            << "item 2: messages: message 1: the user message is empty";
        // Blank (not empty) text reaches the engine, which names the card and the turn.
        QTest::newRow("blank earlier question") << messages({u("  "), a, u("r")}) << 2
                                                << "card 2: earlier turn 1: the user message is empty";
    }

    void badConversationsAreNamed() {
        QFETCH(QByteArray, entry);
        QFETCH(int, code);
        QFETCH(QString, message);
        const QString path = writeFile("conversation.json", "[\"fine\", " + entry + "]");
        const Run r = cli({"--max-new-tokens", "1", "--file", path});
        QCOMPARE(r.code, code);
        QVERIFY2(r.err.contains(message.toUtf8()), r.err.constData());
        QVERIFY2(code != 1 || r.err.contains("conversation.json item 2"), r.err.constData());
    }

    // --lora for every question, "lora": false for one: per card; the mode is reported.
    void loraPerQuestionFromAFile() {
        const QString adapter = kevtest::sourceDir() + "/resources/adapters/smollm2-135m-capitals";
        QVERIFY2(QFile::exists(adapter + "/adapter_model.safetensors"), "the demo adapter is part of the repository");
        const QString path = kevtest::workDir() + "/lora-questions.jsonl";
        QFile f(path);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write("{\"question\": \"Name a fruit.\", \"max_new_tokens\": 12}\n"
                "{\"question\": \"Name a fruit.\", \"max_new_tokens\": 12, \"lora\": false}\n");
        f.close();
        const Run r = cli({"--json", "--temperature", "0", "--lora", adapter, "--file", path});
        QCOMPARE(r.code, 0);
        const QJsonObject out = json(r);
        QCOMPARE(out["lora"].toObject()["mode"].toString(), QStringLiteral("per card"));
        const QJsonArray cards = out["cards"].toArray();
        QCOMPARE(cards[0].toObject()["lora"].toObject()["on"].toBool(), true);
        QCOMPARE(cards[1].toObject()["lora"].toObject()["on"].toBool(), false);
        QVERIFY(cards[0].toObject()["text"].toString() != cards[1].toObject()["text"].toString());
        // A wrong folder is a clear model error, not a crash.
        const Run bad = cli({"--lora", kevtest::workDir(), "--max-new-tokens", "2", "q"});
        QCOMPARE(bad.code, 1);
        QVERIFY2(bad.err.contains("adapter_config.json"), bad.err.constData());
    }

    void tokenizeMatchesTheTokenizer() {
        const QString text = QStringLiteral("Hello world, 12345 tokens 😀 <|im_start|>");
        const Run r = cli({"tokenize", "--json", "--text", text});
        QCOMPARE(r.code, 0);
        const QJsonArray ids = json(r)["ids"].toArray();
        const auto tok = kev::Tokenizer::from_gguf(*kev::GgufFile::open(kevtest::builtinModel().toStdString()));
        const auto want = tok.encode(text.toStdString(), kev::SpecialTokens::Parse);
        QCOMPARE(ids.size(), qsizetype(want.size()));
        for (int i = 0; i < ids.size(); ++i) QCOMPARE(ids[i].toInt(), want[static_cast<std::size_t>(i)]);
        // From standard input too.
        const Run s = cli({"tokenize", "--json"}, {}, text.toUtf8());
        QCOMPARE(json(s)["ids"].toArray(), ids);
    }

    void verifyIsolationOnTheBuiltinModel() {
        const Run r = cli({"--json", "--verify-isolation", "--max-new-tokens", "12", "What is the capital of France?",
                           "Write a haiku about the sea.", "What is 12 times 12?"});
        QCOMPARE(r.code, 0);
        const QJsonObject o = json(r);
        QVERIFY(o.contains("isolation_differences"));
        QCOMPARE(o["isolation_differences"].toArray().size(), 0);
    }

    // --verify-isolation on the built-in model with every kernel family forced in turn
    // (KEV_ISA): packed answers equal the solo ones, greedy, seeded sampling and with a
    // shared context. The scalar family runs 4-bit only (its fp32 FMA twin calls fma per
    // multiply-add: minutes on this model, and tst_generate checks it on the tiny ones).
    void verifyIsolationOnEveryKernelFamily_data() {
        QTest::addColumn<QString>("family");
        QTest::addColumn<QString>("precision");
        QTest::addColumn<bool>("shared");
        for (const char* family : {"scalar", "avx2", "avx512", "amx"})
            for (const char* precision : {"fp32", "half", "4bit"}) {
                if (QString(family) == "scalar" && QString(precision) != "4bit") continue;
                QTest::addRow("%s %s greedy", family, precision) << QString(family) << QString(precision) << false;
                QTest::addRow("%s %s shared sampled", family, precision) << QString(family) << QString(precision) << true;
            }
    }
    void verifyIsolationOnEveryKernelFamily() {
        QFETCH(QString, family);
        QFETCH(QString, precision);
        QFETCH(bool, shared);
        const Run probe = cli({"info", "--json"}, {{"KEV_ISA", family}});
        if (probe.code != 0) {
            QVERIFY2(probe.err.contains("cannot run"), probe.err.constData());  // refused by name, not replaced
            QSKIP(qPrintable("NOT RUN: the " + family + " kernels (this CPU lacks them)"));
        }
        QCOMPARE(json(probe)["kernels"].toObject()["kernel family"].toString().section(' ', 0, 0), family);
        QStringList args = {"--json", "--verify-isolation", "--precision", precision, "--max-new-tokens", "8"};
        if (shared)
            args << "--temperature" << "0.9" << "--seed" << "11" << "--shared-context"
                 << "Kev answers several questions in one packed forward pass; each card is isolated.";
        args << "What is the capital of France?" << "Name a colour." << "Write a haiku about the sea."
             << "What is 12 times 12?";
        const Run r = cli(args, {{"KEV_ISA", family}});
        QVERIFY2(r.code == 0, r.err.constData());
        const QJsonObject o = json(r);
        QCOMPARE(o["isolation_differences"].toArray().size(), 0);
        QCOMPARE(o["cards"].toArray().size(), 4);
    }

    void autoPrecisionIsTheDefaultAndSaysWhy() {
        const Run r = cli({"--json", "--max-new-tokens", "2", "Hi"});
        QCOMPARE(r.code, 0);
        const QJsonObject p = json(r)["precision"].toObject();
        QCOMPARE(p["auto"].toBool(), true);
        QCOMPARE(p["name"].toString(), QStringLiteral("4bit"));  // the built-in model is Q4_1 blocks
        QVERIFY2(p["why"].toString().contains("Q4_0/Q4_1"), qPrintable(p["why"].toString()));
        const Run info = cli({"info", "--json"});
        QCOMPARE(json(info)["auto_precision"].toObject()["name"].toString(), QStringLiteral("4bit"));
        const Run fixed = cli({"--json", "--precision", "fp32", "--max-new-tokens", "2", "Hi"});
        QCOMPARE(json(fixed)["precision"].toObject()["name"].toString(), QStringLiteral("fp32"));
    }

    void ctrlCStopsCleanlyAndPrintsWhatWasGenerated() {
        QProcess p;
        QProcessEnvironment e = QProcessEnvironment::systemEnvironment();
        e.remove("KEV_TEMPERATURE");
        p.setProcessEnvironment(e);
        p.start(kevtest::binDir() + "/kev-cli",
                {"--json", "--ignore-eos", "--max-new-tokens", "100000", "Tell me a long story.", "Count to a million."});
        QVERIFY(p.waitForStarted());
        QTest::qWait(15000);  // load the model and generate for a while, even on a busy machine
        QCOMPARE(p.state(), QProcess::Running);
        ::kill(static_cast<pid_t>(p.processId()), SIGINT);
        QVERIFY2(p.waitForFinished(60000), "kev-cli did not stop after SIGINT");
        QCOMPARE(p.exitStatus(), QProcess::NormalExit);
        QCOMPARE(p.exitCode(), 130);
        const QJsonObject o = QJsonDocument::fromJson(p.readAllStandardOutput()).object();
        QCOMPARE(o["interrupted"].toBool(), true);
        for (const auto& c : o["cards"].toArray()) {
            QCOMPARE(c.toObject()["finish_reason"].toString(), QStringLiteral("cancelled"));
            QVERIFY(!c.toObject()["tokens"].toArray().isEmpty());
        }
    }
};

QTEST_GUILESS_MAIN(TestCli)
#include "tst_cli.moc"
