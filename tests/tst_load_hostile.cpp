// Loading hostile model files: a tiny llama GGUF written here, then broken one field
// at a time (head counts, token ids, rope/eps numbers, overlapping or retyped tensor
// data, NaN/Inf in norms and Q4_1 scales); special files (FIFO, /dev/zero, folders)
// and oversized JSON refused before they are read; config.json rules named by key.
#include <QtTest>

#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <future>
#include <map>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

#include "kev/config.h"
#include "kev/error.h"
#include "kev/gguf.h"
#include "kev/lora.h"
#include "kev/mapped_file.h"
#include "kev/model.h"
#include "kev/text_file.h"
#include "kev_test_env.h"

namespace {

// ---- a tiny llama GGUF: hidden 64, 1 layer, 4 heads / 2 kv heads, vocab 256 ----
constexpr std::int64_t kHidden = 64, kInter = 128, kVocab = 256, kKv = 32;

struct Meta {
    std::string key;
    std::uint32_t type;  // 4 u32, 5 i32, 6 f32
    double value;
};

struct TensorSpec {
    std::string name;
    std::vector<std::uint64_t> dims;  // ggml order (row length first)
    std::uint32_t type;               // 0 F32, 3 Q4_1
    std::uint64_t offset = 0;         // relative; filled by layout()
    QByteArray data;
};

std::uint16_t f16(float f) {
    // enough for the small normal values and the specials used here
    if (std::isnan(f)) return 0x7e00;
    if (std::isinf(f)) return f > 0 ? 0x7c00 : 0xfc00;
    std::uint32_t u;
    std::memcpy(&u, &f, 4);
    const std::uint32_t sign = (u >> 16) & 0x8000;
    const int exp = static_cast<int>((u >> 23) & 0xff) - 127 + 15;
    if (exp <= 0) return static_cast<std::uint16_t>(sign);
    return static_cast<std::uint16_t>(sign | (exp << 10) | ((u >> 13) & 0x3ff));
}

QByteArray f32Data(std::int64_t n, float base) {
    QByteArray b;
    for (std::int64_t i = 0; i < n; ++i) {
        const float v = base + 0.001f * static_cast<float>(i % 17);
        b.append(reinterpret_cast<const char*>(&v), 4);
    }
    return b;
}

QByteArray q41Data(std::int64_t n) {
    QByteArray b;
    for (std::int64_t blk = 0; blk < n / 32; ++blk) {
        const std::uint16_t d = f16(0.01f), m = f16(-0.05f);
        b.append(reinterpret_cast<const char*>(&d), 2);
        b.append(reinterpret_cast<const char*>(&m), 2);
        for (int i = 0; i < 16; ++i) b.append(static_cast<char>((blk * 7 + i * 13) & 0xff));
    }
    return b;
}

struct TinyGguf {
    std::vector<Meta> meta = {
        {"llama.embedding_length", 4, double(kHidden)},
        {"llama.block_count", 4, 1},
        {"llama.feed_forward_length", 4, double(kInter)},
        {"llama.attention.head_count", 4, 4},
        {"llama.attention.head_count_kv", 4, 2},
        {"llama.context_length", 4, 128},
        {"llama.vocab_size", 4, double(kVocab)},
        {"llama.attention.layer_norm_rms_epsilon", 6, 1e-5},
        {"llama.rope.freq_base", 6, 10000.0},
        {"tokenizer.ggml.eos_token_id", 5, 2},
    };
    std::vector<TensorSpec> tensors;

    TinyGguf() {
        auto f32 = [&](const std::string& n, std::vector<std::uint64_t> dims, float base) {
            std::int64_t numel = 1;
            for (auto d : dims) numel *= static_cast<std::int64_t>(d);
            tensors.push_back({n, dims, 0, 0, f32Data(numel, base)});
        };
        auto q41 = [&](const std::string& n, std::vector<std::uint64_t> dims) {
            tensors.push_back({n, dims, 3, 0, q41Data(static_cast<std::int64_t>(dims[0] * dims[1]))});
        };
        f32("token_embd.weight", {kHidden, kVocab}, 0.01f);
        f32("output_norm.weight", {kHidden}, 1.0f);
        f32("blk.0.attn_norm.weight", {kHidden}, 1.0f);
        q41("blk.0.attn_q.weight", {kHidden, kHidden});
        q41("blk.0.attn_k.weight", {kHidden, kKv});
        q41("blk.0.attn_v.weight", {kHidden, kKv});
        q41("blk.0.attn_output.weight", {kHidden, kHidden});
        f32("blk.0.ffn_norm.weight", {kHidden}, 1.0f);
        q41("blk.0.ffn_gate.weight", {kHidden, kInter});
        q41("blk.0.ffn_up.weight", {kHidden, kInter});
        q41("blk.0.ffn_down.weight", {kInter, kHidden});
    }

    void set(const std::string& key, double v) {
        for (Meta& m : meta)
            if (m.key == key) m.value = v;
    }
    TensorSpec& tensor(const std::string& name) {
        for (TensorSpec& t : tensors)
            if (t.name == name) return t;
        qFatal("no tensor %s", name.c_str());
    }
    // Back to back, 32-byte aligned.
    void layout() {
        std::uint64_t off = 0;
        for (TensorSpec& t : tensors) {
            t.offset = off;
            off += (static_cast<std::uint64_t>(t.data.size()) + 31) / 32 * 32;
        }
    }

    QByteArray bytes(bool relayout = true) {
        if (relayout) layout();
        QByteArray b;
        auto put = [&](auto v) { b.append(reinterpret_cast<const char*>(&v), sizeof v); };
        auto str = [&](const std::string& s) {
            put(static_cast<std::uint64_t>(s.size()));
            b.append(s.data(), static_cast<int>(s.size()));
        };
        b.append("GGUF");
        put(std::uint32_t(3));
        put(static_cast<std::uint64_t>(tensors.size()));
        put(static_cast<std::uint64_t>(meta.size() + 1));
        str("general.architecture");
        put(std::uint32_t(8));
        str("llama");
        for (const Meta& m : meta) {
            str(m.key);
            put(m.type);
            if (m.type == 4) put(static_cast<std::uint32_t>(m.value));
            else if (m.type == 5) put(static_cast<std::int32_t>(m.value));
            else put(static_cast<float>(m.value));
        }
        for (const TensorSpec& t : tensors) {
            str(t.name);
            put(static_cast<std::uint32_t>(t.dims.size()));
            for (auto d : t.dims) put(d);
            put(t.type);
            put(t.offset);
        }
        while (b.size() % 32) b.append('\0');
        const qsizetype start = b.size();
        for (const TensorSpec& t : tensors) {
            if (b.size() < start + static_cast<qsizetype>(t.offset)) b.append(QByteArray(start + t.offset - b.size(), '\0'));
            // Overlapping specs: the later one's bytes stay where the first wrote them.
            if (b.size() == start + static_cast<qsizetype>(t.offset)) b.append(t.data);
        }
        while (b.size() % 32) b.append('\0');
        return b;
    }
};

QString writeFile(const QString& name, const QByteArray& bytes) {
    const QString path = kevtest::workDir("load-hostile") + "/" + name;
    QFile f(path);
    if (!f.open(QIODevice::WriteOnly | QIODevice::Truncate)) return {};
    f.write(bytes);
    return path;
}

// Runs `fn` on a thread and gives up after `seconds`, so that a call blocking forever
// (open() on a FIFO) fails the test instead of hanging it. A thread left blocked is
// abandoned.
template <typename Fn>
bool finishesWithin(int seconds, Fn fn, std::string* message, kev::ErrorCode* code) {
    auto done = std::make_shared<std::promise<std::pair<int, std::string>>>();
    std::future<std::pair<int, std::string>> f = done->get_future();
    std::thread([done, fn] {
        try {
            fn();
            done->set_value({-1, "no error"});
        } catch (const kev::Error& e) {
            done->set_value({static_cast<int>(e.code()), e.what()});
        } catch (const std::exception& e) {
            done->set_value({-2, e.what()});
        }
    }).detach();
    if (f.wait_for(std::chrono::seconds(seconds)) != std::future_status::ready) return false;
    const auto r = f.get();
    *message = r.second;
    *code = static_cast<kev::ErrorCode>(r.first);
    if (r.first < 0) *code = kev::ErrorCode::Cancelled;  // not a kev::Error: never what a test wants
    return true;
}

// Expects `fn` to throw kev::Error with `code` and a message containing every part.
template <typename Fn>
void expectError(Fn fn, kev::ErrorCode code, std::initializer_list<std::string> parts) {
    std::string msg;
    kev::ErrorCode got = kev::ErrorCode::Cancelled;
    QVERIFY2(finishesWithin(20, fn, &msg, &got), "the call did not return (blocked)");
    QVERIFY2(got == code, qPrintable(QString("code %1: %2").arg(kev::to_string(got)).arg(msg.c_str())));
    for (const std::string& p : parts)
        QVERIFY2(msg.find(p) != std::string::npos, qPrintable(QString("\"%1\" not in: %2").arg(p.c_str(), msg.c_str())));
}

}  // namespace

class TestLoadHostile : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void tinyGgufLoads() {
        TinyGguf g;
        const QString path = writeFile("good.gguf", g.bytes());
        auto m = kev::Model::load(path.toStdString(), {});
        QCOMPARE(m->config().num_heads, std::int64_t(4));
        QCOMPARE(m->config().eos_token_ids, std::vector<std::int64_t>{2});
    }

    // ---- metadata: each broken field is Format, names the file and the key ----
    void brokenGgufMetadata_data() {
        QTest::addColumn<QString>("key");
        QTest::addColumn<double>("value");
        QTest::addColumn<QString>("expected");
        QTest::newRow("heads 7") << "llama.attention.head_count" << 7.0
                                 << "llama.attention.head_count 7 does not divide llama.embedding_length 64";
        QTest::newRow("heads 5") << "llama.attention.head_count" << 5.0 << "head_count 5 does not divide";
        QTest::newRow("heads 0") << "llama.attention.head_count" << 0.0 << "head_count 0 must be positive";
        QTest::newRow("kv heads 3") << "llama.attention.head_count_kv" << 3.0
                                    << "head_count_kv 3 does not divide llama.attention.head_count 4";
        QTest::newRow("hidden 0") << "llama.embedding_length" << 0.0 << "embedding_length 0 must be positive";
        QTest::newRow("layers 0") << "llama.block_count" << 0.0 << "llama.block_count 0 must be positive";
        QTest::newRow("layers huge") << "llama.block_count" << 4000000000.0 << "over the limit of 1024";
        QTest::newRow("ffn 0") << "llama.feed_forward_length" << 0.0 << "feed_forward_length 0 must be positive";
        QTest::newRow("context 0") << "llama.context_length" << 0.0 << "context_length 0 must be positive";
        QTest::newRow("vocab huge") << "llama.vocab_size" << 4000000000.0 << "llama.vocab_size 4000000000 is over";
        QTest::newRow("theta inf") << "llama.rope.freq_base" << double(INFINITY) << "llama.rope.freq_base inf";
        QTest::newRow("theta 0") << "llama.rope.freq_base" << 0.0 << "llama.rope.freq_base 0 must be";
        QTest::newRow("eps nan") << "llama.attention.layer_norm_rms_epsilon" << double(NAN) << "layer_norm_rms_epsilon nan";
        QTest::newRow("eps negative") << "llama.attention.layer_norm_rms_epsilon" << -1.0 << "layer_norm_rms_epsilon -1";
        QTest::newRow("eos -1") << "tokenizer.ggml.eos_token_id" << -1.0
                                << "tokenizer.ggml.eos_token_id -1 is not a token id of this model (0..255)";
        QTest::newRow("eos = vocab") << "tokenizer.ggml.eos_token_id" << 256.0 << "eos_token_id 256 is not a token id";
    }
    void brokenGgufMetadata() {
        QFETCH(QString, key);
        QFETCH(double, value);
        QFETCH(QString, expected);
        TinyGguf g;
        g.set(key.toStdString(), value);
        const QString path = writeFile(QString("meta-%1.gguf").arg(QString(QTest::currentDataTag()).replace(' ', '-')), g.bytes());
        expectError([p = path.toStdString()] { kev::Model::load(p, {}); }, kev::ErrorCode::Format,
                    {path.toStdString(), expected.toStdString()});
    }

    // ---- tensor data: overlaps and retyping ----
    // LongRoPE factors and partial rotary arrive in llama.cpp's phi3 files only; in a
    // llama file, or half present, they are named, never half applied.
    void ropeExtrasOutsidePhi3AreNamed() {
        const std::uint64_t pairs = kHidden / 4 / 2;  // head 16: 8 rotated pairs
        {
            TinyGguf g;
            g.tensors.push_back({"rope_factors_long.weight", {pairs}, 0, 0, f32Data(pairs, 1.0f)});
            const QString path = writeFile("rope-long-only.gguf", g.bytes());
            expectError([p = path.toStdString()] { kev::Model::load(p, {}); }, kev::ErrorCode::Format,
                        {path.toStdString(), "rope_factors_short.weight and rope_factors_long.weight come together"});
        }
        {
            TinyGguf g;
            g.tensors.push_back({"rope_factors_long.weight", {pairs}, 0, 0, f32Data(pairs, 2.0f)});
            g.tensors.push_back({"rope_factors_short.weight", {pairs}, 0, 0, f32Data(pairs, 1.0f)});
            const QString path = writeFile("rope-factors-llama.gguf", g.bytes());
            expectError([p = path.toStdString()] { kev::Model::load(p, {}); }, kev::ErrorCode::Unsupported,
                        {path.toStdString(), "LongRoPE factors are supported for phi3 only, not llama"});
        }
        {
            TinyGguf g;
            g.meta.push_back({"llama.rope.dimension_count", 4, 8.0});
            const QString path = writeFile("rope-partial-llama.gguf", g.bytes());
            expectError([p = path.toStdString()] { kev::Model::load(p, {}); }, kev::ErrorCode::Unsupported,
                        {path.toStdString(), "llama.rope.dimension_count 8 < head size 16", "phi3 only"});
        }
        {
            TinyGguf g;
            g.meta.push_back({"llama.rope.dimension_count", 4, 7.0});
            const QString path = writeFile("rope-odd.gguf", g.bytes());
            expectError([p = path.toStdString()] { kev::Model::load(p, {}); }, kev::ErrorCode::Format,
                        {path.toStdString(), "llama.rope.dimension_count 7 must be even"});
        }
    }

    void overlappingTensorDataIsRefused() {
        TinyGguf g;
        g.layout();
        g.tensor("blk.0.attn_k.weight").offset = g.tensor("blk.0.attn_q.weight").offset;
        const QString path = writeFile("overlap.gguf", g.bytes(false));
        expectError([p = path.toStdString()] { kev::GgufFile::open(p); }, kev::ErrorCode::Format,
                    {path.toStdString(), "'blk.0.attn_q.weight'", "'blk.0.attn_k.weight'", "overlap"});
    }
    void retypedTensorIsRefused() {
        // Q4_1 -> F32 in the middle: it now claims its neighbours' bytes.
        {
            TinyGguf g;
            g.layout();
            g.tensor("blk.0.attn_output.weight").type = 0;
            const QString path = writeFile("retyped-middle.gguf", g.bytes(false));
            expectError([p = path.toStdString()] { kev::GgufFile::open(p); }, kev::ErrorCode::Format,
                        {path.toStdString(), "'blk.0.attn_output.weight'", "overlap"});
        }
        // The last tensor retyped Q4_1 -> F32 runs past the end of the file.
        {
            TinyGguf g;
            g.layout();
            g.tensor("blk.0.ffn_down.weight").type = 0;
            const QString path = writeFile("retyped-last.gguf", g.bytes(false));
            expectError([p = path.toStdString()] { kev::GgufFile::open(p); }, kev::ErrorCode::Format,
                        {path.toStdString(), "'blk.0.ffn_down.weight'", "lies outside the file"});
        }
    }

    // ---- non-finite weights ----
    void nonFiniteNormIsRefused() {
        TinyGguf g;
        QByteArray& d = g.tensor("blk.0.attn_norm.weight").data;
        const float nan = NAN, inf = INFINITY;
        std::memcpy(d.data() + 4 * 3, &nan, 4);
        std::memcpy(d.data() + 4 * 9, &inf, 4);
        const QString path = writeFile("nan-norm.gguf", g.bytes());
        expectError([p = path.toStdString()] { kev::Model::load(p, {}); }, kev::ErrorCode::Format,
                    {path.toStdString(), "blk.0.attn_norm.weight': 2 non-finite values (NaN/Inf)"});
    }
    void nonFiniteQ41ScaleIsRefused_data() {
        QTest::addColumn<int>("byteOffset");  // inside the tensor's data: 0 = d of block 0, 2 = m
        QTest::addColumn<float>("value");
        QTest::newRow("d inf") << 0 << float(INFINITY);
        QTest::newRow("m nan") << 2 << float(NAN);
        QTest::newRow("d of block 5 nan") << 5 * 20 << float(NAN);
    }
    void nonFiniteQ41ScaleIsRefused() {
        QFETCH(int, byteOffset);
        QFETCH(float, value);
        for (bool q4 : {false, true}) {
            TinyGguf g;
            const std::uint16_t h = f16(value);
            std::memcpy(g.tensor("blk.0.ffn_up.weight").data.data() + byteOffset, &h, 2);
            const QString path = writeFile(QString("nan-scale-%1.gguf").arg(QTest::currentDataTag()).replace(' ', '-'), g.bytes());
            kev::LoadOptions o;
            if (q4) kev::set_precision(o, "4bit");  // blocks kept as they are: still scanned
            expectError([p = path.toStdString(), o] { kev::Model::load(p, o); }, kev::ErrorCode::Format,
                        {path.toStdString(), "blk.0.ffn_up.weight': 1 non-finite block scales (NaN/Inf)"});
        }
    }
    // What the scan costs on the built-in model (a Q4_1 SmolLM2-135M): scales of every
    // block plus the norms. Printed; asserted only to be far below a load.
    void scanCostOnBuiltinModel() {
        const std::string path = kevtest::builtinModel().toStdString();
        QVERIFY2(QFile::exists(kevtest::builtinModel()), "the built-in model is installed by packaging/setup.sh");
        const auto g = kev::GgufFile::open(path);
        for (int rep = 0; rep < 2; ++rep) {  // the first pass also pages the file in
            const auto t0 = std::chrono::steady_clock::now();
            std::int64_t bad = 0, blocks = 0;
            for (const kev::GgufTensorInfo& t : g->tensors()) {
                bad += kev::ggml_count_nonfinite_scales(t.type, g->tensor_data(t), t.numel());
                blocks += t.numel() / 32;
            }
            const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
            qInfo("non-finite scan of %s (%lld 32-blocks): %.1f ms (%s)", qPrintable(kevtest::builtinModel()),
                  static_cast<long long>(blocks), ms, rep == 0 ? "cold" : "warm");
            QCOMPARE(bad, std::int64_t(0));
            if (rep == 1) QVERIFY(ms < 2000);
        }
    }

    // ---- special files and size limits ----
    void specialFilesAreRefusedBeforeOpening() {
        const QString dir = kevtest::workDir("load-hostile/special");
        const std::string fifo = (dir + "/x.gguf").toStdString();
        ::unlink(fifo.c_str());
        QCOMPARE(::mkfifo(fifo.c_str(), 0600), 0);
        expectError([fifo] { kev::GgufFile::open(fifo); }, kev::ErrorCode::Io, {fifo, "not a regular file (a FIFO)"});
        expectError([fifo] { kev::read_text_file(fifo); }, kev::ErrorCode::Io, {fifo, "not a regular file (a FIFO)"});
        expectError([] { kev::MappedFile f("/dev/zero"); }, kev::ErrorCode::Io,
                    {"/dev/zero: not a regular file (a character device)"});
        expectError([] { kev::read_text_file("/dev/zero"); }, kev::ErrorCode::Io,
                    {"/dev/zero: not a regular file (a character device)"});
        expectError([dir] { kev::read_text_file(dir.toStdString()); }, kev::ErrorCode::Io, {"not a regular file (a folder)"});
        expectError([dir] { kev::require_regular_file(dir.toStdString(), "question file"); }, kev::ErrorCode::Io,
                    {"not a regular file (a folder), so it cannot be read as a question file"});
        QCOMPARE(kev::require_regular_file(writeFile("five.txt", "12345").toStdString()), std::uint64_t(5));
        // A model folder whose config.json is a FIFO.
        const QString model = kevtest::workDir("load-hostile/fifo-config");
        const std::string cfg = (model + "/config.json").toStdString();
        ::unlink(cfg.c_str());
        QCOMPARE(::mkfifo(cfg.c_str(), 0600), 0);
        expectError([m = model.toStdString()] { kev::load_hf_config(m); }, kev::ErrorCode::Io,
                    {cfg, "not a regular file (a FIFO)"});
        // An adapter folder whose adapter_config.json is a FIFO.
        {
            TinyGguf g;
            auto m = kev::Model::load(writeFile("for-adapter.gguf", g.bytes()).toStdString(), {});
            const QString adapter = kevtest::workDir("load-hostile/fifo-adapter");
            writeFile("fifo-adapter/adapter_model.safetensors", QByteArray());
            const std::string ac = (adapter + "/adapter_config.json").toStdString();
            ::unlink(ac.c_str());
            QCOMPARE(::mkfifo(ac.c_str(), 0600), 0);
            expectError([a = adapter.toStdString(), mp = m.get()] { kev::load_lora_adapter(a, *mp); }, kev::ErrorCode::Io,
                        {ac, "not a regular file (a FIFO)"});
        }
        // "cannot read: Success" must be gone from every message.
        std::string msg;
        kev::ErrorCode code;
        QVERIFY(finishesWithin(20, [] { kev::MappedFile f("/dev/zero"); }, &msg, &code));
        QVERIFY2(msg.find("Success") == std::string::npos, msg.c_str());
    }
    void jsonFilesHaveASizeLimit() {
        const QString path = kevtest::workDir("load-hostile") + "/big.json";
        {
            QFile f(path);
            QVERIFY(f.open(QIODevice::WriteOnly | QIODevice::Truncate));
            QVERIFY(f.resize(100000000));  // sparse: costs no disk
        }
        expectError([p = path.toStdString()] { kev::read_text_file(p); }, kev::ErrorCode::Io,
                    {path.toStdString() + ": 100000000 bytes, over the 64 MiB limit for a JSON file"});
        const QString small = writeFile("small.json", QByteArray(2048, ' '));
        expectError([p = small.toStdString()] { kev::read_text_file(p, 1024, "a question file"); }, kev::ErrorCode::Io,
                    {"2048 bytes, over the 1024 bytes limit for a question file"});
        QCOMPARE(kev::read_text_file(small.toStdString(), 2048).size(), std::size_t(2048));
        QFile::remove(path);
    }

    // ---- config.json ----
    void brokenHfConfig_data() {
        QTest::addColumn<QString>("fields");  // JSON members merged over a valid config
        QTest::addColumn<QString>("expected");
        QTest::newRow("heads 7") << R"("num_attention_heads":7,"num_key_value_heads":7)"
                                 << "num_attention_heads 7 does not divide hidden_size 576";
        QTest::newRow("heads 0") << R"("num_attention_heads":0)" << "num_attention_heads 0 must be positive";
        QTest::newRow("heads 5") << R"("num_attention_heads":5,"num_key_value_heads":5)" << "num_attention_heads 5 does not divide";
        QTest::newRow("kv heads 4 of 9") << R"("num_attention_heads":9,"num_key_value_heads":4)"
                                         << "num_key_value_heads 4 does not divide num_attention_heads 9";
        QTest::newRow("hidden -576") << R"("hidden_size":-576,"head_dim":64)" << "hidden_size -576 must be positive";
        QTest::newRow("layers 0") << R"("num_hidden_layers":0)" << "num_hidden_layers 0 must be positive";
        QTest::newRow("vocab huge") << R"("vocab_size":99999999999)" << "vocab_size 99999999999 is over the limit";
        QTest::newRow("vocab beyond int64") << R"("vocab_size":18446744073709551615)" << "'vocab_size' = 18446744073709551615 is too large";
        QTest::newRow("intermediate 0") << R"("intermediate_size":0)" << "intermediate_size 0 must be positive";
        QTest::newRow("positions 0") << R"("max_position_embeddings":0)" << "max_position_embeddings 0 must be positive";
        QTest::newRow("theta 0") << R"("rope_theta":0)" << "rope_theta 0 must be a positive finite number";
        QTest::newRow("theta huge") << R"("rope_theta":1e400)" << "invalid JSON";  // nlohmann: out of range
        QTest::newRow("eps 0") << R"("rms_norm_eps":0)" << "rms_norm_eps 0 must be";
        QTest::newRow("eps -1") << R"("rms_norm_eps":-1e-5)" << "rms_norm_eps -1e-05 must be";
        QTest::newRow("eos -1") << R"("eos_token_id":-1)" << "eos_token_id -1 is not a token id of this model (0..49151)";
        QTest::newRow("bos = vocab") << R"("bos_token_id":49152)" << "bos_token_id 49152 is not a token id";
        QTest::newRow("eos list") << R"("eos_token_id":[2,70000])" << "eos_token_id 70000";
    }
    void brokenHfConfig() {
        QFETCH(QString, fields);
        QFETCH(QString, expected);
        const std::string json = R"({"model_type":"llama","hidden_size":576,"num_hidden_layers":2,"num_attention_heads":9,)"
                                 R"("num_key_value_heads":3,"intermediate_size":1536,"vocab_size":49152,)" +
                                 fields.toStdString() + "}";
        // Later duplicates win in nlohmann: the fields override the base.
        expectError([json] { kev::config_from_hf_json(json, "m/config.json"); }, kev::ErrorCode::Format,
                    {"m/config.json: ", expected.toStdString()});
    }
    void generationConfigIdsAreChecked() {
        const QString dir = kevtest::workDir("load-hostile/genconfig");
        writeFile("genconfig/config.json",
                  R"({"model_type":"llama","hidden_size":64,"num_hidden_layers":1,"num_attention_heads":4,)"
                  R"("intermediate_size":128,"vocab_size":256,"eos_token_id":2})");
        writeFile("genconfig/generation_config.json", R"({"eos_token_id":[2,-1]})");
        expectError([d = dir.toStdString()] { kev::load_hf_config(d); }, kev::ErrorCode::Format,
                    {"generation_config.json: eos_token_id -1 is not a token id of this model (0..255)"});
    }
    void tokenizerLargerThanEmbeddingIsNamed() {
        kev::ModelConfig c;
        c.source = "m/model.gguf";
        c.gguf_arch = "llama";
        c.vocab_size = 256;
        kev::check_tokenizer_fits(c, 256, "m/model.gguf");
        expectError([c] { kev::check_tokenizer_fits(c, 300, "m/tokenizer.json"); }, kev::ErrorCode::Format,
                    {"m/tokenizer.json: the tokenizer has 300 tokens but the model's embedding (m/model.gguf, "
                     "llama.vocab_size) has only 256 rows"});
    }
};

QTEST_GUILESS_MAIN(TestLoadHostile)
#include "tst_load_hostile.moc"
