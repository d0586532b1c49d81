// The fused_conv kernel op: a convolution (ops/conv.cc's attributes) whose epilogue (bias add
// and/or an activation) is applied to each block of output rows right after its GEMM wrote it,
// while the block is in cache (bf16: inside oneDNN's convolution kernel). Created by the
// epilogue fusion pass (compiler/passes/epilogue_fusion.h).
#pragma once

#include <string>

#include "compiler/cpu/epilogue.h"
#include "kiln/graph.h"

namespace kiln::compiler {

// fused_conv(input, kernel[, bias]) with convolution's attributes (strides, padding_low,
// padding_high, dilation, lhs_dilation, groups) plus "activation" ("none", "relu" = max(x, 0),
// "tanh", "logistic"). The bias is added before the activation and must be a single element or
// a vector along the channel (last) dimension (shape [..., 1, C_out]). Like fused_dot it has no
// gradient: the pass runs in the compiler, on graphs autodiff has already built.
// f32 and f64: results equal convolution, add, activation run by the reference kernels, bit for
// bit. bf16 and f16, as fused_dot: the bias added and the activation applied to the f32 sums
// before their one rounding (bf16: one oneDNN convolution where the host has a bf16 unit; f16:
// Kiln's GEMM on the widened operands), so within the convolution's error bound of the unfused
// results, not bit-equal; relu keeps NaN (x <= 0 becomes 0) as the relu op does. bf16 without a
// bf16 unit, or where oneDNN declines: the convolution's kernel, then the epilogue with the
// reference roundings, bit-equal to the unfused ops.
// (The op name is kFusedConvOp, compiler/fused_ops.h.)

// fused_conv_pool(input, kernel[, bias]): fused_conv's attributes plus "pool" [ph, pw]; output 0
// is fused_conv's, output 1 its max pool over disjoint, unpadded ph x pw windows of the two
// spatial dimensions of an NHWC output (reduce_window_max with window and strides [1, ph, pw, 1],
// the rows and columns left over dropped, as Keras's 'valid' MaxPool2D does). Each image is
// pooled right after the epilogue wrote its last rows, while they are in cache, instead of by a
// kernel that reads the whole output back from memory. f32 and f64; output 1 equals
// reduce_window_max on output 0 bit for bit (the first NaN of a window wins). Created by the
// epilogue fusion pass for a fused convolution whose output feeds such a pool.
// With "conv_output" false (set by drop_conv_outputs where nothing reads output 0), output 0
// is an empty f32/f64 [0] and the convolution's output is not stored: f32 with 1-4 input
// channels, at most 64 output channels, a 2 x 2 pool and no activation or relu runs the direct
// kernels (ops/conv_direct.h), each pool window's four pixels summed in registers and pooled
// there; outputs 1 and 2 have the same bits as with conv_output true.
// (The op name is kFusedConvPoolOp, compiler/fused_ops.h.)


}  // namespace kiln::compiler
