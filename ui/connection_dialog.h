// Engine ▸ Connections…: the servers cards may target (a name, a base URL, the model
// picked from the server's /v1/models, an API key kept in the user-only key file, the
// insecure switch for plain http to another machine, the API: chat messages, or a plain
// prompt for a model without a chat template). It edits a ConnectionStore and
// saves it; the run logic is RunController's.
#pragma once

#include <QDialog>

class QCheckBox;
class QComboBox;
class QLabel;
class QLineEdit;
class QNetworkAccessManager;
class QSpinBox;

namespace kevremote {
class ConnectionStore;
}

namespace kevui {

class ConnectionDialog : public QDialog {
    Q_OBJECT
public:
    ConnectionDialog(kevremote::ConnectionStore* store, QWidget* parent = nullptr);

    // Saves the form as a connection (replacing one of the same name); false with the
    // reason shown in the dialog when the form cannot be used.
    bool saveCurrent();
    // Asks the server in the form for its models (GET /v1/models) and fills the list.
    void fetchModels();
    QString statusText() const;

Q_SIGNALS:
    void connectionsChanged();

private:
    void showConnection(const QString& name);
    void removeCurrent();
    void say(const QString& text, bool error);

    kevremote::ConnectionStore* store_;
    QNetworkAccessManager* network_ = nullptr;
    QComboBox* name_ = nullptr;
    QLineEdit* url_ = nullptr;
    QLineEdit* key_ = nullptr;
    QComboBox* model_ = nullptr;
    QComboBox* api_ = nullptr;  // item data: kevremote::Api
    QCheckBox* insecure_ = nullptr;
    QSpinBox* timeout_ = nullptr;
    QLabel* status_ = nullptr;
};

}  // namespace kevui
