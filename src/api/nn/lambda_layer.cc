// The Lambda layer and the registry of its functions by name.
#include "kiln/nn/lambda_layer.h"

#include <map>
#include <mutex>

#include "kiln/nn/layer_registry.h"

namespace kiln::nn {
namespace {

struct Registered {
  LambdaFunction function;
  UnaryLambdaFunction unary;  // set instead of `function` for a function of one tensor
};

struct Registry {
  std::mutex mu;
  std::map<std::string, Registered> functions;
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: registrations may run at load time
  return *r;
}

void add(const std::string& name, Registered entry, bool replace) {
  if (name.empty() || (!entry.function && !entry.unary)) {
    throw Error(ErrorCode::kInvalidArgument,
                "register_lambda_function: needs a name and a function, got '" + name + "'");
  }
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (!replace && r.functions.count(name)) {
    throw Error(ErrorCode::kAlreadyExists,
                "register_lambda_function: a function named '" + name +
                    "' is registered already (pass replace=true to override it)");
  }
  r.functions[name] = std::move(entry);
}

}  // namespace

Lambda::Lambda(LambdaFunction function, std::string function_name)
    : Layer("lambda"),
      function_(std::move(function)),
      function_name_(std::move(function_name)),
      unary_(false) {
  if (!function_) throw Error(ErrorCode::kInvalidArgument, "Lambda: the function is empty");
}

Lambda::Lambda(UnaryLambdaFunction function, std::string function_name)
    : Layer("lambda"), function_name_(std::move(function_name)), unary_(true) {
  if (!function) throw Error(ErrorCode::kInvalidArgument, "Lambda: the function is empty");
  function_ = [f = std::move(function)](const std::vector<Tensor>& xs) { return f(xs[0]); };
}

Tensor Lambda::call(const std::vector<Tensor>& inputs, CallContext&) {
  const std::string where = "Lambda '" + name() + "'";
  if (unary_ && inputs.size() != 1) {
    throw Error(ErrorCode::kInvalidArgument, where + " has a function of one tensor but got " +
                                                 std::to_string(inputs.size()) + " inputs");
  }
  Tensor out;
  try {
    out = function_(inputs);
  } catch (const Error& e) {
    throw Error(e.code(), where + ": " + e.what());
  }
  if (!out.defined()) {
    throw Error(ErrorCode::kInvalidArgument, where + ": the function returned no tensor");
  }
  return out;
}

Attrs Lambda::config() const {
  if (function_name_.empty()) {
    throw Error(ErrorCode::kFailedPrecondition,
                "Lambda '" + name() +
                    "': a Lambda needs a registered function name to be saved: make it as "
                    "Lambda(fn, \"function_name\") and call "
                    "kiln::nn::register_lambda_function(\"function_name\", fn) in the program "
                    "that loads the model");
  }
  return {{"function", function_name_}};
}

void register_lambda_function(const std::string& name, LambdaFunction function, bool replace) {
  add(name, {std::move(function), nullptr}, replace);
}

void register_lambda_function(const std::string& name, UnaryLambdaFunction function, bool replace) {
  add(name, {nullptr, std::move(function)}, replace);
}

bool is_lambda_function_registered(const std::string& name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.functions.count(name) != 0;
}

std::shared_ptr<Lambda> lambda_from_registry(const std::string& name) {
  Registered entry;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.functions.find(name);
    if (it == r.functions.end()) {
      throw Error(ErrorCode::kNotFound, "Lambda function '" + name +
                                            "' is not registered in this program: call "
                                            "kiln::nn::register_lambda_function(\"" +
                                            name + "\", fn) before loading the model");
    }
    entry = it->second;
  }
  if (entry.unary) return std::make_shared<Lambda>(std::move(entry.unary), name);
  return std::make_shared<Lambda>(std::move(entry.function), name);
}

KILN_REGISTER_LAYER("Lambda",
                    [](const Attrs& c) { return lambda_from_registry(c.get_string("function")); });

}  // namespace kiln::nn
