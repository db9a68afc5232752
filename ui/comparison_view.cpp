#include "comparison_view.h"

#include <QButtonGroup>
#include <QDialogButtonBox>
#include <QEvent>
#include <QHBoxLayout>
#include <QHelpEvent>
#include <QLabel>
#include <QListWidget>
#include <QPainter>
#include <QPaintEvent>
#include <QRadioButton>
#include <QScrollArea>
#include <QSplitter>
#include <QToolTip>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>

#include <QHash>

#include "card_colors.h"

namespace kevui {

namespace {

// One selected card as the grid draws it.
struct ComparedAnswer {
    int number = 0;
    QColor color;
    QVector<int> ids;
    QVector<TokenView> details;  // empty: aligned by ids only
    QString finish;
};

constexpr int kCellPadX = 4;
constexpr int kCellPadY = 3;
constexpr int kMinCellWidth = 14;
constexpr int kMaxCellWidth = 180;  // a longer token is elided; its tooltip has it whole
constexpr int kRowGap = 2;
constexpr int kLineGap = 12;
constexpr int kMargin = 6;
const QColor kDivergenceColor(176, 0, 32);
const QColor kPlainCellColor(244, 244, 244);
const QColor kCellBorderColor(205, 205, 205);

QString quoted(const QString& s) { return QStringLiteral("“%1”").arg(s); }

// "2", "2 and 5", "2, 5 and 7".
QString numberList(const QVector<int>& numbers) {
    QStringList parts;
    for (int n : numbers) parts << QString::number(n);
    if (parts.size() <= 1) return parts.join(QString());
    const QString last = parts.takeLast();
    return parts.join(QStringLiteral(", ")) + QStringLiteral(" and ") + last;
}

QString cardsWord(const QVector<int>& numbers, bool capital) {
    const QString word = numbers.size() == 1 ? QStringLiteral("card") : QStringLiteral("cards");
    return (capital ? word.left(1).toUpper() + word.mid(1) : word) + QLatin1Char(' ') + numberList(numbers);
}

// The first few words of a question, for the card list.
QString firstWords(const QString& text, int words = 7) {
    const QStringList all = text.simplified().split(QLatin1Char(' '), Qt::SkipEmptyParts);
    QString out = all.mid(0, words).join(QLatin1Char(' '));
    if (all.size() > words) out += QStringLiteral(" …");
    return out.isEmpty() ? QStringLiteral("(no question)") : out;
}

// An answer the grid can show: token ids, or (a server's) text.
bool hasAnswer(const CardState& c) { return !c.answer.tokens.isEmpty() || !c.answer.text.isEmpty(); }

// A token of an answer as a cell shows it: its text with visible whitespace, else its id.
QString pieceText(const ComparedAnswer& a, int position) {
    if (position < a.details.size() && !a.details[position].piece.isEmpty())
        return visiblePiece(a.details[position].piece);
    return QStringLiteral("#%1").arg(a.ids[position]);
}

// The headline: where the answers part and what each says from there.
QString partingText(const QVector<ComparedAnswer>& answers, const TokenAlignment& alignment) {
    if (answers.size() < 2) return QStringLiteral("Tick two or more cards to compare their answers.");
    QVector<int> numbers;
    for (const ComparedAnswer& a : answers) numbers << a.number;
    const int d = alignment.divergence;
    if (d < 0) return QStringLiteral("%1 give the same %2 tokens.").arg(cardsWord(numbers, true)).arg(alignment.positions);
    constexpr int kBefore = 6;  // tokens of shared text shown before the parting
    constexpr int kAfter = 4;   // tokens of each answer shown after it
    QString before = d > kBefore ? QStringLiteral("…") : QString();
    for (int pos = std::max(0, d - kBefore); pos < d; ++pos) before += pieceText(answers.front(), pos);
    QStringList parts;
    for (qsizetype g = 0; g < alignment.groups.size(); ++g) {
        QVector<int> members;
        for (int i : alignment.groups[g]) members << answers[i].number;
        const ComparedAnswer& a = answers[alignment.groups[g].front()];
        QString next;
        if (g == alignment.endedGroup) {
            next = QStringLiteral("(ends)");
        } else {
            const int end = std::min(d + kAfter, static_cast<int>(a.ids.size()));
            for (int pos = d; pos < end; ++pos) next += pieceText(a, pos);
            next = quoted(next) + (a.ids.size() > end ? QStringLiteral("…") : QString());
        }
        parts << QStringLiteral("%1 %2").arg(cardsWord(members, false), next);
    }
    return QStringLiteral("%1 part at token %2%3: %4")
        .arg(cardsWord(numbers, true))
        .arg(d + 1)
        .arg(d == 0 ? QString() : QStringLiteral(", after %1").arg(quoted(before)))
        .arg(parts.join(QStringLiteral(" — ")));
}

}  // namespace

// The aligned answers, custom-painted: a grid of token cells wrapped in lines, one row
// per card in each line. Only the lines in view are painted, so 16 cards of 512 tokens
// scroll smoothly; the layout is recomputed when the width or the content changes.
class TokenGrid : public QWidget {
public:
    explicit TokenGrid(QWidget* parent) : QWidget(parent) {
        QSizePolicy policy(QSizePolicy::Preferred, QSizePolicy::Preferred);
        policy.setHeightForWidth(true);
        setSizePolicy(policy);
        setMouseTracking(true);
        setAttribute(Qt::WA_OpaquePaintEvent);
        setAccessibleName(QStringLiteral("Aligned answers"));
    }

    void setContent(QVector<ComparedAnswer> answers, TokenAlignment alignment, TokenColoring coloring) {
        answers_ = std::move(answers);
        alignment_ = std::move(alignment);
        coloring_ = coloring;
        measure();
        layoutLines(width());
        updateGeometry();
        update();
    }
    void setMessage(const QString& message) {
        message_ = message;
        update();
    }

    int rowOf(int number) const {
        for (int r = 0; r < answers_.size(); ++r)
            if (answers_[r].number == number) return r;
        return -1;
    }

    // The cell kinds: a token, the end of an answer, nothing.
    enum class Cell { Token, End, None };
    Cell cellKind(int row, int position) const {
        if (row < 0 || row >= answers_.size() || position < 0) return Cell::None;
        const qsizetype n = answers_[row].ids.size();
        if (position < n) return Cell::Token;
        return position == n && position < alignment_.positions ? Cell::End : Cell::None;
    }

    QString cellText(int row, int position) const {
        switch (cellKind(row, position)) {
        case Cell::Token:
            return pieceText(answers_[row], position);
        case Cell::End:
            return QStringLiteral("∎");
        case Cell::None:
            break;
        }
        return QString();
    }

    QColor cellColor(int row, int position) const {
        if (cellKind(row, position) != Cell::Token) return QColor();
        const ComparedAnswer& a = answers_[row];
        if (position >= a.details.size()) return QColor();
        return tokenColor(a.details[position], coloring_);
    }

    QString toolTip(int row, int position) const {
        const Cell kind = cellKind(row, position);
        if (kind == Cell::None) return QString();
        const ComparedAnswer& a = answers_[row];
        if (kind == Cell::End) {
            return QStringLiteral("<b>Card %1</b> ends after %2 tokens%3.")
                .arg(a.number)
                .arg(a.ids.size())
                .arg(a.finish.isEmpty() ? QString() : QStringLiteral(" (finish: %1)").arg(a.finish.toHtmlEscaped()));
        }
        QString html = QStringLiteral("<b>Card %1</b>, token %2: <b>%3</b>")
                           .arg(a.number)
                           .arg(position + 1)
                           .arg(quoted(cellText(row, position)).toHtmlEscaped());
        if (position >= a.details.size()) {
            return html + QStringLiteral("<br>id %1; this answer kept no probabilities or alternatives.")
                              .arg(a.ids[position]);
        }
        const TokenView& t = a.details[position];
        html += QStringLiteral("<br>probability %1 · entropy %2 nats · id %3")
                    .arg(percentText(std::exp(double(t.logprob))))
                    .arg(double(t.entropy), 0, 'f', 2)
                    .arg(t.id);
        if (t.top.isEmpty()) return html;
        html += QStringLiteral("<table cellspacing=\"0\" cellpadding=\"1\">"
                               "<tr><td colspan=\"2\"><i>What the model weighed:</i></td></tr>");
        bool chosenListed = false;
        for (const TokenAlternativeView& alt : t.top) {
            const bool chosen = alt.id == t.id;
            chosenListed = chosenListed || chosen;
            const QString piece = alt.piece.isEmpty() ? QStringLiteral("#%1").arg(alt.id) : visiblePiece(alt.piece);
            const QString cells = QStringLiteral("<td>%1</td><td align=\"right\">&nbsp;&nbsp;%2</td>")
                                      .arg(quoted(piece).toHtmlEscaped(), percentText(std::exp(double(alt.logprob))));
            html += chosen ? QStringLiteral("<tr style=\"font-weight:bold\">%1</tr>").arg(cells)
                           : QStringLiteral("<tr>%1</tr>").arg(cells);
        }
        html += QStringLiteral("</table>");
        if (!chosenListed) html += QStringLiteral("The chosen token was not among the top %1.").arg(t.top.size());
        return html;
    }

    QRect cellRect(int row, int position) const {
        if (cellKind(row, position) == Cell::None) return QRect();
        for (const Line& line : lines_) {
            if (position < line.first || position >= line.last) continue;
            return QRect(x_[position], line.top + headerHeight() + row * (cellHeight() + kRowGap),
                         widths_[position], cellHeight());
        }
        return QRect();
    }

    bool hasHeightForWidth() const override { return true; }
    int heightForWidth(int width) const override {
        const QVector<Line> lines = computeLines(width, nullptr);
        return lines.isEmpty() ? 120 : lines.back().top + lineHeight() + kMargin;
    }
    QSize sizeHint() const override { return {700, heightForWidth(700)}; }

protected:
    void resizeEvent(QResizeEvent* event) override {
        QWidget::resizeEvent(event);
        layoutLines(width());
    }

    bool event(QEvent* event) override {
        if (event->type() == QEvent::ToolTip) {
            auto* help = static_cast<QHelpEvent*>(event);
            const auto [row, position] = cellAt(help->pos());
            const QString text = toolTip(row, position);
            if (text.isEmpty()) {
                QToolTip::hideText();
                event->ignore();
            } else {
                QToolTip::showText(help->globalPos(), text, this, cellRect(row, position));
            }
            return true;
        }
        return QWidget::event(event);
    }

    void paintEvent(QPaintEvent* event) override {
        QPainter p(this);
        p.fillRect(event->rect(), palette().base());
        if (answers_.isEmpty()) {
            p.setPen(palette().color(QPalette::PlaceholderText));
            p.drawText(rect().adjusted(kMargin, kMargin, -kMargin, -kMargin), Qt::AlignTop | Qt::AlignLeft | Qt::TextWordWrap,
                       message_);
            return;
        }
        const QFontMetrics fm(font());
        QFont small = font();
        small.setPointSizeF(std::max(6.0, font().pointSizeF() * 0.8));
        QFont bold = font();
        bold.setBold(true);
        for (const Line& line : lines_) {
            const QRect area(0, line.top, width(), lineHeight());
            if (!area.intersects(event->rect())) continue;
            // The header: the line's first position (counted from 1) and the divergence mark.
            p.setFont(small);
            p.setPen(palette().color(QPalette::PlaceholderText));
            p.drawText(QRect(kMargin, line.top, gutter_ - kMargin, headerHeight()), Qt::AlignLeft | Qt::AlignVCenter,
                       QStringLiteral("%1").arg(line.first + 1));
            const int d = alignment_.divergence;
            if (d >= line.first && d < line.last) {
                p.setPen(kDivergenceColor);
                p.drawText(QRect(x_[d], line.top, std::max(widths_[d], 80), headerHeight()),
                           Qt::AlignLeft | Qt::AlignVCenter, QStringLiteral("▼ part here (%1)").arg(d + 1));
            }
            for (int row = 0; row < answers_.size(); ++row) {
                const ComparedAnswer& a = answers_[row];
                const int y = line.top + headerHeight() + row * (cellHeight() + kRowGap);
                // The gutter: the card's colour and number.
                p.setFont(bold);
                p.fillRect(QRect(kMargin, y + 2, 6, cellHeight() - 4), a.color);
                p.setPen(palette().color(QPalette::Text));
                p.drawText(QRect(kMargin + 10, y, gutter_ - kMargin - 12, cellHeight()), Qt::AlignLeft | Qt::AlignVCenter,
                           QStringLiteral("Card %1").arg(a.number));
                p.setFont(font());
                for (int pos = line.first; pos < line.last; ++pos) {
                    const Cell kind = cellKind(row, pos);
                    if (kind == Cell::None) continue;
                    const QRect r(x_[pos], y, widths_[pos], cellHeight());
                    const QColor fill = cellColor(row, pos);
                    p.fillRect(r, kind == Cell::End ? palette().base().color() : fill.isValid() ? fill : kPlainCellColor);
                    p.setPen(kCellBorderColor);
                    p.drawRect(r.adjusted(0, 0, -1, -1));
                    p.setPen(kind == Cell::End ? palette().color(QPalette::PlaceholderText) : QColor(Qt::black));
                    p.drawText(r.adjusted(kCellPadX, 0, -kCellPadX + 1, 0), Qt::AlignLeft | Qt::AlignVCenter,
                               fm.elidedText(cellText(row, pos), Qt::ElideRight, r.width() - 2 * kCellPadX + 1));
                    if (pos == d) {
                        p.setPen(QPen(kDivergenceColor, 2));
                        p.drawRect(r.adjusted(1, 1, -1, -1));
                    }
                }
            }
        }
    }

private:
    struct Line {
        int first = 0;  // positions [first, last)
        int last = 0;
        int top = 0;
    };

    int cellHeight() const { return fontMetrics().height() + 2 * kCellPadY; }
    int headerHeight() const { return fontMetrics().height(); }
    int lineHeight() const {
        return headerHeight() + static_cast<int>(answers_.size()) * (cellHeight() + kRowGap) + kLineGap;
    }

    // Column widths: the widest text any card has at that position.
    void measure() {
        const QFontMetrics fm(font());
        widths_.fill(kMinCellWidth, alignment_.positions);
        for (int row = 0; row < answers_.size(); ++row) {
            for (int pos = 0; pos < alignment_.positions; ++pos) {
                const QString text = cellText(row, pos);
                if (text.isEmpty()) break;
                const int w = fm.horizontalAdvance(text) + 2 * kCellPadX + 1;
                widths_[pos] = std::clamp(w, widths_[pos], kMaxCellWidth);
            }
        }
        QFont bold = font();
        bold.setBold(true);
        gutter_ = kMargin + 10 + QFontMetrics(bold).horizontalAdvance(QStringLiteral("Card 9999")) + 8;
    }

    // Lines for a width, and each position's x when `x` is given.
    QVector<Line> computeLines(int width, QVector<int>* x) const {
        QVector<Line> lines;
        if (x) x->fill(0, alignment_.positions);
        if (answers_.isEmpty()) return lines;
        const int right = std::max(width - kMargin, gutter_ + kMaxCellWidth);
        Line line;
        line.top = kMargin;
        int cx = gutter_;
        for (int pos = 0; pos < alignment_.positions; ++pos) {
            if (cx + widths_[pos] > right && pos > line.first) {
                line.last = pos;
                lines.push_back(line);
                line = Line{pos, pos, line.top + lineHeight()};
                cx = gutter_;
            }
            if (x) (*x)[pos] = cx;
            cx += widths_[pos] - 1;  // neighbouring cells share their border
        }
        line.last = alignment_.positions;
        lines.push_back(line);
        return lines;
    }

    void layoutLines(int width) { lines_ = computeLines(width, &x_); }

    std::pair<int, int> cellAt(const QPoint& pt) const {
        for (const Line& line : lines_) {
            if (pt.y() < line.top || pt.y() >= line.top + lineHeight()) continue;
            const int inRows = pt.y() - line.top - headerHeight();
            if (inRows < 0) return {-1, -1};
            const int row = inRows / (cellHeight() + kRowGap);
            for (int pos = line.first; pos < line.last; ++pos)
                if (pt.x() >= x_[pos] && pt.x() < x_[pos] + widths_[pos]) return {row, pos};
        }
        return {-1, -1};
    }

    QVector<ComparedAnswer> answers_;
    TokenAlignment alignment_;
    TokenColoring coloring_ = TokenColoring::Probability;
    QString message_;
    QVector<int> widths_;  // per position
    QVector<int> x_;       // per position, in its line
    QVector<Line> lines_;
    int gutter_ = 80;
};

ComparisonDialog::ComparisonDialog(const QVector<CardState>& cards, QWidget* parent) : QDialog(parent) {
    setWindowTitle(QStringLiteral("Compare answers"));
    setModal(false);

    list_ = new QListWidget(this);
    list_->setAccessibleName(QStringLiteral("Cards to compare"));
    list_->setToolTip(QStringLiteral("Tick two or more cards to see their answers token by token"));
    list_->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    list_->setTextElideMode(Qt::ElideRight);
    list_->setSpacing(2);
    auto* listLabel = new QLabel(QStringLiteral("&Cards"), this);
    listLabel->setBuddy(list_);

    auto* colourRow = new QHBoxLayout;
    auto* colourLabel = new QLabel(QStringLiteral("Colour tokens by:"), this);
    colourRow->addWidget(colourLabel);
    coloringButtons_ = new QButtonGroup(this);
    const struct {
        TokenColoring mode;
        const char* text;
        const char* tip;
    } modes[] = {
        {TokenColoring::Probability, "&Probability", "How likely the model found the token it produced: red is unlikely"},
        {TokenColoring::Entropy, "&Entropy", "How uncertain the model was at that step: red is many plausible tokens"},
        {TokenColoring::None, "&None", "No colours"},
    };
    for (const auto& m : modes) {
        auto* b = new QRadioButton(QString::fromUtf8(m.text), this);
        b->setToolTip(QString::fromUtf8(m.tip));
        b->setAccessibleName(QStringLiteral("Colour by %1").arg(QString::fromUtf8(m.text).remove(QLatin1Char('&')).toLower()));
        b->setChecked(m.mode == coloring_);
        coloringButtons_->addButton(b, static_cast<int>(m.mode));
        colourRow->addWidget(b);
    }
    colourRow->addStretch(1);
    legendLow_ = new QLabel(this);
    legend_ = new QLabel(this);
    legend_->setAccessibleName(QStringLiteral("Colour legend"));
    legendHigh_ = new QLabel(this);
    colourRow->addWidget(legendLow_);
    colourRow->addWidget(legend_);
    colourRow->addWidget(legendHigh_);
    connect(coloringButtons_, &QButtonGroup::idClicked, this,
            [this](int id) { setColoring(static_cast<TokenColoring>(id)); });

    divergenceLabel_ = new QLabel(this);
    divergenceLabel_->setTextFormat(Qt::PlainText);
    divergenceLabel_->setWordWrap(true);
    divergenceLabel_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    divergenceLabel_->setAccessibleName(QStringLiteral("Where the answers part"));
    QFont strong = divergenceLabel_->font();
    strong.setBold(true);
    divergenceLabel_->setFont(strong);
    note_ = new QLabel(this);
    note_->setTextFormat(Qt::PlainText);
    note_->setWordWrap(true);
    note_->setAccessibleName(QStringLiteral("Note on answers without token details"));

    grid_ = new TokenGrid(this);
    scroll_ = new QScrollArea(this);
    scroll_->setWidget(grid_);
    scroll_->setWidgetResizable(true);
    scroll_->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    scroll_->setAccessibleName(QStringLiteral("Aligned answers"));

    auto* left = new QWidget(this);
    auto* leftLayout = new QVBoxLayout(left);
    leftLayout->setContentsMargins(0, 0, 0, 0);
    leftLayout->addWidget(listLabel);
    leftLayout->addWidget(list_);
    auto* right = new QWidget(this);
    auto* rightLayout = new QVBoxLayout(right);
    rightLayout->setContentsMargins(0, 0, 0, 0);
    rightLayout->addLayout(colourRow);
    rightLayout->addWidget(divergenceLabel_);
    rightLayout->addWidget(note_);
    rightLayout->addWidget(scroll_, 1);
    auto* split = new QSplitter(Qt::Horizontal, this);
    split->addWidget(left);
    split->addWidget(right);
    split->setStretchFactor(1, 1);
    split->setSizes({230, 770});

    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Close, this);
    connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
    auto* layout = new QVBoxLayout(this);
    layout->addWidget(split, 1);
    layout->addWidget(buttons);

    connect(list_, &QListWidget::itemChanged, this, [this] { rebuild(); });
    cards_ = cards;
    fillCardList();
    QList<int> answered;
    for (const CardState& c : cards_)
        if (hasAnswer(c)) answered << c.number;
    selectCards(answered);
}

ComparisonDialog::~ComparisonDialog() = default;

void ComparisonDialog::fillCardList() {
    const QSignalBlocker block(list_);
    list_->clear();
    for (const CardState& c : cards_) {
        const bool answered = hasAnswer(c);
        // Two lines: which card and how it ran (the temperature its answer ran with), then
        // the question's first words (the whole question in the tooltip).
        auto* item = new QListWidgetItem(
            QStringLiteral("Card %1 · temperature %2%3\n%4")
                .arg(c.number)
                .arg(c.answer.ranWith ? c.answer.ranWith->temperature : c.settings.temperature, 0, 'f', 2)
                .arg(answered ? QString() : QStringLiteral(" · no answer"), firstWords(c.settings.question, 5)),
            list_);
        QPixmap swatch(12, 12);
        swatch.fill(cardColor(c.number - 1));
        item->setIcon(QIcon(swatch));
        item->setData(Qt::UserRole, c.number);
        item->setToolTip(c.settings.question);
        item->setFlags(answered ? (Qt::ItemIsEnabled | Qt::ItemIsUserCheckable) : Qt::ItemIsUserCheckable);
        item->setCheckState(Qt::Unchecked);
    }
}

void ComparisonDialog::setCards(const QVector<CardState>& cards) {
    const QList<int> ticked = selectedCards();
    cards_ = cards;
    fillCardList();
    selectCards(ticked);
}

void ComparisonDialog::selectCards(const QList<int>& numbers) {
    {
        const QSignalBlocker block(list_);
        for (int i = 0; i < list_->count(); ++i) {
            QListWidgetItem* item = list_->item(i);
            const bool on = numbers.contains(item->data(Qt::UserRole).toInt()) && (item->flags() & Qt::ItemIsEnabled);
            item->setCheckState(on ? Qt::Checked : Qt::Unchecked);
        }
    }
    rebuild();
}

QList<int> ComparisonDialog::selectedCards() const {
    QList<int> numbers;
    for (int i = 0; i < list_->count(); ++i)
        if (list_->item(i)->checkState() == Qt::Checked) numbers << list_->item(i)->data(Qt::UserRole).toInt();
    return numbers;
}

void ComparisonDialog::setColoring(TokenColoring mode) {
    coloring_ = mode;
    if (QAbstractButton* b = coloringButtons_->button(static_cast<int>(mode)); b && !b->isChecked()) b->setChecked(true);
    rebuild();
}

void ComparisonDialog::updateLegend() {
    const bool on = coloring_ != TokenColoring::None;
    legendLow_->setVisible(on);
    legend_->setVisible(on);
    legendHigh_->setVisible(on);
    if (!on) return;
    QPixmap bar(90, 12);
    QPainter p(&bar);
    for (int x = 0; x < bar.width(); ++x) {
        p.setPen(heatColor(double(x) / (bar.width() - 1)));
        p.drawLine(x, 0, x, bar.height());
    }
    p.setPen(kCellBorderColor);
    p.drawRect(bar.rect().adjusted(0, 0, -1, -1));
    p.end();
    legend_->setPixmap(bar);
    const bool prob = coloring_ == TokenColoring::Probability;
    legend_->setToolTip(prob ? QStringLiteral("White: the model was sure of the token (p ≈ 100 %); red: p ≤ %1")
                                   .arg(percentText(kRedProbability))
                             : QStringLiteral("White: the model was sure at that step (entropy 0); red: entropy ≥ "
                                              "%1 nats (many plausible tokens)")
                                   .arg(kRedEntropy));
    legend_->setAccessibleDescription(legend_->toolTip());
    legendLow_->setText(prob ? QStringLiteral("likely") : QStringLiteral("sure"));
    legendHigh_->setText(prob ? QStringLiteral("p ≤ %1").arg(percentText(kRedProbability))
                              : QStringLiteral("≥ %1 nats").arg(kRedEntropy));
}

void ComparisonDialog::rebuild() {
    const QList<int> selected = selectedCards();
    QVector<ComparedAnswer> answers;
    QVector<QVector<int>> ids;
    QVector<int> withoutDetails;
    QVector<int> withoutTokens;  // a server's answers without logprobs: nothing to align
    bool anyTextOnly = false;    // a server's answer: its tokens known by their text only
    for (const CardState& c : cards_) {
        if (!selected.contains(c.number)) continue;
        ComparedAnswer a;
        a.number = c.number;
        a.color = cardColor(c.number - 1);
        a.ids = c.answer.tokens;
        if (a.ids.isEmpty() && !c.answer.details.isEmpty()) {
            a.details = c.answer.details;
            anyTextOnly = true;
        } else {
            // Details that do not describe these ids (a hand-edited file) are not shown.
            bool match = c.answer.details.size() == c.answer.tokens.size();
            for (qsizetype i = 0; match && i < a.ids.size(); ++i) match = c.answer.details[i].id == a.ids[i];
            if (match) a.details = c.answer.details;
        }
        if (a.details.isEmpty() && !a.ids.isEmpty()) withoutDetails << c.number;
        if (a.details.isEmpty() && a.ids.isEmpty()) {
            if (!c.answer.text.isEmpty()) withoutTokens << c.number;
            continue;  // nothing to align
        }
        a.finish = c.answer.finish;
        answers << a;
    }
    // With a server's answer among them, answers are aligned by their tokens' text (the
    // same model on both sides has the same pieces): each distinct piece one number.
    if (anyTextOnly) {
        QHash<QString, int> pieces;
        for (ComparedAnswer& a : answers) {
            if (a.details.isEmpty()) continue;
            a.ids.clear();
            for (const TokenView& t : a.details) {
                auto it = pieces.constFind(t.piece);
                if (it == pieces.constEnd()) it = pieces.insert(t.piece, static_cast<int>(pieces.size()));
                a.ids << -1 - it.value();
            }
        }
    }
    for (const ComparedAnswer& a : answers) ids << a.ids;
    alignment_ = alignTokens(ids);

    updateLegend();
    const QString headline = partingText(answers, alignment_);
    divergenceLabel_->setText(headline);

    QString note;
    if (!withoutDetails.isEmpty()) {
        note = QStringLiteral("%1 %2 no token details (made before Kev kept them, or by a run without them): "
                              "aligned by token ids, shown as ids, without colours or alternatives.")
                   .arg(cardsWord(withoutDetails, true), withoutDetails.size() == 1 ? QStringLiteral("has")
                                                                                    : QStringLiteral("have"));
    }
    if (!withoutTokens.isEmpty()) {
        note += (note.isEmpty() ? QString() : QStringLiteral(" ")) +
                QStringLiteral("%1 came from a server that sent no token log-probabilities: not shown token by token.")
                    .arg(cardsWord(withoutTokens, true));
    }
    if (anyTextOnly)
        note += (note.isEmpty() ? QString() : QStringLiteral(" ")) +
                QStringLiteral("A server's answer names its tokens by their text: the answers are aligned by token text, "
                               "and its entropies are lower bounds from the alternatives it sent.");
    note_->setText(note);
    note_->setVisible(!note.isEmpty());

    grid_->setMessage(headline);
    grid_->setContent(answers.size() < 2 ? QVector<ComparedAnswer>{} : answers, alignment_, coloring_);
    grid_->setAccessibleDescription(headline);
}

QString ComparisonDialog::divergenceText() const { return divergenceLabel_->text(); }

QString ComparisonDialog::noteText() const { return note_->text(); }

QString ComparisonDialog::cellText(int number, int position) const {
    return grid_->cellText(grid_->rowOf(number), position);
}

QString ComparisonDialog::toolTipAt(int number, int position) const {
    return grid_->toolTip(grid_->rowOf(number), position);
}

QColor ComparisonDialog::cellColor(int number, int position) const {
    return grid_->cellColor(grid_->rowOf(number), position);
}

QRect ComparisonDialog::cellRect(int number, int position) const {
    return grid_->cellRect(grid_->rowOf(number), position);
}

QWidget* ComparisonDialog::grid() const { return grid_; }

}  // namespace kevui
