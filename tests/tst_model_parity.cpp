// Parity of Kev's decoder with Hugging Face transformers on random-weight tiny
// models (Llama with llama3 RoPE scaling and an untied head, Qwen2 with q/k/v bias,
// a tied head and linear RoPE scaling, Qwen3 with q/k norms and an explicit head_dim,
// Mistral with a sliding window of 24, Phi-3 with fused projections, Gemma 2 with
// soft-capping and alternating windowed layers, Gemma 3 with q/k norms and windowed
// layers on their own RoPE base, Qwen2 with use_sliding_window from layer 1 on; windows of
// 16 and 24, so most prompts cross them).
// fp32 logits must agree to 1e-4 at every position:
//   - each prompt alone without reuse of the cache (full recompute),
//   - all prompts packed in one forward, their slots shuffled through the cache,
//   - incremental decoding: a packed prefill of every prompt's first half, then one
//     forward per step carrying the next token of every prompt still running, both by
//     a dense mask and by read spans (the generator's layout, the CPU's row kernel),
// including positions past 1000 (prompts that start at 1000 and 1990, and one
// 1030-token prompt).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <QtTest>

#include "kev/error.h"
#include "kev/model.h"
#include "kev_test_env.h"

namespace {

constexpr double kFp32Tolerance = 1e-4;

struct Prompt {
    std::vector<std::int64_t> tokens;
    std::int64_t start = 0;  // RoPE position of the first token
};

std::vector<Prompt> make_prompts(std::int64_t vocab) {
    std::mt19937 rng(1234);
    auto tokens = [&](int n) {
        std::vector<std::int64_t> t(n);
        for (auto& x : t) x = static_cast<std::int64_t>(rng() % vocab);
        return t;
    };
    return {{tokens(7), 0}, {tokens(23), 0}, {tokens(12), 1000}, {tokens(40), 1990}, {tokens(1030), 0}};
}

QByteArray prompts_json(const std::vector<Prompt>& prompts) {
    QByteArray j = "[";
    for (std::size_t i = 0; i < prompts.size(); ++i) {
        j += i ? ",{\"tokens\":[" : "{\"tokens\":[";
        for (std::size_t t = 0; t < prompts[i].tokens.size(); ++t)
            j += (t ? "," : "") + QByteArray::number(static_cast<qlonglong>(prompts[i].tokens[t]));
        j += "],\"start\":" + QByteArray::number(static_cast<qlonglong>(prompts[i].start)) + "}";
    }
    return j + "]";
}

// Reference logits [n, V] for one prompt.
at::Tensor read_reference(const QString& path, std::int64_t rows, std::int64_t vocab) {
    QFile f(path);
    if (!f.open(QIODevice::ReadOnly)) return {};
    const QByteArray bytes = f.readAll();
    if (bytes.size() != rows * vocab * 4) return {};
    return at::from_blob(const_cast<char*>(bytes.constData()), {rows, vocab}, at::kFloat).clone();
}

double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
    return (a.to(at::kFloat).cpu() - b).abs().max().item<double>();
}

struct Preset {
    QString name;
    QString dir;
    std::unique_ptr<kev::Model> model;
    std::vector<at::Tensor> reference;  // per prompt, [n, V]
};

}  // namespace

class TestModelParity : public QObject {
    Q_OBJECT

private:
    std::vector<Prompt> prompts_;
    std::map<QString, Preset> presets_;

    Preset& preset(const QString& name) { return presets_.at(name); }

    // Packs `which` prompts' tokens [from, to) into one batch. Slot of token t of
    // prompt p: slot_base[p] + t. Every slot ever written, from earlier calls too, is
    // entered in the mask description, so rows read their whole own history.
    struct PackState {
        std::vector<std::int64_t> slot_base;
        std::vector<std::int32_t> slot_segment;
        std::vector<std::int64_t> slot_position;
    };
    kev::ForwardBatch pack(const std::vector<int>& which, const std::vector<std::int64_t>& from,
                           const std::vector<std::int64_t>& to, PackState& st, std::int64_t kv_len,
                           bool by_reads = false) {
        kev::ForwardBatch b;
        std::vector<std::int32_t> row_seg;
        for (std::size_t i = 0; i < which.size(); ++i) {
            const int p = which[i];
            for (std::int64_t t = from[i]; t < to[i]; ++t) {
                const std::int64_t slot = st.slot_base[p] + t;
                b.output_rows.push_back(static_cast<std::int64_t>(b.tokens.size()));
                b.tokens.push_back(prompts_[p].tokens[t]);
                b.positions.push_back(prompts_[p].start + t);
                b.slots.push_back(slot);
                if (by_reads) b.reads.push_back({0, st.slot_base[p], slot + 1});
                row_seg.push_back(p);
                st.slot_segment[slot] = p;
                st.slot_position[slot] = prompts_[p].start + t;
            }
        }
        b.kv_len = kv_len;
        if (by_reads) return b;
        std::vector<std::int32_t> seg(st.slot_segment.begin(), st.slot_segment.begin() + kv_len);
        std::vector<std::int64_t> pos(st.slot_position.begin(), st.slot_position.begin() + kv_len);
        b.mask = kev::build_attention_mask(row_seg, b.positions, seg, pos);
        return b;
    }

private Q_SLOTS:
    void initTestCase() {
        // One intra-op thread: these tests check numbers, not speed, and on a shared
        // 2-core machine two OpenMP threads stall at every barrier when the other
        // core is busy (measured: 8x slower decode steps under load).
        at::set_num_threads(1);
        prompts_ = make_prompts(512);
        const QString work = kevtest::workDir(QStringLiteral("parity"));
        QFile pf(work + QStringLiteral("/prompts.json"));
        QVERIFY(pf.open(QIODevice::WriteOnly | QIODevice::Truncate));
        pf.write(prompts_json(prompts_));
        pf.close();
        for (const QString& name : {QStringLiteral("tiny-llama"), QStringLiteral("tiny-qwen2"), QStringLiteral("tiny-qwen3"),
                                    QStringLiteral("tiny-mistral"), QStringLiteral("tiny-phi3"), QStringLiteral("tiny-phi4"),
                                    QStringLiteral("tiny-gemma2"), QStringLiteral("tiny-gemma3"),
                                    QStringLiteral("tiny-qwen2-window")}) {
            Preset p;
            p.name = name;
            p.dir = work + QLatin1Char('/') + name;
            QVERIFY2(!kevtest::runReference(QStringLiteral("make_random_model.py"),
                                            {QStringLiteral("--preset"), name, QStringLiteral("--out"), p.dir})
                          .isEmpty(),
                     "make_random_model.py failed");
            const QString out = p.dir + QStringLiteral("/reference");
            QVERIFY2(!kevtest::runReference(QStringLiteral("model_logits.py"),
                                            {QStringLiteral("--model"), p.dir, QStringLiteral("--prompts"),
                                             pf.fileName(), QStringLiteral("--out"), out})
                          .isEmpty(),
                     "model_logits.py failed");
            try {
                p.model = kev::Model::load(p.dir.toStdString(), kev::LoadOptions{});
            } catch (const kev::Error& e) {
                QFAIL(e.what());
            }
            const std::int64_t vocab = p.model->config().vocab_size;
            for (std::size_t i = 0; i < prompts_.size(); ++i) {
                at::Tensor ref = read_reference(out + QStringLiteral("/logits_%1.f32").arg(i),
                                                static_cast<std::int64_t>(prompts_[i].tokens.size()), vocab);
                QVERIFY2(ref.defined(), "reference logits missing or of the wrong size");
                p.reference.push_back(ref);
            }
            presets_.emplace(name, std::move(p));
        }
    }

    void configFlags() {
        const auto& llama = preset(QStringLiteral("tiny-llama")).model->config();
        QCOMPARE(llama.arch, kev::Arch::Llama);
        QVERIFY(!llama.tie_word_embeddings);
        QCOMPARE(llama.rope_scaling.kind, kev::RopeScalingKind::Llama3);
        QCOMPARE(llama.num_kv_heads, std::int64_t(2));
        const auto& qwen2 = preset(QStringLiteral("tiny-qwen2")).model->config();
        QVERIFY(qwen2.qkv_bias && qwen2.tie_word_embeddings && !qwen2.qk_norm);
        QCOMPARE(qwen2.rope_scaling.kind, kev::RopeScalingKind::Linear);
        const auto& qwen3 = preset(QStringLiteral("tiny-qwen3")).model->config();
        QVERIFY(qwen3.qk_norm && !qwen3.qkv_bias);
        QCOMPARE(qwen3.head_dim, std::int64_t(32));
        QCOMPARE(qwen3.eos_token_ids, std::vector<std::int64_t>{2});
        const auto& mistral = preset(QStringLiteral("tiny-mistral")).model->config();
        QCOMPARE(mistral.arch, kev::Arch::Mistral);
        QCOMPARE(mistral.sliding_window, std::int64_t(24));
        QVERIFY(mistral.windowed_layers.empty() && mistral.layer_windowed(0) && mistral.layer_windowed(1));
        QCOMPARE(mistral.max_positions, std::int64_t(2048));  // the window no longer caps a card
        const auto& phi3 = preset(QStringLiteral("tiny-phi3")).model->config();
        QVERIFY(phi3.arch == kev::Arch::Phi3 && phi3.fused_qkv && phi3.fused_gate_up);
        QCOMPARE(phi3.rope_dim(), phi3.head_dim);
        const auto& phi4 = preset(QStringLiteral("tiny-phi4")).model->config();
        QCOMPARE(phi4.rotary_dim, std::int64_t(12));  // int(16 x 0.75)
        QCOMPARE(phi4.rope_scaling.kind, kev::RopeScalingKind::LongRope);
        QCOMPARE(phi4.rope_scaling.original_max_positions, std::int64_t(1500));
        QCOMPARE(phi4.rope_scaling.long_factor.size(), std::size_t(6));
        // transformers' default: sqrt(1 + ln(4096 / 1500) / ln 1500)
        QCOMPARE(phi4.rope_scaling.attention_factor, std::sqrt(1.0 + std::log(4096.0 / 1500.0) / std::log(1500.0)));
        QVERIFY(phi4.describe_features().find("partial rotary (12 of 16 dims a head)") != std::string::npos);
        QVERIFY(phi4.describe_features().find("LongRoPE (long factors from position 1500") != std::string::npos);
        const auto& g2 = preset(QStringLiteral("tiny-gemma2")).model->config();
        QCOMPARE(g2.arch, kev::Arch::Gemma2);
        QVERIFY(g2.gemma_norms && g2.scale_embeddings && !g2.qk_norm && g2.tie_word_embeddings);
        QCOMPARE(g2.activation, kev::Activation::GeluTanh);
        QCOMPARE(g2.attn_softcap, 3.0);
        QCOMPARE(g2.final_softcap, 4.0);
        QCOMPARE(g2.query_scale, 1.0 / std::sqrt(24.0));
        QVERIFY(g2.layer_windowed(0) && !g2.layer_windowed(1) && g2.layer_windowed(2));
        const auto& g3 = preset(QStringLiteral("tiny-gemma3")).model->config();
        QCOMPARE(g3.arch, kev::Arch::Gemma3);
        QVERIFY(g3.qk_norm && g3.attn_softcap == 0.0 && g3.final_softcap == 0.0);
        QCOMPARE(g3.rope_local_theta, 10000.0);
        QCOMPARE(g3.rope_theta, 1000000.0);
        QCOMPARE(g3.rope_scaling.kind, kev::RopeScalingKind::Linear);
        QVERIFY(g3.layer_windowed(2) && !g3.layer_windowed(3));
        QVERIFY(g3.describe_features().find("sliding window 16 on 3 of 4 layers") != std::string::npos);
        const auto& qw = preset(QStringLiteral("tiny-qwen2-window")).model->config();
        QVERIFY(qw.sliding_window == 16 && !qw.layer_windowed(0) && qw.layer_windowed(1));
        // A tied head is the embedding itself, not a copy.
        const auto& w = preset(QStringLiteral("tiny-qwen2")).model->weights();
        QVERIFY(w.lm_head.weight.data_ptr() == w.embed.data_ptr());
    }

    void fullRecompute_data() {
        QTest::addColumn<QString>("name");
        for (const char* n : {"tiny-llama", "tiny-qwen2", "tiny-qwen3", "tiny-mistral", "tiny-phi3", "tiny-phi4", "tiny-gemma2", "tiny-gemma3",
                              "tiny-qwen2-window"})
            QTest::newRow(n) << QString::fromLatin1(n);
    }
    // Each prompt alone, in a fresh cache; slots start at 0 while positions may
    // start at 1000 or 1990 (slot != position).
    void fullRecompute() {
        QFETCH(QString, name);
        Preset& p = preset(name);
        for (std::size_t i = 0; i < prompts_.size(); ++i) {
            const Prompt& pr = prompts_[i];
            const std::int64_t n = static_cast<std::int64_t>(pr.tokens.size());
            kev::ForwardBatch b = kev::single_sequence_batch(pr.tokens, 0, false);
            for (auto& pos : b.positions) pos += pr.start;
            kev::KvCache cache = p.model->make_cache(n);
            const at::Tensor logits = p.model->forward(b, cache);
            const double diff = max_abs_diff(logits, p.reference[i]);
            qInfo("%s prompt %zu (%lld tokens from position %lld): max |diff| = %.3g", qPrintable(name), i,
                  static_cast<long long>(n), static_cast<long long>(pr.start), diff);
            QVERIFY2(diff <= kFp32Tolerance, qPrintable(QStringLiteral("prompt %1: max abs diff %2").arg(i).arg(diff)));
        }
    }

    void packedPrefill_data() { fullRecompute_data(); }
    // The four short prompts in one forward, their slots a random permutation of the
    // cache: each one's logits equal the reference (isolation + layout independence).
    void packedPrefill() {
        QFETCH(QString, name);
        Preset& p = preset(name);
        const std::vector<int> which{0, 1, 2, 3};
        std::int64_t total = 0;
        for (int w : which) total += static_cast<std::int64_t>(prompts_[w].tokens.size());
        std::vector<std::int64_t> perm(total);
        std::iota(perm.begin(), perm.end(), 0);
        std::shuffle(perm.begin(), perm.end(), std::mt19937(7));
        kev::ForwardBatch b;
        std::vector<std::int32_t> row_seg, slot_seg(total, kev::kEmptySlot);
        std::vector<std::int64_t> slot_pos(total, 0);
        std::vector<std::pair<std::int64_t, std::int64_t>> ranges;
        for (int w : which) {
            ranges.emplace_back(static_cast<std::int64_t>(b.tokens.size()), static_cast<std::int64_t>(prompts_[w].tokens.size()));
            for (std::size_t t = 0; t < prompts_[w].tokens.size(); ++t) {
                const std::int64_t row = static_cast<std::int64_t>(b.tokens.size());
                b.tokens.push_back(prompts_[w].tokens[t]);
                b.positions.push_back(prompts_[w].start + static_cast<std::int64_t>(t));
                b.slots.push_back(perm[row]);
                b.output_rows.push_back(row);
                row_seg.push_back(w);
                slot_seg[perm[row]] = w;
                slot_pos[perm[row]] = b.positions.back();
            }
        }
        b.kv_len = total;
        b.mask = kev::build_attention_mask(row_seg, b.positions, slot_seg, slot_pos);
        kev::KvCache cache = p.model->make_cache(total);
        const at::Tensor logits = p.model->forward(b, cache);
        for (std::size_t k = 0; k < which.size(); ++k) {
            const double diff = max_abs_diff(logits.narrow(0, ranges[k].first, ranges[k].second), p.reference[which[k]]);
            QVERIFY2(diff <= kFp32Tolerance, qPrintable(QStringLiteral("prompt %1 in pack: max abs diff %2").arg(which[k]).arg(diff)));
        }
    }

    // LongRoPE chooses by each row's own position (kev/config.h): a prompt that crosses
    // original_max_positions (1500 here) in one forward gives the logits it gives one token
    // at a time, as transformers' cached decoding does (each step's sequence length is its
    // position + 1). A rule by the longest position of the forward would turn rows 1490-1499
    // by the long factors in the first run only.
    void longRopePerPosition() {
        Preset& p = preset(QStringLiteral("tiny-phi4"));
        const std::int64_t from = 1490, n = 20;
        auto batch = [&](std::int64_t first, std::int64_t count) {
            kev::ForwardBatch b;
            b.kv_len = n;
            for (std::int64_t i = first; i < first + count; ++i) {
                b.tokens.push_back(prompts_[1].tokens[static_cast<std::size_t>(i)]);
                b.positions.push_back(from + i);
                b.slots.push_back(i);
                b.output_rows.push_back(i - first);
                for (std::int64_t j = 0; j < n; ++j) b.mask.push_back(j <= i ? 1 : 0);
            }
            return b;
        };
        kev::KvCache whole_cache = p.model->make_cache(n);
        const at::Tensor whole = p.model->forward(batch(0, n), whole_cache);
        kev::KvCache step_cache = p.model->make_cache(n);
        double worst = 0.0;
        for (std::int64_t i = 0; i < n; ++i)
            worst = std::max(worst, max_abs_diff(p.model->forward(batch(i, 1), step_cache), whole.narrow(0, i, 1)));
        qInfo("tiny-phi4, positions 1490-1509 at once vs one at a time: max |diff| %.3g", worst);
        QVERIFY2(worst <= kFp32Tolerance, qPrintable(QString::number(worst)));
    }

    void incrementalDecode_data() {
        QTest::addColumn<QString>("name");
        QTest::addColumn<bool>("byReads");
        for (const char* n : {"tiny-llama", "tiny-qwen2", "tiny-qwen3", "tiny-mistral", "tiny-phi3", "tiny-phi4", "tiny-gemma2", "tiny-gemma3",
                              "tiny-qwen2-window"}) {
            QTest::newRow(qPrintable(QStringLiteral("%1 mask").arg(QLatin1String(n)))) << QString::fromLatin1(n) << false;
            QTest::newRow(qPrintable(QStringLiteral("%1 reads").arg(QLatin1String(n)))) << QString::fromLatin1(n) << true;
        }
    }
    // Packed prefill of every prompt's first half, then one forward per step with the
    // next token of each prompt still running. Every step's logits equal the full
    // recompute done by the reference (cache consistency).
    void incrementalDecode() {
        QFETCH(QString, name);
        QFETCH(bool, byReads);
        Preset& p = preset(name);
        const std::vector<int> which{0, 1, 2, 3, 4};
        PackState st;
        std::int64_t total = 0;
        for (int w : which) {
            st.slot_base.push_back(total);
            total += static_cast<std::int64_t>(prompts_[w].tokens.size());
        }
        st.slot_segment.assign(total, kev::kEmptySlot);
        st.slot_position.assign(total, 0);
        kev::KvCache cache = p.model->make_cache(total);

        std::vector<std::int64_t> done(which.size());
        std::vector<std::int64_t> from(which.size(), 0);
        for (std::size_t k = 0; k < which.size(); ++k)
            done[k] = std::max<std::int64_t>(1, static_cast<std::int64_t>(prompts_[which[k]].tokens.size()) / 2);
        // The long prompt only decodes its last 6 tokens: keeps the test quick.
        done.back() = static_cast<std::int64_t>(prompts_[4].tokens.size()) - 6;
        kev::ForwardBatch b = pack(which, from, done, st, total, byReads);
        at::Tensor logits = p.model->forward(b, cache);
        double worst = 0.0;
        std::int64_t row = 0;
        for (std::size_t k = 0; k < which.size(); ++k) {
            worst = std::max(worst, max_abs_diff(logits.narrow(0, row, done[k]), p.reference[which[k]].narrow(0, 0, done[k])));
            row += done[k];
        }
        QVERIFY2(worst <= kFp32Tolerance, qPrintable(QStringLiteral("prefill: max abs diff %1").arg(worst)));

        int steps = 0;
        for (;; ++steps) {
            std::vector<int> active;
            std::vector<std::int64_t> f, t;
            for (std::size_t k = 0; k < which.size(); ++k) {
                if (done[k] < static_cast<std::int64_t>(prompts_[which[k]].tokens.size())) {
                    active.push_back(which[k]);
                    f.push_back(done[k]);
                    t.push_back(done[k] + 1);
                }
            }
            if (active.empty()) break;
            b = pack(active, f, t, st, total, byReads);
            logits = p.model->forward(b, cache);  // [active, V]
            for (std::size_t a = 0; a < active.size(); ++a) {
                const double diff = max_abs_diff(logits.narrow(0, a, 1), p.reference[active[a]].narrow(0, f[a], 1));
                worst = std::max(worst, diff);
                QVERIFY2(diff <= kFp32Tolerance,
                         qPrintable(QStringLiteral("step %1 prompt %2: max abs diff %3").arg(steps).arg(active[a]).arg(diff)));
            }
            for (std::size_t k = 0, a = 0; k < which.size(); ++k)
                if (a < active.size() && which[k] == active[a]) ++done[k], ++a;
        }
        qInfo("%s: %d decode steps, worst max |diff| %.3g", qPrintable(name), steps, worst);
        QVERIFY(steps >= 20);
    }

    // bf16: the same model in half the bytes drifts a little; measured and bounded.
    void bf16Drift() {
        Preset& p = preset(QStringLiteral("tiny-qwen2"));
        kev::LoadOptions o;
        o.dtype = kev::DType::BF16;
        const auto m = kev::Model::load(p.dir.toStdString(), o);
        const Prompt& pr = prompts_[1];
        kev::KvCache cache = m->make_cache(static_cast<std::int64_t>(pr.tokens.size()));
        const at::Tensor logits = m->forward(kev::single_sequence_batch(pr.tokens, 0, false), cache);
        const double diff = max_abs_diff(logits, p.reference[1]);
        const double scale = p.reference[1].abs().max().item<double>();
        const double agree =
            logits.argmax(1).eq(p.reference[1].argmax(1)).to(at::kFloat).mean().item<double>();
        qInfo("bf16 vs fp32 reference: max |diff| %.3g (logit scale %.3g), top-1 agreement %.2f", diff, scale, agree);
        QVERIFY(diff < 0.05 * scale);
        QVERIFY(agree >= 0.8);
    }

    // Decode steps in bf16 (a few rows: Kev's own AVX512-BF16 kernel where the CPU has
    // it) agree with a bf16 prefill of the same tokens (many rows: libtorch's linear)
    // and with the fp32 reference, within bf16 rounding. fp16 runs too.
    void halfPrecisionDecode_data() {
        QTest::addColumn<QString>("name");
        QTest::addColumn<int>("dtype");
        for (const char* n : {"tiny-llama", "tiny-qwen2", "tiny-qwen3", "tiny-gemma2", "tiny-gemma3"}) {
            QTest::newRow(qPrintable(QStringLiteral("%1 bf16").arg(QLatin1String(n))))
                << QString::fromLatin1(n) << static_cast<int>(kev::DType::BF16);
            QTest::newRow(qPrintable(QStringLiteral("%1 fp16").arg(QLatin1String(n))))
                << QString::fromLatin1(n) << static_cast<int>(kev::DType::F16);
        }
    }
    void halfPrecisionDecode() {
        QFETCH(QString, name);
        QFETCH(int, dtype);
        Preset& p = preset(name);
        kev::LoadOptions o;
        o.dtype = static_cast<kev::DType>(dtype);
        const auto m = kev::Model::load(p.dir.toStdString(), o);
        const Prompt& pr = prompts_[3];  // 40 tokens from position 1990
        const std::int64_t n = static_cast<std::int64_t>(pr.tokens.size());
        kev::ForwardBatch full = kev::single_sequence_batch(pr.tokens, 0, false);
        for (auto& pos : full.positions) pos += pr.start;
        kev::KvCache c1 = m->make_cache(n);
        const at::Tensor prefill = m->forward(full, c1);  // [n, V]
        kev::KvCache c2 = m->make_cache(n);
        std::vector<at::Tensor> steps;
        for (std::int64_t t = 0; t < n; ++t) {
            kev::ForwardBatch b = kev::single_sequence_batch({pr.tokens[t]}, t, false);
            b.positions[0] += pr.start;
            steps.push_back(m->forward(b, c2));
        }
        const at::Tensor decode = at::cat(steps, 0);  // [n, V]
        // 13 rows at once: the decode kernel's multi-row blocks (4 + 4 + 4 + 1).
        const std::vector<std::int64_t> head(pr.tokens.begin(), pr.tokens.begin() + 13);
        kev::ForwardBatch few = kev::single_sequence_batch(head, 0, false);
        for (auto& pos : few.positions) pos += pr.start;
        kev::KvCache c3 = m->make_cache(13);
        const double d_rows = max_abs_diff(m->forward(few, c3), prefill.narrow(0, 0, 13));
        const double scale = p.reference[3].abs().max().item<double>();
        const double d_self = max_abs_diff(decode, prefill);
        const double d_ref = max_abs_diff(decode, p.reference[3]);
        const double agree = decode.argmax(1).eq(p.reference[3].argmax(1)).to(at::kFloat).mean().item<double>();
        qInfo("%s %s: decode vs prefill %.3g, 13-row forward vs prefill %.3g, vs fp32 reference %.3g (scale %.3g), "
              "top-1 agreement %.2f", qPrintable(name), kev::to_string(m->dtype()), d_self, d_rows, d_ref, scale, agree);
        QVERIFY(d_self < 0.05 * scale);
        QVERIFY(d_rows < 0.05 * scale);
        QVERIFY(d_ref < 0.05 * scale);
        QVERIFY(agree >= 0.8);
    }

    // The windows are real: the same weights with the window switched off give the same
    // logits while a prompt fits in the window and different ones after (the reference
    // has the window, so the tests above would see a window that does nothing).
    void windowMatters_data() {
        QTest::addColumn<QString>("name");
        for (const char* n : {"tiny-mistral", "tiny-gemma2", "tiny-gemma3", "tiny-qwen2-window"})
            QTest::newRow(n) << QString::fromLatin1(n);
    }
    void windowMatters() {
        QFETCH(QString, name);
        Preset& p = preset(name);
        kev::LoadedWeights lw = kev::load_weights(p.dir.toStdString(), kev::LoadOptions{});
        const std::int64_t window = lw.config.sliding_window;
        QVERIFY(window > 0);
        lw.config.sliding_window = 0;
        kev::Model global(std::move(lw.config), std::move(lw.weights), kev::Device::Cpu, kev::DType::F32);
        const Prompt& pr = prompts_[3];  // 40 tokens from position 1990
        const std::int64_t n = static_cast<std::int64_t>(pr.tokens.size());
        kev::ForwardBatch b = kev::single_sequence_batch(pr.tokens, 0, false);
        for (auto& pos : b.positions) pos += pr.start;
        kev::KvCache cache = global.make_cache(n);
        const at::Tensor logits = global.forward(b, cache);
        QVERIFY(max_abs_diff(logits.narrow(0, 0, window), p.reference[3].narrow(0, 0, window)) <= kFp32Tolerance);
        const double after = max_abs_diff(logits.narrow(0, window, n - window), p.reference[3].narrow(0, window, n - window));
        qInfo("%s without its window: max |diff| %.3g past position %lld", qPrintable(name), after, static_cast<long long>(window));
        QVERIFY(after > 100 * kFp32Tolerance);
    }

    // Keys are stored rotated, so a sequence's cache moved to other slots (compaction,
    // forking a shared context) reads back exactly the same.
    void cacheCopySlots() {
        Preset& p = preset(QStringLiteral("tiny-qwen3"));
        const Prompt& pr = prompts_[1];
        const std::int64_t n = static_cast<std::int64_t>(pr.tokens.size());  // 23
        kev::KvCache cache = p.model->make_cache(64);
        const std::vector<std::int64_t> head(pr.tokens.begin(), pr.tokens.end() - 1);
        kev::ForwardBatch b = kev::single_sequence_batch(head, 0, true);
        b.kv_len = 64;
        b.mask.assign(static_cast<std::size_t>((n - 1) * 64), 0);
        for (std::int64_t r = 0; r < n - 1; ++r) std::fill_n(b.mask.begin() + r * 64, r + 1, 1);
        p.model->forward(b, cache);
        cache.copy_slots(0, 30, n - 1);  // now slots 30 .. 30+n-2
        cache.clear_slots(0, n - 1);     // the original is gone
        kev::ForwardBatch step;
        step.tokens = {pr.tokens[n - 1]};
        step.positions = {n - 1};
        step.slots = {30 + n - 1};
        step.kv_len = 64;
        step.mask.assign(64, 0);
        std::fill_n(step.mask.begin() + 30, n, 1);
        step.output_rows = {0};
        const at::Tensor logits = p.model->forward(step, cache);
        QVERIFY(max_abs_diff(logits, p.reference[1].narrow(0, n - 1, 1)) <= kFp32Tolerance);
        QVERIFY_THROWS_EXCEPTION(kev::Error, cache.copy_slots(60, 0, 5));
        QVERIFY_THROWS_EXCEPTION(kev::Error, cache.clear_slots(3, 65));
    }

    void invalidBatchLeavesCacheUnchanged() {
        Preset& p = preset(QStringLiteral("tiny-llama"));
        kev::KvCache cache = p.model->make_cache(8);
        kev::ForwardBatch b = kev::single_sequence_batch({1, 2, 3}, 0, false);
        b.tokens[2] = 100000;  // outside the vocabulary
        QVERIFY_THROWS_EXCEPTION(kev::Error, p.model->forward(b, cache));
        QCOMPARE(cache.keys(0).abs().sum().item<double>(), 0.0);
        b = kev::single_sequence_batch({1, 2, 3}, 0, false);
        b.mask[0] = 0;  // row 0 may not read its own slot
        QVERIFY_THROWS_EXCEPTION(kev::Error, p.model->forward(b, cache));
        b = kev::single_sequence_batch({1, 2, 3}, 0, false);
        b.positions[1] = 5000;  // past max_position_embeddings
        QVERIFY_THROWS_EXCEPTION(kev::Error, p.model->forward(b, cache));
        b = kev::single_sequence_batch({1, 2, 3}, 0, false);
        b.slots[1] = 0;  // two rows, one slot
        QVERIFY_THROWS_EXCEPTION(kev::Error, p.model->forward(b, cache));
        QCOMPARE(cache.keys(0).abs().sum().item<double>(), 0.0);
    }

    // The mask rule against hand-drawn grids.
    void maskGrid() {
        // Slots 0-3: segment 0 (positions 0-3); slots 4-6: segment 1 (0-2); slot 7 empty.
        const std::vector<std::int32_t> slot_seg{0, 0, 0, 0, 1, 1, 1, kev::kEmptySlot};
        const std::vector<std::int64_t> slot_pos{0, 1, 2, 3, 0, 1, 2, 0};
        const auto m = kev::build_attention_mask({0, 1, 1}, {2, 1, 2}, slot_seg, slot_pos);
        const std::vector<std::uint8_t> want{
            1, 1, 1, 0, 0, 0, 0, 0,  // row of segment 0 at position 2
            0, 0, 0, 0, 1, 1, 0, 0,  // segment 1 at position 1
            0, 0, 0, 0, 1, 1, 1, 0,  // segment 1 at position 2
        };
        QCOMPARE(m, want);
        // Shared context (slots 0-1, positions 0-1) is visible to every segment; the
        // questions' positions continue after it.
        const auto s = kev::build_attention_mask({0, 1}, {2, 3}, {kev::kSharedSegment, kev::kSharedSegment, 0, 1, 1},
                                                 {0, 1, 2, 2, 3});
        const std::vector<std::uint8_t> want_shared{1, 1, 1, 0, 0, /**/ 1, 1, 0, 1, 1};
        QCOMPARE(s, want_shared);
    }
};

QTEST_GUILESS_MAIN(TestModelParity)
#include "tst_model_parity.moc"
