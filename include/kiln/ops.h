// The op functions. Each works on concrete tensors (computes now) and on symbolic ones
// (records a node). Binary ops broadcast like NumPy and promote dtypes by promote_types, which
// is not NumPy's rule; docs/numerics.md lists where Kiln differs from NumPy, and why.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kiln/tensor.h"

namespace kiln {

using Axes = std::vector<int64_t>;

// ---- creation -------------------------------------------------------------------------
Tensor zeros(Shape shape, DType dtype = f32);
Tensor ones(Shape shape, DType dtype = f32);
Tensor full(Shape shape, double value, DType dtype = f32);
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
// [start, stop) with step, like numpy.arange: ceil((stop - start) / step) values. For an
// integer dtype, start and step must be whole numbers (kInvalidArgument otherwise; NumPy
// instead steps by the step cast to the dtype); stop may be fractional.
Tensor arange(double start, double stop, double step = 1, DType dtype = f32);
Tensor arange(int64_t stop, DType dtype = i64);
// Values along `dimension` count 0, 1, 2, ... (XLA's iota).
Tensor iota(Shape shape, int64_t dimension, DType dtype = i64);
// Stateless counter-based random numbers: the same (seed, shape) gives the same values.
Tensor random_uniform(Shape shape, uint64_t seed, double low = 0, double high = 1,
                      DType dtype = f32);
Tensor random_normal(Shape shape, uint64_t seed, double mean = 0, double stddev = 1,
                     DType dtype = f32);
Tensor random_bernoulli(Shape shape, uint64_t seed, double p, DType dtype = bool_);
// Variants taking the seed as an i64 scalar tensor (so a graph can vary it per step).
Tensor random_uniform(Shape shape, const Tensor& seed, double low = 0, double high = 1,
                      DType dtype = f32);
Tensor random_normal(Shape shape, const Tensor& seed, double mean = 0, double stddev = 1,
                     DType dtype = f32);
Tensor random_bernoulli(Shape shape, const Tensor& seed, double p, DType dtype = bool_);
// Variants whose shape is that of `like` at run time (its dimensions may be unknown while
// recording, e.g. a dropout mask over a batch of any size).
Tensor random_uniform_like(const Tensor& like, const Tensor& seed, double low = 0,
                           double high = 1, DType dtype = f32);
Tensor random_normal_like(const Tensor& like, const Tensor& seed, double mean = 0,
                          double stddev = 1, DType dtype = f32);
Tensor random_bernoulli_like(const Tensor& like, const Tensor& seed, double p,
                             DType dtype = bool_);

// ---- elementwise unary ------------------------------------------------------------------
Tensor neg(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor log1p(const Tensor& x);
Tensor expm1(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor logistic(const Tensor& x);  // 1 / (1 + exp(-x))
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
Tensor tan(const Tensor& x);
Tensor erf(const Tensor& x);
Tensor sign(const Tensor& x);
Tensor floor(const Tensor& x);
Tensor ceil(const Tensor& x);
Tensor round(const Tensor& x);  // half to even
Tensor logical_not(const Tensor& x);
Tensor is_finite(const Tensor& x);
Tensor square(const Tensor& x);

// ---- elementwise binary (NumPy broadcasting, promote_types promotion) -------------------
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
// Integers: wraps on overflow; a negative exponent is kInvalidArgument when the op runs, as in
// NumPy (convert to a float dtype for 2^-1 = 0.5).
Tensor pow(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor rem(const Tensor& a, const Tensor& b);  // C fmod semantics (sign of a)
Tensor atan2(const Tensor& a, const Tensor& b);
Tensor logical_and(const Tensor& a, const Tensor& b);  // bool inputs only
Tensor logical_or(const Tensor& a, const Tensor& b);
Tensor equal(const Tensor& a, const Tensor& b);
Tensor not_equal(const Tensor& a, const Tensor& b);
Tensor less(const Tensor& a, const Tensor& b);
Tensor less_equal(const Tensor& a, const Tensor& b);
Tensor greater(const Tensor& a, const Tensor& b);
Tensor greater_equal(const Tensor& a, const Tensor& b);
// cond ? a : b elementwise; cond must be bool; all three broadcast together.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor clamp(const Tensor& x, const Tensor& low, const Tensor& high);
Tensor clamp(const Tensor& x, double low, double high);  // numbers as for operator+ below

// A scalar of the same dtype as `like` (for mixing tensors and numbers).
Tensor scalar_like(double value, const Tensor& like);

Tensor operator-(const Tensor& x);
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
// A plain number takes the tensor's dtype. With an integer tensor it must be a whole number
// that dtype holds: u8 + 300 or i32 + 1.5 is kInvalidArgument naming the op, number and dtype
// (JAX also raises for the first; convert the tensor first).
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(double a, const Tensor& b);
Tensor operator==(const Tensor& a, const Tensor& b);
Tensor operator!=(const Tensor& a, const Tensor& b);
Tensor operator<(const Tensor& a, const Tensor& b);
Tensor operator<=(const Tensor& a, const Tensor& b);
Tensor operator>(const Tensor& a, const Tensor& b);
Tensor operator>=(const Tensor& a, const Tensor& b);
Tensor operator!(const Tensor& x);
Tensor operator&&(const Tensor& a, const Tensor& b);
Tensor operator||(const Tensor& a, const Tensor& b);

// ---- dtype and layout -------------------------------------------------------------------
Tensor convert(const Tensor& x, DType dtype);
// Broadcasts x to `shape`; operand dimension i maps to output dimension dims[i].
Tensor broadcast_in_dim(const Tensor& x, Shape shape, Axes dims);
// NumPy-style broadcast of x to `shape`.
Tensor broadcast_to(const Tensor& x, Shape shape);
Tensor reshape(const Tensor& x, Shape shape);  // one dimension may be -1 (inferred)
Tensor transpose(const Tensor& x, Axes perm);
Tensor transpose(const Tensor& x);  // reverses the dimensions
Tensor flatten(const Tensor& x, int64_t start_axis = 0, int64_t end_axis = -1);
Tensor expand_dims(const Tensor& x, int64_t axis);
Tensor squeeze(const Tensor& x, Axes axes);
// x[start:limit:strides] per dimension; a limit of kUnknownDim (-1) takes the whole dimension
// (with start 0 and stride 1), also one whose size is unknown while recording.
Tensor slice(const Tensor& x, Axes start, Axes limit, Axes strides = {});
Tensor concatenate(const std::vector<Tensor>& xs, int64_t axis);
// Pads with `value`: low/high per dimension, and interior (between elements).
Tensor pad(const Tensor& x, Axes low, Axes high, double value = 0, Axes interior = {});
Tensor reverse(const Tensor& x, Axes axes);
// Shapes taken from another tensor when the graph runs, for shapes with dimensions unknown
// while recording (a batch of any size): x's elements in like's shape (the element counts
// must match), and x broadcast to like's shape (operand dimension i to dimension dims[i]).
Tensor reshape_like(const Tensor& x, const Tensor& like);
Tensor broadcast_like(const Tensor& x, const Tensor& like, Axes dims);

// ---- reductions (all axes when `axes` is empty) ------------------------------------------
Tensor sum(const Tensor& x, Axes axes = {}, bool keepdims = false);
Tensor mean(const Tensor& x, Axes axes = {}, bool keepdims = false);
Tensor max(const Tensor& x, Axes axes = {}, bool keepdims = false);
Tensor min(const Tensor& x, Axes axes = {}, bool keepdims = false);
Tensor prod(const Tensor& x, Axes axes = {}, bool keepdims = false);
Tensor any(const Tensor& x, Axes axes = {}, bool keepdims = false);
Tensor all(const Tensor& x, Axes axes = {}, bool keepdims = false);
Tensor variance(const Tensor& x, Axes axes = {}, bool keepdims = false);
Tensor argmax(const Tensor& x, int64_t axis, bool keepdims = false);  // i64 indices
Tensor argmin(const Tensor& x, int64_t axis, bool keepdims = false);

// ---- linear algebra ---------------------------------------------------------------------
// General batched matrix product (XLA's dot_general): output dimensions are the batch
// dimensions, then a's free dimensions, then b's free dimensions.
Tensor dot(const Tensor& a, const Tensor& b, Axes a_contract, Axes b_contract,
           Axes a_batch = {}, Axes b_batch = {});
// numpy.matmul: 1-d operands are promoted; leading batch dimensions broadcast.
Tensor matmul(const Tensor& a, const Tensor& b);

// ---- convolution and pooling (NHWC; kernels HWIO: spatial..., in/groups, out) -----------
struct ConvOptions {
  Axes strides;       // per spatial dimension; default 1
  Axes padding_low;   // default 0
  Axes padding_high;  // default 0
  Axes dilation;      // kernel (rhs) dilation; default 1
  Axes lhs_dilation;  // input dilation (transposed convolution); default 1
  int64_t groups = 1;
};
Tensor conv(const Tensor& input, const Tensor& kernel, const ConvOptions& options = {});
// Keras-style 2-d convolution: padding "same" or "valid".
Tensor conv2d(const Tensor& input, const Tensor& kernel, Axes strides = {1, 1},
              const std::string& padding = "valid");

struct WindowOptions {
  Axes window;  // per dimension of the operand (NHWC: {1, kh, kw, 1})
  Axes strides;
  Axes padding_low;
  Axes padding_high;
};
Tensor reduce_window_max(const Tensor& x, const WindowOptions& options);
Tensor reduce_window_sum(const Tensor& x, const WindowOptions& options);
// Keras-style pooling over NHWC; padding "valid" or "same".
Tensor max_pool2d(const Tensor& x, Axes pool = {2, 2}, Axes strides = {},
                  const std::string& padding = "valid");
Tensor avg_pool2d(const Tensor& x, Axes pool = {2, 2}, Axes strides = {},
                  const std::string& padding = "valid");

// ---- gather / scatter -------------------------------------------------------------------
// numpy.take: out.shape = x.shape[:axis] + indices.shape + x.shape[axis+1:].
// Indices must be i32/i64 in [0, x.dim(axis)); out-of-range indices throw (eager) or
// produce an error at run time.
Tensor gather(const Tensor& x, const Tensor& indices, int64_t axis = 0);
// The adjoint of gather: adds `updates` into a copy of `x` at `indices` along `axis`.
Tensor scatter_add(const Tensor& x, const Tensor& indices, const Tensor& updates,
                   int64_t axis = 0);
Tensor one_hot(const Tensor& indices, int64_t depth, DType dtype = f32);

// ---- neural-network functions (compositions of the primitives above) ---------------------
Tensor relu(const Tensor& x);
Tensor gelu(const Tensor& x, bool approximate = false);  // erf form; tanh form if approximate
Tensor sigmoid(const Tensor& x);
Tensor softplus(const Tensor& x);
Tensor swish(const Tensor& x);  // x * sigmoid(x)
Tensor softmax(const Tensor& x, int64_t axis = -1);
Tensor log_softmax(const Tensor& x, int64_t axis = -1);
Tensor logsumexp(const Tensor& x, Axes axes = {}, bool keepdims = false);

// ---- for gradients ------------------------------------------------------------------------
// The identity, through which no gradient flows.
Tensor stop_gradient(const Tensor& x);

// For gradient rules of broadcasting ops: sums `grad` (the gradient of a broadcast result)
// back to the input's `shape`: over the leading dimensions `shape` lacks and over the
// dimensions where `shape` has 1 and grad does not. A dimension of `shape` that is kUnknownDim
// at record time is taken as not broadcast.
Tensor unbroadcast(const Tensor& grad, const Shape& shape);

// ---- comparison helpers for tests -------------------------------------------------------
// True when shapes match and |a - b| <= atol + rtol * |b| everywhere (NaNs equal NaNs).
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8);

}  // namespace kiln
