// One question card's state as a plain value: what the user typed and chose, and the
// last answer it received. The board document (board_document.h) holds a list of them,
// each shown by a QuestionCard; the workspace file and question-set files store them;
// run requests are built from them (board_request.h).
#pragma once

#include <QDateTime>
#include <QJsonObject>
#include <QString>
#include <QStringList>
#include <QVector>

#include <optional>

#include "kev/generator.h"
#include "token_view.h"

namespace kevui {

// How a message reads: a problem to fix, or a neutral note (a replay verdict, a load).
enum class Tone { Error, Note };

// One earlier exchange of a card's conversation: its question and the answer it got.
struct CardTurn {
    QString question;
    QString answer;
    bool operator==(const CardTurn& o) const { return question == o.question && answer == o.answer; }
};

struct CardSettings {
    // The card's conversation so far, oldest first (empty: a single question). `question`
    // is the message to answer next; the model reads the turns before it.
    QVector<CardTurn> history;
    QString question;
    double temperature = 0.7;
    double topP = 1.0;
    int topK = 0;                         // 0 = off
    double minP = 0.0;                    // drop tokens below min_p x the top probability; 0 = off
    double repetitionPenalty = 1.0;       // transformers' repetition penalty; 1 = off
    int maxNewTokens = 256;
    std::optional<quint64> seed;          // unset: the engine picks one and reports it
    QStringList stopStrings;
    std::optional<bool> lora;             // LoRA for this card; unset: the toolbar's choice
    QString system;                       // this card's system prompt; empty: the board's
    QString engine;                       // a saved connection's name (remote engine); empty: the local model

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
    // Per token of `tokens` (same length): its text, probability, the entropy and the
    // top alternatives, for the comparison view. Empty for answers without them (runs
    // that did not ask for logprobs, answers saved before).
    QVector<TokenView> details;
    // What this answer ran with: the card's settings as sent (seed: the one used; lora:
    // resolved against the toolbar), the shared context and the LoRA scale. Replay
    // replays these, whatever the card shows now. Unset for answers saved before.
    std::optional<CardSettings> ranWith;
    QString ranWithSharedContext;
    QString ranWithSystem;     // the board's system prompt (the card's own is in ranWith)
    double ranWithLoraScale = 1.0;
    QString ranWithAdapter;    // the adapter folder, when LoRA was on
    QString ranWithModel;      // the model file or folder
    QString ranWithModelHash;  // its SHA-256 (kev::model_hash), empty when not known
    QString ranWithWeights;    // what its weights were held as ("q4_1 + nf4, bf16")
    QString ranWithKev;        // Kev's version
};

// True when the card's settings now differ from those its answer ran with (the answer
// is stale). A seed or LoRA choice the card leaves to the engine or the toolbar counts
// as unchanged.
bool answerIsStale(const CardAnswer& answer, const CardSettings& now);

struct CardState {
    CardSettings settings;
    CardAnswer answer;
    // The card's identity: its number ("Card 7") and colour for its whole life, kept when
    // other cards are added, duplicated, swept, moved or removed (0: not given yet).
    int number = 0;
    int from = 0;  // the card this one was duplicated or swept from (0: none)
};

// A workspace or a question set. Question sets are the same format without answers.
struct Workspace {
    QString sharedContext;
    QString system;                       // the board's system prompt; empty: the template's
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

// A workspace file larger than this is refused (not read): a real one with thousands of
// cards and answers is a few MiB.
constexpr qint64 kMaxWorkspaceBytes = 64LL * 1024 * 1024;

// The bytes of a workspace or question-set file, after checking (before opening it)
// that it is a regular file of at most kMaxWorkspaceBytes. On failure sets `why`.
std::optional<QByteArray> readWorkspaceBytes(const QString& path, QString* why);

struct LoadedWorkspace {
    std::optional<Workspace> workspace;   // empty: no file, or one that could not be used
    QString error;                        // set when the file could not be used
    QString movedAsideTo;                 // where the unusable file now is
    // True when the unusable file is still at the workspace path (it could not be moved
    // aside): saving there would destroy it, so the caller must save somewhere else.
    bool keptInPlace = false;
};

// A name next to `path` that does not exist yet: "<path>.<tag>-yyyyMMdd-HHmmss", then
// "-1", "-2", ... Empty when `maxTries` names are all taken.
QString freeSiblingName(const QString& path, const QString& tag, const QDateTime& now, int maxTries = 100);

// Reads the workspace. A file that cannot be used (not JSON, not a workspace, larger
// than kMaxWorkspaceBytes, not a regular file, unreadable) is never read past the
// check that refuses it, and is renamed to a free "<path>.corrupt-<timestamp>[-N]"
// (kept for the user, never silently dropped). `now` names the backup.
LoadedWorkspace loadWorkspace(const QString& path, const QDateTime& now = QDateTime::currentDateTime());

// Where two answers part, as text: the last `context` characters they share, then each
// one's next `context` characters in brackets: "…capital is [Paris, a] | [London, ] ".
// Empty when the texts are equal.
QString divergenceText(const QString& packed, const QString& alone, int context = 24);


}  // namespace kevui
