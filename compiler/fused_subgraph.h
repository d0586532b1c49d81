// The fused-loop IR, target-independent: a FusedSubgraph describes a DAG of elementwise ops
// over NumPy-broadcast inputs, optionally ending in reductions, written with the op registry's
// primitives (kiln/elemental.h); SubgraphBuilder builds ops' elemental forms into one. A backend
// compiles subgraphs into kernels (the CPU's: compiler/cpu/fused_kernel.h) and runs them as
// CompiledFusions. The IR checks its typing rules itself; which dtypes and reduction layouts a
// backend's loops handle it asks that backend's FusionTarget (compiler/passes/fusion.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "compiler/generator.h"
#include "kiln/dtype.h"
#include "kiln/elemental.h"
#include "kiln/error.h"
#include "kiln/graph.h"
#include "kiln/op_registry.h"
#include "kiln/shape.h"
#include "kiln/tensor.h"

namespace kiln::compiler {

// The IR's elementwise primitives are kiln::Prim (kiln/elemental.h): ops reach them through
// their registered elemental forms, never by name.
using EltOp = Prim;
inline const char* elt_op_name(EltOp op) { return prim_name(op); }
inline int elt_op_arity(EltOp op) { return prim_arity(op); }

// The dtype a reduction of `dtype` values accumulates in: f64 for f32 sums and products, as in
// the reference kernels (ops/reduce.cc), so that fusing a reduction keeps its accuracy and its
// answer; `dtype` itself otherwise.
DType accumulator_dtype(ReduceKind kind, DType dtype);

class FusionTarget;  // compiler/passes/fusion.h: what a backend's loops compute on

// A loop fusion. Values are numbered: inputs first (0 .. inputs.size()-1), then each node in
// order; a node's args refer to inputs or earlier nodes. Every elementwise value is evaluated
// at each index of the iteration shape (the broadcast of all input shapes), so broadcasting is
// index arithmetic on the inputs only.
//
// Input (reduction) fusion: a reduction node folds an elementwise value over `reduce_axes` of
// the iteration shape (every reduction of a subgraph folds the same axes, and they must be
// one contiguous run once size-1 dimensions are dropped); its shape is the iteration shape
// without those axes. Reductions are sinks: only outputs may use them. Outputs may mix
// iteration-shaped values (stored as they are computed) and reductions (multi-output fusion).
// Reductions accumulate in accumulator_dtype (sums and products of f32, bf16 and f16 in f64)
// and round once at the end (bf16/f16 through f32, as their reference kernels do). Row
// reductions fold in several vector lanes, reassociated relative to the reference kernel; in
// f64 that changes an f32 result only when the exact sum of n terms lies within about
// n * 2^-53 * sum(|term|) of a rounding boundary of f32.
struct FusedSubgraph {
  // An input is read at each index of `shape` (broadcast against the others like NumPy's).
  // A mapped input reads a buffer of shape `source` through the strided view `map` over
  // `shape` (a transpose, slice, reverse, broadcast or reshape folded in: kiln/elemental.h).
  // A piece input (a piece of concatenate or pad) reads its buffer only inside `piece` of
  // `shape`, element c_d = (i_d - lo_d) / step_d at map.offset + sum_d c_d * map.strides[d];
  // elsewhere it takes the value of input `fallback` (an earlier input; -1: none, never read
  // there).
  // A generated input (compiler/generator.h) reads no elements: its buffer is the scalar i64
  // seed, and its element at each index of `shape` (broadcast like any input's) is computed
  // from the seed and that element's row-major index in `shape`.
  // A gathered input (a gather: numpy.take along one axis) reads its buffer of shape `source`
  // through `map` plus a data-dependent term: at each index, v * gather->stride, where v is the
  // value of input gather->indices (an earlier i32 or i64 input) at that index. A v outside
  // [0, gather->dim) reads nothing and gives 0 (the program checks indices before the loop
  // runs, as the gather's kernel does).
  struct Gather {
    int indices = -1;
    int64_t stride = 0;  // the buffer's element stride along the gathered axis
    int64_t dim = 0;     // the gathered axis's size
    bool operator==(const Gather&) const = default;
  };
  struct Input {
    DType dtype = f32;
    Shape shape;
    std::optional<StridedView> map;
    Shape source;
    std::optional<Piece> piece;
    int fallback = -1;
    std::optional<Generator> generator;
    std::optional<Gather> gather;
    const Shape& buffer_shape() const;
    DType buffer_dtype() const { return generator ? i64 : dtype; }
  };
  struct Node {
    EltOp op;
    std::vector<int> args;
    DType dtype;                       // the result dtype
    std::optional<ReduceKind> reduce;  // set: a reduction of args[0] (op is then unused)
  };
  std::string name = "fused";
  std::vector<Input> inputs;
  std::vector<Node> nodes;
  std::vector<int> outputs;          // value ids
  std::vector<int64_t> reduce_axes;  // sorted axes of the iteration shape the reductions fold
  // bf16 and f16 arithmetic inside the loop keeps its f32 result unrounded (XLA's
  // allow_excess_precision): a 16-bit value is rounded once, where it is stored, and where an op
  // of another dtype reads it (a convert, a comparison). Off: every node's result is rounded,
  // as the reference kernels round each op's (the interpreter's bits).
  bool excess_precision = false;

  // Builders: each returns the new value's id. add() infers the result dtype (convert takes
  // `to`) and checks arity and the typing rules (operand dtypes agree, logic on bool, floating
  // ops on floating types), throwing kiln::Error; whether a backend computes those dtypes is
  // validate()'s question (or SubgraphBuilder's, given the target).
  int add_input(DType dtype, Shape shape);
  // An input read through `map` (strides over `shape`) from a buffer of shape `source`; throws
  // kiln::Error when the view reaches outside the buffer.
  int add_mapped_input(DType dtype, Shape shape, StridedView map, Shape source);
  // A piece input: `source` (row-major) placed in `piece` of `shape`, `fallback` elsewhere;
  // throws kiln::Error when the piece does not fit `shape` or does not hold `source`.
  int add_piece_input(DType dtype, Shape shape, Piece piece, Shape source, int fallback);
  // A generated input: `generator`'s values of `dtype` over `shape`, its buffer the seed.
  int add_generated_input(DType dtype, Shape shape, Generator generator);
  // A gathered input: a buffer of shape `source` read through `map` (over `shape`) plus
  // gather.stride times the value of input gather.indices; throws kiln::Error when the view
  // with any index in [0, gather.dim) reaches outside the buffer, or gather.indices is not an
  // earlier integer input.
  int add_gathered_input(DType dtype, Shape shape, StridedView map, Shape source, Gather gather);
  int add(EltOp op, std::vector<int> args, DType to = f32);
  // A reduction of `arg` over `axes` (sorted; every reduction of a subgraph takes the same).
  int add_reduce(ReduceKind kind, int arg, std::vector<int64_t> axes);
  void add_output(int value) { outputs.push_back(value); }

  int num_values() const { return static_cast<int>(inputs.size() + nodes.size()); }
  DType dtype(int value) const;
  bool is_reduction(int value) const;
  bool has_reductions() const;
  bool has_pieces() const;
  bool has_gathers() const;
  // The broadcast of all input shapes; throws kiln::Error when they are incompatible.
  Shape iteration_shape() const;
  // The iteration shape (the shape of every output) when there are no reductions; kept for
  // loop fusions.
  Shape output_shape() const { return iteration_shape(); }
  // The iteration shape without reduce_axes: the shape of every reduction.
  Shape reduced_shape() const;
  // The shape and dtype of output `i`.
  TensorType output_type(int i) const;
  // Checks everything an emitter relies on, with `target`'s answers for dtypes and reduction
  // layouts; throws kiln::Error (kInvalidArgument, or kUnimplemented for a dtype or layout the
  // target does not support).
  void validate(const FusionTarget& target) const;
};

// Builds ops' elemental forms (kiln/elemental.h) into a subgraph. A primitive `target`'s loops
// cannot compute for its dtypes is refused, not thrown: fusion asks before it decides.
class SubgraphBuilder final : public ElementalBuilder {
 public:
  SubgraphBuilder(FusedSubgraph& sg, const FusionTarget& target) : sg_(sg), target_(&target) {}
  int apply(Prim prim, const std::vector<int>& args, DType to = f32) override;
  DType dtype(int value) const override { return sg_.dtype(value); }
  const std::string& refusal() const override { return refusal_; }
  ErrorCode refusal_code() const { return code_; }
  // `def`'s elemental form applied to values `args`: the result, or kRefused (refusal() says
  // why, and the subgraph is left as it was).
  int apply_op(const OpDef& def, const std::vector<int>& args, const Attrs& attrs);

 private:
  friend struct FusedSubgraph;  // add(): the typing rules only, no target
  SubgraphBuilder(FusedSubgraph& sg, std::nullptr_t) : sg_(sg), target_(nullptr) {}
  int refuse(std::string why, ErrorCode code = ErrorCode::kInvalidArgument);
  FusedSubgraph& sg_;
  const FusionTarget* target_;
  std::string refusal_;
  ErrorCode code_ = ErrorCode::kInvalidArgument;
};

// A subgraph a backend compiled, as the executable runs it (the CPU's: cpu::FusedKernel,
// compiler/cpu/fused_kernel.h).
class CompiledFusion {
 public:
  virtual ~CompiledFusion() = default;
  virtual const FusedSubgraph& subgraph() const = 0;
  virtual const Shape& shape() const = 0;  // the iteration shape
  // Whether an output may share its buffer with a plain input of the same size.
  virtual bool in_place_safe() const = 0;
  // Inputs must match the subgraph's dtypes and shapes. Outputs are resized to
  // subgraph().outputs; an output that is undefined or not of its type is allocated, otherwise
  // written in place.
  virtual void run(const std::vector<Tensor>& inputs, std::vector<Tensor>* outputs) const = 0;
};

}  // namespace kiln::compiler
