// Quantization-aware training: wraps a model's Dense and Conv2D layers so that they compute with
// fake-quantized weights and outputs (x + stop_gradient(q(x) - x): the forward pass sees the
// int8 file's values, the gradient passes straight through), and fake-quantizes the input and
// the average pools' outputs, at the ranges convert's calibration gives.
#include <optional>
#include <set>

#include "kiln/lite_convert.h"
#include "kiln/nn.h"
#include "kiln/ops.h"
#include "quantize/calibration.h"
#include "quantize/lowering.h"

namespace kiln::lite {
namespace {

// The int8 grid of `q`, on the forward pass only.
Tensor fake_quant(const Tensor& x, const QuantParams& q) {
  const Tensor levels = clamp(round(x / q.scale) + q.zero_point, -128.0, 127.0);
  return x + stop_gradient((levels - q.zero_point) * q.scale - x);
}

// Per output channel (the last axis), symmetric in [-127, 127], as quantize_weights does.
Tensor fake_quant_weights(const Tensor& w) {
  Axes all_but_last;
  for (int64_t a = 0; a + 1 < w.rank(); ++a) all_but_last.push_back(a);
  // An all-zero channel: any positive scale gives zeros.
  const Tensor scale =
      maximum(max(abs(w), all_but_last, /*keepdims=*/true) / 127.0, Tensor::scalar(1e-30f));
  const Tensor q = clamp(round(w / scale), -127.0, 127.0) * scale;
  return w + stop_gradient(q - w);
}

class FakeQuant : public nn::Layer {
 public:
  FakeQuant(const std::string& name, QuantParams q) : Layer(name), q_(q) {}
  std::string type_name() const override { return "FakeQuant"; }
  std::shared_ptr<Layer> clone() const override { return std::make_shared<FakeQuant>(*this); }
  Tensor call(const std::vector<Tensor>& inputs, nn::CallContext&) override {
    return fake_quant(inputs.at(0), q_);
  }

 private:
  QuantParams q_;
};

// A built Dense or Conv2D, computing with fake-quantized weights and output. Its weights are the
// wrapped layer's.
class QuantizeWrapper : public nn::Layer {
 public:
  // q: the op's int8 output; after: where a float activation follows and an int8 op quantizes
  // its output, that output's.
  QuantizeWrapper(nn::LayerPtr layer, QuantParams q, std::optional<QuantParams> after)
      : Layer(layer->name() + "/quantized"),
        layer_(std::move(layer)),
        q_(q),
        after_(after),
        config_(layer_->config()) {}
  std::string type_name() const override { return "QuantizeWrapper"; }
  std::shared_ptr<Layer> clone() const override { return std::make_shared<QuantizeWrapper>(*this); }
  void build(const std::vector<Shape>& input_shapes) override {
    build_child(*layer_, input_shapes);
  }
  Tensor call(const std::vector<Tensor>& inputs, nn::CallContext& ctx) override {
    const Tensor& x = inputs.at(0);
    Tensor y;
    if (layer_->type_name() == "DepthwiseConv2D") {
      // Keras' [kh, kw, c, multiplier] as the [kh, kw, 1, c * multiplier] kernel of c groups,
      // fake-quantized per output channel as convert quantizes it, over the window convert
      // computes.
      const Tensor k = ctx.read(layer_->weights().at(0));
      const Tensor kernel =
          fake_quant_weights(reshape(k, {k.dim(0), k.dim(1), 1, k.dim(2) * k.dim(3)}));
      const kernels::Window win =
          window_from(config_, "kernel_size", {-1, x.dim(1), x.dim(2), x.dim(3)});
      ConvOptions o;
      o.strides = {win.stride_h, win.stride_w};
      o.padding_low = {win.pad_top, win.pad_left};
      o.padding_high = {win.pad_bottom, win.pad_right};
      o.groups = k.dim(2);
      y = conv(x, kernel, o);
    } else {
      const Tensor kernel = fake_quant_weights(ctx.read(layer_->weights().at(0)));
      y = layer_->type_name() == "Conv2D"
              ? conv2d(x, kernel, config_.get_ints("strides"), config_.get_string("padding"))
              : matmul(x, kernel);
    }
    if (config_.get_bool("use_bias", true)) y = y + ctx.read(layer_->weights().at(1));
    const std::string& activation = config_.get_string("activation");
    if (activation == "relu") y = relu(y);
    y = fake_quant(y, q_);
    if (activation == "relu" || activation == "linear" || activation.empty()) return y;
    y = activation == "softmax"    ? softmax(y, -1)
        : activation == "tanh"     ? tanh(y)
        : activation == "sigmoid"  ? sigmoid(y)
        : activation == "softplus" ? softplus(y)
        : activation == "gelu"     ? gelu(y)
                                   : swish(y);  // swish, silu: what convert accepts
    return after_ ? fake_quant(y, *after_) : y;
  }

 private:
  nn::LayerPtr layer_;
  QuantParams q_;
  std::optional<QuantParams> after_;
  Attrs config_;
};

}  // namespace

std::unique_ptr<nn::Sequential> quantization_aware(nn::Model& model,
                                                   const ConvertOptions& options) {
  const LayerRanges ranges = calibrate_layers(model, options);  // checks the model converts
  const nn::Model::Architecture arch = model.architecture();
  // The ranges are by layer name: a layer called twice would have two.
  std::set<std::string> seen;
  for (const nn::LayerPtr& layer : arch.layers) {
    if (!seen.insert(layer->name()).second) {
      throw Error(ErrorCode::kUnimplemented,
                  "lite::quantization_aware: model " + model.name() + " calls layer " +
                      layer->name() +
                      " twice; quantization-aware training runs chains of "
                      "distinct layers");
    }
  }
  for (const nn::LayerPtr& layer : arch.layers) {
    if (layer->type_name() == "BatchNormalization") {
      throw Error(ErrorCode::kUnimplemented,
                  "lite::quantization_aware: model " + model.name() + " has " + layer->name() +
                      " (BatchNormalization), which convert folds into the layer before it; "
                      "quantization-aware training does not fold it yet");
    }
  }
  std::vector<nn::LayerRef> layers{std::make_shared<FakeQuant>("input/fake_quant", ranges.input)};
  for (const nn::LayerPtr& layer : arch.layers) {
    const std::string type = layer->type_name();
    auto range = ranges.outputs.find(layer->name());
    auto after = ranges.float_outputs.find(layer->name());
    const std::optional<QuantParams> after_q =
        after == ranges.float_outputs.end() ? std::nullopt : std::optional(after->second);
    if (type == "Dense" || type == "Conv2D" || type == "DepthwiseConv2D") {
      layers.push_back(std::make_shared<QuantizeWrapper>(layer, range->second, after_q));
      continue;
    }
    layers.push_back(layer->clone());  // stateless: pools, reshapes, dropout, activations
    // The int8 average rounds to its input's grid again (a max pool or reshape stays on it); a
    // float activation's output is quantized for the int8 op after it.
    if ((type == "AveragePooling2D" || type == "GlobalAveragePooling2D") &&
        range != ranges.outputs.end()) {
      layers.push_back(std::make_shared<FakeQuant>(layer->name() + "/fake_quant", range->second));
    } else if ((type == "Activation" || type == "LayerNormalization") && after_q) {
      layers.push_back(std::make_shared<FakeQuant>(layer->name() + "/fake_quant", *after_q));
    }
  }
  auto qat = std::make_unique<nn::Sequential>(layers, model.name() + "_quantization_aware");
  const std::optional<TensorType> type = model.input_type();
  Shape example(type->shape.begin() + 1, type->shape.end());
  qat->build(example);
  return qat;
}

}  // namespace kiln::lite
