// The fused-loop IR (compiler/fused_subgraph.h).
#include "compiler/fused_subgraph.h"

#include <algorithm>
#include <limits>
#include <type_traits>
#include <utility>

#include "compiler/passes/fusion.h"
#include "kiln/error.h"

namespace kiln::compiler {
namespace {

bool is_float_only(EltOp op) {
  switch (op) {
    case EltOp::kExp: case EltOp::kLog: case EltOp::kLog1p: case EltOp::kExpm1:
    case EltOp::kSqrt: case EltOp::kRsqrt: case EltOp::kTanh: case EltOp::kLogistic:
    case EltOp::kSin: case EltOp::kCos: case EltOp::kTan: case EltOp::kErf:
    case EltOp::kFloor: case EltOp::kCeil: case EltOp::kRound: case EltOp::kPow:
    case EltOp::kAtan2: case EltOp::kIsFinite:
      return true;
    default:
      return false;
  }
}

bool is_compare(EltOp op) { return op >= EltOp::kEq && op <= EltOp::kGe; }
bool is_logical(EltOp op) { return op == EltOp::kNot || op == EltOp::kAnd || op == EltOp::kOr; }

[[noreturn]] void fail(const FusedSubgraph& sg, const std::string& msg,
                       ErrorCode code = ErrorCode::kInvalidArgument) {
  throw Error(code, "fused subgraph (" + sg.name + "): " + msg);
}

// Why `op` cannot take operands of dtypes `ts` (convert: to `to`), or "" with the result's
// dtype in *out. With a target, also what its loops compute on (storage, compute and narrow
// dtypes); without one, the typing rules only.
std::string dtype_refusal(EltOp op, const std::vector<DType>& ts, DType to, DType* out,
                          ErrorCode* code, const FusionTarget* target) {
  const std::string name = elt_op_name(op);
  *code = ErrorCode::kUnimplemented;
  for (DType t : ts) {
    if (target && !(op == EltOp::kConvert ? target->storage_dtype(t) : target->compute_dtype(t)))
      return name + ": dtype " + dtype_name(t) + " is not supported";
  }
  if (op == EltOp::kConvert) {
    if (target && !target->storage_dtype(to))
      return std::string("convert: dtype ") + dtype_name(to) + " is not supported";
    // The reference kernel rounds an f64, i32 or i64 to bf16/f16 once; through the wider type
    // the loop computes a narrow dtype in, it would round twice.
    if (target && target->narrow_dtype(to) && (ts[0] == f64 || ts[0] == i32 || ts[0] == i64))
      return std::string("convert: ") + dtype_name(ts[0]) + " to " + dtype_name(to) +
             " rounds once from the wide value (left to the kernel)";
    *out = to;
    return "";
  }
  *code = ErrorCode::kInvalidArgument;
  if (op == EltOp::kSelect) {
    if (ts[0] != bool_) return std::string("select: pred must be bool, got ") + dtype_name(ts[0]);
    if (ts[1] != ts[2])
      return std::string("select: dtype mismatch: ") + dtype_name(ts[1]) + " vs " + dtype_name(ts[2]);
    *out = ts[1];
    return "";
  }
  for (DType t : ts) {
    if (t != ts[0])
      return name + ": dtype mismatch: " + dtype_name(ts[0]) + " vs " + dtype_name(t);
  }
  const DType t = ts[0];
  if (is_logical(op) != (t == bool_))
    return name + (t == bool_ ? ": bool operands are not supported" : ": needs bool operands, got ") +
           (t == bool_ ? "" : dtype_name(t));
  if (is_float_only(op) && !is_floating(t)) {
    *code = ErrorCode::kUnimplemented;
    return name + ": needs a floating-point operand, got " + dtype_name(t);
  }
  *out = is_compare(op) || op == EltOp::kIsFinite ? bool_ : t;
  return "";
}

}  // namespace

DType accumulator_dtype(ReduceKind kind, DType dtype) {
  const bool folds_products = kind == ReduceKind::kSum || kind == ReduceKind::kProd;
  const bool narrow = dtype == bf16 || dtype == f16;
  if (folds_products && (dtype == f32 || narrow)) return f64;
  return narrow ? f32 : dtype;
}


int FusedSubgraph::add_input(DType dtype, Shape shape) {
  if (!nodes.empty()) fail(*this, "inputs must be added before nodes");
  for (int64_t d : shape)
    if (d < 0) fail(*this, "input shape " + shape_str(shape) + " is not fully defined");
  Input in;
  in.dtype = dtype;
  in.shape = std::move(shape);
  inputs.push_back(std::move(in));
  return static_cast<int>(inputs.size()) - 1;
}

namespace {

// Throws unless `map` over `shape` reaches only elements of a buffer of `source`.
void check_reach(const FusedSubgraph& sg, const Shape& shape, const StridedView& map,
                 const Shape& source) {
  if (map.strides.size() != shape.size())
    fail(sg,
         "index map " + shape_str(map.strides) + " does not fit input shape " + shape_str(shape));
  if (!is_fully_defined(source))
    fail(sg, "source shape " + shape_str(source) + " is not fully defined");
  // The lowest and highest elements the view reaches must lie in the buffer.
  int64_t lo = map.offset, hi = map.offset;
  bool empty = false;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 0) empty = true;
    const int64_t reach = (shape[d] - 1) * map.strides[d];
    (reach < 0 ? lo : hi) += reach;
  }
  if (!empty && (lo < 0 || hi >= num_elements(source)))
    fail(sg, "index map reaches elements [" + std::to_string(lo) + ", " + std::to_string(hi) +
                 "] of a buffer of " + shape_str(source));
}

}  // namespace

int FusedSubgraph::add_mapped_input(DType dtype, Shape shape, StridedView map, Shape source) {
  check_reach(*this, shape, map, source);
  int id = add_input(dtype, std::move(shape));
  inputs.back().map = std::move(map);
  inputs.back().source = std::move(source);
  return id;
}

int FusedSubgraph::add_piece_input(DType dtype, Shape shape, Piece piece, Shape source,
                                   int fallback) {
  const size_t r = shape.size();
  if (piece.lo.size() != r || piece.hi.size() != r || piece.step.size() != r || source.size() != r)
    fail(*this, "piece lo " + shape_str(piece.lo) + ", hi " + shape_str(piece.hi) + ", step " +
                    shape_str(piece.step) + " of " + shape_str(source) + " does not fit shape " +
                    shape_str(shape));
  if (!is_fully_defined(source)) fail(*this, "source shape " + shape_str(source) + " is not fully defined");
  if (fallback < -1 || fallback >= static_cast<int>(inputs.size()))
    fail(*this, "piece fallback " + std::to_string(fallback) + " is not an earlier input");
  for (size_t d = 0; d < r; ++d) {
    const int64_t span = piece.hi[d] - piece.lo[d];
    if (piece.lo[d] < 0 || span < 0 || piece.hi[d] > shape[d] || piece.step[d] < 1 ||
        (span + piece.step[d] - 1) / piece.step[d] != source[d])
      fail(*this, "piece lo " + shape_str(piece.lo) + ", hi " + shape_str(piece.hi) +
                      ", step " + shape_str(piece.step) + " of shape " + shape_str(shape) +
                      " does not hold a buffer of " + shape_str(source));
  }
  StridedView view = row_major_view(source);
  int id = add_input(dtype, std::move(shape));
  inputs.back().map = std::move(view);
  inputs.back().source = std::move(source);
  inputs.back().piece = std::move(piece);
  inputs.back().fallback = fallback;
  return id;
}

int FusedSubgraph::add_generated_input(DType dtype, Shape shape, Generator generator) {
  if (generator.kind == Generator::Kind::kUniform && dtype != f32 && dtype != f64)
    fail(*this, std::string("a generated uniform input must be f32 or f64, got ") +
                    dtype_name(dtype));
  int id = add_input(dtype, std::move(shape));
  inputs.back().generator = std::move(generator);
  return id;
}

int FusedSubgraph::add_gathered_input(DType dtype, Shape shape, StridedView map, Shape source,
                                      Gather gather) {
  const int k = static_cast<int>(inputs.size());
  if (gather.indices < 0 || gather.indices >= k ||
      (inputs[gather.indices].dtype != i32 && inputs[gather.indices].dtype != i64))
    fail(*this, "gathered input " + std::to_string(k) + " takes its indices from value " +
                    std::to_string(gather.indices) + ", not an earlier i32 or i64 input");
  if (gather.dim < 0 || gather.stride < 0)
    fail(*this, "gathered input " + std::to_string(k) + " has axis size " +
                    std::to_string(gather.dim) + " and stride " + std::to_string(gather.stride));
  // The view at the largest index must lie in the buffer too (add_mapped_input checks index 0).
  StridedView last = map;
  last.offset += std::max<int64_t>(gather.dim - 1, 0) * gather.stride;
  if (gather.dim > 0) check_reach(*this, shape, last, source);
  int id = add_mapped_input(dtype, std::move(shape), std::move(map), std::move(source));
  inputs.back().gather = gather;
  return id;
}

const Shape& FusedSubgraph::Input::buffer_shape() const {
  static const Shape kScalar;
  return generator ? kScalar : map ? source : shape;
}

bool FusedSubgraph::has_gathers() const {
  for (const Input& in : inputs)
    if (in.gather) return true;
  return false;
}

bool FusedSubgraph::has_pieces() const {
  for (const Input& in : inputs)
    if (in.piece) return true;
  return false;
}

DType FusedSubgraph::dtype(int value) const {
  if (value < 0 || value >= num_values())
    fail(*this, "value " + std::to_string(value) + " out of range [0, " +
                    std::to_string(num_values()) + ")");
  int n_in = static_cast<int>(inputs.size());
  return value < n_in ? inputs[value].dtype : nodes[value - n_in].dtype;
}

int SubgraphBuilder::refuse(std::string why, ErrorCode code) {
  refusal_ = std::move(why);
  code_ = code;
  return kRefused;
}

int SubgraphBuilder::apply(Prim prim, const std::vector<int>& args, DType to) {
  const std::string name = elt_op_name(prim);
  if (static_cast<int>(args.size()) != elt_op_arity(prim))
    return refuse(name + " takes " + std::to_string(elt_op_arity(prim)) + " args, got " +
                  std::to_string(args.size()));
  std::vector<DType> ts;
  for (int a : args) {
    if (a == kRefused) return kRefused;  // refusal_ already says why
    if (a < 0 || a >= sg_.num_values())
      return refuse(name + ": value " + std::to_string(a) + " does not exist");
    if (sg_.is_reduction(a))
      return refuse(name + ": value " + std::to_string(a) +
                    " is a reduction; only outputs may use reductions");
    ts.push_back(sg_.dtype(a));
  }
  DType t = f32;
  ErrorCode code;
  if (std::string why = dtype_refusal(prim, ts, to, &t, &code, target_); !why.empty())
    return refuse(std::move(why), code);
  sg_.nodes.push_back({prim, args, t, std::nullopt});
  return sg_.num_values() - 1;
}

int SubgraphBuilder::apply_op(const OpDef& def, const std::vector<int>& args, const Attrs& attrs) {
  if (!def.elemental) return refuse("op " + def.name + " has no elemental form");
  const size_t before = sg_.nodes.size();
  int v = def.elemental(*this, args, attrs);
  if (v == kRefused || v < 0 || v >= sg_.num_values()) {
    if (v != kRefused) refuse("op " + def.name + "'s elemental form returned no value");
    sg_.nodes.resize(before);
  }
  return v < 0 || v >= sg_.num_values() ? kRefused : v;
}

int FusedSubgraph::add(EltOp op, std::vector<int> args, DType to) {
  SubgraphBuilder b(*this, nullptr);
  int v = b.apply(op, args, to);
  if (v == ElementalBuilder::kRefused) fail(*this, b.refusal(), b.refusal_code());
  return v;
}

int FusedSubgraph::add_reduce(ReduceKind kind, int arg, std::vector<int64_t> axes) {
  const char* name = reduce_kind_name(kind);
  DType t = dtype(arg);
  if (is_reduction(arg)) fail(*this, std::string(name) + ": its argument is a reduction");
  if (has_reductions() && axes != reduce_axes)
    fail(*this, std::string(name) + ": axes " + shape_str(axes) + " differ from " +
                    shape_str(reduce_axes) + ", which the other reductions fold");
  reduce_axes = std::move(axes);
  nodes.push_back({EltOp::kAdd, {arg}, t, kind});
  return num_values() - 1;
}

bool FusedSubgraph::is_reduction(int value) const {
  int k = value - static_cast<int>(inputs.size());
  return k >= 0 && k < static_cast<int>(nodes.size()) && nodes[k].reduce.has_value();
}

bool FusedSubgraph::has_reductions() const {
  for (const Node& n : nodes)
    if (n.reduce) return true;
  return false;
}

Shape FusedSubgraph::reduced_shape() const {
  Shape full = iteration_shape(), out;
  for (size_t d = 0; d < full.size(); ++d)
    if (!std::binary_search(reduce_axes.begin(), reduce_axes.end(), static_cast<int64_t>(d)))
      out.push_back(full[d]);
  return out;
}

TensorType FusedSubgraph::output_type(int i) const {
  int v = outputs.at(i);
  return {dtype(v), is_reduction(v) ? reduced_shape() : iteration_shape()};
}

Shape FusedSubgraph::iteration_shape() const {
  Shape out;
  for (const Input& in : inputs) {
    const Shape& s = in.shape;
    Shape r(std::max(out.size(), s.size()), 1);
    for (size_t i = 0; i < r.size(); ++i) {
      int64_t a = i < out.size() ? out[out.size() - 1 - i] : 1;
      int64_t b = i < s.size() ? s[s.size() - 1 - i] : 1;
      if (a != b && a != 1 && b != 1)
        fail(*this, "input shapes do not broadcast: " + shape_str(out) + " vs " + shape_str(s));
      r[r.size() - 1 - i] = a == 1 ? b : a;
    }
    out = std::move(r);
  }
  return out;
}

void FusedSubgraph::validate(const FusionTarget& target) const {
  if (inputs.empty()) fail(*this, "a fused subgraph needs at least one input");
  if (outputs.empty()) fail(*this, "a fused subgraph needs at least one output");
  for (const Input& in : inputs) {
    if (!target.storage_dtype(in.dtype))
      fail(*this, std::string("input dtype ") + dtype_name(in.dtype) + " is not supported",
           ErrorCode::kUnimplemented);
    if (!is_fully_defined(in.shape))
      fail(*this, "input shape " + shape_str(in.shape) + " is not fully defined");
  }
  int n_in = static_cast<int>(inputs.size());
  for (int k = 0; k < n_in; ++k) {
    const Input& in = inputs[k];
    if (in.fallback != -1 && (!in.piece || in.fallback < 0 || in.fallback >= k ||
                              inputs[in.fallback].dtype != in.dtype))
      fail(*this, "input " + std::to_string(k) + " falls back to input " +
                      std::to_string(in.fallback) + ", not an earlier input of its dtype");
    if (in.generator && (in.map || in.piece))
      fail(*this, "generated input " + std::to_string(k) + " has an index map or a piece");
    if (in.gather &&
        (!in.map || in.piece || in.generator || in.gather->indices < 0 || in.gather->indices >= k ||
         inputs[in.gather->indices].gather ||
         (inputs[in.gather->indices].dtype != i32 && inputs[in.gather->indices].dtype != i64)))
      fail(*this, "gathered input " + std::to_string(k) +
                      " needs an index map, no piece, and an earlier i32 or i64 input as its "
                      "indices");
  }
  for (int k = 0; k < n_in; ++k)  // a gather and its indices are read at every loop index
    if (inputs[k].gather && (inputs[k].shape != iteration_shape() ||
                             inputs[inputs[k].gather->indices].shape != iteration_shape()))
      fail(*this, "gathered input " + std::to_string(k) +
                      " and its indices must have the iteration shape " +
                      shape_str(iteration_shape()));
  if (has_pieces() && has_reductions())
    fail(*this, "pieces of concatenate or pad are read only by loop fusions, not reductions",
         ErrorCode::kUnimplemented);
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    int id = n_in + static_cast<int>(i);
    if (!n.reduce && static_cast<int>(n.args.size()) != elt_op_arity(n.op))
      fail(*this, std::string(elt_op_name(n.op)) + ": wrong number of args");
    std::vector<DType> ts;
    for (int a : n.args) {
      if (a < 0 || a >= id)
        fail(*this, "node " + std::to_string(id) + " refers to value " + std::to_string(a) +
                        ", not an input or earlier node");
      if (is_reduction(a))
        fail(*this, "node " + std::to_string(id) + " uses reduction " + std::to_string(a) +
                        "; only outputs may use reductions");
      ts.push_back(dtype(a));
    }
    if (n.reduce) {
      if (n.args.size() != 1 || n.dtype != ts[0])
        fail(*this, "reduction node " + std::to_string(id) + " is malformed");
      if (!target.reduce_dtype(n.dtype))
        fail(*this, std::string(reduce_kind_name(*n.reduce)) + ": dtype " + dtype_name(n.dtype) +
                        " is not supported",
             ErrorCode::kUnimplemented);
      continue;
    }
    DType inferred = n.dtype;
    ErrorCode code;
    if (std::string why = dtype_refusal(n.op, ts, n.dtype, &inferred, &code, &target);
        !why.empty())
      fail(*this, why, code);
    if (inferred != n.dtype)
      fail(*this, "node " + std::to_string(id) + " (" + elt_op_name(n.op) + ") has dtype " +
                      dtype_name(n.dtype) + ", inferred " + dtype_name(inferred));
  }
  for (int o : outputs) (void)dtype(o);
  Shape shape = iteration_shape();
  if (has_reductions()) {
    for (size_t i = 0; i < reduce_axes.size(); ++i)
      if (reduce_axes[i] < 0 || reduce_axes[i] >= static_cast<int64_t>(shape.size()) ||
          (i > 0 && reduce_axes[i] <= reduce_axes[i - 1]))
        fail(*this, "reduce axes " + shape_str(reduce_axes) + " are not sorted axes of " +
                        shape_str(shape));
    std::string why = target.reduction_layout_refusal(shape, reduce_axes);
    if (!why.empty()) fail(*this, why, ErrorCode::kUnimplemented);
  }
}

}  // namespace kiln::compiler
