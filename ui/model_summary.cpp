#include "model_summary.h"

#include <QFileInfo>

#include "kev/error.h"
#include "kev/gguf.h"

namespace kevui {

ModelSummary summarizeModel(const QString& path) {
    ModelSummary s;
    s.path = path;
    const QFileInfo fi(path);
    s.name = fi.fileName();
    if (!fi.exists()) {
        s.error = QStringLiteral("Model not found: %1").arg(path);
        return s;
    }
    s.fileBytes = fi.size();
    try {
        const auto gguf = kev::GgufFile::open(path.toStdString());
        if (auto name = gguf->get_string("general.name")) s.name = QString::fromStdString(*name);
        if (auto arch = gguf->get_string("general.architecture"))
            s.architecture = QString::fromStdString(*arch);
        s.tensorCount = static_cast<qint64>(gguf->tensors().size());
        s.ok = true;
    } catch (const kev::Error& e) {
        s.error = QString::fromStdString(e.what());
    }
    return s;
}

}  // namespace kevui
