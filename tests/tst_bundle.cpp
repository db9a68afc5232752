// Reproducibility bundles: SHA-256 against FIPS 180's vectors, a bundle written and read
// back field by field, hostile bundles refused by name, and kev-cli --bundle / replay on
// the built-in model: the tokens match, an edited token is named with exit 3, and a
// changed model file is reported.
#include <QDir>
#include <QFile>
#include <QProcess>
#include <QtTest>

#include <functional>
#include <limits>
#include <string>

#include <nlohmann/json.hpp>

#include "kev/bundle.h"
#include "kev/error.h"
#include "kev/file_hash.h"
#include "kev_test_env.h"

namespace {

using nlohmann::json;

struct Run {
    int code = -1;
    QByteArray out, err;
};

Run cli(const QStringList& args, const QString& kevTemperature = QString()) {
    QProcess p;
    QProcessEnvironment e = QProcessEnvironment::systemEnvironment();
    e.remove("KEV_TEMPERATURE");
    if (!kevTemperature.isEmpty()) e.insert("KEV_TEMPERATURE", kevTemperature);
    p.setProcessEnvironment(e);
    p.start(kevtest::binDir() + "/kev-cli", args);
    p.waitForStarted();
    p.closeWriteChannel();
    p.waitForFinished(5 * 60 * 1000);
    return {p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1, p.readAllStandardOutput(),
            p.readAllStandardError()};
}

QString writeFile(const QString& name, const QByteArray& bytes) { return kevtest::writeWorkFile(name, bytes); }

// Runs `fn`, which must throw kev::Error with `code` and a message holding `part`.
void expectError(const std::function<void()>& fn, kev::ErrorCode code, const std::string& part) {
    try {
        fn();
    } catch (const kev::Error& e) {
        QVERIFY2(e.code() == code, e.what());
        QVERIFY2(std::string(e.what()).find(part) != std::string::npos,
                 qPrintable(QStringLiteral("expected \"%1\" in: %2").arg(QString::fromStdString(part), e.what())));
        return;
    } catch (const std::exception& e) {
        QFAIL(qPrintable(QStringLiteral("not a kev::Error: %1").arg(e.what())));
    }
    QFAIL(qPrintable(QStringLiteral("no error; expected \"%1\"").arg(QString::fromStdString(part))));
}

// A bundle with every field set to something other than its default.
kev::Bundle sampleBundle() {
    kev::Bundle b;
    b.kev_version = "1.2.3";
    b.torch_version = "2.5.1";
    b.cpu_capability = "AVX2";
    b.created = "2026-12-02T03:04:05Z";
    b.model = {"/models/m.gguf", std::string(64, 'a'), 98362432};
    b.precision = {kev::Device::Cpu, kev::DType::BF16, kev::WeightQuant::Q4};
    b.weights = "llama, 30 layers";
    b.chat = kev::BundleChat{kev::ChatFormat::Llama3, true};
    b.system = "Be brief.";
    b.shared_context = "A document: \xc3\xa9t\xc3\xa9 \xf0\x9f\x8c\x9e\nline two";
    b.adapter = kev::BundleAdapter{"demo", std::string(64, 'b'), 1.5f};
    b.ignore_end_of_sequence = true;
    kev::BundleCard c;
    c.number = 3;
    c.label = "q.json entry 1";
    c.question = "What is the capital of France?";
    c.system = "Answer in French.";
    c.history = {{"Name a fruit.", "Apple."}, {"Another?", "Pear, <|im_end|> and plum.\n"}};
    c.sampling.temperature = 0.7f;
    c.sampling.top_p = 0.9f;
    c.sampling.top_k = 40;
    c.sampling.min_p = 0.05f;
    c.sampling.repetition_penalty = 1.1f;
    c.sampling.max_new_tokens = 12;
    c.sampling.seed = std::numeric_limits<std::uint64_t>::max();
    c.sampling.stop_strings = {"\n\n", "User:"};
    c.lora = {true, 0.5f};
    c.text = "Paris \"quoted\"";
    c.tokens = {504, 3575, 0, 49151};
    c.finish = kev::FinishReason::StopString;
    c.matched_stop = "User:";
    c.stats = {30, 4, 0.125, 41.5};
    b.cards.push_back(c);
    c.number = 7;
    c.system.reset();
    c.history.clear();
    c.label.clear();
    c.lora = {false, 1.0f};
    c.sampling.temperature = 0.0f;
    c.sampling.seed = 0;
    c.sampling.stop_strings.clear();
    c.tokens.clear();
    c.text.clear();
    c.finish = kev::FinishReason::Cancelled;
    c.matched_stop.clear();
    b.cards.push_back(c);
    return b;
}

json sampleJson() { return json::parse(kev::to_json(sampleBundle())); }

// Token `token` of card `card` (0-based) in a bundle file replaced by another id.
std::string bundleWithToken(const std::string& path, std::size_t card, std::size_t token, kev::TokenId id) {
    kev::Bundle b = kev::read_bundle(path);
    b.cards.at(card).tokens.at(token) = id;
    const std::string out = path + ".edited.json";
    kev::write_bundle(b, out);
    return out;
}

}  // namespace

class TestBundle : public QObject {
    Q_OBJECT
private Q_SLOTS:
    // FIPS 180-2 appendix B (SHA-256) and the empty message.
    void sha256KnownVectors() {
        QCOMPARE(kev::sha256_hex("", 0), std::string("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"));
        QCOMPARE(kev::sha256_hex(std::string("abc")),
                 std::string("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));
        const std::string m448 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
        QCOMPARE(kev::sha256_hex(m448), std::string("248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"));
        const std::string million(1000000, 'a');
        const std::string expected = "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0";
        QCOMPARE(kev::sha256_hex(million), expected);
        // Fed in uneven pieces (across block boundaries), the same hash.
        kev::Sha256 h;
        std::size_t done = 0, step = 1;
        while (done < million.size()) {
            const std::size_t n = std::min(step, million.size() - done);
            h.update(million.data() + done, n);
            done += n;
            step = step * 3 + 1;
        }
        QCOMPARE(h.hex_digest(), expected);
        // Padding edge cases: 55, 56 and 64 bytes (one or two final blocks).
        QCOMPARE(kev::sha256_hex(std::string(55, 'a')),
                 std::string("9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318"));
        QCOMPARE(kev::sha256_hex(std::string(56, 'a')),
                 std::string("b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a"));
        QCOMPARE(kev::sha256_hex(std::string(64, 'a')),
                 std::string("ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb"));
        // A file (larger than one 1 MiB read) hashes as its bytes do.
        const QString path = writeFile("million.txt", QByteArray(3 * 1000000 + 17, 'a'));
        QCOMPARE(kev::sha256_file(path.toStdString()), kev::sha256_hex(std::string(3 * 1000000 + 17, 'a')));
        expectError([] { kev::sha256_file(kevtest::workDir().toStdString()); }, kev::ErrorCode::Io, "not a regular file");
        expectError([] { kev::sha256_file("/nonexistent/x.gguf"); }, kev::ErrorCode::Io, "/nonexistent/x.gguf");
    }

    // A folder's hash is the hash of its sorted "name\0sha256\n" lines, top level only.
    void modelHashOfAFolder() {
        const QString dir = kevtest::workDir("hf_model");
        QDir(dir).removeRecursively();
        QDir().mkpath(dir + "/sub");
        QFile::remove(dir + "/sub/ignored.bin");
        const auto put = [&](const QString& name, const QByteArray& bytes) {
            QFile f(dir + "/" + name);
            QVERIFY(f.open(QIODevice::WriteOnly | QIODevice::Truncate));
            f.write(bytes);
        };
        put("model.safetensors", "weights");
        put("config.json", "{}");
        put("sub/ignored.bin", "x");
        const std::string lines = std::string("config.json") + '\0' + kev::sha256_hex(std::string("{}")) + "\n" +
                                  "model.safetensors" + '\0' + kev::sha256_hex(std::string("weights")) + "\n";
        const kev::ModelDigest d = kev::model_digest(dir.toStdString());
        QCOMPARE(d.sha256, kev::sha256_hex(lines));
        QCOMPARE(d.files, 2);
        QCOMPARE(d.bytes, std::uint64_t(9));
        put("sub/ignored.bin", "changed: still not hashed");
        QCOMPARE(kev::model_hash(dir.toStdString()), d.sha256);
        put("config.json", "{ }");
        QVERIFY(kev::model_hash(dir.toStdString()) != d.sha256);
        // A file's identity is its own hash.
        QCOMPARE(kev::model_hash((dir + "/config.json").toStdString()), kev::sha256_hex(std::string("{ }")));
        const QString empty = kevtest::workDir("empty_model");
        expectError([&] { kev::model_hash(empty.toStdString()); }, kev::ErrorCode::Io, "holds no file");
        expectError([] { kev::model_hash("/nonexistent/model"); }, kev::ErrorCode::Io, "/nonexistent/model: no such file");
    }

    void roundTripIsExact() {
        const kev::Bundle b = sampleBundle();
        const std::string path = (kevtest::workDir("round_trip") + "/b.json").toStdString();
        kev::write_bundle(b, path);
        kev::write_bundle(b, path);  // over an existing file
        const QStringList left = QDir(kevtest::workDir("round_trip")).entryList(QDir::Files | QDir::Hidden);
        QCOMPARE(left, QStringList{"b.json"});  // no temporary file left behind
        const kev::Bundle r = kev::read_bundle(path);
        QCOMPARE(r.kev_version, b.kev_version);
        QCOMPARE(r.torch_version, b.torch_version);
        QCOMPARE(r.cpu_capability, b.cpu_capability);
        QCOMPARE(r.created, b.created);
        QCOMPARE(r.model.path, b.model.path);
        QCOMPARE(r.model.sha256, b.model.sha256);
        QCOMPARE(r.model.bytes, b.model.bytes);
        QVERIFY(r.precision.device == b.precision.device);
        QVERIFY(r.precision.dtype == b.precision.dtype);
        QVERIFY(r.precision.quant == b.precision.quant);
        QCOMPARE(r.precision.name(), std::string("4bit"));
        QCOMPARE(r.weights, b.weights);
        QVERIFY(r.chat && r.chat->format == kev::ChatFormat::Llama3 && r.chat->chosen);
        QCOMPARE(r.system, b.system);
        QCOMPARE(r.shared_context, b.shared_context);
        QVERIFY(r.adapter);
        QCOMPARE(r.adapter->path, b.adapter->path);
        QCOMPARE(r.adapter->sha256, b.adapter->sha256);
        QCOMPARE(r.adapter->scale, b.adapter->scale);
        QCOMPARE(r.ignore_end_of_sequence, true);
        QCOMPARE(r.cards.size(), b.cards.size());
        for (std::size_t i = 0; i < b.cards.size(); ++i) {
            const kev::BundleCard &x = r.cards[i], &y = b.cards[i];
            QCOMPARE(x.number, y.number);
            QCOMPARE(x.label, y.label);
            QCOMPARE(x.question, y.question);
            QCOMPARE(x.system, y.system);
            QCOMPARE(x.history.size(), y.history.size());
            for (std::size_t t = 0; t < y.history.size(); ++t) {
                QCOMPARE(x.history[t].user, y.history[t].user);
                QCOMPARE(x.history[t].assistant, y.history[t].assistant);
            }
            QCOMPARE(x.sampling.temperature, y.sampling.temperature);  // floats exactly
            QCOMPARE(x.sampling.top_p, y.sampling.top_p);
            QCOMPARE(x.sampling.top_k, y.sampling.top_k);
            QCOMPARE(x.sampling.min_p, y.sampling.min_p);
            QCOMPARE(x.sampling.repetition_penalty, y.sampling.repetition_penalty);
            QCOMPARE(x.sampling.max_new_tokens, y.sampling.max_new_tokens);
            QCOMPARE(x.sampling.seed, y.sampling.seed);  // 2^64-1 too
            QCOMPARE(x.sampling.stop_strings, y.sampling.stop_strings);
            QCOMPARE(x.lora.enabled, y.lora.enabled);
            QCOMPARE(x.lora.scale, y.lora.scale);
            QCOMPARE(x.text, y.text);
            QCOMPARE(x.tokens, y.tokens);
            QVERIFY(x.finish == y.finish);
            QCOMPARE(x.matched_stop, y.matched_stop);
            QCOMPARE(x.stats.prompt_tokens, y.stats.prompt_tokens);
            QCOMPARE(x.stats.generated_tokens, y.stats.generated_tokens);
            QCOMPARE(x.stats.time_to_first_token_s, y.stats.time_to_first_token_s);
            QCOMPARE(x.stats.tokens_per_s, y.stats.tokens_per_s);
        }
        // Floats are written in their shortest form: 0.7, not 0.699999988079071.
        const json j = json::parse(kev::to_json(b));
        QCOMPARE(j["cards"][0]["sampling"]["temperature"].dump(), std::string("0.7"));
        QCOMPARE(j["format"].get<std::string>(), std::string("kev-bundle"));
        QCOMPARE(j["version"].get<int>(), 1);
    }

    // What the replay runs: the recorded inputs, cut where the run stopped.
    void replayUsesTheRecordedInputs() {
        kev::Bundle b = sampleBundle();
        b.cards[0].finish = kev::FinishReason::MaxTokens;
        b.cards[0].sampling.max_new_tokens = 4;
        b.cards[1].tokens = {5, 6};  // cancelled after two tokens
        const kev::BundleReplay r = kev::replay_inputs(b);
        QVERIFY(r.load.dtype == kev::DType::BF16 && r.load.quant == kev::WeightQuant::Q4);
        QVERIFY(r.chat_format == kev::ChatFormat::Llama3);
        QCOMPARE(*r.adapter, kev::demo_adapter_path());
        QCOMPARE(r.request.system, b.system);
        QCOMPARE(r.request.shared_context, b.shared_context);
        QCOMPARE(r.request.cards[0].system, b.cards[0].system);
        QCOMPARE(r.request.cards[0].history.size(), std::size_t(2));  // the conversation before the question
        QCOMPARE(r.request.cards[0].history[1].assistant, b.cards[0].history[1].assistant);
        QVERIFY(r.request.cards[1].history.empty());
        QCOMPARE(r.request.ignore_end_of_sequence, true);
        QCOMPARE(r.request.cards.size(), std::size_t(2));
        QCOMPARE(r.request.cards[0].sampling.seed, b.cards[0].sampling.seed);
        QCOMPARE(*r.request.cards[0].sampling.temperature, 0.7f);
        QCOMPARE(r.request.cards[0].sampling.max_new_tokens, std::int64_t(4));
        QCOMPARE(r.request.cards[1].sampling.max_new_tokens, std::int64_t(2));  // cancelled: where it stopped
        QVERIFY(r.request.cards[0].lora == (kev::LoraUse{true, 0.5f}));
        // A cancelled card is compared over what it had generated.
        QCOMPARE(kev::comparable_tokens(b.cards[1], {5, 6, 7}), (std::vector<kev::TokenId>{5, 6}));
        QCOMPARE(kev::comparable_tokens(b.cards[0], {1, 2, 3, 4, 5}), (std::vector<kev::TokenId>{1, 2, 3, 4, 5}));
        // A card that ended by itself keeps its recorded limit.
        b.cards[0].finish = kev::FinishReason::EndOfSequence;
        b.cards[0].sampling.max_new_tokens = 12;
        QCOMPARE(kev::replay_inputs(b).request.cards[0].sampling.max_new_tokens, std::int64_t(12));
    }

    void hostileBundlesAreRefusedByName_data() {
        QTest::addColumn<QByteArray>("bytes");
        QTest::addColumn<QString>("message");
        const auto edited = [](const std::function<void(json&)>& edit) {
            json j = sampleJson();
            edit(j);
            return QByteArray::fromStdString(j.dump());
        };
        QTest::newRow("not JSON") << QByteArray("this is not { json") << "not a bundle: not valid JSON";
        QTest::newRow("not an object") << QByteArray("[1, 2]") << "the JSON is not an object";
        QTest::newRow("no format") << edited([](json& j) { j.erase("format"); }) << "no \"format\": \"kev-bundle\"";
        QTest::newRow("wrong format") << edited([](json& j) { j["format"] = "zip"; }) << "\"format\" is \"zip\", not \"kev-bundle\"";
        QTest::newRow("unknown version") << edited([](json& j) { j["version"] = 7; })
                                         << "version 7 is not supported (this Kev reads version 1)";
        QTest::newRow("negative token id") << edited([](json& j) { j["cards"][0]["tokens"][1] = -5; })
                                           << "bundle card 3: \"tokens\" must be an array of token ids (whole numbers 0..16777215); token 2 is -5";
        QTest::newRow("huge token id") << edited([](json& j) { j["cards"][0]["tokens"][0] = 4294967296LL; })
                                       << "bundle card 3: \"tokens\" must be an array of token ids";
        QTest::newRow("fractional token id") << edited([](json& j) { j["cards"][0]["tokens"][0] = 1.5; })
                                             << "token 1 is 1.5";
        QTest::newRow("tokens not an array") << edited([](json& j) { j["cards"][0]["tokens"] = "504 3575"; })
                                             << "bundle card 3: \"tokens\" must be an array of token ids";
        QTest::newRow("temperature a string") << edited([](json& j) { j["cards"][1]["sampling"]["temperature"] = "hot"; })
                                              << "bundle card 7: \"sampling.temperature\" must be a number";
        QTest::newRow("temperature too high") << edited([](json& j) { j["cards"][0]["sampling"]["temperature"] = 50; })
                                              << "\"sampling.temperature\" 50 is out of range";
        QTest::newRow("negative seed") << edited([](json& j) { j["cards"][0]["sampling"]["seed"] = -1; })
                                       << "\"sampling.seed\" must be a whole number";
        QTest::newRow("max tokens zero") << edited([](json& j) { j["cards"][0]["sampling"]["max_new_tokens"] = 0; })
                                         << "\"sampling.max_new_tokens\" 0 is out of range";
        QTest::newRow("more tokens than max") << edited([](json& j) { j["cards"][0]["sampling"]["max_new_tokens"] = 2; })
                                              << "more than \"sampling.max_new_tokens\" 2";
        QTest::newRow("question a number") << edited([](json& j) { j["cards"][0]["question"] = 42; })
                                           << "bundle card 3: \"question\" must be a string";
        QTest::newRow("history not an array") << edited([](json& j) { j["cards"][0]["history"] = "earlier"; })
                                              << "bundle card 3: \"history\" must be an array";
        QTest::newRow("history turn without answer") << edited([](json& j) { j["cards"][0]["history"] = json::array({{{"user", "Q"}}}); })
                                                     << "bundle card 3: \"history[0].assistant\" is missing";
        QTest::newRow("history turn a string") << edited([](json& j) { j["cards"][0]["history"] = json::array({"Q"}); })
                                               << "bundle card 3: \"history[0]\" must be an object";
        QTest::newRow("card not an object") << edited([](json& j) { j["cards"][1] = "card"; }) << "bundle card 2: must be an object";
        QTest::newRow("missing number") << edited([](json& j) { j["cards"][0].erase("number"); })
                                        << "bundle card 1: \"number\" is missing";
        QTest::newRow("number twice") << edited([](json& j) { j["cards"][1]["number"] = 3; }) << "the card number is used twice";
        QTest::newRow("no cards") << edited([](json& j) { j["cards"] = json::array(); }) << "\"cards\" is empty";
        QTest::newRow("cards an object") << edited([](json& j) { j["cards"] = json::object(); })
                                         << "\"cards\" must be an array of cards";
        QTest::newRow("unknown finish") << edited([](json& j) { j["cards"][0]["finish_reason"] = "boredom"; })
                                        << "\"finish_reason\" \"boredom\" is not one Kev writes";
        QTest::newRow("bad sha256") << edited([](json& j) { j["model"]["sha256"] = "abc"; })
                                    << "\"model.sha256\" must be 64 lowercase hex digits";
        QTest::newRow("model bytes negative") << edited([](json& j) { j["model"]["bytes"] = -1; }) << "\"model.bytes\"";
        QTest::newRow("unknown device") << edited([](json& j) { j["precision"]["device"] = "tpu"; })
                                        << "\"precision.device\" must be \"cpu\" or \"cuda\", got \"tpu\"";
        QTest::newRow("4-bit with fp32") << edited([](json& j) {
            j["precision"]["dtype"] = "fp32";
            j["precision"].erase("name");
        }) << "4-bit weights work with bf16 activations";
        QTest::newRow("name disagrees") << edited([](json& j) { j["precision"]["name"] = "fp32"; })
                                        << "\"precision.name\" \"fp32\" does not match";
        QTest::newRow("lora without adapter") << edited([](json& j) { j.erase("adapter"); })
                                              << "bundle card 3: \"lora.on\" is true but the bundle names no \"adapter\"";
        QTest::newRow("lora scale too high") << edited([](json& j) { j["cards"][0]["lora"]["scale"] = 3; })
                                             << "\"lora.scale\" 3 is out of range";
        QTest::newRow("bad time") << edited([](json& j) { j["created"] = "yesterday"; }) << "\"created\" must be an ISO 8601 UTC time";
        QTest::newRow("stop not strings") << edited([](json& j) { j["cards"][0]["sampling"]["stop"] = json::array({1}); })
                                          << "\"sampling.stop\" must be a string";
        QTest::newRow("deep nesting") << QByteArray(100000, '[') << "nested deeper than 8 levels";
        // Raw bytes that are not UTF-8 inside a string.
        QByteArray latin1 = edited([](json& j) { j["cards"][0]["question"] = "caf@"; });
        latin1.replace("caf@", "caf\xe9");
        QTest::newRow("not UTF-8") << latin1 << "not valid JSON";
    }

    void hostileBundlesAreRefusedByName() {
        QFETCH(QByteArray, bytes);
        QFETCH(QString, message);
        const QString path = writeFile("hostile.json", bytes);
        expectError([&] { kev::read_bundle(path.toStdString()); }, kev::ErrorCode::Format, message.toStdString());
        // The message starts with the file, so a user knows which one.
        expectError([&] { kev::read_bundle(path.toStdString()); }, kev::ErrorCode::Format, path.toStdString() + ": ");
    }

    // Too big, or not a file: refused before anything is read.
    void oversizedAndSpecialFilesAreRefusedUnread() {
        const QString path = kevtest::workDir() + "/huge.json";
        {
            QFile f(path);
            QVERIFY(f.open(QIODevice::WriteOnly | QIODevice::Truncate));
            QVERIFY(f.resize(qint64(kev::kMaxBundleBytes) + 1));  // sparse: nothing written
        }
        expectError([&] { kev::read_bundle(path.toStdString()); }, kev::ErrorCode::Io, "over the 64 MiB limit for a bundle");
        QFile::remove(path);
        expectError([] { kev::read_bundle("/dev/zero"); }, kev::ErrorCode::Io, "not a regular file");
        expectError([] { kev::read_bundle(kevtest::workDir().toStdString()); }, kev::ErrorCode::Io, "not a regular file (a folder)");
    }

    // What cannot be read back is not written, and a failed write leaves nothing behind.
    void invalidBundlesAreNotWritten() {
        kev::Bundle b = sampleBundle();
        b.cards[0].tokens[0] = -1;
        expectError([&] { kev::to_json(b); }, kev::ErrorCode::InvalidArgument, "\"tokens\" must be an array of token ids");
        b = sampleBundle();
        b.cards[0].question = "caf\xe9";
        expectError([&] { kev::to_json(b); }, kev::ErrorCode::InvalidArgument, "cannot be written");
        expectError([] { kev::write_bundle(sampleBundle(), "/nonexistent/dir/b.json"); }, kev::ErrorCode::Io,
                    "/nonexistent/dir/b.json: cannot write the bundle");
    }

    // kev-cli --bundle on the built-in model, then replay: every card matches; one edited
    // token is named with exit 3; a changed model file (by hash, then by bytes) is reported.
    void cliBundleReplaysAndFindsDifferences() {
        const QString dir = kevtest::workDir("cli");
        const QString questions = writeFile(
            "cli/questions.json",
            R"([{"question": "Name a colour.", "temperature": 0.8, "seed": 7},
                {"messages": [{"role": "user", "content": "Name a country."},
                              {"role": "assistant", "content": "France."},
                              {"role": "user", "content": "What is the capital of France?"}], "temperature": 0}])");
        const QString bundle = dir + "/run.json";
        QFile::remove(bundle);
        const Run made = cli({"--json", "--max-new-tokens", "12", "--shared-context", "Answer in one short sentence.",
                              "--system", "You are terse.", "--file", questions, "--bundle", bundle, "Say hello."});
        QVERIFY2(made.code == 0, made.err.constData());
        QVERIFY2(made.err.contains("bundle written to"), made.err.constData());

        const kev::Bundle b = kev::read_bundle(bundle.toStdString());
        QCOMPARE(b.cards.size(), std::size_t(3));
        QCOMPARE(b.model.sha256, std::string("b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"));
        QCOMPARE(b.model.path, kevtest::builtinModel().toStdString());
        QCOMPARE(b.kev_version, kev::engine_info().kev_version);
        QCOMPARE(b.shared_context, std::string("Answer in one short sentence."));
        QCOMPARE(b.system, std::optional<std::string>("You are terse."));
        QVERIFY(b.chat && b.chat->format == kev::ChatFormat::ChatML && !b.chat->chosen);
        QCOMPARE(b.cards[0].label, std::string("command line"));
        QVERIFY(b.cards[1].label.find("questions.json entry 1") != std::string::npos);
        QCOMPARE(*b.cards[1].sampling.seed, std::uint64_t(7));
        QCOMPARE(*b.cards[1].sampling.temperature, 0.8f);
        QCOMPARE(*b.cards[2].sampling.temperature, 0.0f);
        // A conversation's earlier turns are recorded, and replayed below with it.
        QCOMPARE(b.cards[2].history.size(), std::size_t(1));
        QCOMPARE(b.cards[2].history[0].user, std::string("Name a country."));
        QCOMPARE(b.cards[2].history[0].assistant, std::string("France."));
        QVERIFY(b.cards[1].history.empty());
        // The bundle holds what the run printed.
        const json printed = json::parse(made.out.toStdString());
        for (std::size_t i = 0; i < 3; ++i) {
            QCOMPARE(b.cards[i].number, std::int32_t(i + 1));
            QVERIFY(!b.cards[i].tokens.empty() && b.cards[i].tokens.size() <= 12);
            QCOMPARE(b.cards[i].tokens, printed["cards"][i]["tokens"].get<std::vector<kev::TokenId>>());
            QCOMPARE(b.cards[i].text, printed["cards"][i]["text"].get<std::string>());
            QCOMPARE(*b.cards[i].sampling.seed, printed["cards"][i]["seed"].get<std::uint64_t>());
        }

        // KEV_TEMPERATURE plays no part (a list of two for three cards would be refused).
        const Run same = cli({"replay", bundle}, "1.5,0.1");
        QVERIFY2(same.code == 0, (same.out + same.err).constData());
        for (std::size_t i = 0; i < 3; ++i) {
            const QString line = QStringLiteral("card %1: all %2 tokens match").arg(i + 1).arg(b.cards[i].tokens.size());
            QVERIFY2(same.out.contains(line.toUtf8()), same.out.constData());
        }
        QVERIFY2(!same.err.contains("differs"), same.err.constData());

        // One recorded token edited: exit 3, naming the card, the token and both ids.
        // (Card 3, the greedy "capital of France" answer, has more than two tokens.)
        QVERIFY(b.cards[2].tokens.size() >= 2);
        const kev::TokenId was = b.cards[2].tokens[1];
        const kev::TokenId edited = was == 30 ? 31 : 30;
        const std::string editedPath = bundleWithToken(bundle.toStdString(), 2, 1, edited);
        const Run diff = cli({"replay", QString::fromStdString(editedPath)});
        QCOMPARE(diff.code, 3);
        const QString expected = QStringLiteral("card 3 differs at token 2: recorded id %1 (").arg(edited);
        QVERIFY2(diff.out.contains(expected.toUtf8()), diff.out.constData());
        QVERIFY2(diff.out.contains(QStringLiteral("now id %1 (").arg(was).toUtf8()), diff.out.constData());
        QVERIFY2(diff.out.contains("card 1: all"), diff.out.constData());
        QVERIFY2(diff.out.contains("card 2: all"), diff.out.constData());
        QVERIFY2(diff.out.contains("1 of 3 cards differ"), diff.out.constData());
        // The same as JSON.
        const Run diffJson = cli({"replay", QString::fromStdString(editedPath), "--json"});
        QCOMPARE(diffJson.code, 3);
        const json dj = json::parse(diffJson.out.toStdString());
        QCOMPARE(dj["match"].get<bool>(), false);
        QCOMPARE(dj["cards"][2]["first_difference"].get<int>(), 2);
        QCOMPARE(dj["cards"][2]["recorded"].get<int>(), edited);
        QCOMPARE(dj["cards"][2]["now"].get<int>(), was);
        QCOMPARE(dj["cards"][0]["match"].get<bool>(), true);
        QCOMPARE(dj["model"]["same"].get<bool>(), true);
    }

    void cliReplayReportsAChangedModel() {
        const QString dir = kevtest::workDir("cli_model");
        const QString bundle = dir + "/run.json";
        QFile::remove(bundle);
        const Run made = cli({"--max-new-tokens", "6", "--bundle", bundle, "What is 2+2?"});
        QVERIFY2(made.code == 0, made.err.constData());
        const kev::Bundle b = kev::read_bundle(bundle.toStdString());

        // The recorded hash edited: the model file now differs from it.
        kev::Bundle other = b;
        other.model.sha256 = std::string(64, 'f');
        const std::string otherPath = (dir + "/other_hash.json").toStdString();
        kev::write_bundle(other, otherPath);
        const Run byHash = cli({"replay", QString::fromStdString(otherPath)});
        QVERIFY2(byHash.err.contains("the model file differs from the one the bundle was made with (sha256 b179c9523d0e"),
                 byHash.err.constData());
        QVERIFY2(byHash.err.contains("bundle ffffffffffff"), byHash.err.constData());
        QCOMPARE(byHash.code, 0);  // the same weights: the tokens still match
        QVERIFY(byHash.out.contains("card 1: all"));

        // A copy of the model with one byte of its metadata (general.name) changed: it loads,
        // replay --model points at it, and the difference is reported by hash.
        QFile src(kevtest::builtinModel());
        QVERIFY(src.open(QIODevice::ReadOnly));
        QByteArray bytes = src.readAll();
        const int key = bytes.indexOf("general.name");
        QVERIFY(key > 0 && key < 65536);
        const int value = key + int(strlen("general.name")) + 4 + 8;  // type (string = 8), length, bytes
        QCOMPARE(bytes[key + 12], char(8));
        bytes[value] = bytes[value] == 'X' ? 'Y' : 'X';
        const QString copy = writeFile("cli_model/changed.gguf", bytes);
        bytes.clear();
        const Run byBytes = cli({"replay", bundle, "--model", copy});
        QVERIFY2(byBytes.err.contains("the model file differs from the one the bundle was made with"), byBytes.err.constData());
        QVERIFY2(byBytes.err.contains(copy.toUtf8()), byBytes.err.constData());
        QCOMPARE(byBytes.code, 0);
        QFile::remove(copy);

        // The recorded model gone: named, with the way out.
        kev::Bundle moved = b;
        moved.model.path = "/nonexistent/model.gguf";
        const std::string movedPath = (dir + "/moved.json").toStdString();
        kev::write_bundle(moved, movedPath);
        const Run gone = cli({"replay", QString::fromStdString(movedPath)});
        QCOMPARE(gone.code, 1);
        QVERIFY2(gone.err.contains("/nonexistent/model.gguf: no such file or folder"), gone.err.constData());
        QVERIFY2(gone.err.contains("--model PATH"), gone.err.constData());
    }

    void cliReplayUsageAndBadBundles() {
        const Run none = cli({"replay"});
        QCOMPARE(none.code, 2);
        QVERIFY2(none.err.contains("replay needs one bundle file"), none.err.constData());
        const Run extra = cli({"replay", "b.json", "--temperature", "1"});
        QCOMPARE(extra.code, 2);
        QVERIFY2(extra.err.contains("replay takes only --model PATH and --json, not --temperature"), extra.err.constData());
        const Run bundleOnInfo = cli({"info", "--bundle", "x.json"});
        QCOMPARE(bundleOnInfo.code, 2);
        QVERIFY2(bundleOnInfo.err.contains("--bundle is for answering questions"), bundleOnInfo.err.constData());
        json j = sampleJson();
        j["cards"][0]["tokens"][0] = -1;
        const QString bad = writeFile("bad_bundle.json", QByteArray::fromStdString(j.dump()));
        const Run hostile = cli({"replay", bad});
        QCOMPARE(hostile.code, 1);
        QVERIFY2(hostile.err.contains("bundle card 3: \"tokens\" must be an array of token ids"), hostile.err.constData());
        const Run noFolder = cli({"--bundle", "/nonexistent/dir/b.json", "q"});
        QCOMPARE(noFolder.code, 1);
        QVERIFY2(noFolder.err.contains("no folder /nonexistent/dir"), noFolder.err.constData());
        const Run help = cli({"--help"});
        for (const char* s : {"replay BUNDLE", "--bundle OUT.json", "whose tokens differ"})
            QVERIFY2(help.out.contains(s), s);
    }
};

QTEST_GUILESS_MAIN(TestBundle)
#include "tst_bundle.moc"
