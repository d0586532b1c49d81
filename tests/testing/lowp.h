// For the bf16/f16 matmul and fused-epilogue tests (tests/ops/lowp_matmul_test.cc,
// tests/compiler/lowp_epilogue_test.cc).
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/kiln.h"

namespace kiln::testing {

// x [batch, rows, cols] stored as itself or as [batch, cols, rows], rounded to `t`.
inline Tensor stored(const std::vector<float>& x, int64_t batch, int64_t rows, int64_t cols,
                     bool transposed, DType t) {
  if (!transposed) return convert(Tensor::from_vector(x, {batch, rows, cols}), t);
  std::vector<float> y(x.size());
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j)
        y[(b * cols + j) * rows + i] = x[(b * rows + i) * cols + j];
  return convert(Tensor::from_vector(y, {batch, cols, rows}), t);
}

}  // namespace kiln::testing
