// The comparison view: answers aligned token by token (hand-made answers that part at a
// known token, equal answers, a prefix, three answers), the colour scales, the dialog's
// divergence, cells and tooltips, answers without details, and the token details' trip
// through the workspace file (hostile entries refused by name).
//
// With KEV_SCREENSHOT_DIR set, `screenshot` answers one question three times with the
// built-in model and saves the dialog as comparison-view.png there (the README's picture).
#include <QAbstractButton>
#include <QHelpEvent>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLabel>
#include <QPainter>
#include <QListWidget>
#include <QElapsedTimer>
#include <QToolTip>
#include <QtTest>

#include <cmath>
#include <limits>

#include "card_state.h"
#include "comparison_view.h"
#include "kev/session.h"
#include "kev/weights.h"
#include "kev_test_env.h"
#include "token_align.h"
#include "token_view.h"

using kevui::CardState;
using kevui::TokenColoring;
using kevui::TokenView;

namespace {

struct Tok {
    int id;
    const char* piece;
    double p;
};

// A token with its alternatives: the chosen one first unless `p` is small, then fillers.
TokenView token(const Tok& t, const QVector<Tok>& alternatives = {}, double entropy = 0.2) {
    TokenView v;
    v.id = t.id;
    v.piece = QString::fromUtf8(t.piece);
    v.logprob = static_cast<float>(std::log(t.p));
    v.entropy = static_cast<float>(entropy);
    for (const Tok& a : alternatives)
        v.top.push_back({a.id, QString::fromUtf8(a.piece), static_cast<float>(std::log(a.p))});
    if (alternatives.isEmpty()) v.top.push_back({t.id, v.piece, v.logprob});
    return v;
}

CardState card(int number, const QString& question, double temperature, const QVector<TokenView>& details,
               bool keepDetails = true) {
    CardState c;
    c.number = number;
    c.settings.question = question;
    c.settings.temperature = temperature;
    for (const TokenView& t : details) {
        c.answer.tokens.push_back(t.id);
        c.answer.text += t.piece;
    }
    if (keepDetails) c.answer.details = details;
    c.answer.finish = QStringLiteral("stop");
    c.answer.generatedTokens = details.size();
    return c;
}

const Tok kThe{10, "The", 0.97}, kCapital{11, " capital", 0.93}, kIs{12, " is", 0.88};
const Tok kParis{13, " Paris", 0.90}, kLyon{20, " Lyon", 0.05}, kMarseille{21, " Marseille", 0.03};
const Tok kDot{14, ".", 0.8}, kComma{22, ",", 0.6}, kNewline{15, "\n", 0.5};

// Three answers to one question: 2 and 7 agree on "The capital is Paris." (7 goes on),
// 5 says Lyon at token 3 (counted from 0), an unlikely choice among three alternatives.
QVector<CardState> threeCards(bool keepDetails = true) {
    const QString q = QStringLiteral("What is the capital of France? Answer in one short sentence.");
    const QVector<Tok> atThree{kParis, kLyon, kMarseille};
    const QVector<TokenView> paris{token(kThe), token(kCapital), token(kIs), token(kParis, atThree, 0.45), token(kDot)};
    QVector<TokenView> lyon{token(kThe), token(kCapital), token(kIs), token(kLyon, atThree, 0.45),
                            token(kComma, {}, 2.9)};
    QVector<TokenView> parisOn = paris;
    parisOn.push_back(token(kNewline, {}, 3.5));
    return {card(2, q, 0.0, paris, keepDetails), card(5, q, 1.2, lyon, keepDetails),
            card(7, q, 0.7, parisOn, keepDetails)};
}

QString workspaceWithDetails(const QJsonValue& details, const QJsonArray& tokens = QJsonArray{10}) {
    QJsonObject answer{{"text", "The"}, {"tokens", tokens}, {"details", details}};
    QJsonObject c{{"question", "q"}, {"answer", answer}};
    return QString::fromUtf8(QJsonDocument(QJsonObject{{"cards", QJsonArray{c}}}).toJson());
}

QJsonObject goodDetail() {
    return QJsonObject{{"piece", "The"}, {"logprob", -0.03}, {"entropy", 0.2},
                       {"top", QJsonArray{QJsonArray{10, "The", -0.03}, QJsonArray{11, "A", -4.0}}}};
}

}  // namespace

class TestGuiCompare : public QObject {
    Q_OBJECT
private Q_SLOTS:
    // ---- alignment ----------------------------------------------------------------

    void twoAnswersPartAtTheKnownToken() {
        const kevui::TokenAlignment a = kevui::alignTokens({{1, 2, 3, 4, 5}, {1, 2, 3, 9, 5}});
        QCOMPARE(a.divergence, 3);
        QCOMPARE(a.positions, 5);
        QCOMPARE(a.groups, (QVector<QVector<int>>{{0}, {1}}));
        QCOMPARE(a.endedGroup, -1);
    }

    void equalAnswersNeverPart() {
        const kevui::TokenAlignment a = kevui::alignTokens({{1, 2, 3}, {1, 2, 3}, {1, 2, 3}});
        QCOMPARE(a.divergence, -1);
        QCOMPARE(a.positions, 3);
        QVERIFY(a.groups.isEmpty());
        QCOMPARE(kevui::alignTokens({}).divergence, -1);
        QCOMPARE(kevui::alignTokens({{1, 2}}).divergence, -1);  // one answer: nothing to part from
        QCOMPARE(kevui::alignTokens({{}, {}}).divergence, -1);
    }

    void aPrefixPartsWhereItEnds() {
        const kevui::TokenAlignment a = kevui::alignTokens({{1, 2, 3, 4, 5}, {1, 2, 3}});
        QCOMPARE(a.divergence, 3);
        QCOMPARE(a.positions, 5);
        QCOMPARE(a.groups, (QVector<QVector<int>>{{0}, {1}}));
        QCOMPARE(a.endedGroup, 1);
        QCOMPARE(kevui::alignTokens({{}, {7}}).divergence, 0);
    }

    void threeAnswers() {
        // 0 and 2 agree up to 4; 1 leaves them at 2.
        kevui::TokenAlignment a = kevui::alignTokens({{1, 2, 3, 4, 5}, {1, 2, 8}, {1, 2, 3, 4, 6}});
        QCOMPARE(a.divergence, 2);
        QCOMPARE(a.groups, (QVector<QVector<int>>{{0, 2}, {1}}));
        // All three part at once, one of them by ending.
        a = kevui::alignTokens({{1, 5}, {1}, {1, 6}, {1}});
        QCOMPARE(a.divergence, 1);
        QCOMPARE(a.groups, (QVector<QVector<int>>{{0}, {1, 3}, {2}}));
        QCOMPARE(a.endedGroup, 1);
    }

    // ---- colours and text ---------------------------------------------------------

    void coloursAreMonotone() {
        // Lower probability, higher entropy: hotter, and every step darker.
        double lastHeat = -1.0;
        for (double p : {1.0, 0.9, 0.5, 0.2, 0.1, 0.05, 0.02, 0.01, 0.001}) {
            const double h = kevui::probabilityHeat(p);
            QVERIFY2(h >= lastHeat, qPrintable(QString("p %1").arg(p)));
            lastHeat = h;
        }
        QCOMPARE(kevui::probabilityHeat(1.0), 0.0);
        QCOMPARE(kevui::probabilityHeat(0.001), 1.0);
        QVERIFY(std::abs(kevui::probabilityHeat(0.1) - 0.5) < 1e-9);
        lastHeat = -1.0;
        for (double nats : {0.0, 0.1, 0.5, 1.0, 2.0, 3.0, 4.0, 6.0}) {
            const double h = kevui::entropyHeat(nats);
            QVERIFY2(h >= lastHeat, qPrintable(QString("entropy %1").arg(nats)));
            lastHeat = h;
        }
        int lastLightness = 256;
        for (int i = 0; i <= 20; ++i) {
            const QColor c = kevui::heatColor(i / 20.0);
            QVERIFY2(c.lightness() < lastLightness, qPrintable(QString("heat %1: %2").arg(i / 20.0).arg(c.name())));
            lastLightness = c.lightness();
            QVERIFY2(c.lightness() > 150, "black text stays readable");
        }
        QVERIFY(kevui::heatColor(0.0).red() - kevui::heatColor(0.0).blue() < 10);  // neutral
        QVERIFY(kevui::heatColor(1.0).red() - kevui::heatColor(1.0).blue() > 100);  // red

        const TokenView sure = token(kParis), unlikely = token(kLyon);
        QVERIFY(kevui::tokenColor(sure, TokenColoring::Probability) != kevui::tokenColor(unlikely, TokenColoring::Probability));
        QVERIFY(kevui::tokenColor(sure, TokenColoring::Probability).lightness() >
                kevui::tokenColor(unlikely, TokenColoring::Probability).lightness());
        QVERIFY(kevui::tokenColor(token(kDot, {}, 0.1), TokenColoring::Entropy).lightness() >
                kevui::tokenColor(token(kDot, {}, 3.0), TokenColoring::Entropy).lightness());
        QVERIFY(!kevui::tokenColor(sure, TokenColoring::None).isValid());
    }

    void whitespaceIsVisible() {
        QCOMPARE(kevui::visiblePiece(QStringLiteral(" a\n\tb\r")), QStringLiteral("·a⏎→b␍"));
        QCOMPARE(kevui::visiblePiece(QString(QChar(0x1b))), QStringLiteral("␛"));
        QCOMPARE(kevui::visiblePiece(QString()), QStringLiteral("∅"));
        QCOMPARE(kevui::percentText(0.8321), QStringLiteral("83.2 %"));
        QCOMPARE(kevui::percentText(0.0004), QStringLiteral("<0.1 %"));
        QCOMPARE(kevui::percentText(1.0), QStringLiteral("100.0 %"));
    }

    // ---- the dialog ---------------------------------------------------------------

    void dialogShowsWhereTwoCardsPart() {
        kevui::ComparisonDialog d(threeCards(), nullptr);
        QCOMPARE(d.selectedCards(), (QList<int>{2, 5, 7}));  // every answered card to start with
        d.selectCards({2, 5});
        QCOMPARE(d.selectedCards(), (QList<int>{2, 5}));
        QCOMPARE(d.divergence(), 3);
        QVERIFY2(d.divergenceText().startsWith(QStringLiteral("Cards 2 and 5 part at token 4")), qPrintable(d.divergenceText()));
        QVERIFY2(d.divergenceText().contains(QStringLiteral("card 2 “·Paris.”")), qPrintable(d.divergenceText()));
        QVERIFY2(d.divergenceText().contains(QStringLiteral("card 5 “·Lyon,”")), qPrintable(d.divergenceText()));
        QVERIFY(d.noteText().isEmpty());
        QCOMPARE(d.cellText(2, 0), QStringLiteral("The"));
        QCOMPARE(d.cellText(2, 3), QStringLiteral("·Paris"));
        QCOMPARE(d.cellText(5, 3), QStringLiteral("·Lyon"));
        QCOMPARE(d.cellText(7, 3), QString());  // not selected
        QCOMPARE(d.cellText(2, 9), QString());

        // The tooltip: the token's own numbers and every alternative with its percentage.
        const QString tip = d.toolTipAt(5, 3);
        for (const char* want : {"Card 5", "token 4", "·Lyon", "probability 5.0 %", "entropy 0.45 nats",
                                 "·Paris", "90.0 %", "·Marseille", "3.0 %"})
            QVERIFY2(tip.contains(QString::fromUtf8(want)), qPrintable(QString("%1 not in: %2").arg(want, tip)));

        // A low-probability token is coloured apart from a likely one.
        QVERIFY(d.cellColor(5, 3).isValid());
        QVERIFY(d.cellColor(5, 3) != d.cellColor(2, 3));
        QVERIFY(d.cellColor(5, 3).lightness() < d.cellColor(2, 3).lightness());

        // Hovering shows that tooltip (the real event path).
        d.resize(1000, 600);
        d.show();
        QVERIFY(QTest::qWaitForWindowExposed(&d));
        const QRect r = d.cellRect(5, 3);
        QVERIFY(!r.isNull());
        QVERIFY(d.grid()->rect().contains(r));
        QHelpEvent help(QEvent::ToolTip, r.center(), d.grid()->mapToGlobal(r.center()));
        QCoreApplication::sendEvent(d.grid(), &help);
        QTRY_VERIFY2(QToolTip::text().contains(QStringLiteral("·Marseille")), qPrintable(QToolTip::text()));
        QToolTip::hideText();
    }

    void prefixAndThreeCardsInTheDialog() {
        kevui::ComparisonDialog d(threeCards(), nullptr);
        d.selectCards({2, 7});
        QCOMPARE(d.divergence(), 5);  // 2 ends where 7 goes on
        QCOMPARE(d.cellText(2, 5), QStringLiteral("∎"));
        QCOMPARE(d.cellText(7, 5), QStringLiteral("⏎"));
        QVERIFY2(d.toolTipAt(2, 5).contains(QStringLiteral("ends after 5 tokens")), qPrintable(d.toolTipAt(2, 5)));
        QVERIFY2(d.divergenceText().contains(QStringLiteral("card 2 (ends)")), qPrintable(d.divergenceText()));
        d.selectCards({2, 5, 7});
        QCOMPARE(d.divergence(), 3);
        QVERIFY2(d.divergenceText().startsWith(QStringLiteral("Cards 2, 5 and 7 part at token 4")), qPrintable(d.divergenceText()));
        QVERIFY2(d.divergenceText().contains(QStringLiteral("cards 2 and 7 “·Paris.")), qPrintable(d.divergenceText()));
        d.selectCards({5});
        QCOMPARE(d.divergence(), -1);
        QVERIFY(d.divergenceText().contains(QStringLiteral("Tick two or more cards")));
        d.selectCards({2, 2, 99});  // duplicates and unknown numbers
        QCOMPARE(d.selectedCards(), QList<int>{2});
    }

    void coloringSwitch() {
        kevui::ComparisonDialog d(threeCards(), nullptr);
        d.selectCards({2, 5});
        QCOMPARE(d.coloring(), TokenColoring::Probability);
        const QColor byProbability = d.cellColor(5, 4);
        d.setColoring(TokenColoring::Entropy);
        QVERIFY(d.cellColor(5, 4).isValid());
        QVERIFY(d.cellColor(5, 4) != byProbability);  // p 0.6 but entropy 2.9
        // The radio buttons are the switch; each has an accessible name.
        QList<QAbstractButton*> buttons = d.findChildren<QAbstractButton*>();
        QAbstractButton* none = nullptr;
        for (QAbstractButton* b : buttons) {
            if (b->accessibleName() == QStringLiteral("Colour by none")) none = b;
        }
        QVERIFY(none);
        none->click();
        QCOMPARE(d.coloring(), TokenColoring::None);
        QVERIFY(!d.cellColor(5, 3).isValid());
        QVERIFY(!d.grid()->accessibleName().isEmpty());
        QVERIFY(!d.findChild<QListWidget*>()->accessibleName().isEmpty());
    }

    void answersWithoutDetailsAlignByIds() {
        QVector<CardState> cards = threeCards(false);
        cards[2].answer.details = threeCards()[2].answer.details;  // card 7 keeps its details
        kevui::ComparisonDialog d(cards, nullptr);
        d.selectCards({2, 5, 7});
        QCOMPARE(d.divergence(), 3);
        QVERIFY2(d.noteText().contains(QStringLiteral("Cards 2 and 5 have no token details")), qPrintable(d.noteText()));
        QCOMPARE(d.cellText(2, 3), QStringLiteral("#13"));
        QVERIFY(!d.cellColor(2, 3).isValid());
        QVERIFY(d.toolTipAt(2, 3).contains(QStringLiteral("kept no probabilities")));
        QCOMPARE(d.cellText(7, 3), QStringLiteral("·Paris"));
        QVERIFY(d.cellColor(7, 3).isValid());
    }

    // A server's answer knows its tokens by their text only (no ids): beside a local one
    // of the same model, the answers are aligned by token text; one that came without
    // log-probabilities is named in the note; such details survive the workspace file.
    void aServersAnswerAlignsByTokenText() {
        QVector<CardState> cards = threeCards();
        CardState& server = cards[1];  // card 5, as a server's answer
        server.answer.tokens.clear();
        for (TokenView& t : server.answer.details) {
            t.id = -1;
            for (auto& alt : t.top) alt.id = -1;
        }
        cards[2].answer.tokens.clear();  // card 7: a server's answer without logprobs
        cards[2].answer.details.clear();
        {
            kevui::ComparisonDialog d(cards, nullptr);
            d.selectCards({2, 5, 7});
            QCOMPARE(d.divergence(), 3);
            QCOMPARE(d.cellText(5, 3), QStringLiteral("·Lyon"));
            QCOMPARE(d.cellText(2, 3), QStringLiteral("·Paris"));
            QVERIFY(d.cellColor(5, 3).isValid());
            QVERIFY2(d.noteText().contains(QStringLiteral("aligned by token text")), qPrintable(d.noteText()));
            QVERIFY2(d.noteText().contains(QStringLiteral("Card 7 came from a server that sent no token log-probabilities")),
                     qPrintable(d.noteText()));
        }
        kevui::Workspace w;
        w.cards = cards;
        QString error;
        const std::optional<kevui::Workspace> back =
            kevui::workspaceFromJson(QJsonDocument(kevui::toJson(w, kevui::WithAnswers::Yes)).toJson(), &error);
        QVERIFY2(back, qPrintable(error));
        QVERIFY(back->cards[1].answer.tokens.isEmpty());
        QCOMPARE(back->cards[1].answer.details, server.answer.details);
    }

    void aLargeBoard() {
        // 16 cards of 512 tokens: built, laid out and painted (the time is reported, not
        // checked: these machines are shared).
        QVector<CardState> cards;
        for (int c = 0; c < 16; ++c) {
            QVector<TokenView> details;
            for (int i = 0; i < 512; ++i)
                details.push_back(token({100 + (i * 7 + (i > 200 ? c : 0)) % 50, i % 9 == 0 ? " word\n" : " tok", 0.5}));
            cards.push_back(card(c + 1, QStringLiteral("q"), 0.7, details));
        }
        QElapsedTimer t;
        t.start();
        kevui::ComparisonDialog d(cards, nullptr);
        d.resize(1000, 600);
        d.show();
        QVERIFY(QTest::qWaitForWindowExposed(&d));
        d.setColoring(TokenColoring::Entropy);
        d.grab();
        qInfo("16 cards x 512 tokens: shown and painted in %lld ms", static_cast<long long>(t.elapsed()));
        QCOMPARE(d.divergence(), 201);
        // The grid is as tall as its lines: the last cell lies inside it (scrolled to).
        QVERIFY(!d.cellRect(16, 511).isNull());
        QVERIFY(d.grid()->rect().contains(d.cellRect(16, 511)));
        QVERIFY(d.grid()->height() > 2000);
    }

    // ---- the workspace file -------------------------------------------------------

    void detailsRoundTripThroughTheWorkspace() {
        kevui::Workspace w;
        w.cards = threeCards();
        w.cards[1].answer.details[1].piece = QStringLiteral("<0xE4>中\n");
        const QByteArray json = QJsonDocument(kevui::toJson(w, kevui::WithAnswers::Yes)).toJson();
        QString error;
        const std::optional<kevui::Workspace> back = kevui::workspaceFromJson(json, &error);
        QVERIFY2(back, qPrintable(error));
        for (int c = 0; c < 3; ++c) QCOMPARE(back->cards[c].answer.details, w.cards[c].answer.details);
        // Without answers (a question set) nothing of them is written.
        QVERIFY(!QJsonDocument(kevui::toJson(w, kevui::WithAnswers::No)).toJson().contains("details"));
        // An answer saved before details existed loads without them.
        kevui::Workspace old = w;
        for (CardState& c : old.cards) c.answer.details.clear();
        const std::optional<kevui::Workspace> plain =
            kevui::workspaceFromJson(QJsonDocument(kevui::toJson(old, kevui::WithAnswers::Yes)).toJson(), &error);
        QVERIFY2(plain, qPrintable(error));
        QVERIFY(plain->cards[0].answer.details.isEmpty());
        QVERIFY(!QJsonDocument(kevui::toJson(old, kevui::WithAnswers::Yes)).toJson().contains("details"));
    }

    void engineValuesAreBroughtInBounds() {
        kev::CardResult r;
        r.tokens = {5, 6};
        kev::TokenDetail d;
        d.id = 5;
        d.piece = " hi";
        d.logprob = -std::numeric_limits<float>::infinity();
        d.entropy = std::numeric_limits<float>::quiet_NaN();
        for (int k = 0; k < 30; ++k) d.top.push_back({k, "x", k == 0 ? 1e-7f : -float(k)});
        r.details = {d, d};
        r.details[1].id = 6;
        const QVector<TokenView> v = kevui::tokenViewsFrom(r);
        QCOMPARE(v.size(), qsizetype(2));
        QCOMPARE(v[0].piece, QStringLiteral(" hi"));
        QCOMPARE(v[0].logprob, kevui::kMinLogprob);
        QCOMPARE(v[0].entropy, 0.0f);
        QCOMPARE(v[0].top.size(), qsizetype(kevui::kMaxTokenAlternatives));
        QCOMPARE(v[0].top[0].logprob, 0.0f);
        QCOMPARE(v[1].id, 6);
        // What was brought in bounds is what a file may hold: it loads back.
        kevui::Workspace w;
        w.cards = {card(1, QStringLiteral("q"), 0.5, v)};
        QString error;
        QVERIFY2(kevui::workspaceFromJson(QJsonDocument(kevui::toJson(w, kevui::WithAnswers::Yes)).toJson(), &error),
                 qPrintable(error));
    }

    void hostileDetailsAreRefusedByName_data() {
        QTest::addColumn<QString>("json");
        QTest::addColumn<QString>("error");
        const auto with = [](const char* key, const QJsonValue& v) {
            QJsonObject o = goodDetail();
            o[QString::fromLatin1(key)] = v;
            return QJsonArray{o};
        };
        QTest::newRow("not a list") << workspaceWithDetails(QJsonValue(3)) << "the token details are not a list";
        QTest::newRow("too many") << workspaceWithDetails(QJsonArray{goodDetail(), goodDetail()})
                                  << "2 token details for 1 tokens";
        QTest::newRow("not an object") << workspaceWithDetails(QJsonArray{7}) << "token 1: not a JSON object";
        QTest::newRow("piece") << workspaceWithDetails(with("piece", 5)) << "token 1: piece is not a string";
        QTest::newRow("long piece") << workspaceWithDetails(with("piece", QString(2000, QLatin1Char('a'))))
                                    << "token 1: piece is longer than 1024 characters";
        QTest::newRow("logprob text") << workspaceWithDetails(with("logprob", "high")) << "token 1: logprob is not a number";
        QTest::newRow("logprob positive") << workspaceWithDetails(with("logprob", 3))
                                          << "token 1: logprob 3 is outside [-1000, 0]";
        QTest::newRow("logprob huge") << workspaceWithDetails(with("logprob", -1e300))
                                      << "token 1: logprob -1e+300 is outside [-1000, 0]";
        QTest::newRow("entropy") << workspaceWithDetails(with("entropy", -1)) << "token 1: entropy -1 is outside [0, 100]";
        QTest::newRow("no top") << workspaceWithDetails(with("top", QJsonValue())) << "token 1: top is not a list";
        QJsonArray many;
        for (int k = 0; k < 21; ++k) many.append(QJsonArray{k, "a", -1.0});
        QTest::newRow("21 alternatives") << workspaceWithDetails(with("top", many))
                                         << "token 1: 21 alternatives; at most 20 are kept";
        QTest::newRow("alternative shape") << workspaceWithDetails(with("top", QJsonArray{QJsonArray{1, "a"}}))
                                           << "token 1: alternative 1 is not a [id, piece, logprob] list";
        QTest::newRow("alternative id") << workspaceWithDetails(with("top", QJsonArray{QJsonArray{-1, "a", -1.0}}))
                                        << "token 1: alternative 1: the id is not a token id";
        QTest::newRow("fractional id") << workspaceWithDetails(with("top", QJsonArray{QJsonArray{1.5, "a", -1.0}}))
                                       << "token 1: alternative 1: the id is not a token id";
        QTest::newRow("huge id") << workspaceWithDetails(with("top", QJsonArray{QJsonArray{1e12, "a", -1.0}}))
                                 << "token 1: alternative 1: the id is not a token id";
        QTest::newRow("alternative piece") << workspaceWithDetails(with("top", QJsonArray{QJsonArray{1, 2, -1.0}}))
                                           << "token 1: alternative 1: piece is not a string";
        QTest::newRow("alternative logprob")
            << workspaceWithDetails(with("top", QJsonArray{QJsonArray{1, "a", 0.5}}))
            << "token 1: alternative 1: logprob 0.5 is outside [-1000, 0]";
    }

    void hostileDetailsAreRefusedByName() {
        QFETCH(QString, json);
        QFETCH(QString, error);
        QString why;
        QVERIFY(!kevui::workspaceFromJson(json.toUtf8(), &why));
        QCOMPARE(why, QStringLiteral("card 1: answer details: ") + error);
    }

    void goodDetailsLoad() {
        QString why;
        const auto w = kevui::workspaceFromJson(workspaceWithDetails(QJsonArray{goodDetail()}).toUtf8(), &why);
        QVERIFY2(w, qPrintable(why));
        const TokenView& t = w->cards[0].answer.details[0];
        QCOMPARE(t.id, 10);
        QCOMPARE(t.piece, QStringLiteral("The"));
        QCOMPARE(t.top.size(), qsizetype(2));
        QCOMPARE(t.top[1].piece, QStringLiteral("A"));
        QCOMPARE(t.top[1].logprob, -4.0f);
    }

    // ---- the README's picture -----------------------------------------------------

    // Real answers of the built-in model in the view, hovered where they part, written
    // as a picture: to the test's work folder, or to KEV_SCREENSHOT_DIR (the README's is
    // made with KEV_SCREENSHOT_DIR=docs).
    void screenshot() {
        QString dir = qEnvironmentVariable("KEV_SCREENSHOT_DIR");
        if (dir.isEmpty()) dir = kevtest::workDir();
        // One question answered greedily and at two temperatures by the built-in model.
        // The precision kev-cli and the app choose by default ("auto": 4-bit for this file).
        const std::string model = kevtest::builtinModel().toStdString();
        kev::SessionOptions load;
        kev::set_precision(load.load, kev::choose_auto_precision(model).name);
        const auto session = kev::Session::open(model, load);
        // Seeds picked so that the answers share a beginning: 1 and 2 agree for 17 tokens,
        // 3 leaves them at token 10.
        const QString question = QStringLiteral("Explain why the sky is blue in two sentences.");
        const struct {
            double temperature;
            quint64 seed;
        } runs[] = {{0.0, 1}, {0.7, 1}, {0.7, 2}};
        kev::GenerationRequest request;
        for (const auto& run : runs) {
            kev::CardRequest c;
            c.question = question.toStdString();
            c.sampling.temperature = static_cast<float>(run.temperature);
            c.sampling.seed = run.seed;
            c.sampling.max_new_tokens = 56;
            request.cards.push_back(c);
        }
        const kev::Generator g = session->generator();
        kev::RunOptions options;
        options.logprobs = 5;
        const kev::GenerationResult result = g.run(g.prepare(request), options);
        QVector<CardState> cards;
        for (std::size_t i = 0; i < result.cards.size(); ++i) {
            const kev::CardResult& r = result.cards[i];
            CardState c;
            c.number = static_cast<int>(i) + 1;
            c.settings.question = question;
            c.settings.temperature = runs[i].temperature;
            c.answer.text = QString::fromStdString(r.text);
            c.answer.finish = QString::fromLatin1(kev::to_string(r.finish));
            for (kev::TokenId t : r.tokens) c.answer.tokens.push_back(t);
            c.answer.details = kevui::tokenViewsFrom(r);
            cards.push_back(c);
        }
        kevui::ComparisonDialog d(cards, nullptr);
        d.resize(1000, 600);
        d.show();
        QVERIFY(QTest::qWaitForWindowExposed(&d));
        QVERIFY2(d.divergence() >= 0, "the three answers are the same");
        // Hovering card 3's token where it leaves the others: its tooltip, painted into the
        // picture (a tooltip is a window of its own, which grab() leaves out).
        const QRect cell = d.cellRect(3, d.divergence());
        QHelpEvent help(QEvent::ToolTip, cell.center(), d.grid()->mapToGlobal(cell.center()));
        QCoreApplication::sendEvent(d.grid(), &help);
        const auto tipWindow = [] {
            for (QWidget* w : QApplication::topLevelWidgets())
                if (w->inherits("QTipLabel") && w->isVisible()) return w;
            return static_cast<QWidget*>(nullptr);
        };
        QTRY_VERIFY(tipWindow());
        QPixmap shot = d.grab();
        {
            QPainter p(&shot);
            p.drawPixmap(d.mapFromGlobal(tipWindow()->mapToGlobal(QPoint(0, 0))), tipWindow()->grab());
        }
        QToolTip::hideText();
        const QString path = dir + QStringLiteral("/comparison-view.png");
        QVERIFY(shot.save(path));
        const QImage back(path);
        QCOMPARE(back.size(), d.size() * d.devicePixelRatio());
        QVERIFY2(d.toolTipAt(3, d.divergence()).contains(QStringLiteral("%")), qPrintable(d.toolTipAt(3, d.divergence())));
        qInfo("wrote %s; %s", qPrintable(path), qPrintable(d.divergenceText()));
    }
};

QTEST_MAIN(TestGuiCompare)
#include "tst_gui_compare.moc"
