// The Layer base class and the context a layer is called in. A layer owns Variables; when a
// model traces a step, CallContext maps each variable to the symbolic value it has in that
// trace and collects updates of non-trainable state (BatchNormalization's moving averages).
#pragma once

#include <concepts>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/attrs.h"
#include "kiln/nn/initializers.h"
#include "kiln/nn/policy.h"
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
  // The variable's value; an f32 variable read while a layer computes in f16 or bf16 (its
  // dtype policy, set by Layer::operator()) comes cast to that dtype.
  Tensor read(const Variable& v);
  // The dtype the layer being called computes in (f32 outside layers); returns the previous.
  DType compute_dtype() const { return compute_dtype_; }
  DType set_compute_dtype(DType dtype) { return std::exchange(compute_dtype_, dtype); }
  // A fresh i64 scalar seed for one random op: distinct for every call within a step.
  Tensor next_seed();
  // Records a new value for a (non-trainable) variable; the model assigns it after the step.
  // A value in another float dtype (computed under a mixed policy) is cast to the variable's.
  void update(const Variable& v, const Tensor& new_value);
  const std::vector<std::pair<Variable, Tensor>>& updates() const { return updates_; }

  // Keras' masks. A value may carry a [batch, steps] bool mask, true at the steps that hold
  // data: an Embedding(mask_zero) or Masking layer sets it, a layer that supports masking passes
  // it on, and a recurrent layer skips the steps it marks false. Undefined when none.
  Tensor mask_of(const Tensor& value) const;
  void set_mask(const Tensor& value, const Tensor& mask);

 private:
  bool training_;
  Tensor seed_;
  DType compute_dtype_ = f32;
  int64_t seed_calls_ = 0;
  std::function<Tensor(const Variable&)> resolve_;
  std::vector<std::pair<Variable, Tensor>> updates_;
  std::vector<std::pair<Tensor, Tensor>> masks_;  // (value, its mask)
};

// Per-layer settings beyond a layer's own arguments, given with with_options below.
struct LayerOptions {
  // Keras' dtype=: unset, the layer takes global_policy() when it is made. Typical use: the
  // model's last softmax in "float32" under a mixed global policy.
  std::optional<Policy> dtype_policy;
};

class Layer {
 public:
  // Takes global_policy() as its dtype policy.
  explicit Layer(std::string name) : name_(std::move(name)), policy_(global_policy()) {}
  virtual ~Layer() = default;

  // Builds on first use (from the input shapes; the batch dimension may be kUnknownDim),
  // then calls `call`. Subsequent calls reuse the weights. Floating inputs of f32, f16 and bf16
  // are cast to the policy's compute dtype first (f64 ones are left as they are), and `call`
  // reads its variables in that dtype (CallContext::read).
  Tensor operator()(const Tensor& x, CallContext& ctx);
  Tensor operator()(const std::vector<Tensor>& xs, CallContext& ctx);
  // Concrete input: eager inference. Symbolic input from nn::Input: records this call into a
  // functional model definition.
  Tensor operator()(const Tensor& x);
  Tensor operator()(const std::vector<Tensor>& xs);
  // Every output of a layer that has several (an RNN with return_state: its output, then its
  // final states); operator() gives the first. Eager, traced or recorded, as operator() is.
  std::vector<Tensor> outputs(const std::vector<Tensor>& xs, CallContext& ctx);
  std::vector<Tensor> outputs(const std::vector<Tensor>& xs);

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
  // A layer of several outputs overrides this (and makes call() give the first).
  virtual std::vector<Tensor> call_outputs(const std::vector<Tensor>& inputs, CallContext& ctx) {
    return {call(inputs, ctx)};
  }
  // The mask of this layer's (first) output, from its inputs and its first input's mask
  // (CallContext::mask_of). By default a layer that supports masking passes `mask` on and any
  // other drops it; Embedding(mask_zero), Masking and the recurrent layers make their own.
  virtual Tensor compute_mask(const std::vector<Tensor>& inputs, const Tensor& mask) const;
  // Whether the layer keeps its input's steps, so that their mask applies to its output.
  bool supports_masking() const { return supports_masking_; }

  const std::string& name() const { return name_; }
  void set_name(std::string name) { name_ = std::move(name); }
  bool built() const { return built_; }
  const std::vector<Variable>& weights() const { return weights_; }
  std::vector<Variable> trainable_weights() const;
  std::vector<Variable> non_trainable_weights() const;
  int64_t count_params() const;
  // Seeds the initializers of weights created by build(); set by the model.
  void set_seed(uint64_t seed) { seed_ = seed; }
  // Variables stay in policy.variable_dtype() (f32); the layer computes in compute_dtype().
  const Policy& dtype_policy() const { return policy_; }
  void set_dtype_policy(const Policy& policy) { policy_ = policy; }
  void set_options(const LayerOptions& options);

 protected:
  Variable add_weight(const std::string& name, const Shape& shape, const Initializer& init,
                      bool trainable = true, DType dtype = f32);
  // For a layer that calls another (a wrapper such as TimeDistributed), from its build():
  // builds `child` for `input_shapes` unless it is built, seeding its initializers from this
  // layer's seed, and makes the child's weights part of this layer's weights().
  void build_child(Layer& child, const std::vector<Shape>& input_shapes);
  bool supports_masking_ = false;  // set by the constructors of layers that keep the steps

 private:
  void build_once(const std::vector<Tensor>& xs);
  std::vector<Tensor> call_in_policy(const std::vector<Tensor>& xs, CallContext& ctx);
  std::string name_;
  Policy policy_;
  bool built_ = false;
  uint64_t seed_ = 0;
  int weight_count_ = 0;
  std::vector<Variable> weights_;
};

using LayerPtr = std::shared_ptr<Layer>;

// A layer with options: with_options(Activation("softmax"), {.dtype_policy = "float32"}).
template <class L>
requires std::derived_from<L, Layer> L with_options(L layer, const LayerOptions& options) {
  layer.set_options(options);
  return layer;
}

// Sequential({Dense(128), Dropout(0.2)}) stores each layer behind a shared handle.
using LayerRef = Ref<Layer>;

}  // namespace kiln::nn
