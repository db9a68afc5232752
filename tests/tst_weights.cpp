// Loading: config.json parsing, the safetensors reader on well-formed and malformed
// files, sharded folders, the checkpoint-name table (missing / unexpected / misshapen
// tensors reported by name), pickle refusal, and GGUF files written the way
// llama.cpp's converter writes them (q/k permutation, rope_freqs, tied head) giving
// the same model as the safetensors folder they came from.
#include <QtTest>

#include <cmath>
#include <fstream>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "kev/error.h"
#include "kev/model.h"
#include "kev/safetensors.h"
#include "kev_test_env.h"

namespace {

// A safetensors file: 8-byte little-endian header length, header, `data_bytes` zeros.
QByteArray st_bytes(const QByteArray& header, qint64 data_bytes, quint64 claimed_len = ~0ull) {
    const quint64 len = claimed_len == ~0ull ? static_cast<quint64>(header.size()) : claimed_len;
    QByteArray out;
    for (int i = 0; i < 8; ++i) out.append(static_cast<char>((len >> (8 * i)) & 0xff));
    out += header;
    out += QByteArray(data_bytes, '\0');
    return out;
}

QString write_file(const QString& path, const QByteArray& bytes) {
    QFile f(path);
    if (!f.open(QIODevice::WriteOnly | QIODevice::Truncate)) return {};
    f.write(bytes);
    return path;
}

// Expects `fn` to throw kev::Error with `code` and a message containing every part.
template <typename Fn>
bool throws(Fn fn, kev::ErrorCode code, std::initializer_list<const char*> parts) {
    try {
        fn();
    } catch (const kev::Error& e) {
        const std::string msg = e.what();
        bool ok = e.code() == code;
        for (const char* p : parts) ok = ok && msg.find(p) != std::string::npos;
        if (!ok) qWarning("unexpected error (%s): %s", kev::to_string(e.code()), e.what());
        return ok;
    } catch (const std::exception& e) {
        qWarning("not a kev::Error: %s", e.what());
        return false;
    }
    qWarning("no error thrown");
    return false;
}

// A safetensors header from (name, dtype, shape) entries laid out back to back.
struct Spec {
    std::string name;
    std::string dtype;
    std::vector<std::int64_t> shape;
};
QByteArray header_for(const std::vector<Spec>& specs, qint64* data_bytes) {
    QByteArray h = "{\"__metadata__\":{\"format\":\"pt\"}";
    qint64 off = 0;
    for (const Spec& s : specs) {
        qint64 n = s.dtype == "F32" ? 4 : 2;
        QByteArray shape;
        for (std::size_t i = 0; i < s.shape.size(); ++i) {
            n *= s.shape[i];
            shape += (i ? "," : "") + QByteArray::number(static_cast<qlonglong>(s.shape[i]));
        }
        h += ",\"" + QByteArray::fromStdString(s.name) + "\":{\"dtype\":\"" + QByteArray::fromStdString(s.dtype) +
             "\",\"shape\":[" + shape + "],\"data_offsets\":[" + QByteArray::number(off) + "," +
             QByteArray::number(off + n) + "]}";
        off += n;
    }
    *data_bytes = off;
    return h + "}";
}

double max_diff(const at::Tensor& a, const at::Tensor& b) {
    return (a.to(at::kFloat) - b.to(at::kFloat)).abs().max().item<double>();
}

}  // namespace

class TestWeights : public QObject {
    Q_OBJECT

private:
    QString work_;
    std::map<QString, QString> models_;  // preset -> folder

    // n > 9: a longer prompt (past the 16-token windows of the Gemma presets).
    at::Tensor logits_of(const kev::Model& m, int n = 9) {
        std::vector<std::int64_t> toks{1, 17, 300, 42, 99, 5, 7, 400, 3};
        for (int i = 9; i < n; ++i) toks.push_back((i * 37 + 11) % 512);
        kev::ForwardBatch b = kev::single_sequence_batch(toks, 0, false);
        for (auto& p : b.positions) p += 1500;  // far positions: RoPE details matter
        kev::KvCache cache = m.make_cache(static_cast<std::int64_t>(toks.size()));
        return m.forward(b, cache);
    }

    // Builds a folder with `preset`'s config and a hand-made model.safetensors whose
    // tensors are those of the real one, edited by `edit`.
    QString edited_model(const QString& name, const std::function<void(std::vector<Spec>&)>& edit) {
        const QString src = models_.at(QStringLiteral("tiny-qwen2"));
        const QString dir = work_ + QLatin1Char('/') + name;
        QDir().mkpath(dir);
        QFile::remove(dir + QStringLiteral("/config.json"));
        QFile::copy(src + QStringLiteral("/config.json"), dir + QStringLiteral("/config.json"));
        auto st = kev::SafetensorsFile::open((src + QStringLiteral("/model.safetensors")).toStdString());
        std::vector<Spec> specs;
        for (const auto& [n, t] : st->tensors()) specs.push_back({n, kev::to_string(t.dtype), t.shape});
        edit(specs);
        qint64 data = 0;
        const QByteArray h = header_for(specs, &data);
        write_file(dir + QStringLiteral("/model.safetensors"), st_bytes(h, data));
        return dir;
    }

private Q_SLOTS:
    void initTestCase() {
        // One intra-op thread: these tests check numbers, not speed, and on a shared
        // 2-core machine two OpenMP threads stall at every barrier when the other
        // core is busy (measured: 8x slower decode steps under load).
        at::set_num_threads(1);
        work_ = kevtest::workDir(QStringLiteral("weights"));
        for (const char* preset : {"tiny-llama", "tiny-qwen2", "tiny-qwen3", "tiny-phi3", "tiny-phi4", "tiny-gemma2", "tiny-gemma3"}) {
            const QString dir = work_ + QLatin1Char('/') + QLatin1String(preset);
            QStringList args{QStringLiteral("--preset"), QLatin1String(preset), QStringLiteral("--out"), dir};
            // As llama.cpp reads Gemma files: queries scaled by the head size, Gemma 3's
            // windowed layers five of six (so the GGUF can say the same model).
            if (QLatin1String(preset) == QLatin1String("tiny-gemma2"))
                args << QStringLiteral("--set") << QStringLiteral("query_pre_attn_scalar=16");
            if (QLatin1String(preset) == QLatin1String("tiny-gemma3"))
                args << QStringLiteral("--set") << QStringLiteral("num_hidden_layers=7") << QStringLiteral("--set")
                     << QStringLiteral("layer_types=[\"sliding_attention\",\"sliding_attention\",\"sliding_attention\","
                                       "\"sliding_attention\",\"sliding_attention\",\"full_attention\",\"sliding_attention\"]");
            QVERIFY(!kevtest::runReference(QStringLiteral("make_random_model.py"), args).isEmpty());
            models_[QLatin1String(preset)] = dir;
        }
    }

    // ---- config.json ----
    void configParsing() {
        const std::string base =
            R"({"model_type":"llama","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,)"
            R"("num_key_value_heads":2,"intermediate_size":128,"vocab_size":512,"max_position_embeddings":4096,)";
        // Old-style rope keys.
        kev::ModelConfig c = kev::config_from_hf_json(
            base + R"("rope_theta":500000.0,"rope_scaling":{"type":"linear","factor":4.0},"eos_token_id":[7,9]})", "a.json");
        QCOMPARE(c.rope_theta, 500000.0);
        QCOMPARE(c.rope_scaling.kind, kev::RopeScalingKind::Linear);
        QCOMPARE(c.rope_scaling.factor, 4.0);
        QCOMPARE(c.head_dim, std::int64_t(16));
        QCOMPARE(c.eos_token_ids, (std::vector<std::int64_t>{7, 9}));
        QVERIFY(!c.tie_word_embeddings);
        QVERIFY(throws([&] { kev::config_from_hf_json(base + R"("rope_scaling":{"rope_type":"yarn","factor":4.0}})", "b.json"); },
                       kev::ErrorCode::Unsupported, {"b.json", "yarn"}));
        QVERIFY(throws([&] { kev::config_from_hf_json(R"({"model_type":"falcon"})", "c.json"); },
                       kev::ErrorCode::Unsupported, {"c.json", "falcon"}));
        // Mistral: the Llama decoder under its own name; a sliding window on every layer
        // (computed in the forward: a card is no longer held to it), null or absent: none.
        const std::string mistral = base;
        const kev::ModelConfig m = kev::config_from_hf_json(
            std::string(mistral).replace(mistral.find("llama"), 5, "mistral") + R"("sliding_window":1024})", "m.json");
        QCOMPARE(m.arch, kev::Arch::Mistral);
        QCOMPARE(m.sliding_window, std::int64_t(1024));
        QCOMPARE(m.max_positions, std::int64_t(4096));
        QVERIFY(m.windowed_layers.empty() && m.layer_windowed(0) && m.layer_windowed(1));
        const kev::ModelConfig m0 = kev::config_from_hf_json(
            std::string(mistral).replace(mistral.find("llama"), 5, "mistral") + R"("sliding_window":null})", "m0.json");
        QCOMPARE(m0.sliding_window, std::int64_t(0));
        QCOMPARE(m0.max_positions, std::int64_t(4096));
        QVERIFY(throws([&] { kev::config_from_hf_json(std::string(mistral).replace(mistral.find("llama"), 5, "mistral") +
                                                          R"("sliding_window":-4})", "m1.json"); },
                       kev::ErrorCode::Format, {"m1.json", "sliding_window"}));
        // Phi-3: fused tensors; Phi-4-mini's partial rotary and Phi-3.5's LongRoPE as their
        // folders write them (at the top and in rope_scaling), their mistakes named.
        const std::string phi3 = std::string(base).replace(base.find("llama"), 5, "phi3");
        const kev::ModelConfig p3 = kev::config_from_hf_json(phi3 + R"("sliding_window":2047})", "p.json");
        QVERIFY(p3.arch == kev::Arch::Phi3 && p3.fused_qkv && p3.fused_gate_up);
        QCOMPARE(p3.sliding_window, std::int64_t(2047));
        QCOMPARE(p3.max_positions, std::int64_t(4096));
        const std::int64_t D = p3.head_dim;  // 16: hidden 64 / 4 heads
        const kev::ModelConfig p1 = kev::config_from_hf_json(phi3 + R"("partial_rotary_factor":0.75})", "p1.json");
        QCOMPARE(p1.rotary_dim, D * 3 / 4);
        QCOMPARE(p1.rope_dim(), D * 3 / 4);
        const kev::ModelConfig p2 =
            kev::config_from_hf_json(phi3 + R"("rope_parameters":{"rope_type":"default","partial_rotary_factor":0.5}})", "p2.json");
        QCOMPARE(p2.rotary_dim, D / 2);
        auto factors = [](std::int64_t n, double v) {
            std::string s = "[";
            for (std::int64_t i = 0; i < n; ++i) s += (i ? "," : "") + std::to_string(v + 0.25 * static_cast<double>(i));
            return s + "]";
        };
        // Phi-3.5-mini as its folder writes it: "su"-era keys, original length at the top.
        const std::string longrope = R"("original_max_position_embeddings":1024,"rope_scaling":{"type":"longrope","short_factor":)" +
                                     factors(D / 2, 1.0) + R"(,"long_factor":)" + factors(D / 2, 2.0) + "}}";
        const kev::ModelConfig p3l = kev::config_from_hf_json(phi3 + longrope, "p3.json");
        QCOMPARE(p3l.rope_scaling.kind, kev::RopeScalingKind::LongRope);
        QCOMPARE(p3l.rope_scaling.original_max_positions, std::int64_t(1024));
        QCOMPARE(p3l.rope_scaling.long_factor[1], 2.25);
        QCOMPARE(p3l.rope_scaling.attention_factor, std::sqrt(1.0 + std::log(4.0) / std::log(1024.0)));  // 4096 / 1024
        const kev::ModelConfig su = kev::config_from_hf_json(
            phi3 + std::string(longrope).replace(longrope.find("longrope"), 8, "su"), "su.json");
        QCOMPARE(su.rope_scaling.kind, kev::RopeScalingKind::LongRope);
        // An explicit attention_factor wins; the factor lists must fit the rotary size.
        const kev::ModelConfig af = kev::config_from_hf_json(
            phi3 + R"("rope_scaling":{"type":"longrope","attention_factor":1.5,"short_factor":)" + factors(D / 2, 1.0) +
                R"(,"long_factor":)" + factors(D / 2, 1.0) + "}}", "af.json");
        QCOMPARE(af.rope_scaling.attention_factor, 1.5);
        // The original length and the attention factor are checked wherever they came from.
        const std::string ok_factors = R"("short_factor":)" + factors(D / 2, 1.0) + R"(,"long_factor":)" + factors(D / 2, 1.0) + "}}";
        QVERIFY(throws([&] { kev::config_from_hf_json(phi3 + R"("rope_scaling":{"type":"longrope","original_max_position_embeddings":1,)" +
                                                          ok_factors, "o1.json"); },
                       kev::ErrorCode::Format, {"o1.json", "original_max_position_embeddings 1", "2..16777216"}));
        QVERIFY(throws([&] { kev::config_from_hf_json(phi3 + R"("rope_scaling":{"type":"longrope","attention_factor":-2,)" + ok_factors,
                                                      "o2.json"); },
                       kev::ErrorCode::Format, {"o2.json", "attention_factor -2", "positive finite"}));
        QCOMPARE(kev::longrope_default_attention_factor(0.5, 1024), 1.0);  // a shorter context is not scaled
        QCOMPARE(kev::longrope_default_attention_factor(4.0, 1), 1.0);     // nor one with no original length
        QVERIFY(throws([&] { kev::config_from_hf_json(phi3 + R"("rope_scaling":{"type":"longrope","short_factor":[1],"long_factor":[1]}})",
                                                      "p4.json"); },
                       kev::ErrorCode::Format, {"p4.json", "short_factor lists 1 factors", "needs 8"}));
        QVERIFY(throws([&] { kev::config_from_hf_json(phi3 + R"("partial_rotary_factor":0.75,"rope_scaling":{"type":"longrope",)"
                                                                 R"("short_factor":)" + factors(D / 2, 1.0) + R"(,"long_factor":)" +
                                                          factors(D / 2, 1.0) + "}}", "p5.json"); },
                       kev::ErrorCode::Format, {"p5.json", "needs 6"}));
        QVERIFY(throws([&] { kev::config_from_hf_json(phi3 + R"("rope_scaling":{"type":"longrope","short_factor":[1],"long_factor":"x"}})",
                                                      "p6.json"); },
                       kev::ErrorCode::Format, {"p6.json", "long_factor", "not a list"}));
        QVERIFY(throws([&] { kev::config_from_hf_json(phi3 + R"("partial_rotary_factor":1.5})", "p7.json"); },
                       kev::ErrorCode::Format, {"p7.json", "partial_rotary_factor"}));
        QVERIFY(throws([&] { kev::config_from_hf_json(phi3 + R"("partial_rotary_factor":0.01})", "p7a.json"); },
                       kev::ErrorCode::Format, {"p7a.json", "turns 0 of head_dim 16 dims"}));
        QVERIFY(throws([&] { kev::config_from_hf_json(phi3 + R"("partial_rotary_factor":0.34})", "p7b.json"); },
                       kev::ErrorCode::Format, {"p7b.json", "rotary size 5", "must be even"}));
        // Only Phi-3's attention slices partial heads; LongRoPE is Phi-3's.
        QVERIFY(throws([&] { kev::config_from_hf_json(base + R"("partial_rotary_factor":0.5})", "p8.json"); },
                       kev::ErrorCode::Unsupported, {"p8.json", "partial rotary", "phi3 only"}));
        QVERIFY(throws([&] { kev::config_from_hf_json(base + R"("rope_scaling":{"type":"longrope","short_factor":[1],"long_factor":[1]}})",
                                                      "p9.json"); },
                       kev::ErrorCode::Unsupported, {"p9.json", "longrope", "phi3 only"}));
        // Gemma as older folders write it: no layer_types (Gemma 2 alternates from layer 0,
        // Gemma 3 follows sliding_window_pattern), Gemma 3's rope_local_base_freq at the top.
        const std::string gemma = std::string(base).replace(base.find("llama"), 5, "gemma2");
        const kev::ModelConfig g2 = kev::config_from_hf_json(
            gemma + R"("head_dim":16,"query_pre_attn_scalar":256,"sliding_window":4096,"attn_logit_softcapping":50.0,)"
                    R"("final_logit_softcapping":30.0,"hidden_activation":"gelu_pytorch_tanh"})", "g2.json");
        QVERIFY(g2.gemma_norms && g2.tie_word_embeddings && g2.activation == kev::Activation::GeluTanh);
        QVERIFY(g2.layer_windowed(0) && !g2.layer_windowed(1));
        QCOMPARE(g2.query_scale, 1.0 / 16.0);
        QCOMPARE(g2.final_softcap, 30.0);
        const std::string gemma3 = std::string(base).replace(base.find("llama"), 5, "gemma3_text");
        const std::string g3json = gemma3 + R"("num_hidden_layers":8,"sliding_window":512,"sliding_window_pattern":4,)"
                                            R"("rope_theta":1000000.0,"rope_local_base_freq":10000.0,)"
                                            R"("rope_scaling":{"rope_type":"linear","factor":8.0}})";
        // Without base's num_hidden_layers 2 (a JSON object names a key once).
        std::string g3text = g3json;
        g3text.erase(g3text.find(R"("num_hidden_layers":2,)"), std::string(R"("num_hidden_layers":2,)").size());
        const kev::ModelConfig g3 = kev::config_from_hf_json(g3text, "g3.json");
        QVERIFY(g3.arch == kev::Arch::Gemma3 && g3.qk_norm && g3.num_layers == 8);
        QVERIFY(g3.layer_windowed(2) && !g3.layer_windowed(3) && g3.layer_windowed(4) && !g3.layer_windowed(7));
        QCOMPARE(g3.rope_local_theta, 10000.0);
        QCOMPARE(g3.rope_scaling.kind, kev::RopeScalingKind::Linear);
        QVERIFY(throws([&] { kev::config_from_hf_json(std::string(base).replace(base.find("llama"), 5, "gemma3") + R"("rms_norm_eps":1e-6})", "g4.json"); },
                       kev::ErrorCode::Unsupported, {"g4.json", "gemma3_text"}));
        QVERIFY(throws([&] { kev::config_from_hf_json(gemma + R"("layer_types":["sliding_attention"]})", "g5.json"); },
                       kev::ErrorCode::Format, {"g5.json", "layer_types"}));
        QVERIFY(throws([&] { kev::config_from_hf_json(gemma + R"("layer_types":["sliding_attention","chunked_attention"]})", "g6.json"); },
                       kev::ErrorCode::Unsupported, {"g6.json", "chunked_attention"}));
        QVERIFY(throws([&] { kev::config_from_hf_json(gemma + R"("hidden_activation":"relu"})", "g7.json"); },
                       kev::ErrorCode::Unsupported, {"g7.json", "relu"}));
        QVERIFY(throws([&] { kev::config_from_hf_json(gemma + R"("final_logit_softcapping":-1.0})", "g8.json"); },
                       kev::ErrorCode::Format, {"g8.json", "final_logit_softcapping"}));
        // Qwen2's use_sliding_window: the window from max_window_layers on; no other family has the switch.
        const std::string qwen2 = std::string(base).replace(base.find("llama"), 5, "qwen2");
        const kev::ModelConfig qw = kev::config_from_hf_json(
            qwen2 + R"("use_sliding_window":true,"sliding_window":512,"max_window_layers":1})", "q.json");
        QVERIFY(qw.sliding_window == 512 && !qw.layer_windowed(0) && qw.layer_windowed(1));
        QCOMPARE(kev::config_from_hf_json(qwen2 + R"("use_sliding_window":false,"sliding_window":512})", "q0.json").sliding_window,
                 std::int64_t(0));
        QVERIFY(throws([&] { kev::config_from_hf_json(base + R"("use_sliding_window":true})", "q1.json"); },
                       kev::ErrorCode::Unsupported, {"q1.json", "use_sliding_window"}));
        QVERIFY(throws([&] { kev::config_from_hf_json(R"({"model_type":"llama","num_hidden_layers":2})", "d.json"); },
                       kev::ErrorCode::Format, {"d.json", "hidden_size"}));
        QVERIFY(throws([&] { kev::config_from_hf_json(R"({"model_type": llama})", "e.json"); }, kev::ErrorCode::Format,
                       {"e.json", "JSON"}));
        QVERIFY(throws([&] { kev::config_from_hf_json(base + R"("num_key_value_heads":3})", "f.json"); },
                       kev::ErrorCode::Format, {"f.json", "num_key_value_heads 3 does not divide num_attention_heads"}));
        QVERIFY(throws([&] { kev::config_from_hf_json(base + R"("hidden_size":"64"})", "g.json"); },
                       kev::ErrorCode::Format, {"g.json", "hidden_size"}));
        // generation_config.json wins for bos/eos.
        const kev::ModelConfig q = kev::load_hf_config(models_.at(QStringLiteral("tiny-qwen3")).toStdString());
        QCOMPARE(q.eos_token_ids, std::vector<std::int64_t>{2});
        QCOMPARE(q.bos_token_ids, std::vector<std::int64_t>{1});
    }

    // ---- safetensors: well-formed ----
    void safetensorsReads() {
        qint64 data = 0;
        const QByteArray h = header_for({{"a", "F32", {2, 3}}, {"b", "BF16", {4}}, {"c", "F16", {}}}, &data);
        const QString path = write_file(work_ + QStringLiteral("/good.safetensors"), st_bytes(h, data));
        auto st = kev::SafetensorsFile::open(path.toStdString());
        QCOMPARE(st->tensors().size(), std::size_t(3));
        QCOMPARE(st->find("a")->shape, (std::vector<std::int64_t>{2, 3}));
        QCOMPARE(st->find("b")->dtype, kev::SafetensorsDType::BF16);
        QCOMPARE(st->find("c")->nbytes, std::uint64_t(2));  // a scalar has one element
        QCOMPARE(st->find("b")->offset, std::uint64_t(8 + h.size() + 24));
    }

    // ---- safetensors: malformed; each a specific error, never a crash ----
    void safetensorsMalformed_data() {
        QTest::addColumn<QByteArray>("bytes");
        QTest::addColumn<int>("code");
        QTest::addColumn<QString>("expect1");
        QTest::addColumn<QString>("expect2");
        const int F = static_cast<int>(kev::ErrorCode::Format);
        qint64 data = 0;
        const QByteArray good = header_for({{"w", "F32", {2, 3}}}, &data);
        QTest::newRow("shorter than the length field") << QByteArray("abc") << F << "too short" << "";
        QTest::newRow("header length beyond file") << st_bytes(good, data, 1ull << 40) << F << "header length" << "past the end";
        QTest::newRow("header length overflow") << st_bytes(good, data, ~0ull - 3) << F << "header length" << "";
        QTest::newRow("bad JSON") << st_bytes("{\"w\": {\"dtype\": ", 0) << F << "not valid JSON" << "";
        QTest::newRow("not an object") << st_bytes("[1,2]", 0) << F << "not a JSON object" << "";
        QTest::newRow("offsets out of range")
            << st_bytes(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}})", 8) << F << "'w'" << "past the data region";
        QTest::newRow("truncated data") << st_bytes(good, data).left(8 + good.size() + 10) << F << "'w'" << "past the data region";
        QTest::newRow("size mismatch")
            << st_bytes(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})", 24) << F << "'w'" << "needs 24";
        QTest::newRow("offsets reversed")
            << st_bytes(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", 24) << F << "'w'" << "end before";
        QTest::newRow("negative offset")
            << st_bytes(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", 24) << F << "'w'" << "data_offsets";
        QTest::newRow("huge shape")
            << st_bytes(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,0]}})", 24) << F << "'w'"
            << "larger than the file";
        QTest::newRow("overlap")
            << st_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12)
            << F << "overlap" << "";
        QTest::newRow("missing dtype") << st_bytes(R"({"w":{"shape":[1],"data_offsets":[0,4]}})", 4) << F << "'w'" << "dtype";
        QTest::newRow("wrong dtype")
            << st_bytes(R"({"w":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", 8)
            << static_cast<int>(kev::ErrorCode::Unsupported) << "'w'" << "I64";
    }
    void safetensorsMalformed() {
        QFETCH(QByteArray, bytes);
        QFETCH(int, code);
        QFETCH(QString, expect1);
        QFETCH(QString, expect2);
        const QString path = write_file(work_ + QStringLiteral("/bad.safetensors"), bytes);
        const std::string e1 = expect1.toStdString(), e2 = expect2.toStdString();
        QVERIFY(throws([&] { kev::SafetensorsFile::open(path.toStdString()); }, static_cast<kev::ErrorCode>(code),
                       {"bad.safetensors", e1.c_str(), e2.c_str()}));
    }

    // ---- the name table ----
    void missingTensor() {
        const QString dir = edited_model(QStringLiteral("missing"), [](std::vector<Spec>& s) {
            s.erase(std::remove_if(s.begin(), s.end(), [](const Spec& x) { return x.name == "model.layers.1.mlp.up_proj.weight"; }),
                    s.end());
        });
        QVERIFY(throws([&] { kev::load_weights(dir.toStdString(), {}); }, kev::ErrorCode::Format,
                       {"missing tensor 'model.layers.1.mlp.up_proj.weight'", "[128, 64]"}));
    }
    void unexpectedTensor() {
        const QString dir = edited_model(QStringLiteral("unexpected"),
                                         [](std::vector<Spec>& s) { s.push_back({"model.layers.0.mlp.extra", "F32", {3}}); });
        QVERIFY(throws([&] { kev::load_weights(dir.toStdString(), {}); }, kev::ErrorCode::Format,
                       {"unexpected tensor 'model.layers.0.mlp.extra'"}));
    }
    // NaN/Inf in a norm weight (or a bias) is refused at load, naming the tensor; the
    // tensors' data here are zeros except the values written.
    void nonFiniteNormIsRefused_data() {
        QTest::addColumn<QString>("tensor");
        QTest::newRow("norm") << "model.layers.1.input_layernorm.weight";
        QTest::newRow("bias") << "model.layers.0.self_attn.k_proj.bias";
        QTest::newRow("final norm") << "model.norm.weight";
    }
    void nonFiniteNormIsRefused() {
        QFETCH(QString, tensor);
        const QString dir = edited_model(QStringLiteral("nonfinite-") + QTest::currentDataTag(), [](std::vector<Spec>&) {});
        const std::string file = (dir + QStringLiteral("/model.safetensors")).toStdString();
        std::uint64_t offset = 0;
        {
            auto st = kev::SafetensorsFile::open(file);
            const kev::SafetensorsTensor* t = st->find(tensor.toStdString());
            QVERIFY(t && t->dtype == kev::SafetensorsDType::F32);
            offset = t->offset;
        }
        std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
        const float nan = NAN, inf = -INFINITY;
        f.seekp(static_cast<std::streamoff>(offset + 4));
        f.write(reinterpret_cast<const char*>(&nan), 4);
        f.write(reinterpret_cast<const char*>(&inf), 4);
        f.close();
        QVERIFY(throws([&] { kev::load_weights(dir.toStdString(), {}); }, kev::ErrorCode::Format,
                       {"model.safetensors", (tensor.toStdString() + "': 2 non-finite values (NaN/Inf)").c_str()}));
    }
    void misshapenTensor() {
        const QString dir = edited_model(QStringLiteral("misshapen"), [](std::vector<Spec>& s) {
            for (auto& x : s)
                if (x.name == "model.layers.0.self_attn.k_proj.weight") x.shape = {64, 64};
        });
        QVERIFY(throws([&] { kev::load_weights(dir.toStdString(), {}); }, kev::ErrorCode::Format,
                       {"'model.layers.0.self_attn.k_proj.weight'", "[64, 64]", "[32, 64]"}));
    }

    void picklesRefused() {
        const QString dir = work_ + QStringLiteral("/pickle");
        QDir().mkpath(dir);
        QFile::remove(dir + QStringLiteral("/config.json"));
        QFile::copy(models_.at(QStringLiteral("tiny-llama")) + QStringLiteral("/config.json"), dir + QStringLiteral("/config.json"));
        write_file(dir + QStringLiteral("/pytorch_model.bin"), "PK\x03\x04 not really a zip");
        QVERIFY(throws([&] { kev::load_weights(dir.toStdString(), {}); }, kev::ErrorCode::Refused,
                       {"pytorch_model.bin", "pickle", "arbitrary code", "safetensors"}));
        const QString pt = write_file(work_ + QStringLiteral("/model.pth"), "\x80\x02}q\x00.");
        QVERIFY(throws([&] { kev::Model::load(pt.toStdString(), {}); }, kev::ErrorCode::Refused, {"model.pth", "pickle"}));
        // A folder with both formats loads the safetensors (the usual Hugging Face case).
        const QString both = models_.at(QStringLiteral("tiny-qwen2"));
        write_file(both + QStringLiteral("/pytorch_model.bin"), "PK\x03\x04 not really a zip");
        write_file(both + QStringLiteral("/training_args.bin"), "\x80\x02}q\x00.");
        QVERIFY(kev::load_weights(both.toStdString(), {}).config.qkv_bias);
        QFile::remove(both + QStringLiteral("/pytorch_model.bin"));
        QFile::remove(both + QStringLiteral("/training_args.bin"));
        QVERIFY(throws([&] { kev::load_weights((work_ + QStringLiteral("/nowhere")).toStdString(), {}); },
                       kev::ErrorCode::Io, {"nowhere"}));
    }

    void shardedFolder() {
        const QString dir = work_ + QStringLiteral("/sharded");
        QVERIFY(!kevtest::runReference(QStringLiteral("make_random_model.py"),
                                       {QStringLiteral("--preset"), QStringLiteral("tiny-qwen3"), QStringLiteral("--out"), dir,
                                        QStringLiteral("--shards"), QStringLiteral("3")})
                     .isEmpty());
        QVERIFY(!QFileInfo::exists(dir + QStringLiteral("/model.safetensors")));
        const auto sharded = kev::Model::load(dir.toStdString(), {});
        const auto single = kev::Model::load(models_.at(QStringLiteral("tiny-qwen3")).toStdString(), {});
        QCOMPARE(max_diff(logits_of(*sharded), logits_of(*single)), 0.0);
        // An index naming a tensor its shard lacks.
        QFile idx(dir + QStringLiteral("/model.safetensors.index.json"));
        QVERIFY(idx.open(QIODevice::ReadOnly));
        QByteArray text = idx.readAll();
        idx.close();
        text.replace("\"weight_map\": {", "\"weight_map\": {\"model.ghost.weight\": \"model-00001-of-00003.safetensors\", ");
        write_file(idx.fileName(), text);
        QVERIFY(throws([&] { kev::Model::load(dir.toStdString(), {}); }, kev::ErrorCode::Format,
                       {"model-00001-of-00003.safetensors", "model.ghost.weight"}));
    }

    void workingDtype() {
        kev::LoadOptions o;
        o.dtype = kev::DType::BF16;
        int calls = 0;
        o.progress = [&](int, int) { ++calls; };
        const auto m = kev::Model::load(models_.at(QStringLiteral("tiny-llama")).toStdString(), o);
        QCOMPARE(m->weights().layers[0].qkv.weight.scalar_type(), at::kBFloat16);
        QCOMPARE(m->weights().bytes(), m->config().parameter_count() * 2);
        QVERIFY(calls > 0);
        if (!kev::engine_info().cuda_available)
            QVERIFY(throws([] { kev::check_device_dtype(kev::Device::Cuda, kev::DType::F32); }, kev::ErrorCode::Unsupported,
                           {"cuda"}));
        QVERIFY(throws([] { kev::parse_dtype("fp8"); }, kev::ErrorCode::InvalidArgument, {"fp8"}));
    }

    // ---- GGUF written as llama.cpp writes it equals the safetensors model ----
    void ggufEqualsSafetensors_data() {
        QTest::addColumn<QString>("preset");
        QTest::addColumn<QString>("type");
        QTest::addColumn<double>("tolerance");
        // F32: the same numbers; only llama3's scaling arrives as rope_freqs divisors
        // (a division instead of transformers' formula: a few ulp in the frequencies).
        QTest::newRow("llama F32 (permuted q/k, rope_freqs)") << "tiny-llama" << "F32" << 1e-4;
        QTest::newRow("qwen2 F32 (bias, tied, linear rope)") << "tiny-qwen2" << "F32" << 1e-5;
        QTest::newRow("qwen3 F32 (q/k norm)") << "tiny-qwen3" << "F32" << 1e-5;
        QTest::newRow("phi3 F32 (fused qkv, ffn_up = gate | up)") << "tiny-phi3" << "F32" << 1e-5;
        QTest::newRow("phi4 F32 (partial rotary, LongRoPE factors as tensors)") << "tiny-phi4" << "F32" << 1e-5;
        // Gemma: norms stored as 1 + w, post norms, soft-caps and windows from the metadata,
        // the windowed layers by llama.cpp's patterns; a 40-token prompt crosses the window.
        QTest::newRow("gemma2 F32 (1 + w norms, soft-caps, every other layer windowed)") << "tiny-gemma2" << "F32" << 1e-5;
        QTest::newRow("gemma3 F32 (q/k norms, local RoPE base, five of six windowed)") << "tiny-gemma3" << "F32" << 1e-5;
        // Quantized: the weights themselves are rounded, so logits move by the
        // quantization noise (measured: Q8_0 0.035, BF16 0.011, Q4_1 0.96 on logits
        // of scale ~2.5; 4-bit blocks of Gaussian weights carry ~10% error each).
        // These rows check names, types and layout of quantized files; exactness of
        // Q4_1 decoding is pinned by tst_gguf and tst_builtin_model (bit-equal logits).
        QTest::newRow("llama Q8_0") << "tiny-llama" << "Q8_0" << 0.1;
        QTest::newRow("qwen2 BF16") << "tiny-qwen2" << "BF16" << 0.05;
        QTest::newRow("qwen3 Q4_1") << "tiny-qwen3" << "Q4_1" << 2.0;
    }
    void ggufEqualsSafetensors() {
        QFETCH(QString, preset);
        QFETCH(QString, type);
        QFETCH(double, tolerance);
        const QString hf = models_.at(preset);
        const QString gguf = work_ + QStringLiteral("/%1-%2.gguf").arg(preset, type);
        QVERIFY(!kevtest::runReference(QStringLiteral("make_random_gguf.py"),
                                       {QStringLiteral("--model"), hf, QStringLiteral("--out"), gguf, QStringLiteral("--type"), type})
                     .isEmpty());
        const auto a = kev::Model::load(hf.toStdString(), {});
        const auto b = kev::Model::load(gguf.toStdString(), {});
        QCOMPARE(b->config().arch, a->config().arch);
        QCOMPARE(b->config().tie_word_embeddings, a->config().tie_word_embeddings);
        QCOMPARE(b->config().head_dim, a->config().head_dim);
        QCOMPARE(b->config().sliding_window, a->config().sliding_window);
        QCOMPARE(b->config().windowed_layers, a->config().windowed_layers);
        QCOMPARE(b->config().attn_softcap, a->config().attn_softcap);
        QCOMPARE(b->config().final_softcap, a->config().final_softcap);
        QCOMPARE(b->config().query_scale, a->config().query_scale);
        QCOMPARE(b->config().rope_local_theta, a->config().rope_local_theta);
        QCOMPARE(b->config().rope_dim(), a->config().rope_dim());
        // (llama3's scaling arrives as rope_freqs divisors, its kind "none": LongRoPE is kept.)
        QCOMPARE(b->config().rope_scaling.kind == kev::RopeScalingKind::LongRope,
                 a->config().rope_scaling.kind == kev::RopeScalingKind::LongRope);
        // The file keeps the factors as fp32, which is what the RoPE tables use from either.
        auto fp32 = [](const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); };
        QCOMPARE(fp32(b->config().rope_scaling.short_factor), fp32(a->config().rope_scaling.short_factor));
        QCOMPARE(fp32(b->config().rope_scaling.long_factor), fp32(a->config().rope_scaling.long_factor));
        QCOMPARE(static_cast<float>(b->config().rope_scaling.attention_factor),
                 static_cast<float>(a->config().rope_scaling.attention_factor));  // the file keeps it as fp32
        const int n = a->config().sliding_window > 0 ? 40 : 9;
        if (type == QLatin1String("F32")) {
            // The loaded tensors are identical: permutation undone exactly.
            QCOMPARE(max_diff(b->weights().layers[1].qkv.weight, a->weights().layers[1].qkv.weight), 0.0);
            QCOMPARE(max_diff(b->weights().embed, a->weights().embed), 0.0);
        }
        const double diff = max_diff(logits_of(*a, n), logits_of(*b, n));
        qInfo("%s %s: max |logit diff| vs safetensors %.3g", qPrintable(preset), qPrintable(type), diff);
        QVERIFY2(diff <= tolerance, qPrintable(QString::number(diff)));
    }

    void ggufTruncated() {
        const QString gguf = work_ + QStringLiteral("/tiny-qwen2-F32.gguf");
        QFile f(gguf);
        QVERIFY(f.open(QIODevice::ReadOnly));
        const QByteArray bytes = f.readAll();
        const QString cut = write_file(work_ + QStringLiteral("/truncated.gguf"), bytes.left(bytes.size() - 1000));
        QVERIFY(throws([&] { kev::Model::load(cut.toStdString(), {}); }, kev::ErrorCode::Format, {"truncated.gguf", "outside the file"}));
        const QString tiny = write_file(work_ + QStringLiteral("/header-only.gguf"), bytes.left(100));
        QVERIFY(throws([&] { kev::Model::load(tiny.toStdString(), {}); }, kev::ErrorCode::Format, {"header-only.gguf"}));
    }
};

QTEST_GUILESS_MAIN(TestWeights)
#include "tst_weights.moc"
