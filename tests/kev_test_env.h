// Where the tests find the repository, the project's Python (with the reference
// implementations: transformers, gguf, tokenizers) and the built-in model.
#pragma once

#include <QByteArray>
#include <QDir>
#include <QProcess>
#include <QString>
#include <QStringList>
#include <QtTest>

namespace kevtest {

inline QString sourceDir() { return QStringLiteral(KEV_SOURCE_DIR); }
inline QString testDataDir() { return QStringLiteral(KEV_TEST_DATA_DIR); }
inline QString python() { return QStringLiteral(KEV_PYTHON); }
inline QString builtinModel() { return QStringLiteral(KEV_BUILTIN_MODEL_FILE); }
inline QString binDir() { return QStringLiteral(KEV_BIN_DIR); }

// A scratch folder for this test executable, created on demand.
inline QString workDir(const QString& sub = QString()) {
    QString dir = QStringLiteral(KEV_TEST_WORK_DIR);
    if (!sub.isEmpty()) dir += QLatin1Char('/') + sub;
    QDir().mkpath(dir);
    return dir;
}

// Writes `bytes` to workDir()/<name> (replacing it) and returns the path; stops the test
// run when the file cannot be written.
inline QString writeWorkFile(const QString& name, const QByteArray& bytes) {
    const QString path = workDir() + QLatin1Char('/') + name;
    QFile f(path);
    if (!f.open(QIODevice::WriteOnly | QIODevice::Truncate)) qFatal("cannot write %s", qPrintable(path));
    f.write(bytes);
    return path;
}

struct ProcessResult {
    int exitCode = -1;
    bool finished = false;
    QByteArray out;
    QByteArray err;
};

// Runs a program to completion; `timeoutMs` bounds a hung reference script.
inline ProcessResult runProcess(const QString& program, const QStringList& args,
                                int timeoutMs = 30 * 60 * 1000,
                                const QByteArray& stdinData = QByteArray()) {
    QProcess p;
    p.setProgram(program);
    p.setArguments(args);
    p.start();
    ProcessResult r;
    if (!p.waitForStarted(60000)) {
        r.err = "could not start " + program.toUtf8();
        return r;
    }
    if (!stdinData.isEmpty()) p.write(stdinData);
    p.closeWriteChannel();
    r.finished = p.waitForFinished(timeoutMs);
    r.out = p.readAllStandardOutput();
    r.err = p.readAllStandardError();
    r.exitCode = p.exitCode();
    return r;
}

// Runs tests/reference/<script> with the project's Python; fails the test with the
// script's stderr when it does not exit 0.
inline QByteArray runReference(const QString& script, const QStringList& args) {
    const ProcessResult r = runProcess(
        python(), QStringList{sourceDir() + QStringLiteral("/tests/reference/") + script} + args);
    if (!r.finished || r.exitCode != 0) {
        qWarning().noquote() << "reference script" << script << "failed:" << r.err;
        return QByteArray();
    }
    return r.out;
}

}  // namespace kevtest
