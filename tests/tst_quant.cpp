// 4-bit weights (kev/quant.h): NF4 round trip, GGUF Q4_0/Q4_1/Q4_K/Q8_0 blocks kept exactly,
// the fused kernel's paths against dequantize-then-multiply, the 4-bit forward against
// fp32, and the isolation invariant in 4-bit.
#include <QtTest>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <set>
#include <tuple>

#include <ATen/ATen.h>
#include <c10/util/Half.h>

#include "kev/engine_info.h"
#include "kev/error.h"
#include "kev/generator.h"
#include "kev/gguf.h"
#include "kev/model.h"
#include "kev/quant.h"
#include "kev_test_env.h"

namespace {

std::unique_ptr<kev::Model> loadModel(const std::string& path, kev::DType dtype, kev::WeightQuant quant) {
    kev::LoadOptions options;
    options.dtype = dtype;
    options.quant = quant;
    return kev::Model::load(path, options);
}

QString tinyDir(const QString& preset) {
    const QString dir = kevtest::workDir("quant-" + preset);
    if (!QFile::exists(dir + "/config.json")) kevtest::runReference("make_random_model.py", {"--preset", preset, "--out", dir});
    return dir;
}

// Random ggml Q4_0 / Q4_1 blocks: rows * cols / 32 blocks of [d][m][16 bytes].
std::vector<std::uint8_t> randomGgmlBlocks(kev::QuantFormat f, std::int64_t rows, std::int64_t cols, std::mt19937& rng) {
    const int head = f == kev::QuantFormat::Q4_1 ? 4 : 2;
    std::vector<std::uint8_t> bytes(static_cast<std::size_t>(rows * cols / 32 * (head + 16)));
    std::uniform_real_distribution<float> scale(-0.05f, 0.05f);
    std::uniform_int_distribution<int> byte(0, 255);
    for (std::size_t b = 0; b < bytes.size(); b += head + 16) {
        for (int h = 0; h < head; h += 2) {
            const std::uint16_t v = c10::Half(scale(rng)).x;
            bytes[b + h] = static_cast<std::uint8_t>(v & 0xff);
            bytes[b + h + 1] = static_cast<std::uint8_t>(v >> 8);
        }
        for (int j = 0; j < 16; ++j) bytes[b + head + j] = static_cast<std::uint8_t>(byte(rng));
    }
    return bytes;
}

// A Qwen2-shaped random model 256 wide (Q4_K wants rows of 256), as a GGUF of `type`
// (Q4_K or Q8_0) blocks written the way llama.cpp lays them out (make_random_gguf.py).
QString keptModelFile(const QString& type = "Q4_K") {
    const QString dir = kevtest::workDir("quant-q4k-model");
    const QString gguf = dir + "/model-" + type.toLower() + ".gguf";
    if (!QFile::exists(gguf)) {
        if (!QFile::exists(dir + "/hf/config.json"))
            kevtest::runReference("make_random_model.py", {"--preset", "tiny-qwen2", "--out", dir + "/hf", "--set",
                                                           "hidden_size=256", "--set", "intermediate_size=512"});
        kevtest::runReference("make_random_gguf.py", {"--model", dir + "/hf", "--out", gguf, "--type", type});
    }
    return gguf;
}

// Random Q4_K or Q8_0 blocks written and decoded by the gguf package (kquant_blocks.py):
// the file's bytes of tensor "w" [rows, cols] and the package's float32 decoding.
struct KBlocks {
    std::vector<std::uint8_t> bytes;
    at::Tensor reference;  // [rows, cols]
};
KBlocks ggufBlocks(const QString& type, std::int64_t rows, std::int64_t cols, unsigned seed) {
    const QString path = kevtest::workDir("quant-q4k") +
                         QString("/%1-%2x%3-%4.gguf").arg(type.toLower()).arg(rows).arg(cols).arg(seed);
    if (!QFile::exists(path + ".f32"))
        kevtest::runReference("kquant_blocks.py", {"--out", path, "--type", type, "--rows", QString::number(rows),
                                                   "--cols", QString::number(cols), "--seed", QString::number(seed)});
    const auto g = kev::GgufFile::open(path.toStdString());
    const kev::GgufTensorInfo* info = g->find_tensor("w");
    KBlocks k;
    if (!info) return k;
    k.bytes.assign(g->tensor_data(*info), g->tensor_data(*info) + info->nbytes);
    QFile f(path + ".f32");
    if (!f.open(QIODevice::ReadOnly)) return k;
    const QByteArray ref = f.readAll();
    if (ref.size() != rows * cols * 4) return k;
    k.reference = at::from_blob(const_cast<char*>(ref.constData()), {rows, cols}, at::kFloat).clone();
    return k;
}

// What every kept ggml format shows: k's bytes read as format f decode to the gguf
// package's values, and so does Kev's own GGUF decoder (type t); rows read in reverse
// order, stacked and narrowed keep them; a short buffer, rows that are not whole blocks
// and a row order of the wrong length are refused. Returns q.
kev::QuantMatrix expectKeptDecoding(kev::QuantFormat f, kev::GgmlType t, const KBlocks& k, std::int64_t rows,
                                    std::int64_t cols) {
    const kev::QuantMatrix q = kev::quant_from_ggml(f, k.bytes.data(), k.bytes.size(), rows, cols);
    [&] {
        QCOMPARE(q.format, f);
        QVERIFY(at::equal(kev::dequantize(q, at::kFloat), k.reference));
        at::Tensor own = at::empty({rows, cols});
        kev::ggml_dequantize(t, k.bytes.data(), own.data_ptr<float>(), rows * cols);
        QVERIFY(at::equal(own, k.reference));
        std::vector<std::int64_t> reverse;
        for (std::int64_t r = rows - 1; r >= 0; --r) reverse.push_back(r);
        const kev::QuantMatrix p = kev::quant_from_ggml(f, k.bytes.data(), k.bytes.size(), rows, cols, reverse);
        QVERIFY(at::equal(kev::dequantize(p, at::kFloat), k.reference.flip(0)));
        QVERIFY(at::equal(kev::dequantize(kev::concat_rows({q, p}), at::kFloat), at::cat({k.reference, k.reference.flip(0)})));
        QVERIFY(at::equal(kev::dequantize(q, 2, 5, at::kFloat), k.reference.narrow(0, 2, 3)));
        QVERIFY_THROWS_EXCEPTION(kev::Error, kev::quant_from_ggml(f, k.bytes.data(), k.bytes.size() - 1, rows, cols));
        QVERIFY_THROWS_EXCEPTION(kev::Error, kev::quant_from_ggml(f, k.bytes.data(), k.bytes.size(), rows, cols + 16));
        QVERIFY_THROWS_EXCEPTION(kev::Error, kev::quant_from_ggml(f, k.bytes.data(), k.bytes.size(), rows, cols, {0, 1}));
    }();
    return q;
}

// g (rows in groups of 16) in the int8 kernel's layout holds the same values, turns back
// byte for byte, and is what prepare_quant makes for half activations where the kernel runs.
void expectInt8LayoutRoundTrip(const kev::QuantMatrix& g) {
    const kev::QuantMatrix gi = kev::interleave_rows16(g);
    QVERIFY(gi.interleaved);
    QCOMPARE(gi.bytes(), g.bytes());
    QVERIFY(at::equal(kev::dequantize(gi, at::kFloat), kev::dequantize(g, at::kFloat)));
    QVERIFY(at::equal(kev::dequantize(gi, 19, 70, at::kFloat), kev::dequantize(g, 19, 70, at::kFloat)));
    const kev::QuantMatrix back = kev::row_layout(gi);
    QVERIFY(back.codes == g.codes && back.scales == g.scales && back.mins == g.mins);
    QVERIFY(back.sub_scales == g.sub_scales && back.sub_mins == g.sub_mins);
    QCOMPARE(kev::prepare_quant(g, at::kBFloat16).interleaved, kev::quant_int8_available());
}

kev::QuantMatrix randomMatrix(kev::QuantFormat f, std::int64_t rows, std::int64_t cols, std::mt19937& rng) {
    if (f == kev::QuantFormat::Q4_K || f == kev::QuantFormat::Q8_0 || f == kev::QuantFormat::Q6_K ||
        f == kev::QuantFormat::Q5_K) {
        const KBlocks k = ggufBlocks(QString(kev::to_string(f)).toUpper(), rows, cols, rng() % 1000);
        return kev::quant_from_ggml(f, k.bytes.data(), k.bytes.size(), rows, cols);
    }
    if (f == kev::QuantFormat::NF4) {
        at::manual_seed(rng());
        return kev::quantize_nf4(at::randn({rows, cols}) * 0.05);
    }
    const auto bytes = randomGgmlBlocks(f, rows, cols, rng);
    return kev::quant_from_ggml(f, bytes.data(), bytes.size(), rows, cols);
}

// A copy of `w` with every 4-bit linear layer replaced by its dequantized fp32 weight.
kev::ModelWeights dequantizedCopy(const kev::ModelWeights& w) {
    kev::ModelWeights d = w;
    auto dense = [](kev::Linear& l) {
        if (!l.quant) return;
        l.weight = kev::dequantize(*l.quant, at::kFloat);
        l.quant.reset();
    };
    dense(d.lm_head);
    for (auto& l : d.layers)
        for (kev::Linear* lin : {&l.qkv, &l.o, &l.gate_up, &l.down}) dense(*lin);
    return d;
}

at::Tensor promptLogits(const kev::Model& m, const std::vector<std::int64_t>& tokens) {
    kev::KvCache cache = m.make_cache(static_cast<std::int64_t>(tokens.size()));
    at::Tensor all;
    // Prefill the first half in one forward (the chunked path), then decode token by
    // token (the fused kernel), so both 4-bit paths are covered.
    const std::int64_t half = static_cast<std::int64_t>(tokens.size()) / 2;
    std::vector<at::Tensor> rows{
        m.forward(kev::single_sequence_batch({tokens.begin(), tokens.begin() + half}, 0, false), cache)};
    for (std::int64_t i = half; i < static_cast<std::int64_t>(tokens.size()); ++i)
        rows.push_back(m.forward(kev::single_sequence_batch({tokens[i]}, i, false), cache));
    return at::cat(rows, 0);  // [T, V]
}

}  // namespace

class TestQuant : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void nf4CodebookValuesComeBackExactly() {
        // Blocks made of codebook values times a scale that fp16 holds exactly, each with
        // a +-1 entry so the absmax is the scale: every element decodes to itself.
        std::mt19937 rng(1);
        std::uniform_int_distribution<int> code(0, 15);
        const float scales[] = {0.5f, 0.125f, 3.0f, 0.0078125f};
        at::Tensor w = at::empty({4, 256});
        for (int r = 0; r < 4; ++r)
            for (int j = 0; j < 256; ++j)
                w[r][j] = kev::kNf4Codebook[j % 64 == 7 ? 0 : code(rng)] * scales[r];
        const kev::QuantMatrix q = kev::quantize_nf4(w);
        QCOMPARE(q.block, std::int64_t{64});
        QCOMPARE(q.bytes(), std::int64_t{4 * 256 / 2 + 4 * 4 * 2});
        QVERIFY(at::equal(kev::dequantize(q, at::kFloat), w));
        QVERIFY(at::equal(kev::dequantize(q, at::kFloat).narrow(0, 1, 2), kev::dequantize(q, 1, 3, at::kFloat)));
    }

    void nf4ErrorWithinTheScaleBound() {
        // |x - decoded| <= d * (largest half gap of the codebook) + |absmax - d|, where
        // d is the block's absmax rounded to fp16 (the value may then exceed d).
        float halfGap = 0.0f;
        for (int i = 1; i < 16; ++i) halfGap = std::max(halfGap, 0.5f * (kev::kNf4Codebook[i] - kev::kNf4Codebook[i - 1]));
        at::manual_seed(3);
        const at::Tensor w = at::randn({64, 352}) * at::rand({64, 1}) * 4;  // varied row scales; 352 = 11 x 32
        const kev::QuantMatrix q = kev::quantize_nf4(w);
        QCOMPARE(q.block, std::int64_t{32});
        const at::Tensor err = (kev::dequantize(q, at::kFloat) - w).abs().view({64, 11, 32}).amax(-1);  // [64, 11]
        const at::Tensor absmax = w.abs().view({64, 11, 32}).amax(-1);
        const at::Tensor d = absmax.to(at::kHalf).to(at::kFloat);
        const at::Tensor bound = d * halfGap + (absmax - d).abs() + 1e-6;
        QVERIFY2(at::all(err <= bound).item<bool>(), qPrintable(QString("worst excess %1").arg((err - bound).max().item<float>())));
        // And the error is a real 4-bit error, not zero: the codebook is used.
        QVERIFY(err.max().item<float>() > 0.0f);
    }

    void ggmlBlocksKeptEqualGgmlDequantization() {
        std::mt19937 rng(5);
        for (auto f : {kev::QuantFormat::Q4_0, kev::QuantFormat::Q4_1}) {
            const std::int64_t rows = 7, cols = 96;
            const auto bytes = randomGgmlBlocks(f, rows, cols, rng);
            const kev::QuantMatrix q = kev::quant_from_ggml(f, bytes.data(), bytes.size(), rows, cols);
            QCOMPARE(q.bytes(), static_cast<std::int64_t>(bytes.size()));  // nothing added to the file's blocks
            at::Tensor ref = at::empty({rows, cols});
            kev::ggml_dequantize(f == kev::QuantFormat::Q4_0 ? kev::GgmlType::Q4_0 : kev::GgmlType::Q4_1, bytes.data(),
                                 ref.data_ptr<float>(), rows * cols);
            QVERIFY(at::equal(kev::dequantize(q, at::kFloat), ref));
            // A row order moves whole rows; a short buffer is refused.
            const kev::QuantMatrix p = kev::quant_from_ggml(f, bytes.data(), bytes.size(), rows, cols, {6, 5, 4, 3, 2, 1, 0});
            QVERIFY(at::equal(kev::dequantize(p, at::kFloat), ref.flip(0)));
            QVERIFY_THROWS_EXCEPTION(kev::Error, kev::quant_from_ggml(f, bytes.data(), bytes.size() - 1, rows, cols));
        }
    }

    void builtinModelKeepsItsQ4_1Blocks() {
        // The built-in model's linear weights are Q4_1: kept, they decode to exactly the
        // fp32 weights the dense loader makes (llama q/k row permutation included).
        const std::string path = kevtest::builtinModel().toStdString();
        const auto kept = loadModel(path, kev::DType::F32, kev::WeightQuant::Q4);
        const auto dense = loadModel(path, kev::DType::F32, kev::WeightQuant::None);
        const kev::WeightMemory mem = kept->weights().memory();
        QVERIFY(mem.q4_1 > 0);
        // The tied head keeps the file's Q8_0 embedding blocks (nothing re-quantized to
        // NF4), and decodes to exactly the embedding the dense loader makes.
        QCOMPARE(mem.nf4, std::int64_t{0});
        QCOMPARE(kept->weights().lm_head.quant->format, kev::QuantFormat::Q8_0);
        QCOMPARE(mem.q8_0, kept->weights().lm_head.quant->bytes());
        QCOMPARE(mem.q8_0 * 32, kept->config().vocab_size * kept->config().hidden_size * 34);
        QVERIFY(at::equal(kev::dequantize(*kept->weights().lm_head.quant, at::kFloat), dense->weights().embed));
        // The lookup decodes its rows from those same blocks: no dense copy is held.
        QVERIFY(!kept->weights().embed.defined());
        QVERIFY(kept->weights().embed_quant == kept->weights().lm_head.quant);
        QCOMPARE(kev::kept_embedding_bytes(path), kept->weights().embed_quant->bytes());  // from the header
        QCOMPARE(mem.dense, kept->config().hidden_size * 4 * (2 * kept->config().num_layers + 1));  // the norms
        QCOMPARE(mem.dense_linear, std::int64_t{0});
        QCOMPARE(kept->weights().bytes(), mem.total());
        for (int l : {0, 29}) {
            const auto& k = kept->weights().layers[l];
            const auto& d = dense->weights().layers[l];
            QCOMPARE(k.qkv.quant->format, kev::QuantFormat::Q4_1);
            QVERIFY(at::equal(kev::dequantize(*k.qkv.quant, at::kFloat), d.qkv.weight));
            QVERIFY(at::equal(kev::dequantize(*k.gate_up.quant, at::kFloat), d.gate_up.weight));
            QVERIFY(at::equal(kev::dequantize(*k.down.quant, at::kFloat), d.down.weight));
        }
        // Forcing NF4 re-quantizes every linear layer.
        const auto nf4 = loadModel(path, kev::DType::BF16, kev::WeightQuant::NF4);
        QCOMPARE(nf4->weights().memory().q4_1, std::int64_t{0});
        QCOMPARE(nf4->weights().layers[3].o.quant->format, kev::QuantFormat::NF4);
        QVERIFY(nf4->weights().embed.defined());  // the embedding stays for the lookup
        QCOMPARE(nf4->weights().embed.scalar_type(), at::kBFloat16);
    }

    // Q4_0 and Q4_1 embeddings (keptModelKeepsItsBlocks covers the other kept formats):
    // the header's figure is the bytes of the blocks the tied head keeps and looks up.
    void keptEmbeddingBytesOfQ4Files_data() {
        QTest::addColumn<QString>("type");
        QTest::addColumn<int>("format");
        QTest::newRow("q4_0") << QString("Q4_0") << int(kev::QuantFormat::Q4_0);
        QTest::newRow("q4_1") << QString("Q4_1") << int(kev::QuantFormat::Q4_1);
    }

    void keptEmbeddingBytesOfQ4Files() {
        QFETCH(QString, type);
        QFETCH(int, format);
        const std::string path = keptModelFile(type).toStdString();
        const auto kept = loadModel(path, kev::DType::F32, kev::WeightQuant::Q4);
        QVERIFY(kept->weights().embed_quant);
        QVERIFY(!kept->weights().embed.defined());
        QCOMPARE(int(kept->weights().embed_quant->format), format);
        QCOMPARE(kev::kept_embedding_bytes(path), kept->weights().embed_quant->bytes());
    }

    // Where 4-bit keeps no blocks of the embedding (a dense GGUF, a model folder), the
    // header query says 0: the menu then counts a dense embedding and an NF4 head.
    void keptEmbeddingBytesIsZeroWhereNothingIsKept() {
        const QString f16 = keptModelFile("F16");
        QCOMPARE(kev::kept_embedding_bytes(f16.toStdString()), std::int64_t{0});
        const auto nf4 = loadModel(f16.toStdString(), kev::DType::F32, kev::WeightQuant::Q4);
        QVERIFY(nf4->weights().embed.defined());
        QVERIFY(!nf4->weights().embed_quant);
        QCOMPARE(nf4->weights().lm_head.quant->format, kev::QuantFormat::NF4);
        QCOMPARE(kev::kept_embedding_bytes(QFileInfo(f16).absolutePath().toStdString() + "/hf"), std::int64_t{0});
        try {
            kev::kept_embedding_bytes(f16.toStdString() + ".missing");
            QFAIL("no error for a missing file");
        } catch (const kev::Error& e) {
            QCOMPARE(int(e.code()), int(kev::ErrorCode::Io));
        }
    }

    // A tied embedding kept as the head's blocks is looked up row by row in them: every
    // row, in any order and repeated, is the dense loader's row (fp32 and bf16), a row
    // outside the vocabulary is refused by number, and the forward computes the same bits
    // as with the dense embedding in its place.
    void embeddingLookupDecodesTheHeadsBlocks() {
        const std::string path = kevtest::builtinModel().toStdString();
        for (const kev::DType dt : {kev::DType::F32, kev::DType::BF16}) {
            const auto kept = loadModel(path, dt, kev::WeightQuant::Q4);
            const auto dense = loadModel(path, dt, kev::WeightQuant::None);
            const kev::QuantMatrix& q = *kept->weights().embed_quant;
            const at::Tensor table = dense->weights().embed;  // [V, hidden] in dt
            const std::int64_t V = table.size(0);
            QCOMPARE(q.rows, V);
            const at::Tensor all = at::arange(V, at::kLong);
            QVERIFY(at::equal(kev::dequantize_rows(q, all, table.scalar_type()), table));
            const at::Tensor some = at::tensor(std::vector<std::int64_t>{5, 0, V - 1, 5, 17}, at::kLong);
            QVERIFY(at::equal(kev::dequantize_rows(q, some, table.scalar_type()), table.index_select(0, some)));
            QCOMPARE(kev::dequantize_rows(q, at::empty({0}, at::kLong), at::kFloat).size(0), std::int64_t{0});
            for (const std::int64_t bad : {V, std::int64_t{-1}}) {
                try {
                    kev::dequantize_rows(q, at::tensor(std::vector<std::int64_t>{3, bad}, at::kLong), at::kFloat);
                    QFAIL("a row outside the vocabulary was looked up");
                } catch (const kev::Error& e) {
                    QVERIFY2(QString(e.what()).contains(QString("row %1 outside the %2 rows").arg(bad).arg(V)), e.what());
                }
            }
            // The same model with the dense embedding in the lookup's place: the same bits.
            kev::ModelWeights w = kept->weights();
            w.embed = table;
            w.embed_quant = nullptr;
            const kev::Model with_table(kept->config(), w, kept->device(), kept->dtype());
            const std::vector<std::int64_t> tokens = {1, 504, 3458, 282, 4649, 47, 19, 49151, 2, 744};
            QVERIFY(at::equal(promptLogits(*kept, tokens), promptLogits(with_table, tokens)));
        }
    }

    // Q4_K kept in its two levels decodes to exactly what the gguf package decodes (and
    // Kev's own GGUF decoder), in 4.625 bits a weight (the file's 4.5, the 6-bit factors
    // unpacked to bytes).
    void q4kBlocksKeptEqualTheGgufPackage() {
        const std::int64_t rows = 7, cols = 768;
        const KBlocks k = ggufBlocks("Q4_K", rows, cols, 3);
        QVERIFY(k.reference.defined());
        QCOMPARE(k.bytes.size(), std::size_t(rows * cols / 256 * 144));
        const kev::QuantMatrix q = expectKeptDecoding(kev::QuantFormat::Q4_K, kev::GgmlType::Q4_K, k, rows, cols);
        QCOMPARE(q.bytes() * 8, rows * cols * 37 / 8);
        const kev::QuantMatrix p = kev::quant_from_ggml(kev::QuantFormat::Q4_K, k.bytes.data(), k.bytes.size(), rows, cols,
                                                        {6, 5, 4, 3, 2, 1, 0});
        // The int8 kernel's layout (16-row groups: two-level tables moved with the rows)
        // holds the same values and turns back byte for byte; no CUDA form.
        const kev::QuantMatrix g = kev::concat_rows({q, p, q, p, q, p, q, p, q, p, q, p, q, p, q, p});  // 112 rows
        QVERIFY_THROWS_EXCEPTION(kev::Error, kev::interleave_rows16(q));
        expectInt8LayoutRoundTrip(g);
        QVERIFY_THROWS_EXCEPTION(kev::Error, kev::quant_linear_fixed_order(at::randn({1, cols}), q, at::Tensor()));
    }

    // Q6_K kept as signed bytes q - 32 with its two levels of scales (fp16 d per 256, a
    // signed byte per 16) decodes to exactly what the gguf package decodes, every code and
    // scale pattern (random blocks), in 8.5625 bits a weight (the file's 6.5625, the codes
    // unpacked); the int8 kernel's layout holds the same values and turns back byte for byte.
    void q6kBlocksKeptEqualTheGgufPackage() {
        const std::int64_t rows = 7, cols = 768;
        const KBlocks k = ggufBlocks("Q6_K", rows, cols, 6);
        QVERIFY(k.reference.defined());
        QCOMPARE(k.bytes.size(), std::size_t(rows * cols / 256 * 210));
        const kev::QuantMatrix q = expectKeptDecoding(kev::QuantFormat::Q6_K, kev::GgmlType::Q6_K, k, rows, cols);
        QVERIFY(q.byte_codes());
        QCOMPARE(q.block, std::int64_t{16});
        QCOMPARE(q.bytes() * 128, rows * cols * 137);  // bytes a weight: 1 + 1/16 (sc) + 2/256 (d)
        // Every code -32..31 and scales of both signs occur.
        std::set<int> codes;
        for (std::uint8_t c : q.codes) codes.insert(static_cast<std::int8_t>(c));
        QCOMPARE(codes.size(), std::size_t{64});
        QCOMPARE(*codes.begin(), -32);
        bool negative = false, positive = false;
        for (std::uint8_t s : q.sub_scales) (static_cast<std::int8_t>(s) < 0 ? negative : positive) = true;
        QVERIFY(negative && positive);
        expectInt8LayoutRoundTrip(kev::concat_rows(std::vector<kev::QuantMatrix>(16, q)));  // 112 rows: 7 groups
        QVERIFY_THROWS_EXCEPTION(kev::Error, kev::quant_linear_fixed_order(at::randn({1, cols}), q, at::Tensor()));
    }

    // Q5_K kept as bytes 0..31 with Q4_K's two levels of scales and offsets decodes to
    // exactly what the gguf package decodes (the product q * d * sc exact, minus dmin * m
    // rounded once), every code and 6-bit pattern, in 8.625 bits a weight (the file's 5.5).
    // The int8 kernel's layout holds the same values and turns back byte for byte.
    void q5kBlocksKeptEqualTheGgufPackage() {
        const std::int64_t rows = 7, cols = 768;
        const KBlocks k = ggufBlocks("Q5_K", rows, cols, 8);
        QVERIFY(k.reference.defined());
        QCOMPARE(k.bytes.size(), std::size_t(rows * cols / 256 * 176));
        const kev::QuantMatrix q = expectKeptDecoding(kev::QuantFormat::Q5_K, kev::GgmlType::Q5_K, k, rows, cols);
        QVERIFY(q.byte_codes());
        QCOMPARE(q.block, std::int64_t{32});
        QCOMPARE(q.bytes() * 64, rows * cols * 69);  // bytes a weight: 1 + 2/32 (sc, m) + 4/256 (d, dmin)
        std::set<int> codes(q.codes.begin(), q.codes.end());
        QCOMPARE(codes.size(), std::size_t{32});
        QCOMPARE(*codes.rbegin(), 31);
        expectInt8LayoutRoundTrip(kev::concat_rows(std::vector<kev::QuantMatrix>(16, q)));  // 112 rows
    }

    // A GGUF of Q4_K or Q8_0 blocks in the 4-bit precision: every linear layer and the
    // tied head keep them (nothing re-quantized to NF4), they decode to exactly the weights
    // the fp32 load makes of the file, and the 4-bit forward with fp32 activations computes
    // the fp32 forward of those weights (float rounding only). auto keeps them too.
    void keptModelKeepsItsBlocks_data() {
        QTest::addColumn<QString>("type");
        QTest::newRow("q4_k") << QString("Q4_K");
        QTest::newRow("q8_0") << QString("Q8_0");
        QTest::newRow("q5_0 (as 8-bit codes)") << QString("Q5_0");
        QTest::newRow("q6_k") << QString("Q6_K");
        QTest::newRow("q4_k_m (q4_k and q6_k parts)") << QString("Q4_K_M");
        QTest::newRow("q5_k") << QString("Q5_K");
        QTest::newRow("q5_k_m (q5_k and q6_k parts)") << QString("Q5_K_M");
    }

    void keptModelKeepsItsBlocks() {
        QFETCH(QString, type);
        const bool mix = type.endsWith("_M");  // Q6_K embedding, v and down in even layers, Q4_K / Q5_K the rest
        const auto format = type.startsWith("Q4_K")   ? kev::QuantFormat::Q4_K
                            : type.startsWith("Q5_K") ? kev::QuantFormat::Q5_K
                            : type == "Q6_K"          ? kev::QuantFormat::Q6_K
                                                      : kev::QuantFormat::Q8_0;  // Q5_0: byte codes
        const std::string path = keptModelFile(type).toStdString();
        const auto kept = loadModel(path, kev::DType::F32, kev::WeightQuant::Q4);
        const auto dense = loadModel(path, kev::DType::F32, kev::WeightQuant::None);
        const kev::WeightMemory mem = kept->weights().memory();
        const std::int64_t held = mix                                ? mem.q4_k + mem.q5_k + mem.q6_k
                                  : format == kev::QuantFormat::Q4_K ? mem.q4_k
                                  : format == kev::QuantFormat::Q5_K ? mem.q5_k
                                  : format == kev::QuantFormat::Q6_K ? mem.q6_k
                                                                     : mem.q8_0;
        QVERIFY(held > 0);
        QCOMPARE(held, mem.quantized());
        if (mix) QVERIFY((format == kev::QuantFormat::Q4_K ? mem.q4_k : mem.q5_k) > 0 && mem.q6_k > 0);
        QCOMPARE(mem.dense_linear, std::int64_t{0});
        QCOMPARE(kept->weights().lm_head.quant->format, mix ? kev::QuantFormat::Q6_K : format);
        // The app's precision menu reads what the kept head will hold from the header alone.
        QVERIFY(kept->weights().embed_quant);
        QCOMPARE(kev::kept_embedding_bytes(path), kept->weights().embed_quant->bytes());
        // Every layer's matrices: the formats of their parts, in row order, decoding to
        // the fp32 load's weights.
        for (std::size_t i = 0; i < kept->weights().layers.size(); ++i) {
            const auto& k = kept->weights().layers[i];
            const auto& d = dense->weights().layers[i];
            const auto q6 = kev::QuantFormat::Q6_K;
            const bool even = i % 2 == 0;
            for (const auto& [a, b, formats] :
                 {std::tuple{&k.qkv, &d.qkv,
                             mix && even ? std::vector{format, q6} : std::vector{format}},  // q | k, then v
                  std::tuple{&k.o, &d.o, std::vector{format}},
                  std::tuple{&k.gate_up, &d.gate_up, std::vector{format}},
                  std::tuple{&k.down, &d.down, std::vector{mix && even ? q6 : format}}}) {
                std::vector<std::shared_ptr<const kev::QuantMatrix>> parts = a->quant_parts;
                if (a->quant) parts = {a->quant};
                QCOMPARE(int(parts.size()), int(formats.size()));
                std::vector<at::Tensor> decoded;
                for (std::size_t p = 0; p < parts.size(); ++p) {
                    QCOMPARE(parts[p]->format, formats[p]);
                    decoded.push_back(kev::dequantize(*parts[p], at::kFloat));
                }
                QVERIFY(at::equal(at::cat(decoded), b->weight));
            }
        }
        std::vector<std::int64_t> tokens;
        for (int i = 0; i < 21; ++i) tokens.push_back((i * 53 + 7) % 512);
        const at::Tensor got = promptLogits(*kept, tokens);
        const at::Tensor ref = promptLogits(*dense, tokens);
        const double diff = (got - ref).abs().max().item<double>(), scale = ref.abs().max().item<double>();
        qInfo("%s kept vs its fp32 decoding: max |logit diff| %.3g (logits up to %.3g); %.1f KiB of it",
              qPrintable(type), diff, scale, static_cast<double>(held) / 1024);
        QVERIFY2(diff <= 1e-4 * std::max(1.0, scale), qPrintable(QString::number(diff)));
        // auto picks 4-bit for such a file and says how it runs.
        const kev::PrecisionChoice automatic = kev::choose_auto_precision(path);
        QCOMPARE(automatic.name, std::string("4bit"));
        for (const char* kind : {"Q4_K", "Q5_K", "Q6_K", "Q8_0"})
            if (type.contains(kind) || (mix && std::string(kind) == "Q6_K"))
                QVERIFY2(automatic.why.find(kind) != std::string::npos, automatic.why.c_str());
        // Half activations: the int8 kernel where it runs (as llama.cpp multiplies Q4_K and
        // Q8_0 by int8 activations); Q6_K's 16-column blocks stay on the byte kernels.
        const auto half = loadModel(path, kev::DType::BF16, kev::WeightQuant::Q4);
        const bool int8 = kev::quant_int8_available();
        QCOMPARE(half->weights().layers[0].gate_up.quant->interleaved, int8);
        const kev::WeightMemory hm = half->weights().memory();
        QCOMPARE(hm.int8_kernel, int8 ? hm.quantized() : std::int64_t{0});
        // nf4 re-quantizes them.
        const kev::WeightMemory nf4 = loadModel(path, kev::DType::BF16, kev::WeightQuant::NF4)->weights().memory();
        QVERIFY(nf4.nf4 > 0);
        QCOMPARE(nf4.quantized(), nf4.nf4);
    }

    // Q5_0 taken over exactly as Q8_0-format byte codes: q5 - 16 as a signed byte, d as
    // it is; the values are the gguf package's decoding bit for bit, every code from -16
    // to 15 met, the row order applied, short data and ragged rows refused.
    void q5BlocksBecomeExactByteCodes() {
        const std::int64_t rows = 9, cols = 320;
        const KBlocks k = ggufBlocks("Q5_0", rows, cols, 5);
        QVERIFY(k.reference.defined());
        QCOMPARE(k.bytes.size(), std::size_t(rows * cols / 32 * 22));
        const kev::QuantMatrix q = kev::quant_from_ggml_q5_0(k.bytes.data(), k.bytes.size(), rows, cols);
        QCOMPARE(q.format, kev::QuantFormat::Q8_0);
        QVERIFY(q.byte_codes());
        QCOMPARE(q.bytes(), rows * cols / 32 * 34);
        QVERIFY(at::equal(kev::dequantize(q, at::kFloat), k.reference));
        at::Tensor own = at::empty({rows, cols});
        kev::ggml_dequantize(kev::GgmlType::Q5_0, k.bytes.data(), own.data_ptr<float>(), rows * cols);
        QVERIFY(at::equal(own, k.reference));
        int lowest = 127, highest = -128;
        for (const std::uint8_t c : q.codes) {
            lowest = std::min(lowest, int(static_cast<std::int8_t>(c)));
            highest = std::max(highest, int(static_cast<std::int8_t>(c)));
        }
        QCOMPARE(lowest, -16);
        QCOMPARE(highest, 15);
        const kev::QuantMatrix p = kev::quant_from_ggml_q5_0(k.bytes.data(), k.bytes.size(), rows, cols,
                                                             {8, 7, 6, 5, 4, 3, 2, 1, 0});
        QVERIFY(at::equal(kev::dequantize(p, at::kFloat), k.reference.flip(0)));
        QVERIFY_THROWS_EXCEPTION(kev::Error, kev::quant_from_ggml_q5_0(k.bytes.data(), k.bytes.size() - 1, rows, cols));
        QVERIFY_THROWS_EXCEPTION(kev::Error, kev::quant_from_ggml_q5_0(k.bytes.data(), k.bytes.size(), rows, cols + 16));
        QVERIFY_THROWS_EXCEPTION(kev::Error, kev::quant_from_ggml_q5_0(k.bytes.data(), k.bytes.size(), rows, cols, {0, 1}));
    }

    // Q8_0 kept as the file has it: a signed byte per weight and an fp16 d per 32 (the
    // file's 8.5 bits a weight, nothing added), decoding to exactly what the gguf package
    // decodes, in the row layout and in the int8 kernel's. CPU only.
    void q8BlocksKeptEqualTheGgufPackage() {
        const std::int64_t rows = 9, cols = 320;
        const KBlocks k = ggufBlocks("Q8_0", rows, cols, 4);
        QVERIFY(k.reference.defined());
        QCOMPARE(k.bytes.size(), std::size_t(rows * cols / 32 * 34));
        const kev::QuantMatrix q = expectKeptDecoding(kev::QuantFormat::Q8_0, kev::GgmlType::Q8_0, k, rows, cols);
        QVERIFY(q.byte_codes());
        QCOMPARE(q.bytes(), static_cast<std::int64_t>(k.bytes.size()));
        // Codes of both signs (they are signed bytes).
        QCOMPARE(k.reference.min().item<float>() < 0 && k.reference.max().item<float>() > 0, true);
        const kev::QuantMatrix p = kev::quant_from_ggml(kev::QuantFormat::Q8_0, k.bytes.data(), k.bytes.size(), rows, cols,
                                                        {8, 7, 6, 5, 4, 3, 2, 1, 0});
        const kev::QuantMatrix q18 = kev::concat_rows({q, p});  // 18 rows: no whole groups of 16
        QVERIFY_THROWS_EXCEPTION(kev::Error, kev::interleave_rows16(q18));
        QVERIFY(!kev::prepare_quant(q18, at::kBFloat16).interleaved);
        const kev::QuantMatrix g = kev::concat_rows(std::vector<kev::QuantMatrix>(16, q));  // 144 rows: 9 groups
        const kev::QuantMatrix gi = kev::interleave_rows16(g);
        QVERIFY(gi.interleaved);
        QCOMPARE(gi.bytes(), g.bytes());
        QVERIFY(gi.codes != g.codes);
        QVERIFY(at::equal(kev::dequantize(gi, at::kFloat), kev::dequantize(g, at::kFloat)));
        QVERIFY(at::equal(kev::dequantize(gi, 20, 50, at::kFloat), kev::dequantize(g, 20, 50, at::kFloat)));
        QVERIFY(kev::row_layout(gi).codes == g.codes);
        QVERIFY_THROWS_EXCEPTION(kev::Error, kev::quant_linear_fixed_order(at::randn({1, cols}), q, at::Tensor()));
    }

    void kernelPathsAgree_data() {
        QTest::addColumn<int>("format");
        QTest::addColumn<int>("rows");
        QTest::addColumn<int>("cols");
        QTest::addColumn<bool>("withBias");
        QTest::newRow("nf4 37x96 bias") << int(kev::QuantFormat::NF4) << 37 << 96 << true;
        QTest::newRow("nf4 130x256") << int(kev::QuantFormat::NF4) << 130 << 256 << false;
        QTest::newRow("q4_0 33x160") << int(kev::QuantFormat::Q4_0) << 33 << 160 << false;
        QTest::newRow("q4_1 65x64 bias") << int(kev::QuantFormat::Q4_1) << 65 << 64 << true;
        QTest::newRow("q4_k 33x512 bias") << int(kev::QuantFormat::Q4_K) << 33 << 512 << true;
        QTest::newRow("q4_k 48x256") << int(kev::QuantFormat::Q4_K) << 48 << 256 << false;
        QTest::newRow("q8_0 37x96 bias") << int(kev::QuantFormat::Q8_0) << 37 << 96 << true;
        QTest::newRow("q8_0 64x576") << int(kev::QuantFormat::Q8_0) << 64 << 576 << false;
        QTest::newRow("q6_k 33x512 bias") << int(kev::QuantFormat::Q6_K) << 33 << 512 << true;
        QTest::newRow("q6_k 48x256") << int(kev::QuantFormat::Q6_K) << 48 << 256 << false;
        QTest::newRow("q5_k 33x512 bias") << int(kev::QuantFormat::Q5_K) << 33 << 512 << true;
        QTest::newRow("q5_k 48x256") << int(kev::QuantFormat::Q5_K) << 48 << 256 << false;
    }

    void kernelPathsAgree() {
        QFETCH(int, format);
        QFETCH(int, rows);
        QFETCH(int, cols);
        QFETCH(bool, withBias);
        std::mt19937 rng(static_cast<unsigned>(rows * 31 + cols));
        const kev::QuantMatrix q = randomMatrix(static_cast<kev::QuantFormat>(format), rows, cols, rng);
        const at::Tensor w = kev::dequantize(q, at::kFloat);  // [rows, cols]
        const at::Tensor bias = withBias ? at::randn({rows}) : at::Tensor();
        for (std::int64_t M = 1; M <= 16; ++M) {
            const at::Tensor x = at::randn({M, cols});
            at::Tensor ref = at::matmul(x.to(at::kDouble), w.to(at::kDouble).t());  // [M, rows]
            if (withBias) ref = ref + bias.to(at::kDouble);
            // Rounding allowance per output: relative to sum |w x|.
            const at::Tensor mag = at::matmul(x.abs().to(at::kDouble), w.abs().to(at::kDouble).t()) + 1e-3;
            for (auto k : {kev::QuantKernel::Scalar, kev::QuantKernel::Avx2, kev::QuantKernel::Avx512}) {
                if (!kev::quant_kernel_supported(k)) {
                    if (M == 1) qWarning("NOT RUN: fused 4-bit %s (this CPU lacks it)", kev::to_string(k));
                    continue;
                }
                const at::Tensor y32 = kev::quant_gemv(x, q, bias, k);
                const at::Tensor y = y32.to(at::kDouble);
                const double worst = ((y - ref).abs() / mag).max().item<double>();
                QVERIFY2(worst <= 1e-5, qPrintable(QString("%1 M=%2: %3").arg(kev::to_string(k)).arg(M).arg(worst)));
                // Every row computes the same bits alone as in the call of M.
                for (std::int64_t r = 0; r < M; r += 5)
                    QVERIFY2(at::equal(kev::quant_gemv(x.narrow(0, r, 1), q, bias, k), y32.narrow(0, r, 1)),
                             qPrintable(QString("%1 M=%2: row %3 alone differs").arg(kev::to_string(k)).arg(M).arg(r)));
                // bf16 activations: bf16-rounded weights and inputs (2^-8 relative each).
                const at::Tensor xb = x.to(at::kBFloat16);
                at::Tensor refb = at::matmul(xb.to(at::kDouble), w.to(at::kDouble).t());
                if (withBias) refb = refb + bias.to(at::kDouble);
                const at::Tensor yb = kev::quant_gemv(xb, q, bias, k);
                QCOMPARE(yb.scalar_type(), at::kBFloat16);
                const double worstb = ((yb.to(at::kDouble) - refb).abs() / mag).max().item<double>();
                QVERIFY2(worstb <= 1.6e-2, qPrintable(QString("bf16 %1 M=%2: %3").arg(kev::to_string(k)).arg(M).arg(worstb)));
            }
        }
        // Prefill shapes (M > 16) run the same kernels in passes of 16 rows; leading dims kept.
        const at::Tensor x = at::randn({2, 20, cols});
        at::Tensor ref = at::matmul(x, w.t());
        if (withBias) ref = ref + bias;
        const at::Tensor y = kev::quant_linear(x, q, bias);
        QCOMPARE(y.sizes().vec(), (std::vector<std::int64_t>{2, 20, rows}));
        QVERIFY(at::allclose(y, ref, 1e-4, 1e-4));
        // bf16 prefill: the same passes (vdpbf16ps or AMX tiles where the CPU has them).
        const at::Tensor xb = x.to(at::kBFloat16);
        at::Tensor refb = at::matmul(xb.to(at::kFloat), w.to(at::kBFloat16).to(at::kFloat).t());
        if (withBias) refb = refb + bias;
        const at::Tensor yb = kev::quant_linear(xb, q, bias);
        QCOMPARE(yb.scalar_type(), at::kBFloat16);
        const at::Tensor magb = at::matmul(xb.to(at::kFloat).abs(), w.abs().t()) + 1e-3;
        const double worstb = ((yb.to(at::kFloat) - refb).abs() / magb).max().item<double>();
        QVERIFY2(worstb <= 1e-2, qPrintable(QString("bf16 prefill: %1").arg(worstb)));
    }

    // Decode shapes with bf16 activations and whole 16-row output blocks: the AMX path
    // where the CPU has it (dequantized 16x32 tiles), else the fused kernel. Each row's
    // output must not depend on the other rows of the call (packed cards rest on it).
    void decodeShapesInWholeBlocksMatchTheReference() {
        for (auto format : {kev::QuantFormat::NF4, kev::QuantFormat::Q4_0, kev::QuantFormat::Q4_1, kev::QuantFormat::Q4_K,
                            kev::QuantFormat::Q8_0, kev::QuantFormat::Q6_K, kev::QuantFormat::Q5_K}) {
            std::mt19937 rng(static_cast<unsigned>(format) + 5);
            const kev::QuantMatrix q = randomMatrix(format, 96, 256, rng);
            const at::Tensor w = kev::dequantize(q, at::kFloat);
            const at::Tensor bias = at::randn({96});
            const at::Tensor x16 = at::randn({16, 256}).to(at::kBFloat16);
            const at::Tensor all = kev::quant_linear(x16, q, bias);
            for (std::int64_t M = 1; M <= 16; ++M) {
                const at::Tensor xb = x16.narrow(0, 0, M);
                const at::Tensor refb = at::matmul(xb.to(at::kDouble), w.to(at::kDouble).t()) + bias.to(at::kDouble);
                const at::Tensor mag = at::matmul(xb.to(at::kDouble).abs(), w.abs().to(at::kDouble).t()) + 1e-3;
                const at::Tensor yb = kev::quant_linear(xb, q, bias);
                QCOMPARE(yb.scalar_type(), at::kBFloat16);
                const double worst = ((yb.to(at::kDouble) - refb).abs() / mag).max().item<double>();
                QVERIFY2(worst <= 1.6e-2, qPrintable(QString("%1 M=%2: %3").arg(kev::to_string(format)).arg(M).arg(worst)));
                QVERIFY2(at::equal(yb, all.narrow(0, 0, M)), "a row's output depends on the other rows");
            }
        }
    }

    // The int8 kernel's layout (kev/quant.h) holds the same values in another order.
    void int8LayoutKeepsTheValues() {
        std::mt19937 rng(21);
        for (auto format : {kev::QuantFormat::NF4, kev::QuantFormat::Q4_0, kev::QuantFormat::Q4_1, kev::QuantFormat::Q8_0}) {
            for (auto [rows, cols] : {std::pair<int, int>{48, 256}, {32, 96}}) {
                const kev::QuantMatrix q = randomMatrix(format, rows, cols, rng);
                const kev::QuantMatrix p = kev::interleave_rows16(q);
                QVERIFY(p.interleaved && !q.interleaved);
                QCOMPARE(p.bytes(), q.bytes());
                QVERIFY(p.codes != q.codes);
                QVERIFY(at::equal(kev::dequantize(p, at::kFloat), kev::dequantize(q, at::kFloat)));
                QVERIFY(at::equal(kev::dequantize(p, 16, 32, at::kFloat), kev::dequantize(q, 16, 32, at::kFloat)));
                // The row-layout kernels refuse it; stacking wants row layout.
                QVERIFY_THROWS_EXCEPTION(kev::Error, kev::quant_gemv(at::randn({1, cols}), p, at::Tensor(),
                                                                     kev::QuantKernel::Scalar));
                QVERIFY_THROWS_EXCEPTION(kev::Error, kev::concat_rows({p, p}));
            }
        }
        QVERIFY_THROWS_EXCEPTION(kev::Error, kev::interleave_rows16(randomMatrix(kev::QuantFormat::NF4, 40, 64, rng)));
        // prepare_quant leaves fp32 activations on the row layout.
        QVERIFY(!kev::prepare_quant(randomMatrix(kev::QuantFormat::NF4, 32, 64, rng), at::kFloat).interleaved);
        QCOMPARE(kev::prepare_quant(randomMatrix(kev::QuantFormat::NF4, 32, 64, rng), at::kBFloat16).interleaved,
                 kev::quant_int8_available());
    }

    // The CUDA kernels' fixed order (q4_order.h), run by their CPU twin, against the
    // product in double: only float rounding apart. Shapes cross slice boundaries (576
    // columns: slices of 256, 256 and 64) and fill no kernel tile evenly (40 rows).
    // fp16 activations include subnormals. The twin is the reference the GPU check
    // compares the kernels with bit for bit, so it is checked here on every machine.
    void cudaOrderTwinFollowsThePlainProduct() {
        std::mt19937 rng(33);
        for (auto format : {kev::QuantFormat::NF4, kev::QuantFormat::Q4_0, kev::QuantFormat::Q4_1}) {
            for (auto [rows, cols] : {std::pair<int, int>{40, 96}, {48, 576}}) {
                const kev::QuantMatrix q = randomMatrix(format, rows, cols, rng);
                const at::Tensor w = kev::dequantize(q, at::kFloat).to(at::kDouble);  // [rows, cols]
                const at::Tensor bias = at::randn({rows}) * 0.1;
                for (auto dtype : {at::kFloat, at::kHalf, at::kBFloat16}) {
                    at::manual_seed(rng());
                    // Magnitudes from 1e-7 (fp16 subnormals) to 10.
                    const at::Tensor x =
                        (at::randn({5, cols}) * at::pow(10.0, at::randint(-7, 2, {5, cols}).to(at::kFloat))).to(dtype);
                    const at::Tensor y = kev::quant_linear_fixed_order(x, q, bias);
                    QCOMPARE(y.scalar_type(), at::kFloat);
                    const at::Tensor xd = x.to(at::kDouble);
                    const at::Tensor ref = at::matmul(xd, w.t()) + bias.to(at::kDouble);
                    const at::Tensor scale = at::matmul(xd.abs(), w.abs().t()) + bias.abs().to(at::kDouble);
                    // Float rounding of sums of `cols` terms: at most about cols * 2^-24 of
                    // the sum of magnitudes (twice that, for the scale and offset steps).
                    const double rel = 2.0 * cols * std::ldexp(1.0, -24);
                    const double worst = ((y.to(at::kDouble) - ref).abs() / (scale * rel + 1e-30)).max().item<double>();
                    QVERIFY2(worst <= 1.0, qPrintable(QStringLiteral("%1 %2x%3 %4: %5 of the bound")
                                                          .arg(kev::to_string(format)).arg(rows).arg(cols)
                                                          .arg(c10::toString(dtype)).arg(worst)));
                    // A row alone computes the same bits as in the call of five.
                    for (int r = 0; r < 5; ++r)
                        QVERIFY(at::equal(kev::quant_linear_fixed_order(x.narrow(0, r, 1), q, bias), y.narrow(0, r, 1)));
                }
            }
        }
    }

    // The int8 layout turned back is the row layout byte for byte, so the twin (and the
    // upload to CUDA) reads any kept matrix the same.
    void rowLayoutUndoesTheInt8Layout() {
        std::mt19937 rng(34);
        for (auto format : {kev::QuantFormat::NF4, kev::QuantFormat::Q4_0, kev::QuantFormat::Q4_1, kev::QuantFormat::Q8_0}) {
            const kev::QuantMatrix q = randomMatrix(format, 32, 160, rng);
            const kev::QuantMatrix back = kev::row_layout(kev::interleave_rows16(q));
            QVERIFY(!back.interleaved);
            QVERIFY(back.codes == q.codes);
            QVERIFY(back.scales == q.scales);
            QVERIFY(back.mins == q.mins);
            if (q.byte_codes()) continue;  // no CUDA form
            const at::Tensor x = at::randn({3, 160});
            QVERIFY(at::equal(kev::quant_linear_fixed_order(x, kev::interleave_rows16(q), at::Tensor()),
                              kev::quant_linear_fixed_order(x, q, at::Tensor())));
        }
    }

    // Every finite fp16 scale the kernels can meet, decoded by their shared converter:
    // one Q4_0 block per row with the scale under test, code 9 (value 1) first, and a
    // one-hot x, so row r's output is exactly its scale as a float.
    void cudaOrderDecodesEveryFp16Scale() {
        std::vector<std::uint16_t> patterns;
        for (std::uint32_t h = 0; h < 65536; ++h)
            if (((h >> 10) & 0x1f) != 0x1f) patterns.push_back(static_cast<std::uint16_t>(h));
        const auto rows = static_cast<std::int64_t>(patterns.size());
        std::vector<std::uint8_t> blocks(static_cast<std::size_t>(rows) * 18, 0x88);  // codes 8: value 0
        for (std::int64_t r = 0; r < rows; ++r) {
            std::uint8_t* b = blocks.data() + r * 18;
            b[0] = static_cast<std::uint8_t>(patterns[static_cast<std::size_t>(r)] & 0xff);
            b[1] = static_cast<std::uint8_t>(patterns[static_cast<std::size_t>(r)] >> 8);
            b[2] = 0x89;  // element 0: code 9 (value 1); element 16: code 8
        }
        const kev::QuantMatrix q = kev::quant_from_ggml(kev::QuantFormat::Q4_0, blocks.data(), blocks.size(), rows, 32);
        at::Tensor x = at::zeros({1, 32});
        x[0][0] = 1.0f;
        const at::Tensor y = kev::quant_linear_fixed_order(x, q, at::Tensor());
        const float* yp = y.data_ptr<float>();
        for (std::int64_t r = 0; r < rows; ++r) {
            c10::Half h;
            h.x = patterns[static_cast<std::size_t>(r)];
            const float want = static_cast<float>(h);
            if (yp[r] != want)
                QFAIL(qPrintable(QStringLiteral("fp16 bits 0x%1: %2, expected %3")
                                     .arg(patterns[static_cast<std::size_t>(r)], 4, 16, QChar('0'))
                                     .arg(static_cast<double>(yp[r]), 0, 'g', 9)
                                     .arg(static_cast<double>(want), 0, 'g', 9)));
        }
    }

    // The CUDA kernels themselves: equal to the bit to the twin, every row alone equal
    // to itself in any pack, for every format and activation dtype, decode (split) and
    // prompt (whole) forms. Needs a CUDA device and a build with the kernels; elsewhere
    // reported as not run, by name (packaging/gpu-check.sh runs the same on a GPU).
    void cudaKernelsEqualTheirTwin() {
        if (!kev::quant_cuda_kernels_built()) QSKIP("NOT RUN: cuda 4-bit kernels (this build has no CUDA kernels)");
        if (!kev::engine_info().cuda_available) QSKIP("NOT RUN: cuda 4-bit kernels (no CUDA device)");
        std::mt19937 rng(35);
        const at::TensorOptions cuda = at::TensorOptions().device(at::kCUDA, 0);
        for (auto format : {kev::QuantFormat::NF4, kev::QuantFormat::Q4_0, kev::QuantFormat::Q4_1}) {
            const kev::QuantMatrix host = randomMatrix(format, 200, 576, rng);
            const kev::QuantMatrix dev = kev::quant_to_cuda(host);
            QVERIFY(dev.on_cuda() && dev.codes.empty());
            QCOMPARE(dev.bytes(), host.bytes());
            QVERIFY(at::equal(kev::dequantize(dev, at::kFloat), kev::dequantize(host, at::kFloat)));
            QVERIFY_THROWS_EXCEPTION(kev::Error, kev::quant_linear(at::randn({1, 576}), dev, at::Tensor()));
            const at::Tensor bias = at::randn({200});
            for (auto dtype : {at::kFloat, at::kHalf, at::kBFloat16}) {
                for (std::int64_t M : {1, 3, 16, 17, 40}) {
                    const at::Tensor x = at::randn({M, 576}).to(dtype);
                    const at::Tensor y = kev::quant_linear(x.to(cuda), dev, bias.to(dtype).to(cuda)).cpu();
                    QVERIFY(at::equal(y, kev::quant_linear_fixed_order(x, host, bias.to(dtype)).to(dtype)));
                    for (std::int64_t r = 0; r < M; ++r)
                        QVERIFY(at::equal(kev::quant_linear(x.narrow(0, r, 1).to(cuda), dev, bias.to(dtype).to(cuda)).cpu(),
                                          y.narrow(0, r, 1)));
                }
            }
        }
    }

    // The largest sums the kernels meet: every code 15 (Q4_0: 7 d, Q4_1: 15 d + m) against
    // activations of one magnitude and sign (each quantized to +-127), where the AVX2 form
    // adds a group's vpmaddubsw pairs in int16 before widening them (here 8 x 3810 of at most
    // 8 x 3840). Every path gives the scalar twin's bits, and those are the exact sums.
    void int8KernelSumsAtTheirLargest_data() {
        QTest::addColumn<int>("format");
        QTest::newRow("q4_0") << int(kev::QuantFormat::Q4_0);
        QTest::newRow("q4_1") << int(kev::QuantFormat::Q4_1);
    }
    void int8KernelSumsAtTheirLargest() {
        QFETCH(int, format);
        const auto f = static_cast<kev::QuantFormat>(format);
        const std::int64_t rows = 32, cols = 256;
        const bool q41 = f == kev::QuantFormat::Q4_1;
        std::vector<std::uint8_t> block{0x00, 0x3C};  // d = 1 (fp16)
        if (q41) block.insert(block.end(), {0x00, 0x38});  // m = 0.5
        block.insert(block.end(), 16, 0xFF);             // 32 codes of 15
        std::vector<std::uint8_t> bytes;
        for (std::int64_t b = 0; b < rows * cols / 32; ++b) bytes.insert(bytes.end(), block.begin(), block.end());
        const kev::QuantMatrix q =
            kev::interleave_rows16(kev::quant_from_ggml(f, bytes.data(), bytes.size(), rows, cols));
        // 6 rows: more than one AVX2 pass takes (4 rows), so a pass of 4 and one of 2 meet
        // these sums, as well as the single pass of the first 4 rows alone.
        at::Tensor x = at::ones({6, cols});
        x[1].fill_(-1.0f);
        x[2].fill_(-3.5f);  // any one magnitude quantizes to 127
        x[3].fill_(0.25f);
        x[4].fill_(-0.5f);
        x[5].fill_(2.0f);
        const double per = q41 ? 15.5 : 7.0;  // one weight's value
        const at::Tensor scalar = kev::quant_int8_linear(x, q, at::Tensor(), kev::Int8Kernel::Scalar);
        for (int m = 0; m < 6; ++m) {  // every output of the row
            const double want = per * cols * x[m][0].item<double>();
            const double off = (scalar[m].to(at::kDouble) - want).abs().max().item<double>();
            QVERIFY2(off <= 1e-6 * std::abs(want), qPrintable(QString("row %1: %2 off %3").arg(m).arg(off).arg(want)));
        }
        int ran = 0;
        for (auto k : {kev::Int8Kernel::Avx2, kev::Int8Kernel::AvxVnni, kev::Int8Kernel::Vnni, kev::Int8Kernel::Amx}) {
            if (!kev::quant_int8_kernel_supported(k)) {
                qWarning("NOT RUN: %s (this CPU lacks it)", kev::to_string(k));
                continue;
            }
            QVERIFY2(at::equal(kev::quant_int8_linear(x, q, at::Tensor(), k), scalar), kev::to_string(k));
            QVERIFY2(at::equal(kev::quant_int8_linear(x.narrow(0, 0, 4), q, at::Tensor(), k), scalar.narrow(0, 0, 4)),
                     kev::to_string(k));
            ++ran;
        }
        qInfo("%d SIMD path(s) compared with the scalar twin", ran);
    }

    // The int8 kernel against its specification, computed here in double: activations
    // quantized per row and 32 columns (scale absmax / 127, round half to even), codes
    // entering as their int8 values (NF4: round(127 v) / 127). Only the float steps of
    // the kernel's epilogue remain, so the bound is float rounding. Its paths (scalar
    // twin, VNNI, AMX where the CPU has them) agree bit for bit, and a row's result does
    // not depend on the rows beside it (prefill and decode, alone and packed, alike).
    void int8KernelFollowsItsSpecification_data() {
        QTest::addColumn<int>("format");
        QTest::addColumn<int>("rows");
        QTest::addColumn<int>("cols");
        QTest::addColumn<bool>("withBias");
        QTest::newRow("nf4 48x256 bias") << int(kev::QuantFormat::NF4) << 48 << 256 << true;
        QTest::newRow("nf4 32x96 (blocks of 32)") << int(kev::QuantFormat::NF4) << 32 << 96 << false;
        QTest::newRow("q4_0 32x160") << int(kev::QuantFormat::Q4_0) << 32 << 160 << false;
        QTest::newRow("q4_1 64x64 bias") << int(kev::QuantFormat::Q4_1) << 64 << 64 << true;
        QTest::newRow("q8_0 48x256 bias") << int(kev::QuantFormat::Q8_0) << 48 << 256 << true;
        QTest::newRow("q8_0 32x96") << int(kev::QuantFormat::Q8_0) << 32 << 96 << false;
        QTest::newRow("q4_k 48x512 bias") << int(kev::QuantFormat::Q4_K) << 48 << 512 << true;
        QTest::newRow("q4_k 32x256") << int(kev::QuantFormat::Q4_K) << 32 << 256 << false;
        QTest::newRow("q5_k 48x512 bias") << int(kev::QuantFormat::Q5_K) << 48 << 512 << true;
        QTest::newRow("q5_k 32x256") << int(kev::QuantFormat::Q5_K) << 32 << 256 << false;
        QTest::newRow("q6_k 48x512 bias") << int(kev::QuantFormat::Q6_K) << 48 << 512 << true;
        QTest::newRow("q6_k 32x256") << int(kev::QuantFormat::Q6_K) << 32 << 256 << false;
    }

    void int8KernelFollowsItsSpecification() {
        QFETCH(int, format);
        QFETCH(int, rows);
        QFETCH(int, cols);
        QFETCH(bool, withBias);
        std::mt19937 rng(static_cast<unsigned>(rows * 7 + cols));
        const kev::QuantMatrix q = kev::interleave_rows16(randomMatrix(static_cast<kev::QuantFormat>(format), rows, cols, rng));
        kev::QuantMatrix entered = q;  // the values the kernel multiplies with
        for (auto& v : entered.lut) v = static_cast<float>(std::nearbyint(v * 127.0f) / 127.0);
        if (q.format != kev::QuantFormat::NF4) QVERIFY(entered.lut == q.lut);
        const at::Tensor w = kev::dequantize(entered, at::kDouble);  // [rows, cols]
        const at::Tensor bias = withBias ? at::randn({rows}) : at::Tensor();
        const std::int64_t M = 40;
        at::Tensor x = (at::randn({M, cols}) * at::rand({M, 1}) * 3).to(at::kBFloat16).to(at::kFloat);
        x[3].zero_();  // an all-zero row: scale 0
        // The specification's activations.
        const at::Tensor xs = x.view({M, cols / 32, 32});
        const at::Tensor amax = xs.abs().amax(-1, true);
        const at::Tensor inv = at::where(amax > 0, 127.0f / amax, at::zeros_like(amax));
        const at::Tensor xq = (xs * inv).round().to(at::kDouble) * (amax / 127.0f).to(at::kDouble);
        at::Tensor ref = at::matmul(xq.view({M, cols}), w.t());  // [M, rows]
        if (withBias) ref = ref + bias.to(at::kDouble);
        const at::Tensor mag = at::matmul(xq.view({M, cols}).abs(), w.abs().t()) + 1e-6;

        const at::Tensor scalar = kev::quant_int8_linear(x, q, bias, kev::Int8Kernel::Scalar);
        const double worst = ((scalar.to(at::kDouble) - ref).abs() / mag).max().item<double>();
        QVERIFY2(worst <= 1e-5, qPrintable(QString("scalar: %1").arg(worst)));
        QVERIFY(scalar[3].abs().max().item<float>() <= (withBias ? bias.abs().max().item<float>() : 0.0f));
        for (auto k : {kev::Int8Kernel::Scalar, kev::Int8Kernel::Avx2, kev::Int8Kernel::AvxVnni, kev::Int8Kernel::Vnni,
                       kev::Int8Kernel::Amx}) {
            if (!kev::quant_int8_kernel_supported(k)) {
                QVERIFY_THROWS_EXCEPTION(kev::Error, kev::quant_int8_linear(x, q, bias, k));
                qWarning("NOT RUN: %s (this CPU lacks it)", kev::to_string(k));
                continue;
            }
            QVERIFY2(at::equal(kev::quant_int8_linear(x, q, bias, k), scalar), kev::to_string(k));
            // Any number of rows: VNNI passes of 8, AMX passes of 16 from 32 rows on.
            for (std::int64_t m : {1, 2, 7, 8, 9, 16, 17, 31, 32, 33, 39}) {
                const at::Tensor part = kev::quant_int8_linear(x.narrow(0, 0, m), q, bias, k);
                QVERIFY2(at::equal(part, scalar.narrow(0, 0, m)), qPrintable(QString("%1 M=%2").arg(kev::to_string(k)).arg(m)));
            }
        }
        // A NaN or an infinity in an activation row makes that row's outputs NaN on every
        // path (as a float multiply would), and leaves the other rows alone.
        at::Tensor bad = x.narrow(0, 0, 3).clone();
        bad[0][5] = std::numeric_limits<float>::quiet_NaN();
        bad[1][cols - 1] = std::numeric_limits<float>::infinity();
        // bf16 in and out: every path stores the same bits, NaNs included.
        const at::Tensor badb = bad.to(at::kBFloat16);
        const at::Tensor bitsb = kev::quant_int8_linear(badb, q, bias, kev::Int8Kernel::Scalar).view(at::kShort);
        for (auto k : {kev::Int8Kernel::Scalar, kev::Int8Kernel::Avx2, kev::Int8Kernel::AvxVnni, kev::Int8Kernel::Vnni,
                       kev::Int8Kernel::Amx}) {
            if (!kev::quant_int8_kernel_supported(k)) continue;  // reported above
            const at::Tensor yb = kev::quant_int8_linear(bad, q, bias, k);
            QVERIFY2(yb[0].isnan().all().item<bool>() && yb[1].isnan().all().item<bool>(), kev::to_string(k));
            QVERIFY(at::equal(yb[2], scalar[2]));
            QVERIFY2(at::equal(kev::quant_int8_linear(badb, q, bias, k).view(at::kShort), bitsb), kev::to_string(k));
        }
        if (kev::quant_int8_available()) {
            // bf16 activations of the same values: the same sums, rounded to bf16 once.
            const at::Tensor yb = kev::quant_linear(x.to(at::kBFloat16), q, bias);
            QCOMPARE(yb.scalar_type(), at::kBFloat16);
            QVERIFY(at::equal(yb, scalar.to(at::kBFloat16)));
        }
    }

    void forward4bitNearFp32_data() {
        QTest::addColumn<QString>("preset");
        for (const char* p : {"tiny-llama", "tiny-qwen2", "tiny-qwen3"}) QTest::newRow(p) << QString(p);
    }

    void forward4bitNearFp32() {
        QFETCH(QString, preset);
        const std::string dir = tinyDir(preset).toStdString();
        const auto fp32 = loadModel(dir, kev::DType::F32, kev::WeightQuant::None);
        const auto q4 = loadModel(dir, kev::DType::F32, kev::WeightQuant::NF4);
        QVERIFY(q4->weights().bytes() < fp32->weights().bytes());
        std::mt19937 rng(7);
        std::uniform_int_distribution<int> tok(3, 511);
        std::vector<std::int64_t> tokens(24);
        for (auto& t : tokens) t = tok(rng);
        const at::Tensor ref = promptLogits(*fp32, tokens);  // [T, V]
        const at::Tensor got = promptLogits(*q4, tokens);
        // 1. Plumbing: the 4-bit model computes exactly the fp32 model whose weights are
        //    the dequantized 4-bit ones (float rounding only).
        const kev::Model same(q4->config(), dequantizedCopy(q4->weights()), kev::Device::Cpu, kev::DType::F32);
        const at::Tensor exact = promptLogits(same, tokens);
        QVERIFY2(at::allclose(got, exact, 1e-4, 1e-4), qPrintable(QString::number((got - exact).abs().max().item<float>())));
        // 2. Quantization error. NF4 perturbs each weight matrix by a relative (Frobenius)
        //    error e (measured below, ~0.1 for these Gaussian weights). A logit is reached
        //    through at most 2 layers x 3 matmuls + the head; to first order the relative
        //    errors of independent perturbations add in quadrature, so the logit error is
        //    about e * sqrt(7) ~ 0.26. The bound allows 2x that for the nonlinearities.
        double e = 0;
        const auto& wq = q4->weights();
        const auto& wf = fp32->weights();
        for (std::size_t l = 0; l < wq.layers.size(); ++l) {
            const std::pair<const kev::Linear*, const kev::Linear*> pairs[] = {
                {&wq.layers[l].qkv, &wf.layers[l].qkv}, {&wq.layers[l].o, &wf.layers[l].o},
                {&wq.layers[l].gate_up, &wf.layers[l].gate_up}, {&wq.layers[l].down, &wf.layers[l].down}};
            for (const auto& [a, b] : pairs)
                e = std::max(e, ((kev::dequantize(*a->quant, at::kFloat) - b->weight).norm() / b->weight.norm()).item<double>());
        }
        QVERIFY2(e > 0.02 && e < 0.15, qPrintable(QString("weight error %1").arg(e)));
        const double rel = ((got - ref).norm() / ref.norm()).item<double>();
        QVERIFY2(rel <= 2 * e * std::sqrt(7.0), qPrintable(QString("logit error %1, weight error %2").arg(rel).arg(e)));
    }

    void forward4bitHalfNearTheRest_data() { forward4bitNearFp32_data(); }

    // The app's 4-bit: bf16 activations, so the int8 kernel where the CPU has it. Its
    // logits against the same NF4 weights run with fp32 activations (the exact fused
    // kernels, checked above): what separates them is bf16 rounding, which the dense
    // bf16 model shows against fp32 (r), and int8 activations: a value's rounding error
    // has an rms of absmax / (127 sqrt 12), ~0.6% of a Gaussian 32-value slice's rms
    // (absmax ~2.5 sigma), ~1.5% over 7 matmuls in quadrature. Bound: 2 (r + 0.015),
    // the 2 for the nonlinearities as above.
    void forward4bitHalfNearTheRest() {
        QFETCH(QString, preset);
        const std::string dir = tinyDir(preset).toStdString();
        const auto fp32 = loadModel(dir, kev::DType::F32, kev::WeightQuant::None);
        const auto bf16 = loadModel(dir, kev::DType::BF16, kev::WeightQuant::None);
        const auto q4f = loadModel(dir, kev::DType::F32, kev::WeightQuant::NF4);
        const auto q4h = loadModel(dir, kev::DType::BF16, kev::WeightQuant::NF4);
        QCOMPARE(q4h->weights().memory().int8_kernel,
                 kev::quant_int8_available() ? q4h->weights().memory().quantized() : std::int64_t{0});
        std::mt19937 rng(8);
        std::uniform_int_distribution<int> tok(3, 511);
        std::vector<std::int64_t> tokens(24);
        for (auto& t : tokens) t = tok(rng);
        const at::Tensor ref = promptLogits(*fp32, tokens).to(at::kFloat);
        const double r = ((promptLogits(*bf16, tokens).to(at::kFloat) - ref).norm() / ref.norm()).item<double>();
        const at::Tensor exact4 = promptLogits(*q4f, tokens).to(at::kFloat);
        const at::Tensor half4 = promptLogits(*q4h, tokens).to(at::kFloat);
        const double rel = ((half4 - exact4).norm() / exact4.norm()).item<double>();
        qInfo("bf16 vs fp32 %.4f; 4-bit bf16/int8 vs 4-bit fp32 %.4f", r, rel);
        QVERIFY2(rel > 0, "the two 4-bit paths cannot agree to the bit");
        QVERIFY2(rel <= 2 * (r + 0.015), qPrintable(QString("4-bit half %1, bf16 rounding %2").arg(rel).arg(r)));
    }

    void isolationHoldsIn4Bit_data() {
        QTest::addColumn<bool>("half");
        QTest::addColumn<QString>("kept");  // the GGUF blocks kept, or "" for NF4 from a folder
        QTest::newRow("nf4, fp32 activations") << false << QString();
        QTest::newRow("nf4, bf16 activations") << true << QString();
        QTest::newRow("q4_k kept, fp32 activations") << false << QString("Q4_K");
        QTest::newRow("q4_k kept, bf16 activations") << true << QString("Q4_K");
        QTest::newRow("q8_0 kept, fp32 activations") << false << QString("Q8_0");
        QTest::newRow("q8_0 kept, bf16 activations") << true << QString("Q8_0");
    }

    void isolationHoldsIn4Bit() {
        // A card's tokens and logits are the same packed and alone: NF4 weights, and each
        // linear row's result does not depend on the other rows (fp32: the fused kernels;
        // bf16: the int8 kernel where the CPU has it, exact sums, any number of rows).
        QFETCH(bool, half);
        QFETCH(QString, kept);
        const auto m = !kept.isEmpty() ? loadModel(keptModelFile(kept).toStdString(),
                                                   half ? kev::DType::BF16 : kev::DType::F32, kev::WeightQuant::Q4)
                                       : loadModel(tinyDir("tiny-qwen2").toStdString(),
                                                   half ? kev::DType::BF16 : kev::DType::F32, kev::WeightQuant::NF4);
        const kev::WeightMemory mem = m->weights().memory();
        if (!kept.isEmpty()) {  // Q4_K, Q8_0: the int8 kernel for bf16 activations, where it runs
            QCOMPARE(QString(kev::to_string(m->weights().layers[0].gate_up.quant->format)), kept.toLower());
            QCOMPARE(mem.int8_kernel, half && kev::quant_int8_available() ? mem.quantized() : std::int64_t{0});
        } else {
            if (half) QCOMPARE(m->weights().layers[0].gate_up.quant->interleaved, kev::quant_int8_available());
            QCOMPARE(mem.int8_kernel, half && kev::quant_int8_available() ? mem.quantized() : std::int64_t{0});
        }
        // Isolation is exact (DESIGN.md invariant 1): every linear row is computed alike
        // whatever the pack (int8 kernel: exact sums; fused kernels: one order per row),
        // and so are norms and attention (rowwise.h), so the logits are the same bits.
        std::mt19937 rng(11);
        std::uniform_int_distribution<int> tok(3, 511), len(2, 30);
        std::vector<kev::TokenCard> cards;
        for (int c = 0; c < 6; ++c) {
            kev::TokenCard card;
            card.prompt.resize(static_cast<std::size_t>(len(rng)));
            for (auto& t : card.prompt) t = tok(rng);
            card.sampling.temperature = 0.0f;
            card.sampling.max_new_tokens = 6 + 2 * c;
            cards.push_back(card);
        }
        kev::Generator g(*m, nullptr, std::nullopt);
        kev::RunOptions o;
        o.keep_logits = true;
        o.ignore_end_of_sequence = true;
        const kev::GenerationResult packed = g.run(g.prepare_tokens(cards, {}), o);
        for (std::size_t c = 0; c < cards.size(); ++c) {
            const kev::GenerationResult alone = g.run(g.prepare_tokens({cards[c]}, {}), o);
            QCOMPARE(packed.cards[c].tokens, alone.cards[0].tokens);
            QCOMPARE(packed.cards[c].tokens.size(), static_cast<std::size_t>(cards[c].sampling.max_new_tokens));
            QVERIFY2(packed.cards[c].logits == alone.cards[0].logits,
                     qPrintable(QString("card %1: logits packed differ from alone").arg(c)));
        }
    }
};

QTEST_GUILESS_MAIN(TestQuant)
#include "tst_quant.moc"
