// Packed generation keeps every card isolated (DESIGN.md §1 invariants 1 and 2):
// a card's logits and tokens in any pack equal those of the same card run alone.
#include <QtTest>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <memory>
#include <optional>
#include <map>
#include <random>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "kev/answer_engine.h"
#include "kev/buffer_pool.h"
#include "kev/cpu_kernels.h"
#include "kev/detokenizer.h"
#include "kev/error.h"
#include "kev/kv_cache.h"
#include "kev/generator.h"
#include "kev/model.h"
#include "kev/prefix_cache.h"
#include "kev/quant.h"
#include "kev/session.h"
#include "kev/tokenizer.h"
#include "kev_test_env.h"

namespace {

struct Tiny {
    std::unique_ptr<kev::Model> model;
};

// A tiny random model; ggufType (e.g. "Q8_0") loads it from a GGUF of that type written
// with llama.cpp's names (make_random_gguf.py), whose blocks the 4-bit precision keeps.
// A preset ending in "@256" is made 256 wide (intermediate 512), as K-quants want whole
// 256-column super-blocks.
std::unique_ptr<kev::Model> loadTiny(const QString& preset, kev::DType dtype = kev::DType::F32,
                                     kev::WeightQuant quant = kev::WeightQuant::None, const QString& ggufType = {}) {
    const QString dir = kevtest::workDir("generate-" + QString(preset).replace('@', '-'));
    if (!QFile::exists(dir + "/config.json")) {
        QStringList args{"--preset", preset.section('@', 0, 0), "--out", dir};
        if (preset.endsWith("@256")) args << "--set" << "hidden_size=256" << "--set" << "intermediate_size=512";
        const QByteArray out = kevtest::runReference("make_random_model.py", args);
        if (!QFile::exists(dir + "/config.json")) return nullptr;
    }
    QString path = dir;
    if (!ggufType.isEmpty()) {
        path = dir + "/model-" + ggufType.toLower() + ".gguf";
        if (!QFile::exists(path))
            kevtest::runReference("make_random_gguf.py", {"--model", dir, "--out", path, "--type", ggufType});
        if (!QFile::exists(path)) return nullptr;
    }
    kev::LoadOptions options;
    options.dtype = dtype;
    options.quant = quant;
    return kev::Model::load(path.toStdString(), options);
}

// A precision row of the family tests: fp32, bf16, 4bit (NF4 from the folder), or q8_0
// (a Q8_0 GGUF kept in its blocks: bf16 activations, the int8 kernel) and q8_0 fp32 (fp32
// activations, the byte kernels); q5_0 and q5_0 fp32 the same for a Q5_0 GGUF (its blocks
// taken over as Q8_0-format byte codes); q6_k fp32 for a Q6_K GGUF of the preset made 256
// wide (the byte kernels), q4_k_m for one of Q4_K and Q6_K matrices (make_random_gguf.py's
// mix: fused q | k | v of two formats, both through the int8 kernel with bf16
// activations), q5_k_m the same with Q5_K for Q4_K.
std::unique_ptr<kev::Model> loadTinyAs(const QString& preset, const QString& precision) {
    const QString type = precision.section(' ', 0, 0);
    if (type == "q8_0" || type == "q5_0" || type == "q6_k" || type == "q4_k_m" || type == "q5_k_m")
        return loadTiny(type == "q8_0" || type == "q5_0" ? preset : preset + "@256",
                        precision.endsWith("fp32") ? kev::DType::F32 : kev::DType::BF16, kev::WeightQuant::Q4,
                        type.toUpper());
    return loadTiny(preset, precision == "fp32" ? kev::DType::F32 : kev::DType::BF16,
                    precision == "4bit" ? kev::WeightQuant::NF4 : kev::WeightQuant::None);
}

std::vector<kev::TokenId> randomPrompt(std::mt19937& rng, int vocab, int minLen, int maxLen) {
    std::uniform_int_distribution<int> len(minLen, maxLen), tok(3, vocab - 1);
    std::vector<kev::TokenId> p(static_cast<std::size_t>(len(rng)));
    for (auto& t : p) t = tok(rng);
    return p;
}

kev::SamplingSettings greedy(int maxNew) {
    kev::SamplingSettings s;
    s.temperature = 0.0f;
    s.max_new_tokens = maxNew;
    return s;
}

// Forces the kernel family `family` (kev/cpu_kernels.h) and returns an empty string; where
// this CPU lacks it, returns the report that names it as not run (nothing is forced: a
// family is never tested under another's name).
QString forceFamily(const QString& family) {
    const kev::Isa isa = kev::parse_isa(family.toStdString());
    if (!kev::isa_supported(isa))
        return QString("NOT RUN: the %1 kernels (this CPU has up to %2)").arg(family, kev::to_string(kev::cpu_isa()));
    kev::set_isa_limit(isa);
    return QString();
}

kev::GenerationResult runCards(const kev::Model& m, const std::vector<kev::TokenCard>& cards,
                               const std::vector<kev::TokenId>& shared, const kev::RunOptions& o = {}) {
    kev::Generator g(m, nullptr, std::nullopt);
    kev::RunOptions options = o;
    options.keep_logits = true;
    options.ignore_end_of_sequence = true;
    return g.run(g.prepare_tokens(cards, shared), options);
}

// The rows of the live-pack tests: the three architectures (and Gemma 3's windows) in
// fp32, and the half and 4-bit precisions on one of them.
void addLiveRows() {
    QTest::addColumn<QString>("preset");
    QTest::addColumn<QString>("precision");
    for (const char* preset : {"tiny-llama", "tiny-qwen2", "tiny-qwen3", "tiny-gemma3"})
        QTest::addRow("%s fp32", preset) << QString(preset) << QString("fp32");
    QTest::addRow("tiny-qwen2 bf16") << QString("tiny-qwen2") << QString("bf16");
    QTest::addRow("tiny-qwen2 4bit") << QString("tiny-qwen2") << QString("4bit");
}

float maxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
    float m = 0;
    for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
    return m;
}

// Every card of `packed` equals its run alone: same tokens, logits within tol (0 by
// default: the CPU kernels are batch-invariant, so the bits are the same).
void expectIsolated(const kev::Model& m, const std::vector<kev::TokenCard>& cards,
                    const std::vector<kev::TokenId>& shared, const kev::GenerationResult& packed,
                    float tol = 0.0f) {
    for (std::size_t c = 0; c < cards.size(); ++c) {
        const auto alone = runCards(m, {cards[c]}, shared);
        const auto& a = alone.cards[0];
        const auto& p = packed.cards[c];
        QCOMPARE(p.tokens, a.tokens);
        QCOMPARE(p.logits.size(), a.logits.size());
        for (std::size_t s = 0; s < a.logits.size(); ++s) {
            const float d = maxAbsDiff(p.logits[s], a.logits[s]);
            QVERIFY2(d <= tol, qPrintable(QString("card %1 step %2: max abs diff %3").arg(c).arg(s).arg(d)));
        }
    }
}

}  // namespace

class TestGenerate : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void initTestCase() {
        // Every test here runs with each buffer of the forward filled with NaNs when lent
        // (kev/buffer_pool.h): a kernel reading memory it did not write breaks the bits.
        kev::set_buffer_pool_mode(kev::BufferPoolMode::Poison);
        for (const char* preset : {"tiny-llama", "tiny-qwen2", "tiny-qwen3"}) {
            auto m = loadTiny(preset);
            QVERIFY2(m, preset);
            models_.push_back(std::move(m));
        }
    }

    void randomPacksAreIsolated_data() {
        QTest::addColumn<int>("model");
        QTest::addColumn<int>("seed");
        QTest::addColumn<bool>("withShared");
        for (int model = 0; model < 3; ++model) {
            for (int seed = 0; seed < 3; ++seed) {
                QTest::addRow("model%d-seed%d", model, seed) << model << seed << false;
                QTest::addRow("model%d-seed%d-shared", model, seed) << model << seed << true;
            }
        }
    }

    void randomPacksAreIsolated() {
        QFETCH(int, model);
        QFETCH(int, seed);
        QFETCH(bool, withShared);
        const kev::Model& m = *models_[static_cast<std::size_t>(model)];
        std::mt19937 rng(static_cast<unsigned>(seed * 7 + model));
        const int vocab = static_cast<int>(m.config().vocab_size);
        std::uniform_int_distribution<int> nCards(1, 16), maxNew(1, 12);
        std::vector<kev::TokenCard> cards;
        const int n = nCards(rng);
        for (int c = 0; c < n; ++c) cards.push_back({randomPrompt(rng, vocab, 1, 40), greedy(maxNew(rng))});
        const auto shared = withShared ? randomPrompt(rng, vocab, 1, 30) : std::vector<kev::TokenId>{};
        const auto packed = runCards(m, cards, shared);
        expectIsolated(m, cards, shared, packed);
    }

    // Invariant 1 on every kernel family, forced in turn (kev/cpu_kernels.h): a card's
    // logits packed are the same bits as alone, in fp32, bf16 and 4-bit (NF4, int8
    // kernel; Q8_0 blocks kept, through the int8 kernel and, with fp32 activations, the
    // byte kernels), greedy and seeded sampling, with and without a shared context. A family
    // this CPU lacks is reported as not run, by name; it is never tested under another.
    // tiny-gemma2 / tiny-gemma3 add soft-capped scores, GeGLU, Gemma's norms and 16-token
    // windows that the shared context and prompts cross.
    void isolationIsExactOnEveryKernelFamily_data() {
        QTest::addColumn<QString>("family");
        QTest::addColumn<QString>("precision");
        QTest::addColumn<bool>("shared");
        QTest::addColumn<QString>("preset");
        for (const char* family : {"scalar", "avx2", "avx512", "amx"})
            for (const char* precision : {"fp32", "bf16", "4bit"}) {
                for (bool shared : {false, true})
                    QTest::addRow("%s %s%s", family, precision, shared ? " shared sampled" : " greedy")
                        << QString(family) << QString(precision) << shared << QString("tiny-qwen2");
                for (const char* preset : {"tiny-gemma2", "tiny-gemma3"})
                    QTest::addRow("%s %s %s shared sampled", family, precision, preset)
                        << QString(family) << QString(precision) << true << QString(preset);
            }
        for (const char* family : {"scalar", "avx2", "avx512", "amx"})
            for (const char* precision : {"q8_0", "q8_0 fp32", "q5_0", "q5_0 fp32", "q6_k fp32", "q4_k_m", "q5_k_m"})
                for (bool shared : {false, true})
                    QTest::addRow("%s %s%s", family, precision, shared ? " shared sampled" : " greedy")
                        << QString(family) << QString(precision) << shared << QString("tiny-qwen2");
    }

    void isolationIsExactOnEveryKernelFamily() {
        QFETCH(QString, family);
        QFETCH(QString, precision);
        QFETCH(bool, shared);
        QFETCH(QString, preset);
        if (const QString notRun = forceFamily(family); !notRun.isEmpty()) QSKIP(qPrintable(notRun));
        const auto m = loadTinyAs(preset, precision);
        QVERIFY(m);
        if (precision.startsWith("q8_0") || precision.startsWith("q5_0"))
            QVERIFY(m->weights().memory().q8_0 == m->weights().memory().quantized());
        if (precision.startsWith("q6_k")) QVERIFY(m->weights().memory().q6_k == m->weights().memory().quantized());
        if (precision.endsWith("_m")) {  // both formats, and a fused q | k | v of two parts
            const kev::WeightMemory mem = m->weights().memory();
            const std::int64_t base = precision == "q4_k_m" ? mem.q4_k : mem.q5_k;
            QVERIFY(base > 0 && mem.q6_k > 0 && base + mem.q6_k == mem.quantized());
            QCOMPARE(int(m->weights().layers[0].qkv.quant_parts.size()), 2);
        }
        for (const auto& [path, kernel] : kev::kernel_paths())
            if (path == "bf16 linear" || path == "fp32 linear" || path == "4-bit decode")
                qInfo("%s: %s", path.c_str(), kernel.c_str());
        std::mt19937 rng(static_cast<unsigned>(qHash(family + precision) % 1000 + shared));
        const int vocab = static_cast<int>(m->config().vocab_size);
        std::uniform_int_distribution<int> nCards(2, 16), maxNew(3, 8);
        std::vector<kev::TokenCard> cards;
        const int n = nCards(rng);
        for (int c = 0; c < n; ++c) {
            kev::SamplingSettings st = greedy(maxNew(rng));
            if (shared) {
                st.temperature = 0.7f + 0.1f * static_cast<float>(c % 5);
                st.seed = 500 + static_cast<std::uint64_t>(c);
            }
            cards.push_back({randomPrompt(rng, vocab, 1, 24), st});
        }
        const auto context = shared ? randomPrompt(rng, vocab, 5, 20) : std::vector<kev::TokenId>{};
        const auto packed = runCards(*m, cards, context);
        for (std::size_t c = 0; c < cards.size(); ++c) {
            const auto alone = runCards(*m, {cards[c]}, context);
            QCOMPARE(packed.cards[c].tokens, alone.cards[0].tokens);
            QVERIFY2(packed.cards[c].logits == alone.cards[0].logits,
                     qPrintable(QString("card %1 of %2: packed logits are not the bits of the solo run").arg(c).arg(n)));
        }
    }

    // The pool changes where results are stored, never a bit of them: a pack run with
    // the pool off (malloc's memory) and poisoned (every buffer lent full of NaNs, and
    // kept buffers lent again within the run) gives the same tokens and logits, on every
    // family this CPU runs.
    void theBufferPoolChangesNoBit_data() {
        QTest::addColumn<QString>("family");
        QTest::addColumn<QString>("precision");
        for (const char* family : {"scalar", "avx2", "avx512", "amx"})
            for (const char* precision : {"fp32", "bf16", "4bit"})
                QTest::addRow("%s %s", family, precision) << QString(family) << QString(precision);
    }

    void theBufferPoolChangesNoBit() {
        QFETCH(QString, family);
        QFETCH(QString, precision);
        if (const QString notRun = forceFamily(family); !notRun.isEmpty()) QSKIP(qPrintable(notRun));
        const auto m = loadTinyAs("tiny-qwen2", precision);
        QVERIFY(m);
        std::mt19937 rng(11);
        const int vocab = static_cast<int>(m->config().vocab_size);
        std::vector<kev::TokenCard> cards;
        for (int c = 0; c < 6; ++c) {
            kev::SamplingSettings st = greedy(6);
            if (c % 2) {
                st.temperature = 0.8f;
                st.seed = 70 + static_cast<std::uint64_t>(c);
            }
            cards.push_back({randomPrompt(rng, vocab, 1, 30), st});
        }
        const auto context = randomPrompt(rng, vocab, 4, 12);
        kev::set_buffer_pool_mode(kev::BufferPoolMode::Off);
        const auto plain = runCards(*m, cards, context);
        kev::set_buffer_pool_mode(kev::BufferPoolMode::Poison);
        const std::int64_t reused = kev::buffer_pool_stats().reused;
        const auto poisoned = runCards(*m, cards, context);
        QVERIFY(kev::buffer_pool_stats().reused > reused);  // the run did lend kept buffers
        QCOMPARE(kev::buffer_pool_stats().open_scopes, 0);
        QCOMPARE(kev::buffer_pool_stats().kept_bytes, std::int64_t{0});
        for (std::size_t c = 0; c < cards.size(); ++c) {
            QCOMPARE(poisoned.cards[c].tokens, plain.cards[c].tokens);
            QVERIFY2(poisoned.cards[c].logits == plain.cards[c].logits, qPrintable(QString("card %1").arg(c)));
        }
    }

    // One arithmetic on every family: the fp32 forward (FMA dense kernels, row kernels,
    // AVX2 or scalar attention) and the 4-bit forward (the int8 kernel's exact sums, NF4 or
    // Q8_0 blocks kept) give the same bits whichever family runs them; bf16 too when the
    // FMA kernel is named.
    // tiny-gemma2 / tiny-gemma3: soft-capped and windowed attention rows too (the first
    // card's 20-30 tokens after an 8-token context cross the 16-token window).
    void theForwardIsTheSameBitsOnEveryFamily_data() {
        QTest::addColumn<QString>("precision");
        QTest::addColumn<QString>("preset");
        for (const char* preset : {"tiny-qwen3", "tiny-gemma2", "tiny-gemma3"}) {
            QTest::addRow("%s fp32", preset) << "fp32" << QString(preset);
            QTest::addRow("%s bf16 fma", preset) << "bf16" << QString(preset);
            QTest::addRow("%s 4bit", preset) << "4bit" << QString(preset);
        }
        QTest::addRow("tiny-qwen3 q8_0") << "q8_0" << QString("tiny-qwen3");
        QTest::addRow("tiny-qwen3 q4_k_m") << "q4_k_m" << QString("tiny-qwen3");  // Q4_K and Q6_K, int8 kernel
    }
    void theForwardIsTheSameBitsOnEveryFamily() {
        QFETCH(QString, precision);
        QFETCH(QString, preset);
        const auto m = loadTinyAs(preset, precision);
        QVERIFY(m);
        std::mt19937 rng(5);
        const std::vector<kev::TokenCard> cards = {{randomPrompt(rng, 512, 20, 30), greedy(6)},
                                                   {randomPrompt(rng, 512, 1, 3), greedy(4)}};
        const auto context = randomPrompt(rng, 512, 8, 8);
        std::optional<kev::GenerationResult> twin;
        int compared = 0;
        // The avx2 family twice: its int8 kernel on vpmaddubsw, and on AVX-VNNI.
        struct Family {
            kev::Isa isa;
            bool avx_vnni;
            const char* name;
        };
        for (const Family f : {Family{kev::Isa::Scalar, false, "scalar"}, Family{kev::Isa::Avx2, false, "avx2"},
                               Family{kev::Isa::Avx2, true, "avx2 with avx-vnni"}, Family{kev::Isa::Avx512, false, "avx512"}}) {
            const kev::Isa isa = f.isa;
            if (!kev::isa_supported(isa) || (f.avx_vnni && !kev::cpu_has_avx_vnni())) {
                qWarning("NOT RUN: the %s family (this CPU lacks it)", f.name);
                continue;
            }
            kev::set_isa_limit(isa);
            kev::set_quant_int8_avx_vnni(f.avx_vnni);
            if (precision == "bf16")
                kev::set_bf16_kernel(isa == kev::Isa::Scalar ? kev::Bf16Kernel::Scalar
                                     : isa == kev::Isa::Avx2 ? kev::Bf16Kernel::Avx2
                                                             : kev::Bf16Kernel::Avx512);
            const auto r = runCards(*m, cards, context);
            if (!twin) {
                twin = r;
                continue;
            }
            for (std::size_t c = 0; c < cards.size(); ++c) {
                QCOMPARE(r.cards[c].tokens, twin->cards[c].tokens);
                QVERIFY2(r.cards[c].logits == twin->cards[c].logits,
                         qPrintable(QString("%1: card %2's logits are not the scalar twin's").arg(f.name).arg(c)));
            }
            ++compared;
        }
        kev::set_quant_int8_avx_vnni(true);
        kev::set_bf16_kernel(kev::Bf16Kernel::Auto);
        qInfo("%d famil%s compared with the scalar twin", compared, compared == 1 ? "y" : "ies");
    }

    // A prompt read in one forward or in chunks through the cache (a card joining a
    // running pack, a long prompt cut into pieces) gives the same bits at every row.
    void aPromptReadInChunksIsTheSameBits() {
        for (const auto& m : models_) {
            std::mt19937 rng(9);
            const auto tokens = randomPrompt(rng, 512, 30, 30);
            auto forward = [&](kev::KvCache& cache, std::int64_t start, std::int64_t n) {
                kev::ForwardBatch b;
                for (std::int64_t i = start; i < start + n; ++i) {
                    b.tokens.push_back(tokens[static_cast<std::size_t>(i)]);
                    b.positions.push_back(i);
                    b.slots.push_back(i);
                    b.reads.push_back({0, 0, i + 1});
                    b.output_rows.push_back(i - start);
                }
                b.kv_len = start + n;
                return m->forward(b, cache);
            };
            kev::KvCache whole_cache = m->make_cache(30), chunk_cache = m->make_cache(30);
            const at::Tensor whole = forward(whole_cache, 0, 30);  // [30, V]
            const at::Tensor chunks = at::cat({forward(chunk_cache, 0, 11), forward(chunk_cache, 11, 1),
                                               forward(chunk_cache, 12, 18)}, 0);
            QVERIFY2(at::equal(whole, chunks), "a chunked prompt's logits differ from one forward's");
        }
    }

    void cleanup() {
        kev::set_isa_limit(kev::cpu_isa());
        kev::set_buffer_pool_mode(kev::BufferPoolMode::Poison);
    }

    void ownSlotPathsEqualTheDenseMask() {
        // The paths that read only each card's own slots (attention per card in the
        // prefill, gathered slots in decode steps) against the reference path that reads
        // the whole cache through one dense mask.
        for (std::size_t m = 0; m < models_.size(); ++m) {
            std::mt19937 rng(static_cast<unsigned>(40 + m));
            std::vector<kev::TokenCard> cards;
            for (int c = 0; c < 7; ++c) cards.push_back({randomPrompt(rng, 512, 2, 35), greedy(4 + c * 2)});
            const auto shared = m >= 1 ? randomPrompt(rng, 512, 10, 10) : std::vector<kev::TokenId>{};
            const auto gathered = runCards(*models_[m], cards, shared);
            kev::RunOptions dense;
            dense.dense_mask = true;
            const auto reference = runCards(*models_[m], cards, shared, dense);
            for (std::size_t c = 0; c < cards.size(); ++c) {
                QCOMPARE(gathered.cards[c].tokens, reference.cards[c].tokens);
                for (std::size_t s = 0; s < reference.cards[c].logits.size(); ++s) {
                    const float d = maxAbsDiff(gathered.cards[c].logits[s], reference.cards[c].logits[s]);
                    QVERIFY2(d <= 1e-5f, qPrintable(QString("model %1 card %2 step %3: %4").arg(m).arg(c).arg(s).arg(d)));
                }
            }
        }
    }

    void aPackThatCannotFitIsRefusedBeforeItStarts() {
        const kev::Model& m = *models_[0];
        kev::Generator g(m, nullptr, std::nullopt);
        std::mt19937 rng(1);
        std::vector<kev::TokenCard> cards;
        for (int c = 0; c < 4; ++c) cards.push_back({randomPrompt(rng, 512, 100, 100), greedy(200)});
        QVERIFY(g.limits().max_cache_slots > 1200);  // this machine's memory holds it easily
        g.set_memory_budget(256 * 1024);             // 256 KiB: not enough for 1200 slots
        try {
            g.prepare_tokens(cards, {});
            QFAIL("a pack larger than the memory budget was accepted");
        } catch (const kev::Error& e) {
            QCOMPARE(int(e.code()), int(kev::ErrorCode::OutOfMemory));
            QVERIFY2(std::string(e.what()).find("the pack") != std::string::npos, e.what());
        }
        // The context length is checked too, naming the card.
        kev::Generator ok(m, nullptr, std::nullopt);
        cards[2].prompt = randomPrompt(rng, 512, 2100, 2100);
        try {
            ok.prepare_tokens(cards, {});
            QFAIL("a card longer than the context was accepted");
        } catch (const kev::Error& e) {
            QCOMPARE(int(e.code()), int(kev::ErrorCode::InvalidArgument));
            QVERIFY2(std::string(e.what()).find("card 3") != std::string::npos, e.what());
        }
    }

    void changingOneCardNeverChangesAnother() {
        const kev::Model& m = *models_[0];
        std::mt19937 rng(11);
        std::vector<kev::TokenCard> cards;
        for (int c = 0; c < 5; ++c) cards.push_back({randomPrompt(rng, 512, 5, 30), greedy(10)});
        const auto base = runCards(m, cards, {});
        auto changed = cards;
        changed[2].prompt = randomPrompt(rng, 512, 40, 60);  // change one
        changed.push_back({randomPrompt(rng, 512, 3, 8), greedy(16)});  // add one
        changed.erase(changed.begin() + 4);  // remove one
        const auto after = runCards(m, changed, {});
        for (int c : {0, 1, 3}) QCOMPARE(after.cards[c].tokens, base.cards[c].tokens);
    }

    void sharedContextEqualsTheConcatenatedPrompt() {
        const kev::Model& m = *models_[2];
        std::mt19937 rng(5);
        const auto shared = randomPrompt(rng, 512, 20, 20);
        std::vector<kev::TokenCard> cards;
        for (int c = 0; c < 4; ++c) cards.push_back({randomPrompt(rng, 512, 3, 15), greedy(8)});
        const auto packed = runCards(m, cards, shared);
        for (std::size_t c = 0; c < cards.size(); ++c) {
            kev::TokenCard whole = cards[c];
            whole.prompt.insert(whole.prompt.begin(), shared.begin(), shared.end());
            const auto alone = runCards(m, {whole}, {});
            QCOMPARE(packed.cards[c].tokens, alone.cards[0].tokens);
            for (std::size_t s = 0; s < alone.cards[0].logits.size(); ++s) {
                QVERIFY(maxAbsDiff(packed.cards[c].logits[s], alone.cards[0].logits[s]) <= 1e-4f);
            }
        }
    }

    void seededSamplingIsTheSameAloneAndPacked() {
        const kev::Model& m = *models_[1];
        std::mt19937 rng(3);
        std::vector<kev::TokenCard> cards;
        for (int c = 0; c < 6; ++c) {
            kev::SamplingSettings s;
            s.temperature = 0.3f + 0.25f * static_cast<float>(c);
            s.top_p = 0.95f;
            s.top_k = c % 2 ? 40 : 0;
            s.seed = 1000 + static_cast<std::uint64_t>(c);
            s.max_new_tokens = 12;
            cards.push_back({randomPrompt(rng, 512, 4, 20), s});
        }
        const auto packed = runCards(m, cards, {});
        for (std::size_t c = 0; c < cards.size(); ++c) {
            const auto alone = runCards(m, {cards[c]}, {});
            QCOMPARE(packed.cards[c].tokens, alone.cards[0].tokens);
            QCOMPARE(packed.cards[c].seed, std::uint64_t(1000 + c));
        }
        // A different seed gives a different answer (12 tokens at temperature 1.55).
        auto other = cards[5];
        other.sampling.seed = 4242;
        QVERIFY(runCards(m, {other}, {}).cards[0].tokens != packed.cards[5].tokens);
    }

    void cancellingOneCardLeavesTheOthersUnchanged() {
        const kev::Model& m = *models_[0];
        std::mt19937 rng(9);
        std::vector<kev::TokenCard> cards;
        for (int c = 0; c < 4; ++c) cards.push_back({randomPrompt(rng, 512, 5, 20), greedy(20)});
        const auto full = runCards(m, cards, {});
        kev::CancelFlags cancel(cards.size());
        kev::RunOptions o;
        o.cancel = &cancel;
        o.on_step = [&](const kev::StepEvent& ev) {
            if (ev.step == 3) cancel.cancel(1);
        };
        const auto cut = runCards(m, cards, {}, o);
        QCOMPARE(cut.cards[1].finish, kev::FinishReason::Cancelled);
        // Cancelled after step 3: the card took the prefill token and three decode tokens.
        QCOMPARE(cut.cards[1].tokens.size(), std::size_t(4));
        QVERIFY(std::equal(cut.cards[1].tokens.begin(), cut.cards[1].tokens.end(), full.cards[1].tokens.begin()));
        for (int c : {0, 2, 3}) {
            QCOMPARE(cut.cards[c].tokens, full.cards[c].tokens);
            QCOMPARE(cut.cards[c].finish, kev::FinishReason::MaxTokens);
        }
    }

    // Cards join a running pack at random steps (some after the shared context, some
    // standing alone), some are cancelled, prompts are read in chunks of 5 rows beside
    // the answering cards, and finished cards' regions are poisoned with NaN when freed
    // (and reused by later cards). Every card's logits are the bits of its solo run, its
    // tokens the same; a cancelled card's tokens are a prefix of its solo answer.
    void cardsJoiningARunningPackGiveTheirSoloBits_data() {
        addLiveRows();
    }

    void cardsJoiningARunningPackGiveTheirSoloBits() {
        QFETCH(QString, preset);
        QFETCH(QString, precision);
        const auto m = loadTinyAs(preset, precision);
        QVERIFY(m);
        const int vocab = static_cast<int>(m->config().vocab_size);
        std::mt19937 rng(static_cast<unsigned>(qHash(preset + precision) % 1000));
        auto uniform = [&rng](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
        const auto context = randomPrompt(rng, vocab, 4, 12);
        std::vector<kev::TokenCard> first;
        for (int c = uniform(2, 4); c > 0; --c) {
            kev::SamplingSettings st = greedy(uniform(10, 14));  // the run outlives the last join
            if (c % 2) st.temperature = 0.9f, st.seed = static_cast<std::uint64_t>(uniform(1, 1000));
            first.push_back({randomPrompt(rng, vocab, 2, 14), st});
        }
        struct Join {
            kev::TokenCard card;
            bool shares = false;
            std::int64_t after_step = 0;
            std::int64_t cancel_after = -1;  // steps after its join
        };
        std::vector<Join> joins;
        for (int j = 0; j < 6; ++j) {
            Join k;
            k.card = {randomPrompt(rng, vocab, 3, 18), greedy(uniform(3, 9))};
            if (j % 2) k.card.sampling.temperature = 0.8f, k.card.sampling.seed = static_cast<std::uint64_t>(uniform(1, 1000));
            k.shares = j % 3 != 0;
            k.after_step = uniform(0, 9);
            if (j == 4) k.cancel_after = 3, k.card.sampling.max_new_tokens = 30;
            joins.push_back(k);
        }
        kev::JoinQueue queue;
        kev::CancelFlags cancel(64);
        std::map<std::uint64_t, std::int32_t> cardOfJoin;
        std::map<std::int32_t, std::int64_t> cancelAt;  // card -> step after which it is cancelled
        bool mixed = false, boundHeld = true;
        std::int64_t refused = 0;
        kev::RunOptions o;
        o.joins = &queue;
        o.cancel = &cancel;
        o.poison_freed = true;
        o.prompt_rows_beside_answers = 5;
        o.dense_mask = false;
        o.on_step = [&](const kev::StepEvent& ev) {
            for (const kev::JoinedCard& jc : ev.joined) {
                if (jc.card < 0) {
                    ++refused;
                    QVERIFY2(jc.tag == 99 && QString::fromStdString(jc.error).contains("empty prompt"), jc.error.c_str());
                    continue;
                }
                cardOfJoin[jc.tag] = jc.card;
                const Join& k = joins[static_cast<std::size_t>(jc.tag)];
                if (k.cancel_after >= 0) cancelAt[jc.card] = ev.step + k.cancel_after;
            }
            if (ev.kind == kev::StepKind::Mixed) {
                mixed = true;
                boundHeld = boundHeld && ev.prompt_rows <= 5;
            }
            for (const auto& [card, at] : cancelAt)
                if (at == ev.step) cancel.cancel(static_cast<std::size_t>(card));
            for (std::size_t j = 0; j < joins.size(); ++j) {
                if (joins[j].after_step != ev.step) continue;
                kev::JoiningCard jc;
                jc.tag = j;
                jc.prompt = joins[j].card.prompt;
                if (joins[j].shares) jc.prompt.insert(jc.prompt.begin(), context.begin(), context.end());
                jc.sampling = joins[j].card.sampling;
                queue.push(jc);
            }
            if (ev.step == 2) {  // an empty prompt: refused by name
                kev::JoiningCard empty;
                empty.tag = 99;
                empty.sampling = greedy(3);
                queue.push(empty);
            }
        };
        const auto live = runCards(*m, first, context, o);
        QVERIFY(mixed);
        QVERIFY(boundHeld);
        QCOMPARE(refused, std::int64_t(1));
        QCOMPARE(cardOfJoin.size(), joins.size());
        QCOMPARE(live.cards.size(), first.size() + joins.size());
        auto expectSolo = [&](const kev::CardResult& got, const kev::TokenCard& card, bool shares, const QString& who) {
            const auto alone = runCards(*m, {card}, shares ? context : std::vector<kev::TokenId>{});
            const auto& a = alone.cards[0];
            QVERIFY2(got.finish != kev::FinishReason::NonFinite, qPrintable(who + " read a freed slot"));
            if (got.finish == kev::FinishReason::Cancelled) {
                QVERIFY(got.tokens.size() < a.tokens.size());
                QVERIFY(std::equal(got.tokens.begin(), got.tokens.end(), a.tokens.begin()));
                QVERIFY(std::equal(got.logits.begin(), got.logits.end(), a.logits.begin()));
                return;
            }
            QCOMPARE(got.tokens, a.tokens);
            QVERIFY2(got.logits == a.logits, qPrintable(who + ": live logits are not the bits of the solo run"));
        };
        for (std::size_t c = 0; c < first.size(); ++c)
            expectSolo(live.cards[c], first[c], true, QString("card %1").arg(c));
        for (const auto& [tag, card] : cardOfJoin) {
            expectSolo(live.cards[static_cast<std::size_t>(card)], joins[tag].card, joins[tag].shares,
                       QString("joined card %1 (tag %2)").arg(card).arg(tag));
            if (QTest::currentTestFailed()) return;
        }
        QCOMPARE(live.cards[static_cast<std::size_t>(cardOfJoin[4])].finish, kev::FinishReason::Cancelled);
    }

    // The same board run twice with a prefix cache, the second time with one card edited
    // in its last token, one card duplicated (another seed) and one new card: every card's
    // logits are the bits of a run without the cache, and what was computed before is
    // copied (the shared context, each unchanged card's whole blocks, the edited card's
    // blocks before the edit).
    void prefixCacheGivesTheRecomputedBits_data() {
        addLiveRows();
    }

    void prefixCacheGivesTheRecomputedBits() {
        QFETCH(QString, preset);
        QFETCH(QString, precision);
        const auto m = loadTinyAs(preset, precision);
        QVERIFY(m);
        constexpr std::int64_t B = kev::PrefixCache::kBlockTokens;
        const int vocab = static_cast<int>(m->config().vocab_size);
        std::mt19937 rng(static_cast<unsigned>(qHash(preset + precision) % 1000 + 7));
        const auto context = randomPrompt(rng, vocab, 37, 37);  // blocks 0-1 whole, block 2 shared with the cards
        std::vector<kev::TokenCard> board;
        for (int c = 0; c < 4; ++c) {
            kev::SamplingSettings st = greedy(6);
            if (c % 2) st.temperature = 0.8f, st.seed = 77 + static_cast<std::uint64_t>(c);
            board.push_back({randomPrompt(rng, vocab, 20, 40), st});
        }
        kev::PrefixCache cache(256ll << 20);
        kev::RunOptions withCache;
        withCache.prefix_cache = &cache;
        const auto first = runCards(*m, board, context, withCache);
        QVERIFY(cache.stats().blocks > 0);
        for (const auto& c : first.cards) QCOMPARE(c.stats.reused_tokens, std::int64_t(0));  // nothing stored yet

        auto second = board;
        second[1].prompt.back() = (second[1].prompt.back() + 1) % vocab;  // edited in its last token
        second.push_back(board[2]);                                         // Duplicate, another seed
        second.back().sampling.seed = 991;
        second.back().sampling.temperature = 0.9f;
        second.push_back({randomPrompt(rng, vocab, 10, 20), greedy(5)});    // a new card
        const auto again = runCards(*m, second, context, withCache);
        const auto fresh = runCards(*m, second, context);
        for (std::size_t c = 0; c < second.size(); ++c) {
            QCOMPARE(again.cards[c].tokens, fresh.cards[c].tokens);
            QVERIFY2(again.cards[c].logits == fresh.cards[c].logits,
                     qPrintable(QString("card %1: logits with the prefix cache are not the recomputed bits").arg(c)));
            const auto total = static_cast<std::int64_t>(context.size() + second[c].prompt.size());
            // Whole blocks before the last prompt token, less the shared context's part.
            const std::int64_t stored = (total - 1) / B * B - static_cast<std::int64_t>(context.size());
            const std::int64_t reused = again.cards[c].stats.reused_tokens;
            // The edited card (1) too: its blocks end before its last (edited) token. The
            // duplicate (4) reuses its source's; the new card (5) nothing of its own.
            QCOMPARE(reused, c == 5 ? std::int64_t(0) : std::max<std::int64_t>(0, stored));
        }
        // The first run's answers were stored too: the same board again reuses the
        // unchanged cards' whole conversation blocks and still gives the same bits.
        const auto third = runCards(*m, board, context, withCache);
        QCOMPARE(third.cards[0].logits, first.cards[0].logits);
        QCOMPARE(third.cards[3].tokens, first.cards[3].tokens);

        // A follow-up: card 0's prompt, the answer it got and a new turn. It starts from the
        // blocks of its conversation so far (the prompt and every answer token fed back;
        // the last sampled one never is, unless the answer ended by itself) and gives the
        // bits of a run that recomputes them.
        kev::TokenCard follow = board[0];
        const kev::CardResult& answered = first.cards[0];
        follow.prompt.insert(follow.prompt.end(), answered.tokens.begin(), answered.tokens.end());
        const auto turn = randomPrompt(rng, vocab, 5, 9);
        follow.prompt.insert(follow.prompt.end(), turn.begin(), turn.end());
        const auto cont = runCards(*m, {follow}, context, withCache);
        const auto contFresh = runCards(*m, {follow}, context);
        QCOMPARE(cont.cards[0].tokens, contFresh.cards[0].tokens);
        QVERIFY2(cont.cards[0].logits == contFresh.cards[0].logits, "a follow-up's logits are not the recomputed bits");
        const auto fed = static_cast<std::int64_t>(answered.tokens.size()) -
                         (answered.finish == kev::FinishReason::MaxTokens ? 1 : 0);
        const auto ctx = static_cast<std::int64_t>(context.size());
        const std::int64_t conversation = ctx + static_cast<std::int64_t>(board[0].prompt.size()) + fed;
        QCOMPARE(cont.cards[0].stats.reused_tokens, std::max<std::int64_t>(0, conversation / B * B - ctx));
        QVERIFY(cont.cards[0].stats.reused_tokens > 0);
    }

    // The cache itself: a block is found only for the same whole prefix and state;
    // prompts that differ in the last token of a block share nothing from that block on;
    // LoRA on / off / merged never share; least recently used blocks go first; another
    // model empties it.
    void prefixCacheNeverServesAnotherPrefixOrState() {
        const kev::Model& m = *models_[1];
        constexpr std::int64_t B = kev::PrefixCache::kBlockTokens;
        kev::KvCache kv = m.make_cache(200);
        for (std::int64_t l = 0; l < kv.layers(); ++l) {
            kv.keys(l).copy_(at::randn_like(kv.keys(l)));
            kv.values(l).copy_(at::randn_like(kv.values(l)));
        }
        std::mt19937 rng(5);
        const auto tokens = randomPrompt(rng, 512, 50, 50);
        const std::int64_t blockBytes = 2 * kv.layers() * m.config().kv_size() * B * 4;
        kev::PrefixCache cache(10 * blockBytes);
        cache.bind(m);
        const kev::PrefixState off;
        kev::PrefixState perRow{kev::PrefixState::Lora::PerRow, 1.0f}, merged{kev::PrefixState::Lora::Merged, 1.0f};
        cache.store(tokens, 50, off, kv, {0, 100});  // positions at slots 100..
        QCOMPARE(cache.stats().blocks, std::int64_t(3));
        QCOMPARE(cache.match(tokens, off, 50), 3 * B);
        QCOMPARE(cache.match(tokens, off, 47), 2 * B);
        QCOMPARE(cache.match(tokens, perRow, 50), std::int64_t(0));
        QCOMPARE(cache.match(tokens, merged, 50), std::int64_t(0));
        QCOMPARE(cache.match(tokens, kev::PrefixState{kev::PrefixState::Lora::PerRow, 0.5f}, 50), std::int64_t(0));
        auto edited = tokens;
        edited[2 * B - 1] += 1;  // the last token of block 1
        QCOMPARE(cache.match(edited, off, 50), B);
        edited = tokens;
        edited[0] += 1;          // the first token: nothing is shared
        QCOMPARE(cache.match(edited, off, 50), std::int64_t(0));
        // Restored keys and values are the stored ones, at the slots asked, positions recorded.
        kev::KvCache other = m.make_cache(200);
        cache.restore(tokens, off, 5, 3 * B, other, {0, 20});
        for (std::int64_t l = 0; l < kv.layers(); ++l) {
            QVERIFY(at::equal(other.keys(l).narrow(1, 25, 3 * B - 5), kv.keys(l).narrow(1, 105, 3 * B - 5)));
            QVERIFY(at::equal(other.values(l).narrow(1, 25, 3 * B - 5), kv.values(l).narrow(1, 105, 3 * B - 5)));
        }
        QCOMPARE(other.slot_positions()[25], std::int64_t(5));
        QString refusal;
        try {
            cache.restore(edited, off, 0, B, other, {0, 20});
        } catch (const kev::Error& e) {
            refusal = QString::fromStdString(e.what());
        }
        QVERIFY2(refusal.contains("not stored"), qPrintable(refusal));
        // LRU: 3 + 7 blocks fill the budget; touching the first prompt keeps it when more come.
        const auto second = randomPrompt(rng, 512, 7 * B, 7 * B);
        cache.store(second, 7 * B, perRow, kv, {0, 0});
        QCOMPARE(cache.stats().blocks, std::int64_t(10));
        QCOMPARE(cache.match(tokens, off, 50), 3 * B);
        const auto third = randomPrompt(rng, 512, 2 * B, 2 * B);
        cache.store(third, 2 * B, off, kv, {0, 0});
        QCOMPARE(cache.stats().blocks, std::int64_t(10));
        QCOMPARE(cache.stats().evicted_blocks, std::int64_t(2));
        QCOMPARE(cache.match(tokens, off, 50), 3 * B);
        QCOMPARE(cache.match(second, perRow, 7 * B), std::int64_t(0));  // its first two blocks went
        QVERIFY(cache.stats().bytes <= cache.stats().budget_bytes);
        cache.bind(*models_[0]);
        QCOMPARE(cache.stats().blocks, std::int64_t(0));
        QCOMPARE(cache.match(tokens, off, 50), std::int64_t(0));
    }

    void cancellingTheRunStopsEveryCardWithinOneStep() {
        const kev::Model& m = *models_[0];
        std::mt19937 rng(10);
        std::vector<kev::TokenCard> cards;
        for (int c = 0; c < 3; ++c) cards.push_back({randomPrompt(rng, 512, 5, 20), greedy(50)});
        kev::CancelFlags cancel(cards.size());
        kev::RunOptions o;
        o.cancel = &cancel;
        std::int64_t lastStep = -1;
        o.on_step = [&](const kev::StepEvent& ev) {
            lastStep = ev.step;
            if (ev.step == 2) cancel.cancel_all();
        };
        const auto cut = runCards(m, cards, {}, o);
        QVERIFY2(lastStep <= 3, qPrintable(QString("ran until step %1").arg(lastStep)));
        for (const auto& c : cut.cards) QCOMPARE(c.finish, kev::FinishReason::Cancelled);
    }

    // A model whose embedding has more rows than its tokenizer has tokens (Qwen pads
    // 151665 tokens to 151936 rows): the padding ids have no text and must never be
    // sampled, even at a high temperature over random logits.
    void idsPastTheTokenizerAreNeverSampled() {
        const QString path = kevtest::workDir() + QStringLiteral("/bytes-only-tokenizer.json");
        {
            // GPT-2's byte-to-character table: 256 byte tokens, no merges.
            nlohmann::json vocab = nlohmann::json::object();
            int extra = 0;
            for (int b = 0; b < 256; ++b) {
                const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
                const int cp = printable ? b : 256 + extra++;
                std::string utf8;
                if (cp < 0x80) utf8 += static_cast<char>(cp);
                else {
                    utf8 += static_cast<char>(0xC0 | (cp >> 6));
                    utf8 += static_cast<char>(0x80 | (cp & 0x3F));
                }
                vocab[utf8] = b;
            }
            const nlohmann::json doc = {
                {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}},
                {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
                {"decoder", {{"type", "ByteLevel"}}},
                {"normalizer", nullptr},
                {"added_tokens", nlohmann::json::array()}};
            std::ofstream(path.toStdString()) << doc.dump();
        }
        const kev::Tokenizer tok = kev::Tokenizer::from_hf_files(path.toStdString(), "");
        QCOMPARE(tok.vocab_size(), 256);
        const kev::Model& m = *models_[1];
        QVERIFY(m.config().vocab_size > 256);
        kev::Generator g(m, &tok, std::nullopt);
        std::mt19937 rng(11);
        std::vector<kev::TokenCard> cards;
        for (int c = 0; c < 4; ++c) {
            kev::SamplingSettings s;
            s.temperature = 2.0f;
            s.seed = 100 + c;
            s.max_new_tokens = 40;
            cards.push_back({randomPrompt(rng, 256, 2, 12), s});
        }
        kev::RunOptions options;
        options.ignore_end_of_sequence = true;
        options.logprobs = 3;
        const auto result = g.run(g.prepare_tokens(cards, {}), options);
        for (const auto& card : result.cards) {
            QCOMPARE(card.tokens.size(), std::size_t{40});
            for (kev::TokenId t : card.tokens) QVERIFY2(t < 256, qPrintable(QString("sampled id %1").arg(t)));
            // Nor offered as alternatives; every token and alternative has its text.
            QCOMPARE(card.details.size(), card.tokens.size());
            for (const kev::TokenDetail& d : card.details) {
                QCOMPARE(d.piece, kev::token_display_text(tok.token_bytes(d.id)));
                QCOMPARE(d.top.size(), std::size_t{3});
                for (const kev::TokenAlternative& a : d.top) {
                    QVERIFY2(a.id < 256, qPrintable(QString("alternative id %1").arg(a.id)));
                    QCOMPARE(a.piece, kev::token_display_text(tok.token_bytes(a.id)));
                }
            }
        }
    }

    // RunOptions::logprobs > 0: one TokenDetail per kept token, its numbers those of the
    // raw logits row (not of the penalised, tempered one the sampler drew from).
    void tokenDetailsDescribeEveryToken() {
        const kev::Model& m = *models_[0];
        std::mt19937 rng(3);
        const int vocab = static_cast<int>(m.config().vocab_size);
        std::vector<kev::TokenCard> cards;
        for (int c = 0; c < 3; ++c) {
            kev::SamplingSettings s = greedy(12);
            if (c > 0) {
                s.temperature = 0.5f * static_cast<float>(c);
                s.repetition_penalty = 1.3f;
                s.seed = 7 + c;
            }
            cards.push_back({randomPrompt(rng, vocab, 2, 20), s});
        }
        kev::RunOptions options;
        options.logprobs = 4;
        const auto result = runCards(m, cards, {}, options);
        for (std::size_t c = 0; c < cards.size(); ++c) {
            const kev::CardResult& r = result.cards[c];
            QCOMPARE(r.details.size(), r.tokens.size());
            for (std::size_t t = 0; t < r.tokens.size(); ++t) {
                const kev::TokenDetail& d = r.details[t];
                QCOMPARE(d.id, r.tokens[t]);
                QVERIFY(d.piece.empty());  // no tokenizer
                const std::vector<float>& row = r.logits[t];
                double z = 0.0;
                const float top = *std::max_element(row.begin(), row.end());
                for (const float l : row) z += std::exp(static_cast<double>(l) - top);
                const double logZ = top + std::log(z);
                double h = 0.0;
                for (const float l : row) h -= std::exp(l - logZ) * (l - logZ);
                const QString where = QString("card %1 token %2").arg(c).arg(t);
                QVERIFY2(std::abs(d.logprob - (row[static_cast<std::size_t>(d.id)] - logZ)) < 1e-4, qPrintable(where));
                QVERIFY2(std::abs(d.entropy - h) < 1e-3, qPrintable(where));
                QCOMPARE(d.top.size(), std::size_t{4});
                for (std::size_t k = 0; k < d.top.size(); ++k) {
                    QCOMPARE(d.top[k].id, r.logprobs[t][k].first);
                    QCOMPARE(d.top[k].logprob, r.logprobs[t][k].second);
                }
                if (c == 0) {  // greedy: the most likely token, by the raw logits
                    QCOMPARE(d.top[0].id, d.id);
                    QVERIFY2(std::abs(d.top[0].logprob - d.logprob) < 1e-5, qPrintable(where));
                }
            }
        }
        QVERIFY(runCards(m, cards, {}).cards[0].details.empty());
    }

    void builtinModelAnswersEightQuestionsPackedAsAlone() {
        kev::SessionOptions options;
        const auto session = kev::Session::open(kevtest::builtinModel().toStdString(), options);
        QVERIFY(session->chat().has_value());
        const QStringList questions{
            "What is the capital of France?", "Name three primary colors.",
            "Write a haiku about the sea.", "What is 12 times 12?",
            "Explain photosynthesis in one sentence.", "Who wrote Romeo and Juliet?",
            "Give me a synonym for happy.", "What is the boiling point of water in Celsius?"};
        kev::GenerationRequest request;
        for (const QString& q : questions) request.cards.push_back({q.toStdString(), greedy(40)});
        const kev::Generator g = session->generator();
        const auto packed = g.run(g.prepare(request));
        for (int q = 0; q < questions.size(); ++q) {
            kev::GenerationRequest one;
            one.cards.push_back(request.cards[static_cast<std::size_t>(q)]);
            const auto alone = g.run(g.prepare(one));
            QVERIFY2(!alone.cards[0].text.empty(), qPrintable(questions[q]));
            QCOMPARE(QString::fromStdString(packed.cards[static_cast<std::size_t>(q)].text),
                     QString::fromStdString(alone.cards[0].text));
            QCOMPARE(packed.cards[static_cast<std::size_t>(q)].tokens, alone.cards[0].tokens);
        }
        QVERIFY(QString::fromStdString(packed.cards[0].text).contains("Paris"));
    }

    // kev::LocalEngine, the local side of the interface kev-cli and the app answer
    // through: the same tokens as the generator it wraps, its pack shown once before the
    // first forward, the request's logprobs honoured, every streamed piece in the result.
    // A card typed while the board runs joins the running pack: the engine formats it as
    // the run's cards (system message, shared context), and it answers as it would alone;
    // a blank one is refused by name, the others go on; one pushed after the run stays
    // queued for the next.
    void aCardTypedDuringARunJoinsIt() {
        const auto session = kev::Session::open(kevtest::builtinModel().toStdString(), kev::SessionOptions{});
        kev::GenerationRequest request;
        request.shared_context = "Answer in one short sentence.";
        request.cards.push_back({"Name a fruit.", greedy(12)});
        request.cards.push_back({"Name a tree.", greedy(12)});
        kev::LocalEngine engine(*session);
        kev::JoinQueue queue;
        std::map<std::uint64_t, kev::JoinedCard> joined;
        kev::RunOptions options;
        options.joins = &queue;
        options.on_step = [&](const kev::StepEvent& ev) {
            for (const auto& j : ev.joined) joined[j.tag] = j;
            if (ev.step == 1) queue.push_request(7, {"Name a river.", greedy(6)});
            if (ev.step == 2) queue.push_request(8, {"   ", greedy(3)});
        };
        const auto result = engine.answer(request, options);
        QCOMPARE(result.cards.size(), std::size_t{3});
        QCOMPARE(joined[7].card, 2);
        QCOMPARE(joined[8].card, -1);
        QVERIFY2(QString::fromStdString(joined[8].error).contains("the question is empty"), joined[8].error.c_str());
        kev::GenerationRequest alone = request;
        alone.cards = {{"Name a river.", greedy(6)}};
        const kev::Generator g = session->generator();
        const auto expected = g.run(g.prepare(alone));
        QCOMPARE(result.cards[2].tokens, expected.cards[0].tokens);
        QCOMPARE(result.cards[2].text, expected.cards[0].text);
        // It read the run's shared context: its own prompt is the question's turn only.
        QVERIFY(result.cards[2].stats.prompt_tokens < static_cast<std::int64_t>(g.prepare(alone).plan.rows()));
        QVERIFY(queue.pending_requests().empty());
        queue.push_request(9, {"Too late.", greedy(3)});
        QCOMPARE(queue.pending_requests(), std::vector<std::uint64_t>{9});
        QVERIFY(queue.take().empty());  // no run prepares it now
    }

    void theLocalEngineIsThePackedGenerator() {
        const auto session = kev::Session::open(kevtest::builtinModel().toStdString(), kev::SessionOptions{});
        kev::GenerationRequest request;
        request.cards.push_back({"Name a fruit.", greedy(10)});
        kev::SamplingSettings warm = greedy(10);
        warm.temperature = 0.9f;
        warm.seed = 5;
        request.cards.push_back({"Name a tree.", warm});
        request.cards.push_back({"Count to three.", greedy(6)});
        request.logprobs = 3;
        kev::LocalEngine engine(*session);
        QVERIFY(engine.gives_token_ids());
        QCOMPARE(QString::fromStdString(engine.describe()), QFileInfo(kevtest::builtinModel()).fileName());
        int prepared = 0;
        std::vector<std::string> streamed(3);
        kev::RunOptions options;
        options.on_step = [&](const kev::StepEvent& ev) {
            QCOMPARE(prepared, 1);  // the pack is shown before the first step
            for (const auto& u : ev.updates) streamed[static_cast<std::size_t>(u.card)] += u.text;
        };
        const auto result = engine.answer(request, options, [&](const kev::PreparedPack& pack) {
            ++prepared;
            QCOMPARE(pack.prompts.size(), std::size_t{3});
        });
        QCOMPARE(prepared, 1);
        const kev::Generator g = session->generator();
        kev::RunOptions direct;
        direct.logprobs = 3;
        const auto expected = g.run(g.prepare(request), direct);
        for (std::size_t c = 0; c < 3; ++c) {
            QCOMPARE(result.cards[c].tokens, expected.cards[c].tokens);
            QCOMPARE(result.cards[c].text, streamed[c]);
            QCOMPARE(result.cards[c].details.size(), result.cards[c].tokens.size());
            QCOMPARE(kev::first_difference(engine, result.cards[c], expected.cards[c]), std::int64_t{-1});
        }
        QCOMPARE(result.cards[1].seed, std::uint64_t{5});
        // Where two answers part: the first differing token, or the shorter length.
        kev::CardResult other = result.cards[0];
        QVERIFY(other.tokens.size() >= 3);
        other.tokens[2] += 1;
        QCOMPARE(kev::first_difference(engine, result.cards[0], other), std::int64_t{2});
        other = result.cards[0];
        other.tokens.pop_back();
        QCOMPARE(kev::first_difference(engine, result.cards[0], other), static_cast<std::int64_t>(other.tokens.size()));
    }

    // A cache that keeps windowed layers in rings (kv_cache.h), at the forward: a prompt
    // read in chunks into a ring of 30 slots gives the bits of the whole cache at every row
    // (the window is 24 on every layer of tiny-mistral); the ring holds the last 30 slots;
    // batches that would lose what they read are refused, the cache unchanged.
    void windowRingsAtTheForward() {
        const auto m = loadTiny("tiny-mistral");
        QVERIFY(m);
        const std::int64_t W = m->config().sliding_window;
        QCOMPARE(W, std::int64_t(24));
        std::mt19937 rng(31);
        const auto tokens = randomPrompt(rng, 512, 90, 90);
        auto batch = [&](std::int64_t base, std::int64_t start, std::int64_t n) {
            kev::ForwardBatch b;
            for (std::int64_t i = start; i < start + n; ++i) {
                b.tokens.push_back(tokens[static_cast<std::size_t>(i)]);
                b.positions.push_back(i);
                b.slots.push_back(base + i);
                b.reads.push_back({0, base, base + i + 1});
                b.output_rows.push_back(i - start);
            }
            b.kv_len = base + start + n;
            return b;
        };
        // The attention row kernel's scalar twin and its AVX2 form (what avx512 runs too).
        for (kev::Isa isa : {kev::Isa::Scalar, kev::Isa::Avx2}) {
            if (!kev::isa_supported(isa)) {
                qWarning("NOT RUN: the %s attention rows (this CPU lacks them)", kev::to_string(isa));
                continue;
            }
            kev::set_isa_limit(isa);
            kev::KvCache whole = m->make_cache(100), ringed = m->make_cache(100);
            ringed.keep_windows(W + 6);  // chunks of up to 7 rows
            ringed.map_region(10, 100);
            QCOMPARE(ringed.ring_of(50)->size, W + 6);
            QCOMPARE(ringed.bytes() * 100, whole.bytes() * (W + 6));  // every layer is windowed
            std::vector<at::Tensor> a, b;
            for (std::int64_t start = 0, n = 1; start < 90; start += n, n = n % 7 + 1) {
                n = std::min<std::int64_t>(n, 90 - start);
                a.push_back(m->forward(batch(10, start, n), whole));
                b.push_back(m->forward(batch(10, start, n), ringed));
            }
            QVERIFY2(at::equal(at::cat(a, 0), at::cat(b, 0)),
                     qPrintable(QString("%1: rings do not give the whole cache's bits").arg(kev::to_string(isa))));
            QVERIFY(ringed.holds(10 + 89) && ringed.holds(10 + 90 - W - 6) && !ringed.holds(10 + 89 - W - 6));
            QVERIFY(!ringed.holds(5));  // no region there
        }
        kev::set_isa_limit(kev::cpu_isa());

        // Refused: out of order, more rows than the ring leaves the window, an unmapped
        // slot, a dense mask; moving or clearing slots.
        kev::KvCache c = m->make_cache(100);
        c.keep_windows(W + 2);
        c.map_region(0, 100);
        QVERIFY_THROWS_EXCEPTION(kev::Error, m->forward(batch(0, 1, 2), c));  // offset 0 comes first
        QVERIFY_THROWS_EXCEPTION(kev::Error, m->forward(batch(0, 0, 4), c));  // 4 rows > 24 + 2 - 24 + 1
        m->forward(batch(0, 0, 3), c);
        QCOMPARE(c.ring_of(0)->last, std::int64_t(2));
        kev::ForwardBatch outside = batch(0, 3, 1);
        outside.slots = {99};
        outside.reads = {{0, 99, 100}};
        outside.kv_len = 100;
        c.unmap_region(0, 100);
        QVERIFY_THROWS_EXCEPTION(kev::Error, m->forward(outside, c));
        QVERIFY_THROWS_EXCEPTION(kev::Error, m->forward(kev::single_sequence_batch({5, 6}, 0, false), c));
        QVERIFY_THROWS_EXCEPTION(kev::Error, c.copy_slots(0, 50, 3));
        QVERIFY_THROWS_EXCEPTION(kev::Error, c.clear_slots(0, 3));
        QVERIFY_THROWS_EXCEPTION(kev::Error, c.keep_windows(10));  // once, on a fresh cache
        QVERIFY_THROWS_EXCEPTION(kev::Error, models_[0]->make_cache(10).keep_windows(10));  // no windowed layers
    }

    // Runs whose windowed layers keep rings give every card the bits of the whole cache:
    // a shared context and prompts longer than the rings (chunks of 3 rows: rings of 18 or
    // 26 slots), answers that wrap them, cards joining and one cancelled, freed rings
    // poisoned; then the prefix cache, fed block by block while the rings still held the
    // blocks, serves a second run everything it served without rings. The cache is smaller.
    void windowRingsGiveTheBitsOfTheWholeCache_data() {
        QTest::addColumn<QString>("preset");
        QTest::addColumn<QString>("precision");
        QTest::addRow("tiny-mistral fp32") << "tiny-mistral" << "fp32";   // every layer windowed (24)
        QTest::addRow("tiny-gemma2 fp32") << "tiny-gemma2" << "fp32";     // every other layer (16), soft-caps
        QTest::addRow("tiny-gemma3 bf16") << "tiny-gemma3" << "bf16";     // 5 of 6 local layers (16)
        QTest::addRow("tiny-mistral 4bit") << "tiny-mistral" << "4bit";
    }

    void windowRingsGiveTheBitsOfTheWholeCache() {
        QFETCH(QString, preset);
        QFETCH(QString, precision);
        const auto m = loadTinyAs(preset, precision);
        QVERIFY(m);
        const int vocab = static_cast<int>(m->config().vocab_size);
        std::mt19937 rng(static_cast<unsigned>(qHash(preset + precision) % 1000 + 3));
        auto uniform = [&rng](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
        const auto context = randomPrompt(rng, vocab, 45, 45);
        std::vector<kev::TokenCard> cards;  // 4 from the start, 3 joining
        for (int c = 0; c < 7; ++c) {
            kev::SamplingSettings st = greedy(uniform(20, 30));
            if (c % 2) st.temperature = 0.8f, st.seed = 300 + static_cast<std::uint64_t>(c);
            cards.push_back({randomPrompt(rng, vocab, c == 0 ? 2 : 10, 60), st});
        }
        cards[2].sampling.max_new_tokens = 60;  // still answering when it is cancelled
        const std::vector<kev::TokenCard> first(cards.begin(), cards.begin() + 4);
        kev::PrefixCache prefix(256ll << 20);
        auto live = [&](bool rings, kev::PrefixCache* cache) {
            kev::JoinQueue queue;
            kev::CancelFlags cancel(16);
            kev::RunOptions o;
            o.keep_windows = rings;
            o.window_chunk = 3;
            o.joins = &queue;
            o.cancel = &cancel;
            o.poison_freed = true;
            o.prefix_cache = cache;
            o.on_step = [&](const kev::StepEvent& ev) {
                for (int j = 0; j < 3; ++j) {
                    if (ev.step != 2 + 7 * j) continue;
                    kev::JoiningCard jc;
                    jc.tag = static_cast<std::uint64_t>(j);
                    jc.prompt = context;
                    const auto& own = cards[static_cast<std::size_t>(4 + j)].prompt;
                    jc.prompt.insert(jc.prompt.end(), own.begin(), own.end());
                    jc.sampling = cards[static_cast<std::size_t>(4 + j)].sampling;
                    queue.push(jc);
                }
                if (ev.step == 30) cancel.cancel(2);
            };
            return runCards(*m, first, context, o);
        };
        const auto whole = runCards(*m, cards, context, [] { kev::RunOptions o; o.keep_windows = false; return o; }());
        for (const bool withPrefix : {false, true}) {
            for (int pass = 0; pass < (withPrefix ? 2 : 1); ++pass) {
                const auto r = live(true, withPrefix ? &prefix : nullptr);
                QCOMPARE(r.cards.size(), cards.size());
                for (std::size_t c = 0; c < cards.size(); ++c) {
                    const auto& got = r.cards[c];
                    const auto& want = whole.cards[c];
                    const QString who = QString("card %1 (prefix cache %2, pass %3)").arg(c).arg(withPrefix).arg(pass);
                    QVERIFY2(got.finish != kev::FinishReason::NonFinite, qPrintable(who + " read a freed ring"));
                    QVERIFY2(got.tokens.size() <= want.tokens.size() &&
                                 std::equal(got.tokens.begin(), got.tokens.end(), want.tokens.begin()) &&
                                 std::equal(got.logits.begin(), got.logits.end(), want.logits.begin()),
                             qPrintable(who + ": not the bits of the whole cache"));
                    if (c != 2) QCOMPARE(got.tokens.size(), want.tokens.size());
                    // The second pass finds every whole block of the context and the prompt
                    // before its last token: stored while the rings held them.
                    if (pass == 1 && c != 2) {
                        const auto total = static_cast<std::int64_t>(context.size() + cards[c].prompt.size());
                        const std::int64_t B = kev::PrefixCache::kBlockTokens;
                        QCOMPARE(got.stats.reused_tokens,
                                 std::max<std::int64_t>(0, (total - 1) / B * B - static_cast<std::int64_t>(context.size())));
                    }
                }
                QCOMPARE(r.cards[2].finish, kev::FinishReason::Cancelled);
                if (pass == 0 && !withPrefix) {
                    const auto full = live(false, nullptr);
                    qInfo("KV cache: %lld bytes kept with rings, %lld without (peak in use %lld and %lld)",
                          static_cast<long long>(r.cache_bytes), static_cast<long long>(full.cache_bytes),
                          static_cast<long long>(r.cache_peak_bytes), static_cast<long long>(full.cache_peak_bytes));
                    QVERIFY(r.cache_bytes < full.cache_bytes);
                    QVERIFY(r.cache_peak_bytes < full.cache_peak_bytes);
                }
            }
        }
    }

private:
    std::vector<std::unique_ptr<kev::Model>> models_;
};

QTEST_GUILESS_MAIN(TestGenerate)
#include "tst_generate.moc"
