// Lowering of fusion groups to FusedSubgraphs: inputs first (values from outside the group, in
// first-use order), then members in topological order (reductions as reduction nodes), then
// the group's outputs.
#include "compiler/lowering.h"

#include <algorithm>
#include <unordered_map>

#include "compiler/generator.h"
#include "kiln/execution_mode.h"
#include "ops/kernel_util.h"

namespace kiln::compiler {

void check_indices(const IndexCheck& c, const Tensor& indices) {
  if (std::string why = ops::take_index_error(indices, c.axis, c.x); !why.empty())
    throw Error(
        ErrorCode::kOutOfRange,
        c.op + ": " + why + (c.node.empty() || c.node == c.op ? "" : " (in " + c.node + ")"));
}

LoweredFusion lower_fusion_group(const FusionTarget& target, int group, const FusionPlan& plan,
                                 const std::vector<detail::Node>& nodes,
                                 const std::vector<std::vector<TensorType>>& types) {
  const FusionGroup& g = plan.groups[group];
  LoweredFusion out;
  FusedSubgraph& sg = out.subgraph;
  sg.excess_precision = allow_excess_precision();
  std::unordered_map<int64_t, int> value_of;  // node*1024+output -> subgraph value
  auto key = [](ValueRef v) { return static_cast<int64_t>(v.node) * 1024 + v.output; };
  auto is_layout = [&](int m) { return nodes[m].def && nodes[m].def->index_map; };
  // A layout member that only the next link of its chain reads (its shape may not be the
  // loop's) adds no input of its own; one a computation reads, or a group output, does.
  auto interior = [&](int m) {
    if (std::find(g.outputs.begin(), g.outputs.end(), m) != g.outputs.end()) return false;
    for (int c : g.nodes)
      if (!is_layout(c))
        for (const ValueRef& in : nodes[c].inputs)
          if (in.node == m) return false;
    return true;
  };
  auto is_pieces = [&](int m) { return nodes[m].def && nodes[m].def->pieces; };
  auto is_generator = [&](int m) { return is_generator_op(nodes[m].op); };
  auto is_gather = [&](int m) { return nodes[m].op == "gather"; };
  for (int m : g.nodes) {
    if (is_gather(m)) {
      // out[o.., j.., k..] = x[o.., indices[j..], k..]: the indices read through a broadcast
      // over the output's shape, x through a view that skips the gathered axis, plus the row.
      const ValueRef x = nodes[m].inputs.at(0), indices = nodes[m].inputs.at(1);
      const TensorType& xt = types[x.node][x.output];
      const TensorType& it = types[indices.node][indices.output];
      const Shape& shape = types[m][0].shape;
      int64_t axis = nodes[m].attrs.get_int("axis", 0);
      if (axis < 0) axis += static_cast<int64_t>(xt.shape.size());
      const int64_t jr = static_cast<int64_t>(it.shape.size());
      const StridedView xs = row_major_view(xt.shape), is = row_major_view(it.shape);
      StridedView iv{std::vector<int64_t>(shape.size(), 0), 0}, xv = iv;
      for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
        if (d < axis)
          xv.strides[d] = xs.strides[d];
        else if (d < axis + jr)
          iv.strides[d] = is.strides[d - axis];
        else
          xv.strides[d] = xs.strides[d - jr + 1];
      }
      const int idx = sg.add_mapped_input(it.dtype, shape, iv, it.shape);
      // One check per indices value and axis size (two tables looked up by the same ids).
      bool checked = false;
      for (const IndexCheck& c : out.index_checks)
        checked =
            checked || (out.inputs[c.input] == indices && c.x.shape[c.axis] == xt.shape[axis]);
      if (!checked)
        out.index_checks.push_back(
            {static_cast<int>(out.inputs.size()), axis, xt, "gather", nodes[m].name});
      out.inputs.push_back(indices);
      value_of[key({m, 0})] = sg.add_gathered_input(
          xt.dtype, shape, xv, xt.shape,
          {.indices = idx, .stride = xs.strides[axis], .dim = xt.shape[axis]});
      out.inputs.push_back(x);
      continue;
    }
    if (is_generator(m)) {
      // Its elements come from the seed (input 0) and their index; a "shape_like" input is
      // read for its type alone.
      std::string why;
      std::optional<Generator> gen = generator_of(nodes[m].op, nodes[m].attrs, types[m][0].dtype, &why);
      if (!gen || plan.group_of[nodes[m].inputs.at(0).node] == group)
        throw Error(ErrorCode::kInternal, "lower_fusion_group: %" + std::to_string(m) + " (" +
                                              nodes[m].op + "): " +
                                              (gen ? "its seed is computed by the group" : why));
      value_of[key({m, 0})] =
          sg.add_generated_input(types[m][0].dtype, types[m][0].shape, std::move(*gen));
      out.inputs.push_back(nodes[m].inputs.at(0));
      continue;
    }
    if (is_pieces(m)) {
      // Each input with a piece reads inside it and falls back to the one added before it;
      // the input without one (a scalar) is read everywhere else. Empty pieces are not read.
      std::vector<Shape> shapes;
      for (const ValueRef& in : nodes[m].inputs) shapes.push_back(types[in.node][in.output].shape);
      const Shape& shape = types[m][0].shape;
      const std::vector<std::optional<Piece>> pieces =
          nodes[m].def->pieces(shapes, shape, nodes[m].attrs);
      int value = -1;
      for (size_t i = 0; i < pieces.size(); ++i)
        if (!pieces[i]) {
          value = sg.add_input(types[m][0].dtype, shapes[i]);
          out.inputs.push_back(nodes[m].inputs[i]);
        }
      for (size_t i = pieces.size(); i-- > 0;) {
        if (!pieces[i] || num_elements(shapes[i]) == 0) continue;
        value = sg.add_piece_input(types[m][0].dtype, shape, *pieces[i], shapes[i], value);
        out.inputs.push_back(nodes[m].inputs[i]);
      }
      value_of[key({m, 0})] = value;
      continue;
    }
    if (is_layout(m)) {
      if (interior(m)) continue;
      std::optional<LayoutRead> read = layout_read(m, group, plan.group_of, nodes, types);
      if (!read) {
        throw Error(ErrorCode::kInternal, "lower_fusion_group: %" + std::to_string(m) + " (" +
                                              nodes[m].op + ") has no strided view");
      }
      const TensorType& buffer = types[read->buffer.node][read->buffer.output];
      value_of[key({m, 0})] = sg.add_mapped_input(buffer.dtype, types[m][0].shape,
                                                  std::move(read->view), buffer.shape);
      out.inputs.push_back(read->buffer);
      continue;
    }
    for (const ValueRef& in : nodes[m].inputs) {
      if (plan.group_of[in.node] == group || value_of.count(key(in))) continue;
      const TensorType& tt = types[in.node][in.output];
      value_of[key(in)] = sg.add_input(tt.dtype, tt.shape);
      out.inputs.push_back(in);
    }
  }
  for (int m : g.nodes) {
    out.ops += (out.ops.empty() ? "" : ",") + nodes[m].op;
    // Read through its map or pieces, or generated, above.
    if (is_layout(m) || is_pieces(m) || is_generator(m) || is_gather(m)) continue;
    std::vector<int> args;
    for (const ValueRef& in : nodes[m].inputs) args.push_back(value_of.at(key(in)));
    const OpDef* def = nodes[m].def;
    if (def && def->reduction) {
      value_of[key({m, 0})] = sg.add_reduce(*def->reduction, args.at(0), nodes[m].attrs.get_ints("axes"));
      continue;
    }
    SubgraphBuilder b(sg, target);
    int v = def ? b.apply_op(*def, args, nodes[m].attrs) : ElementalBuilder::kRefused;
    if (v == ElementalBuilder::kRefused) {
      throw Error(ErrorCode::kInternal, "lower_fusion_group: %" + std::to_string(m) + " (" +
                                            nodes[m].op + "): " + b.refusal());
    }
    value_of[key({m, 0})] = v;
  }
  for (int m : g.outputs) {
    sg.add_output(value_of.at(key({m, 0})));
    out.outputs.push_back(m);
  }
  if (sg.iteration_shape() != g.shape) {
    throw Error(ErrorCode::kInternal, "lower_fusion_group: the inputs broadcast to " +
                                          shape_str(sg.iteration_shape()) + ", not the group's " +
                                          shape_str(g.shape));
  }
  for (size_t k = 0; k < out.outputs.size(); ++k) {
    const TensorType& want = types[out.outputs[k]][0];
    if (sg.output_type(static_cast<int>(k)) != want) {
      throw Error(ErrorCode::kInternal, "lower_fusion_group: output %" +
                                            std::to_string(out.outputs[k]) + " would be " +
                                            sg.output_type(static_cast<int>(k)).str() +
                                            ", the graph has " + want.str());
    }
  }
  return out;
}

}  // namespace kiln::compiler
