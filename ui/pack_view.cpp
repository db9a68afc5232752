#include "pack_view.h"

#include <QHelpEvent>
#include <QPainter>
#include <QToolTip>

#include "card_colors.h"

namespace kevui {

namespace {
constexpr int kMargin = 6;
constexpr int kTextHeight = 18;
constexpr int kStripHeight = 18;
constexpr qint64 kMaxMaskSide = 1024;
}  // namespace

PackView::PackView(QWidget* parent) : QWidget(parent) {
    setObjectName(QStringLiteral("packView"));
    setMouseTracking(true);
    setMinimumHeight(140);
    message_ = QStringLiteral("The pack appears here once a model is loaded and a card has a question.");
}

void PackView::setPreview(const PackPreview& preview) {
    preview_ = preview;
    hasPack_ = true;
    message_.clear();
    runLine_.clear();
    sharedReused_ = 0;
    reusedOfCard_.clear();
    const kev::PackPlan& plan = preview_.plan;
    const qint64 rows = plan.rows();
    // One pixel per (row, column) up to kMaxMaskSide; a longer pack (a whole document as
    // shared context) is sampled instead, so the picture stays bounded in memory.
    const int side = static_cast<int>(std::min<qint64>(rows, kMaxMaskSide));
    mask_ = QImage(side, side, QImage::Format_RGB32);
    mask_.fill(Qt::white);
    for (int y = 0; y < side; ++y) {
        const qint64 i = y * rows / side;
        const QRgb c = rowColor(i).darker(130).rgb();
        auto* line = reinterpret_cast<QRgb*>(mask_.scanLine(y));
        for (int x = 0; x < side; ++x) {
            if (kev::may_attend(plan, i, x * rows / side)) line[x] = c;
        }
    }
    update();
}

void PackView::setMessage(const QString& message) {
    message_ = message;
    hasPack_ = false;
    preview_ = PackPreview{};
    mask_ = QImage();
    update();
}

void PackView::setRunLine(const QString& line) {
    runLine_ = line;
    update();
}

void PackView::setReused(qint64 shared, const QVector<qint64>& reusedOfCard) {
    sharedReused_ = shared;
    reusedOfCard_ = reusedOfCard;
    update();
}

bool PackView::rowReused(qint64 row) const {
    const kev::PackPlan& plan = preview_.plan;
    if (!hasPack_ || row < 0 || row >= plan.rows()) return false;
    if (row < plan.shared_length) return row < sharedReused_;
    const std::int32_t seg = plan.segments[static_cast<std::size_t>(row)];
    if (seg < 0 || seg >= plan.cards() || seg >= reusedOfCard_.size()) return false;
    return row - plan.card(seg).row_begin < reusedOfCard_[seg];
}

qint64 PackView::reusedRows() const {
    const kev::PackPlan& plan = preview_.plan;
    qint64 n = std::min<qint64>(sharedReused_, plan.shared_length);
    for (std::int32_t c = 0; c < plan.cards() && c < reusedOfCard_.size(); ++c)
        n += std::min<qint64>(reusedOfCard_[c], plan.card(c).length());
    return n;
}

QColor PackView::rowColor(qint64 row) const {
    const std::int32_t seg = preview_.plan.segments[static_cast<std::size_t>(row)];
    if (seg == kev::PackPlan::kSharedSegment) return sharedContextColor();
    const int card = seg < preview_.cardOfRequest.size() ? preview_.cardOfRequest[seg] : seg;
    return cardColor(card);
}

// The strip and the mask share their width, so a strip cell sits above its mask column.
QRect PackView::maskRect() const {
    const int top = kMargin + 2 * kTextHeight + kStripHeight + kMargin;
    const int side = std::max(0, std::min(width() - 2 * kMargin, height() - top - kMargin));
    return QRect(kMargin, top, side, side);
}

QRect PackView::stripRect() const {
    return QRect(kMargin, kMargin + 2 * kTextHeight, maskRect().width(), kStripHeight);
}

QString PackView::describeRow(qint64 row) const {
    const kev::PackPlan& plan = preview_.plan;
    if (!hasPack_ || row < 0 || row >= plan.rows()) return QString();
    const auto r = static_cast<std::size_t>(row);
    const std::int32_t seg = plan.segments[r];
    const QString segment = seg == kev::PackPlan::kSharedSegment
                                ? QStringLiteral("shared context")
                                : QStringLiteral("card %1").arg((seg < preview_.cardOfRequest.size() ? preview_.cardOfRequest[seg] : seg) + 1);
    QString piece = row < preview_.rowPieces.size() ? preview_.rowPieces[static_cast<int>(row)] : QString();
    piece.replace(QLatin1Char('\n'), QStringLiteral("\\n"));
    return QStringLiteral("row %1 · token %2 \"%3\" · %4 · position %5 · slot %6%7")
        .arg(row)
        .arg(plan.tokens[r])
        .arg(piece, segment)
        .arg(plan.positions[r])
        .arg(plan.slots[r])
        .arg(rowReused(row) ? QStringLiteral(" · reused from the prefix cache") : QString());
}

void PackView::paintEvent(QPaintEvent*) {
    QPainter p(this);
    p.fillRect(rect(), palette().window());
    if (!hasPack_) {
        p.setPen(palette().text().color());
        p.drawText(rect().adjusted(kMargin, kMargin, -kMargin, -kMargin), Qt::AlignCenter | Qt::TextWordWrap, message_);
        return;
    }
    const kev::PackPlan& plan = preview_.plan;
    const qint64 rows = plan.rows();
    p.setPen(palette().text().color());
    p.drawText(QRect(kMargin, kMargin, width() - 2 * kMargin, kTextHeight), Qt::AlignLeft | Qt::AlignVCenter,
               QStringLiteral("%1 packed rows · %2 cards%3 · %4 cache slots · attention mask below (row reads column)")
                   .arg(rows)
                   .arg(plan.cards())
                   .arg(plan.shared_length ? QStringLiteral(" + %1 shared").arg(plan.shared_length) : QString())
                   .arg(plan.cache_slots));
    const qint64 reused = reusedRows();
    const QString second = reused > 0 ? QStringLiteral("%1 rows reused from the prefix cache (hatched)%2")
                                            .arg(reused)
                                            .arg(runLine_.isEmpty() ? QString() : QStringLiteral(" · ") + runLine_)
                                      : runLine_;
    p.drawText(QRect(kMargin, kMargin + kTextHeight, width() - 2 * kMargin, kTextHeight), Qt::AlignLeft | Qt::AlignVCenter,
               second);
    const QRect strip = stripRect();
    for (qint64 i = 0; i < rows; ++i) {
        const int x0 = strip.left() + static_cast<int>(strip.width() * i / rows);
        const int x1 = strip.left() + static_cast<int>(strip.width() * (i + 1) / rows);
        const QRect cell(x0, strip.top(), std::max(1, x1 - x0), strip.height());
        p.fillRect(cell, rowColor(i));
        if (rowReused(i)) p.fillRect(cell, QBrush(palette().text().color(), Qt::BDiagPattern));
    }
    // Segment borders, so cards of similar colour stay apart.
    p.setPen(QPen(Qt::black, 1));
    for (const kev::PackSegment& s : plan.segment_table) {
        const int x = strip.left() + static_cast<int>(strip.width() * s.row_begin / rows);
        p.drawLine(x, strip.top(), x, strip.bottom());
    }
    const QRect m = maskRect();
    if (!mask_.isNull() && m.width() > 0) {
        p.drawImage(m, mask_);  // nearest-neighbour scaling keeps the cells sharp
        p.setPen(palette().mid().color());
        p.drawRect(m.adjusted(0, 0, -1, -1));
    }
}

bool PackView::event(QEvent* event) {
    if (event->type() == QEvent::ToolTip && hasPack_) {
        auto* help = static_cast<QHelpEvent*>(event);
        const qint64 rows = preview_.plan.rows();
        const QRect strip = stripRect();
        const QRect m = maskRect();
        QString tip;
        if (strip.contains(help->pos()) && rows > 0) {
            tip = describeRow((help->pos().x() - strip.left()) * rows / std::max(1, strip.width()));
        } else if (m.contains(help->pos()) && rows > 0) {
            const qint64 i = (help->pos().y() - m.top()) * rows / std::max(1, m.height());
            const qint64 j = (help->pos().x() - m.left()) * rows / std::max(1, m.width());
            const bool reads = kev::may_attend(preview_.plan, i, j);
            tip = QStringLiteral("%1\n%2\n%3").arg(describeRow(i), reads ? QStringLiteral("may attend to") : QStringLiteral("masked from"),
                                                 describeRow(j));
        }
        if (tip.isEmpty()) QToolTip::hideText();
        else QToolTip::showText(help->globalPos(), tip, this);
        return true;
    }
    return QWidget::event(event);
}

}  // namespace kevui
