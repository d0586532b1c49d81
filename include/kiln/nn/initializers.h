// Weight initializers (Keras semantics). Each is deterministic in its seed.
#pragma once

#include <cstdint>
#include <functional>

#include "kiln/tensor.h"

namespace kiln::nn {

// Makes a concrete tensor of `shape` and `dtype` from `seed`.
using Initializer = std::function<Tensor(const Shape& shape, DType dtype, uint64_t seed)>;

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

}  // namespace kiln::nn
