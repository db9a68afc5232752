// The corpus of malformed inputs (issue 18): tests/corpus/make_corpus.py writes a few
// hundred broken models, tokenizers, adapters, question files and command lines into a
// temporary folder, with the exit code and the message fragments a correct kev-cli gives
// for each. Every case here runs kev-cli and checks that it:
//   - ends within the case's time bound (a hang is killed and fails the case),
//   - does not die by a signal (a crash is never an answer to a bad file),
//   - exits with the expected code (1 model/adapter/file error, 2 usage error),
//   - names the file and the field (every fragment appears in stderr),
//   - prints no answer for a broken input.
// One test function per group, each a data-driven table with one row per case, so a
// failure names its case; cases run two at a time (KEV_CORPUS_JOBS), a few rows ahead. The same corpus runs outside ctest with
// tests/corpus/run_corpus.py (see tests/corpus/README.md).
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <QtTest>

#include "kev_test_env.h"

extern char** environ;

namespace {

struct Case {
    QString id;
    QString group;
    std::vector<std::string> args;  // bytes: an argument need not be UTF-8
    int exit = 0;
    QStringList stderrFragments;
    QString stdoutMode;  // empty, nonempty, json, any
    int timeoutS = 20;
};

struct Outcome {
    bool started = false;
    bool timedOut = false;
    int signal = 0;
    int exitCode = -1;
    double seconds = 0.0;
    QByteArray out;
    QByteArray err;
};

Case caseFromJson(const QJsonObject& o) {
    Case c;
    c.id = o.value(QStringLiteral("id")).toString();
    c.group = o.value(QStringLiteral("group")).toString();
    for (const QJsonValue& a : o.value(QStringLiteral("args")).toArray()) {
        if (a.isObject()) c.args.push_back(QByteArray::fromHex(a.toObject().value(QStringLiteral("hex")).toString().toLatin1()).toStdString());
        else c.args.push_back(a.toString().toStdString());
    }
    c.exit = o.value(QStringLiteral("exit")).toInt();
    for (const QJsonValue& f : o.value(QStringLiteral("stderr")).toArray()) c.stderrFragments << f.toString();
    c.stdoutMode = o.value(QStringLiteral("stdout")).toString();
    c.timeoutS = o.value(QStringLiteral("timeout_s")).toInt(20);
    return c;
}

QByteArray readAll(const QString& path) {
    QFile f(path);
    return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
}

// Runs the cases `jobs` at a time, each in its own process group with stdin from
// /dev/null and its output in files (nothing to drain, so nothing can block).
// fork/exec rather than QProcess: arguments are bytes, not QStrings.
std::vector<Outcome> runAll(const QString& kevCli, const std::vector<const Case*>& cases, const QString& scratch,
                            int jobs) {
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e)
        if (std::strncmp(*e, "OMP_NUM_THREADS=", 16) != 0) env.emplace_back(*e);
    env.emplace_back("OMP_NUM_THREADS=1");  // two at a time on two cores
    std::vector<char*> envp;
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);

    struct Running {
        std::size_t index;
        pid_t pid;
        std::chrono::steady_clock::time_point start;
    };
    std::vector<Outcome> outcomes(cases.size());
    std::vector<Running> running;
    std::size_t next = 0;
    const std::string program = kevCli.toStdString();
    auto outPath = [&](std::size_t i, const char* what) {
        return (scratch + QStringLiteral("/%1.%2").arg(i).arg(QLatin1String(what))).toStdString();
    };
    while (next < cases.size() || !running.empty()) {
        while (next < cases.size() && static_cast<int>(running.size()) < jobs) {
            const std::size_t i = next++;
            std::vector<std::string> argv{program};
            argv.insert(argv.end(), cases[i]->args.begin(), cases[i]->args.end());
            std::vector<char*> av;
            for (auto& a : argv) av.push_back(a.data());
            av.push_back(nullptr);
            const std::string out = outPath(i, "out"), err = outPath(i, "err");
            const pid_t pid = fork();
            if (pid == 0) {  // only async-signal-safe calls until exec
                setpgid(0, 0);
                const int in = open("/dev/null", O_RDONLY);
                const int o = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
                const int e = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
                if (in < 0 || o < 0 || e < 0) _exit(126);
                dup2(in, 0);
                dup2(o, 1);
                dup2(e, 2);
                execve(av[0], av.data(), envp.data());
                // kev-cli being relinked by a build, say: said, so the case does not read as kev-cli's own exit.
                char msg[] = "tst_corpus: could not execute kev-cli (errno   )\n";
                const int en = errno % 1000;
                msg[sizeof msg - 5] = static_cast<char>('0' + en / 100);
                msg[sizeof msg - 4] = static_cast<char>('0' + en / 10 % 10);
                msg[sizeof msg - 3] = static_cast<char>('0' + en % 10);
                (void)!write(2, msg, sizeof msg - 1);
                _exit(127);
            }
            if (pid < 0) continue;  // outcome stays "not started"
            setpgid(pid, pid);      // also from here: no race with the kill below
            outcomes[i].started = true;
            running.push_back({i, pid, std::chrono::steady_clock::now()});
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        for (auto it = running.begin(); it != running.end();) {
            Outcome& r = outcomes[it->index];
            const double s =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - it->start).count();
            int status = 0;
            pid_t done = waitpid(it->pid, &status, WNOHANG);
            if (done == 0 && s > cases[it->index]->timeoutS) {
                kill(-it->pid, SIGKILL);  // the whole group: kev-cli and anything it started
                done = waitpid(it->pid, &status, 0);
                r.timedOut = true;
            }
            if (done == 0) {
                ++it;
                continue;
            }
            r.seconds = s;
            if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
            if (WIFEXITED(status)) r.exitCode = WEXITSTATUS(status);
            r.out = readAll(QString::fromStdString(outPath(it->index, "out")));
            r.err = readAll(QString::fromStdString(outPath(it->index, "err")));
            it = running.erase(it);
        }
    }
    return outcomes;
}

QString firstLines(const QByteArray& err) {
    const QStringList lines = QString::fromUtf8(err).split(QLatin1Char('\n'), Qt::SkipEmptyParts);
    return lines.mid(0, 3).join(QStringLiteral(" | ")).left(400);
}

}  // namespace

class TestCorpus : public QObject {
    Q_OBJECT

private:
    QTemporaryDir dir_;
    std::vector<Case> cases_;
    std::map<QString, Outcome> outcomes_;  // by case id, filled a group at a time
    QString manifestError_;

    void addRows(const QString& group) {
        QTest::addColumn<QString>("id");
        for (const Case& c : cases_)
            if (c.group == group) QTest::newRow(qPrintable(c.id)) << c.id;
    }

    // Runs this case and the next cases of its group not yet run, kBatch at most: a row
    // runs a few cases ahead, so no single row holds a whole group (Qt Test's watchdog
    // counts each row) and most rows find their outcome ready.
    void runFrom(const Case* first) {
        constexpr std::size_t kBatch = 8;
        const QString group = first->group;
        std::vector<const Case*> todo;
        bool reached = false;
        for (const Case& c : cases_) {
            reached = reached || &c == first;
            if (reached && c.group == group && !outcomes_.count(c.id) && todo.size() < kBatch) todo.push_back(&c);
        }
        const QString scratch = dir_.path() + QStringLiteral("/_runs/") + group;
        QDir().mkpath(scratch);
        const int jobs = qEnvironmentVariableIsSet("KEV_CORPUS_JOBS") ? qEnvironmentVariableIntValue("KEV_CORPUS_JOBS") : 2;
        const auto outcomes = runAll(kevtest::binDir() + QStringLiteral("/kev-cli"), todo, scratch, qMax(1, jobs));
        for (std::size_t i = 0; i < todo.size(); ++i) outcomes_[todo[i]->id] = outcomes[i];
    }

    void checkRow() {
        QFETCH(QString, id);
        const Case* c = nullptr;
        for (const Case& k : cases_)
            if (k.id == id) c = &k;
        QVERIFY(c);
        if (!outcomes_.count(id)) runFrom(c);
        const Outcome& r = outcomes_.at(id);
        const QString said = firstLines(r.err);
        QVERIFY2(r.started, "kev-cli could not be started");
        QVERIFY2(!r.timedOut, qPrintable(QStringLiteral("no exit within %1 s (killed); stderr: %2").arg(c->timeoutS).arg(said)));
        QVERIFY2(r.signal == 0, qPrintable(QStringLiteral("killed by signal %1; stderr: %2").arg(r.signal).arg(said)));
        QVERIFY2(r.exitCode == c->exit,
                 qPrintable(QStringLiteral("exit %1, expected %2; stderr: %3").arg(r.exitCode).arg(c->exit).arg(said)));
        const QString err = QString::fromUtf8(r.err);
        for (const QString& f : c->stderrFragments)
            QVERIFY2(err.contains(f), qPrintable(QStringLiteral("stderr lacks '%1': %2").arg(f, said)));
        if (c->stdoutMode == QLatin1String("empty")) {
            QVERIFY2(r.out.trimmed().isEmpty(),
                     qPrintable(QStringLiteral("printed an answer for a broken input: ") + QString::fromUtf8(r.out.left(80))));
        } else if (c->stdoutMode == QLatin1String("nonempty")) {
            QVERIFY2(!r.out.trimmed().isEmpty(), "printed nothing");
        } else if (c->stdoutMode == QLatin1String("json")) {
            QJsonParseError e;
            QJsonDocument::fromJson(r.out, &e);
            QVERIFY2(e.error == QJsonParseError::NoError,
                     qPrintable(QStringLiteral("stdout is not one JSON document: ") + e.errorString()));
        }
    }

private Q_SLOTS:
    void initTestCase() {
        QVERIFY(dir_.isValid());
        dir_.setAutoRemove(false);  // QDir cannot remove a name that is not UTF-8: rm does, in cleanupTestCase
        const QString script = kevtest::sourceDir() + QStringLiteral("/tests/corpus/make_corpus.py");
        const auto gen = kevtest::runProcess(kevtest::python(), {script, dir_.path(), QStringLiteral("--builtin"),
                                                                 kevtest::builtinModel()},
                                             240 * 1000);
        QVERIFY2(gen.finished && gen.exitCode == 0, gen.err.constData());
        QFile manifest(dir_.path() + QStringLiteral("/manifest.jsonl"));
        QVERIFY(manifest.open(QIODevice::ReadOnly));
        for (const QByteArray& line : manifest.readAll().split('\n')) {
            if (line.trimmed().isEmpty()) continue;
            QJsonParseError e;
            const QJsonDocument doc = QJsonDocument::fromJson(line, &e);
            QVERIFY2(e.error == QJsonParseError::NoError && doc.isObject(), line.constData());
            cases_.push_back(caseFromJson(doc.object()));
        }
    }

    void cleanupTestCase() { QProcess::execute(QStringLiteral("rm"), {QStringLiteral("-rf"), dir_.path()}); }

    // The issue asks for at least 150 inputs across these groups.
    void corpusCoversEveryGroup() {
        QVERIFY2(cases_.size() >= 150, qPrintable(QString::number(cases_.size())));
        for (const char* g : {"gguf", "safetensors", "config", "tokenizer", "adapter", "questions", "cli"}) {
            int n = 0;
            for (const Case& c : cases_) n += c.group == QLatin1String(g);
            QVERIFY2(n >= 10, g);
        }
    }

    void gguf_data() { addRows(QStringLiteral("gguf")); }
    void gguf() { checkRow(); }
    void safetensors_data() { addRows(QStringLiteral("safetensors")); }
    void safetensors() { checkRow(); }
    void config_data() { addRows(QStringLiteral("config")); }
    void config() { checkRow(); }
    void tokenizer_data() { addRows(QStringLiteral("tokenizer")); }
    void tokenizer() { checkRow(); }
    void adapter_data() { addRows(QStringLiteral("adapter")); }
    void adapter() { checkRow(); }
    void questions_data() { addRows(QStringLiteral("questions")); }
    void questions() { checkRow(); }
    void cli_data() { addRows(QStringLiteral("cli")); }
    void cli() { checkRow(); }
};

QTEST_GUILESS_MAIN(TestCorpus)
#include "tst_corpus.moc"
