// The fused ops the epilogue fusion pass (compiler/passes/epilogue_fusion.h) creates, as
// names and attributes every backend reads the same way: a dot or convolution with a bias add
// and an activation applied to its output (and a convolution's max pool), and the vocabulary
// of their attributes. A backend registers the ops' kernels (the CPU's: compiler/cpu/
// fused_dot.h, fused_conv.h) and says through its FusionTarget which it takes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/graph.h"
#include "kiln/shape.h"

namespace kiln::compiler {

// fused_dot(a, b[, bias]): dot's attributes plus "activation"; the bias is added before the
// activation and is a single element, a vector along the last output dimension (shape
// [..., 1, N]), or of the output's shape.
inline constexpr const char* kFusedDotOp = "fused_dot";
// fused_conv(input, kernel[, bias]): convolution's attributes plus "activation"; the bias is a
// single element or a vector along the channel (last) dimension.
inline constexpr const char* kFusedConvOp = "fused_conv";
// fused_conv_pool(input, kernel[, bias]): fused_conv plus "pool" [ph, pw]; output 1 is the max
// pool of output 0 over disjoint, unpadded ph x pw windows of its NHWC spatial dimensions.
inline constexpr const char* kFusedConvPoolOp = "fused_conv_pool";
// The [ph, pw] of window attributes (reduce_window_max's, or its gradient's) that fused_conv_pool
// can take: NHWC windows over the two spatial dimensions only, disjoint (strides equal to the
// window) and unpadded; the empty list otherwise.
std::vector<int64_t> fusable_pool_window(const Attrs& attrs);
// With the attribute "taps" true, fused_conv_pool has an output 2: u8 of the pooled shape, the
// tap (row-major index in the window) of each pooled element's maximum, as the pool's gradient
// finds it, or'ed with kTapNonPositive where the maximum is <= 0. At most kMaxPoolTaps taps.
inline constexpr uint8_t kTapNonPositive = 0x80;
inline constexpr int64_t kMaxPoolTaps = 127;
// conv_pool_kernel_grad(input, taps, pool_grad): the gradients of a fused_conv_pool's kernel
// and bias, given the gradient of its pool output: convolution_kernel_grad(input, dz) and
// reduce_sum(dz) over all but the channel dimension, where dz = reduce_window_max_grad(output 0,
// pool_grad) (with "relu_mask": 0 where a window's maximum is <= 0), read from the taps instead
// of output 0, dz formed a few images at a time and never for the whole batch. Attributes: the
// convolution's (2-d, groups 1, no lhs_dilation), "kernel_spatial", "pool" and "relu_mask". Created
// by ConvPoolGradFusion (compiler/passes/conv_pool_grad_fusion.h).
inline constexpr const char* kConvPoolKernelGradOp = "conv_pool_kernel_grad";

enum class Activation { kNone, kRelu, kTanh, kLogistic };
const char* activation_name(Activation a);
std::optional<Activation> activation_from_name(std::string_view name);
// The activation an elementwise op name stands for ("tanh", "logistic"; relu is
// select(x <= 0, 0, x), two nodes, and is matched by the pass).
std::optional<Activation> unary_activation(std::string_view op);

// How a bias broadcasts onto an output of N columns (its last dimension): one element, a vector
// along the last dimension (shape [..., 1, N]), or the output's own shape.
enum class BiasKind { kScalar, kVector, kFull };

// The bias's kind, or nullopt with the reason in *why; kFull only when allow_full.
std::optional<BiasKind> bias_kind(const Shape& bias, const Shape& out, bool allow_full,
                                  std::string* why);

// Why `bias` cannot be the bias of a fused op with output type `out`, or "".
std::string bias_refusal(const TensorType& bias, const TensorType& out, bool allow_full);

}  // namespace kiln::compiler
