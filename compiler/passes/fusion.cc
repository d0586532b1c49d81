// The fusion pass: greedy, in topological order, each node the target can emit joins the
// groups of its same-shaped producers, and each reduction the group of its producer, unless a
// FusionDecision below forbids it (a cycle, a broadcast, a reduction's result used inside the
// loop that computes it, two reductions folding different axes). A layout op starts a group
// that reads its buffer through an index map, and a piecewise layout op one that reads its
// inputs' buffers each inside its piece; their consumers then join that group. A generator
// (a random op, compiler/generator.h) starts a group that computes its elements from the seed;
// its consumers join it the same way.
#include "compiler/passes/fusion.h"

#include <algorithm>

#include "compiler/generator.h"

namespace kiln::compiler {
namespace {

bool is_reduction(const detail::Node& node) { return node.def && node.def->reduction; }
bool is_elemental(const detail::Node& node) { return node.def && node.def->elemental; }
bool is_layout(const detail::Node& node) { return node.def && node.def->index_map; }
bool is_pieces(const detail::Node& node) { return node.def && node.def->pieces; }
// The random ops: generators (compiler/generator.h) where the loops reproduce their kernels,
// and a note saying why not where they do not.
bool is_generator(const detail::Node& node) { return node.op.rfind("random_", 0) == 0; }
bool is_gather(const detail::Node& node) { return node.op == "gather"; }

class Planner {
 public:
  Planner(const FusionTarget& target, const std::vector<detail::Node>& nodes,
          const std::vector<std::vector<TensorType>>& types, const std::vector<bool>& needed,
          const std::vector<ValueRef>& fetched)
      : target_(target), nodes_(nodes), types_(types), n_(static_cast<int>(nodes.size())) {
    plan_.group_of.assign(n_, -1);
    uses_.assign(n_, 0);
    for (int id = 0; id < n_; ++id)
      if (needed[id])
        for (const ValueRef& in : nodes[id].inputs) ++uses_[in.node];
    for (const ValueRef& f : fetched) ++uses_[f.node];
  }

  void visit(int id) {
    if (is_reduction(nodes_[id])) {
      visit_reduction(id);
    } else if (is_elemental(nodes_[id])) {
      visit_elemental(id);
    } else if (is_layout(nodes_[id])) {
      visit_layout(id);
    } else if (is_pieces(nodes_[id])) {
      visit_pieces(id);
    } else if (is_generator(nodes_[id])) {
      visit_generator(id);
    } else if (is_gather(nodes_[id])) {
      visit_gather(id);
    }
    // anything else is a kernel op: not worth a note
  }

  FusionPlan finish(const std::vector<bool>& needed, const std::vector<ValueRef>& fetched);

 private:
  std::vector<TensorType> input_types(int id) const {
    std::vector<TensorType> in;
    for (const ValueRef& v : nodes_[id].inputs) in.push_back(types_[v.node][v.output]);
    return in;
  }
  void note(const std::string& line) { plan_.notes.push_back("not fused: " + line); }
  void note_pair(int producer, int consumer, const std::string& why) {
    note(node_label(nodes_, producer) + " into " + node_label(nodes_, consumer) + ": " + why);
  }

  // Whether any input from outside `unit` of a member of `unit` depends (through nodes and
  // whole groups, which run as one) on a member of `unit`: fusing it would create a cycle.
  bool creates_cycle(const std::vector<int>& unit) const;

  // Whether reduction `id` may fold into group g, which holds its producer.
  FusionDecision reduction_joins(int g, int id) const {
    const int producer = nodes_[id].inputs[0].node;
    const std::vector<int64_t>& axes = nodes_[id].attrs.get_ints("axes");
    if (is_reduction(nodes_[producer]))
      return FusionDecision::forbid("its input is a reduction's result");
    if (reads_pieces(members_[g]))
      return FusionDecision::forbid("the group reads pieces of a concatenate or pad, which the "
                                    "loops of reductions do not read");
    if (reduces_[g] && axes_of_[g] != axes)
      return FusionDecision::forbid("the group already reduces axes " + shape_str(axes_of_[g]) +
                                    ", this folds " + shape_str(axes) +
                                    " (the producer becomes a group output instead)");
    const TensorType in = input_types(id)[0];
    if (shape_of_[g] != in.shape)
      return FusionDecision::forbid("the group iterates over " + shape_str(shape_of_[g]) +
                                    ", the reduction over " + in.str());
    std::vector<int> trial = members_[g];
    trial.push_back(id);
    if (creates_cycle(trial))
      return FusionDecision::forbid("would create a cycle (a path leaves the group and comes back)");
    return FusionDecision::allow();
  }

  // Whether elementwise `id`, with `unit` (itself and the groups merged so far, `merged`), may
  // take in group g through input `in`.
  FusionDecision consumer_joins(int g, const ValueRef& in, int id, const std::vector<int>& unit,
                                const std::vector<int>& merged) const {
    for (const ValueRef& other : nodes_[id].inputs)
      if (plan_.group_of[other.node] == g && is_reduction(nodes_[other.node]))
        return FusionDecision::forbid(
            "uses a reduction's result (of this group), which is final only after the group's "
            "loop");
    if (types_[in.node][in.output].shape != types_[id][0].shape)
      return FusionDecision::forbid("shape " + types_[in.node][in.output].str() +
                                    " is broadcast to " + types_[id][0].str());
    for (int h : merged)
      if (reduces_[h] && reduces_[g] && axes_of_[h] != axes_of_[g])
        return FusionDecision::forbid("its group folds other axes than a group already merged");
    std::vector<int> trial = unit;
    trial.insert(trial.end(), members_[g].begin(), members_[g].end());
    bool reduces = reduces_[g];
    for (int h : merged) reduces = reduces || reduces_[h];
    if (reduces && reads_pieces(trial))
      return FusionDecision::forbid("a group reads pieces of a concatenate or pad and another "
                                    "reduces, and the loops of reductions read no pieces");
    if (FusionDecision d = layout_reads_stay_outside(trial); !d) return d;
    if (creates_cycle(trial))
      return FusionDecision::forbid("would create a cycle (a path leaves the group and comes back)");
    return FusionDecision::allow();
  }

  // A layout member reads a buffer its group does not compute: the loop reads it at other
  // indices than its own. So does a random op its seed (the loop's buffer for it).
  FusionDecision layout_reads_stay_outside(const std::vector<int>& unit) const {
    for (int m : unit) {
      if (!is_layout(nodes_[m])) continue;
      int root = m;
      while (is_layout(nodes_[root]) &&
             std::find(unit.begin(), unit.end(), root) != unit.end())
        root = nodes_[root].inputs[0].node;
      if (std::find(unit.begin(), unit.end(), root) != unit.end())
        return FusionDecision::forbid("layout op " + node_label(nodes_, m) +
                                      " would read a value the same loop computes");
    }
    for (int m : unit) {
      if (is_generator(nodes_[m]) &&
          std::find(unit.begin(), unit.end(), nodes_[m].inputs[0].node) != unit.end())
        return FusionDecision::forbid("random op " + node_label(nodes_, m) +
                                      " would read a seed the same loop computes");
      if (!is_pieces(nodes_[m]) && !is_gather(nodes_[m])) continue;
      for (const ValueRef& in : nodes_[m].inputs)
        if (std::find(unit.begin(), unit.end(), in.node) != unit.end())
          return FusionDecision::forbid(
              std::string(is_gather(nodes_[m]) ? "gather " : "piecewise op ") +
              node_label(nodes_, m) + " would read a value the same loop computes");
    }
    return FusionDecision::allow();
  }

  bool reads_pieces(const std::vector<int>& unit) const {
    for (int m : unit)
      if (is_pieces(nodes_[m])) return true;
    return false;
  }

  // A piecewise layout op starts a group of its own that reads each input's buffer inside its
  // piece (none of them computed by the group); consumers then join it like any group.
  void visit_pieces(int id) {
    if (FusionDecision d = target_.can_piece(nodes_[id], input_types(id), types_[id]); !d) {
      note(node_label(nodes_, id) + ": " + d.reason());
      return;
    }
    start_group_of(id);
  }

  // A generator starts a group of its own whose loop computes its elements (from the seed, its
  // one buffer); consumers then join it like any group.
  void visit_generator(int id) {
    if (FusionDecision d = target_.can_generate(nodes_[id], types_[id]); !d) {
      note(node_label(nodes_, id) + ": " + d.reason());
      return;
    }
    start_group_of(id);
  }

  // A gather starts a group of its own whose loop reads x's buffer at the rows its indices
  // (a buffer too) select; consumers then join it like any group.
  void visit_gather(int id) {
    if (FusionDecision d = target_.can_gather(nodes_[id], input_types(id), types_[id]); !d) {
      note(node_label(nodes_, id) + ": " + d.reason());
      return;
    }
    start_group_of(id);
  }

  // A group of `id` alone, iterating over its output's shape.
  void start_group_of(int id) {
    members_.push_back({id});
    shape_of_.push_back(types_[id][0].shape);
    reduces_.push_back(0);
    axes_of_.emplace_back();
    plan_.group_of[id] = static_cast<int>(members_.size()) - 1;
  }

  // A layout op starts a group of its own, or joins a chain of layout ops it reads, as an
  // index map on the loop's read of a buffer; consumers then join it like any group.
  void visit_layout(int id) {
    if (FusionDecision d = target_.can_map(nodes_[id], input_types(id), types_[id]); !d) {
      note(node_label(nodes_, id) + ": " + d.reason());
      return;
    }
    const int producer = nodes_[id].inputs[0].node;
    const int g = plan_.group_of[producer];
    int target = -1;
    // A chain (reshape then transpose, say) reads through both maps when the inner link is
    // read by nothing else: the group, all layout ops, then iterates over the outer's shape.
    bool chain = g >= 0 && is_layout(nodes_[producer]) && uses_[producer] == 1;
    for (int m : g >= 0 ? members_[g] : std::vector<int>{}) chain = chain && is_layout(nodes_[m]);
    if (chain) {
      plan_.group_of[id] = g;  // tentatively, to compose the chain's maps
      if (layout_read(id, g, plan_.group_of, nodes_, types_)) target = g;
      plan_.group_of[id] = -1;
      if (target < 0)
        note_pair(producer, id, "their index maps compose to no strided view (a reshape of a "
                                "transposed or sliced view)");
      else
        shape_of_[g] = types_[id][0].shape;
    }
    if (target < 0) {
      target = static_cast<int>(members_.size());
      members_.emplace_back();
      shape_of_.push_back(types_[id][0].shape);
      reduces_.push_back(0);
      axes_of_.emplace_back();
    }
    members_[target].push_back(id);
    std::sort(members_[target].begin(), members_[target].end());
    plan_.group_of[id] = target;
  }

  // Ops whose outputs a device program computes on the device (a feed may be a device tensor):
  // a reduction of one is better folded there than copied to the host for its kernel.
  static bool device_computed(const std::string& op) {
    return op == "placeholder" || op == "dot" || op == "fused_dot" ||
           op.rfind("convolution", 0) == 0 || op.rfind("reduce_window_", 0) == 0;
  }

  void visit_reduction(int id) {
    if (FusionDecision d = target_.can_reduce(nodes_[id], input_types(id)); !d) {
      note(node_label(nodes_, id) + ": " + d.reason());
      return;
    }
    const int producer = nodes_[id].inputs[0].node;
    const int g = plan_.group_of[producer];
    if (g < 0 && target_.loops_lone_reductions() && device_computed(nodes_[producer].op)) {
      // A loop of its own, reading the input where the device has it.
      members_.push_back({id});
      shape_of_.push_back(input_types(id)[0].shape);
      reduces_.push_back(1);
      axes_of_.push_back(nodes_[id].attrs.get_ints("axes"));
      plan_.group_of[id] = static_cast<int>(members_.size()) - 1;
      return;
    }
    if (g < 0) {  // nothing to fold in: the reference kernel is as good, and no JIT
      note(node_label(nodes_, id) + ": no fusible producer (left to the reference kernel)");
      return;
    }
    if (FusionDecision d = reduction_joins(g, id); !d) {
      note_pair(producer, id, d.reason());
      return;
    }
    members_[g].push_back(id);
    std::sort(members_[g].begin(), members_[g].end());
    reduces_[g] = 1;
    axes_of_[g] = nodes_[id].attrs.get_ints("axes");
    plan_.group_of[id] = g;
  }

  void visit_elemental(int id) {
    if (FusionDecision d = target_.can_emit(nodes_[id], input_types(id), types_[id]); !d) {
      note(node_label(nodes_, id) + ": " + d.reason());
      return;
    }
    std::vector<int> unit = {id};
    std::vector<int> merged, seen_inputs;
    for (const ValueRef& in : nodes_[id].inputs) {
      const int g = plan_.group_of[in.node];
      if (g < 0 || std::find(merged.begin(), merged.end(), g) != merged.end()) continue;
      if (std::find(seen_inputs.begin(), seen_inputs.end(), in.node) != seen_inputs.end())
        continue;  // x * x: one decision, one note
      seen_inputs.push_back(in.node);
      if (FusionDecision d = consumer_joins(g, in, id, unit, merged); !d) {
        note_pair(in.node, id, d.reason());
        continue;
      }
      unit.insert(unit.end(), members_[g].begin(), members_[g].end());
      merged.push_back(g);
    }
    int target;
    if (merged.empty()) {
      target = static_cast<int>(members_.size());
      members_.emplace_back();
      shape_of_.push_back(types_[id][0].shape);
      reduces_.push_back(0);
      axes_of_.emplace_back();
    } else {
      target = merged[0];
      for (size_t k = 1; k < merged.size(); ++k) {
        if (reduces_[merged[k]]) {
          reduces_[target] = 1;
          axes_of_[target] = axes_of_[merged[k]];
        }
        members_[merged[k]].clear();
      }
    }
    std::sort(unit.begin(), unit.end());
    members_[target] = unit;
    for (int m : unit) plan_.group_of[m] = target;
  }

  const FusionTarget& target_;
  const std::vector<detail::Node>& nodes_;
  const std::vector<std::vector<TensorType>>& types_;
  const int n_;
  std::vector<int> uses_;  // per node: how many needed nodes read it, and fetches
  FusionPlan plan_;
  std::vector<std::vector<int>> members_;  // per group (may become empty when merged away)
  std::vector<Shape> shape_of_;            // per group: its iteration shape
  std::vector<char> reduces_;              // per group: whether it holds reductions
  std::vector<std::vector<int64_t>> axes_of_;  // per group: the axes they fold
};

bool Planner::creates_cycle(const std::vector<int>& unit) const {
  std::vector<char> in_unit(n_, 0), seen(n_, 0);
  for (int id : unit) in_unit[id] = 1;
  std::vector<int> stack;
  auto push_inputs = [&](int id) {
    for (const ValueRef& in : nodes_[id].inputs)
      if (!in_unit[in.node] && !seen[in.node]) {
        seen[in.node] = 1;
        stack.push_back(in.node);
      }
  };
  for (int id : unit) push_inputs(id);
  std::vector<char> group_done(members_.size(), 0);
  while (!stack.empty()) {
    int v = stack.back();
    stack.pop_back();
    for (const ValueRef& in : nodes_[v].inputs)
      if (in_unit[in.node]) return true;
    push_inputs(v);
    int g = plan_.group_of[v];
    if (g >= 0 && !group_done[g]) {
      group_done[g] = 1;
      for (int m : members_[g]) {
        if (in_unit[m]) return true;
        if (!seen[m]) {
          seen[m] = 1;
          stack.push_back(m);
        }
      }
    }
  }
  return false;
}

// Compacts the groups and finds their outputs.
FusionPlan Planner::finish(const std::vector<bool>& needed, const std::vector<ValueRef>& fetched) {
  // A group of layout ops alone computes nothing: their kernels copy (or alias) as well, unless
  // the target keeps it as a copy loop. So does a gather read by nothing else in its loop (its
  // kernel copies whole rows).
  for (size_t g = 0; g < members_.size(); ++g) {
    bool computes = false;
    for (int m : members_[g])
      computes =
          computes || !(is_layout(nodes_[m]) || is_pieces(nodes_[m]) || is_gather(nodes_[m]));
    if (computes || members_[g].empty() || target_.copies_layout_groups()) continue;
    for (int m : members_[g]) {
      plan_.group_of[m] = -1;
      plan_.notes.push_back("not fused: " + node_label(nodes_, m) +
                            ": no loop reads it (left to its kernel)");
    }
    members_[g].clear();
  }
  std::vector<int> used_outside(n_, 0);
  for (int id = 0; id < n_; ++id) {
    if (!needed[id]) continue;
    for (const ValueRef& in : nodes_[id].inputs)
      if (plan_.group_of[in.node] < 0 || plan_.group_of[in.node] != plan_.group_of[id])
        used_outside[in.node] = 1;
  }
  for (const ValueRef& f : fetched) used_outside[f.node] = 1;
  std::vector<int> renumber(members_.size(), -1);
  for (size_t g = 0; g < members_.size(); ++g) {
    if (members_[g].empty()) continue;
    renumber[g] = static_cast<int>(plan_.groups.size());
    FusionGroup group;
    group.nodes = members_[g];
    group.shape = shape_of_[g];
    group.has_reductions = reduces_[g] != 0;
    group.reduce_axes = axes_of_[g];
    for (int m : members_[g])
      if (used_outside[m]) group.outputs.push_back(m);
    plan_.groups.push_back(std::move(group));
  }
  for (int& g : plan_.group_of)
    if (g >= 0) g = renumber[g];
  return std::move(plan_);
}

}  // namespace

FusionDecision FusionTarget::can_generate(const detail::Node& node,
                                          const std::vector<TensorType>& outputs) const {
  if (outputs.size() != 1 || !is_fully_defined(outputs[0].shape))
    return FusionDecision::forbid("its output shape is not known");
  std::string why;
  if (!generator_of(node.op, node.attrs, outputs[0].dtype, &why)) return FusionDecision::forbid(why);
  if (!storage_dtype(outputs[0].dtype))
    return FusionDecision::forbid(std::string("dtype ") + dtype_name(outputs[0].dtype) +
                                  " is not supported");
  return FusionDecision::allow();
}

FusionDecision FusionTarget::can_gather(const detail::Node& node,
                                        const std::vector<TensorType>& inputs,
                                        const std::vector<TensorType>& outputs) const {
  (void)node, (void)inputs, (void)outputs;
  return FusionDecision::forbid("this backend's loops read no gathers");
}

std::optional<LayoutRead> layout_read(int id, int group, const std::vector<int>& group_of,
                                      const std::vector<detail::Node>& nodes,
                                      const std::vector<std::vector<TensorType>>& types) {
  std::vector<int> chain;  // id, then the layout members it reads through, outermost first
  for (int v = id; is_layout(nodes[v]) && group_of[v] == group; v = nodes[v].inputs[0].node)
    chain.push_back(v);
  const ValueRef buffer = nodes[chain.back()].inputs[0];
  StridedView view = row_major_view(types[buffer.node][buffer.output].shape);
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    const detail::Node& n = nodes[*it];
    const ValueRef in = n.inputs[0];
    std::optional<StridedView> next =
        n.def->index_map(view, types[in.node][in.output].shape, types[*it][0].shape, n.attrs);
    if (!next) return std::nullopt;
    view = std::move(*next);
  }
  return LayoutRead{buffer, std::move(view)};
}

FusionPlan plan_fusion(const FusionTarget& target, const std::vector<detail::Node>& nodes,
                       const std::vector<std::vector<TensorType>>& types,
                       const std::vector<bool>& needed, const std::vector<ValueRef>& fetched) {
  Planner planner(target, nodes, types, needed, fetched);
  for (int id = 0; id < static_cast<int>(nodes.size()); ++id)
    if (needed[id]) planner.visit(id);
  return planner.finish(needed, fetched);
}

bool Fusion::run(Module& module) {
  const std::vector<detail::Node>& nodes = nodes_of(module.graph);
  if (module.types.size() != nodes.size() || module.needed.size() != nodes.size()) {
    throw Error(ErrorCode::kInternal,
                "fusion: the module's concrete types are not set (the compile driver sets them)");
  }
  plan_ = plan_fusion(target_, nodes, module.types, module.needed, module.outputs);
  module.fusion_group = plan_.group_of;
  for (const std::string& line : plan_.notes) note(line);
  return !plan_.groups.empty();
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
