#include "openai_wire.h"

#include <algorithm>

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>

namespace kevremote {

QString endpoint(Api api) { return api == Api::Chat ? QStringLiteral("chat/completions") : QStringLiteral("completions"); }

QByteArray request_body(const RemoteCard& card, const QString& model, Api api) {
    QJsonObject body;
    body["model"] = model;
    body["stream"] = true;
    QString system = card.shared_context;
    if (!card.system.isEmpty()) system += (system.isEmpty() ? QString() : QStringLiteral("\n\n")) + card.system;
    if (api == Api::Chat) {
        QJsonArray messages;
        if (!system.isEmpty()) messages.append(QJsonObject{{"role", "system"}, {"content", system}});
        for (const auto& [question, answer] : card.history) {
            messages.append(QJsonObject{{"role", "user"}, {"content", question}});
            messages.append(QJsonObject{{"role", "assistant"}, {"content", answer}});
        }
        messages.append(QJsonObject{{"role", "user"}, {"content", card.question}});
        body["messages"] = messages;
    } else {
        // No template: the conversation as plain paragraphs, the system text first.
        QStringList parts;
        if (!system.isEmpty()) parts << system;
        for (const auto& [question, answer] : card.history) parts << question << answer;
        parts << card.question;
        body["prompt"] = parts.join(QStringLiteral("\n\n"));
    }
    const RemoteSampling& s = card.sampling;
    if (s.temperature) body["temperature"] = *s.temperature;
    if (s.top_p) body["top_p"] = *s.top_p;
    if (s.top_k) body["top_k"] = *s.top_k;
    if (s.min_p) body["min_p"] = *s.min_p;
    if (s.repetition_penalty) {
        body["repetition_penalty"] = *s.repetition_penalty;
        body["repeat_penalty"] = *s.repetition_penalty;
    }
    body["max_tokens"] = s.max_tokens;
    if (s.ignore_eos) body["ignore_eos"] = true;
    if (!s.stop.isEmpty()) body["stop"] = QJsonArray::fromStringList(s.stop);
    // JSON numbers are doubles: a seed past 2^53 would arrive rounded, so it goes as
    // the integer the server parses (QJsonValue keeps qint64 exactly).
    if (s.seed) body["seed"] = static_cast<qint64>(*s.seed & 0x7fffffffffffffffULL);
    if (s.logprobs > 0) {
        if (api == Api::Chat) {
            body["logprobs"] = true;
            body["top_logprobs"] = s.logprobs;
        } else {
            body["logprobs"] = s.logprobs;
        }
    }
    // The final chunk then carries the token count the server counted.
    body["stream_options"] = QJsonObject{{"include_usage", true}};
    return QJsonDocument(body).toJson(QJsonDocument::Compact);
}

namespace {

// Chat chunks (and llama.cpp's completions): {"content": [{"token", "logprob", "top_logprobs": [...]}]}.
void read_content_logprobs(const QJsonArray& content, std::vector<TokenLogprob>& out) {
    for (const QJsonValue& v : content) {
        const QJsonObject o = v.toObject();
        TokenLogprob t;
        t.token = o.value("token").toString();
        t.logprob = o.value("logprob").toDouble();
        for (const QJsonValue& a : o.value("top_logprobs").toArray())
            t.top.emplace_back(a.toObject().value("token").toString(), a.toObject().value("logprob").toDouble());
        out.push_back(std::move(t));
    }
}

// OpenAI's legacy completions: {"tokens": [...], "token_logprobs": [...], "top_logprobs": [{token: lp}, ...]}.
void read_legacy_logprobs(const QJsonObject& lp, std::vector<TokenLogprob>& out) {
    const QJsonArray tokens = lp.value("tokens").toArray(), values = lp.value("token_logprobs").toArray(),
                     tops = lp.value("top_logprobs").toArray();
    for (qsizetype i = 0; i < tokens.size(); ++i) {
        TokenLogprob t;
        t.token = tokens[i].toString();
        t.logprob = i < values.size() ? values[i].toDouble() : 0.0;
        if (i < tops.size()) {
            const QJsonObject top = tops[i].toObject();
            for (auto it = top.begin(); it != top.end(); ++it) t.top.emplace_back(it.key(), it.value().toDouble());
            std::sort(t.top.begin(), t.top.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
        }
        out.push_back(std::move(t));
    }
}

QString shorten(const QByteArray& data) {
    const QByteArray head = data.left(120).simplified();
    return QString::fromUtf8(head) + (data.size() > 120 ? QStringLiteral("...") : QString());
}

}  // namespace

QString error_message(const QByteArray& body) {
    const QJsonDocument doc = QJsonDocument::fromJson(body);
    if (!doc.isObject()) return {};
    const QJsonValue e = doc.object().value("error");
    if (e.isString()) return e.toString();
    if (e.isObject()) {
        const QString m = e.toObject().value("message").toString();
        return m.isEmpty() ? QString::fromUtf8(QJsonDocument(e.toObject()).toJson(QJsonDocument::Compact)) : m;
    }
    // FastAPI's (vLLM's) {"detail": ...} and bare {"message": ...}
    if (doc.object().value("detail").isString()) return doc.object().value("detail").toString();
    return doc.object().value("message").toString();
}

std::optional<QString> parse_chunk(const QByteArray& data, StreamChunk& out) {
    out = StreamChunk{};
    if (data.trimmed() == "[DONE]") {
        out.done = true;
        return std::nullopt;
    }
    QJsonParseError perr;
    const QJsonDocument doc = QJsonDocument::fromJson(data, &perr);
    if (!doc.isObject()) return QStringLiteral("the stream sent something that is not JSON: ") + shorten(data);
    const QJsonObject root = doc.object();
    if (root.contains("error")) {
        const QString m = error_message(data);
        return QStringLiteral("the server reported an error: ") + (m.isEmpty() ? shorten(data) : m);
    }
    if (const QJsonValue usage = root.value("usage"); usage.isObject() && usage.toObject().contains("completion_tokens"))
        out.completion_tokens = usage.toObject().value("completion_tokens").toInt();
    const QJsonValue choices = root.value("choices");
    if (!choices.isArray()) return QStringLiteral("a stream chunk without \"choices\": ") + shorten(data);
    for (const QJsonValue& cv : choices.toArray()) {  // one choice per request (n = 1); a usage chunk has none
        const QJsonObject c = cv.toObject();
        if (c.value("delta").isObject()) {
            const QJsonValue content = c.value("delta").toObject().value("content");
            if (content.isString()) out.text += content.toString();
        } else if (c.value("text").isString()) {
            out.text += c.value("text").toString();
        }
        if (const QJsonValue lp = c.value("logprobs"); lp.isObject()) {
            if (lp.toObject().value("content").isArray()) read_content_logprobs(lp.toObject().value("content").toArray(), out.logprobs);
            else read_legacy_logprobs(lp.toObject(), out.logprobs);
        }
        if (c.value("finish_reason").isString()) out.finish_reason = c.value("finish_reason").toString();
    }
    return std::nullopt;
}

QStringList parse_models(const QByteArray& body, QString* error) {
    const QJsonDocument doc = QJsonDocument::fromJson(body);
    if (!doc.isObject() || !doc.object().value("data").isArray()) {
        if (error) *error = QStringLiteral("the answer to /v1/models is not a model list: ") + shorten(body);
        return {};
    }
    QStringList ids;
    for (const QJsonValue& m : doc.object().value("data").toArray())
        if (m.toObject().value("id").isString()) ids << m.toObject().value("id").toString();
    return ids;
}

}  // namespace kevremote
