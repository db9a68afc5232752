// A reproducibility bundle opened read-only: what was run (model and hash, precision,
// adapter, Kev version, every card's inputs and answer) and a Replay all button that
// runs it again on the loaded model and says, card by card, whether the tokens match.
// The board is not touched.
#pragma once

#include <QDialog>
#include <QString>

#include "engine_types.h"
#include "kev/bundle.h"

class QLabel;
class QPushButton;
class QTableWidget;

namespace kevui {

class BundleDialog : public QDialog {
    Q_OBJECT
public:
    BundleDialog(const kev::Bundle& bundle, const QString& path, QWidget* parent = nullptr);

    const kev::Bundle& bundle() const { return bundle_; }
    // Says whether the loaded model is the bundle's (hash, precision); empty: none loaded.
    void setLoadedModel(const ModelInfo* model);
    void setReplaying(bool on);
    void showReplay(const kev::GenerationResult& result);
    void showReplayFailed(const QString& message);

    QString modelNote() const;
    QString verdict(int card) const;  // the replay column of the bundle's card `card` (0-based)
    QString summary() const;          // the line under the table after a replay
    int differing() const { return differing_; }

Q_SIGNALS:
    void replayRequested();

private:
    kev::Bundle bundle_;
    QLabel* modelNote_ = nullptr;
    QLabel* summary_ = nullptr;
    QTableWidget* table_ = nullptr;
    QPushButton* replay_ = nullptr;
    int differing_ = -1;  // -1: not replayed yet
};

}  // namespace kevui
