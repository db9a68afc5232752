#include "precision_costs.h"

#include <QLocale>

#include "kev/cpu_kernels.h"
#include "kev/quant.h"

namespace kevui {

qint64 estimatedWeightBytes(const ModelShape& shape, PrecisionRow row) {
    const qint64 all = shape.linear + shape.embedding + shape.other;
    switch (row) {
    case PrecisionRow::F32: return 4 * all;
    case PrecisionRow::Half: return 2 * all;
    case PrecisionRow::FourBit: {
        if (shape.tiedHead && shape.keptEmbeddingBytes > 0)
            return shape.linear * 9 / 16 + shape.keptEmbeddingBytes + 2 * shape.other;
        const qint64 quantized = shape.linear + (shape.tiedHead ? shape.embedding : 0);
        return quantized * 9 / 16 + 2 * (shape.embedding + shape.other);
    }
    }
    return 0;
}

PrecisionCost precisionCost(const ModelShape& shape, PrecisionRow row, bool cuda) {
    PrecisionCost c;
    c.weightBytes = estimatedWeightBytes(shape, row);
    if (cuda) return c;
    if (row == PrecisionRow::Half && kev::active_bf16_kernel() == kev::Bf16Kernel::Scalar) {
        c.warning = QStringLiteral("no SIMD bf16 kernel runs on this CPU (kernel family %1): half is slower than fp32 "
                                   "here, with a longer wait for the first token")
                        .arg(QString::fromLatin1(kev::to_string(kev::isa_limit())));
    }
    if (row == PrecisionRow::FourBit && kev::quant_int8_kernel() == kev::Int8Kernel::Scalar) {
        c.warning = QStringLiteral("no SIMD int8 kernel runs on this CPU (kernel family %1): 4-bit is slow here")
                        .arg(QString::fromLatin1(kev::to_string(kev::isa_limit())));
    }
    return c;
}

QString precisionLabel(const QString& name, const PrecisionCost& cost) {
    QString s = QStringLiteral("%1 · ~%2").arg(name, QLocale().formattedDataSize(cost.weightBytes, 0));
    if (!cost.warning.isEmpty()) s += QStringLiteral(" · slow here");
    return s;
}

}  // namespace kevui
