// Post-training quantization's arithmetic: activation ranges observed over calibration data,
// the int8 parameters they give, and per-channel symmetric weights with their int32 biases.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "kiln/lite_convert.h"

namespace kiln::lite {

struct QuantParams {
  float scale = 1.f;
  int32_t zero_point = 0;
};
// The asymmetric int8 parameters of [lo, hi], widened to hold 0 (so zero padding and relu's
// zeros are exact).
QuantParams params_for_range(float lo, float hi);

// Watches the values one tensor takes over the calibration batches.
class RangeObserver {
 public:
  RangeObserver(Calibration method, double percentile);
  void observe(const float* values, int64_t count);
  void observe(const std::vector<float>& values) {
    observe(values.data(), static_cast<int64_t>(values.size()));
  }
  QuantParams params() const;

 private:
  Calibration method_;
  double percentile_;
  float lo_, hi_;
  std::vector<float> sample_;  // for percentiles: every stride_-th value seen
  int64_t stride_ = 1, seen_ = 0;
};

struct QuantizedWeights {
  std::vector<int8_t> values;  // [m][k] in [-127, 127]
  std::vector<float> scales;   // [m]: max |w| / 127 of each output channel
};
QuantizedWeights quantize_weights(const std::vector<float>& weights, int64_t m);
// round(bias / (input scale * weight scale)), saturated to int32.
std::vector<int32_t> quantize_bias(const std::vector<float>& bias, float input_scale,
                                   const std::vector<float>& weight_scales);

// The representative examples, checked against the model's input and cut to the options' size.
class CalibrationData {
 public:
  CalibrationData(std::vector<float> values, int64_t examples, int64_t example_size,
                  int64_t batch_size)
      : values_(std::move(values)),
        examples_(examples),
        example_size_(example_size),
        batch_size_(batch_size) {}
  int64_t examples() const { return examples_; }
  void for_each_batch(const std::function<void(const float*, int64_t)>& fn) const;

 private:
  std::vector<float> values_;
  int64_t examples_, example_size_, batch_size_;
};
CalibrationData calibration_data(const ConvertOptions& options,
                                 const std::vector<int64_t>& input_shape);

// The int8 parameters the int8 file gives the model's input and each layer's output (by layer
// name: a Dense or Conv2D its own range, a pool or reshape its input's), calibrated as convert
// does: what quantization-aware training fakes.
struct LayerRanges {
  QuantParams input;
  std::map<std::string, QuantParams> outputs;
  // A float activation's output (of an Activation layer, or after a Dense or Conv2D), where an
  // int8 op follows and quantizes it.
  std::map<std::string, QuantParams> float_outputs;
};
LayerRanges calibrate_layers(nn::Model& model, const ConvertOptions& options);

}  // namespace kiln::lite
