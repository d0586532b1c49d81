// The elemental emitter's answers, the same for every target (loop_target.h).
#include "compiler/llvm_ir/loop_target.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "compiler/device_backend.h"

namespace kiln::compiler::llvm_ir {
namespace {

// Whether a loop may read a layout op's (index map's or pieces') values of dtype t.
FusionDecision layout_reads(DType t) {
  // For measuring what index maps are worth in one process (benchmarks/index_map_bench.cc).
  if (const char* off = std::getenv("KILN_FUSE_LAYOUT"); off && std::string(off) == "0")
    return FusionDecision::forbid("KILN_FUSE_LAYOUT=0");
  if (!storage_dtype(t))
    return FusionDecision::forbid(std::string("dtype ") + dtype_name(t) + " is not supported");
  return FusionDecision::allow();
}

}  // namespace

bool compute_dtype(DType t) {
  return t == f32 || t == f64 || t == i32 || t == i64 || t == bool_ || t == bf16 || t == f16;
}

// 8-bit integers are loaded, stored and converted, not computed on: enough to fuse the u8
// pixels -> f32 conversion that starts most image pipelines into the arithmetic after it.
bool storage_dtype(DType t) { return compute_dtype(t) || t == u8 || t == i8; }

std::string reduction_layout_refusal(const Shape& shape, const std::vector<int64_t>& axes) {
  // Tags of the non-unit dimensions, outer to inner: the reduced ones must be one run.
  int runs = 0;
  bool prev_reduced = false;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool r = std::find(axes.begin(), axes.end(), static_cast<int64_t>(d)) != axes.end();
    if (r && !prev_reduced) ++runs;
    prev_reduced = r;
  }
  if (runs > 1)
    return "reduced axes " + shape_str(axes) + " of " + shape_str(shape) +
           " are not adjacent (kept dimensions between them)";
  return "";
}

bool is_flat_loop(const FusedSubgraph& sg, const Shape& out_shape) {
  int64_t n = num_elements(out_shape);
  for (const FusedSubgraph::Input& in : sg.inputs) {
    if (in.piece) return false;  // the row loop splits at the pieces' bounds
    if (in.gather) return false;  // the row loop reads the indices beside it
    // A view reading its elements in order (a reshape) keeps the flat loop, at its offset;
    // any other view needs the row loop's index arithmetic (one element: read at the offset).
    if (in.map && n > 1 && (num_elements(in.shape) != n ||
                            in.map->strides != row_major_view(in.shape).strides))
      return false;
    int64_t m = num_elements(in.shape);
    if (m != 1 && m != n) return false;
  }
  return true;
}

std::string structural_key(const FusedSubgraph& sg, bool size_free_flat_loops) {
  Shape out = sg.iteration_shape();
  const bool flat = size_free_flat_loops && !sg.has_reductions() && is_flat_loop(sg, out);
  const int64_t n = num_elements(out);
  std::string key = flat ? "flat|" : "shaped" + shape_str(out) + "|";
  if (sg.has_reductions()) {
    key += "reduce";
    for (int64_t a : sg.reduce_axes) key += std::to_string(a) + ",";
    key += "|";
  }
  for (const auto& in : sg.inputs) {
    key += dtype_name(in.dtype);
    if (flat) {
      key += num_elements(in.shape) == 1 && n != 1 ? "s" : "v";
    } else {
      key += shape_str(in.shape);
    }
    // The view's strides and offset are baked into the code, flat loops' included.
    if (in.map)
      key += "@" + shape_str(in.map->strides) + "+" + std::to_string(in.map->offset) + "of" +
             shape_str(in.source);
    if (in.generator) key += "=" + in.generator->key();
    if (in.gather)  // appended: GCC 12 warns, falsely, on "literal" + std::string
      key.append("gather")
          .append(std::to_string(in.gather->indices))
          .append("*")
          .append(std::to_string(in.gather->stride))
          .append("<")
          .append(std::to_string(in.gather->dim));
    if (in.piece)
      key += "in" + shape_str(in.piece->lo) + shape_str(in.piece->hi) + shape_str(in.piece->step) +
             "else" + std::to_string(in.fallback);
    key += ",";
  }
  key += "|";
  for (const auto& node : sg.nodes) {
    key += node.reduce ? reduce_kind_name(*node.reduce) : elt_op_name(node.op);
    key += "(";
    for (int a : node.args) key += std::to_string(a) + ",";
    key += std::string(")") + dtype_name(node.dtype) + ";";
  }
  key += "|";
  for (int o : sg.outputs) key += std::to_string(o) + ",";
  if (sg.excess_precision) key += "|excess";
  return key;
}

bool flat_loop_for(const FusedSubgraph& sg, const Shape& shape) {
  return is_flat_loop(sg, shape) || shape.empty() || num_elements(shape) == 0;
}

FusionDecision LoopFusionTarget::can_emit(const detail::Node& node, const std::vector<TensorType>& inputs,
                        const std::vector<TensorType>& outputs) const {
  if (!node.def || !node.def->elemental)
    return FusionDecision::forbid("op " + node.op + " has no elemental form");
  if (outputs.size() != 1) return FusionDecision::forbid("op " + node.op + " has several outputs");
  for (const TensorType& t : inputs)
    if (!is_fully_defined(t.shape)) return FusionDecision::forbid("unknown input dimension");
  FusedSubgraph sg;
  std::vector<int> args;
  for (const TensorType& t : inputs) args.push_back(sg.add_input(t.dtype, t.shape));
  SubgraphBuilder b(sg, *this);
  int v = b.apply_op(*node.def, args, node.attrs);
  if (v == ElementalBuilder::kRefused)
    return FusionDecision::forbid("unsupported dtypes: " + b.refusal());
  if (sg.dtype(v) != outputs[0].dtype)
    return FusionDecision::forbid(std::string("emitter infers dtype ") + dtype_name(sg.dtype(v)) +
                                  ", node has " + dtype_name(outputs[0].dtype));
  if (sg.iteration_shape() != outputs[0].shape)
    return FusionDecision::forbid("output shape " + outputs[0].str() +
                                  " is not the broadcast of the inputs");
  return FusionDecision::allow();
}

FusionDecision LoopFusionTarget::can_map(const detail::Node& node, const std::vector<TensorType>& inputs,
                       const std::vector<TensorType>& outputs) const {
  if (!node.def || !node.def->index_map)
    return FusionDecision::forbid("op " + node.op + " has no index map");
  if (inputs.empty() || outputs.size() != 1)
    return FusionDecision::forbid("op " + node.op + " is not one input read into one output");
  if (!is_fully_defined(inputs[0].shape) || !is_fully_defined(outputs[0].shape))
    return FusionDecision::forbid("unknown dimension");
  return layout_reads(inputs[0].dtype);
}

FusionDecision LoopFusionTarget::can_piece(const detail::Node& node, const std::vector<TensorType>& inputs,
                         const std::vector<TensorType>& outputs) const {
  if (!node.def || !node.def->pieces)
    return FusionDecision::forbid("op " + node.op + " has no pieces");
  if (inputs.empty() || outputs.size() != 1)
    return FusionDecision::forbid("op " + node.op + " has no inputs or several outputs");
  for (const TensorType& t : inputs)
    if (!is_fully_defined(t.shape)) return FusionDecision::forbid("unknown dimension");
  if (!is_fully_defined(outputs[0].shape) || num_elements(outputs[0].shape) == 0)
    return FusionDecision::forbid("unknown dimension or no elements");
  return layout_reads(outputs[0].dtype);
}

FusionDecision LoopFusionTarget::can_gather(const detail::Node& node,
                                            const std::vector<TensorType>& inputs,
                                            const std::vector<TensorType>& outputs) const {
  if (inputs.size() != 2 || outputs.size() != 1)
    return FusionDecision::forbid("op " + node.op + " is not x and indices into one output");
  for (const TensorType& t : {inputs[0], inputs[1], outputs[0]})
    if (!is_fully_defined(t.shape)) return FusionDecision::forbid("unknown dimension");
  if (inputs[1].dtype != i32 && inputs[1].dtype != i64)
    return FusionDecision::forbid("indices of " + inputs[1].str() + " (not i32 or i64)");
  if (num_elements(outputs[0].shape) == 0)
    return FusionDecision::forbid("its output has no elements");
  return layout_reads(inputs[0].dtype);
}

FusionDecision LoopFusionTarget::can_reduce(const detail::Node& node,
                          const std::vector<TensorType>& inputs) const {
  if (!node.def || !node.def->reduction)
    return FusionDecision::forbid("op " + node.op + " is not a reduction");
  if (inputs.size() != 1)
    return FusionDecision::forbid("op " + node.op + " has " + std::to_string(inputs.size()) +
                                  " inputs");
  const TensorType& x = inputs[0];
  if (!is_fully_defined(x.shape)) return FusionDecision::forbid("unknown input dimension");
  if (!reduce_dtype(x.dtype))
    return FusionDecision::forbid(std::string("dtype ") + dtype_name(x.dtype) +
                                  " is not supported");
  if (!node.attrs.has("axes")) return FusionDecision::forbid("no axes attribute");
  const std::vector<int64_t>& axes = node.attrs.get_ints("axes");
  for (size_t i = 0; i < axes.size(); ++i)
    if (axes[i] < 0 || axes[i] >= static_cast<int64_t>(x.shape.size()) ||
        (i > 0 && axes[i] <= axes[i - 1]))
      return FusionDecision::forbid("axes " + shape_str(axes) + " are not sorted axes of " +
                                    x.str());
  std::string why = reduction_layout_refusal(x.shape, axes);
  return why.empty() ? FusionDecision::allow() : FusionDecision::forbid(why);
}

namespace {

class DeviceFusionTarget final : public LoopFusionTarget {
 public:
  // The dtypes the device's matmuls take.
  bool epilogue_dtype(DType t) const override { return t == f32 || t == f16 || t == bf16; }
  std::string fused_dot_layout_refusal(const Shape& a, const Shape& b,
                                       const Attrs& attrs) const override {
    // Only the layout is asked here: the dtype is the output's, which epilogue_dtype has taken,
    // and a dimension may be unknown until the program is compiled for its feeds (the batch).
    auto known = [](Shape s) {
      for (int64_t& d : s)
        if (d == kUnknownDim) d = 1;
      return s;
    };
    std::string why;
    device_dot_geometry({f32, known(a)}, {f32, known(b)}, attrs, &why);
    return why;
  }
  // None: cuBLASLt documents its relu epilogue as max(x, 0), which may turn a NaN into 0 where
  // Kiln's relu keeps it (select(x <= 0, 0, x)); until a GPU run shows it keeps NaN, relu
  // stays a loop (DeviceDot::relu and the plugin take it).
  bool epilogue_activation(std::string_view, Activation) const override { return false; }
  std::string epilogue_bias_refusal(std::string_view producer, const TensorType& bias,
                                    const TensorType& out) const override {
    if (producer != "dot")
      return "the device's convolutions take no epilogue (cuDNN's fused convolution is not used)";
    if (out.shape.empty() || num_elements(bias.shape) != out.shape.back())
      return "the device's matmul adds a bias of " +
             std::to_string(out.shape.empty() ? 1 : out.shape.back()) +
             " elements along the output's last dimension, not " + bias.str();
    return "";
  }
  bool conv_pool_dtype(DType) const override { return false; }
  // A device's pooling kernels (cuDNN's) take no relu mask: the relu's gradient stays a loop.
  bool masked_max_grad() const override { return false; }
  bool copies_layout_groups() const override { return true; }
  bool loops_lone_reductions() const override { return true; }
  bool arg_reductions_as_loops() const override { return true; }
};

}  // namespace

const FusionTarget& device_fusion_target() {
  static const DeviceFusionTarget target;
  return target;
}

}  // namespace kiln::compiler::llvm_ir
