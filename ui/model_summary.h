// A short, human-readable description of a model file, read from its header only.
#pragma once

#include <QString>

namespace kevui {

struct ModelSummary {
    bool ok = false;
    QString path;
    QString name;          // general.name, or the file name
    QString architecture;  // general.architecture
    qint64 tensorCount = 0;
    qint64 fileBytes = 0;
    QString error;         // set when ok is false
};

ModelSummary summarizeModel(const QString& path);

}  // namespace kevui
