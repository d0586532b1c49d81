// Control flow in a device program: a cond, while or scan node whose sub-graphs are compiled
// for the same device, their results kept there (compile_for_device with outputs on the
// device), and driven by loops over device tensors. A scan's carried values, its xs rows (views
// into the operand) and its ys (each iteration's row copied into place within the device) never
// leave the device, and a carried value is donated to the next iteration, so the body updates
// it in place from the second iteration on; only a while's and a cond's predicate come to the
// host, one scalar per decision. The host's control-flow thunks (compiler/control_flow.h) run
// the same loops over host tensors.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "compiler/device_backend.h"
#include "src/core/tensor_impl.h"

namespace kiln::compiler {

class DeviceControlFlow {
 public:
  virtual ~DeviceControlFlow() = default;
  // The node's outputs as device tensors, from its inputs as device tensors of the node's
  // input types (views the caller keeps alive: never updated in place).
  virtual std::vector<Tensor> run(const std::vector<Tensor>& inputs) const = 0;
};

// Control-flow node `node` (cond, while or scan) with these concrete input and output types,
// its sub-graphs compiled for `device`; `description` is set to the thunk's description.
// Throws kiln::Error when a sub-graph does not compile.
std::shared_ptr<const DeviceControlFlow> device_control_flow(
    const std::shared_ptr<const DeviceBackend>& device, const detail::Node& node,
    const std::vector<TensorType>& inputs, const std::vector<TensorType>& outputs,
    std::string* description);

}  // namespace kiln::compiler
