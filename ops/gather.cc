// gather (numpy.take along one axis) and its adjoint scatter_add, with bounds-checked
// indices; and one_hot, composed from elementwise ops.
#include <cstdint>
#include <cstring>

#include "kiln/ops.h"
#include "ops/kernel_util.h"

namespace kiln {
namespace ops {
namespace {

// ---- shape functions --------------------------------------------------------------------

void require_index_dtype(const InferContext& ctx, int input) {
  DType d = ctx.input(input).dtype;
  if (d != i32 && d != i64) ctx.fail("indices must be i32 or i64, got " + ctx.input(input).str());
}

// x.shape[:axis] + indices.shape + x.shape[axis+1:].
Shape taken_shape(const Shape& x, int64_t axis, const Shape& indices) {
  Shape out(x.begin(), x.begin() + axis);
  out.insert(out.end(), indices.begin(), indices.end());
  out.insert(out.end(), x.begin() + axis + 1, x.end());
  return out;
}

int64_t checked_axis(const InferContext& ctx) {
  const TensorType& x = ctx.input(0);
  if (x.shape.empty()) ctx.fail("x must have rank >= 1, got " + x.str());
  int64_t rank = static_cast<int64_t>(x.shape.size());
  return normalize_axis(ctx, ctx.attrs().get_int("axis", 0), rank, x.shape);
}

std::vector<TensorType> gather_shape(const InferContext& ctx) {
  require_index_dtype(ctx, 1);
  int64_t axis = checked_axis(ctx);
  return {{ctx.input(0).dtype, taken_shape(ctx.input(0).shape, axis, ctx.input(1).shape)}};
}

std::vector<TensorType> scatter_add_shape(const InferContext& ctx) {
  require_index_dtype(ctx, 1);
  const TensorType& x = ctx.input(0);
  const TensorType& updates = ctx.input(2);
  require_dtype_in(ctx, 0, TypeSet::kNumeric);
  if (updates.dtype != x.dtype) {
    ctx.fail("updates must have the dtype of x: x is " + x.str() + ", updates is " + updates.str());
  }
  int64_t axis = checked_axis(ctx);
  Shape want = taken_shape(x.shape, axis, ctx.input(1).shape);
  bool match = want.size() == updates.shape.size();
  for (size_t i = 0; match && i < want.size(); ++i) {
    match =
        want[i] == updates.shape[i] || want[i] == kUnknownDim || updates.shape[i] == kUnknownDim;
  }
  if (!match) {
    ctx.fail("updates must have shape " + shape_str(want) +
             " (x.shape[:axis] + indices.shape + x.shape[axis+1:] with axis " +
             std::to_string(axis) + "), got " + types_str(ctx));
  }
  return {x};
}

// ---- kernels ----------------------------------------------------------------------------

// x viewed as [outer, dim, inner] around `axis`; `count` indices replace `dim`.
struct TakeGeometry {
  int64_t axis, outer = 1, dim, inner = 1, count;
};

TakeGeometry geometry(const KernelContext& ctx) {
  const Shape& x = ctx.input(0).shape();
  int64_t rank = static_cast<int64_t>(x.size());
  int64_t axis = ctx.attrs().get_int("axis", 0);
  TakeGeometry g;
  g.axis = axis < 0 ? axis + rank : axis;
  for (int64_t d = 0; d < g.axis; ++d) g.outer *= x[d];
  g.dim = x[g.axis];
  for (int64_t d = g.axis + 1; d < rank; ++d) g.inner *= x[d];
  g.count = ctx.input(1).size();
  return g;
}

std::string position_str(int64_t flat, const Shape& shape) {
  std::vector<int64_t> idx(shape.size());
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    idx[d] = flat % shape[d];
    flat /= shape[d];
  }
  return shape_str(idx);
}

// The indices (input 1) widened to i64; any outside [0, dim) fails naming it.
std::vector<int64_t> checked_indices(const KernelContext& ctx, const TakeGeometry& g) {
  const Tensor& indices = ctx.input(1);
  const Tensor& x = ctx.input(0);
  if (std::string why = take_index_error(indices, g.axis, {x.dtype(), x.shape()}); !why.empty())
    ctx.fail(why, ErrorCode::kOutOfRange);
  return indices_as_i64(indices);
}

constexpr int64_t kGrainElements = 1 << 14;

void gather_kernel(KernelContext& ctx) {
  TakeGeometry g = geometry(ctx);
  std::vector<int64_t> idx = checked_indices(ctx, g);
  const Tensor& x = ctx.input(0);
  Tensor& out = ctx.allocate_output(0);
  if (out.size() == 0) return;
  const size_t row_bytes = g.inner * dtype_size(x.dtype());
  const auto* src = static_cast<const char*>(x.raw_data());
  auto* dst = static_cast<char*>(out.raw_mutable_data());
  const int64_t grain = std::max<int64_t>(1, kGrainElements / g.inner);
  // Output row r = (o, j) copies input row (o, idx[j]): rows of one element as words (a
  // memcpy call per element costs ~20x more), longer ones with memcpy.
  auto copy_words = [&](auto word) {
    using W = decltype(word);
    const W* s = reinterpret_cast<const W*>(src);
    W* d = reinterpret_cast<W*>(dst);
    runtime::parallel_for(g.outer * g.count, grain, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) d[r] = s[(r / g.count) * g.dim + idx[r % g.count]];
    });
  };
  switch (row_bytes) {
    case 1:
      copy_words(uint8_t{});
      return;
    case 2:
      copy_words(uint16_t{});
      return;
    case 4:
      copy_words(uint32_t{});
      return;
    case 8:
      copy_words(uint64_t{});
      return;
    default:
      break;
  }
  runtime::parallel_for(g.outer * g.count, grain, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      int64_t o = r / g.count, j = r % g.count;
      std::memcpy(dst + r * row_bytes, src + (o * g.dim + idx[j]) * row_bytes, row_bytes);
    }
  });
}

void scatter_add_kernel(KernelContext& ctx) {
  TakeGeometry g = geometry(ctx);
  std::vector<int64_t> idx = checked_indices(ctx, g);
  const Tensor& x = ctx.input(0);
  Tensor& out = ctx.allocate_output(0);
  if (out.size() == 0) return;
  std::memcpy(out.raw_mutable_data(), x.raw_data(), x.nbytes());
  visit_in<TypeSet::kNumeric>(ctx, x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = ComputeType<T>;
    T* y = out_ptr<T>(out);
    const T* u = in_ptr<T>(ctx, 2);
    // Each task owns a range of (o, k) columns and walks every index in order, so duplicate
    // indices accumulate without races and in the same order for any thread count.
    int64_t grain = std::max<int64_t>(1, kGrainElements / std::max<int64_t>(1, g.count));
    runtime::parallel_for(g.outer * g.inner, grain, [&](int64_t b, int64_t e) {
      for (int64_t s = b; s < e;) {
        int64_t o = s / g.inner, k0 = s % g.inner;
        int64_t k1 = std::min(g.inner, k0 + (e - s));
        for (int64_t j = 0; j < g.count; ++j) {
          T* dst = y + (o * g.dim + idx[j]) * g.inner;
          const T* src = u + (o * g.count + j) * g.inner;
          for (int64_t k = k0; k < k1; ++k) {
            dst[k] = static_cast<T>(static_cast<C>(dst[k]) + static_cast<C>(src[k]));
          }
        }
        s += k1 - k0;
      }
    });
  });
}

// gather's adjoint scatters the gradient back; scatter_add passes it to x and gathers it
// for the updates. Indices have no gradient.
std::vector<Tensor> gather_gradient(const GradContext& g) {
  int64_t axis = g.attrs().get_int("axis", 0);
  Tensor dx = scatter_add(zeros_like(g.inputs[0]), g.inputs[1], g.output_grads[0], axis);
  return {dx, Tensor()};
}

std::vector<Tensor> scatter_add_gradient(const GradContext& g) {
  int64_t axis = g.attrs().get_int("axis", 0);
  const Tensor& dy = g.output_grads[0];
  return {dy, Tensor(), gather(dy, g.inputs[1], axis)};
}

}  // namespace

std::vector<int64_t> indices_as_i64(const Tensor& indices) {
  std::vector<int64_t> out(indices.size());
  if (indices.dtype() == i32) {
    auto d = indices.data<int32_t>();
    std::copy(d.begin(), d.end(), out.begin());
  } else {
    auto d = indices.data<int64_t>();
    std::copy(d.begin(), d.end(), out.begin());
  }
  return out;
}

std::string take_index_error(const Tensor& indices, int64_t axis, const TensorType& x) {
  const int64_t dim = x.shape.at(axis);
  auto first_bad = [&](auto data) -> int64_t {
    for (size_t i = 0; i < data.size(); ++i)
      if (data[i] < 0 || data[i] >= dim) return static_cast<int64_t>(i);
    return -1;
  };
  const int64_t i = indices.dtype() == i32 ? first_bad(indices.data<int32_t>())
                                           : first_bad(indices.data<int64_t>());
  if (i < 0) return "";
  const int64_t value =
      indices.dtype() == i32 ? indices.data<int32_t>()[i] : indices.data<int64_t>()[i];
  return "index " + std::to_string(value) + " at position " + position_str(i, indices.shape()) +
         " of indices " + TensorType{indices.dtype(), indices.shape()}.str() +
         " is out of range [0, " + std::to_string(dim) + ") for axis " + std::to_string(axis) +
         " of x " + x.str();
}

KILN_REGISTER_OP(gather).input("x").input("indices").kind(OpKind::kKernel).shape_fn(gather_shape);
KILN_REGISTER_KERNEL(gather).fn(gather_kernel);
KILN_REGISTER_GRADIENT(gather, gather_gradient);

KILN_REGISTER_OP(scatter_add)
    .input("x")
    .input("indices")
    .input("updates")
    .kind(OpKind::kKernel)
    .shape_fn(scatter_add_shape);
KILN_REGISTER_KERNEL(scatter_add).dtypes(dtypes_of(TypeSet::kNumeric)).fn(scatter_add_kernel);
KILN_REGISTER_GRADIENT(scatter_add, scatter_add_gradient);

}  // namespace ops

// ---- public functions -------------------------------------------------------------------

Tensor gather(const Tensor& x, const Tensor& indices, int64_t axis) {
  return call_op("gather", {x, indices}, {{"axis", axis}})[0];
}

Tensor scatter_add(const Tensor& x, const Tensor& indices, const Tensor& updates, int64_t axis) {
  DType t = promote_types(x.dtype(), updates.dtype());
  return call_op("scatter_add", {convert(x, t), indices, convert(updates, t)}, {{"axis", axis}})[0];
}

// one_hot(indices)[..., c] = (indices[...] == c): iota over the classes compared with the
// indices broadcast along a new last axis. Indices outside [0, depth) give a row of zeros.
Tensor one_hot(const Tensor& indices, int64_t depth, DType dtype) {
  if (!indices.defined() || !is_integer(indices.dtype())) {
    throw Error(ErrorCode::kInvalidArgument,
                std::string("one_hot: indices must be an integer tensor, got ") +
                    (indices.defined() ? TensorType{indices.dtype(), indices.shape()}.str()
                                       : "an undefined tensor"));
  }
  if (depth < 0) {
    throw Error(ErrorCode::kInvalidArgument,
                "one_hot: depth must be non-negative, got " + std::to_string(depth));
  }
  Tensor classes = iota({depth}, 0, indices.dtype());
  return convert(equal(expand_dims(indices, -1), classes), dtype);
}

}  // namespace kiln
