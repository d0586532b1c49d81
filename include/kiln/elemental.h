// Elemental forms: how the compiler computes one element of an op's output from its inputs'
// elements at the same index, written as primitives. An op registered with one
// (OpBuilder::elemental) fuses into the loops the compiler generates; a backend emits each
// primitive once. A reduction op names its fold instead (OpBuilder::reduction), and a layout
// op its index map (OpBuilder::index_map).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/attrs.h"
#include "kiln/dtype.h"
#include "kiln/shape.h"

namespace kiln {

// The scalar primitives, as X(enumerator, name, arity). Adding one means a line here and its
// case in the elemental emitter (compiler/llvm_ir/elemental_emitter.cc, emit_prim).
#define KILN_ELEMENTAL_PRIMS(X)                                                            \
  X(kNeg, "neg", 1) X(kAbs, "abs", 1) X(kExp, "exp", 1) X(kLog, "log", 1)                  \
  X(kLog1p, "log1p", 1) X(kExpm1, "expm1", 1) X(kSqrt, "sqrt", 1) X(kRsqrt, "rsqrt", 1)    \
  X(kTanh, "tanh", 1) X(kLogistic, "logistic", 1) X(kSin, "sin", 1) X(kCos, "cos", 1)      \
  X(kTan, "tan", 1) X(kErf, "erf", 1) X(kSign, "sign", 1) X(kFloor, "floor", 1)            \
  X(kCeil, "ceil", 1) X(kRound, "round", 1) X(kIsFinite, "is_finite", 1)                   \
  X(kNot, "logical_not", 1) X(kConvert, "convert", 1)                                      \
  X(kAdd, "add", 2) X(kSub, "sub", 2) X(kMul, "mul", 2) X(kDiv, "div", 2) X(kRem, "rem", 2) \
  X(kPow, "pow", 2) X(kAtan2, "atan2", 2) X(kMax, "max", 2) X(kMin, "min", 2)              \
  X(kAnd, "logical_and", 2) X(kOr, "logical_or", 2)                                        \
  X(kEq, "eq", 2) X(kNe, "ne", 2) X(kLt, "lt", 2) X(kLe, "le", 2) X(kGt, "gt", 2)          \
  X(kGe, "ge", 2)                                                                          \
  X(kSelect, "select", 3) X(kClamp, "clamp", 3)

enum class Prim : uint8_t {
#define KILN_PRIM_ENUMERATOR_(e, name, arity) e,
  KILN_ELEMENTAL_PRIMS(KILN_PRIM_ENUMERATOR_)
#undef KILN_PRIM_ENUMERATOR_
};

// Every primitive, in declaration order.
const std::vector<Prim>& all_prims();
const char* prim_name(Prim prim);  // "neg", "select", ...
int prim_arity(Prim prim);
std::optional<Prim> prim_from_name(std::string_view name);  // for tests and tools

// The folds a reduction op can name.
enum class ReduceKind : uint8_t { kSum, kProd, kMax, kMin };
const char* reduce_kind_name(ReduceKind kind);  // the op it is: "reduce_sum", ...

// What an elemental form builds on. Values are ints: the op's inputs, then what apply returns.
class ElementalBuilder {
 public:
  // A value the backend could not compute; apply() on it gives kRefused again.
  static constexpr int kRefused = -1;
  // The value of `prim` on `args` (convert: to `to`), or kRefused when the backend cannot
  // compute it for these dtypes (refusal() says why).
  virtual int apply(Prim prim, const std::vector<int>& args, DType to = DType::f32) = 0;
  virtual DType dtype(int value) const = 0;
  virtual const std::string& refusal() const = 0;

 protected:
  ~ElementalBuilder() = default;
};

// An op's elemental form: its output's value from its inputs' values `args` and its attributes,
// or ElementalBuilder::kRefused.
using ElementalFn =
    std::function<int(ElementalBuilder& b, const std::vector<int>& args, const Attrs& attrs)>;

// A strided view of a buffer: element (i_0, ..., i_n) of a value is buffer element
// offset + sum_d i_d * strides[d]. Strides are in elements; 0 broadcasts, negative reverses.
struct StridedView {
  std::vector<int64_t> strides;
  int64_t offset = 0;
  bool operator==(const StridedView&) const = default;
};

// The row-major view of a buffer of `shape` (a dimension of size 1 gets stride 0).
StridedView row_major_view(const Shape& shape);

// A layout op's index map: the view of its output (of `out_shape`), given the view `x` through
// which its input (of `x_shape`) is read; nullopt where the output is no strided view of x's
// buffer (a reshape of a transposed view). The op's reference kernel copies through the same
// map, and the compiler folds it into the loops that read the output (kiln/op_registry.h).
using IndexMapFn = std::function<std::optional<StridedView>(
    const StridedView& x, const Shape& x_shape, const Shape& out_shape, const Attrs& attrs)>;

// Where a piecewise layout op (concatenate, pad) reads one input: the output elements i with
// lo_d <= i_d < hi_d and (i_d - lo_d) % step_d == 0 in every dimension d are element
// c_d = (i_d - lo_d) / step_d of that input.
struct Piece {
  std::vector<int64_t> lo, hi, step;
  bool operator==(const Piece&) const = default;
};

// A piecewise layout op's map: per input, its piece of the output, or nullopt for the one
// input (a scalar) that fills every element no piece covers. Pieces do not overlap. The op's
// reference kernel copies through the same pieces (kiln/op_registry.h), and the compiler reads
// them, choosing the piece per element, in the loops that read the output.
using PiecesFn = std::function<std::vector<std::optional<Piece>>(
    const std::vector<Shape>& in_shapes, const Shape& out_shape, const Attrs& attrs)>;

}  // namespace kiln
