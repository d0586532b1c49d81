// Kiln tensors as TensorFlow's TensorProto (the gRPC API's tensors), both ways.
//
// Reading accepts every encoding a TF client sends: `tensor_content` (raw little-endian
// elements) or the typed list for the dtype (float_val, int_val, half_val, ...), a list shorter
// than the shape repeating its last value (an empty one: zeros), as TensorFlow's parser does.
// Stricter than TensorFlow: a list longer than the shape is an error (TensorFlow drops the
// extra values), and a DT_STRING list must hold one string per element. DT_STRING has no Kiln dtype: a string tensor of shape S becomes a u8 tensor of shape
// S + [n], its strings' bytes (all of length n), as REST's {"b64": ...} values do.
// Writing uses `tensor_content`; a u8 output whose name ends in "_bytes" is written as a
// DT_STRING tensor of its innermost rows.
#pragma once

#include <string>

#include "kiln/tensor.h"
#include "serving/proto/tensor.pb.h"

namespace kiln::serving {

// DT_FLOAT for f32, ... Throws kInvalidArgument for a dtype TensorFlow has no name for.
tensorflow::DataType to_tf_dtype(DType dtype);
// "DT_FLOAT", ...
std::string tf_dtype_name(DType dtype);

// `name` is the input's, for errors: kInvalidArgument naming the input, its dtype and shape and
// what is wrong (an unknown dimension, a value count or byte size that does not match, an
// unsupported dtype).
Tensor tensor_from_proto(const tensorflow::TensorProto& proto, const std::string& name);

void tensor_to_proto(const Tensor& t, const std::string& name, tensorflow::TensorProto* proto);

}  // namespace kiln::serving
