// Hostile workspaces and settings in the window: an unreadable workspace is never
// overwritten, whatever names its backup would take; huge files and special files are
// refused before they are opened; a large workspace loads in slices while the event loop
// keeps running; a card that ends on non-finite logits says so; absurd values from files
// are replaced with a message naming them.
#include <QDoubleSpinBox>
#include <QComboBox>
#include <QElapsedTimer>
#include <QLabel>
#include <QPlainTextEdit>
#include <QSettings>
#include <QSignalSpy>
#include <QAction>
#include <QFileInfo>
#include <QUndoStack>
#include <QtTest>

#include <sys/stat.h>
#include <sys/types.h>

#include "board_document.h"
#include "card_state.h"
#include "kev_test_env.h"
#include "main_window.h"
#include "question_card.h"

namespace {

const QString kNoModel = QStringLiteral("/nonexistent/model.gguf");
const QByteArray kCorrupt = "{ \"cards\": [ {\"question\": \"the user's only copy, half written";

QString workspaceDir() { return kevtest::workDir(QStringLiteral("ws")); }
QString workspaceFile() { return workspaceDir() + QStringLiteral("/workspace.json"); }

void writeFile(const QString& path, const QByteArray& bytes) {
    QFile f(path);
    QVERIFY2(f.open(QIODevice::WriteOnly), qPrintable(path));
    f.write(bytes);
}

QByteArray readFile(const QString& path) {
    QFile f(path);
    return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
}

// Takes the backup names loadWorkspace would pick for the next `seconds` seconds:
// "<path>.corrupt-<stamp>" and, when `numbered`, "-1" to "-99" as well.
void takeBackupNames(const QString& path, int seconds, bool numbered) {
    const QDateTime now = QDateTime::currentDateTime();
    for (int s = -1; s <= seconds; ++s) {
        const QString base = path + QStringLiteral(".corrupt-") + now.addSecs(s).toString(QStringLiteral("yyyyMMdd-HHmmss"));
        writeFile(base, "an older backup");
        for (int n = 1; numbered && n < 100; ++n) writeFile(base + QLatin1Char('-') + QString::number(n), "an older backup");
    }
}

// The files of the workspace folder that hold `bytes`.
QStringList filesHolding(const QByteArray& bytes) {
    QStringList found;
    const QDir dir(workspaceDir());
    for (const QString& name : dir.entryList(QDir::Files | QDir::System))
        if (readFile(dir.filePath(name)) == bytes) found << dir.filePath(name);
    return found;
}

// Card `index` gets `state`'s settings as the user's edit (through its view) and its
// answer as a run writes one (into the board document).
void plant(kevui::MainWindow& w, int index, const kevui::CardState& state) {
    kevui::QuestionCard* card = w.cards()[index];
    card->setSettings(state.settings);
    w.document()->setAnswer(card->number(), state.answer);
}

void writeBigWorkspace(const QString& path, int n) {
    kevui::Workspace w;
    for (int i = 0; i < n; ++i) {
        kevui::CardState c;
        c.settings.question = QStringLiteral("Question number %1?").arg(i);
        c.answer.text = QStringLiteral("Answer %1: ").arg(i) + QString(200, QLatin1Char('x'));
        c.answer.finish = QStringLiteral("max_tokens");
        c.answer.generatedTokens = 10;
        w.cards.push_back(c);
    }
    QString error;
    QVERIFY2(kevui::saveWorkspace(path, w, kevui::WithAnswers::Yes, &error), qPrintable(error));
}

}  // namespace

class TestGuiWorkspace : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void initTestCase() {
        QStandardPaths::setTestModeEnabled(true);
        qputenv("KEV_WORKSPACE", workspaceFile().toUtf8());
        qputenv("XDG_CONFIG_HOME", kevtest::workDir(QStringLiteral("config")).toUtf8());
        QSettings().clear();
    }

    void init() {
        QDir(workspaceDir()).removeRecursively();
        workspaceDir();
    }

    // The backup name of this second is taken (the move used to fail, and the next
    // autosave replaced the unreadable file): it goes to the next free name.
    void corruptWorkspaceGoesToAFreeBackupName() {
        takeBackupNames(workspaceFile(), 5, /*numbered=*/false);
        writeFile(workspaceFile(), kCorrupt);
        kevui::MainWindow w(kNoModel);
        w.saveWorkspaceNow();
        const QStringList kept = filesHolding(kCorrupt);
        QCOMPARE(kept.size(), 1);
        QVERIFY2(kept.first().contains(QStringLiteral(".corrupt-")), qPrintable(kept.first()));
        QVERIFY2(w.windowMessage().contains(kept.first()), qPrintable(w.windowMessage()));
        QVERIFY2(w.windowMessage().contains(QStringLiteral("unreadable")), qPrintable(w.windowMessage()));
        QCOMPARE(w.autosavePath(), workspaceFile());
        QCOMPARE(w.cards().size(), 3);  // a fresh start
        QVERIFY(kevui::workspaceFromJson(readFile(workspaceFile()), nullptr));
    }

    // Every backup name is taken: the file stays where it is and autosave writes elsewhere.
    void unmovableCorruptWorkspaceIsNeverOverwritten() {
        takeBackupNames(workspaceFile(), 4, /*numbered=*/true);
        writeFile(workspaceFile(), kCorrupt);
        kevui::MainWindow w(kNoModel);
        w.cards().first()->questionEdit()->setPlainText(QStringLiteral("New work"));
        QTest::qWait(1000);  // the debounced autosave runs
        w.saveWorkspaceNow();
        QCOMPARE(readFile(workspaceFile()), kCorrupt);
        QVERIFY(!w.autosavePath().isEmpty());
        QVERIFY(w.autosavePath() != workspaceFile());
        QVERIFY2(w.windowMessage().contains(QStringLiteral("could not be moved aside")), qPrintable(w.windowMessage()));
        QVERIFY2(w.windowMessage().contains(w.autosavePath()), qPrintable(w.windowMessage()));
        auto* note = w.findChild<QLabel*>(QStringLiteral("autosaveNote"));
        QVERIFY(note && !note->isHidden());
        QVERIFY2(note->text().contains(QFileInfo(w.autosavePath()).fileName()), qPrintable(note->text()));
        const auto saved = kevui::workspaceFromJson(readFile(w.autosavePath()), nullptr);
        QVERIFY(saved);
        QCOMPARE(saved->cards.first().settings.question, QStringLiteral("New work"));
    }

    void oversizedWorkspaceIsRefusedAndKept() {
        {
            QFile f(workspaceFile());
            QVERIFY(f.open(QIODevice::WriteOnly));
            f.write("{\"cards\": []}");
            QVERIFY(f.resize(kevui::kMaxWorkspaceBytes + 1));  // sparse: no 64 MiB written
        }
        kevui::MainWindow w(kNoModel);
        w.saveWorkspaceNow();
        QVERIFY2(w.windowMessage().contains(QStringLiteral("the limit is 67108864 bytes")), qPrintable(w.windowMessage()));
        QCOMPARE(w.cards().size(), 3);
        const QStringList aside = QDir(workspaceDir()).entryList({QStringLiteral("workspace.json.corrupt-*")});
        QCOMPARE(aside.size(), 1);
        QCOMPARE(QFileInfo(workspaceDir() + QLatin1Char('/') + aside.first()).size(), kevui::kMaxWorkspaceBytes + 1);
        QVERIFY2(w.windowMessage().contains(aside.first()), qPrintable(w.windowMessage()));
    }

    // A FIFO would block open() for ever; a folder cannot be read. Both are refused first.
    void specialFilesAreRefusedBeforeOpening() {
        QVERIFY(::mkfifo(QFile::encodeName(workspaceFile()).constData(), 0600) == 0);
        {
            kevui::MainWindow w(kNoModel);
            QVERIFY2(w.windowMessage().contains(QStringLiteral("not a regular file")), qPrintable(w.windowMessage()));
            QCOMPARE(w.cards().size(), 3);
            const QString fifo = workspaceDir() + QStringLiteral("/questions.fifo");
            QVERIFY(::mkfifo(QFile::encodeName(fifo).constData(), 0600) == 0);
            QVERIFY(!w.loadQuestionSet(fifo));
            QVERIFY2(w.windowMessage().contains(QStringLiteral("not a regular file")), qPrintable(w.windowMessage()));
        }
        init();
        QVERIFY(QDir().mkpath(workspaceFile()));
        writeFile(workspaceFile() + QStringLiteral("/inside.txt"), "kept");
        kevui::MainWindow w(kNoModel);
        w.saveWorkspaceNow();
        QVERIFY2(w.windowMessage().contains(QStringLiteral("it is a folder")), qPrintable(w.windowMessage()));
        QCOMPARE(filesHolding("kept").size(), 0);  // still inside the folder, moved aside
        const QStringList aside = QDir(workspaceDir()).entryList({QStringLiteral("workspace.json.corrupt-*")}, QDir::Dirs);
        QCOMPARE(aside.size(), 1);
        QCOMPARE(readFile(workspaceDir() + QLatin1Char('/') + aside.first() + QStringLiteral("/inside.txt")), QByteArray("kept"));
    }

    // 500 cards here (KEV_LARGE_WORKSPACE_CARDS=2000 for the measurement in the report):
    // the window is up after the first few, the rest arrive in slices with progress, the
    // event loop runs between them, and an autosave in the middle keeps every card.
    // Issue 17, problem 3: opening a question set replaced the board (and, by autosave,
    // its file) without a trace. The board is now kept first, and Restore brings it back.
    void openingAQuestionSetKeepsTheBoard() {
        kevui::MainWindow w(kNoModel);
        QTRY_VERIFY(!w.loadingWorkspace());
        kevui::CardState mine;
        mine.settings.question = QStringLiteral("My careful question");
        mine.answer.text = QStringLiteral("An answer worth keeping");
        mine.answer.finish = QStringLiteral("eos");
        plant(w, 0, mine);
        const QString set = workspaceDir() + QStringLiteral("/set.json");
        kevui::Workspace other;
        kevui::CardState q;
        q.settings.question = QStringLiteral("From the file");
        other.cards = {q, q};
        QString error;
        QVERIFY2(kevui::saveWorkspace(set, other, kevui::WithAnswers::No, &error), qPrintable(error));
        QVERIFY(!w.findChild<QAction*>(QStringLiteral("restoreBoardAction"))->isEnabled());

        QVERIFY(w.loadQuestionSet(set));
        QTRY_VERIFY(!w.loadingWorkspace());
        QCOMPARE(w.cards().size(), 2);
        QCOMPARE(w.cards()[0]->settings().question, QStringLiteral("From the file"));
        const QString kept = w.previousBoardFile();
        QVERIFY2(kept.contains(QStringLiteral(".before-open-")), qPrintable(kept));
        QVERIFY2(w.windowMessage().contains(QFileInfo(kept).fileName()), qPrintable(w.windowMessage()));
        const auto onDisk = kevui::workspaceFromJson(readFile(kept), nullptr);
        QVERIFY(onDisk && !onDisk->cards.isEmpty());
        QCOMPARE(onDisk->cards[0].answer.text, mine.answer.text);

        QVERIFY(w.findChild<QAction*>(QStringLiteral("restoreBoardAction"))->isEnabled());
        QVERIFY(w.restorePreviousBoard());
        QTRY_VERIFY(!w.loadingWorkspace());
        QCOMPARE(w.cards()[0]->settings().question, mine.settings.question);
        QCOMPARE(w.cards()[0]->answerText(), mine.answer.text);
        // The board Restore replaced (the file's) is kept in turn.
        QVERIFY(w.previousBoardFile() != kept);
        QCOMPARE(kevui::workspaceFromJson(readFile(w.previousBoardFile()), nullptr)->cards.size(), 2);
    }

    // Issue 17: undo brings back a removed card (answer included) and a replaced board;
    // edits of one card in a burst are one step; answers are not undo steps.
    void undoRestoresRemovedCardsAndReplacedBoards() {
        kevui::MainWindow w(kNoModel);
        QTRY_VERIFY(!w.loadingWorkspace());
        QUndoStack* stack = w.undoStack();
        const int cards = static_cast<int>(w.cards().size());
        QVERIFY(cards >= 2);
        kevui::CardState mine = w.cards()[1]->state();
        mine.settings.question = QStringLiteral("A question I spent time on");
        mine.answer.text = QStringLiteral("Its answer, worth keeping");
        mine.answer.finish = QStringLiteral("eos");
        mine.answer.tokens = {1, 2, 3};
        plant(w, 1, mine);  // an edit, and an answer as a run writes it
        const int number = w.cards()[1]->number();

        w.removeCard(w.cards()[1]);
        QCOMPARE(w.cards().size(), cards - 1);
        QVERIFY(w.undo());
        QCOMPARE(w.cards().size(), cards);
        QCOMPARE(w.cards()[1]->number(), number);  // back in its place, with its number
        QCOMPARE(w.cards()[1]->settings().question, mine.settings.question);
        QCOMPARE(w.cards()[1]->answerText(), mine.answer.text);
        QVERIFY(w.redo());
        QCOMPARE(w.cards().size(), cards - 1);
        QVERIFY(w.undo());
        QCOMPARE(w.cards()[1]->answerText(), mine.answer.text);

        // A burst of typing in one card is one step, undone at once.
        const QString before = w.cards()[0]->settings().question;
        const int steps = stack->index();
        w.cards()[0]->questionEdit()->setPlainText(before + QStringLiteral(" and"));
        w.cards()[0]->questionEdit()->setPlainText(before + QStringLiteral(" and more"));
        QCOMPARE(stack->index(), steps + 1);
        QVERIFY2(stack->undoText().contains(QStringLiteral("Edit card")), qPrintable(stack->undoText()));
        QVERIFY(w.undo());
        QCOMPARE(w.cards()[0]->settings().question, before);
        QVERIFY(w.redo());
        QCOMPARE(w.cards()[0]->settings().question, before + QStringLiteral(" and more"));

        // A sweep is one step: undo takes every variant away and the source's settings back.
        const kevui::CardSettings beforeSweep = w.cards()[0]->settings();
        w.sweepCard(w.cards()[0], 3);
        QCOMPARE(w.cards().size(), cards + 2);
        QVERIFY2(stack->undoText().startsWith(QStringLiteral("Sweep")), qPrintable(stack->undoText()));
        QVERIFY(w.undo());
        QCOMPARE(w.cards().size(), cards);
        QCOMPARE(w.cards()[0]->settings(), beforeSweep);

        // Duplicate, then undo: the copy goes, the source stays.
        w.duplicateCard(w.cards()[0]);
        QCOMPARE(w.cards().size(), cards + 1);
        QVERIFY(w.undo());
        QCOMPARE(w.cards().size(), cards);

        // Opening a question set replaces the board; undo brings it back, answers included.
        const QString set = workspaceDir() + QStringLiteral("/undo-set.json");
        kevui::Workspace other;
        kevui::CardState q;
        q.settings.question = QStringLiteral("From the file");
        other.cards = {q};
        QString error;
        QVERIFY2(kevui::saveWorkspace(set, other, kevui::WithAnswers::No, &error), qPrintable(error));
        QVERIFY(w.loadQuestionSet(set));
        QTRY_VERIFY(!w.loadingWorkspace());
        QCOMPARE(w.cards().size(), 1);
        QVERIFY2(stack->undoText().startsWith(QStringLiteral("Open undo-set.json")), qPrintable(stack->undoText()));
        QVERIFY(w.undo());
        QTRY_VERIFY(!w.loadingWorkspace());
        QCOMPARE(w.cards().size(), cards);
        QCOMPARE(w.cards()[1]->answerText(), mine.answer.text);
        QVERIFY(w.redo());
        QTRY_VERIFY(!w.loadingWorkspace());
        QCOMPARE(w.cards().size(), 1);
        QCOMPARE(w.cards()[0]->settings().question, QStringLiteral("From the file"));
        // And the board's prompt fields are steps too.
        w.setBoardSystem(QStringLiteral("Be brief."));
        QCOMPARE(w.workspace().system, QStringLiteral("Be brief."));
        QVERIFY(w.undo());
        QCOMPARE(w.workspace().system, QString());
    }

    void largeWorkspaceLoadsInSlices() {
        const int kCards = qEnvironmentVariableIntValue("KEV_LARGE_WORKSPACE_CARDS") > 0
                               ? qEnvironmentVariableIntValue("KEV_LARGE_WORKSPACE_CARDS")
                               : 500;
        writeBigWorkspace(workspaceFile(), kCards);
        QElapsedTimer clock;
        clock.start();
        kevui::MainWindow w(kNoModel);
        const qint64 constructedMs = clock.elapsed();
        QSignalSpy progress(&w, &kevui::MainWindow::workspaceProgress);
        QSignalSpy loaded(&w, &kevui::MainWindow::workspaceLoaded);
        w.show();
        QVERIFY(w.loadingWorkspace());
        QVERIFY(w.cards().size() < kCards);
        auto* label = w.findChild<QLabel*>(QStringLiteral("workspaceProgress"));
        QVERIFY(label && !label->isHidden());
        QVERIFY2(label->text().contains(QStringLiteral("Loading workspace: ")) &&
                     label->text().contains(QStringLiteral("/ %1 cards").arg(kCards)),
                 qPrintable(label->text()));
        QVERIFY(!w.runAll());
        QVERIFY2(w.windowMessage().contains(QStringLiteral("still loading")), qPrintable(w.windowMessage()));
        w.saveWorkspaceNow();  // mid-load: the cards not created yet are saved too
        QCOMPARE(kevui::workspaceFromJson(readFile(workspaceFile()), nullptr)->cards.size(), kCards);

        // A timer of 0 ms fires between slices: the longest wait is the longest slice.
        qint64 longestGapMs = 0;
        QElapsedTimer gap;
        gap.start();
        QTimer tick;
        tick.setInterval(0);
        connect(&tick, &QTimer::timeout, this, [&] { longestGapMs = std::max(longestGapMs, gap.restart()); });
        tick.start();
        QVERIFY(loaded.wait(60000));
        tick.stop();
        qInfo() << kCards << "cards: window built in" << constructedMs << "ms, all cards in" << clock.elapsed()
                << "ms; longest event-loop gap" << longestGapMs << "ms;"
                << progress.size() << "slices";
        QVERIFY2(longestGapMs < 1500, qPrintable(QString::number(longestGapMs)));
        QVERIFY(progress.size() >= 3);
        QCOMPARE(progress.last().at(0).toInt(), kCards);
        QVERIFY(label->isHidden());
        QCOMPARE(w.cards().size(), kCards);
        for (int i = 0; i < kCards; i += 37) {
            QCOMPARE(w.cards().at(i)->settings().question, QStringLiteral("Question number %1?").arg(i));
            QVERIFY(w.cards().at(i)->answerText().startsWith(QStringLiteral("Answer %1: xxx").arg(i)));
            QCOMPARE(w.cards().at(i)->index(), i);
        }
        QCOMPARE(w.cards().last()->settings().question, QStringLiteral("Question number %1?").arg(kCards - 1));
    }

    // "non-finite logits" used to end a card with an empty answer and no reason.
    void nonFiniteFinishIsExplainedOnTheCard() {
        kevui::QuestionCard card;
        card.startAnswer();
        kevui::CardAnswer a;
        a.finish = QStringLiteral("non-finite logits");
        a.generatedTokens = 3;
        a.text = QStringLiteral("The");
        card.finishAnswer(a);
        QVERIFY2(card.messageText().contains(QStringLiteral("the model produced NaN/Inf at token 4")), qPrintable(card.messageText()));
        QVERIFY(card.footerText().contains(QStringLiteral("non-finite logits")));
        // The reason comes back with the workspace.
        kevui::QuestionCard restored;
        a.generatedTokens = 0;
        a.text.clear();
        restored.setState(kevui::CardState{{}, a});
        QVERIFY2(restored.messageText().contains(QStringLiteral("NaN/Inf at token 1")), qPrintable(restored.messageText()));
        // A normal finish says nothing.
        kevui::QuestionCard normal;
        a.finish = QStringLiteral("max_tokens");
        normal.finishAnswer(a);
        QVERIFY(normal.messageText().isEmpty());
    }

    void absurdCardValuesAreReplacedWithAMessage() {
        writeFile(workspaceFile(), R"({"cards": [
            {"question": "a", "temperature": 1e308, "top_k": 4294967297, "top_p": -3, "max_new_tokens": 0},
            {"question": "b", "temperature": 0.5, "top_k": 40}]})");
        kevui::MainWindow w(kNoModel);
        QCOMPARE(w.cards().size(), 2);
        const kevui::CardSettings s = w.cards().at(0)->settings();
        QCOMPARE(s.temperature, 2.0);
        QCOMPARE(s.topK, 100000);
        QCOMPARE(s.topP, 0.01);
        QCOMPARE(s.maxNewTokens, 1);
        const QString m = w.cards().at(0)->messageText();
        QVERIFY2(m.contains(QStringLiteral("temperature 1e+308 is outside 0 to 2, using 2")), qPrintable(m));
        QVERIFY2(m.contains(QStringLiteral("top-k 2147483647 is outside 0 to 100000")), qPrintable(m));
        QVERIFY2(m.contains(QStringLiteral("top-p -3")), qPrintable(m));
        QVERIFY2(m.contains(QStringLiteral("max new tokens 0")), qPrintable(m));
        QVERIFY(w.cards().at(1)->messageText().isEmpty());
        QCOMPARE(w.cards().at(1)->settings().topK, 40);
    }

    void absurdWindowSettingsAreIgnoredWithAMessage() {
        {
            QSettings s;
            s.setValue(QStringLiteral("model/precision"), 99);
            s.setValue(QStringLiteral("lora/scale"), QStringLiteral("nan"));
            s.setValue(QStringLiteral("lora/path"), QStringLiteral("/nonexistent/adapter"));
        }
        kevui::MainWindow w(kNoModel);
        QSettings().clear();
        QCOMPARE(w.findChild<QComboBox*>(QStringLiteral("precisionCombo"))->currentIndex(), 3);
        QCOMPARE(w.findChild<QDoubleSpinBox*>(QStringLiteral("loraScaleSpin"))->value(), 1.0);
        const QString m = w.windowMessage();
        QVERIFY2(m.contains(QStringLiteral("model/precision = 99 is not a precision row 0 to 3")), qPrintable(m));
        QVERIFY2(m.contains(QStringLiteral("lora/scale = nan is not a number from 0 to 2")), qPrintable(m));
        QVERIFY2(m.contains(QStringLiteral("lora/path = /nonexistent/adapter is not a folder")), qPrintable(m));
    }
};

QTEST_MAIN(TestGuiWorkspace)
#include "tst_gui_workspace.moc"
