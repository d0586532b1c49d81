// Backward fusion through a convolution's max pool. Where the gradient a fused_conv_pool's pool
// passes back (reduce_window_max_grad of its output 0, the relu mask folded in or not) is read
// only by the convolution's kernel gradient (convolution_kernel_grad of the same input and
// attributes) and its bias gradient (reduce_sum over all but the channel dimension), as in the
// first convolution of a network, whose input needs no gradient, the three become one
// conv_pool_kernel_grad (compiler/fused_ops.h). It reads the pool's argmax taps, which the
// forward fused_conv_pool then writes as its output 2 (one byte per pooled element), instead of
// the convolution's whole output, and never writes the gradient of that output. Not exact: the
// kernel gradient's sums are added in another order than convolution_kernel_grad's GEMM (the
// same terms, within the same rounding bound); Rewrites::kExact pipelines leave it out.

#pragma once

#include "compiler/passes/pass.h"

namespace kiln::compiler {

class ConvPoolGradFusion : public Pass {
 public:
  std::string name() const override { return "conv_pool_grad_fusion"; }
  bool run(Module& module) override;
  bool exact() const override { return false; }
};

// Marks a fused_conv_pool whose output 0 (the convolution's whole output) nothing reads
// "conv_output" false, so that it is never stored: in training once conv_pool_grad_fusion's
// gradient reads the taps instead, in inference where only the pool is wanted. Only those the
// CPU's direct kernels pool in registers (f32, 1-4 input channels, at most 64 output channels, a
// 2 x 2 pool, no activation or relu; ops/conv_direct.h): any other computes output 0 anyway.
// Exact (outputs 1 and 2 keep their bits). Runs after DCE, which removes the readers that the
// fusion passes left dead. The image sizes are not known here: where the kernels decline them
// at run time (ops/conv_direct.h: serves), the op computes output 0 into a buffer of its own.
class DropConvOutputs : public Pass {
 public:
  std::string name() const override { return "drop_conv_outputs"; }
  bool run(Module& module) override;
};

}  // namespace kiln::compiler
