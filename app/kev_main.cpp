// kev: the desktop application.
#include <QApplication>
#include <QCommandLineParser>
#include <QPixmap>
#include <QTimer>

#include <cstdio>

#include "main_window.h"

int main(int argc, char** argv) {
    QApplication app(argc, argv);
    QApplication::setApplicationName(QStringLiteral("Kev"));
    QApplication::setOrganizationName(QStringLiteral("Kev"));
    QApplication::setApplicationVersion(QStringLiteral(KEV_VERSION_STRING));

    QCommandLineParser parser;
    parser.setApplicationDescription(
        QStringLiteral("Kev answers several questions in one packed forward pass.\n"
                       "The workspace (cards and answers) is kept in the application data folder, "
                       "or in the file named by the KEV_WORKSPACE environment variable."));
    parser.addHelpOption();
    parser.addVersionOption();
    QCommandLineOption modelOption(QStringList{QStringLiteral("m"), QStringLiteral("model")},
                                   QStringLiteral("Model file (.gguf) or Hugging Face folder "
                                                  "(default: the last one used, else the built-in model)."),
                                   QStringLiteral("path"));
    QCommandLineOption quitAfter(QStringLiteral("quit-after"),
                                 QStringLiteral("Close the window after this many milliseconds "
                                                "(for smoke runs and screenshots)."),
                                 QStringLiteral("ms"));
    QCommandLineOption runOption(QStringLiteral("run"),
                                 QStringLiteral("Run every card as soon as the model is loaded."));
    QCommandLineOption screenshot(QStringLiteral("screenshot"),
                                  QStringLiteral("With --quit-after: save a picture of the window to this file "
                                                 "just before closing."),
                                  QStringLiteral("file"));
    parser.addOption(modelOption);
    parser.addOption(quitAfter);
    parser.addOption(runOption);
    parser.addOption(screenshot);
    parser.addPositionalArgument(QStringLiteral("questions"),
                                 QStringLiteral("A question set (.json) to open instead of the saved workspace."),
                                 QStringLiteral("[questions.json]"));
    parser.process(app);

    // An explicit --model wins; else the last model used (QSettings), else the built-in one.
    const QString model = parser.isSet(modelOption) ? parser.value(modelOption)
                                                    : kevui::MainWindow::defaultModelPath();
    kevui::MainWindow window(model);
    if (!parser.positionalArguments().isEmpty()) window.loadQuestionSet(parser.positionalArguments().constFirst());
    window.show();
    if (parser.isSet(runOption)) {
        QObject::connect(&window, &kevui::MainWindow::modelReady, &window, [&window] { window.runAll(); },
                         Qt::SingleShotConnection);
    }
    if (parser.isSet(quitAfter)) {
        const QString shot = parser.value(screenshot);
        QTimer::singleShot(parser.value(quitAfter).toInt(), &app, [&window, shot] {
            if (!shot.isEmpty() && !window.grab().save(shot))
                std::fprintf(stderr, "kev: could not save the screenshot to %s\n", qPrintable(shot));
            QApplication::quit();
        });
    }
    return app.exec();
}
