// kev: the desktop application.
#include <QApplication>
#include <QCommandLineParser>
#include <QTimer>

#include "kev/engine_info.h"
#include "main_window.h"

int main(int argc, char** argv) {
    QApplication app(argc, argv);
    QApplication::setApplicationName(QStringLiteral("Kev"));
    QApplication::setOrganizationName(QStringLiteral("Kev"));
    QApplication::setApplicationVersion(QStringLiteral(KEV_VERSION_STRING));

    QCommandLineParser parser;
    parser.setApplicationDescription(
        QStringLiteral("Kev answers several questions in one packed forward pass."));
    parser.addHelpOption();
    parser.addVersionOption();
    QCommandLineOption modelOption(QStringList{QStringLiteral("m"), QStringLiteral("model")},
                                   QStringLiteral("Model file (.gguf) or Hugging Face folder."),
                                   QStringLiteral("path"));
    QCommandLineOption quitAfter(QStringLiteral("quit-after"),
                                 QStringLiteral("Close the window after this many milliseconds "
                                                "(for smoke runs and screenshots)."),
                                 QStringLiteral("ms"));
    parser.addOption(modelOption);
    parser.addOption(quitAfter);
    parser.process(app);

    const QString model = parser.isSet(modelOption)
                              ? parser.value(modelOption)
                              : QString::fromStdString(kev::builtin_model_path());
    kevui::MainWindow window(model);
    window.show();
    if (parser.isSet(quitAfter)) {
        QTimer::singleShot(parser.value(quitAfter).toInt(), &app, &QApplication::quit);
    }
    return app.exec();
}
