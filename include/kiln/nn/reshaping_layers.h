// Keras reshaping layers: Reshape, Permute, RepeatVector, UpSampling2D, ZeroPadding2D and
// Cropping2D. Shapes and dimensions are given without the batch dimension, as in Keras; 2-d
// layers take NHWC input.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/nn/layer.h"

namespace kiln::nn {

// [batch, ...] -> [batch, target_shape...]; one entry of target_shape may be -1 (inferred).
class Reshape : public Layer {
 public:
  explicit Reshape(Shape target_shape);
  std::string type_name() const override { return "Reshape"; }
  std::shared_ptr<Layer> clone() const override { return std::make_shared<Reshape>(*this); }
  Attrs config() const override;
  Tensor call(const std::vector<Tensor>& inputs, CallContext& ctx) override;

 private:
  Shape target_;
};

// Reorders the dimensions after the batch: dims is a permutation of 1..n (1-based, as Keras),
// so Permute({2, 1}) turns [batch, a, b] into [batch, b, a].
class Permute : public Layer {
 public:
  explicit Permute(std::vector<int64_t> dims);
  std::string type_name() const override { return "Permute"; }
  std::shared_ptr<Layer> clone() const override { return std::make_shared<Permute>(*this); }
  Attrs config() const override;
  Tensor call(const std::vector<Tensor>& inputs, CallContext& ctx) override;

 private:
  std::vector<int64_t> dims_;
};

// [batch, features] -> [batch, n, features].
class RepeatVector : public Layer {
 public:
  explicit RepeatVector(int64_t n);
  std::string type_name() const override { return "RepeatVector"; }
  std::shared_ptr<Layer> clone() const override { return std::make_shared<RepeatVector>(*this); }
  Attrs config() const override;
  Tensor call(const std::vector<Tensor>& inputs, CallContext& ctx) override;

 private:
  int64_t n_;
};

// Repeats each row size[0] times and each column size[1] times (nearest neighbour).
class UpSampling2D : public Layer {
 public:
  explicit UpSampling2D(std::vector<int64_t> size = {2, 2});
  std::string type_name() const override { return "UpSampling2D"; }
  std::shared_ptr<Layer> clone() const override { return std::make_shared<UpSampling2D>(*this); }
  Attrs config() const override;
  Tensor call(const std::vector<Tensor>& inputs, CallContext& ctx) override;

 private:
  std::vector<int64_t> size_;
};

// Rows at the top and bottom, columns at the left and right: {{top, bottom}, {left, right}}.
struct Margins2D {
  std::pair<int64_t, int64_t> rows, cols;
};

// Adds zero rows and columns around each image.
class ZeroPadding2D : public Layer {
 public:
  explicit ZeroPadding2D(int64_t padding = 1);  // on every side
  // {h, w}: h rows at the top and at the bottom, w columns at the left and at the right.
  explicit ZeroPadding2D(std::pair<int64_t, int64_t> padding);
  explicit ZeroPadding2D(Margins2D padding);
  std::string type_name() const override { return "ZeroPadding2D"; }
  std::shared_ptr<Layer> clone() const override { return std::make_shared<ZeroPadding2D>(*this); }
  Attrs config() const override;
  Tensor call(const std::vector<Tensor>& inputs, CallContext& ctx) override;

 private:
  Margins2D padding_;
};

// Removes rows and columns at the edges of each image.
class Cropping2D : public Layer {
 public:
  explicit Cropping2D(int64_t cropping = 0);  // on every side
  // {h, w}: h rows at the top and at the bottom, w columns at the left and at the right.
  explicit Cropping2D(std::pair<int64_t, int64_t> cropping);
  explicit Cropping2D(Margins2D cropping);
  std::string type_name() const override { return "Cropping2D"; }
  std::shared_ptr<Layer> clone() const override { return std::make_shared<Cropping2D>(*this); }
  Attrs config() const override;
  Tensor call(const std::vector<Tensor>& inputs, CallContext& ctx) override;

 private:
  Margins2D cropping_;
};

}  // namespace kiln::nn
