// The fusion pass: groups producer-consumer chains of elementwise ops, and reductions with the
// elementwise producers they fold, into acyclic loop (and input) fusions for concrete shapes;
// layout ops (transpose, slice, reverse, broadcast, reshape) join as index maps on the loop's
// reads of a buffer, and piecewise layout ops (concatenate, pad) as reads of several buffers,
// each inside its piece.
// Each decision is a FusionDecision that carries its reason; what a backend can emit is asked
// of a FusionTarget, so this pass knows no backend. The pass marks nodes, it does not rewrite
// them: the dumps show each node's group, and lowering (compiler/lowering.h) reads the plan.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "compiler/fused_ops.h"
#include "compiler/passes/pass.h"
#include "kiln/graph.h"
#include "src/core/tensor_impl.h"

namespace kiln::compiler {

// Whether a fusion may happen, and if not, why (as XLA's FusionDecision).
class FusionDecision {
 public:
  static FusionDecision allow() { return FusionDecision(""); }
  static FusionDecision forbid(std::string why) { return FusionDecision(std::move(why)); }
  bool can_fuse() const { return why_.empty(); }
  explicit operator bool() const { return can_fuse(); }
  const std::string& reason() const { return why_; }

 private:
  explicit FusionDecision(std::string why) : why_(std::move(why)) {}
  std::string why_;
};

// What the pass asks of the backend it fuses for (the CPU's: compiler/cpu/fusion_target.h).
class FusionTarget {
 public:
  virtual ~FusionTarget() = default;
  // Whether `node` (an op with an elemental form, concrete `inputs` and `outputs`) can be
  // computed inside a generated loop.
  virtual FusionDecision can_emit(const detail::Node& node, const std::vector<TensorType>& inputs,
                                  const std::vector<TensorType>& outputs) const = 0;
  // Whether reduction `node` (an op with a reduction fold, concrete `inputs`) can be folded by
  // a generated loop.
  virtual FusionDecision can_reduce(const detail::Node& node,
                                    const std::vector<TensorType>& inputs) const = 0;
  // Whether a generated loop can read layout op `node`'s output through its index map.
  virtual FusionDecision can_map(const detail::Node& node, const std::vector<TensorType>& inputs,
                                 const std::vector<TensorType>& outputs) const = 0;
  // Whether a generated loop can read piecewise layout op `node`'s output from its inputs'
  // buffers, each inside its piece.
  virtual FusionDecision can_piece(const detail::Node& node,
                                   const std::vector<TensorType>& inputs,
                                   const std::vector<TensorType>& outputs) const = 0;

  // Whether a generated loop can compute generator `node`'s output (compiler/generator.h,
  // concrete `outputs`) from its seed and the element index. By default: when the op is a
  // generator for that dtype and the loops store it.
  virtual FusionDecision can_generate(const detail::Node& node,
                                      const std::vector<TensorType>& outputs) const;

  // Whether a generated loop can read gather `node`'s output (concrete `inputs` and
  // `outputs`) from x's buffer at the rows its indices select (a gathered input,
  // compiler/fused_subgraph.h). By default no. A gather no other computation joins is left to
  // its kernel, which copies whole rows, unless copies_layout_groups().
  virtual FusionDecision can_gather(const detail::Node& node, const std::vector<TensorType>& inputs,
                                    const std::vector<TensorType>& outputs) const;

  // What generated loops compute on: asked by SubgraphBuilder while it builds a FusedSubgraph
  // (compiler/fused_subgraph.h) and by FusedSubgraph::validate, which know no backend.
  // Dtypes a loop computes on (arithmetic, comparisons, logic).
  virtual bool compute_dtype(DType t) const = 0;
  // Dtypes a loop loads, stores and converts (at least the compute dtypes).
  virtual bool storage_dtype(DType t) const = 0;
  // Dtypes a loop computes in a wider type and rounds back to their own (bf16 and f16 in f32
  // on CPU): a convert into one from a value wider than that type would round twice, so the
  // builder refuses it.
  virtual bool narrow_dtype(DType t) const = 0;
  // Dtypes a loop folds in a reduction.
  virtual bool reduce_dtype(DType t) const = 0;
  // Why a loop cannot fold `shape` over `axes` (sorted, in range), or "".
  virtual std::string reduction_layout_refusal(const Shape& shape,
                                               const std::vector<int64_t>& axes) const = 0;

  // The fused ops the epilogue fusion pass may create (compiler/fused_ops.h).
  // Output dtypes the backend's fused dot and convolution take.
  virtual bool epilogue_dtype(DType t) const = 0;
  // Why the backend's fused dot cannot take a dot of these operand shapes and attributes
  // without copying its operands, or "".
  virtual std::string fused_dot_layout_refusal(const Shape& a, const Shape& b,
                                               const Attrs& attrs) const = 0;
  // Whether the backend's fused op for `producer` ("dot" or "convolution") applies `act` in its
  // epilogue; when it does not, the pass fuses the bias alone (where the producer takes it)
  // and leaves the activation to loop fusion.
  virtual bool epilogue_activation(std::string_view producer, Activation act) const {
    (void)producer, (void)act;
    return true;
  }
  // Why the backend's fused op for `producer` cannot add `bias` to an output of type `out`,
  // beyond bias_refusal's rules (compiler/fused_ops.h), or "".
  virtual std::string epilogue_bias_refusal(std::string_view producer, const TensorType& bias,
                                            const TensorType& out) const {
    (void)producer, (void)bias, (void)out;
    return "";
  }
  // Output dtypes for which a fused convolution also computes its max pool (fused_conv_pool).
  virtual bool conv_pool_dtype(DType t) const = 0;
  // Whether a group of layout ops alone (a loop that computes nothing) is kept as a copy loop
  // rather than left to the ops' kernels, which alias or copy on the host: a device's, where a
  // host kernel means copying the value across and back.
  virtual bool copies_layout_groups() const { return false; }
  // Whether a reduction with no fusible producer gets a loop of its own rather than its
  // reference kernel where its input is a feed or a dot's, convolution's or pooling's output
  // (which a device computes; another kernel's output is on the host): a device's, as above.
  virtual bool loops_lone_reductions() const { return false; }
  // Whether argmax and argmin become two reductions a loop folds (ArgReductions,
  // compiler/passes/arg_reductions.h) rather than their reference kernels: a device's, as above.
  virtual bool arg_reductions_as_loops() const { return false; }
  // Whether the backend runs a max pool's gradient with "relu_mask" (a relu's gradient folded
  // in by the algebraic simplifier) as well as without it.
  virtual bool masked_max_grad() const { return true; }
};

// The fusion target of the host's backend (the CPU's), for passes built without one. Defined
// by compiler/executable.cc, the one file of the compiler that names a backend.
const FusionTarget& host_fusion_target();

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

// A layout member of a group is read, not computed: through its index map, composed down a
// chain of layout members, from a buffer the group does not compute.
struct LayoutRead {
  ValueRef buffer;   // the value read (from outside the group)
  StridedView view;  // over the layout member's output shape, into `buffer`
};
// How layout op `id` reads when it is in group `group` (group_of gives every node's group), or
// nullopt when its index maps do not compose into one strided view.
std::optional<LayoutRead> layout_read(int id, int group, const std::vector<int>& group_of,
                                      const std::vector<detail::Node>& nodes,
                                      const std::vector<std::vector<TensorType>>& types);

// Plans fusion over `nodes` (a topologically ordered graph), where `types[id]` are node id's
// concrete output types, `needed[id]` says whether a node is computed at all, and `fetched`
// lists the values the caller asks for (their producers become group outputs).
FusionPlan plan_fusion(const FusionTarget& target, const std::vector<detail::Node>& nodes,
                       const std::vector<std::vector<TensorType>>& types,
                       const std::vector<bool>& needed, const std::vector<ValueRef>& fetched);

// The pass: plans over a module whose types are concrete (Module::types, Module::needed), and
// records each node's group in Module::fusion_group. Returns whether it formed any group.
class Fusion : public Pass {
 public:
  explicit Fusion(const FusionTarget& target) : target_(target) {}
  std::string name() const override { return "fusion"; }
  bool run(Module& module) override;
  const FusionPlan& plan() const { return plan_; }

 private:
  const FusionTarget& target_;
  FusionPlan plan_;
};

}  // namespace kiln::compiler
