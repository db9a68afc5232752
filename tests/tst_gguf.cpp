// The GGUF reader: real files decode exactly as llama.cpp's own Python reader decodes
// them, and malformed files fail with specific messages instead of crashing.
#include <QFile>
#include <QtTest>

#include <cstring>
#include <vector>

#include "kev/error.h"
#include "kev/gguf.h"
#include "kev_test_env.h"

namespace {

// A tiny GGUF writer for building well-formed and deliberately broken files.
struct Writer {
    QByteArray bytes;
    template <typename T>
    void put(T v) { bytes.append(reinterpret_cast<const char*>(&v), sizeof v); }
    void str(const QByteArray& s) { put<std::uint64_t>(s.size()); bytes.append(s); }
    void pad(int align) { while (bytes.size() % align) bytes.append('\0'); }
    void header(std::uint64_t tensors, std::uint64_t kv) {  // magic, version 3, counts
        bytes.append("GGUF");
        put<std::uint32_t>(3);
        put<std::uint64_t>(tensors);
        put<std::uint64_t>(kv);
    }
};

// One F32 tensor "w" of 4 elements, a string and an int key.
Writer validFile(std::uint64_t tensorOffset = 0, std::uint64_t dim0 = 4, std::uint32_t type = 0) {
    Writer w;
    w.header(1, 2);
    w.str("general.architecture");
    w.put<std::uint32_t>(8);
    w.str("llama");
    w.str("llama.block_count");
    w.put<std::uint32_t>(4);
    w.put<std::uint32_t>(2);
    w.str("w");
    w.put<std::uint32_t>(1);
    w.put<std::uint64_t>(dim0);
    w.put<std::uint32_t>(type);
    w.put<std::uint64_t>(tensorOffset);
    w.pad(32);
    for (float f : {1.f, -2.f, 3.5f, 0.25f}) w.put(f);
    return w;
}

QString writeFile(const QString& name, const QByteArray& bytes) {
    const QString path = kevtest::workDir("gguf") + "/" + name;
    QFile f(path);
    if (!f.open(QIODevice::WriteOnly)) return QString();
    f.write(bytes);
    return path;
}

// Expects open() to throw kev::Error with `code` and a message containing `needle`.
void expectError(const QByteArray& bytes, kev::ErrorCode code, const char* needle) {
    static int counter = 0;
    const QString path = writeFile(QString("broken-%1.gguf").arg(counter++), bytes);
    try {
        kev::GgufFile::open(path.toStdString());
        QFAIL(qPrintable(QString("no error for a file that should give: ") + needle));
    } catch (const kev::Error& e) {
        QCOMPARE(int(e.code()), int(code));
        QVERIFY2(std::strstr(e.what(), needle) != nullptr, e.what());
        QVERIFY2(std::strstr(e.what(), qPrintable(path)) != nullptr, "the message names the file");
    }
}

}  // namespace

class TestGguf : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void readsAWellFormedFile() {
        const QString path = writeFile("valid.gguf", validFile().bytes);
        const auto g = kev::GgufFile::open(path.toStdString());
        QCOMPARE(g->get_string("general.architecture").value(), std::string("llama"));
        QCOMPARE(g->get_int("llama.block_count").value(), std::int64_t(2));
        QVERIFY(!g->get_int("missing.key").has_value());
        const kev::GgufTensorInfo* t = g->find_tensor("w");
        QVERIFY(t);
        QCOMPARE(t->numel(), std::int64_t(4));
        std::vector<float> v(4);
        g->dequantize(*t, v.data());
        QCOMPARE(v, (std::vector<float>{1.f, -2.f, 3.5f, 0.25f}));
    }

    void wrongTypeAccessNamesTheKey() {
        const auto g = kev::GgufFile::open(writeFile("valid2.gguf", validFile().bytes).toStdString());
        try {
            g->get_int("general.architecture");
            QFAIL("no error");
        } catch (const kev::Error& e) {
            QVERIFY2(std::strstr(e.what(), "'general.architecture' is not an integer"), e.what());
        }
    }

    // A vocabulary is read once and handed out without a copy; an element that is broken
    // is named by its index.
    void stringArraysAreReadOnceAndTheirBadElementIsNamed() {
        auto arrayFile = [](std::uint64_t claimed, const std::vector<QByteArray>& items, std::uint64_t lastLength) {
            Writer w;
            w.header(0, 1);
            w.str("tokenizer.ggml.tokens");
            w.put<std::uint32_t>(9);  // array
            w.put<std::uint32_t>(8);  // of strings
            w.put<std::uint64_t>(claimed);
            for (std::size_t i = 0; i < items.size(); ++i) {
                w.put<std::uint64_t>(i + 1 == items.size() ? lastLength : std::uint64_t(items[i].size()));
                w.bytes.append(items[i]);
            }
            return w.bytes;
        };
        const std::vector<QByteArray> items = {"<s>", "hello", QByteArray("a\0b", 3), ""};
        QByteArray whole = arrayFile(4, items, 0);
        while (whole.size() % 32) whole.append('\0');  // the (empty) data section starts aligned
        const auto g = kev::GgufFile::open(writeFile("strings.gguf", whole).toStdString());
        const std::vector<std::string>* tokens = g->get_strings("tokenizer.ggml.tokens");
        QVERIFY(tokens);
        QCOMPARE(*tokens, (std::vector<std::string>{"<s>", "hello", std::string("a\0b", 3), ""}));
        QCOMPARE(g->get_strings("tokenizer.ggml.tokens"), tokens);  // the same vector, not a copy
        QVERIFY(!g->get_strings("tokenizer.ggml.merges"));
        try {
            g->get_ints("tokenizer.ggml.tokens");
            QFAIL("no error");
        } catch (const kev::Error& e) {
            QVERIFY2(std::strstr(e.what(), "'tokenizer.ggml.tokens' is not an array of integers"), e.what());
        }

        // The third string runs past the end of the file; the fourth's length is absurd.
        std::vector<QByteArray> cut = items;
        cut.resize(3);
        QByteArray truncated = arrayFile(4, cut, 3);
        truncated.chop(1);
        expectError(truncated, kev::ErrorCode::Format, "unexpected end of file reading metadata key 'tokenizer.ggml.tokens'[2]");
        expectError(arrayFile(4, items, std::uint64_t(1) << 40), kev::ErrorCode::Format,
                    "metadata key 'tokenizer.ggml.tokens'[3]: string length 1099511627776 is absurd");
    }

    void malformedFilesGiveSpecificErrors() {
        using kev::ErrorCode;
        QByteArray b = validFile().bytes;
        b[0] = 'X';
        expectError(b, ErrorCode::Format, "bad magic");

        b = validFile().bytes;
        b[4] = 9;
        expectError(b, ErrorCode::Format, "GGUF version 9 is not supported");

        expectError(validFile().bytes.left(60), ErrorCode::Format, "unexpected end of file");
        expectError(validFile().bytes.left(30), ErrorCode::Format, "does not fit");

        // A string length far beyond the file.
        Writer w;
        w.header(0, 1);
        w.put<std::uint64_t>(std::uint64_t(1) << 40);
        w.bytes.append(QByteArray(64, '\0'));
        expectError(w.bytes, ErrorCode::Format, "is absurd");

        // A metadata count that cannot fit: must fail before allocating.
        Writer c;
        c.header(0, std::uint64_t(1) << 60);
        expectError(c.bytes, ErrorCode::Format, "does not fit");

        // Tensor data beyond the end of the file.
        expectError(validFile(4096).bytes, ErrorCode::Format, "lies outside the file");
        // Unaligned tensor offset.
        expectError(validFile(4).bytes, ErrorCode::Format, "is not aligned");
        // A quantized type whose row is not a whole number of blocks.
        expectError(validFile(0, 4, 2).bytes, ErrorCode::Format, "not a multiple of the Q4_0 block size");
        // A type Kev does not read is named.
        expectError(validFile(0, 4, 99).bytes, ErrorCode::Unsupported, "ggml type 99");
        // Truncated data: drop the last float.
        expectError(validFile().bytes.chopped(4), ErrorCode::Format, "truncated or corrupt");
    }

    void decodesTheBuiltinModelExactlyAsTheReference() {
        const auto g = kev::GgufFile::open(kevtest::builtinModel().toStdString());
        // One tensor of each type the built-in file uses: Q8_0, Q4_1, F32.
        const QStringList names{"token_embd.weight", "blk.0.attn_q.weight", "blk.0.ffn_down.weight",
                                "blk.0.attn_norm.weight"};
        const QString out = kevtest::workDir("gguf-ref");
        const QByteArray listing =
            kevtest::runReference("gguf_dequant.py", QStringList{kevtest::builtinModel(), out} + names);
        QVERIFY2(!listing.isEmpty(), "the reference script failed");
        for (const QString& name : names) {
            const kev::GgufTensorInfo* t = g->find_tensor(name.toStdString());
            QVERIFY(t);
            std::vector<float> mine(static_cast<std::size_t>(t->numel()));
            g->dequantize(*t, mine.data());
            QFile ref(out + "/" + name + ".f32");
            QVERIFY(ref.open(QIODevice::ReadOnly));
            const QByteArray theirs = ref.readAll();
            QCOMPARE(theirs.size(), qsizetype(mine.size() * sizeof(float)));
            // Both decode the same bits with the same arithmetic: exact equality.
            QVERIFY2(std::memcmp(theirs.constData(), mine.data(), theirs.size()) == 0,
                     qPrintable(name + " differs from the reference decoding"));
        }
    }
};

QTEST_GUILESS_MAIN(TestGguf)
#include "tst_gguf.moc"
