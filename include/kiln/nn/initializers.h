// Weight initializers (Keras semantics). Each is deterministic in its seed.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <type_traits>
#include <utility>

#include "kiln/attrs.h"
#include "kiln/tensor.h"

namespace kiln::nn {

// Makes a concrete tensor of `shape` and `dtype` from `seed`. The built-in ones carry their
// Keras name and arguments ("glorot_uniform", "constant" {value}), so a saved model records
// them; any other callable converts to a custom initializer (saved as "custom": a loaded model
// builds its layers with zeros, then restores the saved weights over them).
class Initializer {
 public:
  using Fn = std::function<Tensor(const Shape& shape, DType dtype, uint64_t seed)>;
  Initializer() = default;
  Initializer(std::string name, Attrs config, Fn fn)
      : name_(std::move(name)), config_(std::move(config)), fn_(std::move(fn)) {}
  template <typename F, typename = std::enable_if_t<
                            !std::is_same_v<std::decay_t<F>, Initializer> &&
                            std::is_invocable_r_v<Tensor, F&, const Shape&, DType, uint64_t>>>
  Initializer(F fn) : name_("custom"), fn_(std::move(fn)) {}  // NOLINT: implicit on purpose

  Tensor operator()(const Shape& shape, DType dtype, uint64_t seed) const;
  explicit operator bool() const { return static_cast<bool>(fn_); }
  const std::string& name() const { return name_; }
  const Attrs& config() const { return config_; }

 private:
  std::string name_;
  Attrs config_;
  Fn fn_;
};

// The initializer a name and arguments describe, as Initializer::name()/config() give them;
// "custom" gives zeros_init() (see above). An unknown name is kInvalidArgument listing the known.
Initializer initializer_from_config(const std::string& name, const Attrs& config);

// Fan-in/fan-out as Keras computes them: for rank >= 2, receptive field = product of all but
// the last two dims; fan_in = shape[-2] * field, fan_out = shape[-1] * field.
std::pair<double, double> compute_fans(const Shape& shape);

Initializer zeros_init();
Initializer ones_init();
Initializer constant_init(double value);
Initializer random_uniform_init(double low = -0.05, double high = 0.05);
Initializer random_normal_init(double mean = 0, double stddev = 0.05);
// Normal truncated to two standard deviations (resampled, as Keras does).
Initializer truncated_normal_init(double mean = 0, double stddev = 0.05);
Initializer glorot_uniform();  // U(-l, l), l = sqrt(6 / (fan_in + fan_out))
Initializer glorot_normal();   // truncated normal, stddev = sqrt(2 / (fan_in + fan_out)) / .8796
Initializer he_uniform();      // l = sqrt(6 / fan_in)
Initializer he_normal();       // truncated normal, stddev = sqrt(2 / fan_in) / .8796
// A (semi-)orthogonal matrix times `gain`: the weight flattened to [prod(shape[:-1]), shape[-1]]
// has orthonormal columns (tall) or rows (wide). Keras' default for recurrent kernels.
Initializer orthogonal_init(double gain = 1.0);

}  // namespace kiln::nn
