// Keras pooling layers over steps ([batch, steps, channels]) and global pooling over steps or
// positions ([batch, h, w, channels]). The 2-d window layers, MaxPool2D and AveragePool2D, are
// in kiln/nn/layers.h.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/nn/layer.h"

namespace kiln::nn {

// A window of pool_size steps moved by strides (pool_size when not given); padding "valid" or
// "same". Input [batch, steps, channels].
class Pool1D : public Layer {
 public:
  Attrs config() const override;
  Tensor call(const std::vector<Tensor>& inputs, CallContext& ctx) override;

 protected:
  // `type` is the class's type_name(), for errors from the constructor.
  Pool1D(const std::string& type, std::string name, bool max, int64_t pool_size,
         std::optional<int64_t> strides, std::string padding);

 private:
  bool max_;
  int64_t pool_, strides_;
  std::string padding_;
};

class MaxPool1D : public Pool1D {
 public:
  explicit MaxPool1D(int64_t pool_size = 2, std::optional<int64_t> strides = std::nullopt,
                     std::string padding = "valid");
  std::string type_name() const override { return "MaxPooling1D"; }
  std::shared_ptr<Layer> clone() const override { return std::make_shared<MaxPool1D>(*this); }
};

// With "same" padding, a window's mean is over its steps inside the input (as Keras).
class AveragePool1D : public Pool1D {
 public:
  explicit AveragePool1D(int64_t pool_size = 2, std::optional<int64_t> strides = std::nullopt,
                         std::string padding = "valid");
  std::string type_name() const override { return "AveragePooling1D"; }
  std::shared_ptr<Layer> clone() const override { return std::make_shared<AveragePool1D>(*this); }
};

// The mean or maximum over every step (1-d: [batch, steps, channels]) or position (2-d:
// [batch, h, w, channels]), giving [batch, channels]; keepdims keeps the pooled dimensions
// with size 1 ([batch, 1, channels], [batch, 1, 1, channels]).
class GlobalPooling : public Layer {
 public:
  Attrs config() const override;
  Tensor call(const std::vector<Tensor>& inputs, CallContext& ctx) override;

 protected:
  GlobalPooling(std::string name, bool max, int spatial_dims, bool keepdims);

 private:
  bool max_;
  int spatial_dims_;
  bool keepdims_;
};

class GlobalAveragePooling1D : public GlobalPooling {
 public:
  explicit GlobalAveragePooling1D(bool keepdims = false)
      : GlobalPooling("global_average_pooling1d", false, 1, keepdims) {}
  std::string type_name() const override { return "GlobalAveragePooling1D"; }
  std::shared_ptr<Layer> clone() const override {
    return std::make_shared<GlobalAveragePooling1D>(*this);
  }
};

class GlobalAveragePooling2D : public GlobalPooling {
 public:
  explicit GlobalAveragePooling2D(bool keepdims = false)
      : GlobalPooling("global_average_pooling2d", false, 2, keepdims) {}
  std::string type_name() const override { return "GlobalAveragePooling2D"; }
  std::shared_ptr<Layer> clone() const override {
    return std::make_shared<GlobalAveragePooling2D>(*this);
  }
};

class GlobalMaxPooling1D : public GlobalPooling {
 public:
  explicit GlobalMaxPooling1D(bool keepdims = false)
      : GlobalPooling("global_max_pooling1d", true, 1, keepdims) {}
  std::string type_name() const override { return "GlobalMaxPooling1D"; }
  std::shared_ptr<Layer> clone() const override {
    return std::make_shared<GlobalMaxPooling1D>(*this);
  }
};

class GlobalMaxPooling2D : public GlobalPooling {
 public:
  explicit GlobalMaxPooling2D(bool keepdims = false)
      : GlobalPooling("global_max_pooling2d", true, 2, keepdims) {}
  std::string type_name() const override { return "GlobalMaxPooling2D"; }
  std::shared_ptr<Layer> clone() const override {
    return std::make_shared<GlobalMaxPooling2D>(*this);
  }
};

}  // namespace kiln::nn
