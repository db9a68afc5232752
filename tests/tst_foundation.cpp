// The foundation: set-up placed the built-in model, the engine links libtorch and
// computes, and the command-line tools start.
#include <QCryptographicHash>
#include <QFile>
#include <QtTest>

#include <ATen/ATen.h>

#include "kev/engine_info.h"
#include "kev/error.h"
#include "kev/gguf.h"
#include "kev_test_env.h"

class TestFoundation : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void builtinModelIsInPlaceWithItsChecksum() {
        const QString path = QString::fromStdString(kev::builtin_model_path());
        QCOMPARE(path, kevtest::builtinModel());
        QFile f(path);
        QVERIFY2(f.open(QIODevice::ReadOnly), qPrintable("cannot open " + path));
        QCryptographicHash h(QCryptographicHash::Sha256);
        QVERIFY(h.addData(&f));
        QCOMPARE(h.result().toHex(),
                 QByteArray("b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"));
    }

    void engineReportsLibtorch2() {
        const kev::EngineInfo info = kev::engine_info();
        QVERIFY2(info.torch_version.rfind("2.", 0) == 0, info.torch_version.c_str());
        QVERIFY(info.cpu_threads >= 1);
        QVERIFY(!info.cpu_capability.empty());
    }

    // Kev's kernels split their work with ATen's parallel_for, which only uses threads
    // in code built with OpenMP. Built without it, decode silently ran on one core at
    // half speed; this holds the build to every thread libtorch has.
    void engineKernelsUseEveryThread() {
        QCOMPARE(kev::kernel_threads(), kev::engine_info().cpu_threads);
    }

    void engineRunsATensorOperation() {
        // [[1,2],[3,4]] @ [[5,6],[7,8]] = [[19,22],[43,50]]
        const at::Tensor a = at::tensor({1.f, 2.f, 3.f, 4.f}).reshape({2, 2});
        const at::Tensor b = at::tensor({5.f, 6.f, 7.f, 8.f}).reshape({2, 2});
        const at::Tensor c = at::matmul(a, b).contiguous();
        const float* p = c.data_ptr<float>();
        QCOMPARE(p[0], 19.f);
        QCOMPARE(p[1], 22.f);
        QCOMPARE(p[2], 43.f);
        QCOMPARE(p[3], 50.f);
    }

    void builtinModelHeaderReads() {
        const auto g = kev::GgufFile::open(kev::builtin_model_path());
        QCOMPARE(g->version(), 3u);
        QCOMPARE(g->get_string("general.architecture").value_or(""), std::string("llama"));
        QCOMPARE(g->get_int("llama.block_count").value_or(0), std::int64_t(30));
        QCOMPARE(g->tensors().size(), std::size_t(272));
        QVERIFY(g->find_tensor("token_embd.weight") != nullptr);
    }

    void cliInfoDescribesTheBuiltinModel() {
        const auto r = kevtest::runProcess(kevtest::binDir() + "/kev-cli", {"info"}, 120000);
        QVERIFY2(r.finished && r.exitCode == 0, r.err.constData());
        QVERIFY2(r.out.contains("architecture llama"), r.out.constData());
    }

    void cliRejectsUnknownArgumentsWithUsageCode() {
        const auto r = kevtest::runProcess(kevtest::binDir() + "/kev-cli", {"--no-such-flag"}, 120000);
        QVERIFY(r.finished);
        QCOMPARE(r.exitCode, 2);
        QVERIFY2(r.err.contains("unknown option '--no-such-flag'"), r.err.constData());
    }

    void cliReportsAMissingModelSpecifically() {
        const auto r = kevtest::runProcess(kevtest::binDir() + "/kev-cli",
                                           {"info", "--model", "/nonexistent/model.gguf"}, 120000);
        QVERIFY(r.finished);
        QCOMPARE(r.exitCode, 1);
        QVERIFY2(r.err.contains("/nonexistent/model.gguf: no such file or folder"), r.err.constData());
    }
};

QTEST_GUILESS_MAIN(TestFoundation)
#include "tst_foundation.moc"
