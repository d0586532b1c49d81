// The CPU code generator's interface for loop and reduction (input) fusions: a FusedSubgraph
// describes a DAG of elementwise ops over NumPy-broadcast inputs, optionally ending in
// reductions; compile_elementwise emits it with LLVM and JITs it into a FusedKernel that runs
// over the runtime's thread pool. No LLVM types appear here.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/dtype.h"
#include "kiln/elemental.h"
#include "kiln/error.h"
#include "kiln/graph.h"
#include "kiln/op_registry.h"
#include "kiln/shape.h"
#include "kiln/tensor.h"

namespace kiln::compiler::cpu {

// The emitter's elementwise primitives are kiln::Prim (kiln/elemental.h): ops reach them through
// their registered elemental forms, never by name.
using EltOp = Prim;
inline const char* elt_op_name(EltOp op) { return prim_name(op); }
inline int elt_op_arity(EltOp op) { return prim_arity(op); }

// The dtype a reduction of `dtype` values accumulates in: f64 for f32 sums and products, as in
// the reference kernels (ops/reduce.cc), so that fusing a reduction keeps its accuracy and its
// answer; `dtype` itself otherwise.
DType accumulator_dtype(ReduceKind kind, DType dtype);

// Whether generated loops load and store dtype t: every dtype they compute on (f32, f64, i32,
// i64, bool; bf16 and f16 in f32) and the 8-bit integers, which they only convert.
bool storage_dtype(DType t);

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
  struct Input {
    DType dtype = f32;
    Shape shape;
    std::optional<StridedView> map;
    Shape source;
    std::optional<Piece> piece;
    int fallback = -1;
    const Shape& buffer_shape() const { return map ? source : shape; }
  };
  struct Node {
    EltOp op;
    std::vector<int> args;
    DType dtype;                        // the result dtype
    std::optional<ReduceKind> reduce;   // set: a reduction of args[0] (op is then unused)
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
  // `to`) and checks arity and dtypes, throwing kiln::Error.
  int add_input(DType dtype, Shape shape);
  // An input read through `map` (strides over `shape`) from a buffer of shape `source`; throws
  // kiln::Error when the view reaches outside the buffer.
  int add_mapped_input(DType dtype, Shape shape, StridedView map, Shape source);
  // A piece input: `source` (row-major) placed in `piece` of `shape`, `fallback` elsewhere;
  // throws kiln::Error when the piece does not fit `shape` or does not hold `source`.
  int add_piece_input(DType dtype, Shape shape, Piece piece, Shape source, int fallback);
  int add(EltOp op, std::vector<int> args, DType to = f32);
  // A reduction of `arg` over `axes` (sorted; every reduction of a subgraph takes the same).
  int add_reduce(ReduceKind kind, int arg, std::vector<int64_t> axes);
  void add_output(int value) { outputs.push_back(value); }

  int num_values() const { return static_cast<int>(inputs.size() + nodes.size()); }
  DType dtype(int value) const;
  bool is_reduction(int value) const;
  bool has_reductions() const;
  bool has_pieces() const;
  // The broadcast of all input shapes; throws kiln::Error when they are incompatible.
  Shape iteration_shape() const;
  // The iteration shape (the shape of every output) when there are no reductions; kept for
  // loop fusions.
  Shape output_shape() const { return iteration_shape(); }
  // The iteration shape without reduce_axes: the shape of every reduction.
  Shape reduced_shape() const;
  // The shape and dtype of output `i`.
  TensorType output_type(int i) const;
  // Checks everything compile_elementwise relies on; throws kiln::Error (kInvalidArgument,
  // or kUnimplemented for a dtype the emitter does not support).
  void validate() const;
};

// Builds ops' elemental forms (kiln/elemental.h) into a subgraph. A primitive the emitter cannot
// compute for its dtypes is refused, not thrown: fusion asks before it decides.
class SubgraphBuilder final : public ElementalBuilder {
 public:
  explicit SubgraphBuilder(FusedSubgraph& sg) : sg_(sg) {}
  int apply(Prim prim, const std::vector<int>& args, DType to = f32) override;
  DType dtype(int value) const override { return sg_.dtype(value); }
  const std::string& refusal() const override { return refusal_; }
  ErrorCode refusal_code() const { return code_; }
  // `def`'s elemental form applied to values `args`: the result, or kRefused (refusal() says
  // why, and the subgraph is left as it was).
  int apply_op(const OpDef& def, const std::vector<int>& args, const Attrs& attrs);

 private:
  int refuse(std::string why, ErrorCode code = ErrorCode::kInvalidArgument);
  FusedSubgraph& sg_;
  std::string refusal_;
  ErrorCode code_ = ErrorCode::kInvalidArgument;
};

// The compiled function: computes output elements [begin, end) (row-major linear indices); for a
// reduction fusion, elements of the reduced shape, each folding its whole reduced range (and
// storing the iteration-shaped outputs it passes over).
using KernelFn = void (*)(void** inputs, void** outputs, int64_t begin, int64_t end);

class FusedKernel {
 public:
  FusedKernel() = default;

  const FusedSubgraph& subgraph() const { return subgraph_; }
  const Shape& shape() const { return shape_; }  // the iteration shape
  int64_t num_elements() const { return num_elements_; }
  // The [begin, end) domain the kernel is called over: output elements of a loop fusion, of the
  // reduced shape for a reduction fusion (each folds the reduced axes).
  int64_t parallel_size() const { return parallel_size_; }
  const TensorType& output_type(int i) const { return output_types_.at(i); }
  // Whether an output may share its buffer with an input of the same size: true for loop
  // fusions (each iteration reads and writes only its own element), false with reductions (a
  // column reduction initialises its output row before reading the inputs).
  // (A mapped or piece input reads other elements than the one written: an output may share
  // the buffer of a plain input only.)
  bool in_place_safe() const { return !subgraph_.has_reductions(); }
  KernelFn fn() const { return fn_; }
  double compile_ms() const { return compile_ms_; }  // emit + optimise + JIT
  const std::shared_ptr<void>& jit_owner() const { return jit_; }  // owns fn()'s code
  bool vectorizable_loop() const { return contiguous_; }  // the flat (non-broadcast) loop

  // Runs over the thread pool. Inputs must match the subgraph's dtypes and shapes. Outputs are
  // resized to subgraph().outputs; an output that is undefined or not of output_type(i) is
  // allocated, otherwise written in place.
  void run(const std::vector<Tensor>& inputs, std::vector<Tensor>* outputs) const;
  std::vector<Tensor> run(const std::vector<Tensor>& inputs) const;

  // Reduction kernels: `kernel_part` folds only positions [lo, hi) of the outermost reduced
  // (collapsed) dimension, of size split_size(). run() splits a reduction with few outputs and
  // much work into chunks of it (by shape only, so results do not depend on the thread count),
  // folds each into a scratch copy of the reduced outputs, unrounded (`partial` nonzero: of
  // accumulator_dtype), and combines them in chunk order before rounding.
  using PartFn = void (*)(void** inputs, void** outputs, int64_t begin, int64_t end, int64_t lo,
                          int64_t hi, int64_t partial);
  PartFn part_fn() const { return part_fn_; }
  int64_t split_size() const { return split_size_; }
  // How many chunks run() splits the reduced range into (1: none).
  int64_t split_chunks() const;

  // Internal (compile_elementwise).
  FusedKernel(FusedSubgraph sg, Shape shape, KernelFn fn, std::shared_ptr<void> jit,
              bool contiguous, double compile_ms);
  void run_split(int64_t chunks, const std::vector<void*>& in_ptrs,
                 const std::vector<void*>& out_ptrs, std::vector<Tensor>* outputs) const;
  void set_split(PartFn fn, int64_t size) {
    part_fn_ = fn;
    split_size_ = size;
  }

 private:
  FusedSubgraph subgraph_;
  Shape shape_;
  int64_t num_elements_ = 0;
  int64_t parallel_size_ = 0;
  int64_t work_per_item_ = 1;  // iteration points per parallel item
  int64_t min_grain_ = 1;      // column reductions: whole runs of columns per task
  PartFn part_fn_ = nullptr;
  int64_t split_size_ = 1;
  std::vector<TensorType> output_types_;
  KernelFn fn_ = nullptr;
  std::shared_ptr<void> jit_;  // owns the JIT'd code
  bool contiguous_ = false;
  double compile_ms_ = 0;
};

// Emits the subgraph as LLVM IR (one loop, elemental style, its rows split where pieces of
// concatenate or pad begin and end; with reductions, a row reduction
// vectorised along the reduced axes or a column reduction vectorised across the kept inner
// axis), optimises it at O3 for the host CPU and JITs it. With KILN_DUMP=<dir>, writes
// <name>_<n>.ll (before optimisation), .opt.ll (after) and .s (the host assembly) into the
// compile's dump directory, or outside a compile a new one of its own (compiler/dump.h).
// Throws kiln::Error.
FusedKernel compile_elementwise(const FusedSubgraph& sg);
// Several subgraphs in one LLVM module: one optimisation pipeline and one JIT session for all
// of them (their code lives as long as any of the returned kernels). Each kernel's
// compile_ms() is its share of the total. Throws kiln::Error if any fails.
std::vector<FusedKernel> compile_elementwise(const std::vector<FusedSubgraph>& sgs);

// True when every input is either of the full output shape or a single element: the kernel
// is then one flat loop that LLVM vectorizes. (Otherwise rows of the last dimension.)
bool is_flat_loop(const FusedSubgraph& sg, const Shape& out_shape);

// Why the emitter cannot reduce `shape` over `axes` (sorted, in range), or "": the reduced
// axes must form one run once size-1 dimensions are dropped.
std::string reduction_layout_refusal(const Shape& shape, const std::vector<int64_t>& axes);

}  // namespace kiln::compiler::cpu
