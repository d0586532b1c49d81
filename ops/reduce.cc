// Reduction primitives: reduce_{sum,max,min,prod,any,all} over a set of axes, argmax and argmin
// along one axis; and the public reductions built on them (keepdims, negative axes, mean,
// variance).
#include <algorithm>
#include <array>
#include <limits>
#include <memory>

#include "kiln/ops.h"
#include "ops/kernel_util.h"
#include "ops/max_min.h"
#include "src/core/cpu_isa.h"

namespace kiln {
namespace ops {
namespace {

// ---- reducers: an accumulator type, its identity, folding and finishing ------------------

// Sums and products of floats accumulate in double (16-bit ones via float, and back through
// float: the compiled loops fold in the same types, so they give the same bits); integers in
// uint64_t, so that overflow wraps (like XLA) instead of being undefined behaviour.
template <class T>
using WideAcc = std::conditional_t<kIsFloat<T>, double, uint64_t>;

template <class T>
WideAcc<T> widen(T x) {
  if constexpr (kIsFloat<T>) {
    return static_cast<WideAcc<T>>(static_cast<ComputeType<T>>(x));
  } else {
    return static_cast<uint64_t>(static_cast<int64_t>(x));
  }
}

template <class T, class Acc>
T narrow(Acc a) {
  if constexpr (kIsFloat<T>) {
    return static_cast<T>(static_cast<ComputeType<T>>(a));
  } else {
    return static_cast<T>(a);  // modular since C++20
  }
}

template <class T>
struct SumOp {
  using Acc = WideAcc<T>;
  static Acc init() { return Acc(0); }
  static Acc from(T x) { return widen(x); }
  static Acc op(Acc a, Acc b) { return a + b; }
  static T finish(Acc a) { return narrow<T>(a); }
};

template <class T>
struct ProdOp {
  using Acc = WideAcc<T>;
  static Acc init() { return Acc(1); }
  static Acc from(T x) { return widen(x); }
  static Acc op(Acc a, Acc b) { return a * b; }
  static T finish(Acc a) { return narrow<T>(a); }
};

// max and min as the elementwise ops (ops/max_min.h): NaN propagates (once the accumulator is
// NaN it stays NaN), and a row holding -0 and +0 has maximum +0 and minimum -0.
template <class T, bool kMax>
struct ExtremeOp {
  using Acc = ComputeType<T>;
  static Acc init() {
    if constexpr (kIsFloat<T>) {
      return kMax ? -std::numeric_limits<Acc>::infinity() : std::numeric_limits<Acc>::infinity();
    } else {
      return kMax ? std::numeric_limits<Acc>::lowest() : std::numeric_limits<Acc>::max();
    }
  }
  static Acc from(T x) { return static_cast<Acc>(x); }
  static Acc op(Acc a, Acc b) { return kMax ? max_of(a, b) : min_of(a, b); }
  static T finish(Acc a) { return static_cast<T>(a); }
};
template <class T>
using MaxOp = ExtremeOp<T, true>;
template <class T>
using MinOp = ExtremeOp<T, false>;

template <class T>
struct AnyOp {
  using Acc = bool;
  static Acc init() { return false; }
  static Acc from(T x) { return static_cast<bool>(x); }
  static Acc op(Acc a, Acc b) { return a || b; }
  static T finish(Acc a) { return a; }
};

template <class T>
struct AllOp {
  using Acc = bool;
  static Acc init() { return true; }
  static Acc from(T x) { return static_cast<bool>(x); }
  static Acc op(Acc a, Acc b) { return a && b; }
  static T finish(Acc a) { return a; }
};

// ---- the reduction loop -----------------------------------------------------------------

// The input seen as alternating runs of kept and reduced dimensions (size-1 dimensions
// dropped, neighbours of the same kind merged). Output element g * inner + j folds the input
// elements at group_offset(g) + reduced_offset(r) + j over every reduced position r.
struct ReducePlan {
  Shape outer_sizes;  // kept runs, except an innermost one
  std::vector<int64_t> outer_strides;
  Shape red_sizes;  // reduced runs (at least one; a size-1 stand-in when nothing is reduced)
  std::vector<int64_t> red_strides;
  int64_t groups = 1;   // product of outer_sizes
  int64_t inner = 1;    // length of the innermost kept run when the last run is kept, else 1
  int64_t reduced = 1;  // product of red_sizes

  int64_t group_offset(int64_t g) const {
    int64_t off = 0;
    for (int d = static_cast<int>(outer_sizes.size()) - 1; d >= 0; --d) {
      off += (g % outer_sizes[d]) * outer_strides[d];
      g /= outer_sizes[d];
    }
    return off;
  }
};

ReducePlan make_plan(const Shape& shape, const std::vector<int64_t>& axes) {
  std::vector<bool> is_reduced(shape.size(), false);
  for (int64_t a : axes) is_reduced[a] = true;
  std::vector<int64_t> strides = row_major_strides(shape);
  struct Run {
    int64_t size, stride;
    bool reduced;
  };
  std::vector<Run> runs;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 1) continue;
    if (!runs.empty() && runs.back().reduced == is_reduced[i]) {
      runs.back().size *= shape[i];
      runs.back().stride = strides[i];
    } else {
      runs.push_back({shape[i], strides[i], is_reduced[i]});
    }
  }
  ReducePlan p;
  if (!runs.empty() && !runs.back().reduced) {
    p.inner = runs.back().size;
    runs.pop_back();
  }
  for (const Run& r : runs) {
    (r.reduced ? p.red_sizes : p.outer_sizes).push_back(r.size);
    (r.reduced ? p.red_strides : p.outer_strides).push_back(r.stride);
  }
  if (p.red_sizes.empty()) {
    p.red_sizes.push_back(1);
    p.red_strides.push_back(0);
  }
  for (int64_t s : p.outer_sizes) p.groups *= s;
  for (int64_t s : p.red_sizes) p.reduced *= s;
  return p;
}

constexpr int64_t kColumnBlock = 256;  // output columns one task folds together
constexpr int64_t kChunk = 1 << 15;    // input elements per task when a reduction is split

// Folds reduced positions [r0, r1) of columns [base, base + width) into acc.
template <class Op, class T>
void fold_range(const ReducePlan& p, const T* x, int64_t base, int64_t width, int64_t r0,
                int64_t r1, typename Op::Acc* acc) {
  const int m = static_cast<int>(p.red_sizes.size());
  std::vector<int64_t> idx(m);
  int64_t off = base;
  int64_t rem = r0;
  for (int d = m - 1; d >= 0; --d) {
    idx[d] = rem % p.red_sizes[d];
    rem /= p.red_sizes[d];
    off += idx[d] * p.red_strides[d];
  }
  const int64_t last = p.red_sizes[m - 1], stride = p.red_strides[m - 1];
  for (int64_t r = r0; r < r1;) {
    const int64_t n = std::min(last - idx[m - 1], r1 - r);
    const T* row = x + off;
    if (width == 1) {  // four independent accumulators break the dependency chain
      typename Op::Acc a0 = acc[0], a1 = Op::init(), a2 = Op::init(), a3 = Op::init();
      int64_t k = 0;
      for (; k + 4 <= n; k += 4) {
        a0 = Op::op(a0, Op::from(row[k * stride]));
        a1 = Op::op(a1, Op::from(row[(k + 1) * stride]));
        a2 = Op::op(a2, Op::from(row[(k + 2) * stride]));
        a3 = Op::op(a3, Op::from(row[(k + 3) * stride]));
      }
      for (; k < n; ++k) a0 = Op::op(a0, Op::from(row[k * stride]));
      acc[0] = Op::op(Op::op(a0, a1), Op::op(a2, a3));
    } else {
      for (int64_t k = 0; k < n; ++k) {
        const T* q = row + k * stride;
        for (int64_t j = 0; j < width; ++j) acc[j] = Op::op(acc[j], Op::from(q[j]));
      }
    }
    r += n;
    idx[m - 1] += n;
    off += n * stride;
    for (int d = m - 1; d > 0 && idx[d] == p.red_sizes[d]; --d) {
      off += p.red_strides[d - 1] - idx[d] * p.red_strides[d];
      idx[d] = 0;
      ++idx[d - 1];
    }
  }
}

template <class Op, class T>
void reduce(const Tensor& in, const std::vector<int64_t>& axes, Tensor& out) {
  using Acc = typename Op::Acc;
  T* y = out_ptr<T>(out);
  const int64_t n_out = out.size();
  if (n_out == 0) return;
  if (in.size() == 0) {  // an empty reduction gives the identity
    std::fill(y, y + n_out, Op::finish(Op::init()));
    return;
  }
  const T* x = static_cast<const T*>(in.raw_data());
  const ReducePlan p = make_plan(in.shape(), axes);
  const int64_t width = std::min(p.inner, kColumnBlock);
  const int64_t blocks = (p.inner + kColumnBlock - 1) / kColumnBlock;
  const int64_t units = p.groups * blocks;
  // Few outputs over a long reduction: split it into chunks folded separately, then combine
  // them in order. The split depends only on the shape, so results do not depend on the
  // number of threads.
  int64_t chunk = p.reduced, chunks = 1;
  if (units < 64 && p.reduced * width > kChunk) {
    chunk = std::max<int64_t>(1, kChunk / width);
    chunks = (p.reduced + chunk - 1) / chunk;
  }
  std::unique_ptr<Acc[]> partial;
  if (chunks > 1) partial.reset(new Acc[units * chunks * width]);

  const int64_t grain = std::max<int64_t>(1, kChunk / std::max<int64_t>(1, chunk * width));
  // Each task compiled for the host's vector ISA (cpu::dispatch): a column block's folds are
  // independent lanes, and this source compiles without fp contraction, so every level gives
  // the same bits.
  runtime::parallel_for(units * chunks, grain, [&](int64_t begin, int64_t end) {
    cpu::dispatch([&] {
      std::array<Acc, kColumnBlock> acc;
      for (int64_t t = begin; t < end; ++t) {
        const int64_t u = t / chunks, c = t % chunks;
        const int64_t g = u / blocks, j0 = (u % blocks) * kColumnBlock;
        const int64_t w = std::min(kColumnBlock, p.inner - j0);
        std::fill(acc.begin(), acc.begin() + w, Op::init());
        const int64_t r0 = c * chunk, r1 = std::min(p.reduced, r0 + chunk);
        fold_range<Op>(p, x, p.group_offset(g) + j0, w, r0, r1, acc.data());
        if (chunks == 1) {
          for (int64_t j = 0; j < w; ++j) y[g * p.inner + j0 + j] = Op::finish(acc[j]);
        } else {
          std::copy(acc.begin(), acc.begin() + w, &partial[t * width]);
        }
      }
    });
  });
  if (chunks == 1) return;
  runtime::parallel_for(units, 1, [&](int64_t begin, int64_t end) {
    for (int64_t u = begin; u < end; ++u) {
      const int64_t g = u / blocks, j0 = (u % blocks) * kColumnBlock;
      const int64_t w = std::min(kColumnBlock, p.inner - j0);
      for (int64_t j = 0; j < w; ++j) {
        Acc a = partial[u * chunks * width + j];
        for (int64_t c = 1; c < chunks; ++c) a = Op::op(a, partial[(u * chunks + c) * width + j]);
        y[g * p.inner + j0 + j] = Op::finish(a);
      }
    }
  });
}

template <template <class> class Op, TypeSet S>
KernelFn reduce_kernel() {
  return [](KernelContext& ctx) {
    visit_in<S>(ctx, ctx.input(0).dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      reduce<Op<T>, T>(ctx.input(0), ctx.attrs().get_ints("axes"), ctx.allocate_output(0));
    });
  };
}

// ---- argmax / argmin --------------------------------------------------------------------

// The first maximum (minimum) wins; a NaN counts as beyond every number, like NumPy: it
// replaces any number and nothing replaces it. One comparison in the common case.
template <bool kMax, class C>
bool replaces(C v, C best) {
  if (kMax ? !(v <= best) : !(v >= best)) return best == best;  // v beyond best, or v NaN
  return false;
}

template <bool kMax, class T>
void arg_reduce(const Tensor& in, int64_t axis, Tensor& out) {
  using C = ComputeType<T>;
  const Shape& shape = in.shape();
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= shape[d];
  for (size_t d = axis + 1; d < shape.size(); ++d) inner *= shape[d];
  const int64_t n = shape[axis];
  const T* x = static_cast<const T*>(in.raw_data());
  int64_t* y = out_ptr<int64_t>(out);
  const int64_t blocks = (inner + kColumnBlock - 1) / kColumnBlock;
  const int64_t grain = std::max<int64_t>(1, kChunk / std::max<int64_t>(1, n * inner));
  runtime::parallel_for(outer * blocks, grain, [&](int64_t begin, int64_t end) {
    std::array<C, kColumnBlock> best;
    std::array<int64_t, kColumnBlock> at;
    for (int64_t t = begin; t < end; ++t) {
      const int64_t o = t / blocks, j0 = (t % blocks) * kColumnBlock;
      const int64_t w = std::min(kColumnBlock, inner - j0);
      const T* base = x + o * n * inner + j0;
      for (int64_t j = 0; j < w; ++j) {
        best[j] = static_cast<C>(base[j]);
        at[j] = 0;
      }
      for (int64_t k = 1; k < n; ++k) {
        const T* row = base + k * inner;
        for (int64_t j = 0; j < w; ++j) {
          C v = static_cast<C>(row[j]);
          if (replaces<kMax>(v, best[j])) {
            best[j] = v;
            at[j] = k;
          }
        }
      }
      std::copy(at.begin(), at.begin() + w, y + o * inner + j0);
    }
  });
}

template <bool kMax>
void arg_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    arg_reduce<kMax, T>(x, ctx.attrs().get_int("axis"), ctx.allocate_output(0));
  });
}

// ---- shape functions --------------------------------------------------------------------

ShapeFn reduce_shape(TypeSet set) {
  return [set](const InferContext& ctx) {
    require_dtype_in(ctx, 0, set);
    const TensorType& x = ctx.input(0);
    const std::vector<int64_t>& axes = ctx.attrs().get_ints("axes");
    const int64_t rank = static_cast<int64_t>(x.shape.size());
    std::vector<bool> reduced(rank, false);
    for (size_t i = 0; i < axes.size(); ++i) {
      if (axes[i] < 0 || axes[i] >= rank) {
        ctx.fail("axis " + std::to_string(axes[i]) + " is out of range for " + x.str() + " (rank " +
                 std::to_string(rank) + "; the primitive takes axes in [0, rank))");
      }
      if (i > 0 && axes[i] <= axes[i - 1]) {
        ctx.fail("axes " + shape_str(axes) + " must be sorted and unique (input " + x.str() + ")");
      }
      reduced[axes[i]] = true;
    }
    Shape out;
    for (int64_t d = 0; d < rank; ++d)
      if (!reduced[d]) out.push_back(x.shape[d]);
    return std::vector<TensorType>{{x.dtype, out}};
  };
}

std::vector<TensorType> arg_shape(const InferContext& ctx) {
  const TensorType& x = ctx.input(0);
  const int64_t axis = ctx.attrs().get_int("axis");
  const int64_t rank = static_cast<int64_t>(x.shape.size());
  if (axis < 0 || axis >= rank) {
    ctx.fail("axis " + std::to_string(axis) + " is out of range for " + x.str() + " (rank " +
             std::to_string(rank) + ")");
  }
  if (x.shape[axis] == 0) {
    ctx.fail("cannot take " + ctx.op() + " of an empty axis: dimension " + std::to_string(axis) +
             " of " + x.str() + " has size 0");
  }
  Shape out = x.shape;
  out.erase(out.begin() + axis);
  return {{i64, out}};
}

}  // namespace

// ---- registrations ----------------------------------------------------------------------

#define KILN_REDUCE_OP(name, kind, Op, set)                                                  \
  KILN_REGISTER_OP(name).input("x").reduction(ReduceKind::kind).shape_fn(reduce_shape(set)); \
  KILN_REGISTER_KERNEL(name).dtypes(dtypes_of(set)).fn(reduce_kernel<Op, set>())

KILN_REDUCE_OP(reduce_sum, kSum, SumOp, TypeSet::kNumeric);
KILN_REDUCE_OP(reduce_prod, kProd, ProdOp, TypeSet::kNumeric);
KILN_REDUCE_OP(reduce_max, kMax, MaxOp, TypeSet::kNumeric);
KILN_REDUCE_OP(reduce_min, kMin, MinOp, TypeSet::kNumeric);

// ---- gradient rules ---------------------------------------------------------------------
// x is the input, z the result, dz its gradient; a value shaped like z goes back to x's shape
// with `unreduce`. max and min share dz equally among the elements equal to the result (as
// TensorFlow and JAX do). prod divides by x where x is not 0; where it is, the gradient is the
// product of the other elements if that 0 is its group's only one, and 0 otherwise.

namespace {

using Grads = std::vector<Tensor>;

// The primitive itself: sum() and prod() would take empty axes as all of them.
Tensor reduce_over(const std::string& op, const Tensor& t, const std::vector<int64_t>& axes) {
  return call_op(op, {t}, {{"axes", axes}})[0];
}

// t, shaped like a reduction of x over `axes`, broadcast back to x's shape (from x's shape
// when the graph runs if a reduced dimension is unknown while recording).
Tensor unreduce(const Tensor& t, const Tensor& x, const std::vector<int64_t>& axes) {
  Axes kept;
  bool reduced_known = true;
  for (int64_t d = 0; d < x.rank(); ++d) {
    if (std::binary_search(axes.begin(), axes.end(), d)) {
      reduced_known = reduced_known && x.shape()[d] != kUnknownDim;
    } else {
      kept.push_back(d);
    }
  }
  return reduced_known ? broadcast_in_dim(t, x.shape(), kept) : broadcast_like(t, x, kept);
}

Grads reduce_sum_gradient(const GradContext& ctx) {
  return {unreduce(ctx.output_grads[0], ctx.inputs[0], ctx.attrs().get_ints("axes"))};
}

Grads extreme_gradient(const GradContext& ctx) {
  const Tensor &x = ctx.inputs[0], &z = ctx.outputs[0], &dz = ctx.output_grads[0];
  const std::vector<int64_t>& axes = ctx.attrs().get_ints("axes");
  Tensor wins = equal(x, unreduce(z, x, axes));
  // How many elements share each result: 0 only where z is NaN, and there nothing wins.
  Tensor count = reduce_over("reduce_sum", convert(wins, x.dtype()), axes);
  return {where(wins, unreduce(dz / count, x, axes), scalar_like(0, x))};
}

Grads reduce_prod_gradient(const GradContext& ctx) {
  const Tensor &x = ctx.inputs[0], &dz = ctx.output_grads[0];
  const std::vector<int64_t>& axes = ctx.attrs().get_ints("axes");
  const Tensor zero = scalar_like(0, x);
  Tensor is_zero = equal(x, zero);
  Tensor nonzero_x = where(is_zero, scalar_like(1, x), x);
  Tensor zeros = unreduce(reduce_over("reduce_sum", convert(is_zero, x.dtype()), axes), x, axes);
  // dz times the product of the group's non-zero elements.
  Tensor scaled = unreduce(dz * reduce_over("reduce_prod", nonzero_x, axes), x, axes);
  return {where(equal(zeros, zero), scaled / nonzero_x,
                where(logical_and(is_zero, equal(zeros, scalar_like(1, x))), scaled, zero))};
}

}  // namespace

KILN_REGISTER_GRADIENT(reduce_sum, reduce_sum_gradient);
KILN_REGISTER_GRADIENT(reduce_prod, reduce_prod_gradient);
KILN_REGISTER_GRADIENT(reduce_max, extreme_gradient);
KILN_REGISTER_GRADIENT(reduce_min, extreme_gradient);

KILN_REGISTER_OP(reduce_any)
    .input("x")
    .kind(OpKind::kCodegen)
    .non_differentiable()
    .shape_fn(reduce_shape(TypeSet::kBool));
KILN_REGISTER_KERNEL(reduce_any).dtypes({bool_}).fn(reduce_kernel<AnyOp, TypeSet::kBool>());
KILN_REGISTER_OP(reduce_all)
    .input("x")
    .kind(OpKind::kCodegen)
    .non_differentiable()
    .shape_fn(reduce_shape(TypeSet::kBool));
KILN_REGISTER_KERNEL(reduce_all).dtypes({bool_}).fn(reduce_kernel<AllOp, TypeSet::kBool>());

KILN_REGISTER_OP(argmax).input("x").kind(OpKind::kCodegen).non_differentiable().shape_fn(arg_shape);
KILN_REGISTER_KERNEL(argmax).fn(arg_kernel<true>);
KILN_REGISTER_OP(argmin).input("x").kind(OpKind::kCodegen).non_differentiable().shape_fn(arg_shape);
KILN_REGISTER_KERNEL(argmin).fn(arg_kernel<false>);

}  // namespace ops

// ---- public functions -------------------------------------------------------------------
namespace {

std::string type_str(const Tensor& x) { return TensorType{x.dtype(), x.shape()}.str(); }

int64_t checked_axis(const std::string& fn, const Tensor& x, int64_t axis) {
  const int64_t rank = x.rank();
  if (axis < -rank || axis >= rank) {
    throw Error(ErrorCode::kInvalidArgument, fn + ": axis " + std::to_string(axis) +
                                                 " is out of range for " + type_str(x) + " (rank " +
                                                 std::to_string(rank) + ")");
  }
  return axis < 0 ? axis + rank : axis;
}

// The axes made non-negative, checked and sorted; no axes means all of them.
Axes reduction_axes(const std::string& fn, const Tensor& x, const Axes& axes) {
  Axes out;
  if (axes.empty()) {
    for (int64_t d = 0; d < x.rank(); ++d) out.push_back(d);
    return out;
  }
  for (int64_t a : axes) out.push_back(checked_axis(fn, x, a));
  std::sort(out.begin(), out.end());
  for (size_t i = 1; i < out.size(); ++i) {
    if (out[i] == out[i - 1]) {
      throw Error(ErrorCode::kInvalidArgument, fn + ": duplicate axis " + std::to_string(out[i]) +
                                                   " in " + shape_str(axes) + " for " +
                                                   type_str(x));
    }
  }
  return out;
}

// Puts the reduced axes (sorted, non-negative) back as size-1 dimensions.
Tensor keep_dims(const Tensor& reduced, const Shape& in_shape, const Axes& axes) {
  if (axes.empty()) return reduced;
  Shape shape = in_shape;
  for (int64_t a : axes) shape[a] = 1;
  if (std::count(shape.begin(), shape.end(), kUnknownDim) <= 1) return reshape(reduced, shape);
  Tensor out = reduced;  // several unknown dimensions: a reshape could not infer them
  for (int64_t a : axes) out = expand_dims(out, a);
  return out;
}

Tensor reduce(const std::string& fn, const std::string& op, const Tensor& x, const Axes& axes,
              bool keepdims) {
  Axes norm = reduction_axes(fn, x, axes);
  Tensor out = call_op(op, {x}, {{"axes", norm}})[0];
  return keepdims ? keep_dims(out, x.shape(), norm) : out;
}

// Means are computed in f32 for integer, bool and 16-bit float inputs.
DType mean_compute_type(DType t) { return t == f64 ? f64 : f32; }
DType mean_result_type(DType t) { return is_floating(t) ? t : f32; }

// The number of elements each output of a reduction over `axes` folds (shaped like the
// reduction's output when a reduced dimension is unknown).
Tensor reduced_count(const Tensor& x, const Axes& axes, bool keepdims) {
  double count = 1;
  for (int64_t a : axes) {
    if (x.shape()[a] == kUnknownDim) return sum(ones_like(x), axes, keepdims);
    count *= static_cast<double>(x.shape()[a]);
  }
  return scalar_like(count, x);
}

}  // namespace

Tensor sum(const Tensor& x, Axes axes, bool keepdims) {
  Tensor v = x.dtype() == bool_ ? convert(x, i64) : x;  // counts the true values
  return reduce("sum", "reduce_sum", v, axes, keepdims);
}
Tensor prod(const Tensor& x, Axes axes, bool keepdims) {
  Tensor v = x.dtype() == bool_ ? convert(x, i64) : x;
  return reduce("prod", "reduce_prod", v, axes, keepdims);
}
Tensor max(const Tensor& x, Axes axes, bool keepdims) {
  return reduce("max", x.dtype() == bool_ ? "reduce_any" : "reduce_max", x, axes, keepdims);
}
Tensor min(const Tensor& x, Axes axes, bool keepdims) {
  return reduce("min", x.dtype() == bool_ ? "reduce_all" : "reduce_min", x, axes, keepdims);
}
Tensor any(const Tensor& x, Axes axes, bool keepdims) {
  return reduce("any", "reduce_any", x, axes, keepdims);
}
Tensor all(const Tensor& x, Axes axes, bool keepdims) {
  return reduce("all", "reduce_all", x, axes, keepdims);
}

Tensor mean(const Tensor& x, Axes axes, bool keepdims) {
  Axes norm = reduction_axes("mean", x, axes);
  Tensor xc = convert(x, mean_compute_type(x.dtype()));
  Tensor m = div(sum(xc, norm, keepdims), reduced_count(xc, norm, keepdims));
  return convert(m, mean_result_type(x.dtype()));
}

// Population variance (numpy.var): the mean squared deviation from the mean.
Tensor variance(const Tensor& x, Axes axes, bool keepdims) {
  Axes norm = reduction_axes("variance", x, axes);
  Tensor xc = convert(x, mean_compute_type(x.dtype()));
  Tensor d = sub(xc, mean(xc, norm, /*keepdims=*/true));
  Tensor v = div(sum(mul(d, d), norm, keepdims), reduced_count(xc, norm, keepdims));
  return convert(v, mean_result_type(x.dtype()));
}

Tensor argmax(const Tensor& x, int64_t axis, bool keepdims) {
  int64_t a = checked_axis("argmax", x, axis);
  Tensor out = call_op("argmax", {x}, {{"axis", a}})[0];
  return keepdims ? keep_dims(out, x.shape(), {a}) : out;
}
Tensor argmin(const Tensor& x, int64_t axis, bool keepdims) {
  int64_t a = checked_axis("argmin", x, axis);
  Tensor out = call_op("argmin", {x}, {{"axis", a}})[0];
  return keepdims ? keep_dims(out, x.shape(), {a}) : out;
}

}  // namespace kiln
