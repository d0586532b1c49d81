// kiln::lite::convert: lowers a model's layers to a chain of lite ops, writes them as a float
// model, and for int8 calibrates the activations' ranges by running that float model in the
// lite runtime over the representative data, then quantizes weights and activations (TF Lite's
// int8 scheme) and measures each op's error against the float model.
#include <algorithm>
#include <cmath>
#include <iomanip>
#include <limits>
#include <optional>
#include <sstream>

#include "kiln/lite.h"
#include "kiln/lite_convert.h"
#include "kiln/nn/saving.h"
#include "kiln/ops.h"
#include "lite/builder.h"
#include "quantize/calibration.h"

namespace kiln::lite {
namespace {

using format::OpCode;
using kernels::Activation;

// One op of the float chain the layers lower to.
struct FloatOp {
  OpCode code;
  std::string layer;
  Activation activation = Activation::kNone;
  std::vector<int64_t> weight_shape;  // [m, ...k]: FullyConnected [m,k], Conv2D [m,kh,kw,c]
  std::vector<float> weights, bias;
  kernels::Window window;
  std::vector<int64_t> out_shape;  // [-1, ...]
  int32_t float_kind = 0;          // kActivation's format::FloatActivation
  bool float_only() const { return code == OpCode::kSoftmax || code == OpCode::kActivation; }
  ModelBuilder::Params params() const {
    if (code != OpCode::kActivation) return ModelBuilder::window_params(window);
    return {float_kind};
  }
};

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? "," : "") + (shape[i] < 0 ? std::string("?") : std::to_string(shape[i]));
  return s + "]";
}

int64_t per_example(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
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

// The model's layers as lite ops; kUnimplemented listing every layer that has none.
std::vector<FloatOp> lower(nn::Model& model, std::vector<int64_t>* input_shape) {
  const nn::Model::Architecture arch = model.architecture();
  const std::optional<TensorType> type = model.input_type();
  if (!type) {
    throw Error(ErrorCode::kInvalidArgument,
                "lite::convert: model " + model.name() +
                    " is not built: call it, fit it or build it before converting");
  }
  if (arch.functional) {
    for (size_t i = 0; i < arch.calls.size(); ++i) {
      const auto& inputs = arch.calls[i].inputs;
      const int expect = static_cast<int>(i) - 1;
      if (inputs.size() != 1 || inputs[0].first != expect || arch.calls[i].layer != i) {
        throw Error(ErrorCode::kUnimplemented,
                    "lite::convert: model " + model.name() +
                        " is not a chain of layers (each reading the one before); the lite "
                        "runtime runs chains only");
      }
    }
  }
  if (type->dtype != f32) {
    throw Error(ErrorCode::kUnimplemented, "lite::convert: the input is " + type->str() +
                                               "; the lite runtime takes f32 inputs");
  }
  std::vector<int64_t> shape(type->shape.begin(), type->shape.end());
  shape[0] = -1;
  *input_shape = shape;
  std::vector<FloatOp> ops;
  std::vector<std::string> unsupported;
  auto refuse = [&](const nn::Layer& layer, const std::string& why) {
    unsupported.push_back(layer.name() + " (" + layer.type_name() + "): " + why);
  };
  for (const nn::LayerPtr& layer_ptr : arch.layers) {
    const nn::Layer& layer = *layer_ptr;
    const std::string type_name = layer.type_name();
    const Attrs config = layer.config();
    FloatOp op;
    op.layer = layer.name();
    if (type_name == "Dense" || type_name == "Conv2D") {
      const bool conv = type_name == "Conv2D";
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
      op.code = conv ? OpCode::kConv2D : OpCode::kFullyConnected;
      op.weights = output_major(kernel);
      const int64_t m = kernel.dim(-1);
      if (conv) {
        op.window = window_from(config, "kernel_size", shape);
        op.weight_shape = {m, kernel.dim(0), kernel.dim(1), kernel.dim(2)};
        op.out_shape = {-1, op.window.out_h(shape[1]), op.window.out_w(shape[2]), m};
      } else {
        op.weight_shape = {m, kernel.dim(0)};
        op.out_shape = {-1, m};
      }
      if (config.get_bool("use_bias", true))
        op.bias = layer.weights().at(1).value().to_vector<float>();
      shape = op.out_shape;
      ops.push_back(op);
      if (after) {
        ops.push_back(*after);
        ops.back().out_shape = shape;
      }
    } else if (type_name == "MaxPooling2D" || type_name == "AveragePooling2D") {
      if (shape.size() != 4) {
        refuse(layer, "input " + shape_str(shape) + " is not NHWC");
        continue;
      }
      op.code = type_name == "MaxPooling2D" ? OpCode::kMaxPool2D : OpCode::kAvgPool2D;
      op.window = window_from(config, "pool_size", shape);
      op.out_shape = {-1, op.window.out_h(shape[1]), op.window.out_w(shape[2]), shape[3]};
      shape = op.out_shape;
      ops.push_back(op);
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
      shape = op.out_shape;
      ops.push_back(op);
    } else if (type_name == "Dropout" || type_name == "InputLayer") {
      continue;  // identity at inference
    } else if (type_name == "Activation") {
      const std::string name = config.get_string("activation");
      if (name.empty() || name == "linear") continue;
      if (std::optional<FloatOp> f = float_activation_op(name, layer.name(), shape)) {
        ops.push_back(*f);
      } else if (name == "relu" && !ops.empty() &&
                 (ops.back().code == OpCode::kFullyConnected ||
                  ops.back().code == OpCode::kConv2D) &&
                 ops.back().activation == Activation::kNone) {
        ops.back().activation = Activation::kRelu;
      } else {
        refuse(layer, "activation " + name + (name == "relu" ? " not after Dense or Conv2D" : ""));
      }
    } else {
      refuse(layer, "no lite op");
    }
  }
  if (!unsupported.empty()) {
    std::string list;
    for (const std::string& u : unsupported) list += "\n  " + u;
    throw Error(
        ErrorCode::kUnimplemented,
        "lite::convert: model " + model.name() +
            " has layers the lite runtime cannot "
            "run (it has Dense, Conv2D, MaxPool2D, AveragePool2D, Flatten, Reshape, Dropout, "
            "and the activations linear, relu, softmax, tanh, sigmoid, swish and softplus):" +
            list);
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

// The float model; `outputs` gets each op's output tensor.
std::string float_model(const std::vector<FloatOp>& ops, const std::vector<int64_t>& input_shape,
                        std::vector<int>* outputs) {
  ModelBuilder b;
  int x = b.add_tensor(activation_info("input", DType::kFloat32, input_shape));
  b.set_input(x);
  for (size_t i = 0; i < ops.size(); ++i) {
    const FloatOp& op = ops[i];
    std::vector<int> inputs{x};
    if (!op.weights.empty()) {
      inputs.push_back(
          add_constant(b, op.layer + "/weights", DType::kFloat32, op.weight_shape, op.weights));
      if (!op.bias.empty()) {
        inputs.push_back(
            add_constant(b, op.layer + "/bias", DType::kFloat32, {op.weight_shape[0]}, op.bias));
      }
    }
    x = b.add_tensor(
        activation_info(op.layer + "/" + format::op_name(op.code), DType::kFloat32, op.out_shape));
    b.add_op(op.code, op.layer, inputs, x, op.activation, op.params());
    outputs->push_back(x);
  }
  b.set_output(x);
  return b.serialize();
}

// The int8 model: a Quantize after the input, int8 ops, a Dequantize before float-only ops and
// at the end. `outputs` gets each float op's tensor in this model (int8 or float).
std::string int8_model(const std::vector<FloatOp>& ops, const std::vector<int64_t>& input_shape,
                       const QuantParams& input_q, const std::vector<QuantParams>& out_q,
                       std::vector<int>* outputs) {
  ModelBuilder b;
  int x = b.add_tensor(activation_info("input", DType::kFloat32, input_shape));
  b.set_input(x);
  QuantParams xq = input_q;
  auto to_int8 = [&](const std::string& name) {
    const int q =
        b.add_tensor(activation_info(name + "/quantized", DType::kInt8, b.tensor(x).shape, xq));
    b.add_op(OpCode::kQuantize, name, {x}, q);
    x = q;
  };
  auto to_float = [&](const std::string& name) {
    const int f =
        b.add_tensor(activation_info(name + "/dequantized", DType::kFloat32, b.tensor(x).shape));
    b.add_op(OpCode::kDequantize, name, {x}, f);
    x = f;
  };
  for (size_t i = 0; i < ops.size(); ++i) {
    const FloatOp& op = ops[i];
    const std::string out_name = op.layer + "/" + format::op_name(op.code);
    if (op.float_only()) {
      if (b.tensor(x).dtype == DType::kInt8) to_float(op.layer);
      const int y = b.add_tensor(activation_info(out_name, DType::kFloat32, op.out_shape));
      b.add_op(op.code, op.layer, {x}, y, Activation::kNone, op.params());
      x = y;
      xq = out_q[i];  // what a Quantize after it uses
      outputs->push_back(x);
      continue;
    }
    if (b.tensor(x).dtype == DType::kFloat32) to_int8(i == 0 ? "input" : op.layer);
    std::vector<int> inputs{x};
    QuantParams yq = xq;  // pools and reshapes keep their input's
    if (!op.weights.empty()) {
      const QuantizedWeights w = quantize_weights(op.weights, op.weight_shape[0]);
      yq = out_q[i];
      inputs.push_back(
          add_constant(b, op.layer + "/weights", DType::kInt8, op.weight_shape, w.values));
      inputs.push_back(op.bias.empty() ? -1
                                       : add_constant(b, op.layer + "/bias", DType::kInt32,
                                                      {op.weight_shape[0]},
                                                      quantize_bias(op.bias, xq.scale, w.scales)));
      inputs.push_back(add_constant(b, op.layer + "/weight_scales", DType::kFloat32,
                                    {op.weight_shape[0]}, w.scales));
    }
    const int y = b.add_tensor(activation_info(out_name, DType::kInt8, op.out_shape, yq));
    b.add_op(op.code, op.layer, inputs, y, op.activation, op.params());
    x = y;
    xq = yq;
    outputs->push_back(x);
  }
  if (b.tensor(x).dtype == DType::kInt8) to_float("output");
  b.set_output(x);
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
  const std::vector<FloatOp> ops = lower(model, &input_shape);
  std::vector<int> float_outputs;
  const std::string float_bytes = float_model(ops, input_shape, &float_outputs);
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

ConversionReport convert(nn::Model& model, const std::string& path, const ConvertOptions& options) {
  std::vector<int64_t> input_shape;
  const std::vector<FloatOp> ops = lower(model, &input_shape);
  std::vector<int> float_outputs;
  const std::string float_bytes = float_model(ops, input_shape, &float_outputs);
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
  const std::string int8_bytes = int8_model(ops, input_shape, input_q, out_q, &int8_outputs);
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

ConversionReport convert(const std::string& model_file, const std::string& path,
                         const ConvertOptions& options) {
  std::unique_ptr<nn::Model> model =
      nn::load_model(model_file, nn::LoadOptions().set_compile(false));
  return convert(*model, path, options);
}

}  // namespace kiln::lite
