// The convolution's forward kernel (ops/conv.cc) with an epilogue hook, for kernels that apply
// a bias and activation to each block of output rows while it is in cache (the compiler's
// fused_conv), and the bf16 forward with its bias and activation inside oneDNN's kernel.
#pragma once

#include <cstdint>
#include <functional>

#include <optional>

#include "kiln/op_registry.h"
#include "ops/conv_direct.h"
#include "ops/kernel_util.h"
#include "ops/onednn_conv.h"

namespace kiln::ops {

// Called with a block of output rows [row0, row0 + rows) of the output seen as a row-major
// [batch * spatial..., c_out] matrix, right after the block's GEMMs wrote it. Every row is passed
// exactly once; blocks run concurrently on the thread pool.
template <class T>
using ConvEpilogue = std::function<void(T* block, int64_t row0, int64_t rows)>;

// The convolution op's kernel on ctx (NHWC input 0, HWIO kernel input 1, the convolution
// attributes), calling `epilogue` on each block of output 0 in the compute type: T is float or
// double (the output's own rows), or half, whose blocks the epilogue sees as the f32 sums
// before their one rounding to f16 (Kiln's GEMM on the widened operands, as the convolution op).
template <class T>
void conv_forward(KernelContext& ctx, const ConvEpilogue<ComputeType<T>>& epilogue);

// The bf16 convolution on ctx with `fused` (ops/onednn_conv.h: a bias of c_out values and an
// activation applied to the f32 sums before their one rounding) inside oneDNN's kernel, into
// output 0. False, output 0 left unwritten, where oneDNN declines: no bf16 unit, switched off, no
// implementation for the case, or a padded convolution with a non-finite kernel.
bool conv_forward_bf16_fused(KernelContext& ctx, const onednn::BiasActivation& fused);

// The convolution of an `in`-shaped input with a `kernel`-shaped kernel giving `out` (ctx's
// convolution attributes) as a direct few-channel convolution (ops/conv_direct.h), where those
// kernels serve it (f32 only: the caller checks the dtype).
std::optional<direct_conv::Geometry> direct_geometry(const KernelContext& ctx, const Shape& in,
                                                     const Shape& kernel, const Shape& out);

}  // namespace kiln::ops
