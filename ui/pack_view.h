// The pack, drawn for teaching: the packed sequence as coloured segments (one colour per
// card, the shared context grey) and the attention mask (kev::dense_row_mask) as a
// picture. Hovering shows a row's token text, segment and position.
//
//   segments  [SSSS|0000000|11111|222222]
//   mask      row i may read row j: the block-diagonal causal picture of pack_plan.h
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
    bool hasPack_ = false;
};

}  // namespace kevui
