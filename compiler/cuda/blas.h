// cuBLASLt matmuls (through libkiln_cuda.so, runtime/cuda/cuda_plugin.h) on host tensors staged
// through device buffers, until device tensors exist: the CUDA backend's dot kernel, tested and
// benchmarked on a GPU. No CUDA types appear here.
#pragma once

#include <cstdint>

#include "kiln/tensor.h"

namespace kiln::compiler::cuda {

struct GpuMatmulOptions {
  bool trans_a = false;  // a is [k, m]
  bool trans_b = false;  // b is [n, k]
  bool relu = false;     // max(., 0) after the bias
};

// act(op(a) op(b) + bias) for 2-d f32, f16 or bf16 tensors of one dtype (summed in f32; no
// TF32), bias [n] of that dtype or undefined. Throws kiln::Error: kInvalidArgument naming the
// shapes and dtypes; kUnavailable without a GPU or without libkiln_cuda.so.
Tensor matmul_on_gpu(const Tensor& a, const Tensor& b, const Tensor& bias = {},
                     const GpuMatmulOptions& options = {});

// For benchmarks: seconds a [m, k] x [k, n] matmul of `dtype` takes on device-resident data,
// the mean of `reps` after one warm-up (which chooses the algorithm).
double matmul_seconds_on_gpu(DType dtype, int64_t m, int64_t n, int64_t k, int reps);

}  // namespace kiln::compiler::cuda
