// What convert lowers a model to before it writes a lite file: a list of float ops, each
// reading values (0 the model's input, op i's output value i + 1). Two front ends produce it:
// a Model's layers (convert.cc) and an exported graph's nodes (graph_lowering.cc).
#pragma once

#include <bit>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/attrs.h"
#include "kiln/io/saved_model.h"
#include "kiln/tensor.h"
#include "lite/builder.h"
#include "lite/format.h"
#include "lite/kernels.h"

namespace kiln::lite {

// One op of the float model.
struct FloatOp {
  format::OpCode code;
  std::string layer;
  kernels::Activation activation = kernels::Activation::kNone;
  // [m, ...k]: FullyConnected [m,k], Conv2D [m,kh,kw,c]; ChannelAffine and LayerNorm [c]
  // (weights holds the scale or gamma, bias the shift or beta)
  std::vector<int64_t> weight_shape;
  std::vector<float> weights, bias;
  kernels::Window window;
  std::vector<int64_t> out_shape;  // [-1, ...]
  int32_t float_kind = 0;          // kActivation's format::FloatActivation
  float epsilon = 0.f;             // kLayerNorm's
  std::vector<int> in;             // the values it reads
  bool float_only() const {
    return code == format::OpCode::kSoftmax || code == format::OpCode::kActivation ||
           code == format::OpCode::kChannelAffine || code == format::OpCode::kLayerNorm;
  }
  // The ops with weights that fold a per-channel affine after them and fuse a relu.
  bool weighted() const {
    return code == format::OpCode::kFullyConnected || code == format::OpCode::kConv2D ||
           code == format::OpCode::kDepthwiseConv2D;
  }
  // Folds y * scale + shift (per output channel) into this op: a weighted op's weights [m][k]
  // and bias, a ChannelAffine's scale and shift, a LayerNorm's gamma and beta.
  void fold_affine(const std::vector<float>& scale, const std::vector<float>& shift) {
    const size_t c = scale.size(), k = weights.size() / c;
    if (bias.empty()) bias.assign(c, 0.f);
    for (size_t j = 0; j < c; ++j) {
      for (size_t i = 0; i < k; ++i) weights[j * k + i] *= scale[j];
      bias[j] = bias[j] * scale[j] + shift[j];
    }
  }
  // The float ops whose weights and bias are per-channel constants after the input.
  bool per_channel() const {
    return code == format::OpCode::kChannelAffine || code == format::OpCode::kLayerNorm;
  }
  ModelBuilder::Params params() const {
    if (code == format::OpCode::kLayerNorm) return {std::bit_cast<int32_t>(epsilon)};
    if (code != format::OpCode::kActivation) return ModelBuilder::window_params(window);
    return {float_kind};
  }
};

// TF's "same" padding of one dimension: (low, high), the odd element high.
std::pair<int64_t, int64_t> same_padding(int64_t in, int64_t k, int64_t stride);
// A Conv2D's or pool's window from its layer config (`size_key`: "kernel_size" or "pool_size";
// strides, padding "valid" or "same") over an NHWC input of `in_shape`.
kernels::Window window_from(const Attrs& config, const std::string& size_key,
                            const std::vector<int64_t>& in_shape);
// Elements per example of a [-1, ...] shape.
int64_t per_example(const std::vector<int64_t>& shape);
// Dense and Conv2D weights as [m][k]: Dense's kernel is [in,out], Conv2D's [kh,kw,in,out].
std::vector<float> output_major(const Tensor& kernel);
// An activation the lite runtime computes in float (format::FloatActivation), or 0.
int32_t float_activation(const std::string& name);
// The float op computing activation `name` on `shape`, for `layer`: Softmax or Activation.
std::optional<FloatOp> float_activation_op(const std::string& name, const std::string& layer,
                                           const std::vector<int64_t>& shape);

// An exported graph's "serving_default" signature as float ops, by matching the patterns the
// layers export (convolution or dot, + bias, + relu as select(x <= 0, 0, x); softmax as
// exp(x - max) / sum; reduce_window_max; reduce_window_sum / counts; reshape; tanh, logistic,
// x * logistic(x), softplus; add; concatenate). kUnimplemented naming every node it cannot
// lower; `output` gets the output's value.
std::vector<FloatOp> lower_graph(const io::ExportedGraph& graph, std::vector<int64_t>* input_shape,
                                 int* output);

}  // namespace kiln::lite
