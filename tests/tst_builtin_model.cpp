// The built-in SmolLM2-135M-Instruct Q4_1 GGUF against transformers loading the same
// file (gguf_file=...). Both sides dequantize the same Q4_1 blocks to fp32 and run an
// fp32 forward, so the logits agree to float rounding (see kLogitTolerance), and the
// greedy continuations of three chat prompts agree token for token for 40 tokens,
// run one prompt at a time and all three packed in one forward per step.
#include <QDirIterator>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QtTest>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "kev/engine_info.h"
#include "kev/error.h"
#include "kev/model.h"
#include "kev_test_env.h"

namespace {

// Tolerance on logits (whose magnitude here is up to ~40). The two sides dequantize
// the same blocks (d * q + m in fp32) and run the same fp32 ops. With the venv's
// libtorch on both sides the logits are measured bit-identical (max |diff| 0); another
// libtorch, BLAS or thread count changes summation order (GEMM blocking, SDPA kernel)
// over 30 layers, worth ~1e-4 at these magnitudes. 2e-3 keeps a margin of ten and is
// still far below a real error (a wrong permutation, norm or RoPE moves logits by units).
constexpr double kLogitTolerance = 2e-3;

QString find_builtin_model() {
    const QString configured = QString::fromStdString(kev::builtin_model_path());
    if (QFileInfo::exists(configured)) return configured;
    // Before packaging/setup.sh placed it: the file inside the installed wheel.
    QDirIterator it(kevtest::sourceDir() + QStringLiteral("/.venv/lib"), {QStringLiteral("SmolLM2-135M-Instruct.Q4_1.gguf")},
                    QDir::Files, QDirIterator::Subdirectories);
    return it.hasNext() ? it.next() : QString();
}

at::Tensor read_f32(const QString& path, std::int64_t rows, std::int64_t cols) {
    QFile f(path);
    if (!f.open(QIODevice::ReadOnly)) return {};
    const QByteArray bytes = f.readAll();
    if (bytes.size() != rows * cols * 4) return {};
    return at::from_blob(const_cast<char*>(bytes.constData()), {rows, cols}, at::kFloat).clone();
}

std::vector<std::int64_t> ids(const QJsonValue& v) {
    std::vector<std::int64_t> out;
    for (const auto& x : v.toArray()) out.push_back(x.toInteger());
    return out;
}

struct RefPrompt {
    std::vector<std::int64_t> prompt;
    std::vector<std::int64_t> generated;
    at::Tensor logits;  // [prompt + generated, V]
};

}  // namespace

class TestBuiltinModel : public QObject {
    Q_OBJECT

private:
    QString path_;
    QString out_;
    std::unique_ptr<kev::Model> model_;
    std::vector<RefPrompt> ref_;

private Q_SLOTS:
    void initTestCase() {
        // One intra-op thread: these tests check numbers, not speed, and on a shared
        // 2-core machine two OpenMP threads stall at every barrier when the other
        // core is busy (measured: 8x slower decode steps under load).
        at::set_num_threads(1);
        path_ = find_builtin_model();
        if (path_.isEmpty()) QFAIL("built-in model not found (run packaging/setup.sh or set KEV_BUILTIN_MODEL)");
        out_ = kevtest::workDir(QStringLiteral("builtin"));
        const QByteArray json = kevtest::runReference(QStringLiteral("gguf_model_reference.py"),
                                                      {QStringLiteral("--gguf"), path_, QStringLiteral("--out"), out_});
        QVERIFY2(!json.isEmpty(), "gguf_model_reference.py failed");
        const QJsonObject root = QJsonDocument::fromJson(json.trimmed().split('\n').last()).object();
        const std::int64_t vocab = root.value(QStringLiteral("vocab")).toInteger();
        QCOMPARE(vocab, std::int64_t(49152));
        int i = 0;
        for (const auto& pv : root.value(QStringLiteral("prompts")).toArray()) {
            const QJsonObject p = pv.toObject();
            RefPrompt r;
            r.prompt = ids(p.value(QStringLiteral("prompt_ids")));
            r.generated = ids(p.value(QStringLiteral("generated_ids")));
            r.logits = read_f32(out_ + QStringLiteral("/logits_%1.f32").arg(i++),
                                static_cast<std::int64_t>(r.prompt.size() + r.generated.size()), vocab);
            QVERIFY(r.logits.defined());
            QVERIFY(r.generated.size() >= 32);
            ref_.push_back(std::move(r));
        }
        QCOMPARE(ref_.size(), std::size_t(3));
        QElapsedTimer t;
        t.start();
        try {
            model_ = kev::Model::load(path_.toStdString(), kev::LoadOptions{});
        } catch (const kev::Error& e) {
            QFAIL(e.what());
        }
        qInfo("loaded %s in %lld ms", qPrintable(path_), static_cast<long long>(t.elapsed()));
    }

    void config() {
        const kev::ModelConfig& c = model_->config();
        QCOMPARE(c.arch, kev::Arch::Llama);
        QCOMPARE(c.hidden_size, std::int64_t(576));
        QCOMPARE(c.num_layers, std::int64_t(30));
        QCOMPARE(c.num_heads, std::int64_t(9));
        QCOMPARE(c.num_kv_heads, std::int64_t(3));
        QCOMPARE(c.head_dim, std::int64_t(64));
        QCOMPARE(c.intermediate_size, std::int64_t(1536));
        QCOMPARE(c.vocab_size, std::int64_t(49152));
        QVERIFY(c.tie_word_embeddings);
        QCOMPARE(c.rope_theta, 100000.0);
    }

    // llama.cpp permuted q/k rows for its RoPE layout; the loader must undo it exactly.
    void qkPermutationUndone() {
        const kev::ModelConfig& c = model_->config();
        const at::Tensor q = read_f32(out_ + QStringLiteral("/q_proj.f32"), c.q_size(), c.hidden_size);
        const at::Tensor k = read_f32(out_ + QStringLiteral("/k_proj.f32"), c.kv_size(), c.hidden_size);
        QVERIFY(q.defined() && k.defined());
        const at::Tensor& qkv = model_->weights().layers[0].qkv.weight;
        QCOMPARE((qkv.narrow(0, 0, c.q_size()) - q).abs().max().item<double>(), 0.0);
        QCOMPARE((qkv.narrow(0, c.q_size(), c.kv_size()) - k).abs().max().item<double>(), 0.0);
    }

    void logitsMatch() {
        for (std::size_t i = 0; i < ref_.size(); ++i) {
            std::vector<std::int64_t> all = ref_[i].prompt;
            all.insert(all.end(), ref_[i].generated.begin(), ref_[i].generated.end());
            kev::KvCache cache = model_->make_cache(static_cast<std::int64_t>(all.size()));
            const at::Tensor logits = model_->forward(kev::single_sequence_batch(all, 0, false), cache);
            const double diff = (logits - ref_[i].logits).abs().max().item<double>();
            const double scale = ref_[i].logits.abs().max().item<double>();
            qInfo("prompt %zu: %zu rows, max |diff| %.3g (max |logit| %.3g)", i, all.size(), diff, scale);
            QVERIFY2(diff <= kLogitTolerance, qPrintable(QStringLiteral("max abs diff %1").arg(diff)));
        }
    }

    // Greedy decoding with the KV cache, one prompt at a time.
    void greedyAlone() {
        for (std::size_t i = 0; i < ref_.size(); ++i) {
            const RefPrompt& r = ref_[i];
            const std::int64_t n = static_cast<std::int64_t>(r.prompt.size());
            kev::KvCache cache = model_->make_cache(n + static_cast<std::int64_t>(r.generated.size()));
            at::Tensor logits = model_->forward(kev::single_sequence_batch(r.prompt, 0, true), cache);
            std::vector<std::int64_t> got;
            for (std::size_t s = 0; s < r.generated.size(); ++s) {
                got.push_back(logits.argmax(1).item<std::int64_t>());
                logits = model_->forward(kev::single_sequence_batch({got.back()}, n + static_cast<std::int64_t>(s), true), cache);
            }
            QCOMPARE(got, r.generated);
        }
    }

    // bf16 weights and activations: measured, not required to be exact. Reports how
    // many greedy tokens agree with the fp32 reference before the first difference
    // (measured with the AVX512-BF16 decode kernel: 40, 28 and 31 of 40; a near-tie
    // flips sooner or later). Required: the first 8 agree, or the first difference is at
    // a near-tie of the fp32 reference itself, its two tokens less than kNearTie apart.
    // (On a CPU with AVX512-BF16 and no AMX, vdpbf16ps in the prefill flips prompt 1's
    // first token: the reference's margin there is what the test prints.)
    void bf16Greedy() {
        constexpr double kNearTie = 1.0;  // logits; bf16's first-token drift here is 0.36 to 0.47
        kev::LoadOptions o;
        o.dtype = kev::DType::BF16;
        const auto m = kev::Model::load(path_.toStdString(), o);
        for (std::size_t i = 0; i < ref_.size(); ++i) {
            const RefPrompt& r = ref_[i];
            const std::int64_t n = static_cast<std::int64_t>(r.prompt.size());
            kev::KvCache cache = m->make_cache(n + static_cast<std::int64_t>(r.generated.size()));
            at::Tensor logits = m->forward(kev::single_sequence_batch(r.prompt, 0, true), cache);
            const double drift = (logits[0] - r.logits[n - 1]).abs().max().item<double>();
            std::size_t same = 0;
            double margin = 0.0;  // at the first difference: how far apart fp32 put the two tokens
            for (std::size_t s = 0; s < r.generated.size(); ++s) {
                const std::int64_t t = logits.argmax(1).item<std::int64_t>();
                if (t != r.generated[s]) {
                    const at::Tensor ref = r.logits[n - 1 + static_cast<std::int64_t>(s)];
                    margin = ref[r.generated[s]].item<double>() - ref[t].item<double>();
                    break;
                }
                ++same;
                logits = m->forward(kev::single_sequence_batch({t}, n + static_cast<std::int64_t>(s), true), cache);
            }
            qInfo("bf16 prompt %zu: first-token logit drift %.3g, %zu of %zu greedy tokens equal to fp32%s", i, drift,
                  same, r.generated.size(),
                  same < r.generated.size() ? qPrintable(QStringLiteral(" (fp32 margin at the first difference %1)")
                                                             .arg(margin, 0, 'g', 3))
                                            : "");
            QVERIFY2(same >= 8 || margin <= kNearTie,
                     qPrintable(QStringLiteral("prompt %1 parts from fp32 at token %2 where fp32's margin is %3")
                                    .arg(i).arg(same + 1).arg(margin)));
        }
    }

    // The three prompts packed: one prefill forward, then one forward per step with
    // one row per prompt. Each answer equals the reference's answer alone.
    void greedyPacked() {
        const std::size_t N = ref_.size();
        std::vector<std::int64_t> base(N), len(N);
        std::int64_t total = 0;
        for (std::size_t i = 0; i < N; ++i) {
            base[i] = total;
            len[i] = static_cast<std::int64_t>(ref_[i].prompt.size());
            total += len[i] + static_cast<std::int64_t>(ref_[i].generated.size());
        }
        std::vector<std::int32_t> slot_seg(total, kev::kEmptySlot);
        std::vector<std::int64_t> slot_pos(total, 0);
        kev::KvCache cache = model_->make_cache(total);
        std::vector<std::vector<std::int64_t>> got(N);
        std::vector<std::int64_t> next(N);  // token each prompt feeds next
        for (std::size_t step = 0;; ++step) {
            kev::ForwardBatch b;
            std::vector<std::int32_t> row_seg;
            for (std::size_t i = 0; i < N; ++i) {
                const bool prefill = step == 0;
                const std::int64_t count = prefill ? len[i] : 1;
                for (std::int64_t t = 0; t < count; ++t) {
                    const std::int64_t pos = prefill ? t : len[i] + static_cast<std::int64_t>(step) - 1;
                    const std::int64_t slot = base[i] + pos;
                    b.tokens.push_back(prefill ? ref_[i].prompt[t] : next[i]);
                    b.positions.push_back(pos);
                    b.slots.push_back(slot);
                    row_seg.push_back(static_cast<std::int32_t>(i));
                    slot_seg[slot] = static_cast<std::int32_t>(i);
                    slot_pos[slot] = pos;
                }
                b.output_rows.push_back(static_cast<std::int64_t>(b.tokens.size()) - 1);
            }
            b.kv_len = total;
            b.mask = kev::build_attention_mask(row_seg, b.positions, slot_seg, slot_pos);
            const at::Tensor am = model_->forward(b, cache).argmax(1);  // [N]
            for (std::size_t i = 0; i < N; ++i) {
                next[i] = am[static_cast<std::int64_t>(i)].item<std::int64_t>();
                got[i].push_back(next[i]);
            }
            if (got[0].size() == ref_[0].generated.size()) break;
        }
        for (std::size_t i = 0; i < N; ++i) QCOMPARE(got[i], ref_[i].generated);
    }
};

QTEST_GUILESS_MAIN(TestBuiltinModel)
#include "tst_builtin_model.moc"
