// Loop and input fusion analysis: groups producer-consumer chains of elementwise ops that the
// CPU emitter supports (compiler/codegen/cpu/fused_kernel.h), and reductions with the
// elementwise producers they fold, into acyclic fusion groups, for concrete shapes, and records
// why each refused fusion was refused (for the KILN_DUMP log).
#pragma once

#include <string>
#include <vector>

#include "kiln/graph.h"
#include "src/core/tensor_impl.h"

namespace kiln::compiler {

struct FusionGroup {
  std::vector<int> nodes;    // node ids, ascending (a topological order)
  std::vector<int> outputs;  // members used outside the group or fetched, ascending
  Shape shape;               // the iteration shape: every elementwise member's output shape
  // Input fusion: the axes (of `shape`) every reduction member folds; empty when there are
  // none. Reductions are used only outside the group.
  bool has_reductions = false;
  std::vector<int64_t> reduce_axes;
};

struct FusionPlan {
  std::vector<FusionGroup> groups;
  std::vector<int> group_of;       // per node: its group index, or -1
  std::vector<std::string> notes;  // one line per refused fusion / unfusible node, with reason

  std::string log() const;  // the groups and the notes, for humans
};

// Plans fusion over `nodes` (a topologically ordered graph), where `types[id]` are node id's
// concrete output types, `needed[id]` says whether a node is computed at all, and `fetched`
// lists the values the caller asks for (their producers become group outputs).
FusionPlan plan_fusion(const std::vector<detail::Node>& nodes,
                       const std::vector<std::vector<TensorType>>& types,
                       const std::vector<bool>& needed, const std::vector<ValueRef>& fetched);

// Why `node` (with concrete input types `inputs` and output types `outputs`) cannot be emitted
// by the CPU elementwise emitter, or "" when it can.
std::string fusion_refusal(const detail::Node& node, const std::vector<TensorType>& inputs,
                           const std::vector<TensorType>& outputs);

// The same for a reduction node (reduce_sum, reduce_prod, reduce_max, reduce_min).
std::string reduction_refusal(const detail::Node& node, const std::vector<TensorType>& inputs);

}  // namespace kiln::compiler
