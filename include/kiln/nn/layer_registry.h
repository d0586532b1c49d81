// Layer classes by name, for rebuilding a saved model (Keras' register_keras_serializable).
// A layer's type_name() and config() describe it; the factory registered under that name
// rebuilds it from the config. Built-in layers register themselves in their own source files
// with KILN_REGISTER_LAYER, exactly as a user registers a custom layer:
//
//   class Scale : public kiln::nn::Layer {
//    public:
//     explicit Scale(double factor) : Layer("scale"), factor_(factor) {}
//     static kiln::nn::LayerPtr from_config(const kiln::Attrs& c) {
//       return std::make_shared<Scale>(c.get_float("factor"));
//     }
//     kiln::Attrs config() const override { return {{"factor", factor_}}; }
//     ...
//   };
//   KILN_REGISTER_LAYER("Scale", Scale::from_config);
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "kiln/attrs.h"
#include "kiln/nn/initializers.h"
#include "kiln/nn/layer.h"

namespace kiln::nn {

using LayerFactory = std::function<LayerPtr(const Attrs& config)>;

// Registers `type_name` (the class's type_name()). A name registered twice is kAlreadyExists
// unless `replace` is set. Thread-safe.
void register_layer(const std::string& type_name, LayerFactory factory, bool replace = false);
bool is_layer_registered(const std::string& type_name);
std::vector<std::string> registered_layers();  // sorted
// Rebuilds a layer (not yet built: build() runs on its first call) named `name`. An unknown
// class is kNotFound naming it and saying how to register it; a factory's own kiln::Error
// (a missing or mistyped config entry) is rethrown with the class and layer name in front.
LayerPtr layer_from_config(const std::string& type_name, const Attrs& config,
                           const std::string& name);

// Initializers inside a layer config: `key` holds the initializer's name, "key.<arg>" its
// arguments. get_initializer gives `fallback` when the config has no `key`.
void put_initializer(Attrs& config, const std::string& key, const Initializer& init);
Initializer get_initializer(const Attrs& config, const std::string& key,
                            const Initializer& fallback);

namespace detail {
struct LayerRegistration {
  LayerRegistration(const std::string& type_name, LayerFactory factory) {
    register_layer(type_name, std::move(factory));
  }
};
}  // namespace detail

#define KILN_REGISTER_LAYER_CAT2(a, b) a##b
#define KILN_REGISTER_LAYER_CAT(a, b) KILN_REGISTER_LAYER_CAT2(a, b)
// At namespace scope in a source file: registers a layer class when the program (or the
// shared library holding it) loads.
#define KILN_REGISTER_LAYER(type_name, factory)                                             \
  static const ::kiln::nn::detail::LayerRegistration KILN_REGISTER_LAYER_CAT(              \
      kiln_layer_registration_, __COUNTER__)(type_name, factory)

}  // namespace kiln::nn
