// Layers that act on whole channels or time steps: SpatialDropout1D/2D, which drop whole
// channels, and TimeDistributed, which applies a layer to every time step.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/nn/layer.h"

namespace kiln::nn {

// In training, zeroes a `rate` fraction of the channels of each example (every step or pixel
// of a dropped channel) and scales the rest by 1 / (1 - rate); the identity in inference.
// The input is [batch, spatial..., channels] with `spatial_rank` spatial axes.
class SpatialDropout : public Layer {
 public:
  SpatialDropout(std::string name, int64_t spatial_rank, double rate);
  Attrs config() const override;
  Tensor call(const std::vector<Tensor>& inputs, CallContext& ctx) override;
  double rate() const { return rate_; }

 private:
  int64_t spatial_rank_;
  double rate_;
};

// [batch, steps, channels].
class SpatialDropout1D : public SpatialDropout {
 public:
  explicit SpatialDropout1D(double rate) : SpatialDropout("spatial_dropout1d", 1, rate) {}
  std::string type_name() const override { return "SpatialDropout1D"; }
  std::shared_ptr<Layer> clone() const override {
    return std::make_shared<SpatialDropout1D>(*this);
  }
};

// [batch, h, w, channels].
class SpatialDropout2D : public SpatialDropout {
 public:
  explicit SpatialDropout2D(double rate) : SpatialDropout("spatial_dropout2d", 2, rate) {}
  std::string type_name() const override { return "SpatialDropout2D"; }
  std::shared_ptr<Layer> clone() const override {
    return std::make_shared<SpatialDropout2D>(*this);
  }
};

// Applies `layer` to every time step of [batch, time, ...] inputs: batch and time are merged
// into one axis for the call and split again after it, so every step shares the layer's
// weights. Those weights are TimeDistributed's (weights(), count_params()); the layer is built
// on the first call with the name "<this layer's name>/<its name>", so its variables are named
// "time_distributed/dense/kernel". Copies share the wrapped layer.
class TimeDistributed : public Layer {
 public:
  explicit TimeDistributed(LayerRef layer);
  std::string type_name() const override { return "TimeDistributed"; }
  std::shared_ptr<Layer> clone() const override { return std::make_shared<TimeDistributed>(*this); }
  // "layer": the wrapped layer's class, "layer.<key>": its config, "layer_name": its name.
  Attrs config() const override;
  void build(const std::vector<Shape>& input_shapes) override;
  Tensor call(const std::vector<Tensor>& inputs, CallContext& ctx) override;
  const LayerPtr& layer() const { return layer_; }

 private:
  LayerPtr layer_;
  std::string layer_name_;  // the wrapped layer's own name, before build prefixes it
};

}  // namespace kiln::nn
