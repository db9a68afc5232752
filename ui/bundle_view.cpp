#include "bundle_view.h"

#include <QDialogButtonBox>
#include <QFileInfo>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QTableWidget>
#include <QVBoxLayout>

#include "board_bundle.h"

namespace kevui {

namespace {

enum Column { kCard, kQuestion, kSettings, kAnswer, kReplay, kColumns };

QString settingsText(const kev::BundleCard& c) {
    QString s = QStringLiteral("T %1 · seed %2 · %3 tokens")
                    .arg(static_cast<double>(c.sampling.temperature.value_or(0.0f)))
                    .arg(c.sampling.seed.value_or(0))
                    .arg(c.tokens.size());
    if (c.sampling.top_p < 1.0f) s += QStringLiteral(" · top-p %1").arg(static_cast<double>(c.sampling.top_p));
    if (c.sampling.top_k > 0) s += QStringLiteral(" · top-k %1").arg(c.sampling.top_k);
    if (c.sampling.min_p > 0.0f) s += QStringLiteral(" · min-p %1").arg(static_cast<double>(c.sampling.min_p));
    if (c.sampling.repetition_penalty != 1.0f)
        s += QStringLiteral(" · penalty %1").arg(static_cast<double>(c.sampling.repetition_penalty));
    if (c.lora.enabled) s += QStringLiteral(" · LoRA %1").arg(static_cast<double>(c.lora.scale));
    if (c.system) s += QStringLiteral(" · own system prompt");
    return s;
}

}  // namespace

BundleDialog::BundleDialog(const kev::Bundle& bundle, const QString& path, QWidget* parent)
    : QDialog(parent), bundle_(bundle) {
    setObjectName(QStringLiteral("bundleDialog"));
    setWindowTitle(QStringLiteral("Bundle %1 (read-only)").arg(QFileInfo(path).fileName()));
    resize(980, 560);
    auto* layout = new QVBoxLayout(this);
    auto* header = new QLabel(this);
    header->setObjectName(QStringLiteral("bundleHeader"));
    header->setWordWrap(true);
    header->setTextInteractionFlags(Qt::TextSelectableByMouse);
    QString h = QStringLiteral("<b>%1</b> · sha256 %2 · %3 on %4 · Kev %5 · made %6")
                    .arg(QFileInfo(QString::fromStdString(bundle.model.path)).fileName().toHtmlEscaped(),
                         QString::fromStdString(bundle.model.sha256.substr(0, 16)) + QStringLiteral("…"),
                         QString::fromStdString(bundle.precision.name()),
                         QString::fromLatin1(kev::to_string(bundle.precision.device)),
                         QString::fromStdString(bundle.kev_version).toHtmlEscaped(),
                         QString::fromStdString(bundle.created).toHtmlEscaped());
    if (bundle.adapter)
        h += QStringLiteral("<br>Adapter %1 (sha256 %2…, scale %3)")
                 .arg(QString::fromStdString(bundle.adapter->path).toHtmlEscaped(),
                      QString::fromStdString(bundle.adapter->sha256.substr(0, 16)))
                 .arg(static_cast<double>(bundle.adapter->scale));
    if (bundle.system) h += QStringLiteral("<br>System prompt: %1").arg(QString::fromStdString(*bundle.system).toHtmlEscaped());
    if (!bundle.shared_context.empty())
        h += QStringLiteral("<br>Shared context: %1 characters").arg(QString::fromStdString(bundle.shared_context).size());
    header->setText(h);
    layout->addWidget(header);
    modelNote_ = new QLabel(this);
    modelNote_->setObjectName(QStringLiteral("bundleModelNote"));
    modelNote_->setWordWrap(true);
    layout->addWidget(modelNote_);

    table_ = new QTableWidget(static_cast<int>(bundle.cards.size()), kColumns, this);
    table_->setObjectName(QStringLiteral("bundleCards"));
    table_->setAccessibleName(QStringLiteral("The bundle's cards"));
    table_->setHorizontalHeaderLabels({QStringLiteral("Card"), QStringLiteral("Question"), QStringLiteral("Settings"),
                                       QStringLiteral("Answer"), QStringLiteral("Replay")});
    table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
    table_->setWordWrap(true);
    table_->horizontalHeader()->setSectionResizeMode(kAnswer, QHeaderView::Stretch);
    table_->horizontalHeader()->setSectionResizeMode(kQuestion, QHeaderView::Interactive);
    table_->setColumnWidth(kQuestion, 220);
    table_->setColumnWidth(kSettings, 200);
    table_->setColumnWidth(kReplay, 220);
    for (int i = 0; i < static_cast<int>(bundle.cards.size()); ++i) {
        const kev::BundleCard& c = bundle.cards[static_cast<std::size_t>(i)];
        QString label = QString::number(c.number);
        if (!c.label.empty()) label += QStringLiteral(" (%1)").arg(QString::fromStdString(c.label));
        table_->setItem(i, kCard, new QTableWidgetItem(label));
        table_->setItem(i, kQuestion, new QTableWidgetItem(QString::fromStdString(c.question)));
        table_->setItem(i, kSettings, new QTableWidgetItem(settingsText(c)));
        auto* answer = new QTableWidgetItem(QString::fromStdString(c.text));
        answer->setToolTip(QString::fromStdString(c.text));
        table_->setItem(i, kAnswer, answer);
        table_->setItem(i, kReplay, new QTableWidgetItem(QStringLiteral("not replayed")));
    }
    table_->resizeRowsToContents();
    layout->addWidget(table_, 1);
    summary_ = new QLabel(this);
    summary_->setObjectName(QStringLiteral("bundleSummary"));
    summary_->setWordWrap(true);
    layout->addWidget(summary_);

    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Close, this);
    replay_ = buttons->addButton(QStringLiteral("Replay all"), QDialogButtonBox::ActionRole);
    replay_->setObjectName(QStringLiteral("replayAllButton"));
    replay_->setToolTip(QStringLiteral("Run every card again, as recorded, on the loaded model and compare the tokens"));
    connect(replay_, &QPushButton::clicked, this, &BundleDialog::replayRequested);
    connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
    layout->addWidget(buttons);
    setLoadedModel(nullptr);
}

void BundleDialog::setLoadedModel(const ModelInfo* model) {
    if (!model) {
        modelNote_->setText(QStringLiteral("No model is loaded: open %1 to replay.")
                                .arg(QString::fromStdString(bundle_.model.path)));
        modelNote_->setStyleSheet(QStringLiteral("QLabel { color: #b00020; }"));
        replay_->setEnabled(false);
        return;
    }
    replay_->setEnabled(true);
    QStringList differences;
    if (model->sha256.isEmpty()) differences << QStringLiteral("the loaded model's hash is not known yet");
    else if (model->sha256.toStdString() != bundle_.model.sha256)
        differences << QStringLiteral("the loaded model file differs from the bundle's (sha256 %1…, bundle %2…)")
                           .arg(model->sha256.left(16), QString::fromStdString(bundle_.model.sha256.substr(0, 16)));
    const kev::BundlePrecision loaded{model->device, model->dtype, model->quant};
    if (loaded.name() != bundle_.precision.name() || loaded.device != bundle_.precision.device)
        differences << QStringLiteral("it is loaded at %1 on %2, the bundle ran at %3 on %4")
                           .arg(QString::fromStdString(loaded.name()), QString::fromLatin1(kev::to_string(loaded.device)),
                                QString::fromStdString(bundle_.precision.name()),
                                QString::fromLatin1(kev::to_string(bundle_.precision.device)));
    if (differences.isEmpty()) {
        modelNote_->setText(QStringLiteral("The loaded model is the bundle's (same file hash, same precision)."));
        modelNote_->setStyleSheet(QStringLiteral("QLabel { color: #1b5e20; }"));
    } else {
        modelNote_->setText(QStringLiteral("Replay will run, but %1; tokens may differ for that reason.")
                                .arg(differences.join(QStringLiteral("; "))));
        modelNote_->setStyleSheet(QStringLiteral("QLabel { color: #b00020; }"));
    }
}

void BundleDialog::setReplaying(bool on) {
    replay_->setEnabled(!on);
    if (on) summary_->setText(QStringLiteral("Replaying %1 cards…").arg(bundle_.cards.size()));
}

void BundleDialog::showReplay(const kev::GenerationResult& result) {
    differing_ = 0;
    QStringList which;
    for (int i = 0; i < table_->rowCount(); ++i) {
        const kev::BundleCard& c = bundle_.cards[static_cast<std::size_t>(i)];
        if (static_cast<std::size_t>(i) >= result.cards.size()) break;
        const ReplayVerdict v = replayVerdict(c, result.cards[static_cast<std::size_t>(i)]);
        auto* item = new QTableWidgetItem(v.text);
        item->setToolTip(v.text);
        item->setForeground(v.match ? QColor(0x1b, 0x5e, 0x20) : QColor(0xb0, 0x00, 0x20));
        table_->setItem(i, kReplay, item);
        if (!v.match) {
            ++differing_;
            which << QString::number(c.number);
        }
    }
    table_->resizeRowsToContents();
    summary_->setText(differing_ == 0
                          ? QStringLiteral("Replayed: every card's tokens match the bundle ✓")
                          : QStringLiteral("Replayed: %1 of %2 cards differ (card %3)")
                                .arg(differing_)
                                .arg(bundle_.cards.size())
                                .arg(which.join(QStringLiteral(", "))));
    replay_->setEnabled(true);
}

void BundleDialog::showReplayFailed(const QString& message) {
    summary_->setText(QStringLiteral("The replay failed: %1").arg(message));
    replay_->setEnabled(true);
}

QString BundleDialog::modelNote() const { return modelNote_->text(); }
QString BundleDialog::verdict(int card) const {
    const QTableWidgetItem* item = table_->item(card, kReplay);
    return item ? item->text() : QString();
}
QString BundleDialog::summary() const { return summary_->text(); }

}  // namespace kevui
