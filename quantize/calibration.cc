// Calibration and weight quantization for kiln::lite::convert (TF Lite's int8 scheme).
#include "quantize/calibration.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kiln/ops.h"

namespace kiln::lite {

QuantParams params_for_range(float lo, float hi) {
  lo = std::min(lo, 0.f);
  hi = std::max(hi, 0.f);
  if (!std::isfinite(lo) || !std::isfinite(hi)) {
    throw Error(ErrorCode::kInvalidArgument,
                "lite::convert: calibration saw a non-finite activation; check the "
                "representative data");
  }
  if (hi - lo < 1e-6f) hi = lo + 1e-6f;  // a constant zero tensor
  QuantParams q;
  q.scale = (hi - lo) / 255.f;
  const double zp = std::round(-128.0 - static_cast<double>(lo) / q.scale);
  q.zero_point = static_cast<int32_t>(std::clamp(zp, -128.0, 127.0));
  return q;
}

RangeObserver::RangeObserver(Calibration method, double percentile)
    : method_(method),
      percentile_(percentile),
      lo_(std::numeric_limits<float>::infinity()),
      hi_(-std::numeric_limits<float>::infinity()) {}

void RangeObserver::observe(const float* values, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    lo_ = std::min(lo_, values[i]);
    hi_ = std::max(hi_, values[i]);
  }
  if (method_ != Calibration::kPercentile) return;
  // Keep at most ~2^20 values: past that, every other one of the sample and of what follows.
  constexpr size_t kMaxSample = size_t{1} << 20;
  for (int64_t i = 0; i < count; ++i, ++seen_) {
    if (seen_ % stride_ != 0) continue;
    sample_.push_back(values[i]);
    if (sample_.size() >= 2 * kMaxSample) {
      for (size_t j = 0; j < kMaxSample; ++j) sample_[j] = sample_[2 * j];
      sample_.resize(kMaxSample);
      stride_ *= 2;
    }
  }
}

QuantParams RangeObserver::params() const {
  if (lo_ > hi_) return params_for_range(0.f, 0.f);  // nothing seen
  if (method_ != Calibration::kPercentile || sample_.empty()) return params_for_range(lo_, hi_);
  std::vector<float> sorted = sample_;
  std::sort(sorted.begin(), sorted.end());
  auto at = [&](double p) {
    const double pos = std::clamp(p / 100.0, 0.0, 1.0) * static_cast<double>(sorted.size() - 1);
    return sorted[static_cast<size_t>(std::llround(pos))];
  };
  return params_for_range(at(100.0 - percentile_), at(percentile_));
}

QuantizedWeights quantize_weights(const std::vector<float>& weights, int64_t m) {
  const int64_t k = static_cast<int64_t>(weights.size()) / m;
  QuantizedWeights q;
  q.values.resize(weights.size());
  q.scales.resize(m);
  for (int64_t j = 0; j < m; ++j) {
    float max_abs = 0.f;
    for (int64_t i = 0; i < k; ++i) max_abs = std::max(max_abs, std::abs(weights[j * k + i]));
    // An all-zero channel keeps a positive scale: its values quantize to 0 whatever it is.
    const float scale = max_abs > 0.f ? max_abs / 127.f : 1.f;
    q.scales[j] = scale;
    for (int64_t i = 0; i < k; ++i) {
      const float v = std::round(weights[j * k + i] / scale);
      q.values[j * k + i] = static_cast<int8_t>(std::clamp(v, -127.f, 127.f));
    }
  }
  return q;
}

std::vector<int32_t> quantize_bias(const std::vector<float>& bias, float input_scale,
                                   const std::vector<float>& weight_scales) {
  std::vector<int32_t> q(bias.size());
  for (size_t j = 0; j < bias.size(); ++j) {
    const double v = std::round(static_cast<double>(bias[j]) /
                                (static_cast<double>(input_scale) * weight_scales[j]));
    q[j] = static_cast<int32_t>(std::clamp(v, -2147483648.0, 2147483647.0));
  }
  return q;
}

void CalibrationData::for_each_batch(const std::function<void(const float*, int64_t)>& fn) const {
  for (int64_t start = 0; start < examples_; start += batch_size_) {
    fn(values_.data() + start * example_size_, std::min(batch_size_, examples_ - start));
  }
}

CalibrationData calibration_data(const ConvertOptions& options,
                                 const std::vector<int64_t>& input_shape) {
  const Tensor& x = options.representative;
  std::string want = "[N";
  for (size_t i = 1; i < input_shape.size(); ++i) want += "," + std::to_string(input_shape[i]);
  want += "]";
  if (!x.defined()) {
    throw Error(ErrorCode::kInvalidArgument,
                "lite::convert: int8 quantization needs representative data " + want +
                    " (ConvertOptions::representative); set quantize = false for a float model");
  }
  bool fits = x.rank() == static_cast<int64_t>(input_shape.size()) && x.dim(0) > 0;
  for (size_t i = 1; fits && i < input_shape.size(); ++i) fits = x.dim(i) == input_shape[i];
  if (!fits) {
    throw Error(ErrorCode::kInvalidArgument, "lite::convert: representative data is " +
                                                 shape_str(x.shape()) + ", the model's input is " +
                                                 want);
  }
  if (options.calibration == Calibration::kPercentile &&
      !(options.percentile > 50.0 && options.percentile <= 100.0)) {
    throw Error(ErrorCode::kInvalidArgument,
                "lite::convert: percentile must be in (50, 100], got " +
                    std::to_string(options.percentile));
  }
  if (options.calibration_batch_size < 1) {
    throw Error(ErrorCode::kInvalidArgument,
                "lite::convert: calibration_batch_size must be positive, got " +
                    std::to_string(options.calibration_batch_size));
  }
  int64_t n = x.dim(0);
  if (options.max_calibration_examples > 0) n = std::min(n, options.max_calibration_examples);
  Tensor used = n == x.dim(0) ? x : slice(x, Axes(x.rank(), 0), [&] {
    Axes limit(x.shape().begin(), x.shape().end());
    limit[0] = n;
    return limit;
  }());
  return CalibrationData(used.to_vector<float>(), n, used.size() / n,
                         options.calibration_batch_size);
}

}  // namespace kiln::lite
