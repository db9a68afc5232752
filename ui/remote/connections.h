// The named servers a board's cards may target, kept per user beside Kev's settings:
// connections.json holds names, URLs, models and switches; the API keys are in
// keys.json next to it, readable by the user only (mode 0600), and never in a
// workspace file. (A platform credential store would be better still; Qt has none.)
#pragma once

#include <QString>
#include <QStringList>
#include <QVector>

#include <optional>

#include "remote_run.h"

namespace kevremote {

struct SavedConnection {
    QString name;           // what a card names ("cluster 70B")
    QUrl base;
    QString model;
    bool insecure = false;
    int timeout_s = 120;
    Api api = Api::Chat;
};

class ConnectionStore {
public:
    // `dir`: where the two files live (created on the first save).
    explicit ConnectionStore(QString dir);

    // Reads both files. A file that is missing is an empty store; one that cannot be
    // read or parsed sets `error` (naming it) and leaves the store empty.
    bool load(QString* error);
    // Writes both files atomically; the keys file with mode 0600.
    bool save(QString* error) const;

    const QVector<SavedConnection>& connections() const { return connections_; }
    QStringList names() const;
    std::optional<SavedConnection> find(const QString& name) const;
    // Adds or replaces (by name). An empty `key` removes the stored key.
    void put(const SavedConnection& c, const QString& key);
    void remove(const QString& name);
    QString key(const QString& name) const;
    // The connection a run uses: the saved fields plus the key.
    std::optional<Connection> resolve(const QString& name) const;

    QString connectionsPath() const;
    QString keysPath() const;

private:
    QString dir_;
    QVector<SavedConnection> connections_;
    QVector<std::pair<QString, QString>> keys_;  // name -> key
};

}  // namespace kevremote
