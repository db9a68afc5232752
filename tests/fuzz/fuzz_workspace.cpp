// The GUI's workspace / question-set file (ui/card_state.cpp, Qt Core only): parse, then
// write back and parse again. What the parser accepts must survive its own round trip
// (the app autosaves what it loaded), and the markdown export must not trip on it.
#include <QByteArray>
#include <QJsonDocument>
#include <QString>

#include <cstdint>
#include <cstdlib>

#include "board_export.h"
#include "card_state.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const QByteArray bytes(reinterpret_cast<const char*>(data), static_cast<qsizetype>(size));
    QString error;
    const auto ws = kevui::workspaceFromJson(bytes, &error);
    if (!ws) {
        if (error.isEmpty()) std::abort();  // a refusal always says why
        return 0;
    }
    (void)kevui::answersMarkdown(*ws);
    const QByteArray again = QJsonDocument(kevui::toJson(*ws, kevui::WithAnswers::Yes)).toJson();
    QString error2;
    const auto ws2 = kevui::workspaceFromJson(again, &error2);
    if (!ws2) {
        fprintf(stderr, "kev fuzz: a workspace that loaded does not load after saving: %s\n",
                qPrintable(error2));
        std::abort();
    }
    if (ws2->cards.size() != ws->cards.size()) std::abort();
    return 0;
}
