// Conversions between Kev's plain enums and libtorch's, private to the engine.
#pragma once

#include <ATen/ATen.h>

#include "kev/engine_info.h"
#include "kev/weights.h"

namespace kev {

// scalar_type(DType) is in kev/weights.h.
inline at::Device torch_device(Device d) { return d == Device::Cuda ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU); }

inline std::int64_t dtype_bytes(DType d) { return d == DType::F32 ? 4 : 2; }

inline at::TensorOptions tensor_options(Device device, DType dtype) {
    return at::TensorOptions().dtype(scalar_type(dtype)).device(torch_device(device));
}

}  // namespace kev
