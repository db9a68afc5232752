#include "connection_dialog.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDialogButtonBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QNetworkAccessManager>
#include <QNetworkReply>
#include <QPushButton>
#include <QSpinBox>
#include <QVBoxLayout>

#include "connections.h"

namespace kevui {

ConnectionDialog::ConnectionDialog(kevremote::ConnectionStore* store, QWidget* parent)
    : QDialog(parent), store_(store), network_(new QNetworkAccessManager(this)) {
    setWindowTitle(QStringLiteral("Server connections"));
    setObjectName(QStringLiteral("connectionDialog"));
    auto* form = new QFormLayout;
    name_ = new QComboBox(this);
    name_->setObjectName(QStringLiteral("connectionName"));
    name_->setEditable(true);
    name_->addItems(store_->names());
    name_->setToolTip(QStringLiteral("The name cards use to pick this server (Engine in a card's settings)."));
    url_ = new QLineEdit(this);
    url_->setObjectName(QStringLiteral("connectionUrl"));
    url_->setPlaceholderText(QStringLiteral("https://host:8000/v1"));
    key_ = new QLineEdit(this);
    key_->setObjectName(QStringLiteral("connectionKey"));
    key_->setEchoMode(QLineEdit::Password);
    key_->setPlaceholderText(QStringLiteral("none"));
    key_->setToolTip(QStringLiteral("Kept in a file only you can read, never in a workspace."));
    model_ = new QComboBox(this);
    model_->setObjectName(QStringLiteral("connectionModel"));
    model_->setEditable(true);
    auto* fetch = new QPushButton(QStringLiteral("Ask the server"), this);
    fetch->setObjectName(QStringLiteral("fetchModels"));
    fetch->setToolTip(QStringLiteral("List the server's models (/v1/models)"));
    auto* modelRow = new QHBoxLayout;
    modelRow->addWidget(model_, 1);
    modelRow->addWidget(fetch);
    api_ = new QComboBox(this);
    api_->setObjectName(QStringLiteral("connectionApi"));
    api_->addItem(QStringLiteral("Chat completions (/v1/chat/completions)"), QVariant::fromValue(int(kevremote::Api::Chat)));
    api_->addItem(QStringLiteral("Plain completions (/v1/completions): the model has no chat template"),
                  QVariant::fromValue(int(kevremote::Api::Completions)));
    api_->setToolTip(QStringLiteral("Chat sends the system prompt and the question as messages, and the server applies "
                                    "the model's chat template. Plain completions send them as one text prompt, as "
                                    "they are: for a base model, or a server that has no template for it."));
    insecure_ = new QCheckBox(QStringLiteral("Allow plain http to another machine (unencrypted)"), this);
    insecure_->setObjectName(QStringLiteral("connectionInsecure"));
    timeout_ = new QSpinBox(this);
    timeout_->setRange(1, 3600);
    timeout_->setValue(120);
    timeout_->setSuffix(QStringLiteral(" s"));
    timeout_->setToolTip(QStringLiteral("A card fails when the server sends nothing for this long."));
    form->addRow(QStringLiteral("Name"), name_);
    form->addRow(QStringLiteral("Base URL"), url_);
    form->addRow(QStringLiteral("API key"), key_);
    form->addRow(QStringLiteral("Model"), modelRow);
    form->addRow(QStringLiteral("API"), api_);
    form->addRow(QString(), insecure_);
    form->addRow(QStringLiteral("Timeout"), timeout_);
    status_ = new QLabel(this);
    status_->setObjectName(QStringLiteral("connectionStatus"));
    status_->setWordWrap(true);
    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Close, this);
    QPushButton* save = buttons->addButton(QStringLiteral("Save"), QDialogButtonBox::ApplyRole);
    save->setObjectName(QStringLiteral("saveConnection"));
    QPushButton* remove = buttons->addButton(QStringLiteral("Remove"), QDialogButtonBox::DestructiveRole);
    auto* layout = new QVBoxLayout(this);
    layout->addLayout(form);
    layout->addWidget(status_);
    layout->addWidget(buttons);
    connect(name_, &QComboBox::currentTextChanged, this, &ConnectionDialog::showConnection);
    connect(fetch, &QPushButton::clicked, this, &ConnectionDialog::fetchModels);
    connect(save, &QPushButton::clicked, this, [this] { saveCurrent(); });
    connect(remove, &QPushButton::clicked, this, &ConnectionDialog::removeCurrent);
    connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
    showConnection(name_->currentText());
}

QString ConnectionDialog::statusText() const { return status_->text(); }

void ConnectionDialog::say(const QString& text, bool error) {
    status_->setText(text);
    status_->setStyleSheet(error ? QStringLiteral("color: #b00020;") : QString());
}

void ConnectionDialog::showConnection(const QString& name) {
    const auto c = store_->find(name);
    if (!c) return;  // a new name keeps what the form holds
    url_->setText(c->base.toString());
    key_->setText(store_->key(name));
    model_->setCurrentText(c->model);
    api_->setCurrentIndex(api_->findData(int(c->api)));
    insecure_->setChecked(c->insecure);
    timeout_->setValue(c->timeout_s);
}

bool ConnectionDialog::saveCurrent() {
    kevremote::SavedConnection c;
    c.name = name_->currentText().trimmed();
    c.base = QUrl(url_->text().trimmed());
    c.model = model_->currentText().trimmed();
    c.api = static_cast<kevremote::Api>(api_->currentData().toInt());
    c.insecure = insecure_->isChecked();
    c.timeout_s = timeout_->value();
    if (c.name.isEmpty()) {
        say(QStringLiteral("Give the connection a name: cards pick it by name."), true);
        return false;
    }
    kevremote::Connection probe;
    probe.base = c.base;
    probe.insecure = c.insecure;
    if (const QString problem = kevremote::connection_problem(probe); !problem.isEmpty()) {
        say(problem, true);
        return false;
    }
    if (c.model.isEmpty()) {
        say(QStringLiteral("Choose a model (Ask the server lists them)."), true);
        return false;
    }
    store_->put(c, key_->text());
    QString error;
    if (!store_->save(&error)) {
        say(QStringLiteral("Could not save: %1").arg(error), true);
        return false;
    }
    if (name_->findText(c.name) < 0) name_->addItem(c.name);
    say(QStringLiteral("Saved '%1'.").arg(c.name), false);
    Q_EMIT connectionsChanged();
    return true;
}

void ConnectionDialog::removeCurrent() {
    const QString name = name_->currentText();
    if (!store_->find(name)) return;
    store_->remove(name);
    QString error;
    if (!store_->save(&error)) say(QStringLiteral("Could not save: %1").arg(error), true);
    name_->removeItem(name_->findText(name));
    say(QStringLiteral("Removed '%1'.").arg(name), false);
    Q_EMIT connectionsChanged();
}

void ConnectionDialog::fetchModels() {
    kevremote::Connection c;
    c.base = QUrl(url_->text().trimmed());
    c.insecure = insecure_->isChecked();
    if (const QString problem = kevremote::connection_problem(c); !problem.isEmpty()) return say(problem, true);
    c.api_key = key_->text();
    const QNetworkRequest request = kevremote::get_request(c, kevremote::api_url(c, QStringLiteral("models")), timeout_->value() * 1000);
    say(QStringLiteral("Asking %1 for its models…").arg(c.base.host()), false);
    QNetworkReply* reply = network_->get(request);
    connect(reply, &QNetworkReply::finished, this, [this, reply] {
        reply->deleteLater();
        const QByteArray body = reply->readAll();
        const int status = reply->attribute(QNetworkRequest::HttpStatusCodeAttribute).toInt();
        if (status >= 400 || (reply->error() != QNetworkReply::NoError && status == 0)) {
            const QString m = kevremote::error_message(body);
            return say(QStringLiteral("The server refused: %1").arg(status ? QStringLiteral("HTTP %1%2").arg(status).arg(m.isEmpty() ? QString() : ": " + m)
                                                                            : reply->errorString()),
                       true);
        }
        QString error;
        const QStringList models = kevremote::parse_models(body, &error);
        if (!error.isEmpty()) return say(error, true);
        const QString current = model_->currentText();
        model_->clear();
        model_->addItems(models);
        if (models.contains(current)) model_->setCurrentText(current);
        say(QStringLiteral("%1 model(s) on the server.").arg(models.size()), false);
    });
}

}  // namespace kevui
