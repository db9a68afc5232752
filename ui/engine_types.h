// Value types that cross the thread boundary between the engine worker and the
// widgets. They are plain copies (no tensors, no pointers into the session), registered
// with Qt's meta-type system so queued signals can carry them.
#pragma once

#include <QMetaType>
#include <QString>
#include <QStringList>
#include <QVector>

#include <cstdint>
#include <memory>

#include "kev/engine_info.h"
#include "kev/generator.h"
#include "kev/weights.h"
#include "precision_costs.h"

namespace kevui {

// What the user chose for the next load: device and working precision (4-bit: quant
// set, dtype the activations' and embeddings' precision).
struct LoadSettings {
    kev::Device device = kev::Device::Cpu;
    kev::DType dtype = kev::DType::F32;
    kev::WeightQuant quant = kev::WeightQuant::None;
};

// What the widgets may know about a loaded model.
struct ModelInfo {
    QString path;
    QString name;          // file or folder name
    QString architecture;
    kev::Device device = kev::Device::Cpu;
    kev::DType dtype = kev::DType::F32;
    qint64 weightBytes = 0;
    kev::WeightQuant quant = kev::WeightQuant::None;
    qint64 weightBytes4Bit = 0;  // of weightBytes, the 4-bit linear layers (NF4, Q4_0, Q4_1)
    QString weightFormats;       // e.g. "q4_1 + nf4, bf16" (what the weights are held as)
    qint64 parameters = 0;
    qint64 contextLength = 0;
    qint64 kvBytesPerSlot = 0;  // key + value over all layers, for the KV-cache gauge
    double loadSeconds = 0.0;
    QString chatNote;           // why there is no chat template, when there is none
    ModelShape shape;           // parameters by kind, for what each precision would cost
    QString defaultSystem;      // the system prompt the template adds when none is given
    // The model file's SHA-256 (kev::model_hash): computed after the load on the loader
    // thread, so it is empty for a moment (EngineHost::modelHashed says when it is set).
    QString sha256;
    qint64 fileBytes = 0;       // the model file's size (a folder: its files'), with sha256
};

// The pack as the pack view draws it: the plan plus every row's token text, so the
// view never needs the tokenizer (which lives on the worker thread).
struct PackPreview {
    kev::PackPlan plan;
    QStringList rowPieces;      // per packed row: the token's text as the model sees it
    QStringList prompts;        // per request card: its whole prompt text, template included
    QVector<int> cardOfRequest; // request card index -> the window's card index
    qint64 kvEstimateBytes = 0; // cache_slots * kvBytesPerSlot
};

// Run ids start at 1; 0 means "no run".
using RunId = quint64;

// What the UI thread tells a running run, read by the worker between steps: its cancel
// requests and the cards that join it. A queued slot would wait behind the running
// generation loop, so both go through these thread-safe objects instead.
struct RunControl {
    // Room for the run's cards and as many joining ones (a card's cancel flag is its
    // index in the run; a joined card takes the next one).
    static constexpr std::size_t kMaxJoinedCards = 4096;
    explicit RunControl(std::size_t cards) : cancel(cards + kMaxJoinedCards) {}
    kev::CancelFlags cancel;
    kev::JoinQueue joins;
};
using RunHandle = std::shared_ptr<RunControl>;

void registerEngineTypes();

}  // namespace kevui

Q_DECLARE_METATYPE(kevui::LoadSettings)
Q_DECLARE_METATYPE(kevui::ModelInfo)
Q_DECLARE_METATYPE(kevui::PackPreview)
Q_DECLARE_METATYPE(kevui::RunHandle)
Q_DECLARE_METATYPE(kev::GenerationRequest)
Q_DECLARE_METATYPE(kev::StepEvent)
Q_DECLARE_METATYPE(kev::GenerationResult)
