// PackPlan: the packed layout (positions, segments, cache slots, output rows), its
// validation, and the isolation mask against hand-drawn grids and a brute-force
// definition on random packs. Pure: no model, no tensors.
#include <QtTest>

#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kev/error.h"
#include "kev/pack_plan.h"

using kev::CardPrompt;
using kev::PackLimits;
using kev::PackPlan;
using kev::TokenId;

namespace {

constexpr std::int32_t S = PackPlan::kSharedSegment;

std::vector<TokenId> ids(std::int64_t n, TokenId first = 10) {
    std::vector<TokenId> v;
    for (std::int64_t i = 0; i < n; ++i) v.push_back(first + static_cast<TokenId>(i));
    return v;
}

PackLimits ctx(std::int64_t context_length) {
    PackLimits l;
    l.context_length = context_length;
    return l;
}

// The message of the kev::Error `f` throws with `code`; "NO ERROR" / "WRONG CODE: ..."
// otherwise, so a QVERIFY on contains() shows what happened.
QString errorOf(const std::function<void()>& f, kev::ErrorCode code) {
    try {
        f();
    } catch (const kev::Error& e) {
        if (e.code() != code) return QStringLiteral("WRONG CODE: ") + e.what();
        return QString::fromStdString(e.what());
    }
    return QStringLiteral("NO ERROR");
}

#define KEV_EXPECT_ERROR(call, code, fragment)                                       \
    do {                                                                             \
        const QString msg_ = errorOf([&] { (void)(call); }, code);                   \
        QVERIFY2(msg_.contains(QStringLiteral(fragment)),                            \
                 qPrintable(QStringLiteral("expected \"%1\" in: %2").arg(fragment, msg_))); \
    } while (0)

template <class T>
QString str(const std::vector<T>& v) {
    QStringList parts;
    for (const T& x : v) parts << QString::number(x);
    return parts.join(QLatin1Char(' '));
}

}  // namespace

class TestPackPlan : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void positionsRestartPerCard() {
        const PackPlan p = kev::build_pack_plan({{ids(3), 5}, {ids(2, 20), 5}, {ids(4, 30), 5}}, {}, ctx(100));
        QCOMPARE(p.rows(), std::int64_t(9));
        QCOMPARE(p.cards(), 3);
        QCOMPARE(str(p.tokens), QStringLiteral("10 11 12 20 21 30 31 32 33"));
        QCOMPARE(str(p.positions), QStringLiteral("0 1 2 0 1 0 1 2 3"));
        QCOMPARE(str(p.segments), QStringLiteral("0 0 0 1 1 2 2 2 2"));
        // Regions: card 0 [0, 8) = 3 + 5, card 1 [8, 15) = 2 + 5, card 2 [15, 24) = 4 + 5.
        QCOMPARE(str(p.slots), QStringLiteral("0 1 2 8 9 15 16 17 18"));
        QCOMPARE(str(p.output_rows), QStringLiteral("2 4 8"));
        QCOMPARE(p.cache_slots, std::int64_t(24));
        QCOMPARE(p.prefill_kv_len(), std::int64_t(19));
        QCOMPARE(p.shared_length, std::int64_t(0));
        QCOMPARE(p.segment_table.size(), std::size_t(3));
        const kev::PackSegment& c1 = p.card(1);
        QCOMPARE(c1.segment, 1);
        QCOMPARE(c1.row_begin, std::int64_t(3));
        QCOMPARE(c1.row_end, std::int64_t(5));
        QCOMPARE(c1.position_offset, std::int64_t(0));
        QCOMPARE(c1.slot_begin, std::int64_t(8));
        QCOMPARE(c1.slot_end, std::int64_t(15));
        QCOMPARE(c1.decode_slots, std::int64_t(5));
    }

    void sharedContextComesFirstAndOffsetsPositions() {
        const PackPlan p = kev::build_pack_plan({{ids(3), 4}, {ids(2, 20), 2}}, {7, 8}, ctx(100));
        QCOMPARE(p.shared_length, std::int64_t(2));
        QCOMPARE(str(p.tokens), QStringLiteral("7 8 10 11 12 20 21"));
        QCOMPARE(str(p.positions), QStringLiteral("0 1 2 3 4 2 3"));
        QCOMPARE(str(p.segments), QStringLiteral("-2 -2 0 0 0 1 1"));
        // Shared slots [0, 2) stored once; card 0 region [2, 9) = 3 + 4; card 1 [9, 13).
        QCOMPARE(str(p.slots), QStringLiteral("0 1 2 3 4 9 10"));
        QCOMPARE(str(p.output_rows), QStringLiteral("4 6"));
        QCOMPARE(p.cache_slots, std::int64_t(13));
        QCOMPARE(p.segment_table.size(), std::size_t(3));
        QCOMPARE(p.segment_table[0].segment, S);
        QCOMPARE(p.card(0).position_offset, std::int64_t(2));
        QCOMPARE(p.card(1).slot_begin, std::int64_t(9));
    }

    void decodeReserveIsCutToTheContext() {
        // Context 10, shared 2, prompt 5: only 3 positions are left to feed tokens back.
        const PackPlan p = kev::build_pack_plan({{ids(5), 100}}, {1, 2}, ctx(10));
        QCOMPARE(p.card(0).decode_slots, std::int64_t(3));
        QCOMPARE(p.card(0).max_new_tokens, std::int64_t(100));
        QCOMPARE(p.card(0).slot_end, std::int64_t(2 + 5 + 3));
        // A prompt that fills the context exactly still fits (it can sample one token).
        const PackPlan full = kev::build_pack_plan({{ids(8), 4}}, {1, 2}, ctx(10));
        QCOMPARE(full.card(0).decode_slots, std::int64_t(0));
    }

    void invalidPacksAreRefusedWithSpecificMessages() {
        using kev::ErrorCode;
        KEV_EXPECT_ERROR(kev::build_pack_plan({}, {}, ctx(10)), ErrorCode::InvalidArgument, "empty pack");
        KEV_EXPECT_ERROR(kev::build_pack_plan({{ids(2), 1}, {{}, 1}}, {}, ctx(10)),
                         ErrorCode::InvalidArgument, "card 2 has an empty prompt");
        KEV_EXPECT_ERROR(kev::build_pack_plan({{ids(2), 1}, {ids(11), 1}}, {}, ctx(10)),
                         ErrorCode::InvalidArgument, "card 2 is 11 tokens long");
        KEV_EXPECT_ERROR(kev::build_pack_plan({{ids(8), 1}}, {1, 2, 3}, ctx(10)),
                         ErrorCode::InvalidArgument, "(+ 3 of shared context)");
        KEV_EXPECT_ERROR(kev::build_pack_plan({{ids(1), 1}}, ids(10), ctx(10)),
                         ErrorCode::InvalidArgument, "shared context is 10 tokens");
        KEV_EXPECT_ERROR(kev::build_pack_plan({{ids(2), 0}}, {}, ctx(10)),
                         ErrorCode::InvalidArgument, "card 1: max new tokens must be at least 1");
        KEV_EXPECT_ERROR(kev::build_pack_plan({{ids(2), 1}}, {}, ctx(0)),
                         ErrorCode::InvalidArgument, "context length must be positive");
        PackLimits vocab = ctx(10);
        vocab.vocab_size = 11;
        KEV_EXPECT_ERROR(kev::build_pack_plan({{{3, 11}, 1}}, {}, vocab),
                         ErrorCode::InvalidArgument, "card 1: token 1 has id 11");
        KEV_EXPECT_ERROR(kev::build_pack_plan({{{3, -1}, 1}}, {}, ctx(10)),
                         ErrorCode::InvalidArgument, "has id -1");
        PackLimits rows = ctx(100);
        rows.max_prefill_rows = 5;
        KEV_EXPECT_ERROR(kev::build_pack_plan({{ids(3), 1}, {ids(3), 1}}, {}, rows),
                         ErrorCode::OutOfMemory, "the pack is 6 tokens long; at most 5");
        PackLimits slots = ctx(100);
        slots.max_cache_slots = 20;
        KEV_EXPECT_ERROR(kev::build_pack_plan({{ids(3), 10}, {ids(3), 10}}, {}, slots),
                         ErrorCode::OutOfMemory, "needs 26 cache slots");
        // Exactly at the limits is fine.
        rows.max_prefill_rows = 6;
        slots.max_cache_slots = 26;
        QCOMPARE(kev::build_pack_plan({{ids(3), 1}, {ids(3), 1}}, {}, rows).rows(), std::int64_t(6));
        QCOMPARE(kev::build_pack_plan({{ids(3), 10}, {ids(3), 10}}, {}, slots).cache_slots, std::int64_t(26));
    }

    void rowMaskWithoutSharedContext() {
        const PackPlan p = kev::build_pack_plan({{ids(3), 1}, {ids(2), 1}, {ids(3), 1}}, {}, ctx(100));
        const char* expected =
            "x.......\n"
            "xx......\n"
            "xxx.....\n"
            "...x....\n"
            "...xx...\n"
            ".....x..\n"
            ".....xx.\n"
            ".....xxx\n";
        QCOMPARE(QString::fromStdString(kev::mask_picture(kev::dense_row_mask(p), 8, 8)),
                 QString::fromLatin1(expected));
        QVERIFY(kev::may_attend(p, 2, 0));
        QVERIFY(!kev::may_attend(p, 0, 2));  // the future
        QVERIFY(!kev::may_attend(p, 3, 2));  // another card
    }

    void rowMaskWithSharedContext() {
        // The picture in pack_plan.h: shared rows 0-1, card 0 rows 2-4, card 1 rows 5-6.
        const PackPlan p = kev::build_pack_plan({{ids(3), 1}, {ids(2), 1}}, {1, 2}, ctx(100));
        const char* expected =
            "x......\n"
            "xx.....\n"
            "xxx....\n"
            "xxxx...\n"
            "xxxxx..\n"
            "xx...x.\n"
            "xx...xx\n";
        QCOMPARE(QString::fromStdString(kev::mask_picture(kev::dense_row_mask(p), 7, 7)),
                 QString::fromLatin1(expected));
        QVERIFY(kev::may_attend(p, 6, 1));   // a card sees the shared context
        QVERIFY(!kev::may_attend(p, 0, 1));  // the shared context is causal too
        QVERIFY(!kev::may_attend(p, 1, 2));  // and never sees a card
    }

    void slotMaskSkipsTheDecodeReserves() {
        // Shared slots 0-1; card 0 region [2, 7) (prompt 2-4, reserve 5-6);
        // card 1 region [7, 10) (prompt 7-8, reserve 9): the prefill reads 9 slots.
        const PackPlan p = kev::build_pack_plan({{ids(3), 2}, {ids(2), 1}}, {1, 2}, ctx(100));
        QCOMPARE(p.prefill_kv_len(), std::int64_t(9));
        const char* expected =
            "x........\n"
            "xx.......\n"
            "xxx......\n"
            "xxxx.....\n"
            "xxxxx....\n"
            "xx.....x.\n"
            "xx.....xx\n";
        QCOMPARE(QString::fromStdString(kev::mask_picture(kev::prefill_slot_mask(p), 7, 9)),
                 QString::fromLatin1(expected));
    }

    void maskPictureChecksItsSize() {
        KEV_EXPECT_ERROR(kev::mask_picture({1, 0, 1}, 2, 2), kev::ErrorCode::InvalidArgument, "not 2 x 2");
        KEV_EXPECT_ERROR(kev::may_attend(kev::build_pack_plan({{ids(2), 1}}, {}, ctx(10)), 0, 2),
                         kev::ErrorCode::InvalidArgument, "outside the pack");
        KEV_EXPECT_ERROR(kev::build_pack_plan({{ids(2), 1}}, {}, ctx(10)).card(1),
                         kev::ErrorCode::InvalidArgument, "card index 1 outside the pack's 1 cards");
    }

    // Random packs: 1-16 cards, random lengths, with and without shared context. The
    // masks equal the definition, written here independently from the segment table.
    void randomPacksMatchTheDefinition() {
        std::mt19937 rng(1234);
        auto uniform = [&rng](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
        for (int trial = 0; trial < 300; ++trial) {
            const int n = uniform(1, 16);
            const int shared = trial % 2 ? uniform(1, 9) : 0;
            std::vector<CardPrompt> cards;
            for (int c = 0; c < n; ++c) cards.push_back({ids(uniform(1, 12), 100 * c), uniform(1, 6)});
            const PackPlan p = kev::build_pack_plan(cards, ids(shared, 5000), ctx(64));
            const std::int64_t rows = p.rows();

            // Layout: rows in card order, positions restart after the shared context,
            // regions contiguous, disjoint and covering [shared, cache_slots).
            std::int64_t row = shared, slot = shared;
            for (int c = 0; c < n; ++c) {
                const kev::PackSegment& seg = p.card(c);
                const auto len = static_cast<std::int64_t>(cards[c].tokens.size());
                QCOMPARE(seg.row_begin, row);
                QCOMPARE(seg.slot_begin, slot);
                QCOMPARE(seg.slot_end, slot + len + seg.decode_slots);
                QCOMPARE(p.output_rows[c], row + len - 1);
                for (std::int64_t t = 0; t < len; ++t) {
                    QCOMPARE(p.positions[row + t], shared + t);
                    QCOMPARE(p.slots[row + t], slot + t);
                    QCOMPARE(p.segments[row + t], c);
                    QCOMPARE(p.tokens[row + t], cards[c].tokens[t]);
                }
                row += len;
                slot = seg.slot_end;
            }
            QCOMPARE(row, rows);
            QCOMPARE(slot, p.cache_slots);

            // The mask: row i of card c sees exactly [0, shared) + [begin(c), i].
            const std::vector<std::uint8_t> dense = kev::dense_row_mask(p);
            const std::vector<std::uint8_t> slots = kev::prefill_slot_mask(p);
            const std::int64_t kv = p.prefill_kv_len();
            for (std::int64_t i = 0; i < rows; ++i) {
                const std::int32_t seg = p.segments[i];
                const std::int64_t begin = seg == S ? 0 : p.card(seg).row_begin;
                std::vector<std::uint8_t> want_slots(static_cast<std::size_t>(kv), 0);
                for (std::int64_t j = 0; j < rows; ++j) {
                    const bool want = (j < shared && j <= i) || (j >= begin && j <= i);
                    QVERIFY2(dense[i * rows + j] == want, qPrintable(QStringLiteral("trial %1 row %2 col %3").arg(trial).arg(i).arg(j)));
                    QCOMPARE(kev::may_attend(p, i, j), want);
                    if (want) want_slots[p.slots[j]] = 1;
                }
                for (std::int64_t s = 0; s < kv; ++s) QCOMPARE(slots[i * kv + s], want_slots[s]);
            }
        }
    }
};

QTEST_GUILESS_MAIN(TestPackPlan)
#include "tst_pack_plan.moc"
