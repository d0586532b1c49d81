// The CPU code generator's interface for loop fusions: a FusedSubgraph describes a DAG of
// elementwise ops over NumPy-broadcast inputs; compile_elementwise emits it with LLVM and JITs
// it into a FusedKernel that runs over the runtime's thread pool. No LLVM types appear here.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/dtype.h"
#include "kiln/shape.h"
#include "kiln/tensor.h"

namespace kiln::compiler::cpu {

// The elementwise primitives the emitter knows. Names (elt_op_name) are Kiln's op names.
enum class EltOp : uint8_t {
  // unary
  kNeg, kAbs, kExp, kLog, kLog1p, kExpm1, kSqrt, kRsqrt, kTanh, kLogistic, kSin, kCos, kErf,
  kSign, kFloor, kCeil, kRound, kConvert,
  // binary
  kAdd, kSub, kMul, kDiv, kPow, kMax, kMin,
  kEq, kNe, kLt, kLe, kGt, kGe,  // produce bool
  // ternary
  kSelect,  // select(pred, on_true, on_false)
  kClamp,   // clamp(x, low, high) = min(max(x, low), high)
};

const char* elt_op_name(EltOp op);                           // "neg", "max", "select", ...
std::optional<EltOp> elt_op_from_name(std::string_view name);  // the inverse
int elt_op_arity(EltOp op);

// A loop fusion. Values are numbered: inputs first (0 .. inputs.size()-1), then each node in
// order; a node's args refer to inputs or earlier nodes. Every value is evaluated at each index
// of the output shape (the broadcast of all input shapes), so broadcasting is index arithmetic
// on the inputs only. All outputs have the output shape.
struct FusedSubgraph {
  struct Input {
    DType dtype = f32;
    Shape shape;
  };
  struct Node {
    EltOp op;
    std::vector<int> args;
    DType dtype;  // the result dtype
  };
  std::string name = "fused";
  std::vector<Input> inputs;
  std::vector<Node> nodes;
  std::vector<int> outputs;  // value ids

  // Builders: each returns the new value's id. add() infers the result dtype (convert takes
  // `to`) and checks arity and dtypes, throwing kiln::Error.
  int add_input(DType dtype, Shape shape);
  int add(EltOp op, std::vector<int> args, DType to = f32);
  void add_output(int value) { outputs.push_back(value); }

  int num_values() const { return static_cast<int>(inputs.size() + nodes.size()); }
  DType dtype(int value) const;
  // The broadcast of all input shapes; throws kiln::Error when they are incompatible.
  Shape output_shape() const;
  // Checks everything compile_elementwise relies on; throws kiln::Error (kInvalidArgument,
  // or kUnimplemented for a dtype the emitter does not support).
  void validate() const;
};

// The compiled function: computes output elements [begin, end) (row-major linear indices).
using KernelFn = void (*)(void** inputs, void** outputs, int64_t begin, int64_t end);

class FusedKernel {
 public:
  FusedKernel() = default;

  const FusedSubgraph& subgraph() const { return subgraph_; }
  const Shape& shape() const { return shape_; }
  int64_t num_elements() const { return num_elements_; }
  KernelFn fn() const { return fn_; }
  double compile_ms() const { return compile_ms_; }  // emit + optimise + JIT
  const std::shared_ptr<void>& jit_owner() const { return jit_; }  // owns fn()'s code
  bool vectorizable_loop() const { return contiguous_; }  // the flat (non-broadcast) loop

  // Runs over the thread pool. Inputs must match the subgraph's dtypes and shapes. Outputs are
  // resized to subgraph().outputs; an output that is undefined or of the wrong type is
  // allocated, otherwise written in place.
  void run(const std::vector<Tensor>& inputs, std::vector<Tensor>* outputs) const;
  std::vector<Tensor> run(const std::vector<Tensor>& inputs) const;

  // Internal (compile_elementwise).
  FusedKernel(FusedSubgraph sg, Shape shape, KernelFn fn, std::shared_ptr<void> jit,
              bool contiguous, double compile_ms);

 private:
  FusedSubgraph subgraph_;
  Shape shape_;
  int64_t num_elements_ = 0;
  KernelFn fn_ = nullptr;
  std::shared_ptr<void> jit_;  // owns the JIT'd code
  bool contiguous_ = false;
  double compile_ms_ = 0;
};

// Emits the subgraph as LLVM IR (one loop, elemental style), optimises it at O3 for the host
// CPU and JITs it. With KILN_DUMP=<dir>, writes <dir>/<name>_<n>.ll (before optimisation),
// .opt.ll (after) and .s (the host assembly). Throws kiln::Error.
FusedKernel compile_elementwise(const FusedSubgraph& sg);

// True when every input is either of the full output shape or a single element: the kernel
// is then one flat loop that LLVM vectorizes. (Otherwise rows of the last dimension.)
bool is_flat_loop(const FusedSubgraph& sg, const Shape& out_shape);

}  // namespace kiln::compiler::cpu
