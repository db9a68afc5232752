// The main window: toolbar, the row of question cards, gauges and the pack view.
// It wires widgets together and holds no engine logic of its own.
#pragma once

#include <QMainWindow>

class QLabel;
class QComboBox;
class QAction;

namespace kevui {

class MainWindow : public QMainWindow {
    Q_OBJECT
public:
    explicit MainWindow(const QString& modelPath, QWidget* parent = nullptr);

    QString modelPath() const { return modelPath_; }
    // The status line about the model (what the user reads when a load fails).
    QString modelStatus() const;

private:
    void buildToolbar();
    void showModel(const QString& path);

    QString modelPath_;
    QLabel* modelLabel_ = nullptr;
    QLabel* modelStatus_ = nullptr;
    QComboBox* device_ = nullptr;
    QComboBox* precision_ = nullptr;
    QAction* run_ = nullptr;
    QAction* stop_ = nullptr;
};

}  // namespace kevui
