// Live gauges: memory (process RSS on CPU, the model's weights and KV cache, labelled
// as what they are), aggregate and per-card tokens/s, and a rolling plot of tok/s.
#pragma once

#include <QVector>
#include <QWidget>

class QLabel;
class QTimer;

namespace kevui {

// A small line plot of the last samples (custom painted: no chart dependency).
class RatePlot : public QWidget {
    Q_OBJECT
public:
    explicit RatePlot(QWidget* parent = nullptr);
    void addSample(double value);
    void clear();
    const QVector<double>& samples() const { return samples_; }
    QSize sizeHint() const override { return {240, 60}; }

protected:
    void paintEvent(QPaintEvent* event) override;

private:
    QVector<double> samples_;
    static constexpr int kCapacity = 120;
};

class GaugePanel : public QWidget {
    Q_OBJECT
public:
    explicit GaugePanel(QWidget* parent = nullptr);

    // Weight bytes in all, of which `fourBitBytes` in 4-bit blocks, and what they are held as.
    void setModelBytes(qint64 weightBytes, qint64 fourBitBytes = 0, const QString& formats = QString());
    enum class Figure { Planned, Measured };
    void setCacheBytes(qint64 kvBytes, Figure figure);
    // During a local run: the KV cache held by the shared context and the running cards,
    // and what the prefix cache keeps from earlier runs (reused by the next ones).
    void setLiveCache(qint64 inUseBytes, qint64 prefixCacheBytes);
    void startRun();
    // One step: the aggregate rate and one rate per card (window card index, tok/s).
    void addStep(double aggregateTokensPerS, const QVector<QPair<int, double>>& perCard);
    void refreshMemory();
    // On CUDA the memory gauge adds the device's VRAM (used / total).
    void setDeviceIsCuda(bool cuda);
    // What another precision would hold instead ("fp32 ~540 MB (+405 MB) · ...").
    void setPrecisionNote(const QString& note);
    // A server's own figures (from its /metrics) for the cards on `connection`, shown as
    // reported by the server; empty text removes the line.
    void setServerFigures(const QString& connection, const QString& text);

    QString text() const;  // every gauge as text (tests, accessibility)
    RatePlot* plot() const { return plot_; }

private:
    QLabel* memory_ = nullptr;
    QLabel* model_ = nullptr;
    QLabel* precisionNote_ = nullptr;
    QLabel* aggregate_ = nullptr;
    QLabel* perCard_ = nullptr;
    QLabel* servers_ = nullptr;
    QVector<QPair<QString, QString>> serverLines_;  // connection -> its figures
    RatePlot* plot_ = nullptr;
    QTimer* memoryTimer_ = nullptr;
    QVector<QPair<int, double>> cardRates_;
    bool cuda_ = false;
};

// Resident set size of this process (VmRSS in /proc/self/status), 0 when unknown.
qint64 processResidentBytes();

}  // namespace kevui
