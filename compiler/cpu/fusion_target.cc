// The CPU fusion target: a node can be emitted when its elemental form builds into a
// FusedSubgraph for its concrete dtypes; a reduction when the emitter folds its dtype and axes.
#include "compiler/cpu/fusion_target.h"

#include <cstdlib>
#include <string>

#include "compiler/cpu/fused_dot.h"
#include "compiler/cpu/fused_kernel.h"

namespace kiln::compiler::cpu {
namespace {

// Whether a loop may read a layout op's (index map's or pieces') values of dtype t.
FusionDecision layout_reads(DType t) {
  // For measuring what index maps are worth in one process (benchmarks/index_map_bench.cc).
  if (const char* off = std::getenv("KILN_FUSE_LAYOUT"); off && std::string(off) == "0")
    return FusionDecision::forbid("KILN_FUSE_LAYOUT=0");
  if (!cpu::storage_dtype(t))
    return FusionDecision::forbid(std::string("dtype ") + dtype_name(t) + " is not supported");
  return FusionDecision::allow();
}

class CpuFusionTarget final : public FusionTarget {
 public:
  FusionDecision can_emit(const detail::Node& node, const std::vector<TensorType>& inputs,
                          const std::vector<TensorType>& outputs) const override {
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

  FusionDecision can_map(const detail::Node& node, const std::vector<TensorType>& inputs,
                         const std::vector<TensorType>& outputs) const override {
    if (!node.def || !node.def->index_map)
      return FusionDecision::forbid("op " + node.op + " has no index map");
    if (inputs.empty() || outputs.size() != 1)
      return FusionDecision::forbid("op " + node.op + " is not one input read into one output");
    if (!is_fully_defined(inputs[0].shape) || !is_fully_defined(outputs[0].shape))
      return FusionDecision::forbid("unknown dimension");
    return layout_reads(inputs[0].dtype);
  }

  FusionDecision can_piece(const detail::Node& node, const std::vector<TensorType>& inputs,
                           const std::vector<TensorType>& outputs) const override {
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

  FusionDecision can_reduce(const detail::Node& node,
                            const std::vector<TensorType>& inputs) const override {
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

  bool compute_dtype(DType t) const override { return cpu::compute_dtype(t); }
  bool storage_dtype(DType t) const override { return cpu::storage_dtype(t); }
  bool narrow_dtype(DType t) const override { return t == bf16 || t == f16; }
  bool reduce_dtype(DType t) const override {
    return t == f32 || t == f64 || t == i32 || t == i64 || narrow_dtype(t);
  }
  std::string reduction_layout_refusal(const Shape& shape,
                                       const std::vector<int64_t>& axes) const override {
    return cpu::reduction_layout_refusal(shape, axes);
  }

  // fused_dot and fused_conv take the floating types (bf16 and f16 with the bias and
  // activation applied to the f32 sums before their one rounding: compiler/cpu/fused_dot.h).
  bool epilogue_dtype(DType t) const override { return is_floating(t); }
  std::string fused_dot_layout_refusal(const Shape& a, const Shape& b,
                                       const Attrs& attrs) const override {
    return compiler::fused_dot_layout_refusal(a, b, attrs);
  }
  // The pool is computed image by image right after the epilogue (compiler/cpu/fused_conv.h).
  bool conv_pool_dtype(DType t) const override { return t == f32 || t == f64; }
};

}  // namespace

const FusionTarget& fusion_target() {
  static const CpuFusionTarget target;
  return target;
}

}  // namespace kiln::compiler::cpu
