// One colour per card, shared by the card's header, the pack view and the gauges, so a
// card is recognisable everywhere. The shared context is grey.
#pragma once

#include <QColor>

namespace kevui {

inline QColor cardColor(int card) {
    // Well-separated hues (golden-angle steps), light enough for black text.
    const int hue = (card * 137 + 200) % 360;
    return QColor::fromHsv(hue, 110, 235);
}

inline QColor sharedContextColor() { return QColor(190, 190, 190); }

}  // namespace kevui
