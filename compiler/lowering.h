// Lowering of a fusion group (compiler/passes/fusion.h) to a FusedSubgraph (compiler/
// fused_subgraph.h): the one place that maps graph values onto a kernel's inputs and outputs.
// The executable compiles the subgraphs with its backend.
#pragma once

#include <string>
#include <vector>

#include "compiler/fused_subgraph.h"
#include "compiler/passes/fusion.h"
#include "src/core/tensor_impl.h"

namespace kiln::compiler {

// A gather the loop reads (a gathered input): its indices, input `input` of the subgraph, must
// lie in [0, x.shape[axis]) before the loop runs, which reads 0 for any other (the program
// checks them where they are on the host, with the gather kernel's error). A device's
// scatter_add loop checks its indices the same way.
struct IndexCheck {
  int input = -1;
  int64_t axis = 0;
  TensorType x;
  std::string op = "gather";  // gather or scatter_add, for the error
  std::string node;           // its name
};

// Throws kOutOfRange, with the op's kernel's message, when `indices` (its value on the host)
// hold one outside [0, c.x.shape[c.axis]).
void check_indices(const IndexCheck& c, const Tensor& indices);

struct LoweredFusion {
  FusedSubgraph subgraph;
  std::vector<ValueRef> inputs;  // the graph values fed to the subgraph's inputs, in order
  std::vector<int> outputs;      // the nodes the subgraph's outputs stand for, in order
  std::string ops;               // "add,mul,exp": the members' ops, for descriptions
  std::vector<IndexCheck> index_checks;  // one per gather
};

// Builds the subgraph of `plan.groups[group]` over `nodes` with concrete `types`, for the
// backend `target` (the one the plan was made for). Throws kiln::Error when the group cannot be
// expressed (the caller leaves it to reference kernels).
LoweredFusion lower_fusion_group(const FusionTarget& target, int group, const FusionPlan& plan,
                                 const std::vector<detail::Node>& nodes,
                                 const std::vector<std::vector<TensorType>>& types);

}  // namespace kiln::compiler
