// Conv1D, Conv2DTranspose, DepthwiseConv2D, SeparableConv2D: the convolution op (kiln/ops.h)
// with Keras' padding rules; the transposed convolution runs as a convolution over the
// stride-dilated input with the flipped kernel.
#include "kiln/nn/conv_layers.h"

#include <algorithm>
#include <utility>

#include "kiln/nn/layer_registry.h"
#include "kiln/nn/layers.h"
#include "kiln/ops.h"
#include "src/api/nn/layer_util.h"

namespace kiln::nn {
namespace {

// `values` (kernel_size, strides, ...) of a layer class: `count` numbers, each >= 1.
void check_sizes(const std::string& cls, const std::string& what,
                 const std::vector<int64_t>& values, size_t count) {
  bool ok = values.size() == count;
  for (int64_t v : values) ok = ok && v >= 1;
  if (!ok) {
    throw Error(ErrorCode::kInvalidArgument, cls + ": " + what + " must be " +
                                                 std::to_string(count) +
                                                 " positive integers, got " + detail::ints_str(values));
  }
}

void check_positive(const std::string& cls, const std::string& what, int64_t value) {
  if (value < 1) {
    throw Error(ErrorCode::kInvalidArgument,
                cls + ": " + what + " must be positive, got " + std::to_string(value));
  }
}

void check_padding(const std::string& cls, const std::string& padding, bool causal_too = false) {
  if (padding == "valid" || padding == "same" || (causal_too && padding == "causal")) return;
  throw Error(ErrorCode::kInvalidArgument,
              cls + ": padding must be " +
                  (causal_too ? "\"valid\", \"same\" or \"causal\"" : "\"valid\" or \"same\"") +
                  ", got \"" + padding + "\"");
}

// The input shape of a layer that expects [batch, spatial..., channels] of `rank` with known
// channels; `layout` describes it ("[batch, steps, channels]").
const Shape& channels_last_input(const std::vector<Shape>& shapes, size_t rank, const Layer& layer,
                                 const std::string& layout) {
  if (shapes.size() != 1 || shapes[0].size() != rank || shapes[0].back() == kUnknownDim) {
    std::string got =
        shapes.size() == 1 ? shape_str(shapes[0]) : std::to_string(shapes.size()) + " inputs";
    throw Error(ErrorCode::kInvalidArgument, layer.type_name() + " '" + layer.name() +
                                                 "' expects one input " + layout +
                                                 " with known channels, got " + got);
  }
  return shapes[0];
}

// The convolution options of a Keras padding over x's spatial dimensions (1 .. rank - 2):
// "valid" pads nothing, "same" gives ceil(n / stride) outputs with the odd padding element on
// the high side, "causal" pads the whole window on the low side.
ConvOptions keras_conv(const Layer& layer, const Tensor& x, const std::string& padding,
                       const std::vector<int64_t>& kernel, const std::vector<int64_t>& strides,
                       const std::vector<int64_t>& dilation) {
  ConvOptions o;
  o.strides = strides;
  o.dilation = dilation;
  for (size_t i = 0; i < kernel.size(); ++i) {
    const int64_t window = (kernel[i] - 1) * dilation[i] + 1, s = strides[i], n = x.dim(i + 1);
    int64_t low = 0, high = 0;
    if (padding == "causal") {
      low = window - 1;
    } else if (padding == "same") {
      if (n == kUnknownDim && s > 1) {
        throw Error(ErrorCode::kInvalidArgument,
                    layer.type_name() + " '" + layer.name() + "': \"same\" padding with strides " +
                        detail::ints_str(strides) + " needs known spatial sizes, got input " +
                        shape_str(x.shape()));
      }
      const int64_t out = n == kUnknownDim ? 0 : (n + s - 1) / s;
      const int64_t total =
          n == kUnknownDim ? window - 1 : std::max<int64_t>((out - 1) * s + window - n, 0);
      low = total / 2;
      high = total - low;
    }
    o.padding_low.push_back(low);
    o.padding_high.push_back(high);
  }
  return o;
}

// The convolution of x [b, h, w, c] with each channel on its own: `kernel` [kh, kw, c, m]
// becomes the [kh, kw, 1, c * m] kernel of c groups (group g's outputs are g * m .. g * m + m-1).
Tensor depthwise_conv(const Tensor& x, const Tensor& kernel, ConvOptions options) {
  const Shape& k = kernel.shape();
  options.groups = k[2];
  return conv(x, reshape(kernel, {k[0], k[1], 1, k[2] * k[3]}), options);
}

Tensor bias_and_activation(Tensor y, bool use_bias, const Variable& bias, const std::string& act,
                           CallContext& ctx) {
  if (use_bias) y = y + ctx.read(bias);
  return activation(act)(y);
}

}  // namespace

// ---- Conv1D -------------------------------------------------------------------------------

Conv1D::Conv1D(int64_t filters, int64_t kernel_size, std::string act, int64_t strides,
               std::string padding, int64_t dilation_rate, bool use_bias, Initializer kernel_init,
               Initializer bias_init)
    : Layer("conv1d"),
      filters_(filters),
      kernel_size_(kernel_size),
      strides_(strides),
      dilation_rate_(dilation_rate),
      activation_(std::move(act)),
      padding_(std::move(padding)),
      use_bias_(use_bias),
      kernel_init_(std::move(kernel_init)),
      bias_init_(std::move(bias_init)) {
  check_positive("Conv1D", "filters", filters);
  check_positive("Conv1D", "kernel_size", kernel_size);
  check_positive("Conv1D", "strides", strides);
  check_positive("Conv1D", "dilation_rate", dilation_rate);
  check_padding("Conv1D", padding_, /*causal_too=*/true);
  activation(activation_);
}

void Conv1D::build(const std::vector<Shape>& shapes) {
  int64_t channels = channels_last_input(shapes, 3, *this, "[batch, steps, channels]").back();
  kernel_ = add_weight("kernel", {kernel_size_, channels, filters_}, kernel_init_);
  if (use_bias_) bias_ = add_weight("bias", {filters_}, bias_init_);
}

Tensor Conv1D::call(const std::vector<Tensor>& inputs, CallContext& ctx) {
  const Tensor& x = detail::single_input(inputs, *this);
  ConvOptions o = keras_conv(*this, x, padding_, {kernel_size_}, {strides_}, {dilation_rate_});
  return bias_and_activation(conv(x, ctx.read(kernel_), o), use_bias_, bias_, activation_, ctx);
}

// ---- Conv2DTranspose ----------------------------------------------------------------------

Conv2DTranspose::Conv2DTranspose(int64_t filters, std::vector<int64_t> kernel_size, std::string act,
                                 std::vector<int64_t> strides, std::string padding, bool use_bias,
                                 Initializer kernel_init, Initializer bias_init)
    : Layer("conv2d_transpose"),
      filters_(filters),
      kernel_size_(std::move(kernel_size)),
      strides_(std::move(strides)),
      activation_(std::move(act)),
      padding_(std::move(padding)),
      use_bias_(use_bias),
      kernel_init_(std::move(kernel_init)),
      bias_init_(std::move(bias_init)) {
  check_positive("Conv2DTranspose", "filters", filters);
  check_sizes("Conv2DTranspose", "kernel_size", kernel_size_, 2);
  check_sizes("Conv2DTranspose", "strides", strides_, 2);
  check_padding("Conv2DTranspose", padding_);
  activation(activation_);
}

void Conv2DTranspose::build(const std::vector<Shape>& shapes) {
  int64_t channels = channels_last_input(shapes, 4, *this, "[batch, h, w, channels]").back();
  kernel_ =
      add_weight("kernel", {kernel_size_[0], kernel_size_[1], filters_, channels}, kernel_init_);
  if (use_bias_) bias_ = add_weight("bias", {filters_}, bias_init_);
}

Tensor Conv2DTranspose::call(const std::vector<Tensor>& inputs, CallContext& ctx) {
  const Tensor& x = detail::single_input(inputs, *this);
  // Input pixel i scatters onto output i * s - crop + t for kernel taps t. A convolution over
  // x with s - 1 zeros between pixels and the kernel flipped (taps and channel axes) gathers
  // the same sums: its padding keeps the window's first tap at output -crop, and the high
  // padding makes the Keras output size (independent of the input size).
  ConvOptions o;
  o.lhs_dilation = strides_;
  for (size_t i = 0; i < 2; ++i) {
    const int64_t k = kernel_size_[i], s = strides_[i];
    const int64_t crop = padding_ == "same" ? std::max<int64_t>(k - s, 0) / 2 : 0;
    o.padding_low.push_back(k - 1 - crop);
    o.padding_high.push_back(padding_ == "same" ? s - 1 + crop : std::max(k, s) - 1);
  }
  Tensor flipped = transpose(reverse(ctx.read(kernel_), {0, 1}), {0, 1, 3, 2});
  return bias_and_activation(conv(x, flipped, o), use_bias_, bias_, activation_, ctx);
}

// ---- DepthwiseConv2D ----------------------------------------------------------------------

DepthwiseConv2D::DepthwiseConv2D(std::vector<int64_t> kernel_size, std::string act,
                                 std::vector<int64_t> strides, std::string padding,
                                 int64_t depth_multiplier, bool use_bias,
                                 Initializer depthwise_init, Initializer bias_init)
    : Layer("depthwise_conv2d"),
      kernel_size_(std::move(kernel_size)),
      strides_(std::move(strides)),
      activation_(std::move(act)),
      padding_(std::move(padding)),
      depth_multiplier_(depth_multiplier),
      use_bias_(use_bias),
      depthwise_init_(std::move(depthwise_init)),
      bias_init_(std::move(bias_init)) {
  check_sizes("DepthwiseConv2D", "kernel_size", kernel_size_, 2);
  check_sizes("DepthwiseConv2D", "strides", strides_, 2);
  check_positive("DepthwiseConv2D", "depth_multiplier", depth_multiplier);
  check_padding("DepthwiseConv2D", padding_);
  activation(activation_);
}

void DepthwiseConv2D::build(const std::vector<Shape>& shapes) {
  int64_t channels = channels_last_input(shapes, 4, *this, "[batch, h, w, channels]").back();
  depthwise_kernel_ =
      add_weight("depthwise_kernel",
                 {kernel_size_[0], kernel_size_[1], channels, depth_multiplier_}, depthwise_init_);
  if (use_bias_) bias_ = add_weight("bias", {channels * depth_multiplier_}, bias_init_);
}

Tensor DepthwiseConv2D::call(const std::vector<Tensor>& inputs, CallContext& ctx) {
  const Tensor& x = detail::single_input(inputs, *this);
  ConvOptions o = keras_conv(*this, x, padding_, kernel_size_, strides_, {1, 1});
  Tensor y = depthwise_conv(x, ctx.read(depthwise_kernel_), o);
  return bias_and_activation(y, use_bias_, bias_, activation_, ctx);
}

// ---- SeparableConv2D ----------------------------------------------------------------------

SeparableConv2D::SeparableConv2D(int64_t filters, std::vector<int64_t> kernel_size, std::string act,
                                 std::vector<int64_t> strides, std::string padding,
                                 int64_t depth_multiplier, bool use_bias,
                                 Initializer depthwise_init, Initializer pointwise_init,
                                 Initializer bias_init)
    : Layer("separable_conv2d"),
      filters_(filters),
      kernel_size_(std::move(kernel_size)),
      strides_(std::move(strides)),
      activation_(std::move(act)),
      padding_(std::move(padding)),
      depth_multiplier_(depth_multiplier),
      use_bias_(use_bias),
      depthwise_init_(std::move(depthwise_init)),
      pointwise_init_(std::move(pointwise_init)),
      bias_init_(std::move(bias_init)) {
  check_positive("SeparableConv2D", "filters", filters);
  check_sizes("SeparableConv2D", "kernel_size", kernel_size_, 2);
  check_sizes("SeparableConv2D", "strides", strides_, 2);
  check_positive("SeparableConv2D", "depth_multiplier", depth_multiplier);
  check_padding("SeparableConv2D", padding_);
  activation(activation_);
}

void SeparableConv2D::build(const std::vector<Shape>& shapes) {
  int64_t channels = channels_last_input(shapes, 4, *this, "[batch, h, w, channels]").back();
  depthwise_kernel_ =
      add_weight("depthwise_kernel",
                 {kernel_size_[0], kernel_size_[1], channels, depth_multiplier_}, depthwise_init_);
  pointwise_kernel_ = add_weight("pointwise_kernel", {1, 1, channels * depth_multiplier_, filters_},
                                 pointwise_init_);
  if (use_bias_) bias_ = add_weight("bias", {filters_}, bias_init_);
}

Tensor SeparableConv2D::call(const std::vector<Tensor>& inputs, CallContext& ctx) {
  const Tensor& x = detail::single_input(inputs, *this);
  ConvOptions o = keras_conv(*this, x, padding_, kernel_size_, strides_, {1, 1});
  Tensor y = conv(depthwise_conv(x, ctx.read(depthwise_kernel_), o), ctx.read(pointwise_kernel_));
  return bias_and_activation(y, use_bias_, bias_, activation_, ctx);
}

// ---- configs and registration (for saved models) --------------------------------------------

Attrs Conv1D::config() const {
  Attrs c{{"filters", filters_},  {"kernel_size", kernel_size_}, {"activation", activation_},
          {"strides", strides_},  {"padding", padding_},         {"dilation_rate", dilation_rate_},
          {"use_bias", use_bias_}};
  put_initializer(c, "kernel_initializer", kernel_init_);
  put_initializer(c, "bias_initializer", bias_init_);
  return c;
}

Attrs Conv2DTranspose::config() const {
  Attrs c{{"filters", filters_}, {"kernel_size", kernel_size_}, {"activation", activation_},
          {"strides", strides_}, {"padding", padding_},         {"use_bias", use_bias_}};
  put_initializer(c, "kernel_initializer", kernel_init_);
  put_initializer(c, "bias_initializer", bias_init_);
  return c;
}

Attrs DepthwiseConv2D::config() const {
  Attrs c{{"kernel_size", kernel_size_},
          {"activation", activation_},
          {"strides", strides_},
          {"padding", padding_},
          {"depth_multiplier", depth_multiplier_},
          {"use_bias", use_bias_}};
  put_initializer(c, "depthwise_initializer", depthwise_init_);
  put_initializer(c, "bias_initializer", bias_init_);
  return c;
}

Attrs SeparableConv2D::config() const {
  Attrs c{{"filters", filters_},       {"kernel_size", kernel_size_},
          {"activation", activation_}, {"strides", strides_},
          {"padding", padding_},       {"depth_multiplier", depth_multiplier_},
          {"use_bias", use_bias_}};
  put_initializer(c, "depthwise_initializer", depthwise_init_);
  put_initializer(c, "pointwise_initializer", pointwise_init_);
  put_initializer(c, "bias_initializer", bias_init_);
  return c;
}

KILN_REGISTER_LAYER("Conv1D", [](const Attrs& c) {
  return std::make_shared<Conv1D>(
      c.get_int("filters"), c.get_int("kernel_size"), c.get_string("activation"),
      c.get_int("strides"), c.get_string("padding"), c.get_int("dilation_rate"),
      c.get_bool("use_bias"), get_initializer(c, "kernel_initializer", glorot_uniform()),
      get_initializer(c, "bias_initializer", zeros_init()));
});
KILN_REGISTER_LAYER("Conv2DTranspose", [](const Attrs& c) {
  return std::make_shared<Conv2DTranspose>(
      c.get_int("filters"), c.get_ints("kernel_size"), c.get_string("activation"),
      c.get_ints("strides"), c.get_string("padding"), c.get_bool("use_bias"),
      get_initializer(c, "kernel_initializer", glorot_uniform()),
      get_initializer(c, "bias_initializer", zeros_init()));
});
KILN_REGISTER_LAYER("DepthwiseConv2D", [](const Attrs& c) {
  return std::make_shared<DepthwiseConv2D>(
      c.get_ints("kernel_size"), c.get_string("activation"), c.get_ints("strides"),
      c.get_string("padding"), c.get_int("depth_multiplier"), c.get_bool("use_bias"),
      get_initializer(c, "depthwise_initializer", glorot_uniform()),
      get_initializer(c, "bias_initializer", zeros_init()));
});
KILN_REGISTER_LAYER("SeparableConv2D", [](const Attrs& c) {
  return std::make_shared<SeparableConv2D>(
      c.get_int("filters"), c.get_ints("kernel_size"), c.get_string("activation"),
      c.get_ints("strides"), c.get_string("padding"), c.get_int("depth_multiplier"),
      c.get_bool("use_bias"), get_initializer(c, "depthwise_initializer", glorot_uniform()),
      get_initializer(c, "pointwise_initializer", glorot_uniform()),
      get_initializer(c, "bias_initializer", zeros_init()));
});

}  // namespace kiln::nn
