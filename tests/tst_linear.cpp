// The dense linear kernels (kev/cpu_kernels.h): every kernel against a double-precision
// reference; the fixed-order FMA family (avx512, avx2, scalar) bit for bit against its
// scalar twin; and batch invariance on every kernel: a row's output is the same bits
// whatever the other rows of the call and however many there are. A kernel this CPU
// lacks is reported as not run, by name, and forcing it is refused.
#include <QtTest>

#include <cmath>

#include <ATen/ATen.h>

#include "kev/buffer_pool.h"
#include "kev/cpu_kernels.h"
#include "kev/cuda_attention.h"
#include "kev/error.h"
#include "kev/quant.h"
#include "kev/weights.h"

namespace {

// Largest |y - ref| / (one step of y's dtype at |ref|), over all elements.
double worst_in_steps(const at::Tensor& y, const at::Tensor& ref) {
    const int bits = y.scalar_type() == at::kBFloat16 ? 7 : y.scalar_type() == at::kHalf ? 10 : 23;
    const at::Tensor r = ref.to(at::kFloat).abs().clamp_min(1e-3);
    const at::Tensor step = at::exp2(at::floor(at::log2(r)) - bits);
    return ((y.to(at::kDouble) - ref.to(at::kDouble)).abs() / step).max().item<double>();
}

const kev::Bf16Kernel kAllBf16[] = {kev::Bf16Kernel::Amx,  kev::Bf16Kernel::Avx512Bf16, kev::Bf16Kernel::Avx512,
                                   kev::Bf16Kernel::Avx2, kev::Bf16Kernel::Scalar,     kev::Bf16Kernel::Torch};

bool needsWholeSlices(kev::Bf16Kernel k) { return k == kev::Bf16Kernel::Amx || k == kev::Bf16Kernel::Avx512Bf16; }

}  // namespace

class TestLinear : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void cleanup() {
        kev::set_bf16_kernel(kev::Bf16Kernel::Auto);
        kev::set_isa_limit(kev::cpu_isa());
        kev::set_buffer_pool_mode(kev::BufferPoolMode::On);
    }

    void bf16KernelMatchesTheReference_data() {
        QTest::addColumn<int>("kernel");
        QTest::addColumn<int>("rows");
        QTest::addColumn<int>("outputs");
        QTest::addColumn<int>("inputs");
        for (kev::Bf16Kernel k : kAllBf16)
            for (int rows : {1, 2, 3, 4, 16, 17, 40})
                for (auto [o, i] : {std::pair{32, 32}, {40, 96}, {1000, 896}, {7, 64}, {5, 24}}) {
                    if (needsWholeSlices(k) && i % 32 != 0) continue;  // those kernels take whole 32-input slices
                    QTest::addRow("%s M=%d O=%d I=%d", kev::to_string(k), rows, o, i) << static_cast<int>(k) << rows << o << i;
                }
    }
    // Each output is the reference rounded to bf16, give or take one bf16 step (fp32
    // sums in another order may round the other way).
    void bf16KernelMatchesTheReference() {
        QFETCH(int, kernel);
        QFETCH(int, rows);
        QFETCH(int, outputs);
        QFETCH(int, inputs);
        const auto k = static_cast<kev::Bf16Kernel>(kernel);
        if (!kev::bf16_kernel_available(k)) QSKIP(qPrintable(QString("NOT RUN: %1 (this CPU lacks it)").arg(kev::to_string(k))));
        kev::set_bf16_kernel(k);
        at::manual_seed(rows * 1000 + outputs + inputs);
        kev::Linear lin;
        lin.weight = at::randn({outputs, inputs}).to(at::kBFloat16);
        if (rows % 2 == 1) lin.bias = at::randn({outputs}).to(at::kBFloat16);
        const at::Tensor x = at::randn({rows, inputs}).to(at::kBFloat16);
        const at::Tensor y = lin(x);
        QCOMPARE(y.scalar_type(), at::kBFloat16);
        QCOMPARE(y.sizes().vec(), (std::vector<std::int64_t>{rows, outputs}));
        at::Tensor ref = at::matmul(x.to(at::kDouble), lin.weight.to(at::kDouble).t());
        if (lin.bias.defined()) ref = ref + lin.bias.to(at::kDouble);
        const double worst = worst_in_steps(y, ref);
        QVERIFY2(worst <= 1.0, qPrintable(QStringLiteral("worst error %1 bf16 steps").arg(worst)));
    }

    // The FMA family's arithmetic (linear_dense.h) is one specification: AVX-512 keeps
    // the 16 lanes in one register, AVX2 in two, the twin in an array; the bits agree,
    // for fp32, bf16 and fp16 weights, input counts that are not whole 16s, and a bias.
    // 7 and 11 rows: AVX2's 3-row tiles with a 1- and a 2-row remainder, AVX-512's 4-row
    // tiles with a 3-row one; 2200 inputs: long rows (137 whole 16s) and a tail of 8.
    void fmaFamilyIsTheScalarTwinBitForBit_data() {
        QTest::addColumn<int>("dtype");
        QTest::addColumn<int>("inputs");
        for (auto [dt, name] : {std::pair{at::kFloat, "fp32"}, {at::kBFloat16, "bf16"}, {at::kHalf, "fp16"}})
            for (int i : {8, 37, 64, 200, 2200})
                QTest::addRow("%s I=%d", name, i) << static_cast<int>(dt) << i;
    }
    void fmaFamilyIsTheScalarTwinBitForBit() {
        QFETCH(int, dtype);
        QFETCH(int, inputs);
        const auto dt = static_cast<at::ScalarType>(dtype);
        at::manual_seed(inputs + dtype);
        kev::Linear lin;
        lin.weight = at::randn({67, inputs}).to(dt);
        lin.bias = at::randn({67}).to(dt);
        for (int rows : {7, 11}) {
            const at::Tensor x = at::randn({rows, inputs}).to(dt);
            auto run = [&](kev::Isa isa) {
                kev::set_isa_limit(isa);
                kev::set_bf16_kernel(isa == kev::Isa::Avx512 ? kev::Bf16Kernel::Avx512
                                     : isa == kev::Isa::Avx2 ? kev::Bf16Kernel::Avx2
                                                             : kev::Bf16Kernel::Scalar);
                return lin(x);
            };
            const at::Tensor twin = run(kev::Isa::Scalar);
            at::Tensor ref = at::matmul(x.to(at::kDouble), lin.weight.to(at::kDouble).t()) + lin.bias.to(at::kDouble);
            // Against the reference, relative to sum |x w| (cancellation makes |ref| a poor
            // yardstick): fp32 sums round at ~1e-7, outputs in bf16 at 2^-9, fp16 at 2^-12.
            const at::Tensor mag = at::matmul(x.to(at::kDouble).abs(), lin.weight.to(at::kDouble).abs().t()) +
                                   lin.bias.to(at::kDouble).abs() + 1e-6;
            const double err = ((twin.to(at::kDouble) - ref).abs() / mag).max().item<double>();
            const double bound = dt == at::kFloat ? 1e-6 : dt == at::kBFloat16 ? 4e-3 : 5e-4;
            QVERIFY2(err <= bound, qPrintable(QString("the scalar twin is %1 off the reference at %2 rows").arg(err).arg(rows)));
            int ran = 0;
            for (kev::Isa isa : {kev::Isa::Avx2, kev::Isa::Avx512}) {
                if (!kev::isa_supported(isa)) {
                    qWarning("NOT RUN: dense %s (this CPU lacks it)", kev::to_string(isa));
                    continue;
                }
                const at::Tensor y = run(isa);
                QVERIFY2(at::equal(y, twin), qPrintable(QString("%1 differs from the scalar twin at %2 rows").arg(kev::to_string(isa)).arg(rows)));
                ++ran;
            }
            qInfo("%d SIMD form(s) compared with the twin at %d rows", ran, rows);
        }
    }

    // Batch invariance, the ground of packed isolation: rows of a 40-row call equal the
    // same rows computed alone, in pairs, threes and fours and in a 17-row call, on every kernel.
    void rowsAreIndependentOnEveryKernel_data() {
        QTest::addColumn<int>("kernel");
        QTest::addColumn<int>("dtype");
        for (kev::Bf16Kernel k : kAllBf16)
            if (k != kev::Bf16Kernel::Torch) QTest::addRow("bf16 %s", kev::to_string(k)) << static_cast<int>(k) << int(at::kBFloat16);
        for (kev::Isa isa : {kev::Isa::Scalar, kev::Isa::Avx2, kev::Isa::Avx512})
            for (auto [dt, name] : {std::pair{at::kFloat, "fp32"}, {at::kHalf, "fp16"}})
                QTest::addRow("%s %s", name, kev::to_string(isa)) << -1 - static_cast<int>(isa) << static_cast<int>(dt);
    }
    void rowsAreIndependentOnEveryKernel() {
        QFETCH(int, kernel);
        QFETCH(int, dtype);
        if (kernel >= 0) {
            const auto k = static_cast<kev::Bf16Kernel>(kernel);
            if (!kev::bf16_kernel_available(k)) QSKIP(qPrintable(QString("NOT RUN: %1 (this CPU lacks it)").arg(kev::to_string(k))));
            kev::set_bf16_kernel(k);
        } else {
            const auto isa = static_cast<kev::Isa>(-1 - kernel);
            if (!kev::isa_supported(isa)) QSKIP(qPrintable(QString("NOT RUN: dense %1 (this CPU lacks it)").arg(kev::to_string(isa))));
            kev::set_isa_limit(isa);
        }
        const auto dt = static_cast<at::ScalarType>(dtype);
        at::manual_seed(7);
        kev::Linear lin;
        // 203 outputs: whole tiles, and tails of fewer outputs than a tile, in every call.
        lin.weight = at::randn({203, 896}).to(dt);
        lin.bias = at::randn({203}).to(dt);
        const at::Tensor x = at::randn({40, 896}).to(dt);
        const at::Tensor all = lin(x);
        for (int r : {0, 5, 16, 39}) QVERIFY2(at::equal(lin(x.narrow(0, r, 1)), all.narrow(0, r, 1)), "a row alone differs");
        QVERIFY2(at::equal(lin(x.narrow(0, 3, 17)), all.narrow(0, 3, 17)), "a 17-row call differs");
        for (int r = 0; r + 3 <= 40; r += 3) QVERIFY(at::equal(lin(x.narrow(0, r, 3)), all.narrow(0, r, 3)));
        // Pairs, fours and sevens: the decode shapes, where the kernels read one or two weight
        // rows a pass, or tile the rows with a remainder.
        for (int n : {2, 4, 7})
            for (int r = 0; r + n <= 40; r += n) QVERIFY(at::equal(lin(x.narrow(0, r, n)), all.narrow(0, r, n)));
    }

    // A kernel or family the CPU lacks is refused by name, never quietly replaced.
    void forcingWhatTheCpuLacksIsRefused() {
        int refused = 0;
        for (kev::Bf16Kernel k : kAllBf16) {
            if (kev::bf16_kernel_available(k)) continue;
            QVERIFY_THROWS_EXCEPTION(kev::Error, kev::set_bf16_kernel(k));
            ++refused;
        }
        for (kev::Isa isa : {kev::Isa::Avx2, kev::Isa::Avx512, kev::Isa::Amx}) {
            if (kev::isa_supported(isa)) continue;
            QVERIFY_THROWS_EXCEPTION(kev::Error, kev::set_isa_limit(isa));
            ++refused;
        }
        QVERIFY_THROWS_EXCEPTION(kev::Error, kev::parse_isa("sse9"));
        QVERIFY_THROWS_EXCEPTION(kev::Error, kev::parse_bf16_kernel("fast"));
        qInfo("CPU family %s; %d kernel(s) or families refused as absent", kev::to_string(kev::cpu_isa()), refused);
    }

    void everyPathIsNamed() {
        const auto paths = kev::kernel_paths();
        QStringList names;
        for (const auto& [path, kernel] : paths) {
            QVERIFY2(!kernel.empty(), path.c_str());
            names << QString::fromStdString(path);
        }
        for (const char* p : {"bf16 linear", "fp32 linear", "4-bit decode", "4-bit prompt", "attention (decode)",
                              "4-bit on CUDA", "K-quant kept blocks", "Q8_0 kept blocks"})
            QVERIFY2(names.contains(p), p);
        // The CUDA kernels are named as built where nvcc was found at configure time.
        for (const auto& [path, kernel] : paths)
            if (path == "4-bit on CUDA")
                QCOMPARE(QString::fromStdString(kernel).startsWith("kev fused kernels"), kev::quant_cuda_kernels_built());
        kev::set_isa_limit(kev::Isa::Scalar);
        for (const auto& [path, kernel] : kev::kernel_paths())
            if (path == "bf16 linear" || path == "fp32 linear" || path == "4-bit decode" || path == "K-quant kept blocks" ||
                path == "Q8_0 kept blocks")
                QVERIFY2(QString::fromStdString(kernel).contains("scalar"), qPrintable(QString::fromStdString(path + ": " + kernel)));
    }

    // The buffer pool (kev/buffer_pool.h): within a scope a freed large buffer serves the
    // next request of its size (the same memory, counted as reused); small ones and those
    // outside every scope are malloc's; the last scope to close gives everything back.
    void bufferPoolReusesLargeBuffersWithinAScope() {
        kev::set_buffer_pool_mode(kev::BufferPoolMode::On);  // whatever KEV_BUFFER_POOL says
        const kev::BufferPoolStats before = kev::buffer_pool_stats();
        QCOMPARE(before.open_scopes, 0);
        QCOMPARE(before.kept_bytes, std::int64_t{0});
        {
            const kev::BufferPoolScope outer;
            const void* first = nullptr;
            {
                const kev::BufferPoolScope inner;  // nested, as Model::forward inside a run
                const at::Tensor a = at::empty({1 << 18}, at::kFloat);  // 1 MiB
                first = a.data_ptr();
            }
            const kev::BufferPoolStats kept = kev::buffer_pool_stats();
            QCOMPARE(kept.open_scopes, 1);
            QCOMPARE(kept.kept_bytes, std::int64_t{1} << 20);
            QCOMPARE(kept.fresh, before.fresh + 1);
            // A little smaller still fits the kept block; it is not copied, it is lent again.
            const at::Tensor b = at::empty({(1 << 18) - 1000}, at::kFloat);
            QCOMPARE(static_cast<const void*>(b.data_ptr()), first);
            const kev::BufferPoolStats lent = kev::buffer_pool_stats();
            QCOMPARE(lent.reused, before.reused + 1);
            QCOMPARE(lent.kept_bytes, std::int64_t{0});
            QCOMPARE(lent.lent_bytes, std::int64_t{1} << 20);
            // Twice the size does not take it (an eighth to spare at most), nor does a small one.
            const at::Tensor big = at::empty({1 << 19}, at::kFloat);
            const at::Tensor small = at::empty({1000}, at::kFloat);
            QVERIFY(big.data_ptr() != b.data_ptr());
            QCOMPARE(kev::buffer_pool_stats().fresh, before.fresh + 2);
            QCOMPARE(kev::buffer_pool_stats().lent_bytes, std::int64_t{3} << 20);
        }
        const kev::BufferPoolStats after = kev::buffer_pool_stats();
        QCOMPARE(after.open_scopes, 0);
        QCOMPARE(after.kept_bytes, std::int64_t{0});
        QCOMPARE(after.lent_bytes, std::int64_t{0});
        // Outside every scope nothing is lent or kept.
        { const at::Tensor c = at::empty({1 << 18}, at::kFloat); }
        QCOMPARE(kev::buffer_pool_stats().fresh, after.fresh);
        QCOMPARE(kev::buffer_pool_stats().kept_bytes, std::int64_t{0});
        // A tensor lent within a scope and freed after it goes back to the system.
        at::Tensor survivor;
        {
            const kev::BufferPoolScope scope;
            survivor = at::empty({1 << 18}, at::kFloat);
        }
        QCOMPARE(kev::buffer_pool_stats().lent_bytes, std::int64_t{1} << 20);
        survivor = at::Tensor();
        QCOMPARE(kev::buffer_pool_stats().lent_bytes, std::int64_t{0});
        QCOMPARE(kev::buffer_pool_stats().kept_bytes, std::int64_t{0});
    }

    // Off: nothing is lent; poison: every buffer lent is all 0xff bytes (NaN), fresh or kept.
    void bufferPoolModes() {
        QCOMPARE(kev::parse_buffer_pool_mode("off"), kev::BufferPoolMode::Off);
        QCOMPARE(kev::parse_buffer_pool_mode("poison"), kev::BufferPoolMode::Poison);
        QVERIFY_THROWS_EXCEPTION(kev::Error, kev::parse_buffer_pool_mode("sometimes"));
        const kev::BufferPoolScope scope;
        kev::set_buffer_pool_mode(kev::BufferPoolMode::Off);
        const std::int64_t fresh = kev::buffer_pool_stats().fresh;
        { const at::Tensor a = at::empty({1 << 18}, at::kFloat); }
        QCOMPARE(kev::buffer_pool_stats().fresh, fresh);
        QCOMPARE(kev::buffer_pool_stats().kept_bytes, std::int64_t{0});
        kev::set_buffer_pool_mode(kev::BufferPoolMode::Poison);
        const void* first = nullptr;
        for (int round = 0; round < 2; ++round) {  // fresh, then kept after being written
            at::Tensor a = at::empty({1 << 18}, at::kFloat);
            if (round == 0) first = a.data_ptr();
            else QCOMPARE(static_cast<const void*>(a.data_ptr()), first);
            QVERIFY(at::isnan(a).all().item<bool>());
            QVERIFY((a.view(at::kInt) == -1).all().item<bool>());
            a.fill_(1.0f);
        }
        // Poison lends small buffers too (the tiny test models' are all small).
        const std::int64_t lent = kev::buffer_pool_stats().lent_bytes;
        const at::Tensor small = at::empty({10}, at::kFloat);
        QCOMPARE(kev::buffer_pool_stats().lent_bytes, lent + 4096);
        QVERIFY(at::isnan(small).all().item<bool>());
    }

    // KEV_CUDA_SDPA: "auto" leaves libtorch's choice; a list allows exactly the backends
    // named; an unknown name or an empty list is refused by name, not ignored.
    void cudaAttentionChoiceIsParsed() {
        QVERIFY(kev::parse_cuda_attention_choice("").automatic);
        QVERIFY(kev::parse_cuda_attention_choice("auto").automatic);
        const auto c = kev::parse_cuda_attention_choice("efficient,math");
        QVERIFY(!c.automatic);
        QVERIFY(c.efficient && c.math && !c.flash && !c.cudnn);
        const auto d = kev::parse_cuda_attention_choice("cudnn");
        QVERIFY(d.cudnn && !d.efficient && !d.math && !d.flash);
        for (const char* bad : {"fast", "efficient,", ",", "math,,cudnn", "math,cudnn,xla", " math"}) {
            try {
                (void)kev::parse_cuda_attention_choice(bad);
                QFAIL(bad);
            } catch (const kev::Error& e) {
                QCOMPARE(e.code(), kev::ErrorCode::InvalidArgument);
                QVERIFY2(std::string(e.what()).find("valid: auto") != std::string::npos, e.what());
            }
        }
        qputenv("KEV_CUDA_SDPA", "efficient,math");
        QVERIFY(QString::fromStdString(kev::cuda_attention_description()).contains("limited to efficient, math"));
        qputenv("KEV_CUDA_SDPA", "flashy");
        QVERIFY(QString::fromStdString(kev::cuda_attention_description()).startsWith("invalid: KEV_CUDA_SDPA"));
        qunsetenv("KEV_CUDA_SDPA");
        QVERIFY(QString::fromStdString(kev::cuda_attention_description()).contains("libtorch's choice"));
    }
};

QTEST_GUILESS_MAIN(TestLinear)
#include "tst_linear.moc"
