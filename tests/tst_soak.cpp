// Many packs in one process leave resident memory flat: a smaller run of the
// `kev-bench soak` benchmark (the 200-pack figures are in app/bench/reports/soak.md).
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QtTest>

#include "kev_test_env.h"

class TestSoak : public QObject {
    Q_OBJECT

private Q_SLOTS:
    // 40 packs of the built-in model in 4-bit with the demo adapter: pack sizes 1..8,
    // LoRA on some cards, a shared context in some packs, greedy and seeded sampling.
    // After the first 16 (every pack size twice) resident memory must not grow by more
    // than a small allocator slack. A KV cache, sampler or LoRA copy kept per pack would
    // add several MiB a pack (the cache of one 8-card pack alone is ~10 MiB).
    void residentMemoryIsFlatOverManyPacks() {
        const kevtest::ProcessResult r = kevtest::runProcess(
            kevtest::binDir() + "/kev-bench",
            {"soak", "--precisions", "4bit", "--packs", "40", "--warmup", "16", "--max-tokens", "8"},
            240 * 1000);
        QVERIFY2(r.finished, r.err.constData());
        QVERIFY2(r.exitCode == 0, r.err.constData());
        const QJsonObject report = QJsonDocument::fromJson(r.out).object();
        const QJsonObject rss = report.value("rss_mib").toObject();
        QCOMPARE(report.value("packs").toInt(), 40);
        QCOMPARE(rss.value("per_pack").toArray().size(), 40);
        QVERIFY(report.value("generated_tokens").toInt() > 40);
        const double growth = rss.value("growth_after_warmup").toDouble();
        const double slope = rss.value("slope_per_pack").toDouble();
        QVERIFY2(growth < 16.0, qPrintable(QString("RSS grew %1 MiB after the warm-up").arg(growth)));
        QVERIFY2(slope < 0.5, qPrintable(QString("RSS slope %1 MiB per pack").arg(slope)));
    }
};

QTEST_GUILESS_MAIN(TestSoak)
#include "tst_soak.moc"
