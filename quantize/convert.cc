// kiln::lite::convert: lowers a model's layers to lite ops, writes them as a float
// model, and for int8 calibrates the activations' ranges by running that float model in the
// lite runtime over the representative data, then quantizes weights and activations (TF Lite's
// int8 scheme) and measures each op's error against the float model.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <limits>
#include <optional>
#include <set>
#include <sstream>

#include "kiln/io/saved_model.h"
#include "kiln/lite.h"
#include "kiln/lite_convert.h"
#include "kiln/nn/saving.h"
#include "kiln/ops.h"
#include "kiln/shape.h"
#include "lite/builder.h"
#include "quantize/calibration.h"
#include "quantize/lowering.h"

namespace kiln::lite {

using format::OpCode;
using kernels::Activation;

int64_t per_example(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}

// Dense and Conv2D weights as [m][k]: Dense's kernel is [in,out], Conv2D's [kh,kw,in,out].
std::vector<float> output_major(const Tensor& kernel) {
  const std::vector<float> w = kernel.to_vector<float>();
  const int64_t m = kernel.dim(-1), k = kernel.size() / m;
  std::vector<float> out(w.size());
  for (int64_t i = 0; i < k; ++i) {
    for (int64_t j = 0; j < m; ++j) out[j * k + i] = w[i * m + j];
  }
  return out;
}

// An activation the lite runtime computes in float (between a Dequantize and a Quantize in an
// int8 model), or 0.
int32_t float_activation(const std::string& name) {
  if (name == "tanh") return static_cast<int32_t>(format::FloatActivation::kTanh);
  if (name == "sigmoid") return static_cast<int32_t>(format::FloatActivation::kSigmoid);
  if (name == "swish" || name == "silu") {
    return static_cast<int32_t>(format::FloatActivation::kSwish);
  }
  if (name == "softplus") return static_cast<int32_t>(format::FloatActivation::kSoftplus);
  if (name == "relu") return static_cast<int32_t>(format::FloatActivation::kRelu);
  if (name == "gelu") return static_cast<int32_t>(format::FloatActivation::kGelu);
  return 0;
}

// The float op computing activation `name` on `shape`, for `layer`: Softmax or Activation.
std::optional<FloatOp> float_activation_op(const std::string& name, const std::string& layer,
                                           const std::vector<int64_t>& shape) {
  FloatOp op;
  op.layer = layer;
  op.out_shape = shape;
  if (name == "softmax") {
    op.code = OpCode::kSoftmax;
    return op;
  }
  op.code = OpCode::kActivation;
  op.float_kind = float_activation(name);
  if (op.float_kind == 0) return std::nullopt;
  return op;
}

// TF's "same": the output is ceil(in / stride) and the padding's odd pixel goes at the end.
std::pair<int64_t, int64_t> same_padding(int64_t in, int64_t k, int64_t stride) {
  const int64_t out = (in + stride - 1) / stride;
  const int64_t total = std::max<int64_t>((out - 1) * stride + k - in, 0);
  return {total / 2, total - total / 2};
}

kernels::Window window_from(const Attrs& config, const std::string& size_key,
                            const std::vector<int64_t>& in_shape) {
  const std::vector<int64_t>& size = config.get_ints(size_key);
  std::vector<int64_t> strides =
      config.has("strides") ? config.get_ints("strides") : std::vector<int64_t>{};
  if (strides.empty()) strides = size;  // a pool's default: its size
  kernels::Window w;
  w.kh = size.at(0);
  w.kw = size.at(1);
  w.stride_h = strides.at(0);
  w.stride_w = strides.at(1);
  if (config.get_string("padding") == "same") {
    std::tie(w.pad_top, w.pad_bottom) = same_padding(in_shape[1], w.kh, w.stride_h);
    std::tie(w.pad_left, w.pad_right) = same_padding(in_shape[2], w.kw, w.stride_w);
  }
  return w;
}

namespace {

// A layer's weights among `names`, by the last part of their name
// ("batch_normalization/moving_mean:0" is "moving_mean"), as floats.
std::map<std::string, std::vector<float>> weights_named(const nn::Layer& layer,
                                                        const std::set<std::string>& names) {
  std::map<std::string, std::vector<float>> w;
  for (const Variable& v : layer.weights()) {
    std::string key = v.name().substr(v.name().rfind('/') + 1);
    key = key.substr(0, key.find(':'));
    if (names.count(key)) w[key] = v.value().to(f32).to_vector<float>();
  }
  return w;
}

// The model's layers as lite ops, each reading values: 0 is the model's input, op i's output is
// value i + 1; `output` gets the model's output value. kUnimplemented listing every layer that
// has no lite op.
std::vector<FloatOp> lower(nn::Model& model, std::vector<int64_t>* input_shape, int* output) {
  const nn::Model::Architecture arch = model.architecture();
  const std::optional<TensorType> type = model.input_type();
  if (!type) {
    throw Error(ErrorCode::kInvalidArgument,
                "lite::convert: model " + model.name() +
                    " is not built: call it, fit it or build it before converting");
  }
  if (model.input_types().size() != 1 || (arch.functional && arch.outputs.size() != 1)) {
    throw Error(ErrorCode::kUnimplemented,
                "lite::convert: model " + model.name() +
                    " has several inputs or outputs; the lite runtime runs one of each");
  }
  if (type->dtype != f32) {
    throw Error(ErrorCode::kUnimplemented, "lite::convert: the input is " + type->str() +
                                               "; the lite runtime takes f32 inputs");
  }
  // The calls and the values they read, as (call, output) pairs, (-1, 0) the input: a
  // Sequential's layers each read the one before.
  using Pair = std::pair<int, int>;
  std::vector<std::pair<const nn::Layer*, std::vector<Pair>>> calls;
  Pair model_output{-1, 0};
  if (arch.functional) {
    for (const auto& call : arch.calls)
      calls.push_back({arch.layers[call.layer].get(), call.inputs});
    model_output = arch.outputs[0];
  } else {
    for (size_t i = 0; i < arch.layers.size(); ++i) {
      calls.push_back({arch.layers[i].get(), {{static_cast<int>(i) - 1, 0}}});
    }
    model_output = {static_cast<int>(arch.layers.size()) - 1, 0};
  }
  std::map<Pair, int> pair_uses;
  for (const auto& call : calls) {
    for (const Pair& p : call.second) ++pair_uses[p];
  }
  ++pair_uses[model_output];

  std::vector<int64_t> shape(type->shape.begin(), type->shape.end());
  shape[0] = -1;
  *input_shape = shape;
  std::vector<std::vector<int64_t>> shapes{shape};  // by value
  std::map<Pair, int> value_of{{{-1, 0}, 0}};
  std::map<int, int> identity_reads;  // by value: the identity layers reading it
  std::vector<FloatOp> ops;
  std::vector<std::string> unsupported;
  auto refuse = [&](const nn::Layer& layer, const std::string& why) {
    unsupported.push_back(layer.name() + " (" + layer.type_name() + "): " + why);
  };
  // Appends op reading `in`; returns its value.
  // The layers reading value v: of every pair that is v, less the identity layers (whose own
  // readers count through their pairs).
  auto readers_of = [&](int v) {
    int uses = -identity_reads[v];
    for (const auto& [p, value] : value_of) uses += value == v ? pair_uses[p] : 0;
    return uses;
  };
  auto emit = [&](FloatOp op, std::vector<int> in) {
    op.in = std::move(in);
    shapes.push_back(op.out_shape);
    ops.push_back(std::move(op));
    return static_cast<int>(ops.size());
  };
  for (size_t c = 0; c < calls.size(); ++c) {
    const nn::Layer& layer = *calls[c].first;
    const std::string type_name = layer.type_name();
    const Attrs config = layer.config();
    static const std::set<std::string> kLowered = {"Dense",
                                                   "Conv2D",
                                                   "MaxPooling2D",
                                                   "AveragePooling2D",
                                                   "Flatten",
                                                   "Reshape",
                                                   "Dropout",
                                                   "InputLayer",
                                                   "Activation",
                                                   "Add",
                                                   "Concatenate",
                                                   "BatchNormalization",
                                                   "SpatialDropout2D",
                                                   "GlobalAveragePooling2D",
                                                   "GlobalMaxPooling2D",
                                                   "LayerNormalization",
                                                   "DepthwiseConv2D",
                                                   "Conv1D",
                                                   "MaxPooling1D",
                                                   "AveragePooling1D",
                                                   "GlobalAveragePooling1D",
                                                   "GlobalMaxPooling1D"};
    if (kLowered.count(type_name) == 0) {
      refuse(layer, "no lite op");
      continue;
    }
    std::vector<int> in;
    for (const Pair& p : calls[c].second) {
      auto it = value_of.find(p);
      if (it == value_of.end()) break;  // read from a layer that was refused
      in.push_back(it->second);
    }
    if (in.size() != calls[c].second.size() || in.empty()) {
      if (in.empty() && calls[c].second.empty()) refuse(layer, "reads no input");
      continue;
    }
    const bool merge = type_name == "Add" || type_name == "Concatenate";
    if (!merge && in.size() != 1) {
      refuse(layer, "reads " + std::to_string(in.size()) + " inputs");
      continue;
    }
    const int x = in[0];
    const std::vector<int64_t> shape = shapes[x];
    int out = -1;
    FloatOp op;
    op.layer = layer.name();
    if (type_name == "Dense" || type_name == "Conv2D" || type_name == "DepthwiseConv2D") {
      const bool depthwise = type_name == "DepthwiseConv2D";
      const bool conv = type_name == "Conv2D" || depthwise;
      const std::string& act = config.get_string("activation");
      const bool fused = act.empty() || act == "linear" || act == "relu";
      const std::optional<FloatOp> after =
          fused ? std::nullopt : float_activation_op(act, layer.name(), {});
      if (!fused && !after) {
        refuse(layer, "activation " + act);
        continue;
      }
      if (act == "relu") op.activation = Activation::kRelu;
      if (shape.size() != (conv ? 4u : 2u)) {
        refuse(layer,
               "input " + shape_str(shape) + (conv ? " is not NHWC" : " is not [batch, features]"));
        continue;
      }
      const Tensor kernel = layer.weights().at(0).value();
      op.code = depthwise ? OpCode::kDepthwiseConv2D
                : conv    ? OpCode::kConv2D
                          : OpCode::kFullyConnected;
      // A depthwise kernel is Keras' [kh, kw, c, multiplier]: output channel c * multiplier + j,
      // as [m][kh][kw].
      const int64_t m = depthwise ? kernel.dim(2) * kernel.dim(3) : kernel.dim(-1);
      op.weights =
          output_major(depthwise ? reshape(kernel, {kernel.dim(0), kernel.dim(1), m}) : kernel);
      if (depthwise) {
        op.window = window_from(config, "kernel_size", shape);
        op.weight_shape = {m, kernel.dim(0), kernel.dim(1), 1};
        op.out_shape = {-1, op.window.out_h(shape[1]), op.window.out_w(shape[2]), m};
      } else if (conv) {
        op.window = window_from(config, "kernel_size", shape);
        op.weight_shape = {m, kernel.dim(0), kernel.dim(1), kernel.dim(2)};
        op.out_shape = {-1, op.window.out_h(shape[1]), op.window.out_w(shape[2]), m};
      } else {
        op.weight_shape = {m, kernel.dim(0)};
        op.out_shape = {-1, m};
      }
      if (config.get_bool("use_bias", true)) {
        op.bias = layer.weights().at(1).value().to_vector<float>();
      }
      out = emit(op, {x});
      if (after) {
        FloatOp f = *after;
        f.out_shape = op.out_shape;
        out = emit(f, {out});
      }
    } else if (type_name == "MaxPooling2D" || type_name == "AveragePooling2D") {
      if (shape.size() != 4) {
        refuse(layer, "input " + shape_str(shape) + " is not NHWC");
        continue;
      }
      op.code = type_name == "MaxPooling2D" ? OpCode::kMaxPool2D : OpCode::kAvgPool2D;
      op.window = window_from(config, "pool_size", shape);
      op.out_shape = {-1, op.window.out_h(shape[1]), op.window.out_w(shape[2]), shape[3]};
      out = emit(op, {x});
    } else if (type_name == "Flatten" || type_name == "Reshape") {
      op.code = OpCode::kReshape;
      op.out_shape = {-1};
      if (type_name == "Flatten") {
        op.out_shape.push_back(per_example(shape));
      } else {
        const std::vector<int64_t>& target = config.get_ints("target_shape");
        int64_t known = 1;
        for (int64_t d : target) known *= d == -1 ? 1 : d;
        for (int64_t d : target) op.out_shape.push_back(d == -1 ? per_example(shape) / known : d);
      }
      out = emit(op, {x});
    } else if (type_name == "Conv1D" || type_name == "MaxPooling1D" ||
               type_name == "AveragePooling1D" || type_name == "GlobalAveragePooling1D" ||
               type_name == "GlobalMaxPooling1D") {
      // [batch, steps, channels] as an image of one column: Reshape, the 2-d op with a window
      // of one column, Reshape back.
      if (shape.size() != 3) {
        refuse(layer, "input " + shape_str(shape) + " is not [batch, steps, channels]");
        continue;
      }
      const bool global = type_name.rfind("Global", 0) == 0;
      const bool conv1d = type_name == "Conv1D";
      const std::string padding = global ? "valid" : config.get_string("padding");
      const std::string act = conv1d ? config.get_string("activation") : "";
      const bool fused = act.empty() || act == "linear" || act == "relu";
      const std::optional<FloatOp> after =
          fused ? std::nullopt : float_activation_op(act, layer.name(), {});
      if ((conv1d && config.get_int("dilation_rate", 1) != 1) || (!fused && !after) ||
          (padding != "valid" && padding != "same" && padding != "causal")) {
        refuse(layer, "dilation, padding " + padding + " or activation " + act);
        continue;
      }
      kernels::Window win;
      const int64_t steps = shape[1];
      win.kh = global ? steps : config.get_int(conv1d ? "kernel_size" : "pool_size");
      win.stride_h = global ? steps : config.get_int("strides");
      if (padding == "same") {
        std::tie(win.pad_top, win.pad_bottom) = same_padding(steps, win.kh, win.stride_h);
      }
      if (padding == "causal") win.pad_top = win.kh - 1;
      FloatOp column;
      column.layer = layer.name();
      column.code = OpCode::kReshape;
      column.out_shape = {-1, steps, 1, shape[2]};
      const int image = emit(column, {x});
      op.window = win;
      if (conv1d) {
        const Tensor kernel = layer.weights().at(0).value();  // [k, channels, filters]
        const int64_t m = kernel.dim(2);
        op.code = OpCode::kConv2D;
        op.weights = output_major(kernel);
        op.weight_shape = {m, kernel.dim(0), 1, kernel.dim(1)};
        if (act == "relu") op.activation = Activation::kRelu;
        if (config.get_bool("use_bias", true)) {
          op.bias = layer.weights().at(1).value().to_vector<float>();
        }
        op.out_shape = {-1, win.out_h(steps), 1, m};
      } else {
        op.code =
            type_name.find("Max") != std::string::npos ? OpCode::kMaxPool2D : OpCode::kAvgPool2D;
        op.out_shape = {-1, win.out_h(steps), 1, shape[2]};
      }
      const int result = emit(op, {image});
      FloatOp back;
      back.layer = layer.name();
      back.code = OpCode::kReshape;
      back.out_shape = {-1, op.out_shape[1], op.out_shape[3]};
      if (global && !config.get_bool("keepdims", false)) back.out_shape = {-1, op.out_shape[3]};
      out = emit(back, {result});
      if (after) {
        FloatOp f = *after;
        f.out_shape = back.out_shape;
        out = emit(f, {out});
      }
    } else if (type_name == "GlobalAveragePooling2D" || type_name == "GlobalMaxPooling2D") {
      if (shape.size() != 4) {
        refuse(layer, "input " + shape_str(shape) + " is not NHWC");
        continue;
      }
      // A pool whose one window is the whole image, then (without keepdims) [batch, c].
      op.code = type_name == "GlobalMaxPooling2D" ? OpCode::kMaxPool2D : OpCode::kAvgPool2D;
      op.window = {shape[1], shape[2], shape[1], shape[2]};
      op.out_shape = {-1, 1, 1, shape[3]};
      out = emit(op, {x});
      if (!config.get_bool("keepdims", false)) {
        FloatOp flat;
        flat.layer = layer.name();
        flat.code = OpCode::kReshape;
        flat.out_shape = {-1, shape[3]};
        out = emit(flat, {out});
      }
    } else if (type_name == "LayerNormalization") {
      // Over the last axis, in float.
      std::map<std::string, std::vector<float>> w = weights_named(layer, {"gamma", "beta"});
      const int64_t c = shape.back();
      if (w.size() != 2 || w["gamma"].size() != static_cast<size_t>(c)) {
        refuse(layer, "no gamma and beta of " + std::to_string(c));
        continue;
      }
      op.code = OpCode::kLayerNorm;
      op.weight_shape = {c};
      op.weights = w["gamma"];
      op.bias = w["beta"];
      op.epsilon = static_cast<float>(config.get_float("epsilon", 1e-3));
      op.out_shape = shape;
      out = emit(op, {x});
    } else if (type_name == "BatchNormalization") {
      // Inference: x * s + (beta - mean * s), s = gamma / sqrt(variance + epsilon), over the
      // last axis; folded into a Dense or Conv2D before it that nothing else reads.
      const int64_t c = shape.back();
      std::map<std::string, std::vector<float>> w =
          weights_named(layer, {"gamma", "beta", "moving_mean", "moving_variance"});
      if (w.size() != 4 || w["gamma"].size() != static_cast<size_t>(c)) {
        refuse(layer, "no gamma, beta, moving mean and variance of " + std::to_string(c));
        continue;
      }
      const double epsilon = config.get_float("epsilon", 1e-3);
      std::vector<float> scale(c), shift(c);
      for (int64_t j = 0; j < c; ++j) {
        const double s =
            w["gamma"][j] / std::sqrt(static_cast<double>(w["moving_variance"][j]) + epsilon);
        scale[j] = static_cast<float>(s);
        shift[j] = static_cast<float>(w["beta"][j] - w["moving_mean"][j] * s);
      }
      FloatOp* producer = x > 0 ? &ops[x - 1] : nullptr;
      if (producer != nullptr && readers_of(x) == 1 && producer->activation == Activation::kNone &&
          producer->weighted()) {
        producer->fold_affine(scale, shift);
        out = x;  // its readers read the folded op, as an identity layer's do
        ++identity_reads[x];
      } else {
        op.code = OpCode::kChannelAffine;
        op.weight_shape = {c};
        op.weights = std::move(scale);
        op.bias = std::move(shift);
        op.out_shape = shape;
        out = emit(op, {x});
      }
    } else if (type_name == "Dropout" || type_name == "SpatialDropout2D" ||
               type_name == "InputLayer") {
      out = x;  // identity at inference
      ++identity_reads[x];
    } else if (type_name == "Activation") {
      const std::string name = config.get_string("activation");
      const FloatOp* producer = x > 0 ? &ops[x - 1] : nullptr;
      const int uses = readers_of(x);
      if (name.empty() || name == "linear") {
        out = x;
        ++identity_reads[x];
      } else if (name == "relu" && producer != nullptr && uses == 1 && producer->weighted() &&
                 producer->activation == Activation::kNone) {
        ops[x - 1].activation = Activation::kRelu;  // fused: its only reader is this relu
        out = x;
      } else if (std::optional<FloatOp> f = float_activation_op(name, layer.name(), shape)) {
        out = emit(*f, {x});
      } else {
        refuse(layer, "activation " + name);
        continue;
      }
    } else if (type_name == "Add") {
      bool same = true;
      for (int v : in) same = same && shapes[v] == shape;
      if (!same) {
        refuse(layer, "inputs of different shapes (the lite Add does not broadcast)");
        continue;
      }
      op.code = OpCode::kAdd;
      op.out_shape = shape;
      out = in[0];
      for (size_t j = 1; j < in.size(); ++j) {
        // Three or more inputs: a chain of sums, "add", "add/2", ...
        if (j > 1) op.layer = layer.name() + "/" + std::to_string(j);
        out = emit(op, {out, in[j]});
      }
    } else if (type_name == "Concatenate") {
      const int64_t rank = static_cast<int64_t>(shape.size());
      const int64_t axis = config.get_int("axis", -1);
      bool fits = (axis == -1 || axis == rank - 1) && in.size() <= format::kMaxOpInputs;
      op.out_shape = shape;
      op.out_shape.back() = 0;
      for (int v : in) {
        fits = fits && shapes[v].size() == shape.size() &&
               std::equal(shape.begin(), shape.end() - 1, shapes[v].begin());
        if (fits) op.out_shape.back() += shapes[v].back();
      }
      if (!fits) {
        refuse(layer,
               "joins along another axis than the last, shapes that differ elsewhere or "
               "more than 4 inputs");
        continue;
      }
      op.code = OpCode::kConcatenate;
      out = emit(op, in);
    } else {
      refuse(layer, "no lite op");
      continue;
    }
    value_of[{static_cast<int>(c), 0}] = out;
  }
  if (!unsupported.empty()) {
    std::string list;
    for (const std::string& u : unsupported) list += "\n  " + u;
    throw Error(ErrorCode::kUnimplemented,
                "lite::convert: model " + model.name() +
                    " has layers the lite runtime cannot run (it has Dense, Conv2D, MaxPool2D, "
                    "AveragePool2D, Flatten, Reshape, Dropout, Add, Concatenate (last axis) and "
                    "the activations linear, relu, softmax, tanh, sigmoid, swish and softplus):" +
                    list);
  }
  *output = value_of.at(model_output);
  if (*output == 0) {
    throw Error(ErrorCode::kUnimplemented,
                "lite::convert: model " + model.name() + " computes nothing to convert");
  }
  return ops;
}

TensorInfo activation_info(std::string name, DType dtype, std::vector<int64_t> shape,
                           const QuantParams& q = {}) {
  TensorInfo t;
  t.name = std::move(name);
  t.dtype = dtype;
  t.shape = std::move(shape);
  if (dtype == DType::kInt8) {
    t.scale = q.scale;
    t.zero_point = q.zero_point;
  }
  return t;
}

template <class T>
int add_constant(ModelBuilder& b, std::string name, DType dtype, std::vector<int64_t> shape,
                 const std::vector<T>& values) {
  TensorInfo t;
  t.name = std::move(name);
  t.dtype = dtype;
  t.shape = std::move(shape);
  return b.add_constant(t, values.data(), values.size() * sizeof(T));
}

// A ChannelAffine's scale and shift constants, a LayerNorm's gamma and beta.
std::vector<int> per_channel_constants(ModelBuilder& b, const FloatOp& op) {
  const bool norm = op.code == OpCode::kLayerNorm;
  return {add_constant(b, op.layer + (norm ? "/gamma" : "/scale"), DType::kFloat32, op.weight_shape,
                       op.weights),
          add_constant(b, op.layer + (norm ? "/beta" : "/shift"), DType::kFloat32, op.weight_shape,
                       op.bias)};
}

// The float model; `outputs` gets each op's output tensor.
std::string float_model(const std::vector<FloatOp>& ops, const std::vector<int64_t>& input_shape,
                        int output, std::vector<int>* outputs) {
  ModelBuilder b;
  std::vector<int> tensor_of{b.add_tensor(activation_info("input", DType::kFloat32, input_shape))};
  b.set_input(tensor_of[0]);
  for (const FloatOp& op : ops) {
    std::vector<int> inputs;
    for (int v : op.in) inputs.push_back(tensor_of[v]);
    if (op.per_channel()) {
      const std::vector<int> c = per_channel_constants(b, op);
      inputs.insert(inputs.end(), c.begin(), c.end());
    } else if (!op.weights.empty()) {
      inputs.push_back(
          add_constant(b, op.layer + "/weights", DType::kFloat32, op.weight_shape, op.weights));
      if (!op.bias.empty()) {
        inputs.push_back(
            add_constant(b, op.layer + "/bias", DType::kFloat32, {op.weight_shape[0]}, op.bias));
      }
    }
    const int y = b.add_tensor(
        activation_info(op.layer + "/" + format::op_name(op.code), DType::kFloat32, op.out_shape));
    b.add_op(op.code, op.layer, inputs, y, op.activation, op.params());
    tensor_of.push_back(y);
    outputs->push_back(y);
  }
  b.set_output(tensor_of[output]);
  return b.serialize();
}

// The int8 model: int8 ops over int8 values, float-only ops over float ones, a Quantize or
// Dequantize wherever a value is needed in the other form (after the input, around float ops,
// at the end). `outputs` gets each op's tensor in this model (int8 or float).
std::string int8_model(const std::vector<FloatOp>& ops, const std::vector<int64_t>& input_shape,
                       int output, const QuantParams& input_q,
                       const std::vector<QuantParams>& out_q, std::vector<int>* outputs) {
  ModelBuilder b;
  const size_t values = ops.size() + 1;
  std::vector<int> as_float(values, -1), as_int8(values, -1);
  std::vector<QuantParams> params(values);  // each value's int8 form's
  std::vector<std::string> names(values, "input");
  as_float[0] = b.add_tensor(activation_info("input", DType::kFloat32, input_shape));
  params[0] = input_q;
  b.set_input(as_float[0]);
  auto int8_of = [&](int v) {
    if (as_int8[v] < 0) {
      as_int8[v] = b.add_tensor(activation_info(names[v] + "/quantized", DType::kInt8,
                                                b.tensor(as_float[v]).shape, params[v]));
      b.add_op(OpCode::kQuantize, names[v], {as_float[v]}, as_int8[v]);
    }
    return as_int8[v];
  };
  auto float_of = [&](int v) {
    if (as_float[v] < 0) {
      as_float[v] = b.add_tensor(
          activation_info(names[v] + "/dequantized", DType::kFloat32, b.tensor(as_int8[v]).shape));
      b.add_op(OpCode::kDequantize, names[v], {as_int8[v]}, as_float[v]);
    }
    return as_float[v];
  };
  for (size_t i = 0; i < ops.size(); ++i) {
    const FloatOp& op = ops[i];
    const int v = static_cast<int>(i) + 1;
    names[v] = op.layer;
    const std::string out_name = op.layer + "/" + format::op_name(op.code);
    if (op.float_only()) {
      std::vector<int> inputs{float_of(op.in[0])};
      if (op.per_channel()) {
        const std::vector<int> c = per_channel_constants(b, op);
        inputs.insert(inputs.end(), c.begin(), c.end());
      }
      as_float[v] = b.add_tensor(activation_info(out_name, DType::kFloat32, op.out_shape));
      b.add_op(op.code, op.layer, inputs, as_float[v], Activation::kNone, op.params());
      params[v] = out_q[i];  // what a Quantize after it uses
      outputs->push_back(as_float[v]);
      continue;
    }
    std::vector<int> inputs;
    for (int in : op.in) inputs.push_back(int8_of(in));
    const QuantParams& xq = params[op.in[0]];
    // Weighted ops, sums and joins get their own range; pools and reshapes keep their input's.
    params[v] = op.weights.empty() && op.code != OpCode::kAdd && op.code != OpCode::kConcatenate
                    ? xq
                    : out_q[i];
    if (!op.weights.empty()) {
      const QuantizedWeights w = quantize_weights(op.weights, op.weight_shape[0]);
      inputs.push_back(
          add_constant(b, op.layer + "/weights", DType::kInt8, op.weight_shape, w.values));
      inputs.push_back(op.bias.empty() ? -1
                                       : add_constant(b, op.layer + "/bias", DType::kInt32,
                                                      {op.weight_shape[0]},
                                                      quantize_bias(op.bias, xq.scale, w.scales)));
      inputs.push_back(add_constant(b, op.layer + "/weight_scales", DType::kFloat32,
                                    {op.weight_shape[0]}, w.scales));
    }
    as_int8[v] = b.add_tensor(activation_info(out_name, DType::kInt8, op.out_shape, params[v]));
    b.add_op(op.code, op.layer, inputs, as_int8[v], op.activation, op.params());
    outputs->push_back(as_int8[v]);
  }
  names[output] = "output";
  b.set_output(float_of(output));
  return b.serialize();
}

// A tensor's values as floats (dequantized when int8).
std::vector<float> values_of(const Interpreter& interp, int tensor, int64_t batch) {
  const TensorInfo& t = interp.tensor(tensor);
  const int64_t n = batch * per_example(t.shape);
  std::vector<float> out(n);
  const void* data = interp.tensor_data(tensor);
  if (t.dtype == DType::kFloat32) {
    std::copy_n(static_cast<const float*>(data), n, out.data());
  } else {
    const int8_t* q = static_cast<const int8_t*>(data);
    for (int64_t i = 0; i < n; ++i) out[i] = t.scale * (q[i] - t.zero_point);
  }
  return out;
}

struct Calibrated {
  QuantParams input;
  std::vector<QuantParams> outputs;  // per op: the int8 parameters of its output's range
};

// Runs the float model over the calibration data, watching the input and each op's output.
Calibrated calibrate(Interpreter& float_interp, const std::vector<FloatOp>& ops,
                     const std::vector<int64_t>& input_shape, const std::vector<int>& float_outputs,
                     const CalibrationData& data, const ConvertOptions& options) {
  std::vector<RangeObserver> observers(ops.size() + 1,
                                       RangeObserver(options.calibration, options.percentile));
  data.for_each_batch([&](const float* x, int64_t batch) {
    float_interp.run(x, batch);
    observers[0].observe(x, batch * per_example(input_shape));
    for (size_t i = 0; i < ops.size(); ++i) {
      observers[i + 1].observe(values_of(float_interp, float_outputs[i], batch));
    }
  });
  Calibrated c;
  c.input = observers[0].params();
  for (size_t i = 0; i < ops.size(); ++i) c.outputs.push_back(observers[i + 1].params());
  return c;
}

}  // namespace

LayerRanges calibrate_layers(nn::Model& model, const ConvertOptions& options) {
  std::vector<int64_t> input_shape;
  int output = 0;
  const std::vector<FloatOp> ops = lower(model, &input_shape, &output);
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].in != std::vector<int>{static_cast<int>(i)}) {
      throw Error(ErrorCode::kUnimplemented,
                  "lite::quantization_aware: model " + model.name() +
                      " is not a chain of "
                      "layers (" +
                      ops[i].layer +
                      " reads another layer than the one before); "
                      "quantization-aware training runs chains, convert runs both");
    }
  }
  std::vector<int> float_outputs;
  const std::string float_bytes = float_model(ops, input_shape, output, &float_outputs);
  Options keep;
  keep.preserve_all_tensors = true;
  keep.num_threads = 2;
  auto float_interp = Interpreter::from_buffer(float_bytes.data(), float_bytes.size(), keep);
  const Calibrated c = calibrate(*float_interp, ops, input_shape, float_outputs,
                                 calibration_data(options, input_shape), options);
  // As int8_model assigns them: weighted ops get their own range, pools and reshapes keep their
  // input's; a float op's output is quantized at its own range when an int8 op follows.
  LayerRanges ranges;
  ranges.input = c.input;
  QuantParams x = c.input;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (!ops[i].weights.empty() || ops[i].float_only()) x = c.outputs[i];
    if (!ops[i].float_only()) {
      ranges.outputs[ops[i].layer] = x;
      continue;
    }
    const bool int8_follows = std::any_of(ops.begin() + i + 1, ops.end(),
                                          [](const FloatOp& op) { return !op.float_only(); });
    if (int8_follows) ranges.float_outputs[ops[i].layer] = x;
  }
  return ranges;
}

std::string ConversionReport::str() const {
  std::ostringstream s;
  s << std::left << std::setw(20) << "layer" << std::setw(16) << "op" << std::setw(6) << "type"
    << std::setw(24) << "range" << std::setw(12) << "scale" << std::setw(6) << "zp" << std::setw(12)
    << "max |err|"
    << "rms err\n";
  for (const LayerReport& l : layers) {
    std::ostringstream range;
    if (l.int8) range << std::setprecision(4) << "[" << l.min << ", " << l.max << "]";
    s << std::left << std::setw(20) << l.layer << std::setw(16) << l.op << std::setw(6)
      << (l.int8 ? "int8" : "f32") << std::setw(24) << range.str() << std::setw(12)
      << std::setprecision(4) << l.scale << std::setw(6) << l.zero_point << std::setw(12)
      << l.max_abs_error << l.rms_error << "\n";
  }
  s << path << ": " << file_bytes << " bytes; calibrated on " << calibration_examples
    << " examples; output max |err| " << output_max_abs_error << "\n";
  return s.str();
}

namespace {

// The lowered float ops to a file: as they are, or quantized after calibration.
ConversionReport convert_ops(const std::vector<FloatOp>& ops,
                             const std::vector<int64_t>& input_shape, int output,
                             const std::string& path, const ConvertOptions& options) {
  std::vector<int> float_outputs;
  const std::string float_bytes = float_model(ops, input_shape, output, &float_outputs);
  ConversionReport report;
  report.path = path;
  for (const FloatOp& op : ops) {
    report.layers.push_back({op.layer, format::op_name(op.code)});
  }
  if (!options.quantize) {
    // Through the runtime's own checks before it is written.
    Interpreter::from_buffer(float_bytes.data(), float_bytes.size());
    write_file(path, float_bytes);
    report.file_bytes = static_cast<int64_t>(float_bytes.size());
    return report;
  }
  const CalibrationData data = calibration_data(options, input_shape);
  Options keep;
  keep.preserve_all_tensors = true;
  keep.num_threads = 2;
  auto float_interp = Interpreter::from_buffer(float_bytes.data(), float_bytes.size(), keep);
  const Calibrated calibrated =
      calibrate(*float_interp, ops, input_shape, float_outputs, data, options);
  const QuantParams& input_q = calibrated.input;
  const std::vector<QuantParams>& out_q = calibrated.outputs;
  std::vector<int> int8_outputs;
  const std::string int8_bytes =
      int8_model(ops, input_shape, output, input_q, out_q, &int8_outputs);
  auto int8_interp = Interpreter::from_buffer(int8_bytes.data(), int8_bytes.size(), keep);

  // Each op's error, in its own output's units, on the calibration data.
  std::vector<double> sum_sq(ops.size(), 0.0);
  std::vector<int64_t> counts(ops.size(), 0);
  data.for_each_batch([&](const float* x, int64_t batch) {
    const std::vector<float> want_out = float_interp->run(x, batch);
    const std::vector<float> got_out = int8_interp->run(x, batch);
    for (size_t e = 0; e < want_out.size(); ++e) {
      report.output_max_abs_error = std::max(
          report.output_max_abs_error, std::abs(static_cast<double>(got_out[e]) - want_out[e]));
    }
    for (size_t i = 0; i < ops.size(); ++i) {
      const std::vector<float> want = values_of(*float_interp, float_outputs[i], batch);
      const std::vector<float> got = values_of(*int8_interp, int8_outputs[i], batch);
      LayerReport& l = report.layers[i];
      for (size_t e = 0; e < want.size(); ++e) {
        const double d = std::abs(static_cast<double>(got[e]) - want[e]);
        l.max_abs_error = std::max(l.max_abs_error, d);
        sum_sq[i] += d * d;
      }
      counts[i] += static_cast<int64_t>(want.size());
    }
  });
  for (size_t i = 0; i < ops.size(); ++i) {
    LayerReport& l = report.layers[i];
    l.rms_error = counts[i] ? std::sqrt(sum_sq[i] / counts[i]) : 0.0;
    const TensorInfo& t = int8_interp->tensor(int8_outputs[i]);
    l.int8 = t.dtype == DType::kInt8;
    if (l.int8) {
      l.scale = t.scale;
      l.zero_point = t.zero_point;
      l.min = t.scale * (-128 - t.zero_point);
      l.max = t.scale * (127 - t.zero_point);
    }
  }
  report.calibration_examples = data.examples();
  write_file(path, int8_bytes);
  report.file_bytes = static_cast<int64_t>(int8_bytes.size());
  return report;
}

}  // namespace

ConversionReport convert(nn::Model& model, const std::string& path, const ConvertOptions& options) {
  std::vector<int64_t> input_shape;
  int output = 0;
  const std::vector<FloatOp> ops = lower(model, &input_shape, &output);
  return convert_ops(ops, input_shape, output, path, options);
}

ConversionReport convert(const std::string& model, const std::string& path,
                         const ConvertOptions& options) {
  std::error_code error;
  if (!std::filesystem::is_directory(model, error)) {
    std::unique_ptr<nn::Model> loaded = nn::load_model(model, nn::LoadOptions().set_compile(false));
    return convert(*loaded, path, options);
  }
  // An exported saved model (io::save_model): its serving signature's graph.
  const io::ExportedGraph graph = io::load_model(model).exported();
  std::vector<int64_t> input_shape;
  int output = 0;
  const std::vector<FloatOp> ops = lower_graph(graph, &input_shape, &output);
  return convert_ops(ops, input_shape, output, path, options);
}

}  // namespace kiln::lite
