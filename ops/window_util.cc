// The window arithmetic convolution and pooling share.
#include "ops/window_util.h"

#include <algorithm>

namespace kiln::ops {

void keras_padding(const std::string& op, const std::string& padding, const Shape& in,
                   const std::vector<int64_t>& window, const std::vector<int64_t>& strides,
                   const std::string& what, std::vector<int64_t>& low, std::vector<int64_t>& high) {
  low.assign(in.size(), 0);
  high.assign(in.size(), 0);
  if (padding == "valid") return;
  if (padding != "same") {
    throw Error(ErrorCode::kInvalidArgument,
                op + ": padding must be \"same\" or \"valid\", got \"" + padding + "\"");
  }
  for (size_t i = 0; i < in.size(); ++i) {
    int64_t s = strides[i], w = window[i], n = in[i];
    if (s < 1 || s > kMaxAttr) {
      throw Error(ErrorCode::kInvalidArgument, op + ": strides must be in [1, " +
                                                   std::to_string(kMaxAttr) + "], got " +
                                                   ints_str(strides) + " (" + what + ")");
    }
    if (w == kUnknownDim || w > kMaxAttr) {
      throw Error(ErrorCode::kInvalidArgument,
                  op + ": \"same\" padding needs a known window size up to " +
                      std::to_string(kMaxAttr) + " (" + what + ")");
    }
    int64_t total;
    if (n == kUnknownDim) {
      if (s != 1) {
        throw Error(ErrorCode::kInvalidArgument,
                    op + ": \"same\" padding with stride " + std::to_string(s) +
                        " needs a known size for every spatial dimension (" + what + ")");
      }
      total = std::max<int64_t>(w - 1, 0);
    } else {
      int64_t out = n / s + (n % s != 0);
      total = n == 0 ? 0 : std::max<int64_t>((out - 1) * s + w - n, 0);
    }
    low[i] = total / 2;
    high[i] = total - low[i];
  }
}

std::vector<int64_t> window_table(int64_t n, int64_t out, int64_t taps, int64_t stride, int64_t low,
                                  int64_t dilation, int64_t lhs_dilation) {
  const int64_t n_dilated = n == 0 ? 0 : (n - 1) * lhs_dilation + 1;
  std::vector<int64_t> table(out * taps);
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t k = 0; k < taps; ++k) {
      const int64_t pos = o * stride - low + k * dilation;
      const bool hit = pos >= 0 && pos < n_dilated && pos % lhs_dilation == 0;
      table[o * taps + k] = hit ? pos / lhs_dilation : -1;
    }
  }
  return table;
}

}  // namespace kiln::ops
