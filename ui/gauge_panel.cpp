#include "gauge_panel.h"

#include "kev/engine_info.h"

#include <QFile>
#include <QHBoxLayout>
#include <QLabel>
#include <QLocale>
#include <QPainter>
#include <QPainterPath>
#include <QTimer>
#include <QVBoxLayout>

#include <algorithm>

#include "card_colors.h"

namespace kevui {

qint64 processResidentBytes() {
    // /proc files report a size of 0, so read them whole instead of testing atEnd().
    QFile status(QStringLiteral("/proc/self/status"));
    if (!status.open(QIODevice::ReadOnly | QIODevice::Text)) return 0;
    for (const QByteArray& line : status.readAll().split('\n')) {
        if (line.startsWith("VmRSS:")) {
            // "VmRSS:	  123456 kB"
            const QList<QByteArray> parts = line.mid(6).simplified().split(' ');
            if (!parts.isEmpty()) return parts.front().toLongLong() * 1024;
        }
    }
    return 0;
}

// ---- RatePlot -------------------------------------------------------------------------

RatePlot::RatePlot(QWidget* parent) : QWidget(parent) {
    setObjectName(QStringLiteral("ratePlot"));
    setMinimumSize(160, 48);
    setToolTip(QStringLiteral("Aggregate tokens/s over the run"));
}

void RatePlot::addSample(double value) {
    samples_.push_back(value);
    if (samples_.size() > kCapacity) samples_.remove(0, samples_.size() - kCapacity);
    update();
}

void RatePlot::clear() {
    samples_.clear();
    update();
}

void RatePlot::paintEvent(QPaintEvent*) {
    QPainter p(this);
    p.setRenderHint(QPainter::Antialiasing);
    const QRectF r = rect().adjusted(1, 1, -1, -1);
    p.fillRect(r, palette().base());
    p.setPen(palette().mid().color());
    p.drawRect(r);
    if (samples_.size() < 2) return;
    const double top = std::max(1e-9, *std::max_element(samples_.begin(), samples_.end()));
    QPainterPath path;
    const double dx = r.width() / (kCapacity - 1);
    for (int i = 0; i < samples_.size(); ++i) {
        const QPointF pt(r.left() + i * dx, r.bottom() - samples_[i] / top * (r.height() - 12));
        if (i == 0) path.moveTo(pt);
        else path.lineTo(pt);
    }
    p.setPen(QPen(palette().highlight().color(), 1.5));
    p.drawPath(path);
    p.setPen(palette().text().color());
    p.drawText(r.adjusted(4, 2, -4, -2), Qt::AlignTop | Qt::AlignRight,
               QStringLiteral("max %1 tok/s").arg(top, 0, 'f', 1));
}

// ---- GaugePanel -----------------------------------------------------------------------

GaugePanel::GaugePanel(QWidget* parent) : QWidget(parent) {
    setObjectName(QStringLiteral("gaugePanel"));
    auto* layout = new QHBoxLayout(this);
    layout->setContentsMargins(4, 2, 4, 2);
    auto* labels = new QVBoxLayout;
    memory_ = new QLabel(this);
    memory_->setObjectName(QStringLiteral("memoryGauge"));
    memory_->setToolTip(QStringLiteral("Resident memory of the whole Kev process (CPU)"));
    model_ = new QLabel(this);
    model_->setObjectName(QStringLiteral("modelBytesGauge"));
    precisionNote_ = new QLabel(this);
    precisionNote_->setObjectName(QStringLiteral("precisionNoteGauge"));
    precisionNote_->setWordWrap(true);
    precisionNote_->setToolTip(QStringLiteral("Estimated weight memory of the other precisions for this model"));
    aggregate_ = new QLabel(this);
    aggregate_->setObjectName(QStringLiteral("aggregateGauge"));
    perCard_ = new QLabel(this);
    perCard_->setObjectName(QStringLiteral("perCardGauge"));
    perCard_->setTextFormat(Qt::RichText);
    servers_ = new QLabel(this);
    servers_->setObjectName(QStringLiteral("serverGauge"));
    servers_->setWordWrap(true);
    for (QLabel* l : {memory_, model_, precisionNote_, aggregate_, perCard_, servers_}) labels->addWidget(l);
    labels->addStretch(1);
    layout->addLayout(labels, 1);
    plot_ = new RatePlot(this);
    layout->addWidget(plot_, 1);

    setModelBytes(0);
    setCacheBytes(0, Figure::Planned);
    aggregate_->setText(QStringLiteral("Aggregate: – tok/s"));
    memoryTimer_ = new QTimer(this);
    memoryTimer_->setInterval(1000);
    connect(memoryTimer_, &QTimer::timeout, this, &GaugePanel::refreshMemory);
    memoryTimer_->start();
    refreshMemory();
}

void GaugePanel::setDeviceIsCuda(bool cuda) {
    cuda_ = cuda;
    refreshMemory();
}

void GaugePanel::refreshMemory() {
    QString text = QStringLiteral("Process memory (RSS): %1").arg(QLocale().formattedDataSize(processResidentBytes()));
    if (cuda_) {
        // On CUDA the weights and the cache live in VRAM: show what the device holds.
        const qint64 weights = model_->property("weights").toLongLong();
        // The cache counted only while it is allocated (a planned figure is an estimate).
        const qint64 kv = model_->property("kvEstimate").toBool() ? 0 : model_->property("kv").toLongLong();
        if (const auto v = kev::vram_breakdown(weights, kv)) {
            // Kev's own count and libtorch's allocator, then the driver's view of the device.
            const QLocale l;
            text += QStringLiteral("\nVRAM (Kev / allocator): weights %1 · KV cache %2 · activations %3 · "
                                   "reserved, unused %4")
                        .arg(l.formattedDataSize(v->weights), l.formattedDataSize(v->kv_cache),
                             l.formattedDataSize(v->activations), l.formattedDataSize(v->reserved_unused));
            text += QStringLiteral("\nVRAM (driver, as nvidia-smi): %1 used of %2")
                        .arg(l.formattedDataSize(v->device_used), l.formattedDataSize(v->device_total));
        } else if (const auto vram = kev::cuda_memory()) {
            text += QStringLiteral("\nVRAM used: %1 of %2")
                        .arg(QLocale().formattedDataSize(vram->used_bytes), QLocale().formattedDataSize(vram->total_bytes));
        } else {
            text += QStringLiteral("\nVRAM: not available from the CUDA runtime");
        }
    }
    memory_->setText(text);
}

void GaugePanel::setPrecisionNote(const QString& note) {
    precisionNote_->setText(note);
    precisionNote_->setVisible(!note.isEmpty());
}

void GaugePanel::setModelBytes(qint64 weightBytes, qint64 fourBitBytes, const QString& formats) {
    model_->setProperty("weights", weightBytes);
    model_->setProperty("weights4", fourBitBytes);
    model_->setProperty("formats", formats);
    const qint64 kv = model_->property("kv").toLongLong();
    const bool estimate = model_->property("kvEstimate").toBool();
    QString weights = weightBytes ? QLocale().formattedDataSize(weightBytes) : QStringLiteral("–");
    if (fourBitBytes > 0) {
        weights += QStringLiteral(" (4-bit %1, half precision %2)")
                       .arg(QLocale().formattedDataSize(fourBitBytes),
                            QLocale().formattedDataSize(weightBytes - fourBitBytes));
    }
    if (!formats.isEmpty()) weights += QStringLiteral(" · ") + formats;
    QString live;
    const qint64 inUse = model_->property("kvInUse").toLongLong();
    const qint64 prefix = model_->property("prefixCache").toLongLong();
    if (inUse > 0) live += QStringLiteral(", %1 in use").arg(QLocale().formattedDataSize(inUse));
    if (prefix > 0) live += QStringLiteral(" · prefix cache %1").arg(QLocale().formattedDataSize(prefix));
    model_->setText(QStringLiteral("Weights: %1 · KV cache: %2%3%4")
                        .arg(weights,
                             kv ? QLocale().formattedDataSize(kv) : QStringLiteral("–"),
                             kv && estimate ? QStringLiteral(" (planned)") : QString(), live));
}

void GaugePanel::setLiveCache(qint64 inUseBytes, qint64 prefixCacheBytes) {
    model_->setProperty("kvInUse", inUseBytes);
    model_->setProperty("prefixCache", prefixCacheBytes);
    setModelBytes(model_->property("weights").toLongLong(), model_->property("weights4").toLongLong(),
                  model_->property("formats").toString());
}

void GaugePanel::setCacheBytes(qint64 kvBytes, Figure figure) {
    model_->setProperty("kv", kvBytes);
    model_->setProperty("kvEstimate", figure == Figure::Planned);
    setModelBytes(model_->property("weights").toLongLong(), model_->property("weights4").toLongLong(),
                  model_->property("formats").toString());
}

void GaugePanel::startRun() {
    plot_->clear();
    cardRates_.clear();
    aggregate_->setText(QStringLiteral("Aggregate: – tok/s"));
    perCard_->clear();
    serverLines_.clear();
    servers_->clear();
}

void GaugePanel::setServerFigures(const QString& connection, const QString& text) {
    auto it = std::find_if(serverLines_.begin(), serverLines_.end(), [&](const auto& e) { return e.first == connection; });
    if (it != serverLines_.end()) serverLines_.erase(it);
    if (!text.isEmpty()) serverLines_.push_back({connection, text});
    QStringList lines;
    for (const auto& [name, figures] : serverLines_) lines << QStringLiteral("Server %1, as it reports: %2").arg(name, figures);
    servers_->setText(lines.join(QLatin1Char('\n')));
}

void GaugePanel::addStep(double aggregateTokensPerS, const QVector<QPair<int, double>>& perCard) {
    if (aggregateTokensPerS > 0) {
        aggregate_->setText(QStringLiteral("Aggregate: %1 tok/s").arg(aggregateTokensPerS, 0, 'f', 1));
        plot_->addSample(aggregateTokensPerS);
    }
    for (const auto& [card, rate] : perCard) {
        auto it = std::find_if(cardRates_.begin(), cardRates_.end(), [card = card](const auto& e) { return e.first == card; });
        if (it == cardRates_.end()) cardRates_.push_back({card, rate});
        else it->second = rate;
    }
    std::sort(cardRates_.begin(), cardRates_.end());
    QStringList parts;
    for (const auto& [card, rate] : cardRates_) {
        parts << QStringLiteral("<span style='background:%1'>&nbsp;%2&nbsp;</span> %3")
                     .arg(cardColor(card).name())
                     .arg(card + 1)
                     .arg(rate, 0, 'f', 1);
    }
    perCard_->setText(QStringLiteral("Per card tok/s (measured by Kev): ") + parts.join(QStringLiteral(" · ")));
}

QString GaugePanel::text() const {
    return QStringList{memory_->text(), model_->text(), precisionNote_->text(), aggregate_->text(), perCard_->text(),
                       servers_->text()}
        .join(QLatin1Char('\n'));
}

}  // namespace kevui
