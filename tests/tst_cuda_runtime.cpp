// libtorch's CUDA libraries are opened at run time, never linked (kev_torch_cpu in the
// top-level CMakeLists.txt): a process that never uses a GPU does not load cuBLAS, cuDNN
// and the rest, and where CUDA is wanted they open on demand, with Kev's CUDA module.
#include <QFile>
#include <QtTest>

#include <dlfcn.h>

#include <ATen/ATen.h>

#include "kev/engine_info.h"
#include "kev/error.h"
#include "kev/quant.h"
#include "kev/weights.h"

namespace {

// Whether a shared object whose file name starts with `name` is mapped in this process.
bool mapped(const QByteArray& name) {
    QFile maps(QStringLiteral("/proc/self/maps"));
    if (!maps.open(QIODevice::ReadOnly)) return false;
    for (const QByteArray& line : maps.readAll().split('\n')) {
        const int slash = line.lastIndexOf('/');
        if (slash >= 0 && line.mid(slash + 1).startsWith(name)) return true;
    }
    return false;
}

bool driver_present() { return ::dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL) != nullptr; }

}  // namespace

class TestCudaRuntime : public QObject {
    Q_OBJECT
private Q_SLOTS:
    // The functions run in this order: the first two before anything opens the libraries.
    void cpuWorkLoadsNoCudaLibrary() {
        QVERIFY(mapped("libtorch_cpu.so"));
        kev::Linear lin;
        lin.weight = at::randn({64, 96}).to(at::kBFloat16);
        const at::Tensor y = lin(at::randn({3, 96}).to(at::kBFloat16));
        QCOMPARE(y.size(1), 64);
        for (const char* lib : {"libtorch_cuda.so", "libcublas", "libcudnn", "libnccl", "libkev_cuda.so"})
            QVERIFY2(!mapped(lib), lib);
    }

    // engine_info() opens them only where NVIDIA's driver is, and says what it did.
    void engineInfoOpensThemOnlyWithADriver() {
        const kev::EngineInfo info = kev::engine_info();
        QVERIFY(!info.cuda_libraries.empty());
        if (!driver_present()) {
            QVERIFY2(info.cuda_libraries.find("no NVIDIA driver") != std::string::npos, info.cuda_libraries.c_str());
            QVERIFY(!info.cuda_available);
            QVERIFY(!mapped("libtorch_cuda.so"));
            QVERIFY(!kev::cuda_kernels_loaded());
            return;
        }
        QVERIFY2(info.cuda_libraries.find("loaded") != std::string::npos, info.cuda_libraries.c_str());
        QVERIFY(mapped("libtorch_cuda.so"));
        QCOMPARE(kev::cuda_kernels_loaded(), kev::quant_cuda_kernels_built());
    }

    // The opening itself, on every machine: without a driver the libraries still load,
    // libtorch then knows its CUDA backend and reports no device, and Kev's module comes
    // with them in builds that have it. A CUDA request fails with a clear error.
    void librariesOpenOnEveryMachine() {
        QVERIFY2(kev::open_cuda_libraries_without_driver(), kev::engine_info().cuda_libraries.c_str());
        QVERIFY(mapped("libtorch_cuda.so"));
        QCOMPARE(kev::cuda_kernels_loaded(), kev::quant_cuda_kernels_built());
        QCOMPARE(mapped("libkev_cuda.so"), kev::quant_cuda_kernels_built());
        const kev::EngineInfo info = kev::engine_info();
        QCOMPARE(info.cuda_available, driver_present() && info.cuda_device_count > 0);
        if (info.cuda_available) return;
        // CUDA's kernels are registered (the backend is known) but no device answers.
        bool threw = false;
        try {
            (void)at::empty({4}, at::TensorOptions().device(at::kCUDA, 0));
        } catch (const std::exception&) {
            threw = true;
        }
        QVERIFY(threw);
        if (kev::quant_cuda_kernels_built()) {
            kev::QuantMatrix q;
            q.format = kev::QuantFormat::Q4_0;
            q.rows = 16;
            q.cols = 32;
            q.block = 32;
            q.codes.assign(16 * 16, 0);
            q.scales.assign(16, 0x3C00);
            try {
                (void)kev::quant_to_cuda(q);
                QFAIL("quant_to_cuda ran without a CUDA device");
            } catch (const kev::Error& e) {
                QVERIFY2(std::string(e.what()).find("no CUDA device") != std::string::npos, e.what());
            }
        }
    }
};

QTEST_GUILESS_MAIN(TestCudaRuntime)
#include "tst_cuda_runtime.moc"
