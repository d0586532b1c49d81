// Layout primitives: broadcast_in_dim, reshape, transpose, slice, concatenate, pad, reverse
// and the run-time-shaped broadcast_like and reshape_like, moving elements by strided index
// arithmetic (reshapes share storage), with their gradient rules; and the public functions
// built on them (broadcast_to, flatten, expand_dims, squeeze).
#include <algorithm>
#include <cstring>

#include "kiln/ops.h"
#include "ops/kernel_util.h"
#include "ops/strided_copy.h"
#include "src/core/host_allocator.h"
#include "src/core/tensor_impl.h"

namespace kiln {
namespace ops {
namespace {

// ---- helpers ----------------------------------------------------------------------------

int64_t rank_of(const TensorType& t) { return static_cast<int64_t>(t.shape.size()); }

// An axis already validated by the shape function, made non-negative.
int64_t norm(int64_t axis, int64_t rank) { return axis < 0 ? axis + rank : axis; }

// Requires one attribute entry per dimension of input 0.
void require_per_dim(const InferContext& ctx, const std::string& attr,
                     const std::vector<int64_t>& values) {
  const TensorType& x = ctx.input(0);
  if (static_cast<int64_t>(values.size()) != rank_of(x)) {
    ctx.fail(attr + " " + ints_str(values) + " has " + std::to_string(values.size()) +
             " entries but the operand " + shape_str(x.shape) + " has rank " +
             std::to_string(rank_of(x)));
  }
}

// Normalises a list of axes into [0, rank), rejecting duplicates.
std::vector<int64_t> unique_axes(const InferContext& ctx, const std::string& attr,
                                 const std::vector<int64_t>& axes, int64_t rank,
                                 const Shape& shape) {
  std::vector<int64_t> out;
  std::vector<bool> seen(rank, false);
  for (int64_t a : axes) {
    int64_t n = normalize_axis(ctx, a, rank, shape);
    if (seen[n]) ctx.fail(attr + " " + ints_str(axes) + " repeats axis " + std::to_string(n));
    seen[n] = true;
    out.push_back(n);
  }
  return out;
}

// Element counts beyond this are refused rather than overflowing int64 arithmetic.
constexpr int64_t kMaxElements = int64_t{1} << 50;

void require_sane_size(const InferContext& ctx, const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d <= 0) continue;
    if (n > kMaxElements / d) ctx.fail("shape " + shape_str(shape) + " has too many elements");
    n *= d;
  }
}

// A tensor of `shape` viewing x's storage (same element count): reshape without a copy.
Tensor alias(const Tensor& x, const Shape& shape) {
  auto impl = detail::make_pooled<detail::TensorImpl>();
  impl->dtype = x.dtype();
  impl->shape = shape;
  impl->storage = x.impl()->storage;
  return Tensor(std::move(impl));
}

// Runs a gather-style copy of input 0 into a freshly allocated output 0 (row-major output
// strides are filled in here), or aliases the input when nothing moves.
void copy_to_output(KernelContext& ctx, StridedCopy c) {
  const Tensor& x = ctx.input(0);
  c.dims = ctx.output_type(0).shape;
  c.out_strides = row_major_strides(c.dims);
  if (num_elements(c.dims) == x.size() && is_identity(c, x.size())) {
    ctx.set_output(0, alias(x, c.dims));
    return;
  }
  Tensor& out = ctx.allocate_output(0);
  strided_copy(c, dtype_size(x.dtype()), x.raw_data(), out.raw_mutable_data());
}

// Copies input 0 into output 0 through the op's index map (every strided layout op's kernel):
// the same map the compiler folds into the loops that read the output.
void copy_through(KernelContext& ctx, const IndexMapFn& map) {
  const Shape& xs = ctx.input(0).shape();
  std::optional<StridedView> v = map(row_major_view(xs), xs, ctx.output_type(0).shape, ctx.attrs());
  if (!v) ctx.fail("internal: no index map from a row-major input", ErrorCode::kInternal);
  StridedCopy c;
  c.in_strides = std::move(v->strides);
  c.in_offset = v->offset;
  copy_to_output(ctx, std::move(c));
}

// Writes every input of a piecewise layout op into its piece of output 0 (concatenate's and
// pad's kernel), after filling the output with the input that has no piece: the same pieces
// the compiler reads through in the loops that read the output.
void copy_pieces(KernelContext& ctx, const PiecesFn& pieces_of) {
  std::vector<Shape> shapes;
  for (int i = 0; i < ctx.num_inputs(); ++i) shapes.push_back(ctx.input(i).shape());
  Tensor& out = ctx.allocate_output(0);
  const std::vector<std::optional<Piece>> pieces =
      pieces_of(shapes, out.shape(), ctx.attrs());
  const size_t elem = dtype_size(out.dtype());
  const std::vector<int64_t> out_row = row_major_strides(out.shape());
  for (int i = 0; i < ctx.num_inputs(); ++i)
    if (!pieces[i]) fill(out.raw_mutable_data(), out.size(), elem, ctx.input(i).raw_data());
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    if (!pieces[i]) continue;
    const Tensor& x = ctx.input(i);
    StridedCopy c;
    c.dims = x.shape();
    c.in_strides = row_major_strides(c.dims);
    for (size_t d = 0; d < c.dims.size(); ++d) {
      c.out_strides.push_back(c.dims[d] > 1 ? out_row[d] * pieces[i]->step[d] : 0);
      c.out_offset += pieces[i]->lo[d] * out_row[d];
    }
    strided_copy(c, elem, x.raw_data(), out.raw_mutable_data());
  }
}

// ---- for the gradient rules -------------------------------------------------------------
// Rules record while x's dimensions may be unknown (a batch of any size): they restore x's
// shape with reshape_like, and take ranges of such tensors with gather, since slice needs a
// limit in every dimension.

using Grads = std::vector<Tensor>;

// g, holding x's elements, in x's shape.
Tensor shaped_like(const Tensor& g, const Tensor& x) {
  return is_fully_defined(x.shape()) ? reshape(g, x.shape()) : reshape_like(g, x);
}

// The i64 vector start, start + step, ... with `count` entries.
Tensor positions(int64_t start, int64_t count, int64_t step) {
  std::vector<int64_t> v(count);
  for (int64_t k = 0; k < count; ++k) v[k] = start + k * step;
  return Tensor::from_vector(v, {count});
}

// The elements of t at positions(start, count, step) along `axis`.
Tensor take_range(const Tensor& t, int64_t axis, int64_t start, int64_t count, int64_t step) {
  if (!is_fully_defined(t.shape())) return gather(t, positions(start, count, step), axis);
  Axes lo(t.rank(), 0), hi = t.shape(), strides(t.rank(), 1);
  lo[axis] = start;
  hi[axis] = count == 0 ? start : start + (count - 1) * step + 1;
  strides[axis] = count > 1 ? step : 1;
  return slice(t, lo, hi, strides);
}

[[noreturn]] void unknown_size_fail(const GradContext& ctx, const std::string& what) {
  throw Error(ErrorCode::kUnimplemented,
              ctx.node.op + ": cannot build the gradient: " + what +
                  " is unknown while recording; give it a known size (in " + ctx.node.name + ")");
}

}  // namespace

// ---- broadcast_in_dim and broadcast_like -----------------------------------------------
// Operand dimension i maps to output dimension dims[i] and must be 1 or equal to it. For
// broadcast_in_dim an unknown output dimension that an operand dimension maps to takes the
// operand's size, and one that nothing maps to must be known by run time; broadcast_like
// takes the output shape from its second input, `like`, when the graph runs.

namespace {

std::vector<TensorType> broadcast_type(const InferContext& ctx, Shape out, bool from_like) {
  const TensorType& x = ctx.input(0);
  const std::vector<int64_t>& dims_attr = ctx.attrs().get_ints("dims");
  for (int64_t d : out) {
    if (d < kUnknownDim) ctx.fail("shape " + ints_str(out) + " has a negative dimension");
  }
  if (dims_attr.size() != x.shape.size()) {
    ctx.fail("dims " + ints_str(dims_attr) + " has " + std::to_string(dims_attr.size()) +
             " entries but the operand " + shape_str(x.shape) + " has rank " +
             std::to_string(rank_of(x)));
  }
  std::vector<int64_t> dims =
      unique_axes(ctx, "dims", dims_attr, static_cast<int64_t>(out.size()), out);
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t xd = x.shape[i];
    int64_t& od = out[dims[i]];
    if (od == kUnknownDim) {
      if (!from_like || xd != 1) od = xd;  // like's size may still stretch a 1
    } else if (xd != kUnknownDim && xd != 1 && xd != od) {
      ctx.fail("cannot broadcast operand " + shape_str(x.shape) + " to " + shape_str(out) +
               " with dims " + ints_str(dims_attr) + ": operand dimension " + std::to_string(i) +
               " has size " + std::to_string(xd) + ", output dimension " + std::to_string(dims[i]) +
               " has size " + std::to_string(od));
    }
  }
  require_sane_size(ctx, out);
  return {{x.dtype, out}};
}

// Operand dimension i is output dimension dims[i]; the others, and stretched 1s, stride 0.
std::optional<StridedView> broadcast_map(const StridedView& x, const Shape& xs, const Shape& out,
                                         const Attrs& attrs) {
  const std::vector<int64_t>& dims = attrs.get_ints("dims");
  StridedView v{std::vector<int64_t>(out.size(), 0), x.offset};
  for (size_t i = 0; i < xs.size(); ++i)
    if (xs[i] != 1) v.strides[norm(dims[i], static_cast<int64_t>(out.size()))] = x.strides[i];
  return v;
}

void broadcast_kernel(KernelContext& ctx) {
  const Shape& out = ctx.output_type(0).shape;
  if (!is_fully_defined(out)) {
    ctx.fail("output shape " + shape_str(out) + " is not known at run time: give every " +
             "dimension that no operand dimension maps to a size");
  }
  copy_through(ctx, broadcast_map);
}

// dz summed over the output dimensions that x does not map to and those it stretches from
// size 1, then put in x's order and shape. An x dimension unknown while recording is taken
// as not stretched (as unbroadcast does); were it 1 after all, reshape_like says so at run
// time.
Tensor broadcast_gradient(const Tensor& dz, const Tensor& x, const Shape& out,
                          const std::vector<int64_t>& dims_attr) {
  const Shape& xs = x.shape();
  const int64_t r = static_cast<int64_t>(out.size());
  std::vector<int64_t> source(r, -1);  // the x dimension each output dimension comes from
  for (size_t i = 0; i < xs.size(); ++i) source[norm(dims_attr[i], r)] = static_cast<int64_t>(i);
  Axes summed;
  std::vector<int64_t> kept;  // the output dimensions left after the sum
  for (int64_t o = 0; o < r; ++o) {
    const int64_t i = source[o];
    const bool stretched = out[o] != 1 && (i < 0 || xs[i] == 1);
    (stretched ? summed : kept).push_back(o);
  }
  Tensor g = summed.empty() ? dz : sum(dz, summed);
  // x's mapped dimensions in x's order, then the size-1 ones nothing maps to.
  Axes perm;
  for (size_t i = 0; i < xs.size(); ++i) {
    auto at = std::find(kept.begin(), kept.end(), norm(dims_attr[i], r));
    if (at != kept.end()) perm.push_back(at - kept.begin());
  }
  for (size_t k = 0; k < kept.size(); ++k)
    if (source[kept[k]] < 0) perm.push_back(static_cast<int64_t>(k));
  if (!std::is_sorted(perm.begin(), perm.end())) g = transpose(g, perm);
  return shaped_like(g, x);
}

std::vector<Tensor> broadcast_in_dim_gradient(const GradContext& ctx) {
  return {broadcast_gradient(ctx.output_grads[0], ctx.inputs[0], ctx.outputs[0].shape(),
                             ctx.attrs().get_ints("dims"))};
}

std::vector<Tensor> broadcast_like_gradient(const GradContext& ctx) {
  return {broadcast_gradient(ctx.output_grads[0], ctx.inputs[0], ctx.outputs[0].shape(),
                             ctx.attrs().get_ints("dims")),
          Tensor()};
}

}  // namespace

KILN_REGISTER_OP(broadcast_in_dim)
    .input("x")
    .index_map(broadcast_map)
    .shape_fn([](const InferContext& ctx) {
      return broadcast_type(ctx, ctx.attrs().get_ints("shape"), /*from_like=*/false);
    })
    .gradient(broadcast_in_dim_gradient);
KILN_REGISTER_KERNEL(broadcast_in_dim).fn(broadcast_kernel);

KILN_REGISTER_OP(broadcast_like)
    .input("x")
    .input("like")
    .index_map(broadcast_map)
    .shape_fn([](const InferContext& ctx) {
      return broadcast_type(ctx, ctx.input(1).shape, /*from_like=*/true);
    })
    .gradient(broadcast_like_gradient);
KILN_REGISTER_KERNEL(broadcast_like).fn(broadcast_kernel);

// ---- reshape ----------------------------------------------------------------------------

namespace {
// The row-major view of the output over the same elements, when x's view is row-major (a
// reshape of a transposed or sliced view is no strided view).
std::optional<StridedView> reshape_map(const StridedView& x, const Shape& xs, const Shape& out,
                                       const Attrs&) {
  StridedView row = row_major_view(xs);
  for (size_t d = 0; d < xs.size(); ++d)
    if (xs[d] != 1 && x.strides[d] != row.strides[d]) return std::nullopt;
  return StridedView{row_major_view(out).strides, x.offset};
}
}  // namespace

KILN_REGISTER_OP(reshape).input("x").index_map(reshape_map).shape_fn([](const InferContext& ctx) {
  const TensorType& x = ctx.input(0);
  Shape out = ctx.attrs().get_ints("shape");
  int inferred = -1;
  int64_t known = 1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      if (inferred >= 0) {
        ctx.fail("target shape " + ints_str(out) + " has more than one -1 dimension");
      }
      inferred = static_cast<int>(i);
    } else if (out[i] < 0) {
      ctx.fail("target shape " + ints_str(out) + " has a negative dimension");
    }
  }
  require_sane_size(ctx, out);
  for (int64_t d : out) known *= d < 0 ? 1 : d;
  const int64_t n = num_elements(x.shape);
  if (n == kUnknownDim) return std::vector<TensorType>{{x.dtype, out}};
  const std::string what = "cannot reshape " + shape_str(x.shape) + " (" + std::to_string(n) +
                           " elements) to " + ints_str(out);
  if (inferred >= 0) {
    if (known == 0 || n % known != 0) {
      ctx.fail(what + ": no size for the -1 dimension gives " + std::to_string(n) + " elements");
    }
    out[inferred] = n / known;
  } else if (known != n) {
    ctx.fail(what + " (" + std::to_string(known) + " elements)");
  }
  return std::vector<TensorType>{{x.dtype, out}};
});

KILN_REGISTER_KERNEL(reshape).fn([](KernelContext& ctx) {
  ctx.set_output(0, alias(ctx.input(0), ctx.output_type(0).shape));
});
KILN_REGISTER_GRADIENT(reshape, [](const GradContext& ctx) -> Grads {
  return {shaped_like(ctx.output_grads[0], ctx.inputs[0])};
});

// reshape_like(x, like): x's elements in like's shape, known when the graph runs.
KILN_REGISTER_OP(reshape_like)
    .input("x")
    .input("like")
    .index_map(reshape_map)
    .shape_fn([](const InferContext& ctx) {
      const TensorType &x = ctx.input(0), &like = ctx.input(1);
      const int64_t n = num_elements(x.shape), m = num_elements(like.shape);
      if (n != kUnknownDim && m != kUnknownDim && n != m) {
        ctx.fail("cannot reshape " + shape_str(x.shape) + " (" + std::to_string(n) +
                 " elements) to the shape " + shape_str(like.shape) + " of like (" +
                 std::to_string(m) + " elements)");
      }
      return std::vector<TensorType>{{x.dtype, like.shape}};
    });
KILN_REGISTER_KERNEL(reshape_like).fn([](KernelContext& ctx) {
  ctx.set_output(0, alias(ctx.input(0), ctx.output_type(0).shape));
});
KILN_REGISTER_GRADIENT(reshape_like, [](const GradContext& ctx) -> Grads {
  return {shaped_like(ctx.output_grads[0], ctx.inputs[0]), Tensor()};
});

// ---- transpose --------------------------------------------------------------------------

namespace {
// Output dimension i is x's dimension perm[i].
std::optional<StridedView> transpose_map(const StridedView& x, const Shape&, const Shape&,
                                         const Attrs& attrs) {
  const std::vector<int64_t>& perm = attrs.get_ints("perm");
  const int64_t r = static_cast<int64_t>(perm.size());
  StridedView v{{}, x.offset};
  for (int64_t i = 0; i < r; ++i) v.strides.push_back(x.strides[norm(perm[i], r)]);
  return v;
}
}  // namespace

KILN_REGISTER_OP(transpose).input("x").index_map(transpose_map).shape_fn([](const InferContext& ctx) {
  const TensorType& x = ctx.input(0);
  const std::vector<int64_t>& perm = ctx.attrs().get_ints("perm");
  const int64_t r = rank_of(x);
  std::vector<bool> seen(r, false);
  bool valid = static_cast<int64_t>(perm.size()) == r;
  for (size_t i = 0; valid && i < perm.size(); ++i) {
    int64_t p = perm[i] < 0 ? perm[i] + r : perm[i];
    valid = p >= 0 && p < r && !seen[p];
    if (valid) seen[p] = true;
  }
  if (!valid) {
    ctx.fail("perm " + ints_str(perm) + " is not a permutation of the " + std::to_string(r) +
             " dimensions of shape " + shape_str(x.shape));
  }
  Shape out(r);
  for (int64_t i = 0; i < r; ++i) out[i] = x.shape[norm(perm[i], r)];
  return std::vector<TensorType>{{x.dtype, out}};
});

KILN_REGISTER_KERNEL(transpose).fn([](KernelContext& ctx) { copy_through(ctx, transpose_map); });
// The inverse permutation: x's dimension perm[i] is z's dimension i.
KILN_REGISTER_GRADIENT(transpose, [](const GradContext& ctx) -> Grads {
  const std::vector<int64_t>& perm = ctx.attrs().get_ints("perm");
  const int64_t r = static_cast<int64_t>(perm.size());
  Axes inverse(r);
  for (int64_t i = 0; i < r; ++i) inverse[norm(perm[i], r)] = i;
  return {transpose(ctx.output_grads[0], inverse)};
});

// ---- slice ------------------------------------------------------------------------------
// x[start:limit:strides] per dimension, with 0 <= start <= limit <= size and strides >= 1. A limit
// of kUnknownDim takes the whole dimension (start 0, stride 1), known or not: a loop body traced
// for a batch of any size slices its other dimensions this way.

namespace {
std::vector<int64_t> slice_strides(const Attrs& attrs, size_t rank) {
  return attrs.has("strides") && !attrs.get_ints("strides").empty() ? attrs.get_ints("strides")
                                                                    : std::vector<int64_t>(rank, 1);
}

// Starts at x's element `start`, stepping `strides` elements of x per output element.
std::optional<StridedView> slice_map(const StridedView& x, const Shape& xs, const Shape& out,
                                     const Attrs& attrs) {
  const std::vector<int64_t>& start = attrs.get_ints("start");
  std::vector<int64_t> step = slice_strides(attrs, xs.size());
  StridedView v{{}, x.offset};
  for (size_t d = 0; d < xs.size(); ++d) {
    // A dimension of size 1 never steps (and its stride may be huge).
    v.strides.push_back(out[d] > 1 ? x.strides[d] * step[d] : 0);
    v.offset += start[d] * x.strides[d];
  }
  return v;
}
}  // namespace

KILN_REGISTER_OP(slice).input("x").index_map(slice_map).shape_fn([](const InferContext& ctx) {
  const TensorType& x = ctx.input(0);
  const std::vector<int64_t>& start = ctx.attrs().get_ints("start");
  const std::vector<int64_t>& limit = ctx.attrs().get_ints("limit");
  std::vector<int64_t> strides = slice_strides(ctx.attrs(), x.shape.size());
  require_per_dim(ctx, "start", start);
  require_per_dim(ctx, "limit", limit);
  require_per_dim(ctx, "strides", strides);
  Shape out(x.shape.size());
  for (size_t d = 0; d < out.size(); ++d) {
    const std::string where =
        " in dimension " + std::to_string(d) + " of shape " + shape_str(x.shape);
    if (strides[d] < 1) {
      ctx.fail("stride " + std::to_string(strides[d]) + where + " is not positive");
    }
    if (limit[d] == kUnknownDim) {
      if (start[d] != 0 || strides[d] != 1) {
        ctx.fail("a whole dimension (limit -1) needs start 0 and stride 1" + where);
      }
      out[d] = x.shape[d];
      continue;
    }
    if (start[d] < 0) ctx.fail("start " + std::to_string(start[d]) + where + " is negative");
    if (start[d] > limit[d]) {
      ctx.fail("start " + std::to_string(start[d]) + " is greater than limit " +
               std::to_string(limit[d]) + where);
    }
    if (x.shape[d] != kUnknownDim && limit[d] > x.shape[d]) {
      ctx.fail("limit " + std::to_string(limit[d]) + " exceeds the size " +
               std::to_string(x.shape[d]) + where);
    }
    const int64_t span = limit[d] - start[d];
    out[d] = span == 0 ? 0 : 1 + (span - 1) / strides[d];
  }
  return std::vector<TensorType>{{x.dtype, out}};
});

KILN_REGISTER_KERNEL(slice).fn([](KernelContext& ctx) { copy_through(ctx, slice_map); });

namespace {
// dz padded back into x's shape with zeros: low = start, interior = stride - 1. A dimension of
// x of unknown size cannot be padded (its high padding is unknown): dz is scattered into zeros
// there instead, one such dimension at a time, into zeros shaped like x gathered along the
// unknown dimensions not yet restored.
Grads slice_gradient(const GradContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  const Shape &xs = x.shape(), &zs = ctx.outputs[0].shape();
  const std::vector<int64_t>& start = ctx.attrs().get_ints("start");
  const std::vector<int64_t>& limit = ctx.attrs().get_ints("limit");
  const std::vector<int64_t> strides = slice_strides(ctx.attrs(), xs.size());
  const size_t r = xs.size();
  Axes low(r, 0), high(r, 0), interior(r, 0), unknown;
  for (size_t d = 0; d < r; ++d) {
    if (limit[d] == kUnknownDim) continue;  // the whole dimension: no padding
    if (xs[d] == kUnknownDim) {
      unknown.push_back(static_cast<int64_t>(d));
      continue;
    }
    const int64_t used = zs[d] == 0 ? 0 : (zs[d] - 1) * strides[d] + 1;
    low[d] = start[d];
    high[d] = xs[d] - start[d] - used;
    interior[d] = zs[d] > 1 ? strides[d] - 1 : 0;
  }
  Tensor g = pad(ctx.output_grads[0], low, high, 0, interior);
  auto taken = [&](int64_t d) { return positions(start[d], zs[d], strides[d]); };
  for (size_t j = unknown.size(); j-- > 0;) {
    Tensor base = x;
    for (size_t i = 0; i < j; ++i) base = gather(base, taken(unknown[i]), unknown[i]);
    g = scatter_add(zeros_like(base), taken(unknown[j]), g, unknown[j]);
  }
  return {g};
}
}  // namespace

KILN_REGISTER_GRADIENT(slice, slice_gradient);

// ---- concatenate ------------------------------------------------------------------------

namespace {
// Input i fills its run of the axis, after the inputs before it.
std::vector<std::optional<Piece>> concatenate_pieces(const std::vector<Shape>& in,
                                                     const Shape& out, const Attrs& attrs) {
  const int64_t r = static_cast<int64_t>(out.size());
  const int64_t axis = norm(attrs.get_int("axis"), r);
  std::vector<std::optional<Piece>> pieces;
  int64_t at = 0;
  for (const Shape& s : in) {
    Piece p{std::vector<int64_t>(r, 0), out, std::vector<int64_t>(r, 1)};
    p.lo[axis] = at;
    p.hi[axis] = at + s[axis];
    at += s[axis];
    pieces.push_back(std::move(p));
  }
  return pieces;
}
}  // namespace

KILN_REGISTER_OP(concatenate)
    .variadic_input("xs")
    .pieces(concatenate_pieces)
    .shape_fn([](const InferContext& ctx) {
      require_same_dtype(ctx);
      const TensorType& x0 = ctx.input(0);
      const int64_t r = rank_of(x0);
      if (r == 0) ctx.fail("cannot concatenate scalars: " + types_str(ctx));
      for (int i = 1; i < ctx.num_inputs(); ++i) {
        if (rank_of(ctx.input(i)) != r) ctx.fail("ranks differ: " + types_str(ctx));
      }
      const int64_t axis = normalize_axis(ctx, ctx.attrs().get_int("axis"), r, x0.shape);
      Shape out = x0.shape;
      for (int i = 1; i < ctx.num_inputs(); ++i) {
        const Shape& s = ctx.input(i).shape;
        for (int64_t d = 0; d < r; ++d) {
          if (d == axis) {
            out[d] = out[d] == kUnknownDim || s[d] == kUnknownDim ? kUnknownDim : out[d] + s[d];
          } else if (out[d] == kUnknownDim) {
            out[d] = s[d];
          } else if (s[d] != kUnknownDim && s[d] != out[d]) {
            ctx.fail("dimension " + std::to_string(d) + " differs (concatenating along axis " +
                     std::to_string(axis) + "): " + types_str(ctx));
          }
        }
      }
      return std::vector<TensorType>{{x0.dtype, out}};
    });

KILN_REGISTER_KERNEL(concatenate).fn([](KernelContext& ctx) {
  copy_pieces(ctx, concatenate_pieces);
});

namespace {
// Each input's range of dz along the axis.
Grads concatenate_gradient(const GradContext& ctx) {
  const Tensor& dz = ctx.output_grads[0];
  const int64_t axis = norm(ctx.attrs().get_int("axis"), dz.rank());
  Grads grads;
  int64_t at = 0;
  for (size_t i = 0; i < ctx.inputs.size(); ++i) {
    const int64_t n = ctx.inputs[i].shape()[axis];
    if (n == kUnknownDim) {
      unknown_size_fail(ctx, "the size of input " + std::to_string(i) + " " +
                                 shape_str(ctx.inputs[i].shape()) + " along axis " +
                                 std::to_string(axis));
    }
    grads.push_back(take_range(dz, axis, at, n, 1));
    at += n;
  }
  return grads;
}
}  // namespace

KILN_REGISTER_GRADIENT(concatenate, concatenate_gradient);

// ---- pad --------------------------------------------------------------------------------
// low/high elements before/after each dimension and `interior` between its elements, all
// filled with the scalar `value`.

namespace {
std::vector<int64_t> interior_of(const Attrs& attrs, size_t rank) {
  return attrs.has("interior") && !attrs.get_ints("interior").empty()
             ? attrs.get_ints("interior")
             : std::vector<int64_t>(rank, 0);
}
}  // namespace

namespace {
// x's elements sit `low` into each dimension, `interior` apart; the value fills the rest.
std::vector<std::optional<Piece>> pad_pieces(const std::vector<Shape>& in, const Shape&,
                                             const Attrs& attrs) {
  const Shape& xs = in[0];
  const std::vector<int64_t>& low = attrs.get_ints("low");
  const std::vector<int64_t> interior = interior_of(attrs, xs.size());
  Piece p;
  for (size_t d = 0; d < xs.size(); ++d) {
    p.lo.push_back(low[d]);
    p.step.push_back(interior[d] + 1);
    p.hi.push_back(low[d] + (xs[d] == 0 ? 0 : (xs[d] - 1) * (interior[d] + 1) + 1));
  }
  return {std::move(p), std::nullopt};
}
}  // namespace

KILN_REGISTER_OP(pad)
    .input("x")
    .input("value")
    .pieces(pad_pieces)
    .shape_fn([](const InferContext& ctx) {
      require_same_dtype(ctx);
      const TensorType& x = ctx.input(0);
      if (!ctx.input(1).shape.empty()) {
        ctx.fail("the padding value must be a scalar, got " + ctx.input(1).str());
      }
      const std::vector<int64_t>& low = ctx.attrs().get_ints("low");
      const std::vector<int64_t>& high = ctx.attrs().get_ints("high");
      std::vector<int64_t> interior = interior_of(ctx.attrs(), x.shape.size());
      require_per_dim(ctx, "low", low);
      require_per_dim(ctx, "high", high);
      require_per_dim(ctx, "interior", interior);
      Shape out(x.shape.size());
      for (size_t d = 0; d < out.size(); ++d) {
        if (low[d] < 0 || high[d] < 0 || interior[d] < 0 || low[d] > kMaxElements ||
            high[d] > kMaxElements || interior[d] > kMaxElements) {
          ctx.fail("low " + ints_str(low) + ", high " + ints_str(high) + " and interior " +
                   ints_str(interior) + " must be non-negative (and not huge); shape " +
                   shape_str(x.shape));
        }
        const int64_t n = x.shape[d];
        if (n == kUnknownDim) {
          out[d] = kUnknownDim;
          continue;
        }
        if (n > 1 && interior[d] > kMaxElements / (n - 1)) {
          ctx.fail("interior " + ints_str(interior) + " makes too many elements for shape " +
                   shape_str(x.shape));
        }
        out[d] = low[d] + high[d] + n + std::max<int64_t>(n - 1, 0) * interior[d];
      }
      require_sane_size(ctx, out);
      return std::vector<TensorType>{{x.dtype, out}};
    });

KILN_REGISTER_KERNEL(pad).fn([](KernelContext& ctx) { copy_pieces(ctx, pad_pieces); });

namespace {
// x's elements are dz[low : : interior + 1] in each dimension; the padding value's gradient
// is the sum of dz over the padded positions, i.e. sum(dz) - sum(dx).
Grads pad_gradient(const GradContext& ctx) {
  const Tensor &x = ctx.inputs[0], &dz = ctx.output_grads[0];
  const Shape& xs = x.shape();
  const std::vector<int64_t>& low = ctx.attrs().get_ints("low");
  const std::vector<int64_t>& high = ctx.attrs().get_ints("high");
  const std::vector<int64_t> interior = interior_of(ctx.attrs(), xs.size());
  Tensor dx = dz;
  if (is_fully_defined(xs)) {
    Axes limit(xs.size()), strides(xs.size());
    for (size_t d = 0; d < xs.size(); ++d) {
      limit[d] = low[d] + (xs[d] == 0 ? 0 : (xs[d] - 1) * (interior[d] + 1) + 1);
      strides[d] = xs[d] > 1 ? interior[d] + 1 : 1;
    }
    dx = slice(dz, low, limit, strides);
  } else {
    for (size_t d = 0; d < xs.size(); ++d) {
      if (low[d] == 0 && high[d] == 0 && (interior[d] == 0 || (xs[d] >= 0 && xs[d] <= 1))) continue;
      if (xs[d] == kUnknownDim) {
        unknown_size_fail(ctx, "dimension " + std::to_string(d) + " of x " + shape_str(xs) +
                                   ", which is padded,");
      }
      dx = take_range(dx, static_cast<int64_t>(d), low[d], xs[d], interior[d] + 1);
    }
  }
  return {dx, sum(dz) - sum(dx)};
}
}  // namespace

KILN_REGISTER_GRADIENT(pad, pad_gradient);

// ---- reverse ----------------------------------------------------------------------------

namespace {
// A reversed dimension starts at x's last element and steps backwards.
std::optional<StridedView> reverse_map(const StridedView& x, const Shape& xs, const Shape&,
                                       const Attrs& attrs) {
  const int64_t r = static_cast<int64_t>(xs.size());
  StridedView v = x;
  for (int64_t a : attrs.get_ints("axes")) {
    const int64_t d = norm(a, r);
    if (xs[d] == 0) continue;
    v.offset += (xs[d] - 1) * v.strides[d];
    v.strides[d] = -v.strides[d];
  }
  return v;
}
}  // namespace

KILN_REGISTER_OP(reverse).input("x").index_map(reverse_map).shape_fn([](const InferContext& ctx) {
  const TensorType& x = ctx.input(0);
  unique_axes(ctx, "axes", ctx.attrs().get_ints("axes"), rank_of(x), x.shape);
  return std::vector<TensorType>{x};
});

KILN_REGISTER_KERNEL(reverse).fn([](KernelContext& ctx) {
  copy_through(ctx, reverse_map);
});
KILN_REGISTER_GRADIENT(reverse, [](const GradContext& ctx) -> Grads {
  return {reverse(ctx.output_grads[0], ctx.attrs().get_ints("axes"))};
});

}  // namespace ops

// ---- public functions -------------------------------------------------------------------
namespace {

Tensor call1(const std::string& op, const std::vector<Tensor>& inputs, const Attrs& attrs) {
  return call_op(op, inputs, attrs)[0];
}

[[noreturn]] void fail(const std::string& op, const std::string& message) {
  throw Error(ErrorCode::kInvalidArgument, op + ": " + message);
}

// An axis in [-rank, rank) made non-negative, or an error naming op, axis and shape.
int64_t axis_in(const std::string& op, int64_t axis, int64_t rank, const Shape& shape) {
  if (axis < -rank || axis >= rank) {
    fail(op, "axis " + std::to_string(axis) + " is out of range for shape " + shape_str(shape) +
                 " (rank " + std::to_string(rank) + ")");
  }
  return axis < 0 ? axis + rank : axis;
}

// Reshapes x (whose dimensions may be unknown while recording) to `shape`, where unknown
// dimensions are copied from x. reshape infers at most one of them, so with more the caller
// gets a clear error instead of a wrong guess.
Tensor reshape_for(const std::string& op, const Tensor& x, const Shape& shape) {
  if (std::count(shape.begin(), shape.end(), kUnknownDim) > 1) {
    fail(op, "the result " + shape_str(shape) + " of shape " + shape_str(x.shape()) +
                 " has more than one unknown dimension, which reshape cannot record");
  }
  return reshape(x, shape);
}

}  // namespace

Tensor broadcast_in_dim(const Tensor& x, Shape shape, Axes dims) {
  return call1("broadcast_in_dim", {x}, {{"shape", std::move(shape)}, {"dims", std::move(dims)}});
}

Tensor broadcast_to(const Tensor& x, Shape shape) {
  const Shape& xs = x.shape();
  if (xs.size() > shape.size()) {
    fail("broadcast_to", "cannot broadcast " + shape_str(xs) + " to " + shape_str(shape) +
                             ": the target has fewer dimensions");
  }
  const size_t lead = shape.size() - xs.size();
  for (size_t i = 0; i < xs.size(); ++i) {
    int64_t xd = xs[i], od = shape[lead + i];
    if (xd != 1 && xd != kUnknownDim && od != kUnknownDim && xd != od) {
      fail("broadcast_to", "cannot broadcast " + shape_str(xs) + " to " + shape_str(shape) +
                               " (dimension " + std::to_string(lead + i) + ": " +
                               std::to_string(xd) + " vs " + std::to_string(od) + ")");
    }
  }
  if (xs == shape && is_fully_defined(shape)) return x;
  Axes dims(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) dims[i] = static_cast<int64_t>(lead + i);
  return broadcast_in_dim(x, std::move(shape), std::move(dims));
}

Tensor reshape(const Tensor& x, Shape shape) {
  if (x.defined() && x.shape() == shape && is_fully_defined(shape)) return x;
  return call1("reshape", {x}, {{"shape", std::move(shape)}});
}

Tensor transpose(const Tensor& x, Axes perm) {
  return call1("transpose", {x}, {{"perm", std::move(perm)}});
}

Tensor transpose(const Tensor& x) {
  Axes perm(x.rank());
  for (int64_t i = 0; i < x.rank(); ++i) perm[i] = x.rank() - 1 - i;
  return transpose(x, std::move(perm));
}

Tensor flatten(const Tensor& x, int64_t start_axis, int64_t end_axis) {
  const Shape& s = x.shape();
  const int64_t r = x.rank();
  if (r == 0) return reshape(x, {1});
  int64_t start = axis_in("flatten", start_axis, r, s);
  int64_t end = axis_in("flatten", end_axis, r, s);
  if (start > end) {
    fail("flatten", "start_axis " + std::to_string(start_axis) + " comes after end_axis " +
                        std::to_string(end_axis) + " for shape " + shape_str(s));
  }
  Shape out(s.begin(), s.begin() + start);
  int64_t n = 1;
  for (int64_t d = start; d <= end; ++d)
    n = (n == kUnknownDim || s[d] < 0) ? kUnknownDim : n * s[d];
  out.push_back(n);
  out.insert(out.end(), s.begin() + end + 1, s.end());
  return reshape_for("flatten", x, out);
}

Tensor expand_dims(const Tensor& x, int64_t axis) {
  const Shape& s = x.shape();
  const int64_t r = x.rank();
  if (axis < -(r + 1) || axis > r) {
    fail("expand_dims", "axis " + std::to_string(axis) + " is out of range for shape " +
                            shape_str(s) + " (valid: " + std::to_string(-(r + 1)) + " to " +
                            std::to_string(r) + ")");
  }
  const int64_t a = axis < 0 ? axis + r + 1 : axis;
  Shape out = s;
  out.insert(out.begin() + a, 1);
  // With unknown dimensions reshape would have to infer a size; broadcast_in_dim copies them.
  if (is_fully_defined(s)) return reshape(x, std::move(out));
  Axes dims;
  for (int64_t i = 0; i <= r; ++i)
    if (i != a) dims.push_back(i);
  return broadcast_in_dim(x, std::move(out), std::move(dims));
}

Tensor squeeze(const Tensor& x, Axes axes) {
  const Shape& s = x.shape();
  const int64_t r = x.rank();
  std::vector<bool> drop(r, false);
  if (axes.empty()) {
    for (int64_t d = 0; d < r; ++d) drop[d] = s[d] == 1;
  }
  for (int64_t axis : axes) {
    int64_t d = axis_in("squeeze", axis, r, s);
    if (s[d] != 1) {
      fail("squeeze", "cannot squeeze axis " + std::to_string(axis) + " of shape " + shape_str(s) +
                          ": its size is " +
                          (s[d] == kUnknownDim ? "unknown" : std::to_string(s[d])) + ", not 1");
    }
    drop[d] = true;
  }
  Shape out;
  for (int64_t d = 0; d < r; ++d)
    if (!drop[d]) out.push_back(s[d]);
  return reshape_for("squeeze", x, out);
}

Tensor slice(const Tensor& x, Axes start, Axes limit, Axes strides) {
  if (strides.empty()) strides.assign(start.size(), 1);
  return call1(
      "slice", {x},
      {{"start", std::move(start)}, {"limit", std::move(limit)}, {"strides", std::move(strides)}});
}

Tensor concatenate(const std::vector<Tensor>& xs, int64_t axis) {
  if (xs.empty()) fail("concatenate", "needs at least one tensor");
  DType dtype = xs[0].dtype();
  for (const Tensor& x : xs) dtype = promote_types(dtype, x.dtype());
  std::vector<Tensor> converted;
  for (const Tensor& x : xs) converted.push_back(convert(x, dtype));
  return call1("concatenate", converted, {{"axis", axis}});
}

Tensor pad(const Tensor& x, Axes low, Axes high, double value, Axes interior) {
  if (interior.empty()) interior.assign(low.size(), 0);
  return call1(
      "pad", {x, full({}, value, x.dtype())},
      {{"low", std::move(low)}, {"high", std::move(high)}, {"interior", std::move(interior)}});
}

Tensor reverse(const Tensor& x, Axes axes) {
  return call1("reverse", {x}, {{"axes", std::move(axes)}});
}

Tensor reshape_like(const Tensor& x, const Tensor& like) {
  if (x.defined() && like.defined() && x.shape() == like.shape() && is_fully_defined(x.shape()))
    return x;
  return call1("reshape_like", {x, like}, {});
}

Tensor broadcast_like(const Tensor& x, const Tensor& like, Axes dims) {
  return call1("broadcast_like", {x, like}, {{"dims", std::move(dims)}});
}

}  // namespace kiln
