// Layout primitives: broadcast_in_dim, reshape, transpose, slice, concatenate, pad and reverse,
// all moving elements by strided index arithmetic (reshape shares storage); and the public
// functions built on them (broadcast_to, flatten, expand_dims, squeeze).
#include <algorithm>
#include <cstring>

#include "kiln/ops.h"
#include "ops/kernel_util.h"
#include "ops/strided_copy.h"
#include "src/core/tensor_impl.h"

namespace kiln {
namespace ops {
namespace {

// ---- helpers ----------------------------------------------------------------------------

// "[4,-1]": attribute lists are printed with their raw values (shape_str prints -1 as "?").
std::string ints_str(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(v[i]);
  }
  return s + "]";
}

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
  auto impl = std::make_shared<detail::TensorImpl>();
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

}  // namespace

// ---- broadcast_in_dim -------------------------------------------------------------------
// Operand dimension i maps to output dimension dims[i] and must be 1 or equal to it. An
// unknown output dimension that an operand dimension maps to takes the operand's size; one
// that nothing maps to must be known by run time.

KILN_REGISTER_OP(broadcast_in_dim)
    .input("x")
    .kind(OpKind::kCodegen)
    .shape_fn([](const InferContext& ctx) {
      const TensorType& x = ctx.input(0);
      Shape out = ctx.attrs().get_ints("shape");
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
          od = xd;
        } else if (xd != kUnknownDim && xd != 1 && xd != od) {
          ctx.fail("cannot broadcast operand " + shape_str(x.shape) + " to " + shape_str(out) +
                   " with dims " + ints_str(dims_attr) + ": operand dimension " +
                   std::to_string(i) + " has size " + std::to_string(xd) + ", output dimension " +
                   std::to_string(dims[i]) + " has size " + std::to_string(od));
        }
      }
      require_sane_size(ctx, out);
      return std::vector<TensorType>{{x.dtype, out}};
    });

KILN_REGISTER_KERNEL(broadcast_in_dim).fn([](KernelContext& ctx) {
  const Shape& out = ctx.output_type(0).shape;
  if (!is_fully_defined(out)) {
    ctx.fail("output shape " + shape_str(out) + " is not known at run time: give every " +
             "dimension that no operand dimension maps to a size");
  }
  const Shape& xs = ctx.input(0).shape();
  const std::vector<int64_t>& dims = ctx.attrs().get_ints("dims");
  std::vector<int64_t> row = row_major_strides(xs);
  StridedCopy c;
  c.in_strides.assign(out.size(), 0);
  for (size_t i = 0; i < xs.size(); ++i) {
    if (xs[i] != 1) c.in_strides[norm(dims[i], static_cast<int64_t>(out.size()))] = row[i];
  }
  copy_to_output(ctx, std::move(c));
});

// ---- reshape ----------------------------------------------------------------------------

KILN_REGISTER_OP(reshape).input("x").kind(OpKind::kCodegen).shape_fn([](const InferContext& ctx) {
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

// ---- transpose --------------------------------------------------------------------------

KILN_REGISTER_OP(transpose).input("x").kind(OpKind::kCodegen).shape_fn([](const InferContext& ctx) {
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

KILN_REGISTER_KERNEL(transpose).fn([](KernelContext& ctx) {
  const Shape& xs = ctx.input(0).shape();
  const std::vector<int64_t>& perm = ctx.attrs().get_ints("perm");
  const int64_t r = static_cast<int64_t>(xs.size());
  std::vector<int64_t> row = row_major_strides(xs);
  StridedCopy c;
  for (int64_t i = 0; i < r; ++i) c.in_strides.push_back(row[norm(perm[i], r)]);
  copy_to_output(ctx, std::move(c));
});

// ---- slice ------------------------------------------------------------------------------
// x[start:limit:strides] per dimension, with 0 <= start <= limit <= size and strides >= 1.

namespace {
std::vector<int64_t> slice_strides(const Attrs& attrs, size_t rank) {
  return attrs.has("strides") && !attrs.get_ints("strides").empty() ? attrs.get_ints("strides")
                                                                    : std::vector<int64_t>(rank, 1);
}
}  // namespace

KILN_REGISTER_OP(slice).input("x").kind(OpKind::kCodegen).shape_fn([](const InferContext& ctx) {
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

KILN_REGISTER_KERNEL(slice).fn([](KernelContext& ctx) {
  const Shape& xs = ctx.input(0).shape();
  const std::vector<int64_t>& start = ctx.attrs().get_ints("start");
  std::vector<int64_t> strides = slice_strides(ctx.attrs(), xs.size());
  std::vector<int64_t> row = row_major_strides(xs);
  StridedCopy c;
  for (size_t d = 0; d < xs.size(); ++d) {
    // A dimension of size 1 never steps (and its stride may be huge).
    c.in_strides.push_back(ctx.output_type(0).shape[d] > 1 ? row[d] * strides[d] : 0);
    c.in_offset += start[d] * row[d];
  }
  copy_to_output(ctx, std::move(c));
});

// ---- concatenate ------------------------------------------------------------------------

KILN_REGISTER_OP(concatenate)
    .variadic_input("xs")
    .kind(OpKind::kCodegen)
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
  Tensor& out = ctx.allocate_output(0);
  const Shape& os = out.shape();
  const int64_t axis = norm(ctx.attrs().get_int("axis"), static_cast<int64_t>(os.size()));
  std::vector<int64_t> out_row = row_major_strides(os);
  void* dst = out.raw_mutable_data();
  int64_t at = 0;  // position along the axis
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    const Tensor& x = ctx.input(i);
    StridedCopy c;
    c.dims = x.shape();
    c.in_strides = row_major_strides(c.dims);
    c.out_strides = out_row;
    c.out_offset = at * out_row[axis];
    strided_copy(c, dtype_size(x.dtype()), x.raw_data(), dst);
    at += x.shape()[axis];
  }
});

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

KILN_REGISTER_OP(pad)
    .input("x")
    .input("value")
    .kind(OpKind::kCodegen)
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

KILN_REGISTER_KERNEL(pad).fn([](KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  Tensor& out = ctx.allocate_output(0);
  const size_t elem = dtype_size(x.dtype());
  fill(out.raw_mutable_data(), out.size(), elem, ctx.input(1).raw_data());
  const std::vector<int64_t>& low = ctx.attrs().get_ints("low");
  std::vector<int64_t> interior = interior_of(ctx.attrs(), x.shape().size());
  std::vector<int64_t> out_row = row_major_strides(out.shape());
  StridedCopy c;
  c.dims = x.shape();
  c.in_strides = row_major_strides(c.dims);
  for (size_t d = 0; d < c.dims.size(); ++d) {
    c.out_strides.push_back(c.dims[d] > 1 ? out_row[d] * (interior[d] + 1) : 0);
    c.out_offset += low[d] * out_row[d];
  }
  strided_copy(c, elem, x.raw_data(), out.raw_mutable_data());
});

// ---- reverse ----------------------------------------------------------------------------

KILN_REGISTER_OP(reverse).input("x").kind(OpKind::kCodegen).shape_fn([](const InferContext& ctx) {
  const TensorType& x = ctx.input(0);
  unique_axes(ctx, "axes", ctx.attrs().get_ints("axes"), rank_of(x), x.shape);
  return std::vector<TensorType>{x};
});

KILN_REGISTER_KERNEL(reverse).fn([](KernelContext& ctx) {
  const Shape& xs = ctx.input(0).shape();
  const int64_t r = static_cast<int64_t>(xs.size());
  StridedCopy c;
  c.in_strides = row_major_strides(xs);
  for (int64_t a : ctx.attrs().get_ints("axes")) {
    int64_t d = norm(a, r);
    if (xs[d] == 0) continue;
    c.in_offset += (xs[d] - 1) * c.in_strides[d];
    c.in_strides[d] = -c.in_strides[d];
  }
  copy_to_output(ctx, std::move(c));
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

}  // namespace kiln
