#include "prompt_dialog.h"

#include <QDialogButtonBox>
#include <QHeaderView>
#include <QLabel>
#include <QPlainTextEdit>
#include <QSplitter>
#include <QTableWidget>
#include <QVBoxLayout>

namespace kevui {

QString visibleWhitespace(const QString& piece) {
    QString out;
    out.reserve(piece.size());
    for (const QChar c : piece) {
        if (c == QLatin1Char(' ')) out += QChar(0x00B7);
        else if (c == QLatin1Char('\n')) out += QChar(0x23CE);
        else if (c == QLatin1Char('\t')) out += QChar(0x2192);
        else out += c;
    }
    return out;
}

PromptDialog::PromptDialog(const PromptView& view, QWidget* parent) : QDialog(parent), view_(view) {
    setObjectName(QStringLiteral("promptDialog"));
    setWindowTitle(QStringLiteral("Card %1: the prompt as the model sees it").arg(view.cardNumber));
    resize(760, 560);
    auto* layout = new QVBoxLayout(this);
    auto* summary = new QLabel(this);
    summary->setObjectName(QStringLiteral("promptSummary"));
    summary->setWordWrap(true);
    summary->setText(view.sharedTokens > 0
                         ? QStringLiteral("%1 tokens: the first %2 are shared by every card (computed once), "
                                          "the other %3 are this card's own. The answer starts after the last one.")
                               .arg(view.ids.size())
                               .arg(view.sharedTokens)
                               .arg(view.ids.size() - view.sharedTokens)
                         : QStringLiteral("%1 tokens, all this card's own. The answer starts after the last one.")
                               .arg(view.ids.size()));
    layout->addWidget(summary);

    auto* splitter = new QSplitter(Qt::Vertical, this);
    auto* text = new QPlainTextEdit(splitter);
    text->setObjectName(QStringLiteral("promptText"));
    text->setAccessibleName(QStringLiteral("The templated prompt"));
    text->setReadOnly(true);
    text->setPlainText(view.text);
    text->setLineWrapMode(QPlainTextEdit::WidgetWidth);

    auto* tokens = new QTableWidget(static_cast<int>(view.ids.size()), 3, splitter);
    tokens->setObjectName(QStringLiteral("promptTokens"));
    tokens->setAccessibleName(QStringLiteral("The prompt's tokens"));
    tokens->setHorizontalHeaderLabels({QStringLiteral("Token"), QStringLiteral("Id"), QStringLiteral("Part")});
    tokens->setEditTriggers(QAbstractItemView::NoEditTriggers);
    tokens->verticalHeader()->setDefaultSectionSize(20);
    tokens->horizontalHeader()->setSectionResizeMode(0, QHeaderView::Stretch);
    for (int i = 0; i < view.ids.size(); ++i) {
        auto* piece = new QTableWidgetItem(visibleWhitespace(view.pieces.value(i)));
        piece->setToolTip(QStringLiteral("token %1 of %2").arg(i + 1).arg(view.ids.size()));
        tokens->setItem(i, 0, piece);
        tokens->setItem(i, 1, new QTableWidgetItem(QString::number(view.ids[i])));
        const bool shared = i < view.sharedTokens;
        auto* part = new QTableWidgetItem(shared ? QStringLiteral("shared") : QStringLiteral("card %1").arg(view.cardNumber));
        if (shared) part->setForeground(Qt::darkGray);
        tokens->setItem(i, 2, part);
    }
    splitter->addWidget(text);
    splitter->addWidget(tokens);
    layout->addWidget(splitter, 1);

    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Close, this);
    connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
    layout->addWidget(buttons);
}

}  // namespace kevui
