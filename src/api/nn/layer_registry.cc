// The layer class registry: type name -> factory from a config.
#include "kiln/nn/layer_registry.h"

#include <map>
#include <mutex>

#include "kiln/error.h"

namespace kiln::nn {
namespace {

struct Registry {
  std::mutex mu;
  std::map<std::string, LayerFactory> factories;
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: registrations run at load time
  return *r;
}

}  // namespace

void register_layer(const std::string& type_name, LayerFactory factory, bool replace) {
  if (type_name.empty() || !factory) {
    throw Error(ErrorCode::kInvalidArgument,
                "register_layer: needs a class name and a factory, got '" + type_name + "'");
  }
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (!replace && r.factories.count(type_name)) {
    throw Error(ErrorCode::kAlreadyExists,
                "register_layer: layer class '" + type_name +
                    "' is registered already (pass replace=true to override it)");
  }
  r.factories[type_name] = std::move(factory);
}

bool is_layer_registered(const std::string& type_name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.factories.count(type_name) != 0;
}

std::vector<std::string> registered_layers() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::string> names;
  for (const auto& [name, factory] : r.factories) names.push_back(name);
  return names;
}

LayerPtr layer_from_config(const std::string& type_name, const Attrs& config,
                           const std::string& name) {
  LayerFactory factory;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.factories.find(type_name);
    if (it != r.factories.end()) factory = it->second;
  }
  if (!factory) {
    throw Error(ErrorCode::kNotFound,
                "layer '" + name + "' is of class '" + type_name +
                    "', which this program has not registered: register it with "
                    "KILN_REGISTER_LAYER(\"" +
                    type_name + "\", <factory>) or kiln::nn::register_layer before loading");
  }
  LayerPtr layer;
  try {
    layer = factory(config);
  } catch (const Error& e) {
    throw Error(e.code(), "layer '" + name + "' (" + type_name + "): " + e.what());
  }
  if (!layer) {
    throw Error(ErrorCode::kInternal,
                "the factory of layer class '" + type_name + "' returned no layer");
  }
  layer->set_name(name);
  return layer;
}

void put_initializer(Attrs& config, const std::string& key, const Initializer& init) {
  config.set(key, init.name());
  for (const auto& [arg, value] : init.config().values()) config.set(key + "." + arg, value);
}

Initializer get_initializer(const Attrs& config, const std::string& key,
                            const Initializer& fallback) {
  if (!config.has(key)) return fallback;
  Attrs args;
  std::string prefix = key + ".";
  for (const auto& [name, value] : config.values()) {
    if (name.compare(0, prefix.size(), prefix) == 0) args.set(name.substr(prefix.size()), value);
  }
  return initializer_from_config(config.get_string(key), args);
}

}  // namespace kiln::nn
