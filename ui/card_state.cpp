#include "card_state.h"

#include <QDateTime>
#include <QFile>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QSaveFile>

#include <algorithm>
#include <cmath>
#include <limits>

namespace kevui {

namespace {

constexpr int kFormatVersion = 1;

QJsonObject answerToJson(const CardAnswer& a) {
    QJsonObject o;
    o[QStringLiteral("text")] = a.text;
    o[QStringLiteral("finish")] = a.finish;
    o[QStringLiteral("prompt_tokens")] = a.promptTokens;
    o[QStringLiteral("generated_tokens")] = a.generatedTokens;
    o[QStringLiteral("tokens_per_s")] = a.tokensPerS;
    o[QStringLiteral("time_to_first_token_s")] = a.timeToFirstTokenS;
    if (a.seedUsed) o[QStringLiteral("seed_used")] = QString::number(*a.seedUsed);
    QJsonArray ids;
    for (int t : a.tokens) ids.append(t);
    o[QStringLiteral("tokens")] = ids;
    if (!a.details.isEmpty()) o[QStringLiteral("details")] = tokenViewsToJson(a.details);
    if (a.ranWith) {
        QJsonObject r = toJson(*a.ranWith);
        r[QStringLiteral("shared_context")] = a.ranWithSharedContext;
        if (!a.ranWithSystem.isEmpty()) r[QStringLiteral("board_system")] = a.ranWithSystem;
        if (!a.ranWithAdapter.isEmpty()) r[QStringLiteral("adapter")] = a.ranWithAdapter;
        if (!a.ranWithModelHash.isEmpty()) r[QStringLiteral("model_sha256")] = a.ranWithModelHash;
        r[QStringLiteral("lora_scale")] = a.ranWithLoraScale;
        r[QStringLiteral("model")] = a.ranWithModel;
        r[QStringLiteral("weights")] = a.ranWithWeights;
        r[QStringLiteral("kev_version")] = a.ranWithKev;
        o[QStringLiteral("ran_with")] = r;
    }
    return o;
}

CardAnswer answerFromJson(const QJsonObject& o) {
    CardAnswer a;
    a.text = o.value(QStringLiteral("text")).toString();
    a.finish = o.value(QStringLiteral("finish")).toString();
    a.promptTokens = o.value(QStringLiteral("prompt_tokens")).toInteger();
    a.generatedTokens = o.value(QStringLiteral("generated_tokens")).toInteger();
    a.tokensPerS = o.value(QStringLiteral("tokens_per_s")).toDouble();
    a.timeToFirstTokenS = o.value(QStringLiteral("time_to_first_token_s")).toDouble();
    bool ok = false;
    const quint64 seed = o.value(QStringLiteral("seed_used")).toString().toULongLong(&ok);
    if (ok) a.seedUsed = seed;
    for (const QJsonValue& v : o.value(QStringLiteral("tokens")).toArray()) a.tokens.push_back(v.toInt());
    const QJsonValue ran = o.value(QStringLiteral("ran_with"));
    if (ran.isObject()) {
        a.ranWith = settingsFromJson(ran.toObject());
        a.ranWithSharedContext = ran.toObject().value(QStringLiteral("shared_context")).toString();
        a.ranWithSystem = ran.toObject().value(QStringLiteral("board_system")).toString();
        a.ranWithAdapter = ran.toObject().value(QStringLiteral("adapter")).toString();
        a.ranWithModelHash = ran.toObject().value(QStringLiteral("model_sha256")).toString();
        a.ranWithLoraScale = ran.toObject().value(QStringLiteral("lora_scale")).toDouble(1.0);
        a.ranWithModel = ran.toObject().value(QStringLiteral("model")).toString();
        a.ranWithWeights = ran.toObject().value(QStringLiteral("weights")).toString();
        a.ranWithKev = ran.toObject().value(QStringLiteral("kev_version")).toString();
    }
    return a;
}

int saturatedInt(const QJsonValue& v, int fallback) {
    if (!v.isDouble()) return fallback;
    const double d = v.toDouble();
    if (std::isnan(d)) return fallback;
    return static_cast<int>(std::clamp(d, double(std::numeric_limits<int>::min()), double(std::numeric_limits<int>::max())));
}

}  // namespace

kev::SamplingSettings CardSettings::sampling() const {
    kev::SamplingSettings s;
    s.temperature = static_cast<float>(temperature);
    s.top_p = static_cast<float>(topP);
    s.top_k = topK;
    s.min_p = static_cast<float>(minP);
    s.repetition_penalty = static_cast<float>(repetitionPenalty);
    s.max_new_tokens = maxNewTokens;
    if (seed) s.seed = *seed;
    for (const QString& stop : stopStrings) s.stop_strings.push_back(stop.toStdString());
    return s;
}

bool CardSettings::operator==(const CardSettings& o) const {
    return question == o.question && temperature == o.temperature && topP == o.topP &&
           topK == o.topK && minP == o.minP && repetitionPenalty == o.repetitionPenalty &&
           maxNewTokens == o.maxNewTokens && seed == o.seed &&
           stopStrings == o.stopStrings && lora == o.lora && system == o.system &&
           engine == o.engine && history == o.history;
}

bool answerIsStale(const CardAnswer& answer, const CardSettings& now) {
    if (!answer.ranWith) return false;
    CardSettings then = *answer.ranWith;
    if (!now.seed) then.seed.reset();
    if (!now.lora) then.lora.reset();
    return !(then == now);
}

QJsonObject toJson(const CardSettings& s) {
    QJsonObject o;
    o[QStringLiteral("question")] = s.question;
    o[QStringLiteral("temperature")] = s.temperature;
    o[QStringLiteral("top_p")] = s.topP;
    o[QStringLiteral("top_k")] = s.topK;
    o[QStringLiteral("min_p")] = s.minP;
    o[QStringLiteral("repetition_penalty")] = s.repetitionPenalty;
    o[QStringLiteral("max_new_tokens")] = s.maxNewTokens;
    // A 64-bit seed does not survive a JSON double: stored as a decimal string.
    o[QStringLiteral("seed")] = s.seed ? QJsonValue(QString::number(*s.seed)) : QJsonValue();
    o[QStringLiteral("stop_strings")] = QJsonArray::fromStringList(s.stopStrings);
    if (s.lora) o[QStringLiteral("lora")] = *s.lora;
    if (!s.system.isEmpty()) o[QStringLiteral("system")] = s.system;
    if (!s.engine.isEmpty()) o[QStringLiteral("engine")] = s.engine;  // a name: the key stays in the key file
    if (!s.history.isEmpty()) {
        QJsonArray turns;
        for (const CardTurn& t : s.history)
            turns.append(QJsonObject{{QStringLiteral("question"), t.question}, {QStringLiteral("answer"), t.answer}});
        o[QStringLiteral("history")] = turns;
    }
    return o;
}

CardSettings settingsFromJson(const QJsonObject& o) {
    CardSettings s;
    s.question = o.value(QStringLiteral("question")).toString();
    s.temperature = o.value(QStringLiteral("temperature")).toDouble(s.temperature);
    s.topP = o.value(QStringLiteral("top_p")).toDouble(s.topP);
    s.minP = o.value(QStringLiteral("min_p")).toDouble(s.minP);
    s.repetitionPenalty = o.value(QStringLiteral("repetition_penalty")).toDouble(s.repetitionPenalty);
    // Read as numbers and saturated, not toInt(): that turns 4294967297 into the default
    // without a word. The card says when a value is outside what it can hold.
    s.topK = saturatedInt(o.value(QStringLiteral("top_k")), s.topK);
    s.maxNewTokens = saturatedInt(o.value(QStringLiteral("max_new_tokens")), s.maxNewTokens);
    const QJsonValue seed = o.value(QStringLiteral("seed"));
    bool ok = false;
    const quint64 v = seed.isDouble() ? static_cast<quint64>(seed.toInteger()) : seed.toString().toULongLong(&ok);
    if (seed.isDouble() || ok) s.seed = v;
    for (const QJsonValue& stop : o.value(QStringLiteral("stop_strings")).toArray())
        s.stopStrings.push_back(stop.toString());
    if (o.value(QStringLiteral("lora")).isBool()) s.lora = o.value(QStringLiteral("lora")).toBool();
    s.system = o.value(QStringLiteral("system")).toString();
    s.engine = o.value(QStringLiteral("engine")).toString();
    // Earlier turns: entries that are not {question, answer} objects are left out (a
    // card then shows the turns it could read; nothing else of the file is lost).
    for (const QJsonValue& v : o.value(QStringLiteral("history")).toArray()) {
        const QJsonObject t = v.toObject();
        if (!t.value(QStringLiteral("question")).isString()) continue;
        s.history.push_back({t.value(QStringLiteral("question")).toString(), t.value(QStringLiteral("answer")).toString()});
    }
    return s;
}

QJsonObject toJson(const Workspace& w, WithAnswers answers) {
    QJsonObject o;
    o[QStringLiteral("kev_workspace")] = kFormatVersion;
    o[QStringLiteral("shared_context")] = w.sharedContext;
    if (!w.system.isEmpty()) o[QStringLiteral("system")] = w.system;
    if (!w.model.isEmpty()) o[QStringLiteral("model")] = w.model;
    QJsonArray cards;
    for (const CardState& c : w.cards) {
        QJsonObject card = toJson(c.settings);
        if (c.number > 0) card[QStringLiteral("number")] = c.number;
        if (c.from > 0) card[QStringLiteral("from")] = c.from;
        if (answers == WithAnswers::Yes) card[QStringLiteral("answer")] = answerToJson(c.answer);
        cards.append(card);
    }
    o[QStringLiteral("cards")] = cards;
    return o;
}

std::optional<Workspace> workspaceFromJson(const QByteArray& json, QString* error) {
    QJsonParseError parse{};
    const QJsonDocument doc = QJsonDocument::fromJson(json, &parse);
    if (parse.error != QJsonParseError::NoError) {
        if (error) *error = QStringLiteral("not valid JSON (%1 at byte %2)").arg(parse.errorString()).arg(parse.offset);
        return std::nullopt;
    }
    if (!doc.isObject() || !doc.object().value(QStringLiteral("cards")).isArray()) {
        if (error) *error = QStringLiteral("not a Kev question set: no \"cards\" list");
        return std::nullopt;
    }
    const QJsonObject o = doc.object();
    Workspace w;
    w.sharedContext = o.value(QStringLiteral("shared_context")).toString();
    w.system = o.value(QStringLiteral("system")).toString();
    w.model = o.value(QStringLiteral("model")).toString();
    int index = 0;
    for (const QJsonValue& v : o.value(QStringLiteral("cards")).toArray()) {
        if (!v.isObject()) {
            if (error) *error = QStringLiteral("card %1 is not a JSON object").arg(index + 1);
            return std::nullopt;
        }
        CardState c;
        c.settings = settingsFromJson(v.toObject());
        c.answer = answerFromJson(v.toObject().value(QStringLiteral("answer")).toObject());
        const QJsonValue details = v.toObject().value(QStringLiteral("answer")).toObject().value(QStringLiteral("details"));
        if (!details.isUndefined()) {
            QString why;
            // A server's answer has no token ids: its details stand alone (ids -1).
            const bool textOnly = c.answer.tokens.isEmpty() && details.isArray();
            const QVector<int> ids = textOnly ? QVector<int>(details.toArray().size(), -1) : c.answer.tokens;
            std::optional<QVector<TokenView>> views = tokenViewsFromJson(details, ids, &why);
            if (!views) {
                if (error) *error = QStringLiteral("card %1: answer details: %2").arg(index + 1).arg(why);
                return std::nullopt;
            }
            c.answer.details = std::move(*views);
        }
        // Outside 1..1,000,000 a number is not one Kev gave: the board gives a new one.
        c.number = std::clamp(saturatedInt(v.toObject().value(QStringLiteral("number")), 0), 0, 1000000);
        c.from = std::clamp(saturatedInt(v.toObject().value(QStringLiteral("from")), 0), 0, 1000000);
        w.cards.push_back(c);
        ++index;
    }
    return w;
}

bool saveWorkspace(const QString& path, const Workspace& w, WithAnswers answers, QString* error) {
    QSaveFile file(path);
    if (!file.open(QIODevice::WriteOnly)) {
        if (error) *error = QStringLiteral("cannot write %1: %2").arg(path, file.errorString());
        return false;
    }
    // A board with answers (the autosaved workspace, with every token's alternatives) is
    // written compact: a 16-card board is ~1 MB instead of ~5 MB, saved on every change.
    // Question sets stay indented for people to read and edit.
    file.write(QJsonDocument(toJson(w, answers))
                   .toJson(answers == WithAnswers::Yes ? QJsonDocument::Compact : QJsonDocument::Indented));
    if (!file.commit()) {
        if (error) *error = QStringLiteral("cannot write %1: %2").arg(path, file.errorString());
        return false;
    }
    return true;
}

QString freeSiblingName(const QString& path, const QString& tag, const QDateTime& now, int maxTries) {
    const QString base = path + QLatin1Char('.') + tag + QLatin1Char('-') + now.toString(QStringLiteral("yyyyMMdd-HHmmss"));
    for (int n = 0; n < maxTries; ++n) {
        const QString name = n == 0 ? base : base + QLatin1Char('-') + QString::number(n);
        // Not QFile::exists: a dangling symbolic link is a name that is taken.
        if (!QFileInfo(name).exists() && !QFileInfo(name).isSymLink()) return name;
    }
    return QString();
}

std::optional<QByteArray> readWorkspaceBytes(const QString& path, QString* why) {
    // Checked before opening: a FIFO would block open() and a device or a huge file
    // would be read whole into memory.
    const QFileInfo info(path);
    QString problem;
    if (info.isDir()) {
        problem = QStringLiteral("it is a folder, not a file");
    } else if (!info.exists()) {
        problem = info.isSymLink() ? QStringLiteral("it is a dangling symbolic link") : QStringLiteral("it does not exist");
    } else if (!info.isFile()) {
        problem = QStringLiteral("it is not a regular file (a FIFO, socket or device)");
    } else if (info.size() > kMaxWorkspaceBytes) {
        problem = QStringLiteral("it is %1 bytes; the limit is %2 bytes").arg(info.size()).arg(kMaxWorkspaceBytes);
    } else {
        QFile file(path);
        if (!file.open(QIODevice::ReadOnly)) {
            problem = QStringLiteral("cannot read it: %1").arg(file.errorString());
        } else {
            // A bounded read: the file may have grown since the check.
            QByteArray bytes = file.read(kMaxWorkspaceBytes + 1);
            if (bytes.size() <= kMaxWorkspaceBytes) return bytes;
            problem = QStringLiteral("it is larger than %1 bytes, the limit").arg(kMaxWorkspaceBytes);
        }
    }
    if (why) *why = problem;
    return std::nullopt;
}

LoadedWorkspace loadWorkspace(const QString& path, const QDateTime& now) {
    LoadedWorkspace r;
    const QFileInfo info(path);
    if (!info.exists() && !info.isSymLink()) return r;
    QString why;
    if (const std::optional<QByteArray> bytes = readWorkspaceBytes(path, &why)) {
        r.workspace = workspaceFromJson(*bytes, &why);
        if (r.workspace) return r;
    }
    const QString aside = freeSiblingName(path, QStringLiteral("corrupt"), now);
    if (!aside.isEmpty() && QFile::rename(path, aside)) {
        r.movedAsideTo = aside;
        r.error = QStringLiteral("The saved workspace %1 was unreadable (%2); it was kept as %3").arg(path, why, aside);
    } else {
        r.keptInPlace = true;
        r.error = QStringLiteral("The saved workspace %1 is unreadable (%2) and could not be moved aside; it was kept "
                                 "where it is")
                      .arg(path, why);
    }
    return r;
}

QString divergenceText(const QString& packed, const QString& alone, int context) {
    if (packed == alone) return QString();
    qsizetype at = 0;
    const qsizetype common = std::min(packed.size(), alone.size());
    while (at < common && packed[at] == alone[at]) ++at;
    // Never split a surrogate pair: step back to the start of the character.
    if (at > 0 && packed[at - 1].isHighSurrogate()) --at;
    const qsizetype from = std::max<qsizetype>(0, at - context);
    const QString shared = (from > 0 ? QStringLiteral("…") : QString()) + packed.mid(from, at - from);
    const auto rest = [&](const QString& t) {
        QString r = t.mid(at, context);
        if (!r.isEmpty() && r.back().isHighSurrogate()) r.chop(1);
        return QStringLiteral("[%1%2]").arg(r, t.size() > at + context ? QStringLiteral("…") : QString());
    };
    return QStringLiteral("%1 %2 | %3").arg(shared, rest(packed), rest(alone));
}

}  // namespace kevui
