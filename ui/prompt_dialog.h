// "Prompt as the model sees it": a card's whole prompt after the chat template (system
// prompt, shared context, question and the template's special tokens), and the tokens
// the model reads, one per row with its id. For teaching, and for checking what a card
// really asked.
#pragma once

#include <QDialog>
#include <QStringList>
#include <QVector>

namespace kevui {

struct PromptView {
    int cardNumber = 0;
    QString text;        // the templated prompt
    QVector<int> ids;    // its tokens: the shared context's first, then the card's own
    QStringList pieces;  // each token's text
    int sharedTokens = 0;
};

// A token's text with its whitespace made visible: "·" for a space, "⏎" for a new line,
// "→" for a tab.
QString visibleWhitespace(const QString& piece);

class PromptDialog : public QDialog {
    Q_OBJECT
public:
    PromptDialog(const PromptView& view, QWidget* parent = nullptr);
    const PromptView& view() const { return view_; }

private:
    PromptView view_;
};

}  // namespace kevui
