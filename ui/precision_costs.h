// What each precision of the toolbar costs on this machine for the loaded model: the
// weight memory it would hold (estimated from the model's shape), and a warning where
// the precision has no fast kernel on this CPU. Shown in the precision menu, and by the
// memory gauge as what a change would free.
#pragma once

#include <QString>
#include <QtGlobal>

namespace kevui {

// The model's shape in parameters, from its config.
struct ModelShape {
    qint64 linear = 0;     // parameters of the linear layers (attention, MLP, an untied head)
    qint64 embedding = 0;  // the token embedding
    qint64 other = 0;      // norms and biases
    bool tiedHead = false; // the output head shares the embedding (4-bit gives it its own copy)
    // A tied head that keeps the file's own blocks with 4-bit on the CPU: their bytes
    // (kev::kept_embedding_bytes). The embedding is then looked up from them and no dense
    // copy is held. 0: the head is made NF4 and the embedding stays dense.
    qint64 keptEmbeddingBytes = 0;
};

enum class PrecisionRow { FourBit, Half, F32 };

struct PrecisionCost {
    qint64 weightBytes = 0;  // estimated weight memory
    QString warning;         // empty: a fast kernel runs it here
};

// Weight bytes of `shape` at `row`: fp32 4 bytes a parameter; half 2; 4-bit 4.5 bits a
// linear parameter (a 32-value block of 4-bit codes and an fp16 scale, as Q4_0; Q4_1
// and NF4 are within 10% of it), the rest in bf16, and a tied head quantized apart, or
// its kept blocks alone where it keeps the file's (keptEmbeddingBytes).
qint64 estimatedWeightBytes(const ModelShape& shape, PrecisionRow row);

// The estimate and this CPU's warning (CPU device; on CUDA no warning is given).
PrecisionCost precisionCost(const ModelShape& shape, PrecisionRow row, bool cuda);

// "4-bit · ~85 MB" (with " · slow here" when there is a warning).
QString precisionLabel(const QString& name, const PrecisionCost& cost);

}  // namespace kevui
