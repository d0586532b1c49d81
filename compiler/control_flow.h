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

class DeviceBackend;
class Executable;

// A control-flow node's sub-graph compiled for params of given types, run by the node's loop.
struct CompiledSub {
  std::shared_ptr<const SubGraph> sub;  // keeps the placeholders the executable is keyed by
  std::shared_ptr<const Executable> exe;
  // One run, donating the params compile_sub was told may be updated in place.
  std::vector<Tensor> operator()(std::vector<Tensor>&& args) const;
  std::string thunks() const;  // "3 thunks"
};

// `sub` compiled for params of these types; params [0, carried) may be donated to results
// [0, carried) (loop-carried values the body may update in place). For the host when `device`
// is null (compile()); else for `device` (compile_for_device), its results kept there unless
// `results_on_host` (a predicate the loop reads).
CompiledSub compile_sub(const std::shared_ptr<const DeviceBackend>& device,
                        const std::shared_ptr<const SubGraph>& sub,
                        const std::vector<TensorType>& params, size_t carried,
                        bool results_on_host = false);

// The sub-graph of `node` in attribute `attr`; throws naming the attribute when it is missing
// or not a sub-graph.
std::shared_ptr<const SubGraph> sub_of(const detail::Node& node, const std::string& attr);

// The kernel that runs control-flow node `node` (op cond, while or scan) whose inputs and
// outputs have these concrete types: its sub-graphs compiled now, for those types. The kernel
// is kept in `owned`; `description` is set to the thunk's one-line description.
const KernelDef* control_flow_kernel(const detail::Node& node,
                                     const std::vector<TensorType>& inputs,
                                     std::vector<std::unique_ptr<KernelDef>>& owned,
                                     std::string* description);

}  // namespace kiln::compiler
