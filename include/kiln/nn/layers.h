// Keras-like layers. Names default to the Keras style ("dense", "dense_1", ...) within a model.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiln/nn/initializers.h"
#include "kiln/nn/layer.h"

namespace kiln::nn {

// An activation by Keras name: "linear" or "" (identity), "relu", "gelu", "swish"/"silu",
// "tanh", "sigmoid", "softmax", "softplus". Unknown names throw kiln::Error listing the known.
std::function<Tensor(const Tensor&)> activation(const std::string& name);

class Dense : public Layer {
 public:
  explicit Dense(int64_t units, std::string activation = "", bool use_bias = true,
                 Initializer kernel_init = glorot_uniform(), Initializer bias_init = zeros_init());
  std::string type_name() const override { return "Dense"; }
  const std::string& activation_name() const { return activation_; }
  std::shared_ptr<Layer> clone() const override { return std::make_shared<Dense>(*this); }
  Attrs config() const override;
  void build(const std::vector<Shape>& input_shapes) override;
  Tensor call(const std::vector<Tensor>& inputs, CallContext& ctx) override;

 private:
  int64_t units_;
  std::string activation_;
  bool use_bias_;
  Initializer kernel_init_, bias_init_;
  Variable kernel_, bias_;
};

// Zeroes a `rate` fraction of inputs in training and scales the rest by 1/(1-rate).
class Dropout : public Layer {
 public:
  explicit Dropout(double rate);
  std::string type_name() const override { return "Dropout"; }
  std::shared_ptr<Layer> clone() const override { return std::make_shared<Dropout>(*this); }
  Attrs config() const override;
  Tensor call(const std::vector<Tensor>& inputs, CallContext& ctx) override;

 private:
  double rate_;
};

class Activation : public Layer {
 public:
  explicit Activation(std::string name);
  std::string type_name() const override { return "Activation"; }
  const std::string& activation_name() const { return activation_; }
  std::shared_ptr<Layer> clone() const override { return std::make_shared<Activation>(*this); }
  Attrs config() const override;
  Tensor call(const std::vector<Tensor>& inputs, CallContext& ctx) override;

 private:
  std::string activation_;
};

class Flatten : public Layer {
 public:
  Flatten();
  std::string type_name() const override { return "Flatten"; }
  std::shared_ptr<Layer> clone() const override { return std::make_shared<Flatten>(*this); }
  Tensor call(const std::vector<Tensor>& inputs, CallContext& ctx) override;
};

// NHWC input, HWIO kernel; padding "valid" or "same".
class Conv2D : public Layer {
 public:
  Conv2D(int64_t filters, std::vector<int64_t> kernel_size, std::string activation = "",
         std::vector<int64_t> strides = {1, 1}, std::string padding = "valid",
         bool use_bias = true, Initializer kernel_init = glorot_uniform(),
         Initializer bias_init = zeros_init());
  std::string type_name() const override { return "Conv2D"; }
  std::shared_ptr<Layer> clone() const override { return std::make_shared<Conv2D>(*this); }
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

class MaxPool2D : public Layer {
 public:
  explicit MaxPool2D(std::vector<int64_t> pool_size = {2, 2}, std::vector<int64_t> strides = {},
                     std::string padding = "valid");
  std::string type_name() const override { return "MaxPooling2D"; }
  std::shared_ptr<Layer> clone() const override { return std::make_shared<MaxPool2D>(*this); }
  Attrs config() const override;
  Tensor call(const std::vector<Tensor>& inputs, CallContext& ctx) override;

 private:
  std::vector<int64_t> pool_, strides_;
  std::string padding_;
};

class AveragePool2D : public Layer {
 public:
  explicit AveragePool2D(std::vector<int64_t> pool_size = {2, 2},
                         std::vector<int64_t> strides = {}, std::string padding = "valid");
  std::string type_name() const override { return "AveragePooling2D"; }
  std::shared_ptr<Layer> clone() const override { return std::make_shared<AveragePool2D>(*this); }
  Attrs config() const override;
  Tensor call(const std::vector<Tensor>& inputs, CallContext& ctx) override;

 private:
  std::vector<int64_t> pool_, strides_;
  std::string padding_;
};

// Integer ids [batch, ...] -> vectors [batch, ..., output_dim]; ids out of range are errors.
// With mask_zero, id 0 is padding: the output carries the mask ids != 0 (CallContext::mask_of),
// so that a recurrent layer after it skips the padded steps.
class Embedding : public Layer {
 public:
  Embedding(int64_t input_dim, int64_t output_dim,
            Initializer init = random_uniform_init(-0.05, 0.05), bool mask_zero = false);
  std::string type_name() const override { return "Embedding"; }
  std::shared_ptr<Layer> clone() const override { return std::make_shared<Embedding>(*this); }
  Attrs config() const override;
  void build(const std::vector<Shape>& input_shapes) override;
  Tensor call(const std::vector<Tensor>& inputs, CallContext& ctx) override;
  Tensor compute_mask(const std::vector<Tensor>& inputs, const Tensor& mask) const override;

 private:
  int64_t input_dim_, output_dim_;
  Initializer init_;
  bool mask_zero_;
  Variable table_;
};

// Normalises over the last axis: (x - mean) / sqrt(var + eps) * gamma + beta.
class LayerNormalization : public Layer {
 public:
  explicit LayerNormalization(double epsilon = 1e-3);
  std::string type_name() const override { return "LayerNormalization"; }
  std::shared_ptr<Layer> clone() const override { return std::make_shared<LayerNormalization>(*this); }
  Attrs config() const override;
  void build(const std::vector<Shape>& input_shapes) override;
  Tensor call(const std::vector<Tensor>& inputs, CallContext& ctx) override;

 private:
  double epsilon_;
  Variable gamma_, beta_;
};

// Training: batch statistics over all but the last axis, and moving averages updated with
// `momentum` (moving = moving * momentum + batch * (1 - momentum)). Inference: the moving ones.
class BatchNormalization : public Layer {
 public:
  explicit BatchNormalization(double momentum = 0.99, double epsilon = 1e-3);
  std::string type_name() const override { return "BatchNormalization"; }
  std::shared_ptr<Layer> clone() const override { return std::make_shared<BatchNormalization>(*this); }
  Attrs config() const override;
  void build(const std::vector<Shape>& input_shapes) override;
  Tensor call(const std::vector<Tensor>& inputs, CallContext& ctx) override;

 private:
  Tensor normalize(const Tensor& x, CallContext& ctx);
  double momentum_, epsilon_;
  Variable gamma_, beta_, moving_mean_, moving_variance_;
};

// Scaled dot-product attention with num_heads heads of key_dim each. Inputs: {query, value}
// or {query, value, key} of shape [batch, seq, features]; one input means self-attention.
class MultiHeadAttention : public Layer {
 public:
  MultiHeadAttention(int64_t num_heads, int64_t key_dim, double dropout = 0);
  std::string type_name() const override { return "MultiHeadAttention"; }
  std::shared_ptr<Layer> clone() const override { return std::make_shared<MultiHeadAttention>(*this); }
  Attrs config() const override;
  void build(const std::vector<Shape>& input_shapes) override;
  Tensor call(const std::vector<Tensor>& inputs, CallContext& ctx) override;

 private:
  int64_t num_heads_, key_dim_;
  double dropout_;
  Variable wq_, bq_, wk_, bk_, wv_, bv_, wo_, bo_;
};

// Elementwise sum of its inputs (functional models).
class Add : public Layer {
 public:
  Add();
  std::string type_name() const override { return "Add"; }
  std::shared_ptr<Layer> clone() const override { return std::make_shared<Add>(*this); }
  Tensor call(const std::vector<Tensor>& inputs, CallContext& ctx) override;
};

}  // namespace kiln::nn
