// A planned step as the forward's batch: the rows' tokens, positions, slots and read
// spans (or the dense mask drawn from the same spans, the reference path), the rows
// whose logits are sampled, and each row's LoRA scale.
#pragma once

#include <vector>

#include "kev/model.h"
#include "kev/planner.h"

namespace kev {

// `row_lora(card)` gives a card's LoRA scale (0 = base model); shared-context rows take
// `shared_lora`. Empty per-row scales when `per_row_lora` is false (merged or no LoRA).
template <typename RowLora>
ForwardBatch step_batch(const StepPlan& step, bool dense_mask, bool per_row_lora, float shared_lora,
                        RowLora row_lora) {
    ForwardBatch b;
    b.kv_len = step.kv_len;
    for (const StepRow& row : step.rows) {
        b.tokens.push_back(row.token);
        b.positions.push_back(row.position);
        b.slots.push_back(row.slot);
        b.reads.push_back(row.read);
        if (per_row_lora) b.lora_scales.push_back(row.card == PackPlan::kSharedSegment ? shared_lora : row_lora(row.card));
    }
    if (dense_mask) {
        b.mask = step_slot_mask(step);
        b.reads.clear();
    }
    for (const StepOutput& o : step.outputs) b.output_rows.push_back(o.row);
    return b;
}

}  // namespace kev
