// ONNX TensorProto <-> kiln::Tensor, and ONNX's element types <-> Kiln's dtypes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "kiln/tensor.h"
#include "onnx/onnx_pb.h"  // Debian libonnx-dev: ONNX_API, then onnx-ml.pb.h (ONNX_ML)

namespace kiln::onnx::internal {

// Kiln's dtype for an ONNX TensorProto.DataType, or nullopt for one Kiln has no dtype for
// (uint16/32/64, int16, string, complex).
std::optional<DType> dtype_from_onnx(int32_t elem_type);
int32_t onnx_dtype(DType dtype);
// "FLOAT", "UINT16", ... for messages.
std::string onnx_dtype_name(int32_t elem_type);

// The tensor a TensorProto holds, from raw_data, the typed lists or external data (read from
// `external_dir`). Throws kiln::Error: kUnimplemented for an element type Kiln lacks, kDataLoss
// for data whose size does not match the dims or external data that cannot be read; `where`
// starts each message.
Tensor tensor_from_proto(const ::onnx::TensorProto& proto, const std::string& external_dir,
                         const std::string& where);
// Writes `t` (concrete) as raw_data.
void tensor_to_proto(const Tensor& t, ::onnx::TensorProto* proto);

}  // namespace kiln::onnx::internal
