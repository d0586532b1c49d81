// GroupNormalization: group statistics as means of per-channel means (exact, since every
// channel has as many values), so the axes between batch and channels may be of any size.
#include "kiln/nn/normalization_layers.h"

#include <cmath>

#include "kiln/nn/layer_registry.h"
#include "kiln/ops.h"
#include "src/api/nn/layer_util.h"

namespace kiln::nn {

GroupNormalization::GroupNormalization(int64_t groups, double epsilon, bool center, bool scale)
    : Layer("group_normalization"),
      groups_(groups),
      epsilon_(epsilon),
      center_(center),
      scale_(scale) {
  if (groups < 1) {
    throw Error(ErrorCode::kInvalidArgument,
                "GroupNormalization: groups must be positive, got " + std::to_string(groups));
  }
  if (!std::isfinite(epsilon) || epsilon < 0) {
    throw Error(
        ErrorCode::kInvalidArgument,
        "GroupNormalization: epsilon must be finite and >= 0, got " + std::to_string(epsilon));
  }
}

void GroupNormalization::build(const std::vector<Shape>& shapes) {
  if (shapes.size() != 1 || shapes[0].size() < 2 || shapes[0].back() == kUnknownDim) {
    throw Error(ErrorCode::kInvalidArgument,
                "GroupNormalization '" + name() +
                    "' expects one input [batch, ..., channels] with known channels, got " +
                    (shapes.size() == 1 ? shape_str(shapes[0])
                                        : std::to_string(shapes.size()) + " inputs"));
  }
  const int64_t channels = shapes[0].back();
  if (channels % groups_ != 0) {
    throw Error(ErrorCode::kInvalidArgument,
                "GroupNormalization '" + name() + "': the " + std::to_string(channels) +
                    " channels of input " + shape_str(shapes[0]) + " do not split into groups=" +
                    std::to_string(groups_) + " (groups must divide the channel count)");
  }
  if (scale_) gamma_ = add_weight("gamma", {channels}, ones_init());
  if (center_) beta_ = add_weight("beta", {channels}, zeros_init());
}

Tensor GroupNormalization::group_mean(const Tensor& t) const {
  const int64_t channels = t.dim(-1), per_group = channels / groups_;
  Axes between;
  for (int64_t a = 1; a + 1 < t.rank(); ++a) between.push_back(a);
  Tensor per_channel = between.empty() ? t : mean(t, between, /*keepdims=*/true);
  Shape split = per_channel.shape(), merged = per_channel.shape();
  split[0] = merged[0] = -1;  // the batch may be unknown while recording
  split.back() = groups_;
  split.push_back(per_group);
  Tensor means = mean(reshape(per_channel, split), {-1}, /*keepdims=*/true);  // [b, 1..., g, 1]
  // Each group's mean repeated for each of its channels.
  return reshape(means + zeros({groups_, per_group}, t.dtype()), merged);
}

Tensor GroupNormalization::call(const std::vector<Tensor>& inputs, CallContext& ctx) {
  if (inputs.size() != 1) {
    throw Error(ErrorCode::kInvalidArgument, "GroupNormalization '" + name() +
                                                 "' takes one input, got " +
                                                 std::to_string(inputs.size()));
  }
  return detail::in_f32(inputs[0], ctx, [&](const Tensor& x) {
    Tensor centered = x - group_mean(x);
    Tensor y = centered * rsqrt(group_mean(square(centered)) + epsilon_);
    if (scale_) y = y * ctx.read(gamma_);
    if (center_) y = y + ctx.read(beta_);
    return y;
  });
}

Attrs GroupNormalization::config() const {
  return {{"groups", groups_}, {"epsilon", epsilon_}, {"center", center_}, {"scale", scale_}};
}

KILN_REGISTER_LAYER("GroupNormalization", [](const Attrs& c) {
  return std::make_shared<GroupNormalization>(c.get_int("groups"), c.get_float("epsilon"),
                                              c.get_bool("center"), c.get_bool("scale"));
});

}  // namespace kiln::nn
