// The GUI starts offscreen, shows its main window and describes the built-in model;
// a bad model path is a visible, specific message, not a crash; the toolbar offers what
// the engine can do and says why the rest is disabled; `kev --quit-after` exits 0.
#include <QAction>
#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QLabel>
#include <QLocale>
#include <QElapsedTimer>
#include <QProcess>
#include <QSettings>
#include <QSignalSpy>
#include <QStandardItemModel>
#include <QScrollArea>
#include <QTextEdit>
#include <QToolButton>
#include <QtTest>

#include "card_state.h"
#include "engine_worker.h"
#include "kev/engine_info.h"
#include "kev_test_env.h"
#include "main_window.h"
#include "gauge_panel.h"
#include "pack_view.h"
#include "question_card.h"

class TestGuiMainWindow : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void initTestCase() {
        QStandardPaths::setTestModeEnabled(true);
        // The window and the child `kev` process keep their files in the scratch folder.
        qputenv("KEV_WORKSPACE", (kevtest::workDir() + QStringLiteral("/workspace.json")).toUtf8());
        qputenv("XDG_CONFIG_HOME", kevtest::workDir(QStringLiteral("config")).toUtf8());
        qputenv("XDG_DATA_HOME", kevtest::workDir(QStringLiteral("data")).toUtf8());
        QFile::remove(kevtest::workDir() + QStringLiteral("/workspace.json"));
        QSettings().clear();  // test-mode settings: nothing from an earlier run
    }

    void showsTheBuiltinModel() {
        kevui::MainWindow w(QString::fromStdString(kev::builtin_model_path()));
        QSignalSpy ready(&w, &kevui::MainWindow::modelReady);
        w.show();
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        QCOMPARE(w.windowTitle(), QStringLiteral("Kev"));
        auto* label = w.findChild<QLabel*>(QStringLiteral("modelLabel"));
        QVERIFY(label);
        QVERIFY2(label->text().contains(QStringLiteral("Smollm2 135M")), qPrintable(label->text()));
        QVERIFY2(w.modelStatus().contains(QStringLiteral("llama")), qPrintable(w.modelStatus()));
        QVERIFY(ready.wait(120000));
        QVERIFY2(w.modelStatus().contains(QStringLiteral("parameters")), qPrintable(w.modelStatus()));
        QVERIFY(w.engine()->hasModel());
        QVERIFY(w.engine()->model().weightBytes > 0);

        auto* run = w.findChild<QAction*>(QStringLiteral("runAction"));
        QVERIFY(run);
        QCOMPARE(run->shortcut(), QKeySequence(Qt::CTRL | Qt::Key_Return));
        QVERIFY(run->isEnabled());
        auto* stop = w.findChild<QAction*>(QStringLiteral("stopAction"));
        QVERIFY(stop);
        QCOMPARE(stop->shortcut(), QKeySequence(Qt::Key_Escape));
        QVERIFY(!stop->isEnabled());
        QCOMPARE(w.cards().size(), 3);  // the first-run examples
        // The loaded model is remembered: recent models and the next start's default.
        const QString builtin = QString::fromStdString(kev::builtin_model_path());
        QVERIFY(QSettings().value(QStringLiteral("model/recent")).toStringList().contains(builtin));
        QCOMPARE(kevui::MainWindow::defaultModelPath(), builtin);
    }

    // Issue 17: at 1000×700 with every card's advanced settings open, each card's footer
    // (Copy, Replay, ...) is still in view, the rate plot keeps its height and the pack view
    // its header; the precision menu says what each choice holds and the gauge what a
    // change frees.
    void layoutHoldsAt1000x700() {
        kevui::MainWindow w(QString::fromStdString(kev::builtin_model_path()));
        QSignalSpy ready(&w, &kevui::MainWindow::modelReady);
        w.resize(1000, 700);
        w.show();
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        QVERIFY(ready.wait(120000));
        for (kevui::QuestionCard* card : w.cards()) {
            auto* toggle = card->findChild<QToolButton*>(QStringLiteral("advancedToggle"));
            QVERIFY(toggle);
            toggle->setChecked(true);
        }
        QTest::qWait(50);
        auto* scroll = w.findChild<QScrollArea*>(QStringLiteral("cardScroll"));
        QVERIFY(scroll);
        QWidget* viewport = scroll->viewport();
        for (kevui::QuestionCard* card : w.cards()) {
            for (const char* name : {"copyButton", "replayButton", "cardStopButton"}) {
                auto* button = card->findChild<QToolButton*>(QLatin1String(name));
                QVERIFY2(button && button->isVisible(), name);
                const QPoint top = button->mapTo(viewport, QPoint(0, 0));
                QVERIFY2(top.y() >= 0 && top.y() + button->height() <= viewport->height(),
                         qPrintable(QStringLiteral("card %1's %2 is at y %3..%4 of a %5 px viewport")
                                        .arg(card->number())
                                        .arg(QLatin1String(name))
                                        .arg(top.y())
                                        .arg(top.y() + button->height())
                                        .arg(viewport->height())));
            }
            QVERIFY(card->answerView()->height() >= 40);
            qInfo("card %d: Copy at y %d of a %d px viewport", card->number(),
                  card->findChild<QToolButton*>(QStringLiteral("copyButton"))->mapTo(viewport, QPoint(0, 0)).y(),
                  viewport->height());
        }
        QVERIFY2(w.gauges()->plot()->height() >= 40, qPrintable(QString::number(w.gauges()->plot()->height())));
        QVERIFY(w.packView()->height() >= w.packView()->minimumHeight());

        auto* precision = w.findChild<QComboBox*>(QStringLiteral("precisionCombo"));
        QVERIFY2(precision->itemText(2).startsWith(QStringLiteral("fp32 · ~")), qPrintable(precision->itemText(2)));
        QVERIFY2(precision->itemText(0).startsWith(QStringLiteral("4-bit · ~")), qPrintable(precision->itemText(0)));
        QVERIFY2(w.gauges()->text().contains(QStringLiteral("Instead: ")), qPrintable(w.gauges()->text()));
        QVERIFY2(w.gauges()->text().contains(QStringLiteral("fp32 ~")), qPrintable(w.gauges()->text()));
        // The precision loaded shows the weight bytes held (the gauge's), not an estimate.
        const qint64 held = w.gauges()->findChild<QLabel*>(QStringLiteral("modelBytesGauge"))->property("weights").toLongLong();
        QVERIFY(held > 0);
        const QString exact = QStringLiteral(" · ~") + QLocale().formattedDataSize(held, 0);
        QStringList showingHeld;
        for (int i = 0; i < 3; ++i)
            if (precision->itemText(i).contains(exact)) showingHeld << precision->itemText(i);
        QVERIFY2(!showingHeld.isEmpty(), qPrintable(exact + QStringLiteral(" in none of the rows")));
    }

    void settingsPersist() {
        {
            kevui::MainWindow w(QStringLiteral("/nonexistent/model.gguf"));
            w.show();
            QVERIFY(QTest::qWaitForWindowExposed(&w));
            w.resize(1000, 700);
            w.findChild<QComboBox*>(QStringLiteral("precisionCombo"))->setCurrentIndex(1);  // half
        }
        kevui::MainWindow w(QStringLiteral("/nonexistent/model.gguf"));
        QCOMPARE(w.findChild<QComboBox*>(QStringLiteral("precisionCombo"))->currentIndex(), 1);
        QCOMPARE(w.size(), QSize(1000, 700));
        w.findChild<QComboBox*>(QStringLiteral("precisionCombo"))->setCurrentIndex(2);
    }

    // Issue 17: settings are written when they change; a crash (no destructor) keeps them.
    void settingsSavedWhenTheyChange() {
        auto* w = new kevui::MainWindow(QStringLiteral("/nonexistent/model.gguf"));
        auto* precision = w->findChild<QComboBox*>(QStringLiteral("precisionCombo"));
        auto* scale = w->findChild<QDoubleSpinBox*>(QStringLiteral("loraScaleSpin"));
        QVERIFY(precision && scale);
        precision->setCurrentIndex(precision->currentIndex() == 1 ? 2 : 1);
        QCOMPARE(QSettings().value(QStringLiteral("model/precision")).toInt(), precision->currentIndex());
        w->setLoraPath(kevtest::workDir());
        QCOMPARE(QSettings().value(QStringLiteral("lora/path")).toString(), kevtest::workDir());
        const double other = scale->value() == 0.5 ? 0.75 : 0.5;
        scale->setValue(other);
        QCOMPARE(QSettings().value(QStringLiteral("lora/scale")).toDouble(), other);
        delete w;
        for (const char* key : {"lora/path", "lora/scale", "model/precision"}) QSettings().remove(QLatin1String(key));
    }

    void toolbarSaysWhatIsNotAvailable() {
        QSettings().remove(QStringLiteral("model/precision"));  // a first start
        kevui::MainWindow w(QStringLiteral("/nonexistent/model.gguf"));
        auto* precision = w.findChild<QComboBox*>(QStringLiteral("precisionCombo"));
        QVERIFY(precision);
        QCOMPARE(precision->count(), 4);
        // auto is the default; its row says what it chose for the file and why.
        QCOMPARE(precision->currentIndex(), 3);
        QVERIFY2(precision->currentText().startsWith(QStringLiteral("auto")), qPrintable(precision->currentText()));
        auto* model = qobject_cast<QStandardItemModel*>(precision->model());
        QVERIFY(model);
        QVERIFY(model->item(0)->isEnabled());  // 4-bit
        QVERIFY(model->item(0)->toolTip().contains(QStringLiteral("NF4")));
        QVERIFY(model->item(1)->toolTip().contains(QStringLiteral("bf16 on CPU")));
        QVERIFY(model->item(1)->isEnabled());   // half
        QVERIFY(model->item(2)->isEnabled());   // fp32
        auto* lora = w.findChild<QCheckBox*>(QStringLiteral("loraCheck"));
        QVERIFY(lora);
        QVERIFY(lora->isEnabled());
        auto* loraScale = w.findChild<QDoubleSpinBox*>(QStringLiteral("loraScaleSpin"));
        QVERIFY(loraScale);
        QCOMPARE(loraScale->maximum(), 2.0);
        QCOMPARE(w.loraPath(), QString::fromStdString(kev::demo_adapter_path()));
        auto* device = w.findChild<QComboBox*>(QStringLiteral("deviceCombo"));
        QVERIFY(device);
        auto* devices = qobject_cast<QStandardItemModel*>(device->model());
        QCOMPARE(devices->item(1)->isEnabled(), kev::engine_info().cuda_available);
    }

    void badModelPathIsReported() {
        kevui::MainWindow w(QStringLiteral("/nonexistent/folder/model.gguf"));
        w.show();
        QVERIFY(QTest::qWaitForWindowExposed(&w));
        QVERIFY2(w.modelStatus().contains(QStringLiteral("Model not found: /nonexistent/folder/model.gguf")),
                 qPrintable(w.modelStatus()));
        // Running without a model says so instead of doing nothing.
        QVERIFY(!w.runAll());
        QVERIFY2(w.windowMessage().contains(QStringLiteral("No model is loaded")), qPrintable(w.windowMessage()));
    }

    void notAModelFileIsReported() {
        const QString path = kevtest::workDir() + QStringLiteral("/not-a-model.gguf");
        QFile f(path);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write("this is not a gguf file at all");
        f.close();
        kevui::MainWindow w(path);
        QVERIFY2(w.modelStatus().contains(QStringLiteral("not a GGUF file")), qPrintable(w.modelStatus()));
        QSignalSpy failed(&w, &kevui::MainWindow::modelFailed);
        QVERIFY(failed.wait(60000));
        QVERIFY2(w.modelStatus().contains(QStringLiteral("Could not load")), qPrintable(w.modelStatus()));
        QVERIFY(!w.engine()->hasModel());
    }

    void appExecutableStartsAndExitsCleanly() {
        const auto r = kevtest::runProcess(kevtest::binDir() + QStringLiteral("/kev"),
                                           {QStringLiteral("--quit-after"), QStringLiteral("1500")},
                                           120000);
        QVERIFY2(r.finished, "kev did not exit after --quit-after");
        QVERIFY2(r.exitCode == 0, r.err.constData());
    }

    // `kev questions.json` opens a question set; closing saves it as the workspace.
    void appOpensAQuestionSetGivenOnTheCommandLine() {
        const QString ws = kevtest::workDir() + QStringLiteral("/cli-workspace.json");
        QFile::remove(ws);
        QProcess kev;
        QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
        env.insert(QStringLiteral("KEV_WORKSPACE"), ws);
        kev.setProcessEnvironment(env);
        kev.start(kevtest::binDir() + QStringLiteral("/kev"),
                  {QStringLiteral("--quit-after"), QStringLiteral("1000"),
                   kevtest::sourceDir() + QStringLiteral("/resources/examples/classroom-quiz.json")});
        QVERIFY(kev.waitForFinished(120000));
        QCOMPARE(kev.exitCode(), 0);
        QFile f(ws);
        QVERIFY(f.open(QIODevice::ReadOnly));
        QString error;
        const auto w = kevui::workspaceFromJson(f.readAll(), &error);
        QVERIFY2(w, qPrintable(error));
        QCOMPARE(w->cards.size(), 4);
        QCOMPARE(w->cards.at(1).settings.question, QStringLiteral("How many legs does a spider have?"));
    }

    // The workspace is saved while answers stream, atomically: killing the process
    // mid-run loses at most the last moments, never the file.
    void workspaceSurvivesAKilledProcess() {
        const QString ws = kevtest::workDir() + QStringLiteral("/killed-workspace.json");
        QFile::remove(ws);
        {
            QFile f(ws);
            QVERIFY(f.open(QIODevice::WriteOnly));
            f.write(R"({"cards": [{"question": "Write a long story about a brave dragon.", "temperature": 0,
                                   "max_new_tokens": 300}]})");
        }
        QProcess kev;
        QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
        env.insert(QStringLiteral("KEV_WORKSPACE"), ws);
        kev.setProcessEnvironment(env);
        kev.start(kevtest::binDir() + QStringLiteral("/kev"),
                  {QStringLiteral("--run"), QStringLiteral("--model"), kevtest::builtinModel()});
        QVERIFY(kev.waitForStarted(60000));
        QString streamed;
        QElapsedTimer t;
        t.start();
        while (t.elapsed() < 150000 && streamed.size() < 20) {
            QTest::qWait(200);
            QFile f(ws);
            if (!f.open(QIODevice::ReadOnly)) continue;
            QString error;
            const auto w = kevui::workspaceFromJson(f.readAll(), &error);
            QVERIFY2(w, qPrintable(error));  // never a half-written file
            if (!w->cards.isEmpty()) streamed = w->cards.front().answer.text;
        }
        kev.kill();
        QVERIFY(kev.waitForFinished(30000));
        QVERIFY2(streamed.size() >= 20, qPrintable(streamed));

        qputenv("KEV_WORKSPACE", ws.toUtf8());
        kevui::MainWindow w(QStringLiteral("/nonexistent/model.gguf"));
        qputenv("KEV_WORKSPACE", (kevtest::workDir() + QStringLiteral("/workspace.json")).toUtf8());
        QCOMPARE(w.cards().size(), 1);
        QCOMPARE(w.cards()[0]->settings().question, QStringLiteral("Write a long story about a brave dragon."));
        QVERIFY2(w.cards()[0]->answerText().startsWith(streamed), qPrintable(w.cards()[0]->answerText()));
    }
};

QTEST_MAIN(TestGuiMainWindow)
#include "tst_gui_mainwindow.moc"
