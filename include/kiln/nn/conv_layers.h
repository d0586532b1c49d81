// Keras convolution layers beyond Conv2D (kiln/nn/layers.h): Conv1D, Conv2DTranspose,
// DepthwiseConv2D and SeparableConv2D. Channels last (NWC, NHWC); padding "valid" or "same"
// with Keras' rules (Conv1D also "causal"); each applies an optional bias, then its activation.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/nn/initializers.h"
#include "kiln/nn/layer.h"

namespace kiln::nn {

// [batch, steps, channels] -> [batch, steps', filters]; kernel [kernel_size, channels, filters].
// "causal" pads (kernel_size - 1) * dilation_rate steps on the left only, so output t sees
// inputs up to t.
class Conv1D : public Layer {
 public:
  Conv1D(int64_t filters, int64_t kernel_size, std::string activation = "", int64_t strides = 1,
         std::string padding = "valid", int64_t dilation_rate = 1, bool use_bias = true,
         Initializer kernel_init = glorot_uniform(), Initializer bias_init = zeros_init());
  std::string type_name() const override { return "Conv1D"; }
  std::shared_ptr<Layer> clone() const override { return std::make_shared<Conv1D>(*this); }
  Attrs config() const override;
  void build(const std::vector<Shape>& input_shapes) override;
  Tensor call(const std::vector<Tensor>& inputs, CallContext& ctx) override;

 private:
  int64_t filters_, kernel_size_, strides_, dilation_rate_;
  std::string activation_, padding_;
  bool use_bias_;
  Initializer kernel_init_, bias_init_;
  Variable kernel_, bias_;
};

// The transpose (gradient) of a Conv2D: each input pixel scatters kernel-weighted copies of
// itself onto a window of the output, windows `strides` apart. Output size per spatial
// dimension (Keras): "valid" in * stride + max(kernel - stride, 0), "same" in * stride.
// The kernel is [kh, kw, filters, in_channels] (Keras' layout): the HWIO kernel of the Conv2D
// from `filters` to `in_channels` channels that this layer transposes.
class Conv2DTranspose : public Layer {
 public:
  Conv2DTranspose(int64_t filters, std::vector<int64_t> kernel_size, std::string activation = "",
                  std::vector<int64_t> strides = {1, 1}, std::string padding = "valid",
                  bool use_bias = true, Initializer kernel_init = glorot_uniform(),
                  Initializer bias_init = zeros_init());
  std::string type_name() const override { return "Conv2DTranspose"; }
  std::shared_ptr<Layer> clone() const override { return std::make_shared<Conv2DTranspose>(*this); }
  Attrs config() const override;
  void build(const std::vector<Shape>& input_shapes) override;
  Tensor call(const std::vector<Tensor>& inputs, CallContext& ctx) override;

 private:
  int64_t filters_;
  std::vector<int64_t> kernel_size_, strides_;
  std::string activation_, padding_;
  bool use_bias_;
  Initializer kernel_init_, bias_init_;
  Variable kernel_, bias_;
};

// Convolves each input channel on its own with depth_multiplier filters: [b, h, w, c] ->
// [b, h', w', c * depth_multiplier], output channel c * depth_multiplier + m from channel c.
// Kernel [kh, kw, c, depth_multiplier] (Keras' layout).
class DepthwiseConv2D : public Layer {
 public:
  explicit DepthwiseConv2D(std::vector<int64_t> kernel_size, std::string activation = "",
                           std::vector<int64_t> strides = {1, 1}, std::string padding = "valid",
                           int64_t depth_multiplier = 1, bool use_bias = true,
                           Initializer depthwise_init = glorot_uniform(),
                           Initializer bias_init = zeros_init());
  std::string type_name() const override { return "DepthwiseConv2D"; }
  std::shared_ptr<Layer> clone() const override { return std::make_shared<DepthwiseConv2D>(*this); }
  Attrs config() const override;
  void build(const std::vector<Shape>& input_shapes) override;
  Tensor call(const std::vector<Tensor>& inputs, CallContext& ctx) override;

 private:
  std::vector<int64_t> kernel_size_, strides_;
  std::string activation_, padding_;
  int64_t depth_multiplier_;
  bool use_bias_;
  Initializer depthwise_init_, bias_init_;
  Variable depthwise_kernel_, bias_;
};

// A depthwise convolution (kernel_size, strides, padding, depth_multiplier as DepthwiseConv2D)
// followed by a 1x1 convolution to `filters` channels (pointwise kernel
// [1, 1, c * depth_multiplier, filters]), then the bias and activation.
class SeparableConv2D : public Layer {
 public:
  SeparableConv2D(int64_t filters, std::vector<int64_t> kernel_size, std::string activation = "",
                  std::vector<int64_t> strides = {1, 1}, std::string padding = "valid",
                  int64_t depth_multiplier = 1, bool use_bias = true,
                  Initializer depthwise_init = glorot_uniform(),
                  Initializer pointwise_init = glorot_uniform(),
                  Initializer bias_init = zeros_init());
  std::string type_name() const override { return "SeparableConv2D"; }
  std::shared_ptr<Layer> clone() const override { return std::make_shared<SeparableConv2D>(*this); }
  Attrs config() const override;
  void build(const std::vector<Shape>& input_shapes) override;
  Tensor call(const std::vector<Tensor>& inputs, CallContext& ctx) override;

 private:
  int64_t filters_;
  std::vector<int64_t> kernel_size_, strides_;
  std::string activation_, padding_;
  int64_t depth_multiplier_;
  bool use_bias_;
  Initializer depthwise_init_, pointwise_init_, bias_init_;
  Variable depthwise_kernel_, pointwise_kernel_, bias_;
};

}  // namespace kiln::nn
