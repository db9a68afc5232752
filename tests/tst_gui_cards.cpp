// Question cards without running the model: add, duplicate, remove, sweep; the
// temperature slider and its number stay in step; the workspace survives a restart, a
// corrupt one is kept aside and reported; question sets and exports round-trip.
#include <QDoubleSpinBox>
#include <QJsonDocument>
#include <QJsonObject>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSlider>
#include <QToolButton>
#include <QLabel>
#include <QSet>
#include <QAbstractButton>
#include <QAbstractSpinBox>
#include <QComboBox>
#include <QLineEdit>
#include <QTextBlock>
#include <QTextDocument>
#include <QTextEdit>
#include <QtTest>

#include "card_colors.h"
#include "board_document.h"
#include "board_export.h"
#include "board_request.h"
#include "card_state.h"
#include "gauge_panel.h"
#include "kev/engine_info.h"
#include "kev_test_env.h"
#include "main_window.h"
#include "precision_costs.h"
#include "question_card.h"
#include "kev/cpu_kernels.h"

namespace {

const QString kNoModel = QStringLiteral("/nonexistent/model.gguf");

QString workspaceFile() { return kevtest::workDir() + QStringLiteral("/cards-workspace.json"); }

}  // namespace

class TestGuiCards : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void initTestCase() {
        QStandardPaths::setTestModeEnabled(true);
        qputenv("KEV_WORKSPACE", workspaceFile().toUtf8());
    }

    void init() {
        QFile::remove(workspaceFile());
        QDir(kevtest::workDir()).removeRecursively();
        kevtest::workDir();
    }

    void memoryGaugeSaysWhatItMeasures() {
        kevui::GaugePanel g;
        g.refreshMemory();
        QVERIFY2(g.text().contains(QStringLiteral("Process memory (RSS)")), qPrintable(g.text()));
        QVERIFY(kevui::processResidentBytes() > 0);
        QVERIFY2(!g.text().contains(QStringLiteral("VRAM")), "no VRAM line for a CPU model");
        g.setDeviceIsCuda(true);
        if (kev::cuda_memory()) {
            QVERIFY2(g.text().contains(QStringLiteral("VRAM used:")), qPrintable(g.text()));
        } else {
            // No CUDA here: the gauge says so instead of showing a made-up figure.
            QVERIFY2(g.text().contains(QStringLiteral("VRAM: not available")), qPrintable(g.text()));
        }
    }

    // The per-card LoRA override is part of the card and of the workspace file.
    void cardLoraOverrideRoundTrips() {
        kevui::CardSettings s;
        s.question = QStringLiteral("Shout?");
        QVERIFY(!kevui::settingsFromJson(kevui::toJson(s)).lora);
        s.lora = false;
        QCOMPARE(kevui::settingsFromJson(kevui::toJson(s)).lora, std::optional<bool>(false));
        s.lora = true;
        QCOMPARE(kevui::settingsFromJson(kevui::toJson(s)).lora, std::optional<bool>(true));
        kevui::MainWindow w(kNoModel);
        w.cards().first()->setSettings(s);
        QCOMPARE(w.cards().first()->settings().lora, std::optional<bool>(true));
        w.saveWorkspaceNow();
        kevui::MainWindow again(kNoModel);
        QCOMPARE(again.cards().first()->settings().lora, std::optional<bool>(true));
    }

    void addDuplicateRemove() {
        kevui::MainWindow w(kNoModel);
        QCOMPARE(w.cards().size(), 3);  // first run: three example cards
        auto* add = w.findChild<QPushButton*>(QStringLiteral("addCardButton"));
        QVERIFY(add);
        add->click();
        QCOMPARE(w.cards().size(), 4);
        QVERIFY(w.cards().last()->settings().question.isEmpty());
        QCOMPARE(w.cards().last()->index(), 3);

        kevui::QuestionCard* first = w.cards().first();
        first->questionEdit()->setPlainText(QStringLiteral("Is water wet?"));
        auto* dup = first->findChild<QToolButton*>(QStringLiteral("duplicateButton"));
        QVERIFY(dup);
        dup->click();
        QCOMPARE(w.cards().size(), 5);
        kevui::QuestionCard* copy = w.cards().at(1);
        QCOMPARE(copy->settings().question, QStringLiteral("Is water wet?"));
        // Same question, another temperature: the side-by-side use.
        QVERIFY(copy->settings().temperature != first->settings().temperature);
        QCOMPARE(copy->index(), 1);

        auto* remove = copy->findChild<QToolButton*>(QStringLiteral("removeButton"));
        QVERIFY(remove);
        remove->click();
        QCOMPARE(w.cards().size(), 4);
        QCOMPARE(w.cards().at(1)->index(), 1);
        QVERIFY(!w.cards().contains(copy));
        QTest::qWait(0);  // the removed card is deleted later, not under its own click
    }

    // Issue 17, problem 7: Duplicate and Sweep renumbered and recoloured the cards after
    // them, so the last run's per-card chips pointed at the wrong cards. A card keeps its
    // number and colour for life, a new one takes the next number, none is reused.
    void cardsKeepTheirNumbers() {
        kevui::MainWindow w(kNoModel);
        QCOMPARE(w.cards().size(), 3);
        for (int i = 0; i < 3; ++i) QCOMPARE(w.cards().at(i)->number(), i + 1);
        auto* title = w.cards().at(1)->findChild<QLabel*>(QStringLiteral("cardTitle"));
        QVERIFY(title);
        const QString style = title->styleSheet();
        w.duplicateCard(w.cards().at(0));
        QCOMPARE(w.cards().at(1)->number(), 4);  // the copy, next to its source
        QCOMPARE(w.cards().at(1)->from(), 1);
        QCOMPARE(w.cards().at(2)->number(), 2);  // unchanged, and so is its colour
        QCOMPARE(title->styleSheet(), style);
        QVERIFY2(title->text().contains(QStringLiteral("Card 2")), qPrintable(title->text()));
        w.sweepCard(w.cards().at(2), 3);
        QCOMPARE(w.cards().at(3)->number(), 5);
        QCOMPARE(w.cards().at(4)->number(), 6);
        QCOMPARE(w.cards().at(4)->from(), 2);
        QCOMPARE(w.cards().at(5)->number(), 3);
        w.removeCard(w.cards().last());
        w.addCard();
        QCOMPARE(w.cards().last()->number(), 7);  // 3 is gone, not reused
        // Colours never repeat between the numbers a board is likely to hold.
        QSet<QRgb> colours;
        for (int n = 0; n < 300; ++n) colours.insert(kevui::cardColor(n).rgb());
        QCOMPARE(colours.size(), 300);
        // Saved and restored with their numbers.
        const kevui::Workspace saved = w.workspace();
        const auto back = kevui::workspaceFromJson(QJsonDocument(kevui::toJson(saved, kevui::WithAnswers::Yes)).toJson(), nullptr);
        QVERIFY(back);
        for (int i = 0; i < saved.cards.size(); ++i) {
            QCOMPARE(back->cards[i].number, saved.cards[i].number);
            QCOMPARE(back->cards[i].from, saved.cards[i].from);
        }
        QTest::qWait(0);
    }

    // Issue 17 (layout): every control a user can reach has an accessible name, and the
    // labels of the card's settings are buddies of their fields.
    void everyControlHasAnAccessibleName() {
        kevui::MainWindow w(kNoModel);
        w.show();
        QStringList unnamed;
        for (QWidget* c : w.findChildren<QWidget*>()) {
            const bool control = qobject_cast<QAbstractButton*>(c) || qobject_cast<QAbstractSpinBox*>(c) ||
                                 qobject_cast<QComboBox*>(c) || qobject_cast<QLineEdit*>(c) ||
                                 qobject_cast<QPlainTextEdit*>(c) || qobject_cast<QSlider*>(c);
            // Qt's own parts (a spin box's line edit, a toolbar's extension button) are named by their owner.
            const bool ours = !c->objectName().isEmpty() && !c->objectName().startsWith(QLatin1String("qt_"));
            if (!control || !ours) continue;
            const auto* b = qobject_cast<QAbstractButton*>(c);
            if (c->accessibleName().isEmpty() && !(b && !b->text().trimmed().isEmpty())) unnamed << c->objectName();
        }
        QVERIFY2(unnamed.isEmpty(), qPrintable(unnamed.join(QStringLiteral(", "))));
        for (QLabel* label : w.cards().at(0)->findChildren<QLabel*>()) {
            if (label->text() == QLatin1String("Min-p") || label->text() == QLatin1String("Seed"))
                QVERIFY2(label->buddy(), qPrintable(label->text()));
        }
    }

    // Issue 17: Tab walks a card's controls in the order they are seen: top to bottom,
    // and left to right within a row.
    void tabOrderFollowsTheLayout() {
        kevui::QuestionCard card;
        card.resize(380, 900);
        card.show();
        QVERIFY(QTest::qWaitForWindowExposed(&card));
        card.findChild<QToolButton*>(QStringLiteral("advancedToggle"))->setChecked(true);
        QTest::qWait(20);
        QList<QWidget*> chain;
        QWidget* first = card.findChild<QToolButton*>(QStringLiteral("moveLeftButton"));
        QVERIFY(first);
        for (QWidget* w = first; w && !chain.contains(w); w = w->nextInFocusChain()) {
            if (w == &card || !card.isAncestorOf(w)) continue;
            if (!w->isVisibleTo(&card) || !(w->focusPolicy() & Qt::TabFocus)) continue;
            if (w->focusProxy() || w->objectName().isEmpty()) continue;  // Qt's inner parts
            chain << w;
        }
        QVERIFY(chain.size() >= 12);
        QStringList order;
        for (int i = 1; i < chain.size(); ++i) {
            const QPoint a = chain[i - 1]->mapTo(&card, QPoint(0, chain[i - 1]->height() / 2));
            const QPoint b = chain[i]->mapTo(&card, QPoint(0, chain[i]->height() / 2));
            const bool sameRow = std::abs(a.y() - b.y()) < 8;
            const bool forward = sameRow ? b.x() > a.x() : b.y() > a.y();
            if (!forward) order << QStringLiteral("%1 (%2,%3) before %4 (%5,%6)")
                                      .arg(chain[i - 1]->objectName()).arg(a.x()).arg(a.y())
                                      .arg(chain[i]->objectName()).arg(b.x()).arg(b.y());
        }
        QVERIFY2(order.isEmpty(), qPrintable(order.join(QStringLiteral("; "))));
    }

    // Issue 17: Replay's verdict shows where the answers part as text, not only ids.
    void divergenceIsShownAsText() {
        QCOMPARE(kevui::divergenceText(QStringLiteral("same"), QStringLiteral("same")), QString());
        QCOMPARE(kevui::divergenceText(QStringLiteral("The capital is Paris."), QStringLiteral("The capital is London."), 8),
                 QStringLiteral("…ital is  [Paris.] | [London.]"));
        QCOMPARE(kevui::divergenceText(QStringLiteral("Yes"), QStringLiteral("Yes, and more"), 4),
                 QStringLiteral("Yes [] | [, an…]"));
        // An emoji (two UTF-16 units) that differs in its second unit is not cut in half.
        const QString a = QStringLiteral("ok \U0001F600"), b = QStringLiteral("ok \U0001F601");
        const QString d = kevui::divergenceText(a, b);
        QVERIFY2(d.contains(QStringLiteral("[\U0001F600]")) && d.contains(QStringLiteral("[\U0001F601]")), qPrintable(d));
    }

    void reorderCards() {
        kevui::MainWindow w(kNoModel);
        const QString a = w.cards().at(0)->settings().question;
        const QString b = w.cards().at(1)->settings().question;
        auto* right = w.cards().at(0)->findChild<QToolButton*>(QStringLiteral("moveRightButton"));
        QVERIFY(right);
        right->click();
        QCOMPARE(w.cards().at(0)->settings().question, b);
        QCOMPARE(w.cards().at(1)->settings().question, a);
        QCOMPARE(w.cards().at(1)->index(), 1);
        w.moveCard(w.cards().at(0), -1);  // already first: nothing moves
        QCOMPARE(w.cards().at(0)->settings().question, b);
        // The row shows the cards in the same order as the list.
        auto* row = w.cards().at(0)->parentWidget();
        QVERIFY(w.cards().at(0)->x() < w.cards().at(1)->x() || !row->isVisible());
    }

    // Issue 17: the board is a document and the cards are views of it: whatever changes
    // the document (a run's answer, an undo, an import) shows on the cards, and the user's
    // edits on a card reach the document.
    void cardsAreViewsOfTheBoard() {
        kevui::MainWindow w(kNoModel);
        QTRY_VERIFY(!w.loadingWorkspace());
        kevui::BoardDocument* doc = w.document();
        QCOMPARE(doc->size(), static_cast<int>(w.cards().size()));
        const int first = w.cards()[0]->number();

        kevui::CardSettings s = doc->card(first)->settings;
        s.question = QStringLiteral("Set in the document");
        s.temperature = 1.25;
        doc->setSettings(first, s);
        QCOMPARE(w.cards()[0]->settings().question, s.question);
        QCOMPARE(w.cards()[0]->settings().temperature, 1.25);

        w.cards()[0]->questionEdit()->setPlainText(QStringLiteral("Typed on the card"));
        QCOMPARE(doc->card(first)->settings.question, QStringLiteral("Typed on the card"));
        QCOMPARE(w.workspace().cards[0].settings.question, QStringLiteral("Typed on the card"));

        kevui::CardState extra;
        extra.settings.question = QStringLiteral("Inserted");
        extra.answer.text = QStringLiteral("An answer it came with");
        const int number = doc->insertCard(1, extra);
        QCOMPARE(w.cards()[1]->number(), number);
        QCOMPARE(w.cards()[1]->answerText(), extra.answer.text);
        QVERIFY(doc->moveCard(number, 0));
        QCOMPARE(w.cards()[0]->number(), number);
        QCOMPARE(w.cards()[0]->index(), 0);

        // A run writes answers into the document; the card shows them as they stream.
        doc->startAnswer(number);
        QCOMPARE(w.cards()[0]->answerText(), QString());
        doc->appendAnswer(number, QStringLiteral("Stream"));
        doc->appendAnswer(number, QStringLiteral("ed"));
        QCOMPARE(w.cards()[0]->answerText(), QStringLiteral("Streamed"));
        kevui::CardAnswer done = doc->card(number)->answer;
        done.finish = QStringLiteral("eos");
        done.tokens = {1, 2};
        done.generatedTokens = 2;
        done.ranWith = doc->card(number)->settings;
        doc->setAnswer(number, done);
        QVERIFY2(!w.cards()[0]->footerText().contains(QStringLiteral("stale")), qPrintable(w.cards()[0]->footerText()));
        // An edit after the answer makes it stale, in the document and on the card.
        w.cards()[0]->questionEdit()->setPlainText(QStringLiteral("Inserted, then edited"));
        QVERIFY(kevui::answerIsStale(doc->card(number)->answer, doc->card(number)->settings));
        QVERIFY2(w.cards()[0]->footerText().contains(QStringLiteral("stale")), qPrintable(w.cards()[0]->footerText()));

        const kevui::CardState taken = doc->takeCard(number);
        QCOMPARE(taken.answer.text, QStringLiteral("Streamed"));
        QCOMPARE(static_cast<int>(w.cards().size()), doc->size());
        for (const kevui::QuestionCard* c : w.cards()) QVERIFY(c->number() != number);
    }

    void sweepMakesVariants() {
        kevui::MainWindow w(kNoModel);
        kevui::QuestionCard* card = w.cards().at(1);
        const QString question = card->settings().question;
        w.sweepCard(card, 4);
        QCOMPARE(w.cards().size(), 6);
        const double expected[] = {0.0, 0.5, 1.0, 1.5};
        const auto seed = w.cards().at(1)->settings().seed;
        QVERIFY(seed.has_value());
        for (int k = 0; k < 4; ++k) {
            const kevui::CardSettings s = w.cards().at(1 + k)->settings();
            QCOMPARE(s.question, question);
            QCOMPARE(s.temperature, expected[k]);
            QCOMPARE(s.seed, seed);
        }
        kevui::QuestionCard* last = w.cards().last();
        last->questionEdit()->setPlainText(QStringLiteral("Seeds"));
        w.sweepCard(last, 3, kevui::MainWindow::SweepOver::Seed);
        QCOMPARE(w.cards().size(), 8);
        const kevui::CardSettings s0 = w.cards().at(5)->settings();
        QVERIFY(s0.temperature > 0.0);
        for (int k = 1; k < 3; ++k) {
            const kevui::CardSettings s = w.cards().at(5 + k)->settings();
            QCOMPARE(s.question, QStringLiteral("Seeds"));
            QCOMPARE(s.temperature, s0.temperature);
            QCOMPARE(*s.seed, *s0.seed + k);
        }
    }

    void sliderAndSpinStayInStep() {
        kevui::QuestionCard card;
        auto* slider = card.findChild<QSlider*>(QStringLiteral("temperatureSlider"));
        auto* spin = card.findChild<QDoubleSpinBox*>(QStringLiteral("temperatureSpin"));
        QVERIFY(slider && spin);
        QCOMPARE(slider->minimum(), 0);
        QCOMPARE(slider->maximum(), 200);
        QCOMPARE(spin->maximum(), 2.0);
        slider->setValue(135);
        QCOMPARE(spin->value(), 1.35);
        spin->setValue(0.42);
        QCOMPARE(slider->value(), 42);
        QCOMPARE(card.settings().temperature, 0.42);
        spin->setValue(2.0);
        QCOMPARE(slider->value(), 200);
        slider->setValue(0);
        QCOMPARE(spin->value(), 0.0);
        QCOMPARE(card.settings().temperature, 0.0);
    }

    void advancedSettingsRoundTrip() {
        kevui::QuestionCard card;
        kevui::CardSettings s;
        s.question = QStringLiteral("Héllo — ünïcode ✓");
        s.temperature = 1.25;
        s.topP = 0.9;
        s.topK = 40;
        s.minP = 0.05;                 // issue 17: min-p and repetition penalty in the card
        s.repetitionPenalty = 1.15;
        s.maxNewTokens = 77;
        s.seed = 18446744073709551615ull;  // the largest seed survives (stored as text)
        s.stopStrings = {QStringLiteral("\n\n"), QStringLiteral("END")};
        card.setSettings(s);
        QCOMPARE(card.settings(), s);
        const kevui::CardSettings back = kevui::settingsFromJson(kevui::toJson(s));
        QCOMPARE(back, s);
        const kev::SamplingSettings k = s.sampling();
        QCOMPARE(k.top_k, 40);
        QCOMPARE(k.min_p, 0.05f);
        QCOMPARE(k.repetition_penalty, 1.15f);
        QCOMPARE(k.max_new_tokens, 77);
        // Out of the card's range: replaced, and the card says which.
        kevui::CardSettings wild = s;
        wild.repetitionPenalty = 1e9;
        card.setSettings(wild);
        QCOMPARE(card.settings().repetitionPenalty, 3.0);
        QVERIFY2(card.messageText().contains(QStringLiteral("repetition penalty")), qPrintable(card.messageText()));
        QCOMPARE(*k.seed, 18446744073709551615ull);
        QCOMPARE(k.stop_strings.size(), std::size_t(2));
    }

    // Issue 17: finished answers are rendered as Markdown (a code block in a fixed-pitch
    // font), switchable to the raw text; model output cannot inject HTML.
    void answersRenderMarkdownOrRawText() {
        kevui::QuestionCard card;
        kevui::CardState st;
        st.settings.question = QStringLiteral("Show me C++.");
        st.answer.text = QStringLiteral("Here:\n\n```cpp\nint x = 1;\n```\n\n**done** <b>raw</b>");
        st.answer.finish = QStringLiteral("eos");
        card.setState(st);
        QVERIFY(card.rendersMarkdown());
        QTextDocument* doc = card.answerView()->document();
        bool codeBlock = false;
        for (QTextBlock b = doc->begin(); b.isValid(); b = b.next()) {
            if (b.text() == QStringLiteral("int x = 1;")) {
                codeBlock = b.blockFormat().hasProperty(QTextFormat::BlockCodeFence) ||
                            b.charFormat().fontFixedPitch() || b.begin().fragment().charFormat().fontFixedPitch();
            }
        }
        QVERIFY2(codeBlock, qPrintable(doc->toHtml()));
        QVERIFY(!doc->toPlainText().contains(QStringLiteral("```")));
        QVERIFY(!doc->toPlainText().contains(QStringLiteral("**done**")));
        QVERIFY2(doc->toPlainText().contains(QStringLiteral("<b>raw</b>")), qPrintable(doc->toPlainText()));  // shown, not applied
        card.setRenderMarkdown(false);
        QCOMPARE(doc->toPlainText(), st.answer.text);
        QCOMPARE(card.answerText(), st.answer.text);  // Copy and exports always use the raw text
    }

    // One function builds every request: the card's own system prompt wins over the board's,
    // LoRA follows the toolbar unless the card says, and Replay uses what the answer ran with.
    void requestsAreBuiltInOnePlace() {
        kevui::BoardInputs board;
        board.system = QStringLiteral("Be brief.");
        board.sharedContext = QStringLiteral("A shared page.");
        board.loraOn = true;
        board.loraScale = 0.5;
        kevui::CardSettings a;
        a.question = QStringLiteral("One?");
        kevui::CardSettings b = a;
        b.question = QStringLiteral("Two?");
        b.system = QStringLiteral("Answer in French.");
        b.lora = false;
        const kev::GenerationRequest r = kevui::boardRequest({a, b}, board);
        QCOMPARE(r.cards.size(), std::size_t(2));
        QCOMPARE(r.system.value_or(""), std::string("Be brief."));
        QCOMPARE(r.shared_context, std::string("A shared page."));
        QVERIFY(!r.cards[0].system);
        QCOMPARE(r.cards[1].system.value_or(""), std::string("Answer in French."));
        QVERIFY(r.cards[0].lora.enabled && !r.cards[1].lora.enabled);
        QCOMPARE(r.cards[0].lora.scale, 0.5f);
        QCOMPARE(*kevui::resolvedSettings(a, board).lora, true);

        kevui::CardAnswer ans;
        ans.tokens = {4, 5, 6, 7};
        ans.seedUsed = 99;
        ans.ranWith = kevui::resolvedSettings(b, board);
        ans.ranWithSystem = QStringLiteral("Be brief.");
        ans.ranWithSharedContext = QStringLiteral("A shared page.");
        ans.ranWithLoraScale = 0.5;
        kevui::CardSettings now = b;
        now.question = QStringLiteral("Edited since");
        kevui::BoardInputs boardNow;
        boardNow.system = QStringLiteral("Something else");
        const kev::GenerationRequest replay = kevui::replayRequest(ans, now, boardNow);
        QCOMPARE(replay.cards.size(), std::size_t(1));
        QCOMPARE(replay.cards[0].question, std::string("Two?"));
        QCOMPARE(replay.cards[0].system.value_or(""), std::string("Answer in French."));
        QCOMPARE(replay.system.value_or(""), std::string("Be brief."));
        QCOMPARE(replay.shared_context, std::string("A shared page."));
        QCOMPARE(replay.cards[0].sampling.seed.value_or(0), std::uint64_t(99));
        QCOMPARE(replay.cards[0].sampling.max_new_tokens, std::int64_t(4));
    }

    // Issue 17: what each precision holds for a model's shape, and the warning where a
    // precision has no fast kernel (forced here with the scalar kernel family).
    void precisionCostsAndWarnings() {
        kevui::ModelShape shape;  // SmolLM2-135M-like: 30 layers, tied head
        shape.linear = 106'000'000;
        shape.embedding = 28'311'552;
        shape.other = 35'000;
        shape.tiedHead = true;
        const qint64 f32 = kevui::estimatedWeightBytes(shape, kevui::PrecisionRow::F32);
        const qint64 half = kevui::estimatedWeightBytes(shape, kevui::PrecisionRow::Half);
        const qint64 four = kevui::estimatedWeightBytes(shape, kevui::PrecisionRow::FourBit);
        QCOMPARE(f32, 2 * half);
        QCOMPARE(f32, 4 * (shape.linear + shape.embedding + shape.other));
        // 4.5 bits a linear parameter (the tied head quantized apart), the rest in bf16.
        QCOMPARE(four, (shape.linear + shape.embedding) * 9 / 16 + 2 * (shape.embedding + shape.other));
        QVERIFY(four < half);
        // The built-in file's tied head keeps its Q8_0 blocks (34 bytes a 32-value block):
        // the embedding is looked up from them, so no bf16 copy is counted.
        kevui::ModelShape kept = shape;
        kept.keptEmbeddingBytes = shape.embedding / 32 * 34;
        const qint64 keptFour = kevui::estimatedWeightBytes(kept, kevui::PrecisionRow::FourBit);
        QCOMPARE(keptFour, shape.linear * 9 / 16 + kept.keptEmbeddingBytes + 2 * shape.other);
        QVERIFY(keptFour < four);
        QCOMPARE(kevui::estimatedWeightBytes(kept, kevui::PrecisionRow::Half), half);
        kept.tiedHead = false;  // an untied head counts in linear; the embedding is dense
        QCOMPARE(kevui::estimatedWeightBytes(kept, kevui::PrecisionRow::FourBit),
                 shape.linear * 9 / 16 + 2 * (shape.embedding + shape.other));
        QVERIFY(kevui::precisionCost(shape, kevui::PrecisionRow::F32, false).warning.isEmpty());

        const kev::Isa before = kev::isa_limit();
        kev::set_isa_limit(kev::Isa::Scalar);
        const kevui::PrecisionCost slow = kevui::precisionCost(shape, kevui::PrecisionRow::Half, false);
        kev::set_isa_limit(before);
        QVERIFY2(slow.warning.contains(QStringLiteral("slower than fp32")), qPrintable(slow.warning));
        QVERIFY2(kevui::precisionLabel(QStringLiteral("half"), slow).endsWith(QStringLiteral("slow here")),
                 qPrintable(kevui::precisionLabel(QStringLiteral("half"), slow)));
        QVERIFY(kevui::precisionCost(shape, kevui::PrecisionRow::Half, /*cuda=*/true).warning.isEmpty());
    }

    // Issue 17: an answer records what it ran with; an edit after it marks it stale.
    void answerRecordsItsInputsAndGoesStale() {
        kevui::CardSettings s;
        s.question = QStringLiteral("Why is the sky blue?");
        s.temperature = 0.9;
        s.system = QStringLiteral("Answer like a physicist.");
        kevui::CardAnswer a;
        a.text = QStringLiteral("Rayleigh scattering.");
        a.finish = QStringLiteral("eos");
        a.tokens = {5, 6, 7};
        a.seedUsed = 42;
        a.ranWith = s;
        a.ranWith->seed = 42;
        a.ranWith->lora = true;
        a.ranWithSharedContext = QStringLiteral("Physics class.");
        a.ranWithLoraScale = 0.5;
        a.ranWithSystem = QStringLiteral("Be brief.");
        a.ranWithAdapter = QStringLiteral("adapters/x");
        a.ranWithModelHash = QStringLiteral("00ff");
        QVERIFY(!kevui::answerIsStale(a, s));  // engine-picked seed, toolbar LoRA: unchanged
        kevui::CardSettings edited = s;
        edited.question += QStringLiteral(" Briefly.");
        QVERIFY(kevui::answerIsStale(a, edited));
        edited = s;
        edited.temperature = 0.2;
        QVERIFY(kevui::answerIsStale(a, edited));
        edited = s;
        edited.seed = 7;
        QVERIFY(kevui::answerIsStale(a, edited));
        edited = s;
        edited.system = QStringLiteral("Answer like a poet.");  // the card's own system prompt is an input too
        QVERIFY(kevui::answerIsStale(a, edited));

        kevui::Workspace w;
        w.cards.push_back({s, a});
        const auto back = kevui::workspaceFromJson(QJsonDocument(kevui::toJson(w, kevui::WithAnswers::Yes)).toJson(), nullptr);
        QVERIFY(back && back->cards.size() == 1);
        const kevui::CardAnswer& r = back->cards[0].answer;
        QVERIFY(r.ranWith);
        QCOMPARE(*r.ranWith, *a.ranWith);
        QCOMPARE(r.ranWithSharedContext, a.ranWithSharedContext);
        QCOMPARE(r.ranWithLoraScale, 0.5);
        QCOMPARE(r.ranWithModel, a.ranWithModel);
        QCOMPARE(r.ranWithSystem, a.ranWithSystem);
        QCOMPARE(r.ranWithAdapter, a.ranWithAdapter);
        QCOMPARE(r.ranWithModelHash, a.ranWithModelHash);
        QCOMPARE(back->cards[0].settings.system, s.system);

        // The Markdown export says what produced each answer, and which answers are stale.
        w.cards[0].answer.ranWithModel = QStringLiteral("models/tiny.gguf");
        w.cards[0].answer.ranWithWeights = QStringLiteral("q4_1, bf16");
        w.cards[0].answer.ranWithKev = QStringLiteral("9.9.9");
        w.cards[0].answer.ranWithModelHash = QStringLiteral("ab12");
        w.cards[0].answer.ranWithAdapter = QStringLiteral("adapters/capitals");
        QString md = kevui::answersMarkdown(w);
        QVERIFY2(md.contains(QStringLiteral("Ran with: model `models/tiny.gguf` (sha256 `ab12`), weights q4_1, bf16, "
                                            "LoRA on (`adapters/capitals`, scale 0.5), Kev 9.9.9")),
                 qPrintable(md));
        QVERIFY(!md.contains(QStringLiteral("stale")));

        // CSV: one row per card with what produced it; quoting and formula-looking text.
        w.cards[0].answer.text = QStringLiteral("=SUM(A1), and \"quoted\"\nsecond line");
        const QString csv = kevui::answersCsv(w);
        const QStringList lines = csv.split(QStringLiteral("\r\n"));
        QVERIFY2(lines[0].startsWith(QStringLiteral("card,from,question,system_prompt,temperature")), qPrintable(lines[0]));
        QVERIFY(lines[0].contains(QStringLiteral(",model,model_sha256,weights,kev_version,stale,")));
        QVERIFY2(csv.contains(QStringLiteral(",on,0.5,adapters/capitals,models/tiny.gguf,ab12,\"q4_1, bf16\",9.9.9,no,")),
                 qPrintable(csv));
        QVERIFY2(csv.contains(QStringLiteral("\"'=SUM(A1), and \"\"quoted\"\"\nsecond line\"")), qPrintable(csv));

        w.cards[0].settings.temperature = 0.1;
        md = kevui::answersMarkdown(w);
        QVERIFY2(md.contains(QStringLiteral("stale: the card was edited after this answer")), qPrintable(md));
        QVERIFY(kevui::answersCsv(w).contains(QStringLiteral(",yes,")));

        kevui::QuestionCard card;
        card.setState({s, a});
        QVERIFY2(!card.footerText().contains(QStringLiteral("stale")), qPrintable(card.footerText()));
        card.setSettings(edited);
        QVERIFY2(card.footerText().contains(QStringLiteral("stale")), qPrintable(card.footerText()));
    }

    void workspaceRestoredAfterRestart() {
        {
            kevui::MainWindow w(kNoModel);
            w.cards().at(0)->questionEdit()->setPlainText(QStringLiteral("First question, kept"));
            w.cards().at(2)->questionEdit()->setPlainText(QStringLiteral("Third — ünïcode"));
            kevui::CardState extra;
            extra.settings.question = QStringLiteral("A fourth card");
            extra.settings.temperature = 1.1;
            extra.answer.text = QStringLiteral("An answer that was streamed");
            extra.answer.finish = QStringLiteral("max_tokens");
            extra.answer.generatedTokens = 5;
            w.addCard(extra);
            w.setSharedContext(QStringLiteral("Shared document"));
            // Saved by the debounced autosave, without closing the window.
            QTRY_VERIFY_WITH_TIMEOUT(QFile::exists(workspaceFile()), 5000);
            QTRY_VERIFY_WITH_TIMEOUT(QFile(workspaceFile()).size() > 0, 5000);
            QTest::qWait(1000);
        }
        kevui::MainWindow w(kNoModel);
        QCOMPARE(w.cards().size(), 4);
        QCOMPARE(w.cards().at(0)->settings().question, QStringLiteral("First question, kept"));
        QCOMPARE(w.cards().at(2)->settings().question, QStringLiteral("Third — ünïcode"));
        QCOMPARE(w.cards().at(3)->settings().temperature, 1.1);
        QCOMPARE(w.cards().at(3)->answerText(), QStringLiteral("An answer that was streamed"));
        QVERIFY(w.cards().at(3)->footerText().contains(QStringLiteral("max_tokens")));
        QCOMPARE(w.workspace().sharedContext, QStringLiteral("Shared document"));
        QVERIFY(w.windowMessage().isEmpty());
    }

    void corruptWorkspaceIsKeptAsideAndReported() {
        {
            QFile f(workspaceFile());
            QVERIFY(f.open(QIODevice::WriteOnly));
            f.write("{ \"cards\": [ {\"question\": \"half a file");
        }
        kevui::MainWindow w(kNoModel);
        QVERIFY2(w.windowMessage().contains(QStringLiteral("unreadable")), qPrintable(w.windowMessage()));
        QCOMPARE(w.cards().size(), 3);  // a fresh start, not an empty window
        const QStringList aside = QDir(kevtest::workDir()).entryList({QStringLiteral("cards-workspace.json.corrupt-*")});
        QCOMPARE(aside.size(), 1);
        QVERIFY2(w.windowMessage().contains(aside.first()), qPrintable(w.windowMessage()));
        QFile kept(kevtest::workDir() + QLatin1Char('/') + aside.first());
        QVERIFY(kept.open(QIODevice::ReadOnly));
        QVERIFY(kept.readAll().contains("half a file"));  // the user's data, untouched
    }

    void questionSetsAndExports() {
        kevui::MainWindow w(kNoModel);
        w.cards().at(0)->questionEdit()->setPlainText(QStringLiteral("Saved question"));
        const QString set = kevtest::workDir() + QStringLiteral("/set.json");
        QVERIFY(w.saveQuestionSet(set));
        QVERIFY(w.loadQuestionSet(QStringLiteral(":/examples/classroom-quiz.json")));
        QCOMPARE(w.cards().size(), 4);
        QCOMPARE(w.cards().at(1)->settings().question, QStringLiteral("How many legs does a spider have?"));
        QVERIFY(w.loadQuestionSet(set));
        QCOMPARE(w.cards().size(), 3);
        QCOMPARE(w.cards().at(0)->settings().question, QStringLiteral("Saved question"));

        const QString md = kevtest::workDir() + QStringLiteral("/answers.md");
        QVERIFY(w.exportMarkdown(md));
        QFile mdFile(md);
        QVERIFY(mdFile.open(QIODevice::ReadOnly));
        const QString text = QString::fromUtf8(mdFile.readAll());
        QVERIFY(text.contains(QStringLiteral("## Card 1")));
        QVERIFY(text.contains(QStringLiteral("Saved question")));
        QVERIFY(text.contains(QStringLiteral("temperature")));

        const QString json = kevtest::workDir() + QStringLiteral("/answers.json");
        QVERIFY(w.exportJson(json));
        QFile jsonFile(json);
        QVERIFY(jsonFile.open(QIODevice::ReadOnly));
        const QJsonObject o = QJsonDocument::fromJson(jsonFile.readAll()).object();
        QCOMPARE(o.value(QStringLiteral("cards")).toArray().size(), 3);
        QVERIFY(o.value(QStringLiteral("cards")).toArray().at(0).toObject().contains(QStringLiteral("answer")));

        const QString bad = kevtest::workDir() + QStringLiteral("/bad.json");
        QFile badFile(bad);
        QVERIFY(badFile.open(QIODevice::WriteOnly));
        badFile.write("[1, 2, 3]");
        badFile.close();
        QVERIFY(!w.loadQuestionSet(bad));
        QVERIFY2(w.windowMessage().contains(QStringLiteral("not a usable question set")), qPrintable(w.windowMessage()));
        QCOMPARE(w.cards().size(), 3);  // nothing lost
    }

    void everyExampleSetLoads() {
        kevui::MainWindow w(kNoModel);
        const QStringList examples = QDir(QStringLiteral(":/examples")).entryList({QStringLiteral("*.json")});
        QVERIFY(examples.size() >= 3);
        for (const QString& name : examples) QVERIFY2(w.loadQuestionSet(QStringLiteral(":/examples/") + name), qPrintable(name));
    }
};

QTEST_MAIN(TestGuiCards)
#include "tst_gui_cards.moc"
