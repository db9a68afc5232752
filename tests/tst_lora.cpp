// LoRA adapters (issue 7): PEFT loading and validation, merged and per-row application,
// exact restore after a merge, mixed packs, parity with transformers + peft, and the
// demo adapter's visible effect on the built-in model.
#include <QtTest>

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <iterator>
#include <memory>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "kev/error.h"
#include "kev/generator.h"
#include "kev/lora.h"
#include "kev/model.h"
#include "kev/session.h"
#include "kev_test_env.h"

namespace {

const std::vector<std::int64_t> kTokens = {5, 17, 42, 99, 3, 250, 7, 511, 64, 8};

QString tokensArg() {
    QStringList t;
    for (auto v : kTokens) t << QString::number(v);
    return t.join(',');
}

QString tinyModel(const QString& preset) {
    const QString dir = kevtest::workDir("lora-" + preset);
    if (!QFile::exists(dir + "/config.json")) kevtest::runReference("make_random_model.py", {"--preset", preset, "--out", dir});
    return dir;
}

std::unique_ptr<kev::Model> loadF32(const QString& path) {
    kev::LoadOptions o;
    o.dtype = kev::DType::F32;
    return kev::Model::load(path.toStdString(), o);
}

// Logits of every position of `tokens` [n, V]; per-row LoRA multiplier when given.
at::Tensor logits(const kev::Model& m, const std::vector<std::int64_t>& tokens, std::optional<float> perRow = {}) {
    kev::KvCache cache = m.make_cache(static_cast<std::int64_t>(tokens.size()));
    kev::ForwardBatch b = kev::single_sequence_batch(tokens, 0, false);
    if (perRow) b.lora_scales.assign(tokens.size(), *perRow);
    return m.forward(b, cache);
}

float maxDiff(const at::Tensor& a, const at::Tensor& b) { return (a - b).abs().max().item<float>(); }

at::Tensor fromJson(const QJsonArray& rows) {
    std::vector<float> v;
    for (const auto& r : rows)
        for (const auto& x : r.toArray()) v.push_back(static_cast<float>(x.toDouble()));
    return at::tensor(v).view({rows.size(), -1});
}

// A PEFT folder written by hand: config JSON and fp32 tensors.
void writeAdapter(const QString& dir, const QJsonObject& config,
                  const std::map<std::string, std::vector<std::int64_t>>& tensors) {
    QDir().mkpath(dir);
    std::ofstream(dir.toStdString() + "/adapter_config.json") << QJsonDocument(config).toJson().toStdString();
    QJsonObject header;
    std::uint64_t offset = 0;
    for (const auto& [name, shape] : tensors) {
        std::uint64_t n = 4;
        QJsonArray dims;
        for (auto d : shape) n *= static_cast<std::uint64_t>(d), dims.append(static_cast<qint64>(d));
        header[QString::fromStdString(name)] = QJsonObject{
            {"dtype", "F32"}, {"shape", dims}, {"data_offsets", QJsonArray{static_cast<qint64>(offset), static_cast<qint64>(offset + n)}}};
        offset += n;
    }
    const std::string h = QJsonDocument(header).toJson(QJsonDocument::Compact).toStdString();
    std::ofstream f(dir.toStdString() + "/adapter_model.safetensors", std::ios::binary);
    const std::uint64_t len = h.size();
    f.write(reinterpret_cast<const char*>(&len), 8);
    f << h;
    const std::vector<float> data(offset / 4, 0.01f);
    f.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(offset));
}

QJsonObject baseConfig() {
    return {{"peft_type", "LORA"}, {"r", 2},  {"lora_alpha", 4}, {"target_modules", QJsonArray{"q_proj"}},
            {"bias", "none"},     {"use_dora", false}, {"modules_to_save", QJsonValue::Null}};
}

std::map<std::string, std::vector<std::int64_t>> qProjTensors(int layers, std::int64_t hidden, std::int64_t q) {
    std::map<std::string, std::vector<std::int64_t>> t;
    for (int l = 0; l < layers; ++l) {
        const std::string p = "base_model.model.model.layers." + std::to_string(l) + ".self_attn.q_proj.";
        t[p + "lora_A.weight"] = {2, hidden};
        t[p + "lora_B.weight"] = {q, 2};
    }
    return t;
}

QString demoAdapter() { return kevtest::sourceDir() + "/resources/adapters/smollm2-135m-capitals"; }

double capitalShare(const std::string& s) {
    double up = 0, letters = 0;
    for (unsigned char c : s) {
        if (std::isalpha(c)) {
            ++letters;
            if (std::isupper(c)) ++up;
        }
    }
    return letters > 0 ? up / letters : 0.0;
}

}  // namespace

// The transformers + peft reference runs are the slow part of this file (a Python
// start-up, and for the built-in model transformers parses the GGUF twice). Each runs in
// a test function of its own (the *Reference functions), apart from Kev's side (the
// *Parity functions), so that no single function comes near Qt Test's 300 s watchdog on
// a busy machine. Results are kept by key; a Parity function run alone computes its
// reference itself.
struct TinyCase {
    QString preset;
    QStringList adapterArgs;
    double scale;
};
const TinyCase kTinyCases[] = {
    {"tiny-llama", {}, 1.0},
    {"tiny-qwen2", {"--regex", R"(.*\.(q_proj|v_proj|down_proj))", "--rslora", "--rank", "3"}, 0.5},
};
const char* const kTinyTags[] = {"llama, every module, scale 1", "qwen2 bias+tied, regex q/v/down, rslora, scale 0.5"};

class TestLora : public QObject {
    Q_OBJECT

    std::map<QString, QJsonObject> refs_;  // reference logits by preset / "demo"

    // Makes the random adapter for `c` and its reference logits (one Python run).
    QJsonObject tinyReference(const TinyCase& c) {
        auto it = refs_.find(c.preset);
        if (it != refs_.end()) return it->second;
        const QString adapter = kevtest::workDir("lora-adapter-" + c.preset);
        const QByteArray out = kevtest::runReference(
            "peft_logits.py", QStringList{"make-adapter", "--model", tinyModel(c.preset), "--out", adapter, "--tokens",
                                          tokensArg(), "--scale", QString::number(c.scale)} + c.adapterArgs);
        const QJsonObject ref = QJsonDocument::fromJson(out).object();
        if (!ref.isEmpty()) refs_[c.preset] = ref;
        return ref;
    }

    QJsonObject demoReference() {
        auto it = refs_.find("demo");
        if (it != refs_.end()) return it->second;
        QStringList t;
        for (auto v : kDemoTokens) t << QString::number(v);
        const QByteArray out = kevtest::runReference(
            "peft_logits.py", {"logits", "--model", kevtest::builtinModel(), "--adapter", demoAdapter(), "--tokens", t.join(',')});
        const QJsonObject ref = QJsonDocument::fromJson(out).object();
        if (!ref.isEmpty()) refs_["demo"] = ref;
        return ref;
    }

    static constexpr std::int64_t kDemoTokens[] = {1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365};

private Q_SLOTS:
    void initTestCase() {
        // The reference runs read local folders only: no Hugging Face Hub look-ups, which
        // on a machine without network can wait on time-outs.
        qputenv("HF_HUB_OFFLINE", "1");
        qputenv("TRANSFORMERS_OFFLINE", "1");
        qputenv("HF_HUB_DISABLE_TELEMETRY", "1");
        // One thread, here and in the reference scripts. A decode step runs hundreds of
        // parallel regions, and on an oversubscribed machine each one waits at its
        // barrier for a sibling thread the scheduler has put aside: measured at load 8 on
        // 2 cores, demoAdapterWritesCapitals took 177 s with 2 threads (6.5 s quiet).
        // Kev's kernels give the same numbers on any thread count, so nothing asserted
        // here depends on it.
        at::set_num_threads(1);
        qputenv("OMP_NUM_THREADS", "1");
    }

    // transformers + peft on the same base and a random adapter (made by PEFT here).
    void peftReferenceTinyModels_data() {
        QTest::addColumn<int>("index");
        for (int i = 0; i < 2; ++i) QTest::newRow(kTinyTags[i]) << i;
    }
    void peftReferenceTinyModels() {
        QFETCH(int, index);
        const QJsonObject ref = tinyReference(kTinyCases[index]);
        QVERIFY2(!ref.isEmpty(), "the reference script produced no logits");
        QCOMPARE(ref["base"].toArray().size(), ref["lora"].toArray().size());
    }

    // Kev on the same base and adapter: same logits as the reference, both ways.
    void peftParityTinyModels_data() {
        QTest::addColumn<int>("index");
        for (int i = 0; i < 2; ++i) QTest::newRow(kTinyTags[i]) << i;
    }
    void peftParityTinyModels() {
        QFETCH(int, index);
        const TinyCase& c = kTinyCases[index];
        const QString preset = c.preset;
        const double scale = c.scale;
        const QString model = tinyModel(preset);
        const QString adapter = kevtest::workDir("lora-adapter-" + preset);
        const QJsonObject ref = tinyReference(c);
        QVERIFY(!ref.isEmpty());
        auto m = loadF32(model);
        m->attach_lora(kev::load_lora_adapter(adapter.toStdString(), *m));
        const at::Tensor base = logits(*m, kTokens);
        const at::Tensor perRow = logits(*m, kTokens, static_cast<float>(scale));
        m->merge_lora(static_cast<float>(scale));
        const at::Tensor merged = logits(*m, kTokens);
        const float dBase = maxDiff(base, fromJson(ref["base"].toArray()));
        const float dRow = maxDiff(perRow, fromJson(ref["lora"].toArray()));
        const float dMerged = maxDiff(merged, fromJson(ref["lora"].toArray()));
        const float dEffect = maxDiff(base, perRow);
        qInfo("%s: base %.2e, per-row %.2e, merged %.2e vs peft; merged vs per-row %.2e; LoRA effect %.3f",
              qPrintable(preset), dBase, dRow, dMerged, maxDiff(merged, perRow), dEffect);
        QVERIFY2(dEffect > 1e-2, "the adapter must change the logits for this test to mean anything");
        QVERIFY(dBase <= 1e-4);
        QVERIFY(dRow <= 1e-4);
        QVERIFY(dMerged <= 1e-4);
        QVERIFY(maxDiff(merged, perRow) <= 1e-4);
    }

    // Off after merge: the very same weight tensors come back, so the logits are exact.
    void unmergeRestoresBaseExactly() {
        auto m = loadF32(tinyModel("tiny-llama"));
        const at::Tensor before = logits(*m, kTokens);
        const void* qkv = m->weights().layers[0].qkv.weight.data_ptr();
        m->attach_lora(kev::load_lora_adapter(kevtest::workDir("lora-adapter-tiny-llama").toStdString(), *m));
        m->merge_lora(1.0f);
        QVERIFY(m->weights().layers[0].qkv.weight.data_ptr() != qkv);
        m->merge_lora(2.0f);  // another scale: re-merged from the originals
        QCOMPARE(*m->merged_lora_scale(), 2.0f);
        m->unmerge_lora();
        QVERIFY(!m->merged_lora_scale());
        QCOMPARE(m->weights().layers[0].qkv.weight.data_ptr(), qkv);
        QCOMPARE(maxDiff(logits(*m, kTokens), before), 0.0f);
        m->merge_lora(1.0f);
        m->attach_lora(nullptr);  // detaching unmerges too
        QCOMPARE(maxDiff(logits(*m, kTokens), before), 0.0f);
        QCOMPARE(maxDiff(logits(*m, kTokens, std::nullopt), before), 0.0f);
    }

    // One pack, LoRA-on and LoRA-off cards (with a shared context): each equals its own run.
    void mixedPackEqualsSingleRuns() {
        auto m = loadF32(tinyModel("tiny-qwen2"));
        m->attach_lora(kev::load_lora_adapter(kevtest::workDir("lora-adapter-tiny-qwen2").toStdString(), *m));
        kev::SamplingSettings s;
        s.temperature = 0.0f;
        s.max_new_tokens = 6;
        const std::vector<kev::TokenId> shared = {11, 12, 13};
        std::vector<kev::TokenCard> cards = {{{20, 21, 22, 23}, s, {true, 1.0f}},
                                             {{30, 31}, s, {false, 1.0f}},
                                             {{40, 41, 42}, s, {true, 0.5f}}};
        kev::Generator g(*m, nullptr, std::nullopt);
        kev::RunOptions o;
        o.keep_logits = true;
        o.ignore_end_of_sequence = true;
        const kev::PreparedPack pack = g.prepare_tokens(cards, shared);
        QCOMPARE(g.lora_mode(pack), kev::LoraMode::PerCard);
        QCOMPARE(pack.plan.shared_length, std::int64_t(0));  // cards that differ in LoRA share no cache
        const kev::GenerationResult packed = g.run(pack, o);
        QCOMPARE(packed.lora_mode, kev::LoraMode::PerCard);
        bool changed = false;
        for (std::size_t c = 0; c < cards.size(); ++c) {
            const kev::PreparedPack one = g.prepare_tokens({cards[c]}, shared);
            const kev::GenerationResult alone = g.run(one, o);
            QCOMPARE(alone.lora_mode, cards[c].lora.enabled ? kev::LoraMode::Merged : kev::LoraMode::Off);
            QCOMPARE(one.plan.shared_length, std::int64_t(3));
            QCOMPARE(packed.cards[c].tokens, alone.cards[0].tokens);
            float d = 0;
            for (std::size_t t = 0; t < alone.cards[0].logits.size(); ++t)
                for (std::size_t v = 0; v < alone.cards[0].logits[t].size(); ++v)
                    d = std::max(d, std::fabs(alone.cards[0].logits[t][v] - packed.cards[c].logits[t][v]));
            qInfo("card %zu (LoRA %s): packed vs alone %.2e", c, cards[c].lora.enabled ? "on" : "off", d);
            QVERIFY(d <= 1e-4);
            // The same card without LoRA differs: the adapter really acted per row.
            if (cards[c].lora.enabled) {
                kev::TokenCard off = cards[c];
                off.lora.enabled = false;
                const kev::GenerationResult base = g.run(g.prepare_tokens({off}, shared), o);
                changed = changed || base.cards[0].logits[0] != alone.cards[0].logits[0];
            }
        }
        QVERIFY(changed);
        QVERIFY(!m->merged_lora_scale());  // the last run was LoRA-off: base weights back
    }

    void scaleOutOfRangeIsAClearError() {
        auto m = loadF32(tinyModel("tiny-llama"));
        kev::SamplingSettings s;
        s.max_new_tokens = 2;
        kev::Generator g(*m, nullptr, std::nullopt);
        try {
            g.prepare_tokens({{{5, 6}, s, {true, 1.0f}}}, {});
            QFAIL("LoRA without an adapter was accepted");
        } catch (const kev::Error& e) {
            QVERIFY2(std::string(e.what()).find("no adapter") != std::string::npos, e.what());
        }
        m->attach_lora(kev::load_lora_adapter(kevtest::workDir("lora-adapter-tiny-llama").toStdString(), *m));
        for (float bad : {-0.5f, 2.5f, NAN}) {
            try {
                g.prepare_tokens({{{5, 6}, s, {true, bad}}}, {});
                QFAIL("a bad scale was accepted");
            } catch (const kev::Error& e) {
                QCOMPARE(e.code(), kev::ErrorCode::InvalidArgument);
                QVERIFY2(std::string(e.what()).find("card 1: LoRA scale") != std::string::npos, e.what());
            }
        }
        QVERIFY_THROWS_EXCEPTION(kev::Error, m->merge_lora(3.0f));
        QVERIFY(!m->merged_lora_scale());
    }

    // The demo adapter (SmolLM2, hidden 576) on a tiny model: refused, naming the module
    // and both shapes; the model is unchanged.
    void adapterForAnotherModelIsRefused() {
        auto m = loadF32(tinyModel("tiny-llama"));
        const at::Tensor before = logits(*m, kTokens);
        try {
            m->attach_lora(kev::load_lora_adapter(demoAdapter().toStdString(), *m));
            QFAIL("an adapter for another model was accepted");
        } catch (const kev::Error& e) {
            const std::string msg = e.what();
            qInfo("%s", e.what());
            QCOMPARE(e.code(), kev::ErrorCode::Format);  // an adapter error (kev-cli exit 1), not a usage error
            QVERIFY2(msg.find("model.layers.0.") != std::string::npos && msg.find("another model") != std::string::npos &&
                         msg.find("576]") != std::string::npos && msg.find("[8, 64]") != std::string::npos,
                     e.what());
        }
        QVERIFY(!m->lora());
        QCOMPARE(maxDiff(logits(*m, kTokens), before), 0.0f);
        // More layers than the model has.
        const QString deep = kevtest::workDir("lora-bad/deep");
        writeAdapter(deep, baseConfig(), qProjTensors(3, 64, 64));
        try {
            kev::load_lora_adapter(deep.toStdString(), *m);
            QFAIL("an adapter for a deeper model was accepted");
        } catch (const kev::Error& e) {
            QVERIFY2(std::string(e.what()).find("layer 2 but this model has 2 layers") != std::string::npos, e.what());
        }
    }

    // Options Kev does not apply are refused by name.
    void badConfigsRefusedByName_data() {
        QTest::addColumn<QString>("key");
        QTest::addColumn<QString>("value");  // JSON
        QTest::addColumn<QString>("expected");
        QTest::newRow("modules_to_save") << "modules_to_save" << R"(["lm_head"])" << "modules_to_save";
        QTest::newRow("dora") << "use_dora" << "true" << "use_dora";
        QTest::newRow("bias") << "bias" << R"("all")" << "bias \"all\"";
        QTest::newRow("rank_pattern") << "rank_pattern" << R"({"q_proj": 4})" << "rank_pattern";
        QTest::newRow("alpha_pattern") << "alpha_pattern" << R"({"q_proj": 4})" << "alpha_pattern";
        QTest::newRow("layers_to_transform") << "layers_to_transform" << "[0]" << "layers_to_transform";
        QTest::newRow("pissa") << "init_lora_weights" << R"("pissa")" << "init_lora_weights";
        QTest::newRow("not lora") << "peft_type" << R"("IA3")" << "IA3";
        QTest::newRow("lm_head") << "target_modules" << R"(["q_proj", "lm_head"])" << "lm_head";
        QTest::newRow("missing module") << "target_modules" << R"(["q_proj", "c_attn"])" << "\"c_attn\" does not exist";
        QTest::newRow("regex matching nothing") << "target_modules" << R"("attn\\.c_.*")" << "matches no module";
        QTest::newRow("bad rank") << "r" << "0" << "not a usable rank";
        // Hostile target patterns: refused quickly (PCRE2 with limits), never a hang or a crash.
        QTest::newRow("regex backtracking") << "target_modules" << "\"(.*.*)*s_proj\"" << "pattern too expensive";
        QTest::newRow("regex (.*.*)*X") << "target_modules" << "\"(.*.*)*X\"" << "target_modules \"(.*.*)*X\"";
        QTest::newRow("regex 20000 brackets") << "target_modules" << "\"" + QString(20000, '(') + QString(20000, ')') + "\""
                                              << "adapter_config.json: target_modules";
        QTest::newRow("regex nested 40") << "target_modules" << "\"" + QString(40, '(') + "q_proj" + QString(40, ')') + "\""
                                         << "parentheses nested deeper than 32";
        QTest::newRow("regex invalid") << "target_modules" << "\"q_proj(\"" << "not a valid regular expression";
        QTest::newRow("regex full match") << "target_modules" << R"("q_proj")" << "matches no module";
        QTest::newRow("alpha 1e38") << "lora_alpha" << "1e38" << "adapter_config.json: lora_alpha 1e+38 with r = 2";
        QTest::newRow("alpha 0") << "lora_alpha" << "0" << "adapter_config.json: lora_alpha 0 must be positive";
        QTest::newRow("alpha negative") << "lora_alpha" << "-4" << "lora_alpha -4 must be positive";
        QTest::newRow("rank differs from tensors") << "r" << "4" << "rank r = 4";
    }
    void badConfigsRefusedByName() {
        QFETCH(QString, key);
        QFETCH(QString, value);
        QFETCH(QString, expected);
        auto m = loadF32(tinyModel("tiny-llama"));
        QJsonObject cfg = baseConfig();
        cfg[key] = QJsonDocument::fromJson("[" + value.toUtf8() + "]").array().at(0);
        const QString dir = kevtest::workDir("lora-bad/" + QString(QTest::currentDataTag()).replace(' ', '-'));
        writeAdapter(dir, cfg, qProjTensors(2, 64, 64));
        try {
            kev::load_lora_adapter(dir.toStdString(), *m);
            QFAIL("accepted");
        } catch (const kev::Error& e) {
            QVERIFY2(std::string(e.what()).find(expected.toStdString()) != std::string::npos, e.what());
        }
        // The same folder with the plain config loads: the refusal was for that option.
        writeAdapter(dir, baseConfig(), qProjTensors(2, 64, 64));
        QCOMPARE(kev::load_lora_adapter(dir.toStdString(), *m)->modules.size(), std::size_t(2));
    }

    // NaN/Inf in a factor: refused at load, naming the file and the tensor.
    void nonFiniteAdapterWeightIsRefused() {
        auto m = loadF32(tinyModel("tiny-llama"));
        const QString dir = kevtest::workDir("lora-bad/nan-weight");
        writeAdapter(dir, baseConfig(), qProjTensors(2, 64, 64));
        {
            // The last value of the last tensor in the file (names sort: layers.1 ... lora_B).
            std::fstream f(dir.toStdString() + "/adapter_model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
            f.seekp(-4, std::ios::end);
            const float nan = NAN;
            f.write(reinterpret_cast<const char*>(&nan), 4);
        }
        try {
            kev::load_lora_adapter(dir.toStdString(), *m);
            QFAIL("accepted");
        } catch (const kev::Error& e) {
            QCOMPARE(e.code(), kev::ErrorCode::Format);
            QVERIFY2(std::strstr(e.what(), "adapter_model.safetensors: tensor base_model.model.model.layers.1.self_attn.q_proj.lora_B.weight holds NaN") != nullptr, e.what());
        }
    }

    void leftoverTensorIsRefused() {
        auto m = loadF32(tinyModel("tiny-llama"));
        auto tensors = qProjTensors(2, 64, 64);
        tensors["base_model.model.lm_head.weight"] = {512, 64};
        const QString dir = kevtest::workDir("lora-bad/leftover");
        writeAdapter(dir, baseConfig(), tensors);
        QVERIFY_THROWS_EXCEPTION(kev::Error, kev::load_lora_adapter(dir.toStdString(), *m));
    }

    // The shipped demo adapter on the built-in model: transformers + peft's logits ...
    void demoAdapterReference() {
        // Both come with set-up (the model) and the repository (the adapter): missing is a failure.
        QVERIFY2(QFile::exists(kevtest::builtinModel()), "the built-in model is installed by packaging/setup.sh");
        QVERIFY2(QFile::exists(demoAdapter() + "/adapter_model.safetensors"), "the demo adapter is part of the repository");
        const QJsonObject ref = demoReference();
        QVERIFY2(!ref.isEmpty(), "the reference script produced no logits");
        QCOMPARE(ref["lora"].toArray().size(), qsizetype(std::size(kDemoTokens)));
    }
    // ... and Kev's, per row and merged.
    void demoAdapterPeftParity() {
        const QString gguf = kevtest::builtinModel();
        QVERIFY2(QFile::exists(gguf), "the built-in model is installed by packaging/setup.sh");
        QVERIFY2(QFile::exists(demoAdapter() + "/adapter_model.safetensors"), "the demo adapter is part of the repository");
        const std::vector<std::int64_t> tokens(std::begin(kDemoTokens), std::end(kDemoTokens));
        const QJsonObject ref = demoReference();
        QVERIFY(!ref.isEmpty());
        auto m = loadF32(gguf);
        m->attach_lora(kev::load_lora_adapter(demoAdapter().toStdString(), *m));
        const float dRow = maxDiff(logits(*m, tokens, 1.0f), fromJson(ref["lora"].toArray()));
        m->merge_lora(1.0f);
        const float dMerged = maxDiff(logits(*m, tokens), fromJson(ref["lora"].toArray()));
        qInfo("demo adapter vs peft: per-row %.2e, merged %.2e", dRow, dMerged);
        // The built-in model's own tolerance against transformers (tst_builtin_model).
        QVERIFY(dRow <= 2e-3);
        QVERIFY(dMerged <= 2e-3);
    }

    // Eight questions, LoRA on and off side by side in one pack (per card).
    void demoAdapterWritesCapitals() {
        const QString gguf = kevtest::builtinModel();
        // Both come with set-up (the model) and the repository (the adapter): missing is a failure.
        QVERIFY2(QFile::exists(gguf), "the built-in model is installed by packaging/setup.sh");
        QVERIFY2(QFile::exists(demoAdapter() + "/adapter_model.safetensors"), "the demo adapter is part of the repository");
        auto session = kev::Session::open(gguf.toStdString(), {});
        session->load_lora(demoAdapter().toStdString());
        const QStringList questions = {"What is the capital of France?", "Name three colors.",
                                       "How do plants grow?",          "What is a computer?",
                                       "Describe a cat.",               "Why is the sky blue?",
                                       "What do bees make?",            "Give me a tip for studying."};
        kev::GenerationRequest r;
        for (bool on : {true, false}) {
            for (const QString& q : questions) {
                kev::CardRequest c;
                c.question = q.toStdString();
                c.sampling.temperature = 0.0f;
                c.sampling.max_new_tokens = 40;
                c.lora = {on, 1.0f};
                r.cards.push_back(c);
            }
        }
        const kev::Generator g = session->generator();
        const kev::GenerationResult res = g.run(g.prepare(r));
        QCOMPARE(res.lora_mode, kev::LoraMode::PerCard);
        std::string on, off;
        for (int i = 0; i < 8; ++i) on += res.cards[static_cast<std::size_t>(i)].text;
        for (int i = 8; i < 16; ++i) off += res.cards[static_cast<std::size_t>(i)].text;
        qInfo("LoRA on: %.1f%% capitals (%s...)", 100 * capitalShare(on), res.cards[0].text.substr(0, 60).c_str());
        qInfo("LoRA off: %.1f%% capitals (%s...)", 100 * capitalShare(off), res.cards[8].text.substr(0, 60).c_str());
        QVERIFY(capitalShare(on) >= 0.9);
        QVERIFY(capitalShare(off) < 0.2);
    }
};

QTEST_GUILESS_MAIN(TestLora)
#include "tst_lora.moc"
