// The bf16 linear kernels (AMX tiles, AVX512-BF16, libtorch) against an fp32
// reference: every output must be the reference rounded to bf16, give or take one bf16
// step (fp32 sums in a different order may round the other way). Shapes cover one
// decode row up to prefill blocks past 16 rows, output counts that are not a multiple
// of the 16-row tiles, and a bias. Each requested kernel must be correct whatever the
// CPU has: a kernel the CPU lacks falls back to the next, and that is checked too.
#include <QtTest>

#include <cmath>

#include <ATen/ATen.h>

#include "kev/cpu_kernels.h"
#include "kev/weights.h"

namespace {

// Largest |y - ref| / (one bf16 step at |ref|), over all elements.
double worst_in_bf16_steps(const at::Tensor& y, const at::Tensor& ref) {
    const at::Tensor r = ref.to(at::kFloat).abs().clamp_min(1e-3);
    const at::Tensor step = at::exp2(at::floor(at::log2(r)) - 7);  // bf16: 8 significant bits
    return ((y.to(at::kFloat) - ref).abs() / step).max().item<double>();
}

}  // namespace

class TestLinear : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void cleanup() { kev::set_bf16_kernel(kev::Bf16Kernel::Auto); }

    void kernel_matches_fp32_reference_data() {
        QTest::addColumn<int>("kernel");
        QTest::addColumn<int>("rows");
        QTest::addColumn<int>("outputs");
        QTest::addColumn<int>("inputs");
        QTest::addColumn<bool>("bias");
        const std::pair<kev::Bf16Kernel, const char*> kernels[] = {
            {kev::Bf16Kernel::Amx, "amx"}, {kev::Bf16Kernel::Avx512, "avx512"}, {kev::Bf16Kernel::Torch, "torch"}};
        for (const auto& [k, name] : kernels)
            for (int rows : {1, 3, 4, 16, 17, 40})
                for (auto [o, i] : {std::pair{32, 32}, {40, 96}, {1000, 896}, {7, 64}})
                    QTest::addRow("%s M=%d O=%d I=%d", name, rows, o, i)
                        << static_cast<int>(k) << rows << o << i << (rows % 2 == 1);
    }
    void kernel_matches_fp32_reference() {
        QFETCH(int, kernel);
        QFETCH(int, rows);
        QFETCH(int, outputs);
        QFETCH(int, inputs);
        QFETCH(bool, bias);
        kev::set_bf16_kernel(static_cast<kev::Bf16Kernel>(kernel));
        at::manual_seed(rows * 1000 + outputs + inputs);
        kev::Linear lin;
        lin.weight = at::randn({outputs, inputs}).to(at::kBFloat16);
        if (bias) lin.bias = at::randn({outputs}).to(at::kBFloat16);
        const at::Tensor x = at::randn({rows, inputs}).to(at::kBFloat16);
        const at::Tensor y = lin(x);
        QCOMPARE(y.scalar_type(), at::kBFloat16);
        QCOMPARE(y.size(0), static_cast<std::int64_t>(rows));
        QCOMPARE(y.size(1), static_cast<std::int64_t>(outputs));
        at::Tensor ref = at::matmul(x.to(at::kDouble), lin.weight.to(at::kDouble).t());
        if (bias) ref = ref + lin.bias.to(at::kDouble);
        const double worst = worst_in_bf16_steps(y, ref.to(at::kFloat));
        QVERIFY2(worst <= 1.0, qPrintable(QStringLiteral("worst error %1 bf16 steps").arg(worst)));
    }

    // A row's output must not depend on the other rows of the call (the isolation of
    // packed cards rests on it): row r alone equals row r within a 16-row call.
    void rows_are_independent() {
        for (kev::Bf16Kernel k : {kev::Bf16Kernel::Amx, kev::Bf16Kernel::Avx512}) {
            kev::set_bf16_kernel(k);
            at::manual_seed(7);
            kev::Linear lin;
            lin.weight = at::randn({96, 896}).to(at::kBFloat16);
            const at::Tensor x = at::randn({16, 896}).to(at::kBFloat16);
            const at::Tensor all = lin(x);
            for (int r : {0, 5, 15}) QVERIFY(at::equal(lin(x.narrow(0, r, 1)), all.narrow(0, r, 1)));
        }
    }

    void availability_is_reported() {
        QVERIFY(kev::bf16_kernel_available(kev::Bf16Kernel::Torch));
        qInfo("AMX %s, AVX512-BF16 %s", kev::bf16_kernel_available(kev::Bf16Kernel::Amx) ? "available" : "absent",
              kev::bf16_kernel_available(kev::Bf16Kernel::Avx512) ? "available" : "absent");
        kev::set_bf16_kernel(kev::Bf16Kernel::Avx512);
        QCOMPARE(QString::fromLatin1(kev::to_string(kev::requested_bf16_kernel())), QStringLiteral("avx512"));
    }
};

QTEST_GUILESS_MAIN(TestLinear)
#include "tst_linear.moc"
