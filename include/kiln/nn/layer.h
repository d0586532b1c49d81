// The Layer base class and the context a layer is called in. A layer owns Variables; when a
// model traces a step, CallContext maps each variable to the symbolic value it has in that
// trace and collects updates of non-trainable state (BatchNormalization's moving averages).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kiln/attrs.h"
#include "kiln/nn/initializers.h"
#include "kiln/ref.h"
#include "kiln/tensor.h"
#include "kiln/variable.h"

namespace kiln::nn {

class CallContext {
 public:
  // Eager use: variables read as their current concrete values; random ops use `seed`.
  explicit CallContext(bool training = false, uint64_t seed = 0);
  // Tracing use: `read` returns what `resolve(v)` gives (a placeholder of the step graph);
  // `seed_tensor` is an i64 scalar (symbolic) that changes every step.
  CallContext(bool training, Tensor seed_tensor, std::function<Tensor(const Variable&)> resolve);

  bool training() const { return training_; }
  Tensor read(const Variable& v);
  // A fresh i64 scalar seed for one random op: distinct for every call within a step.
  Tensor next_seed();
  // Records a new value for a (non-trainable) variable; the model assigns it after the step.
  void update(const Variable& v, const Tensor& new_value);
  const std::vector<std::pair<Variable, Tensor>>& updates() const { return updates_; }

 private:
  bool training_;
  Tensor seed_;
  int64_t seed_calls_ = 0;
  std::function<Tensor(const Variable&)> resolve_;
  std::vector<std::pair<Variable, Tensor>> updates_;
};

class Layer {
 public:
  explicit Layer(std::string name) : name_(std::move(name)) {}
  virtual ~Layer() = default;

  // Builds on first use (from the input shapes; the batch dimension may be kUnknownDim),
  // then calls `call`. Subsequent calls reuse the weights.
  Tensor operator()(const Tensor& x, CallContext& ctx);
  Tensor operator()(const std::vector<Tensor>& xs, CallContext& ctx);
  // Concrete input: eager inference. Symbolic input from nn::Input: records this call into a
  // functional model definition.
  Tensor operator()(const Tensor& x);
  Tensor operator()(const std::vector<Tensor>& xs);

  // Keras class name ("Dense", "Conv2D"), shown by summary().
  virtual std::string type_name() const = 0;
  // A copy sharing this layer's Variables (functional models keep layers called on
  // temporaries alive this way). Implement as: return std::make_shared<MyLayer>(*this);
  virtual std::shared_ptr<Layer> clone() const = 0;
  // Keras' get_config: the constructor arguments that rebuild this layer, without its name and
  // weights. A saved model stores it; the factory registered under type_name() (see
  // kiln/nn/layer_registry.h) rebuilds the layer from it. Layers without arguments keep {}.
  virtual Attrs config() const { return {}; }
  virtual void build(const std::vector<Shape>& input_shapes) {}
  virtual Tensor call(const std::vector<Tensor>& inputs, CallContext& ctx) = 0;

  const std::string& name() const { return name_; }
  void set_name(std::string name) { name_ = std::move(name); }
  bool built() const { return built_; }
  const std::vector<Variable>& weights() const { return weights_; }
  std::vector<Variable> trainable_weights() const;
  std::vector<Variable> non_trainable_weights() const;
  int64_t count_params() const;
  // Seeds the initializers of weights created by build(); set by the model.
  void set_seed(uint64_t seed) { seed_ = seed; }

 protected:
  Variable add_weight(const std::string& name, const Shape& shape, const Initializer& init,
                      bool trainable = true, DType dtype = f32);
  // For a layer that calls another (a wrapper such as TimeDistributed), from its build():
  // builds `child` for `input_shapes` unless it is built, seeding its initializers from this
  // layer's seed, and makes the child's weights part of this layer's weights().
  void build_child(Layer& child, const std::vector<Shape>& input_shapes);

 private:
  void build_once(const std::vector<Tensor>& xs);
  std::string name_;
  bool built_ = false;
  uint64_t seed_ = 0;
  int weight_count_ = 0;
  std::vector<Variable> weights_;
};

using LayerPtr = std::shared_ptr<Layer>;

// Sequential({Dense(128), Dropout(0.2)}) stores each layer behind a shared handle.
using LayerRef = Ref<Layer>;

}  // namespace kiln::nn
