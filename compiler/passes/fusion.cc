// Loop and input fusion analysis: greedy, in topological order, merging each emitter-supported
// elementwise node into the groups of its same-shaped producers, and each reduction into the
// group of its producer, unless that creates a cycle or would use a reduction's result inside
// the loop that computes it.
#include "compiler/passes/fusion.h"

#include <algorithm>
#include <set>

#include "compiler/codegen/cpu/fused_kernel.h"

namespace kiln::compiler {

std::string fusion_refusal(const detail::Node& node, const std::vector<TensorType>& inputs,
                           const std::vector<TensorType>& outputs) {
  auto op = cpu::elt_op_from_name(node.op);
  if (!op) return "op " + node.op + " is not supported by the CPU emitter";
  if (outputs.size() != 1) return "op " + node.op + " has several outputs";
  if (static_cast<int>(inputs.size()) != cpu::elt_op_arity(*op))
    return "op " + node.op + " has " + std::to_string(inputs.size()) + " inputs";
  for (const TensorType& t : inputs)
    for (int64_t d : t.shape)
      if (d < 0) return "unknown input dimension";
  try {
    cpu::FusedSubgraph sg;
    std::vector<int> args;
    for (const TensorType& t : inputs) args.push_back(sg.add_input(t.dtype, t.shape));
    int v = sg.add(*op, args, outputs[0].dtype);
    if (sg.dtype(v) != outputs[0].dtype)
      return std::string("emitter infers dtype ") + dtype_name(sg.dtype(v)) + ", node has " +
             dtype_name(outputs[0].dtype);
    sg.add_output(v);
    sg.validate();
    if (sg.output_shape() != outputs[0].shape)
      return "output shape " + outputs[0].str() + " is not the broadcast of the inputs";
  } catch (const Error& e) {
    return std::string("unsupported dtypes: ") + e.what();
  }
  return "";
}

std::string reduction_refusal(const detail::Node& node, const std::vector<TensorType>& inputs) {
  auto kind = cpu::reduce_kind_from_name(node.op);
  if (!kind) return "op " + node.op + " is not a reduction the CPU emitter supports";
  if (inputs.size() != 1)
    return "op " + node.op + " has " + std::to_string(inputs.size()) + " inputs";
  const TensorType& x = inputs[0];
  if (!is_fully_defined(x.shape)) return "unknown input dimension";
  if (x.dtype != f32 && x.dtype != f64 && x.dtype != i32 && x.dtype != i64)
    return std::string("dtype ") + dtype_name(x.dtype) + " is not supported";
  if (!node.attrs.has("axes")) return "no axes attribute";
  const std::vector<int64_t>& axes = node.attrs.get_ints("axes");
  for (size_t i = 0; i < axes.size(); ++i)
    if (axes[i] < 0 || axes[i] >= static_cast<int64_t>(x.shape.size()) ||
        (i > 0 && axes[i] <= axes[i - 1]))
      return "axes " + shape_str(axes) + " are not sorted axes of " + x.str();
  return cpu::reduction_layout_refusal(x.shape, axes);
}

namespace {

bool is_reduce_op(const std::string& op) { return cpu::reduce_kind_from_name(op).has_value(); }

std::string label(const std::vector<detail::Node>& nodes, int id) {
  return std::string("%") + std::to_string(id) + " " + nodes[id].name + " (" + nodes[id].op +
         ")";
}

}  // namespace

FusionPlan plan_fusion(const std::vector<detail::Node>& nodes,
                       const std::vector<std::vector<TensorType>>& types,
                       const std::vector<bool>& needed, const std::vector<ValueRef>& fetched) {
  const int n = static_cast<int>(nodes.size());
  FusionPlan plan;
  plan.group_of.assign(n, -1);
  std::vector<std::vector<int>> members;  // per group (may become empty when merged away)
  std::vector<Shape> shape_of;            // per group: its iteration shape
  std::vector<char> reduces;              // per group: whether it holds reductions
  std::vector<std::vector<int64_t>> axes_of;  // per group: the axes they fold

  // Whether any input from outside `unit` of a member of `unit` depends (through nodes and
  // whole groups, which run as one) on a member of `unit`: fusing it would create a cycle.
  auto creates_cycle = [&](const std::vector<int>& unit) {
    std::vector<char> in_unit(n, 0), seen(n, 0);
    for (int id : unit) in_unit[id] = 1;
    std::vector<int> stack;
    auto push_inputs = [&](int id) {
      for (const ValueRef& in : nodes[id].inputs)
        if (!in_unit[in.node] && !seen[in.node]) {
          seen[in.node] = 1;
          stack.push_back(in.node);
        }
    };
    for (int id : unit) push_inputs(id);
    std::vector<char> group_done(members.size(), 0);
    while (!stack.empty()) {
      int v = stack.back();
      stack.pop_back();
      for (const ValueRef& in : nodes[v].inputs)
        if (in_unit[in.node]) return true;
      push_inputs(v);
      int g = plan.group_of[v];
      if (g >= 0 && !group_done[g]) {
        group_done[g] = 1;
        for (int m : members[g]) {
          if (in_unit[m]) return true;
          if (!seen[m]) {
            seen[m] = 1;
            stack.push_back(m);
          }
        }
      }
    }
    return false;
  };

  for (int id = 0; id < n; ++id) {
    if (!needed[id]) continue;
    const detail::Node& node = nodes[id];
    std::vector<TensorType> in_types;
    for (const ValueRef& in : node.inputs) in_types.push_back(types[in.node][in.output]);
    if (is_reduce_op(node.op)) {
      std::string why = reduction_refusal(node, in_types);
      if (!why.empty()) {
        plan.notes.push_back("not fused: " + label(nodes, id) + ": " + why);
        continue;
      }
      const std::vector<int64_t>& axes = node.attrs.get_ints("axes");
      const ValueRef in = node.inputs[0];
      int g = plan.group_of[in.node];
      int target = -1;
      if (g >= 0) {
        std::string refused;
        if (is_reduce_op(nodes[in.node].op)) {
          refused = "its input is a reduction's result";
        } else if (reduces[g] && axes_of[g] != axes) {
          refused = "the group already reduces axes " + shape_str(axes_of[g]) + ", this folds " +
                    shape_str(axes) + " (the producer becomes a group output instead)";
        } else if (shape_of[g] != in_types[0].shape) {
          refused = "the group iterates over " + shape_str(shape_of[g]) + ", the reduction over " +
                    in_types[0].str();
        } else {
          std::vector<int> trial = members[g];
          trial.push_back(id);
          if (creates_cycle(trial))
            refused = "would create a cycle (a path leaves the group and comes back)";
        }
        if (refused.empty()) {
          target = g;
        } else {
          plan.notes.push_back("not fused: " + label(nodes, in.node) + " into " +
                               label(nodes, id) + ": " + refused);
        }
      }
      if (target < 0) {  // nothing to fold in: the reference kernel is as good, and no JIT
        if (g < 0)
          plan.notes.push_back("not fused: " + label(nodes, id) +
                               ": no fusible producer (left to the reference kernel)");
        continue;
      }
      members[target].push_back(id);
      std::sort(members[target].begin(), members[target].end());
      reduces[target] = 1;
      axes_of[target] = axes;
      plan.group_of[id] = target;
      continue;
    }
    if (!cpu::elt_op_from_name(node.op)) continue;  // not elementwise: not worth a note
    std::string why = fusion_refusal(node, in_types, types[id]);
    if (!why.empty()) {
      plan.notes.push_back("not fused: " + label(nodes, id) + ": " + why);
      continue;
    }
    const Shape& shape = types[id][0].shape;
    std::vector<int> unit = {id};
    std::vector<int> merged, seen_inputs;
    // Groups whose reduction this node uses: it cannot join them (through any input).
    std::vector<int> blocked;
    for (const ValueRef& in : node.inputs)
      if (plan.group_of[in.node] >= 0 && is_reduce_op(nodes[in.node].op))
        blocked.push_back(plan.group_of[in.node]);
    for (const ValueRef& in : node.inputs) {
      int g = plan.group_of[in.node];
      if (g < 0 || std::find(merged.begin(), merged.end(), g) != merged.end()) continue;
      if (std::find(seen_inputs.begin(), seen_inputs.end(), in.node) != seen_inputs.end())
        continue;  // x * x: one decision, one note
      seen_inputs.push_back(in.node);
      if (std::find(blocked.begin(), blocked.end(), g) != blocked.end()) {
        plan.notes.push_back("not fused: " + label(nodes, in.node) + " into " +
                             label(nodes, id) +
                             ": uses a reduction's result (of this group), which is final "
                             "only after the group's loop");
        continue;
      }
      if (types[in.node][in.output].shape != shape) {
        plan.notes.push_back("not fused: " + label(nodes, in.node) + " into " +
                             label(nodes, id) + ": shape " + types[in.node][in.output].str() +
                             " is broadcast to " + types[id][0].str());
        continue;
      }
      bool red_conflict = false;
      for (int h : merged)
        if (reduces[h] && reduces[g] && axes_of[h] != axes_of[g]) red_conflict = true;
      if (red_conflict) {
        plan.notes.push_back("not fused: " + label(nodes, in.node) + " into " +
                             label(nodes, id) + ": its group folds other axes than " +
                             "a group already merged");
        continue;
      }
      std::vector<int> trial = unit;
      trial.insert(trial.end(), members[g].begin(), members[g].end());
      if (creates_cycle(trial)) {
        plan.notes.push_back("not fused: " + label(nodes, in.node) + " into " +
                             label(nodes, id) +
                             ": would create a cycle (a path leaves the group and comes back)");
        continue;
      }
      unit = std::move(trial);
      merged.push_back(g);
    }
    int target;
    if (merged.empty()) {
      target = static_cast<int>(members.size());
      members.emplace_back();
      shape_of.push_back(shape);
      reduces.push_back(0);
      axes_of.emplace_back();
    } else {
      target = merged[0];
      for (size_t k = 1; k < merged.size(); ++k) {
        if (reduces[merged[k]]) {
          reduces[target] = 1;
          axes_of[target] = axes_of[merged[k]];
        }
        members[merged[k]].clear();
      }
    }
    std::sort(unit.begin(), unit.end());
    members[target] = unit;
    for (int m : unit) plan.group_of[m] = target;
  }

  // Compact the groups and find their outputs.
  std::vector<int> used_outside(n, 0);
  for (int id = 0; id < n; ++id) {
    if (!needed[id]) continue;
    for (const ValueRef& in : nodes[id].inputs)
      if (plan.group_of[in.node] < 0 || plan.group_of[in.node] != plan.group_of[id])
        used_outside[in.node] = 1;
  }
  for (const ValueRef& f : fetched) used_outside[f.node] = 1;
  std::vector<int> renumber(members.size(), -1);
  for (size_t g = 0; g < members.size(); ++g) {
    if (members[g].empty()) continue;
    renumber[g] = static_cast<int>(plan.groups.size());
    FusionGroup group;
    group.nodes = members[g];
    group.shape = shape_of[g];
    group.has_reductions = reduces[g] != 0;
    group.reduce_axes = axes_of[g];
    for (int m : members[g])
      if (used_outside[m]) group.outputs.push_back(m);
    plan.groups.push_back(std::move(group));
  }
  for (int& g : plan.group_of)
    if (g >= 0) g = renumber[g];
  return plan;
}

std::string FusionPlan::log() const {
  std::string s;
  for (size_t g = 0; g < groups.size(); ++g) {
    s += "group " + std::to_string(g) + " " + TensorType{f32, groups[g].shape}.str().substr(3);
    if (groups[g].has_reductions) s += " reducing axes " + shape_str(groups[g].reduce_axes);
    s += ": nodes";
    for (int id : groups[g].nodes) s += " %" + std::to_string(id);
    s += "; outputs";
    for (int id : groups[g].outputs) s += " %" + std::to_string(id);
    s += "\n";
  }
  for (const std::string& note : notes) s += note + "\n";
  return s;
}

}  // namespace kiln::compiler
