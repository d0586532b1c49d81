// Running one op: shape inference then the registered kernel. Shared by eager dispatch and
// the reference interpreter.
#pragma once

#include <string>
#include <vector>

#include "kiln/op_registry.h"

namespace kiln::runtime {

// Checks the input count and runs the op's shape function.
std::vector<TensorType> infer_types(const OpDef& def, const std::string& node_name,
                                    const std::vector<TensorType>& inputs, const Attrs& attrs);

// Infers output types from the concrete inputs, finds the CPU kernel for the key dtype
// (the first input's, or the first output's for ops without inputs) and runs it.
std::vector<Tensor> run_kernel(const OpDef& def, const std::string& node_name,
                               const std::vector<Tensor>& inputs, const Attrs& attrs);

}  // namespace kiln::runtime
