// Optimizer configs (Keras' get_config / from_config) and the registry of optimizer classes
// that load_model rebuilds optimizers from.
#include <map>
#include <mutex>

#include "kiln/optim.h"

namespace kiln::optim {
namespace {

struct Registry {
  std::mutex mu;
  std::map<std::string, OptimizerFactory> factories;
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: registrations run at load time
  return *r;
}

// The schedule of a config ("learning_rate" and "learning_rate.<argument>").
Schedule schedule_of(const Attrs& c) {
  Attrs args;
  for (const auto& [key, value] : c.values())
    if (key.rfind("learning_rate.", 0) == 0) args.set(key.substr(14), value);
  return schedule_from_config(c.get_string("learning_rate"), args);
}

// The constant learning rate of a config, for the optimizers that take no schedule.
double constant_rate(const std::string& optimizer, const Attrs& c) {
  Schedule s = schedule_of(c);
  if (s.name() != "constant") {
    throw Error(ErrorCode::kInvalidArgument,
                optimizer + ": takes a constant learning rate, the config has a '" + s.name() +
                    "' schedule");
  }
  return s.config().get_float("lr");
}

// Registers the built-in optimizers; runs when the library loads.
const bool kBuiltIns = [] {
  register_optimizer("SGD", [](const Attrs& c) {
    return std::make_shared<SGD>(schedule_of(c), c.get_float("momentum"), c.get_bool("nesterov"));
  });
  register_optimizer("Adam", [](const Attrs& c) {
    return std::make_shared<Adam>(schedule_of(c), c.get_float("beta_1"), c.get_float("beta_2"),
                                  c.get_float("epsilon"));
  });
  register_optimizer("AdamW", [](const Attrs& c) {
    return std::make_shared<AdamW>(constant_rate("AdamW", c), c.get_float("weight_decay"),
                                   c.get_float("beta_1"), c.get_float("beta_2"),
                                   c.get_float("epsilon"));
  });
  register_optimizer("RMSprop", [](const Attrs& c) {
    return std::make_shared<RMSprop>(constant_rate("RMSprop", c), c.get_float("rho"),
                                     c.get_float("momentum"), c.get_float("epsilon"),
                                     c.get_bool("centered"));
  });
  register_optimizer("LossScaleOptimizer", [](const Attrs& c) {
    Attrs inner;
    const std::string prefix = "inner_optimizer.";
    for (const auto& [key, value] : c.values())
      if (key.rfind(prefix, 0) == 0) inner.set(key.substr(prefix.size()), value);
    return std::make_shared<LossScaleOptimizer>(
        optimizer_from_config(c.get_string("inner_optimizer"), inner),
        LossScaleOptions{c.get_bool("dynamic"), c.get_float("initial_scale"),
                         c.get_int("growth_steps")});
  });
  return true;
}();

}  // namespace

Attrs Optimizer::config() const {
  if (!schedule_ || schedule_.name() == "custom") {
    throw Error(ErrorCode::kFailedPrecondition,
                name() +
                    ": its learning-rate schedule is a custom function, which cannot be "
                    "saved; use a built-in schedule (constant_lr, exponential_decay, "
                    "cosine_decay, linear_warmup)");
  }
  Attrs c = hyper_parameters();
  c.set("learning_rate", schedule_.name());
  for (const auto& [key, value] : schedule_.config().values()) c.set("learning_rate." + key, value);
  c.set("global_clipnorm", global_clipnorm_);
  if (override_lr_ >= 0) c.set("learning_rate_override", override_lr_);
  return c;
}

Attrs SGD::hyper_parameters() const { return {{"momentum", momentum_}, {"nesterov", nesterov_}}; }
Attrs Adam::hyper_parameters() const {
  return {{"beta_1", beta1_}, {"beta_2", beta2_}, {"epsilon", eps_}};
}
Attrs AdamW::hyper_parameters() const {
  Attrs c = Adam::hyper_parameters();
  c.set("weight_decay", weight_decay_);
  return c;
}
Attrs RMSprop::hyper_parameters() const {
  return {{"rho", rho_}, {"momentum", momentum_}, {"epsilon", eps_}, {"centered", centered_}};
}

void register_optimizer(const std::string& name, OptimizerFactory factory, bool replace) {
  if (name.empty() || !factory) {
    throw Error(ErrorCode::kInvalidArgument,
                "register_optimizer: needs a class name and a factory, got '" + name + "'");
  }
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (!replace && r.factories.count(name)) {
    throw Error(ErrorCode::kAlreadyExists,
                "register_optimizer: optimizer class '" + name +
                    "' is registered already (pass replace=true to override it)");
  }
  r.factories[name] = std::move(factory);
}

std::shared_ptr<Optimizer> optimizer_from_config(const std::string& name, const Attrs& config) {
  OptimizerFactory factory;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.factories.find(name);
    if (it != r.factories.end()) factory = it->second;
  }
  if (!factory) {
    throw Error(ErrorCode::kNotFound, "optimizer class '" + name +
                                          "' is not registered in this program: register it with "
                                          "kiln::optim::register_optimizer before loading");
  }
  std::shared_ptr<Optimizer> opt;
  try {
    opt = factory(config);
  } catch (const Error& e) {
    throw Error(e.code(), "optimizer '" + name + "': " + e.what());
  }
  if (!opt) {
    throw Error(ErrorCode::kInternal,
                "the factory of optimizer class '" + name + "' returned no optimizer");
  }
  if (config.has("global_clipnorm")) opt->clip_global_norm(config.get_float("global_clipnorm"));
  if (config.has("learning_rate_override")) {
    opt->set_learning_rate(config.get_float("learning_rate_override"));
  }
  return opt;
}

}  // namespace kiln::optim
