// SpatialDropout1D/2D and TimeDistributed.
#include "kiln/nn/wrapper_layers.h"

#include <optional>

#include "kiln/graph.h"
#include "kiln/nn/layer_registry.h"
#include "kiln/ops.h"
#include "src/api/nn/layer_util.h"

namespace kiln::nn {
namespace {

// TimeDistributed's input: [batch, time, ...] with the dimensions after time known (batch and
// time merge into the one dimension reshape may infer).
void check_steps(const std::vector<Shape>& shapes, const Layer& layer) {
  if (shapes.size() == 1 && shapes[0].size() >= 3 &&
      is_fully_defined(Shape(shapes[0].begin() + 2, shapes[0].end()))) {
    return;
  }
  throw Error(
      ErrorCode::kInvalidArgument,
      "TimeDistributed '" + layer.name() +
          "' expects one input [batch, time, ...] with known dimensions after time, got " +
          (shapes.size() == 1 ? shape_str(shapes[0]) : std::to_string(shapes.size()) + " inputs"));
}

// y [batch * time, out...] as [batch, time, out...], with the batch and time of x.
Tensor split_steps(const Tensor& y, const Tensor& x, const Layer& layer) {
  Shape out(y.shape().begin() + 1, y.shape().end());
  if (!is_fully_defined(out)) {
    throw Error(ErrorCode::kInvalidArgument,
                "TimeDistributed '" + layer.name() + "': the wrapped layer gives " +
                    shape_str(y.shape()) + ", with unknown dimensions after the batch");
  }
  Shape target = {x.dim(0), x.dim(1)};
  target.insert(target.end(), out.begin(), out.end());
  // reshape infers one unknown (kUnknownDim is -1); with both unknown while recording, the
  // shape comes from x when the graph runs.
  if (x.dim(0) != kUnknownDim || x.dim(1) != kUnknownDim) return reshape(y, target);
  Axes features;
  for (int64_t a = 2; a < x.rank(); ++a) features.push_back(a);
  Tensor like = stop_gradient(sum(x, features));  // [batch, time]: for its shape only
  for (size_t i = 0; i < out.size(); ++i) like = expand_dims(like, -1);
  return reshape_like(y, like + zeros(out, like.dtype()));
}

}  // namespace

// ---- SpatialDropout -----------------------------------------------------------------------

SpatialDropout::SpatialDropout(std::string name, int64_t spatial_rank, double rate)
    : Layer(std::move(name)), spatial_rank_(spatial_rank), rate_(rate) {
  supports_masking_ = true;
  if (!(rate >= 0 && rate < 1)) {
    throw Error(ErrorCode::kInvalidArgument, "SpatialDropout" + std::to_string(spatial_rank) +
                                                 "D: rate must be in [0, 1), got " +
                                                 std::to_string(rate));
  }
}

Tensor SpatialDropout::call(const std::vector<Tensor>& inputs, CallContext& ctx) {
  const Tensor& x = detail::single_input(inputs, *this);
  if (x.rank() != spatial_rank_ + 2) {
    throw Error(ErrorCode::kInvalidArgument,
                type_name() + " '" + name() + "' expects input " +
                    (spatial_rank_ == 1 ? "[batch, steps, channels]" : "[batch, h, w, channels]") +
                    ", got " + shape_str(x.shape()));
  }
  if (!ctx.training() || rate_ == 0) return x;
  Axes spatial;
  for (int64_t a = 1; a <= spatial_rank_; ++a) spatial.push_back(a);
  // One draw per example and channel, shared by all its steps or pixels.
  Tensor per_channel = stop_gradient(sum(x, spatial, /*keepdims=*/true));  // for its shape only
  Tensor keep = random_bernoulli_like(per_channel, ctx.next_seed(), 1.0 - rate_, bool_);
  return where(keep, x * (1.0 / (1.0 - rate_)), zeros_like(x));
}

// ---- TimeDistributed ----------------------------------------------------------------------

TimeDistributed::TimeDistributed(LayerRef layer) : Layer("time_distributed"), layer_(layer.get()) {
  if (!layer_) {
    throw Error(ErrorCode::kInvalidArgument, "TimeDistributed: needs a layer to wrap, got none");
  }
  layer_name_ = layer_->name();
}

void TimeDistributed::build(const std::vector<Shape>& shapes) {
  check_steps(shapes, *this);
  Shape step = {kUnknownDim};
  step.insert(step.end(), shapes[0].begin() + 2, shapes[0].end());
  if (!layer_->built()) layer_->set_name(name() + "/" + layer_name_);
  build_child(*layer_, {step});
}

Tensor TimeDistributed::call(const std::vector<Tensor>& inputs, CallContext& ctx) {
  const Tensor& x = detail::single_input(inputs, *this);
  check_steps({x.shape()}, *this);
  Shape merged = {-1};
  merged.insert(merged.end(), x.shape().begin() + 2, x.shape().end());
  std::optional<Graph::NameScope> scope;
  if (x.is_symbolic()) scope.emplace(x.graph(), layer_name_);  // "time_distributed/dense/..."
  Tensor y = (*layer_)(reshape(x, merged), ctx);
  return split_steps(y, x, *this);
}

// ---- configs and registration (for saved models) --------------------------------------------

Attrs SpatialDropout::config() const { return {{"rate", rate_}}; }

Attrs TimeDistributed::config() const {
  Attrs c{{"layer", layer_->type_name()}, {"layer_name", layer_name_}};
  const Attrs inner = layer_->config();  // kept alive: values() refers into it
  for (const auto& [key, value] : inner.values()) c.set("layer." + key, value);
  return c;
}

KILN_REGISTER_LAYER("SpatialDropout1D", [](const Attrs& c) {
  return std::make_shared<SpatialDropout1D>(c.get_float("rate"));
});
KILN_REGISTER_LAYER("SpatialDropout2D", [](const Attrs& c) {
  return std::make_shared<SpatialDropout2D>(c.get_float("rate"));
});
KILN_REGISTER_LAYER("TimeDistributed", [](const Attrs& c) {
  Attrs inner;
  for (const auto& [key, value] : c.values()) {
    if (key.rfind("layer.", 0) == 0) inner.set(key.substr(6), value);
  }
  return std::make_shared<TimeDistributed>(
      layer_from_config(c.get_string("layer"), inner, c.get_string("layer_name")));
});

}  // namespace kiln::nn
