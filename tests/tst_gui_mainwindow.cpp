// The GUI starts offscreen, shows its main window and describes the built-in model;
// a bad model path is a visible, specific message, not a crash.
#include <QAction>
#include <QComboBox>
#include <QLabel>
#include <QtTest>

#include "kev/engine_info.h"
#include "kev_test_env.h"
#include "main_window.h"

class TestGuiMainWindow : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void showsTheBuiltinModel() {
        kevui::MainWindow w(QString::fromStdString(kev::builtin_model_path()));
        w.show();
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        QCOMPARE(w.windowTitle(), QStringLiteral("Kev"));
        auto* label = w.findChild<QLabel*>(QStringLiteral("modelLabel"));
        QVERIFY(label);
        QVERIFY2(label->text().contains(QStringLiteral("Smollm2 135M")), qPrintable(label->text()));
        QVERIFY2(w.modelStatus().contains(QStringLiteral("llama")), qPrintable(w.modelStatus()));
        auto* precision = w.findChild<QComboBox*>(QStringLiteral("precisionCombo"));
        QVERIFY(precision);
        QCOMPARE(precision->count(), 3);
        auto* run = w.findChild<QAction*>(QStringLiteral("runAction"));
        QVERIFY(run);
        QCOMPARE(run->shortcut(), QKeySequence(Qt::CTRL | Qt::Key_Return));
    }

    void badModelPathIsReported() {
        kevui::MainWindow w(QStringLiteral("/nonexistent/folder/model.gguf"));
        w.show();
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        QVERIFY2(w.modelStatus().contains(QStringLiteral("Model not found: /nonexistent/folder/model.gguf")),
                 qPrintable(w.modelStatus()));
    }

    void notAModelFileIsReported() {
        const QString path = kevtest::workDir() + QStringLiteral("/not-a-model.gguf");
        QFile f(path);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write("this is not a gguf file at all");
        f.close();
        kevui::MainWindow w(path);
        QVERIFY2(w.modelStatus().contains(QStringLiteral("not a GGUF file")), qPrintable(w.modelStatus()));
    }

    void appExecutableStartsAndExitsCleanly() {
        const auto r = kevtest::runProcess(kevtest::binDir() + QStringLiteral("/kev"),
                                           {QStringLiteral("--quit-after"), QStringLiteral("1500")},
                                           120000);
        QVERIFY2(r.finished, "kev did not exit after --quit-after");
        QVERIFY2(r.exitCode == 0, r.err.constData());
    }
};

QTEST_MAIN(TestGuiMainWindow)
#include "tst_gui_mainwindow.moc"
