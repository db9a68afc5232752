#include "main_window.h"

#include <QAction>
#include <QComboBox>
#include <QKeySequence>
#include <QLabel>
#include <QLocale>
#include <QStatusBar>
#include <QToolBar>
#include <QVBoxLayout>

#include "kev/engine_info.h"
#include "model_summary.h"

namespace kevui {

MainWindow::MainWindow(const QString& modelPath, QWidget* parent)
    : QMainWindow(parent), modelPath_(modelPath) {
    setWindowTitle(QStringLiteral("Kev"));
    setObjectName(QStringLiteral("kevMainWindow"));
    resize(1200, 760);
    buildToolbar();

    auto* central = new QWidget(this);
    auto* layout = new QVBoxLayout(central);
    modelStatus_ = new QLabel(central);
    modelStatus_->setObjectName(QStringLiteral("modelStatus"));
    modelStatus_->setWordWrap(true);
    modelStatus_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    layout->addWidget(modelStatus_);
    layout->addStretch(1);
    setCentralWidget(central);

    const kev::EngineInfo info = kev::engine_info();
    statusBar()->showMessage(QStringLiteral("libtorch %1 · CPU %2 · %3 threads%4")
                                 .arg(QString::fromStdString(info.torch_version),
                                      QString::fromStdString(info.cpu_capability))
                                 .arg(info.cpu_threads)
                                 .arg(info.cuda_available ? QStringLiteral(" · CUDA") : QString()));
    showModel(modelPath_);
}

void MainWindow::buildToolbar() {
    QToolBar* bar = addToolBar(QStringLiteral("Main"));
    bar->setObjectName(QStringLiteral("mainToolbar"));
    bar->setMovable(false);

    modelLabel_ = new QLabel(bar);
    modelLabel_->setObjectName(QStringLiteral("modelLabel"));
    bar->addWidget(modelLabel_);
    bar->addSeparator();

    device_ = new QComboBox(bar);
    device_->setObjectName(QStringLiteral("deviceCombo"));
    device_->addItem(QStringLiteral("CPU"));
    const kev::EngineInfo info = kev::engine_info();
    device_->addItem(QStringLiteral("CUDA"));
    if (!info.cuda_available) {
        // Keep the option visible but say why it cannot be chosen.
        device_->setItemData(1, 0, Qt::UserRole - 1);
        device_->setItemData(1, QStringLiteral("No CUDA device is visible to this libtorch"),
                             Qt::ToolTipRole);
    }
    bar->addWidget(device_);

    precision_ = new QComboBox(bar);
    precision_->setObjectName(QStringLiteral("precisionCombo"));
    precision_->addItems({QStringLiteral("4-bit"), QStringLiteral("half"), QStringLiteral("fp32")});
    bar->addWidget(precision_);
    bar->addSeparator();

    run_ = bar->addAction(QStringLiteral("Run"));
    run_->setObjectName(QStringLiteral("runAction"));
    run_->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_Return));
    run_->setEnabled(false);
    run_->setToolTip(QStringLiteral("Generation arrives with the packed-generation engine"));
    stop_ = bar->addAction(QStringLiteral("Stop"));
    stop_->setObjectName(QStringLiteral("stopAction"));
    stop_->setShortcut(QKeySequence(Qt::Key_Escape));
    stop_->setEnabled(false);
}

void MainWindow::showModel(const QString& path) {
    const ModelSummary s = summarizeModel(path);
    if (!s.ok) {
        modelLabel_->setText(QStringLiteral("No model"));
        modelStatus_->setText(s.error);
        return;
    }
    modelLabel_->setText(s.name);
    modelStatus_->setText(QStringLiteral("%1 · %2 · %3 tensors · %4")
                              .arg(s.name, s.architecture)
                              .arg(s.tensorCount)
                              .arg(QLocale().formattedDataSize(s.fileBytes)));
}

QString MainWindow::modelStatus() const { return modelStatus_->text(); }

}  // namespace kevui
