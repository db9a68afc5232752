#include "connections.h"

#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QSaveFile>

#include <algorithm>

namespace kevremote {

namespace {

constexpr qint64 kMaxFileBytes = 4 * 1024 * 1024;

// The file's JSON object; nothing (and no error) when the file does not exist.
std::optional<QJsonObject> readObject(const QString& path, QString* error, bool* failed) {
    QFile f(path);
    if (!f.exists()) return std::nullopt;
    if (f.size() > kMaxFileBytes || !f.open(QIODevice::ReadOnly)) {
        *failed = true;
        if (error) *error = QStringLiteral("%1: cannot be read").arg(path);
        return std::nullopt;
    }
    QJsonParseError perr;
    const QJsonDocument doc = QJsonDocument::fromJson(f.readAll(), &perr);
    if (!doc.isObject()) {
        *failed = true;
        if (error) *error = QStringLiteral("%1: not a JSON object (%2)").arg(path, perr.errorString());
        return std::nullopt;
    }
    return doc.object();
}

bool writeObject(const QString& path, const QJsonObject& o, bool privateFile, QString* error) {
    QSaveFile f(path);
    if (!f.open(QIODevice::WriteOnly)) {
        if (error) *error = QStringLiteral("%1: %2").arg(path, f.errorString());
        return false;
    }
    // Before a byte is written: the temporary file becomes the file.
    if (privateFile) f.setPermissions(QFileDevice::ReadOwner | QFileDevice::WriteOwner);
    f.write(QJsonDocument(o).toJson());
    if (!f.commit()) {
        if (error) *error = QStringLiteral("%1: %2").arg(path, f.errorString());
        return false;
    }
    if (privateFile) QFile::setPermissions(path, QFileDevice::ReadOwner | QFileDevice::WriteOwner);
    return true;
}

}  // namespace

ConnectionStore::ConnectionStore(QString dir) : dir_(std::move(dir)) {}

QString ConnectionStore::connectionsPath() const { return dir_ + QStringLiteral("/connections.json"); }
QString ConnectionStore::keysPath() const { return dir_ + QStringLiteral("/keys.json"); }

bool ConnectionStore::load(QString* error) {
    connections_.clear();
    keys_.clear();
    bool failed = false;
    if (auto o = readObject(connectionsPath(), error, &failed)) {
        for (const QJsonValue& v : o->value("connections").toArray()) {
            const QJsonObject c = v.toObject();
            SavedConnection s;
            s.name = c.value("name").toString();
            s.base = QUrl(c.value("url").toString());
            s.model = c.value("model").toString();
            s.insecure = c.value("insecure").toBool(false);
            s.timeout_s = c.value("timeout_s").toInt(120);
            s.api = c.value("api").toString() == QLatin1String("completions") ? Api::Completions : Api::Chat;
            if (!s.name.isEmpty()) connections_.push_back(s);
        }
    }
    if (failed) return false;
    if (auto o = readObject(keysPath(), error, &failed))
        for (auto it = o->begin(); it != o->end(); ++it) keys_.push_back({it.key(), it.value().toString()});
    return !failed;
}

bool ConnectionStore::save(QString* error) const {
    if (!QDir().mkpath(dir_)) {
        if (error) *error = QStringLiteral("%1: cannot create the folder").arg(dir_);
        return false;
    }
    QJsonArray list;
    for (const SavedConnection& c : connections_)
        list.append(QJsonObject{{"name", c.name}, {"url", c.base.toString()}, {"model", c.model}, {"insecure", c.insecure},
                                {"timeout_s", c.timeout_s}, {"api", c.api == Api::Completions ? "completions" : "chat"}});
    QJsonObject keys;
    for (const auto& [name, key] : keys_) keys[name] = key;
    return writeObject(connectionsPath(), QJsonObject{{"connections", list}}, false, error) &&
           writeObject(keysPath(), keys, true, error);
}

QStringList ConnectionStore::names() const {
    QStringList n;
    for (const SavedConnection& c : connections_) n << c.name;
    return n;
}

std::optional<SavedConnection> ConnectionStore::find(const QString& name) const {
    for (const SavedConnection& c : connections_)
        if (c.name == name) return c;
    return std::nullopt;
}

void ConnectionStore::put(const SavedConnection& c, const QString& key) {
    remove(c.name);
    connections_.push_back(c);
    if (!key.isEmpty()) keys_.push_back({c.name, key});
}

void ConnectionStore::remove(const QString& name) {
    connections_.erase(std::remove_if(connections_.begin(), connections_.end(), [&](const auto& c) { return c.name == name; }),
                       connections_.end());
    keys_.erase(std::remove_if(keys_.begin(), keys_.end(), [&](const auto& k) { return k.first == name; }), keys_.end());
}

QString ConnectionStore::key(const QString& name) const {
    for (const auto& [n, k] : keys_)
        if (n == name) return k;
    return {};
}

std::optional<Connection> ConnectionStore::resolve(const QString& name) const {
    const auto s = find(name);
    if (!s) return std::nullopt;
    Connection c;
    c.base = s->base;
    c.model = s->model;
    c.api_key = key(name);
    c.insecure = s->insecure;
    c.timeout_ms = s->timeout_s * 1000;
    c.api = s->api;
    return c;
}

}  // namespace kevremote
