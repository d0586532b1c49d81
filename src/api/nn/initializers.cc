// Weight initializers (Keras semantics), deterministic in their seed: constants, uniform,
// normal, truncated normal, the variance-scaling family (Glorot, He) and orthogonal.
#include "kiln/nn/initializers.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#define EIGEN_DONT_PARALLELIZE
#include <Eigen/QR>

#include "kiln/graph.h"
#include "kiln/ops.h"

namespace kiln::nn {
namespace {

// The stddev of a standard normal truncated to [-2, 2]; variance scaling divides by it so the
// truncated samples have the requested stddev.
constexpr double kTruncatedStddev = 0.87962566103423978;
// Rounds of resampling before the rare survivors are clamped (each round keeps ~4.6%).
constexpr int kMaxResampleRounds = 32;

[[noreturn]] void fail(const std::string& message) {
  throw Error(ErrorCode::kInvalidArgument, message);
}

void require_floating(const char* init, DType dtype) {
  if (!is_floating(dtype)) {
    fail(std::string(init) + ": needs a floating dtype, got " + dtype_name(dtype));
  }
}

// A seed for resampling round `round`, far from the user's nearby seeds (splitmix64).
uint64_t derived_seed(uint64_t seed, uint64_t round) {
  uint64_t z = seed + round * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Standard normal samples truncated to [-2, 2]: out-of-range values are redrawn from
// independent streams (the same seed always redraws the same way).
std::vector<double> truncated_standard_normal(const Shape& shape, DType dtype, uint64_t seed) {
  DType draw = dtype == f64 ? f64 : f32;
  std::vector<double> z = random_normal(shape, seed, 0, 1, draw).to_vector<double>();
  std::vector<size_t> outside;
  for (size_t i = 0; i < z.size(); ++i) {
    if (std::abs(z[i]) > 2) outside.push_back(i);
  }
  for (int round = 1; round <= kMaxResampleRounds && !outside.empty(); ++round) {
    std::vector<double> fresh =
        random_normal({static_cast<int64_t>(outside.size())}, derived_seed(seed, round), 0, 1, draw)
            .to_vector<double>();
    std::vector<size_t> still;
    for (size_t k = 0; k < outside.size(); ++k) {
      z[outside[k]] = fresh[k];
      if (std::abs(fresh[k]) > 2) still.push_back(outside[k]);
    }
    outside = std::move(still);
  }
  for (size_t i : outside) z[i] = std::clamp(z[i], -2.0, 2.0);
  return z;
}

Tensor truncated_normal(const Shape& shape, DType dtype, uint64_t seed, double mean,
                        double stddev) {
  std::vector<double> z = truncated_standard_normal(shape, dtype, seed);
  for (double& v : z) v = mean + stddev * v;
  return Tensor::from_vector(z, shape).to(dtype);
}

// Layers build their weights while a step is being traced (a default graph is set): the
// initializer's ops must still compute now, so the default graph is lifted while it runs.
Initializer eager(std::string name, Attrs config, Initializer::Fn init) {
  return Initializer(std::move(name), std::move(config),
                     [init = std::move(init)](const Shape& shape, DType dtype, uint64_t seed) {
                       Graph::DefaultGuard no_graph{Graph(std::shared_ptr<detail::GraphImpl>())};
                       return init(shape, dtype, seed);
                     });
}

enum class FanMode { kIn, kAvg };

// Keras's VarianceScaling: variance scale / max(1, fan).
double scaled_variance(const Shape& shape, double scale, FanMode mode) {
  auto [fan_in, fan_out] = compute_fans(shape);
  double fan = mode == FanMode::kIn ? fan_in : (fan_in + fan_out) / 2;
  return scale / std::max(1.0, fan);
}

Initializer variance_scaling_uniform(std::string name, double scale, FanMode mode) {
  return eager(std::move(name), {}, [=](const Shape& shape, DType dtype, uint64_t seed) {
    require_floating("variance_scaling", dtype);
    double limit = std::sqrt(3 * scaled_variance(shape, scale, mode));
    return random_uniform(shape, seed, -limit, limit, dtype);
  });
}

Initializer variance_scaling_normal(std::string name, double scale, FanMode mode) {
  return eager(std::move(name), {}, [=](const Shape& shape, DType dtype, uint64_t seed) {
    require_floating("variance_scaling", dtype);
    double stddev = std::sqrt(scaled_variance(shape, scale, mode)) / kTruncatedStddev;
    return truncated_normal(shape, dtype, seed, 0, stddev);
  });
}

}  // namespace

std::pair<double, double> compute_fans(const Shape& shape) {
  for (int64_t d : shape) {
    if (d < 0) fail("compute_fans: the shape must be fully known, got " + shape_str(shape));
  }
  if (shape.empty()) return {1, 1};
  if (shape.size() == 1) return {double(shape[0]), double(shape[0])};
  double field = 1;
  for (size_t i = 0; i + 2 < shape.size(); ++i) field *= static_cast<double>(shape[i]);
  return {static_cast<double>(shape[shape.size() - 2]) * field,
          static_cast<double>(shape.back()) * field};
}

Initializer zeros_init() {
  return eager("zeros", {}, [](const Shape& shape, DType dtype, uint64_t) { return zeros(shape, dtype); });
}

Initializer ones_init() {
  return eager("ones", {}, [](const Shape& shape, DType dtype, uint64_t) { return ones(shape, dtype); });
}

Initializer constant_init(double value) {
  return eager(
      "constant", {{"value", value}}, [value](const Shape& shape, DType dtype, uint64_t) { return full(shape, value, dtype); });
}

Initializer random_uniform_init(double low, double high) {
  if (!(low <= high)) {
    fail("random_uniform_init: low must not exceed high, got [" + std::to_string(low) + ", " +
         std::to_string(high) + "]");
  }
  return eager("random_uniform", {{"minval", low}, {"maxval", high}},
               [=](const Shape& shape, DType dtype, uint64_t seed) {
    require_floating("random_uniform_init", dtype);
    return random_uniform(shape, seed, low, high, dtype);
  });
}

Initializer random_normal_init(double mean, double stddev) {
  if (!(stddev >= 0))
    fail("random_normal_init: stddev must be >= 0, got " + std::to_string(stddev));
  return eager("random_normal", {{"mean", mean}, {"stddev", stddev}},
               [=](const Shape& shape, DType dtype, uint64_t seed) {
    require_floating("random_normal_init", dtype);
    return random_normal(shape, seed, mean, stddev, dtype);
  });
}

Initializer truncated_normal_init(double mean, double stddev) {
  if (!(stddev >= 0)) {
    fail("truncated_normal_init: stddev must be >= 0, got " + std::to_string(stddev));
  }
  return eager("truncated_normal", {{"mean", mean}, {"stddev", stddev}},
               [=](const Shape& shape, DType dtype, uint64_t seed) {
    require_floating("truncated_normal_init", dtype);
    return truncated_normal(shape, dtype, seed, mean, stddev);
  });
}

Initializer glorot_uniform() {
  return variance_scaling_uniform("glorot_uniform", 1, FanMode::kAvg);
}
Initializer glorot_normal() { return variance_scaling_normal("glorot_normal", 1, FanMode::kAvg); }
Initializer he_uniform() { return variance_scaling_uniform("he_uniform", 2, FanMode::kIn); }
Initializer he_normal() { return variance_scaling_normal("he_normal", 2, FanMode::kIn); }

Initializer orthogonal_init(double gain) {
  return eager("orthogonal", {{"gain", gain}}, [gain](const Shape& shape, DType dtype,
                                                        uint64_t seed) {
    require_floating("orthogonal_init", dtype);
    if (shape.size() < 2) {
      fail("orthogonal_init: needs a shape of rank 2 or more, got " + shape_str(shape));
    }
    int64_t rows = 1;
    for (size_t d = 0; d + 1 < shape.size(); ++d) rows *= shape[d];
    const int64_t cols = shape.back();
    if (rows == 0 || cols == 0) return zeros(shape, dtype);
    // Q of a tall normal matrix, its columns' signs fixed by R's diagonal so that Q is uniformly
    // distributed; transposed when the weight is wide (Keras' Orthogonal).
    const int64_t tall = std::max(rows, cols), narrow = std::min(rows, cols);
    std::vector<double> z = random_normal({tall, narrow}, seed, 0, 1, f64).to_vector<double>();
    Eigen::Map<Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>> a(
        z.data(), tall, narrow);
    Eigen::HouseholderQR<Eigen::MatrixXd> qr(a);
    Eigen::MatrixXd q = qr.householderQ() * Eigen::MatrixXd::Identity(tall, narrow);
    const Eigen::MatrixXd r = qr.matrixQR().topRows(narrow).triangularView<Eigen::Upper>();
    for (int64_t j = 0; j < narrow; ++j)
      if (r(j, j) < 0) q.col(j) = -q.col(j);
    std::vector<double> out(static_cast<size_t>(rows * cols));
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j)
        out[i * cols + j] = gain * (rows >= cols ? q(i, j) : q(j, i));
    return Tensor::from_vector(out, shape).to(dtype);
  });
}

Tensor Initializer::operator()(const Shape& shape, DType dtype, uint64_t seed) const {
  if (!fn_) fail("an empty Initializer was called (give the layer an initializer)");
  return fn_(shape, dtype, seed);
}

Initializer initializer_from_config(const std::string& name, const Attrs& config) {
  if (name == "zeros" || name == "custom") return zeros_init();
  if (name == "ones") return ones_init();
  if (name == "constant") return constant_init(config.get_float("value"));
  if (name == "random_uniform") {
    return random_uniform_init(config.get_float("minval"), config.get_float("maxval"));
  }
  if (name == "random_normal") {
    return random_normal_init(config.get_float("mean"), config.get_float("stddev"));
  }
  if (name == "truncated_normal") {
    return truncated_normal_init(config.get_float("mean"), config.get_float("stddev"));
  }
  if (name == "glorot_uniform") return glorot_uniform();
  if (name == "glorot_normal") return glorot_normal();
  if (name == "he_uniform") return he_uniform();
  if (name == "he_normal") return he_normal();
  if (name == "orthogonal") return orthogonal_init(config.get_float("gain"));
  fail("unknown initializer '" + name +
       "' (known: zeros, ones, constant, random_uniform, random_normal, truncated_normal, "
       "glorot_uniform, glorot_normal, he_uniform, he_normal, orthogonal, custom)");
}

}  // namespace kiln::nn
