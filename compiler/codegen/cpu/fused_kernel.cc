// The LLVM-free half of the CPU loop- and reduction-fusion codegen: op names, FusedSubgraph
// building and validation, and running a compiled FusedKernel over the thread pool.
#include "compiler/codegen/cpu/fused_kernel.h"

#include <algorithm>
#include <limits>
#include <type_traits>
#include <utility>

#include "kiln/error.h"
#include "ops/max_min.h"
#include "runtime/thread_pool.h"

namespace kiln::compiler::cpu {
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

// bf16 and f16 compute in f32, each result rounded to its dtype, as their reference kernels do.
bool is_narrow(DType t) { return t == bf16 || t == f16; }
bool supported_dtype(DType t) {
  return t == f32 || t == f64 || t == i32 || t == i64 || t == bool_ || is_narrow(t);
}

[[noreturn]] void fail(const FusedSubgraph& sg, const std::string& msg,
                       ErrorCode code = ErrorCode::kInvalidArgument) {
  throw Error(code, "cpu codegen (" + sg.name + "): " + msg);
}

// Why `op` cannot take operands of dtypes `ts` (convert: to `to`), or "" with the result's
// dtype in *out.
std::string dtype_refusal(EltOp op, const std::vector<DType>& ts, DType to, DType* out,
                          ErrorCode* code) {
  const std::string name = elt_op_name(op);
  *code = ErrorCode::kUnimplemented;
  for (DType t : ts) {
    if (!(op == EltOp::kConvert ? storage_dtype(t) : supported_dtype(t)))
      return name + ": dtype " + dtype_name(t) + " is not supported";
  }
  if (op == EltOp::kConvert) {
    if (!storage_dtype(to)) return std::string("convert: dtype ") + dtype_name(to) + " is not supported";
    // The reference kernel rounds an f64, i32 or i64 to bf16/f16 once; through f32 it would
    // round twice.
    if (is_narrow(to) && (ts[0] == f64 || ts[0] == i32 || ts[0] == i64))
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
  if (is_float_only(op) && t != f32 && t != f64 && !is_narrow(t)) {
    *code = ErrorCode::kUnimplemented;
    return name + ": needs a floating-point operand, got " + dtype_name(t);
  }
  *out = is_compare(op) || op == EltOp::kIsFinite ? bool_ : t;
  return "";
}

}  // namespace

// 8-bit integers are loaded, stored and converted, not computed on: enough to fuse the u8
// pixels -> f32 conversion that starts most image pipelines into the arithmetic after it.
bool storage_dtype(DType t) { return supported_dtype(t) || t == u8 || t == i8; }

DType accumulator_dtype(ReduceKind kind, DType dtype) {
  const bool folds_products = kind == ReduceKind::kSum || kind == ReduceKind::kProd;
  const bool narrow = dtype == bf16 || dtype == f16;
  if (folds_products && (dtype == f32 || narrow)) return f64;
  return narrow ? f32 : dtype;
}

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

int FusedSubgraph::add_mapped_input(DType dtype, Shape shape, StridedView map, Shape source) {
  if (map.strides.size() != shape.size())
    fail(*this, "index map " + shape_str(map.strides) + " does not fit input shape " +
                    shape_str(shape));
  if (!is_fully_defined(source)) fail(*this, "source shape " + shape_str(source) + " is not fully defined");
  // The lowest and highest elements the view reaches must lie in the buffer.
  int64_t lo = map.offset, hi = map.offset;
  bool empty = false;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 0) empty = true;
    const int64_t reach = (shape[d] - 1) * map.strides[d];
    (reach < 0 ? lo : hi) += reach;
  }
  if (!empty && (lo < 0 || hi >= num_elements(source)))
    fail(*this, "index map reaches elements [" + std::to_string(lo) + ", " + std::to_string(hi) +
                    "] of a buffer of " + shape_str(source));
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
  if (std::string why = dtype_refusal(prim, ts, to, &t, &code); !why.empty())
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
  SubgraphBuilder b(*this);
  int v = b.apply(op, args, to);
  if (v == ElementalBuilder::kRefused) fail(*this, b.refusal(), b.refusal_code());
  return v;
}

int FusedSubgraph::add_reduce(ReduceKind kind, int arg, std::vector<int64_t> axes) {
  const char* name = reduce_kind_name(kind);
  DType t = dtype(arg);
  if (is_reduction(arg)) fail(*this, std::string(name) + ": its argument is a reduction");
  if (t != f32 && t != f64 && t != i32 && t != i64 && !is_narrow(t))
    fail(*this, std::string(name) + ": dtype " + dtype_name(t) + " is not supported",
         ErrorCode::kUnimplemented);
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

void FusedSubgraph::validate() const {
  if (inputs.empty()) fail(*this, "a fused subgraph needs at least one input");
  if (outputs.empty()) fail(*this, "a fused subgraph needs at least one output");
  for (const Input& in : inputs) {
    if (!storage_dtype(in.dtype))
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
  }
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
      continue;
    }
    DType inferred = n.dtype;
    ErrorCode code;
    if (std::string why = dtype_refusal(n.op, ts, n.dtype, &inferred, &code); !why.empty())
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
    std::string why = reduction_layout_refusal(shape, reduce_axes);
    if (!why.empty()) fail(*this, why, ErrorCode::kUnimplemented);
  }
}

bool is_flat_loop(const FusedSubgraph& sg, const Shape& out_shape) {
  int64_t n = num_elements(out_shape);
  for (const FusedSubgraph::Input& in : sg.inputs) {
    if (in.piece) return false;  // the row loop splits at the pieces' bounds
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

FusedKernel::FusedKernel(FusedSubgraph sg, Shape shape, KernelFn fn, std::shared_ptr<void> jit,
                         bool contiguous, double compile_ms)
    : subgraph_(std::move(sg)),
      shape_(std::move(shape)),
      num_elements_(kiln::num_elements(shape_)),
      fn_(fn),
      jit_(std::move(jit)),
      contiguous_(contiguous),
      compile_ms_(compile_ms) {
  for (size_t i = 0; i < subgraph_.outputs.size(); ++i)
    output_types_.push_back(subgraph_.output_type(static_cast<int>(i)));
  if (subgraph_.has_reductions()) {
    parallel_size_ = kiln::num_elements(subgraph_.reduced_shape());
    work_per_item_ = 1;
    for (int64_t a : subgraph_.reduce_axes) work_per_item_ *= shape_[a];
    // Kept dimensions inside the reduced run make a column kernel, vectorised across them:
    // give each task long runs of columns rather than a vector's worth.
    int64_t inner = 1;
    for (int64_t d = static_cast<int64_t>(shape_.size()) - 1; d >= 0; --d) {
      if (std::binary_search(subgraph_.reduce_axes.begin(), subgraph_.reduce_axes.end(), d) &&
          shape_[d] != 1)
        break;
      inner *= shape_[d];
    }
    min_grain_ = std::clamp<int64_t>(inner, 1, 512);
  } else {
    parallel_size_ = num_elements_;
  }
}

void FusedKernel::run(const std::vector<Tensor>& inputs, std::vector<Tensor>* outputs) const {
  const FusedSubgraph& sg = subgraph_;
  if (fn_ == nullptr) fail(sg, "run: the kernel is not compiled");
  if (inputs.size() != sg.inputs.size())
    fail(sg, "run: expected " + std::to_string(sg.inputs.size()) + " inputs, got " +
                 std::to_string(inputs.size()));
  std::vector<void*> in_ptrs(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    const FusedSubgraph::Input& want = sg.inputs[i];
    if (!t.defined() || t.is_symbolic())
      fail(sg, "run: input " + std::to_string(i) + " is not a concrete tensor");
    if (t.dtype() != want.dtype || t.shape() != want.buffer_shape())
      fail(sg, "run: input " + std::to_string(i) + " is " + dtype_name(t.dtype()) +
                   shape_str(t.shape()) + ", the kernel was compiled for " +
                   dtype_name(want.dtype) + shape_str(want.buffer_shape()));
    in_ptrs[i] = const_cast<void*>(t.raw_data());
  }
  outputs->resize(sg.outputs.size());
  std::vector<void*> out_ptrs(sg.outputs.size());
  for (size_t i = 0; i < sg.outputs.size(); ++i) {
    Tensor& t = (*outputs)[i];
    const TensorType& want = output_types_[i];
    if (!t.defined() || t.is_symbolic() || t.dtype() != want.dtype || t.shape() != want.shape)
      t = Tensor::empty(want.dtype, want.shape);
    out_ptrs[i] = t.raw_mutable_data();
  }
  if (parallel_size_ == 0) return;
  if (int64_t chunks = split_chunks(); chunks > 1) {
    run_split(chunks, in_ptrs, out_ptrs, outputs);
    return;
  }
  KernelFn fn = fn_;
  void** ins = in_ptrs.data();
  void** outs = out_ptrs.data();
  int64_t grain =
      std::max<int64_t>(min_grain_, (int64_t{1} << 14) / std::max<int64_t>(1, work_per_item_));
  runtime::parallel_for(parallel_size_, grain,
                        [fn, ins, outs](int64_t b, int64_t e) { fn(ins, outs, b, e); });
}

int64_t FusedKernel::split_chunks() const {
  constexpr int64_t kChunkWork = 1 << 15;  // iteration points per chunk
  constexpr int64_t kMaxChunks = 64;
  if (part_fn_ == nullptr || parallel_size_ >= 64 || split_size_ < 2) return 1;
  int64_t total = parallel_size_ * work_per_item_;
  return std::min({split_size_, kMaxChunks, total / kChunkWork});
}

namespace {

// Integers fold in their unsigned type, so that overflow wraps instead of being undefined.
template <class T, bool = std::is_integral_v<T>>
struct Wrapping {
  using type = T;
};
template <class T>
struct Wrapping<T, true> {
  using type = std::make_unsigned_t<T>;
};

// Folds chunk partials (chunk-major, n elements each, in the accumulator type T) into `out` in
// chunk order, then rounds each to Out.
template <class T, class Out>
void combine(ReduceKind kind, const T* partials, int64_t chunks, int64_t n, Out* out) {
  runtime::parallel_for(n, 1 << 12, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      T a = partials[i];
      for (int64_t c = 1; c < chunks; ++c) {
        T v = partials[c * n + i];
        using W = typename Wrapping<T>::type;
        switch (kind) {  // integers wrap, as in the kernel
          case ReduceKind::kSum: a = static_cast<T>(static_cast<W>(a) + static_cast<W>(v)); break;
          case ReduceKind::kProd: a = static_cast<T>(static_cast<W>(a) * static_cast<W>(v)); break;
          case ReduceKind::kMax: a = ops::max_of(a, v); break;
          case ReduceKind::kMin: a = ops::min_of(a, v); break;
        }
      }
      if constexpr (std::is_same_v<Out, half> || std::is_same_v<Out, bfloat16>) {
        out[i] = Out(static_cast<float>(a));  // as the reference rounds: to f32, then 16 bits
      } else {
        out[i] = static_cast<Out>(a);
      }
    }
  });
}

// bf16/f16 partials: f64 (sums, products) or f32 (max, min), into the 16-bit output.
void narrow_combine(ReduceKind kind, const Tensor& partials, int64_t chunks, int64_t n, DType out,
                    void* dst) {
  auto into = [&](auto* o) {
    if (partials.dtype() == f64) {
      combine(kind, static_cast<const double*>(partials.raw_data()), chunks, n, o);
    } else {
      combine(kind, static_cast<const float*>(partials.raw_data()), chunks, n, o);
    }
  };
  if (out == DType::bf16) {
    into(static_cast<bfloat16*>(dst));
  } else {
    into(static_cast<half*>(dst));
  }
}

}  // namespace

void FusedKernel::run_split(int64_t chunks, const std::vector<void*>& in_ptrs,
                            const std::vector<void*>& out_ptrs,
                            std::vector<Tensor>* outputs) const {
  const FusedSubgraph& sg = subgraph_;
  const size_t n_out = sg.outputs.size();
  // Per chunk: the output pointers, reduced outputs redirected into its slice of a scratch of
  // their accumulator dtype.
  auto kind_of = [&](size_t o) { return *sg.nodes[sg.outputs[o] - sg.inputs.size()].reduce; };
  std::vector<Tensor> scratch(n_out);
  for (size_t o = 0; o < n_out; ++o)
    if (sg.is_reduction(sg.outputs[o]))
      scratch[o] = Tensor::empty(accumulator_dtype(kind_of(o), output_types_[o].dtype),
                                 {chunks, parallel_size_});
  std::vector<std::vector<void*>> outs(chunks, out_ptrs);
  for (int64_t c = 0; c < chunks; ++c)
    for (size_t o = 0; o < n_out; ++o)
      if (scratch[o].defined())
        outs[c][o] = static_cast<char*>(scratch[o].raw_mutable_data()) +
                     c * parallel_size_ * dtype_size(scratch[o].dtype());
  PartFn fn = part_fn_;
  const int64_t per = (split_size_ + chunks - 1) / chunks, size = split_size_, n = parallel_size_;
  void** ins = const_cast<void**>(in_ptrs.data());
  runtime::parallel_for(chunks, 1, [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; ++c)
      fn(ins, outs[c].data(), 0, n, c * per, std::min(size, (c + 1) * per), /*partial=*/1);
  });
  for (size_t o = 0; o < n_out; ++o) {
    if (!scratch[o].defined()) continue;
    ReduceKind kind = kind_of(o);
    void* dst = (*outputs)[o].raw_mutable_data();
    const void* src = scratch[o].raw_data();
    switch (output_types_[o].dtype) {
      case DType::f32:
        if (scratch[o].dtype() == f64) {
          combine(kind, static_cast<const double*>(src), chunks, n, static_cast<float*>(dst));
        } else {
          combine(kind, static_cast<const float*>(src), chunks, n, static_cast<float*>(dst));
        }
        break;
      case DType::f64:
        combine(kind, static_cast<const double*>(src), chunks, n, static_cast<double*>(dst));
        break;
      case DType::bf16:
      case DType::f16:
        narrow_combine(kind, scratch[o], chunks, n, output_types_[o].dtype, dst);
        break;
      case DType::i32:
        combine(kind, static_cast<const int32_t*>(src), chunks, n, static_cast<int32_t*>(dst));
        break;
      case DType::i64:
        combine(kind, static_cast<const int64_t*>(src), chunks, n, static_cast<int64_t*>(dst));
        break;
      default:
        fail(sg, "run: unsupported reduction dtype", ErrorCode::kInternal);
    }
  }
}

std::vector<Tensor> FusedKernel::run(const std::vector<Tensor>& inputs) const {
  std::vector<Tensor> out;
  run(inputs, &out);
  return out;
}

}  // namespace kiln::compiler::cpu
