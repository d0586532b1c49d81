// Control-flow thunks (XLA's While and Conditional): a cond, while or scan node of a compiled
// program runs its sub-graphs as compiled executables of their own (each with its optimizer
// passes, fusion and one arena planned once and reused by every iteration), driven by the
// same loops as the reference kernels (ops/control_flow.h). Loop-carried values are donated
// to the body, so a body that can update one in place does, with no copy per iteration.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kiln/op_registry.h"
#include "src/core/tensor_impl.h"

namespace kiln::compiler {

// The kernel that runs control-flow node `node` (op cond, while or scan) whose inputs and
// outputs have these concrete types: its sub-graphs compiled now, for those types. The kernel
// is kept in `owned`; `description` is set to the thunk's one-line description.
const KernelDef* control_flow_kernel(const detail::Node& node,
                                     const std::vector<TensorType>& inputs,
                                     std::vector<std::unique_ptr<KernelDef>>& owned,
                                     std::string* description);

}  // namespace kiln::compiler
