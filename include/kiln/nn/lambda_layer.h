// Lambda: a layer computing a C++ function of its inputs, traced like any other layer. A saved
// model stores the function's name only, so a Lambda to be saved is made with a name, and the
// program that loads the model registers the function under that name:
//
//   kiln::nn::register_lambda_function("double", [](const Tensor& x) { return x * 2.0; });
//   auto twice = kiln::nn::Lambda([](const Tensor& x) { return x * 2.0; }, "double");
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiln/nn/layer.h"

namespace kiln::nn {

using LambdaFunction = std::function<Tensor(const std::vector<Tensor>&)>;
using UnaryLambdaFunction = std::function<Tensor(const Tensor&)>;

class Lambda : public Layer {
 public:
  // function_name: the name the function is registered under where the model is loaded; a
  // Lambda without one works but cannot be saved (config() throws).
  explicit Lambda(LambdaFunction function, std::string function_name = "");
  // A function of one tensor: the layer takes one input.
  explicit Lambda(UnaryLambdaFunction function, std::string function_name = "");
  std::string type_name() const override { return "Lambda"; }
  std::shared_ptr<Layer> clone() const override { return std::make_shared<Lambda>(*this); }
  const std::string& function_name() const { return function_name_; }
  // {"function": function_name}; kFailedPrecondition for a Lambda without a function name.
  Attrs config() const override;
  Tensor call(const std::vector<Tensor>& inputs, CallContext& ctx) override;

 private:
  LambdaFunction function_;
  std::string function_name_;
  bool unary_;
};

// Functions by name, for Lambda layers of loaded models. A name registered twice is
// kAlreadyExists unless `replace` is set. Thread-safe.
void register_lambda_function(const std::string& name, LambdaFunction function,
                              bool replace = false);
void register_lambda_function(const std::string& name, UnaryLambdaFunction function,
                              bool replace = false);
bool is_lambda_function_registered(const std::string& name);
// A Lambda layer calling the function registered as `name`; kNotFound naming it and saying
// how to register it when this program has not registered it.
std::shared_ptr<Lambda> lambda_from_registry(const std::string& name);

}  // namespace kiln::nn
