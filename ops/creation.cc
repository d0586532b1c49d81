// Creation: the iota primitive, and the public functions that make filled tensors (zeros,
// ones, full, arange, and the *_like forms, which follow a symbolic tensor's shape).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <limits>
#include <sstream>
#include <utility>

#include "kiln/graph.h"
#include "kiln/ops.h"
#include "ops/kernel_util.h"
#include "src/core/float16_rounding.h"

namespace kiln {
namespace {

using ops::ints_str;

[[noreturn]] void fail(const std::string& op, const std::string& message) {
  throw Error(ErrorCode::kInvalidArgument, op + ": " + message);
}

// A double with the digits that tell it apart (1.5, not to_string's 1.500000).
std::string number_str(double v) {
  std::ostringstream s;
  s << std::setprecision(17) << v;
  return s.str();
}

// Refuses shapes whose element count would overflow int64 arithmetic.
void require_sane_size(const std::string& op, const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d <= 0) continue;
    if (n > (int64_t{1} << 50) / d) fail(op, "shape " + ints_str(shape) + " has too many elements");
    n *= d;
  }
}

}  // namespace

namespace ops {

// ---- iota -------------------------------------------------------------------------------
// Values along `dimension` count 0, 1, 2, ...; constant along every other dimension.

KILN_REGISTER_OP(iota)
    .kind(OpKind::kCodegen)
    .non_differentiable()
    .shape_fn([](const InferContext& ctx) {
      const Shape& shape = ctx.attrs().get_ints("shape");
      const DType dtype = ctx.attrs().get_dtype("dtype");
      if (!is_fully_defined(shape)) {
        ctx.fail("shape " + ints_str(shape) + " must have known, non-negative dimensions");
      }
      if (shape.empty()) ctx.fail("shape [] has no dimension to count along");
      require_sane_size(ctx.op(), shape);
      if (!dtype_in(TypeSet::kNumeric, dtype)) {
        ctx.fail(std::string("not defined for dtype ") + dtype_name(dtype));
      }
      normalize_axis(ctx, ctx.attrs().get_int("dimension"), static_cast<int64_t>(shape.size()),
                     shape);
      return std::vector<TensorType>{{dtype, shape}};
    });

KILN_REGISTER_KERNEL(iota).dtypes(dtypes_of(TypeSet::kNumeric)).fn([](KernelContext& ctx) {
  Tensor& out = ctx.allocate_output(0);
  const Shape& shape = out.shape();
  const int64_t rank = static_cast<int64_t>(shape.size());
  int64_t dim = ctx.attrs().get_int("dimension");
  if (dim < 0) dim += rank;
  const int64_t n = shape[dim];
  const int64_t inner = row_major_strides(shape)[dim];
  if (out.size() == 0) return;
  visit_in<TypeSet::kNumeric>(ctx, out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* y = out_ptr<T>(out);
    // One row of `inner` equal values per (outer, i) pair.
    const int64_t rows = out.size() / inner;
    runtime::parallel_for(rows, std::max<int64_t>(1, (1 << 15) / inner), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        T v{};
        if constexpr (kIsFloat<T>) {
          v = float_cast<T>(r % n);  // rounded once, also for bf16 past 2^24
        } else {
          v = static_cast<T>(r % n);
        }
        std::fill(y + r * inner, y + (r + 1) * inner, v);
      }
    });
  });
});

}  // namespace ops

namespace {

// `v` as a T: integers saturate (NaN becomes 0), bool is v != 0.
template <class T>
T from_double(double v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v != 0;
  } else if constexpr (kIsFloat<T>) {
    return float_cast<T>(v);  // rounded once, also for half and bfloat16
  } else {
    if (std::isnan(v)) return 0;
    if (v <= static_cast<double>(std::numeric_limits<T>::min()))
      return std::numeric_limits<T>::min();
    if (v >= static_cast<double>(std::numeric_limits<T>::max()))
      return std::numeric_limits<T>::max();
    return static_cast<T>(v);
  }
}

Tensor filled(const std::string& op, const Shape& shape, double value, DType dtype) {
  for (int64_t d : shape)
    if (d < 0) fail(op, "shape " + ints_str(shape) + " has a negative dimension");
  require_sane_size(op, shape);
  Tensor t = Tensor::empty(dtype, shape);
  visit_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T v = from_double<T>(value);
    T* y = static_cast<T*>(t.raw_mutable_data());
    runtime::parallel_for(t.size(), 1 << 15,
                          [&](int64_t b, int64_t e) { std::fill(y + b, y + e, v); });
  });
  return t;
}

// A tensor of x's dtype and shape filled with `value`. For a symbolic x it is a node of x's
// graph: a broadcast scalar, to x's shape as known while recording or else as it is when the
// graph runs.
Tensor filled_like(const Tensor& x, double value) {
  if (!x.is_symbolic()) return filled("full_like", x.shape(), value, x.dtype());
  Tensor v = x.graph().constant(filled("full_like", {}, value, x.dtype()));
  if (is_fully_defined(x.shape())) return broadcast_in_dim(v, x.shape(), {});
  return broadcast_like(v, x, {});
}

}  // namespace

Tensor zeros(Shape shape, DType dtype) { return filled("zeros", shape, 0, dtype); }
Tensor ones(Shape shape, DType dtype) { return filled("ones", shape, 1, dtype); }
Tensor full(Shape shape, double value, DType dtype) { return filled("full", shape, value, dtype); }
Tensor zeros_like(const Tensor& t) { return filled_like(t, 0); }
Tensor ones_like(const Tensor& t) { return filled_like(t, 1); }

Tensor arange(double start, double stop, double step, DType dtype) {
  const std::string args = "(start " + std::to_string(start) + ", stop " + std::to_string(stop) +
                           ", step " + std::to_string(step) + ")";
  if (!std::isfinite(start) || !std::isfinite(stop) || !std::isfinite(step)) {
    fail("arange", "arguments must be finite " + args);
  }
  if (step == 0) fail("arange", "step must not be zero " + args);
  // NumPy's integer arange takes its length from the float step but its values from the step
  // cast to the dtype ([0, 1, 2, 3] for (0, 5, 1.5)); rather than that, refuse the fraction.
  if (!is_floating(dtype)) {
    for (auto [name, v] : {std::pair{"start", start}, std::pair{"step", step}}) {
      if (v != std::trunc(v)) {
        fail("arange", std::string(name) + " " + number_str(v) + " is not a whole number; " +
                           dtype_name(dtype) + " arange needs whole start and step " + args);
      }
    }
  }
  const double count = std::ceil((stop - start) / step);
  if (count > static_cast<double>(int64_t{1} << 48)) fail("arange", "too many elements " + args);
  const int64_t n = count > 0 ? static_cast<int64_t>(count) : 0;
  Tensor t = Tensor::empty(dtype, {n});
  visit_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* y = static_cast<T*>(t.raw_mutable_data());
    runtime::parallel_for(n, 1 << 15, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) y[i] = from_double<T>(start + static_cast<double>(i) * step);
    });
  });
  return t;
}

Tensor arange(int64_t stop, DType dtype) { return arange(0, static_cast<double>(stop), 1, dtype); }

Tensor iota(Shape shape, int64_t dimension, DType dtype) {
  return call_op("iota", {},
                 {{"shape", std::move(shape)}, {"dimension", dimension}, {"dtype", dtype}})[0];
}

}  // namespace kiln
