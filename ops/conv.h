// The convolution's forward kernel (ops/conv.cc) with an epilogue hook, for kernels that apply
// a bias and activation to each block of output rows while it is in cache (the compiler's
// fused_conv).
#pragma once

#include <cstdint>
#include <functional>

#include "kiln/op_registry.h"

namespace kiln::ops {

// Called with a block of output rows [row0, row0 + rows) of the output seen as a row-major
// [batch * spatial..., c_out] matrix, right after the block's GEMMs wrote it. Every row is passed
// exactly once; blocks run concurrently on the thread pool.
template <class T>
using ConvEpilogue = std::function<void(T* block, int64_t row0, int64_t rows)>;

// The convolution op's kernel on ctx (NHWC input 0, HWIO kernel input 1, the convolution
// attributes), calling `epilogue` on each block of output 0. T is float or double.
template <class T>
void conv_forward(KernelContext& ctx, const ConvEpilogue<T>& epilogue);

}  // namespace kiln::ops
