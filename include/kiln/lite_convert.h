// kiln::lite::convert: turns a trained Kiln model into a lite model file (kiln/lite.h) for the
// small runtime, as float or as int8 by post-training quantization (TF Lite's int8 scheme:
// per-channel symmetric weights, per-tensor asymmetric activations, int32 bias, fixed-point
// requantization). Linked as kiln::kiln_quantize.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/nn/model.h"
#include "kiln/tensor.h"

namespace kiln::lite {

// How an activation's range is chosen from the values seen in calibration.
enum class Calibration {
  kMinMax,      // the smallest and largest value seen
  kPercentile,  // the `percentile` and 100 - `percentile` percentiles: clips rare outliers
};

struct ConvertOptions {
  bool quantize = true;  // int8; false writes a float model
  // Calibration inputs, [examples, ...input shape]; required to quantize.
  Tensor representative;
  int64_t calibration_batch_size = 128;
  int64_t max_calibration_examples = 2048;  // 0: all of `representative`
  Calibration calibration = Calibration::kMinMax;
  double percentile = 99.99;
};

// One op of the converted model, as the report lists it.
struct LayerReport {
  std::string layer;           // the Kiln layer ("conv2d_1")
  std::string op;              // the lite op ("Conv2D", "MaxPool2D", ...)
  bool int8 = false;           // runs in int8 (else float)
  float min = 0.f, max = 0.f;  // the calibrated output range (int8 ops)
  float scale = 0.f;
  int32_t zero_point = 0;
  // The int8 op's output against the float model's on the calibration data, in output units:
  // the largest absolute difference and the root mean square one.
  double max_abs_error = 0.0, rms_error = 0.0;
};

struct ConversionReport {
  std::vector<LayerReport> layers;
  std::string path;
  int64_t file_bytes = 0;
  int64_t calibration_examples = 0;
  // The model's output: int8 file vs the float model, on the calibration data.
  double output_max_abs_error = 0.0;
  std::string str() const;  // a table, one row per op
};

// Converts a built model with one input and one output whose layers the lite runtime has:
// Dense, Conv2D and DepthwiseConv2D (relu fused; softmax, tanh, sigmoid, swish, softplus, gelu
// run in float),
// BatchNormalization (folded into the Dense or Conv2D before it, else a float ChannelAffine),
// LayerNormalization (float), Conv1D and the 1-d pools (as 2-d ones), MaxPool2D, AveragePool2D,
// GlobalAveragePooling2D,
// GlobalMaxPooling2D, Flatten, Reshape, Dropout, SpatialDropout2D, Activation, Add and
// Concatenate (last axis), in a Sequential or functional model. Writes `path` atomically.
// kiln::Error (kUnimplemented) listing every layer it cannot convert, kInvalidArgument for a model
// not built or calibration data of the wrong shape.
ConversionReport convert(nn::Model& model, const std::string& path,
                         const ConvertOptions& options = {});
// The same for a model on disk: saved whole (Model::save, a .kiln file; loaded without its
// optimizer), or an exported saved model directory (io::save_model: <dir> or <dir>/<version>),
// whose "serving_default" graph is lowered by matching the ops each of those layers exports
// (kUnimplemented names every node it cannot lower).
ConversionReport convert(const std::string& model, const std::string& path,
                         const ConvertOptions& options = {});

// Quantization-aware training: a model sharing `model`'s layers and weights that computes as the
// int8 file will: Dense and Conv2D weights fake-quantized per output channel, the input and each
// int8 op's output fake-quantized at the range calibrated on options.representative (then held
// fixed), all with straight-through gradients. Compile and fit it (a small learning rate, an
// epoch or two), then convert `model`: its weights are the trained ones. The model must convert
// and be a chain of layers (no Add or Concatenate: kUnimplemented); otherwise the errors are
// convert's.
std::unique_ptr<nn::Sequential> quantization_aware(nn::Model& model, const ConvertOptions& options);

}  // namespace kiln::lite
