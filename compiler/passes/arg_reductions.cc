// argmax / argmin as reductions (compiler/passes/arg_reductions.h).
#include "compiler/passes/arg_reductions.h"

#include "kiln/ops.h"

namespace kiln::compiler {

bool ArgReductions::run(Module& module) {
  const std::vector<detail::Node>& nodes = nodes_of(module.graph);
  auto rewritten = [&](const detail::Node& n) {
    if ((n.op != "argmax" && n.op != "argmin") || n.inputs.size() != 1) return false;
    const TensorType& x = nodes[n.inputs[0].node].outputs[n.inputs[0].output];
    const int64_t axis = n.attrs.get_int("axis", -1);
    const DType d = x.dtype;
    return axis >= 0 && axis < static_cast<int64_t>(x.shape.size()) &&
           x.shape[axis] != kUnknownDim && x.shape[axis] > 0 &&
           (d == f32 || d == f64 || d == f16 || d == bf16 || d == i32 || d == i64);
  };
  bool any = false;
  for (const detail::Node& n : nodes) any = any || rewritten(n);
  if (!any) return false;
  Rewriter rw(module);
  Graph out = rw.graph();
  auto default_guard = out.as_default();
  for (int id = 0; id < rw.num_old(); ++id) {
    const detail::Node& n = nodes[id];
    if (!rewritten(n)) {
      rw.keep(id);
      continue;
    }
    const ValueRef in = rw.map(n.inputs[0]);
    const Tensor x = out.value(in.node, in.output);
    const int64_t axis = n.attrs.get_int("axis");
    const int64_t size = x.shape()[axis];
    const bool is_max = n.op == "argmax";
    const Tensor best = is_max ? max(x, {axis}, true) : min(x, {axis}, true);
    Tensor hit = equal(x, best);
    if (is_floating(x.dtype())) hit = logical_or(hit, not_equal(x, x));
    Shape along(x.shape().size(), 1);
    along[axis] = size;
    const Tensor index = reshape(iota({size}, 0, i64), along);
    const Tensor first =
        min(where(hit, index, Tensor::scalar<int64_t>(size)), {axis}, /*keepdims=*/false);
    rw.alias(id, {ValueRef{first.impl()->node, first.impl()->output}});
    note(node_label(nodes, id) + ": as reduce_" + (is_max ? "max" : "min") + " and reduce_min");
  }
  module = rw.finish();
  return true;
}

}  // namespace kiln::compiler
