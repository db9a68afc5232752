// One question card's state as a plain value: what the user typed and chose, and the
// last answer it received. QuestionCard shows one; the workspace file and question-set
// files store a list of them; the run request is built from them.
#pragma once

#include <QJsonObject>
#include <QString>
#include <QStringList>
#include <QVector>

#include <optional>

#include "kev/generator.h"

namespace kevui {

// How a message reads: a problem to fix, or a neutral note (a replay verdict, a load).
enum class Tone { Error, Note };

struct CardSettings {
    QString question;
    double temperature = 0.7;
    double topP = 1.0;
    int topK = 0;                         // 0 = off
    int maxNewTokens = 256;
    std::optional<quint64> seed;          // unset: the engine picks one and reports it
    QStringList stopStrings;
    std::optional<bool> lora;             // LoRA for this card; unset: the toolbar's choice

    // The engine's view of the settings (not validated: the engine does that).
    kev::SamplingSettings sampling() const;
    bool operator==(const CardSettings& o) const;
};

struct CardAnswer {
    QString text;
    QString finish;                       // kev::to_string(FinishReason), empty while running
    qint64 promptTokens = 0;
    qint64 generatedTokens = 0;
    double tokensPerS = 0.0;
    double timeToFirstTokenS = 0.0;
    std::optional<quint64> seedUsed;
    QVector<int> tokens;                  // generated ids (solo replay compares them)
};

struct CardState {
    CardSettings settings;
    CardAnswer answer;
};

// A workspace or a question set. Question sets are the same format without answers.
struct Workspace {
    QString sharedContext;
    QString model;                        // informative; the app's model comes from QSettings
    QVector<CardState> cards;
};

enum class WithAnswers { No, Yes };

QJsonObject toJson(const CardSettings& s);
CardSettings settingsFromJson(const QJsonObject& o);
QJsonObject toJson(const Workspace& w, WithAnswers answers);

// Parses a workspace or question set. On failure returns nothing and sets `error` to a
// message naming what is wrong.
std::optional<Workspace> workspaceFromJson(const QByteArray& json, QString* error);

// Writes atomically (QSaveFile): a crash mid-write leaves the previous file whole.
bool saveWorkspace(const QString& path, const Workspace& w, WithAnswers answers, QString* error);

struct LoadedWorkspace {
    std::optional<Workspace> workspace;   // empty: no file, or a corrupt one
    QString error;                        // set for a corrupt file
    QString movedAsideTo;                 // where the corrupt file now is
};

// Reads the workspace; a file that cannot be parsed is renamed to
// "<path>.corrupt-<timestamp>" (kept for the user, never silently dropped).
LoadedWorkspace loadWorkspace(const QString& path);

// Markdown with the model, each card's settings, answer and stats.
QString answersMarkdown(const Workspace& w);

}  // namespace kevui
