// The 1-d and global pooling layers: 1-d windows run as 2-d ones over [batch, steps, 1,
// channels]; global pooling is a mean or max reduction.
#include "kiln/nn/pooling_layers.h"

#include "kiln/nn/layer_registry.h"
#include "kiln/ops.h"
#include "src/api/nn/layer_util.h"

namespace kiln::nn {
// ---- MaxPool1D, AveragePool1D ---------------------------------------------------------------

Pool1D::Pool1D(const std::string& type, std::string name, bool max, int64_t pool_size,
               std::optional<int64_t> strides, std::string padding)
    : Layer(std::move(name)),
      max_(max),
      pool_(pool_size),
      strides_(strides.value_or(pool_size)),
      padding_(std::move(padding)) {
  if (pool_ <= 0 || strides_ <= 0) {
    throw Error(ErrorCode::kInvalidArgument,
                type + ": pool_size and strides must be positive, got " + std::to_string(pool_) +
                    " and " + std::to_string(strides_));
  }
  if (padding_ != "valid" && padding_ != "same") {
    throw Error(ErrorCode::kInvalidArgument,
                type + ": padding must be \"valid\" or \"same\", got \"" + padding_ + "\"");
  }
}

Tensor Pool1D::call(const std::vector<Tensor>& inputs, CallContext&) {
  const std::string where = type_name() + " '" + name() + "'";
  Tensor x = expand_dims(detail::single_input_of_rank(inputs, 3, where, "[batch, steps, channels]"), 2);
  try {
    Tensor y = max_ ? max_pool2d(x, {pool_, 1}, {strides_, 1}, padding_)
                    : avg_pool2d(x, {pool_, 1}, {strides_, 1}, padding_);
    return squeeze(y, {2});
  } catch (const Error& e) {
    throw Error(e.code(), where + " on input " + shape_str(inputs[0].shape()) + ": " + e.what());
  }
}

Attrs Pool1D::config() const {
  return {{"pool_size", pool_}, {"strides", strides_}, {"padding", padding_}};
}

MaxPool1D::MaxPool1D(int64_t pool_size, std::optional<int64_t> strides, std::string padding)
    : Pool1D("MaxPooling1D", "max_pooling1d", true, pool_size, strides, std::move(padding)) {}

AveragePool1D::AveragePool1D(int64_t pool_size, std::optional<int64_t> strides, std::string padding)
    : Pool1D("AveragePooling1D", "average_pooling1d", false, pool_size, strides,
             std::move(padding)) {}

// ---- global pooling -------------------------------------------------------------------------

GlobalPooling::GlobalPooling(std::string name, bool max, int spatial_dims, bool keepdims)
    : Layer(std::move(name)), max_(max), spatial_dims_(spatial_dims), keepdims_(keepdims) {}

Tensor GlobalPooling::call(const std::vector<Tensor>& inputs, CallContext&) {
  const std::string where = type_name() + " '" + name() + "'";
  const Tensor& x =
      detail::single_input_of_rank(inputs, spatial_dims_ + 2, where,
                     spatial_dims_ == 1 ? "[batch, steps, channels]" : "[batch, h, w, channels]");
  Axes axes = spatial_dims_ == 1 ? Axes{1} : Axes{1, 2};
  return max_ ? max(x, axes, keepdims_) : mean(x, axes, keepdims_);
}

Attrs GlobalPooling::config() const { return {{"keepdims", keepdims_}}; }

// ---- registration (for saved models) --------------------------------------------------------

KILN_REGISTER_LAYER("MaxPooling1D", [](const Attrs& c) {
  return std::make_shared<MaxPool1D>(c.get_int("pool_size"), c.get_int("strides"),
                                     c.get_string("padding"));
});
KILN_REGISTER_LAYER("AveragePooling1D", [](const Attrs& c) {
  return std::make_shared<AveragePool1D>(c.get_int("pool_size"), c.get_int("strides"),
                                         c.get_string("padding"));
});
KILN_REGISTER_LAYER("GlobalAveragePooling1D", [](const Attrs& c) {
  return std::make_shared<GlobalAveragePooling1D>(c.get_bool("keepdims"));
});
KILN_REGISTER_LAYER("GlobalAveragePooling2D", [](const Attrs& c) {
  return std::make_shared<GlobalAveragePooling2D>(c.get_bool("keepdims"));
});
KILN_REGISTER_LAYER("GlobalMaxPooling1D", [](const Attrs& c) {
  return std::make_shared<GlobalMaxPooling1D>(c.get_bool("keepdims"));
});
KILN_REGISTER_LAYER("GlobalMaxPooling2D", [](const Attrs& c) {
  return std::make_shared<GlobalMaxPooling2D>(c.get_bool("keepdims"));
});

}  // namespace kiln::nn
