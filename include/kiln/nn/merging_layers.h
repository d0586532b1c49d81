// Keras merging layers: Concatenate, and the elementwise Multiply, Subtract, Average, Maximum
// and Minimum. Each is called on a list of tensors (functional models: branches of one input).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/nn/layer.h"

namespace kiln::nn {

// Joins its inputs along `axis` (counted with the batch dimension; negative from the end). The
// inputs have one rank and the same size in every other dimension.
class Concatenate : public Layer {
 public:
  explicit Concatenate(int64_t axis = -1);
  std::string type_name() const override { return "Concatenate"; }
  std::shared_ptr<Layer> clone() const override { return std::make_shared<Concatenate>(*this); }
  Attrs config() const override;
  Tensor call(const std::vector<Tensor>& inputs, CallContext& ctx) override;

 private:
  int64_t axis_;
};

// An elementwise merge of two or more inputs whose shapes broadcast together (equal, or 1, in
// every dimension counted from the end), as Keras' _Merge.
class Merge : public Layer {
 public:
  Tensor call(const std::vector<Tensor>& inputs, CallContext& ctx) override;

 protected:
  Merge(std::string name, size_t min_inputs, size_t max_inputs);
  virtual Tensor merge(const std::vector<Tensor>& inputs) const = 0;

 private:
  size_t min_inputs_, max_inputs_;
};

class Multiply : public Merge {
 public:
  Multiply();
  std::string type_name() const override { return "Multiply"; }
  std::shared_ptr<Layer> clone() const override { return std::make_shared<Multiply>(*this); }

 protected:
  Tensor merge(const std::vector<Tensor>& inputs) const override;
};

// inputs[0] - inputs[1]; exactly two inputs.
class Subtract : public Merge {
 public:
  Subtract();
  std::string type_name() const override { return "Subtract"; }
  std::shared_ptr<Layer> clone() const override { return std::make_shared<Subtract>(*this); }

 protected:
  Tensor merge(const std::vector<Tensor>& inputs) const override;
};

class Average : public Merge {
 public:
  Average();
  std::string type_name() const override { return "Average"; }
  std::shared_ptr<Layer> clone() const override { return std::make_shared<Average>(*this); }

 protected:
  Tensor merge(const std::vector<Tensor>& inputs) const override;
};

class Maximum : public Merge {
 public:
  Maximum();
  std::string type_name() const override { return "Maximum"; }
  std::shared_ptr<Layer> clone() const override { return std::make_shared<Maximum>(*this); }

 protected:
  Tensor merge(const std::vector<Tensor>& inputs) const override;
};

class Minimum : public Merge {
 public:
  Minimum();
  std::string type_name() const override { return "Minimum"; }
  std::shared_ptr<Layer> clone() const override { return std::make_shared<Minimum>(*this); }

 protected:
  Tensor merge(const std::vector<Tensor>& inputs) const override;
};

}  // namespace kiln::nn
