// The pack, drawn for teaching: the packed sequence as coloured segments (one colour per
// card, the shared context grey) and the attention mask (kev::dense_row_mask) as a
// picture. Hovering shows a row's token text, segment and position.
//
//   segments  [SSSS|0000000|11111|222222]
//   mask      row i may read row j: the block-diagonal causal picture of pack_plan.h
//
// While the pack runs, a line under the title follows its steps (cards joining and
// leaving), and rows served by the prefix cache are hatched.
#pragma once

#include <QImage>
#include <QWidget>

#include "engine_types.h"

namespace kevui {

class PackView : public QWidget {
    Q_OBJECT
public:
    explicit PackView(QWidget* parent = nullptr);

    void setPreview(const PackPreview& preview);
    void setMessage(const QString& message);  // instead of a pack (no model, errors)
    // While the pack runs: its latest step (number, rows, cards answering, cards that
    // joined or left), under the title. Empty: none (a preview).
    void setRunLine(const QString& line);
    QString runLine() const { return runLine_; }
    // Rows whose keys and values came from the prefix cache instead of being computed:
    // the first `shared` rows of the shared context and the first reusedOfCard[c] rows of
    // request card c's prompt. Drawn hatched in the strip.
    void setReused(qint64 shared, const QVector<qint64>& reusedOfCard);
    qint64 reusedRows() const;
    bool rowReused(qint64 row) const;
    bool hasPack() const { return hasPack_; }
    const PackPreview& preview() const { return preview_; }
    const QImage& maskImage() const { return mask_; }
    QString message() const { return message_; }

    // The hover text for packed row `row` (token text, segment, position, slot).
    QString describeRow(qint64 row) const;

    QSize sizeHint() const override { return {420, 260}; }

protected:
    void paintEvent(QPaintEvent* event) override;
    bool event(QEvent* event) override;

private:
    QColor rowColor(qint64 row) const;
    QRect stripRect() const;
    QRect maskRect() const;

    PackPreview preview_;
    QImage mask_;
    QString message_;
    QString runLine_;
    qint64 sharedReused_ = 0;
    QVector<qint64> reusedOfCard_;
    bool hasPack_ = false;
};

}  // namespace kevui
