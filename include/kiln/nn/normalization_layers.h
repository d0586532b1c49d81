// Normalization layers beyond LayerNormalization and BatchNormalization (kiln/nn/layers.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/nn/layer.h"

namespace kiln::nn {

// Keras' GroupNormalization over the last (channel) axis: the channels are split into `groups`
// consecutive groups, and each example is normalised with the mean and variance of each group
// over its channels and every axis between batch and channels. Then, per channel, `scale`
// multiplies by gamma and `center` adds beta. groups = channels is InstanceNormalization,
// groups = 1 LayerNormalization over all non-batch axes. The channels must divide by groups.
class GroupNormalization : public Layer {
 public:
  explicit GroupNormalization(int64_t groups = 32, double epsilon = 1e-3, bool center = true,
                              bool scale = true);
  std::string type_name() const override { return "GroupNormalization"; }
  std::shared_ptr<Layer> clone() const override {
    return std::make_shared<GroupNormalization>(*this);
  }
  Attrs config() const override;
  void build(const std::vector<Shape>& input_shapes) override;
  Tensor call(const std::vector<Tensor>& inputs, CallContext& ctx) override;

 private:
  // The mean of t over each group's channels and the axes between batch and channels, for
  // every channel of the group: [batch, 1..., channels].
  Tensor group_mean(const Tensor& t) const;

  int64_t groups_;
  double epsilon_;
  bool center_, scale_;
  Variable gamma_, beta_;
};

}  // namespace kiln::nn
