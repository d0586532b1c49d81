// The f32 and bf16 convolution kernels' fast path through oneDNN (ops/onednn_conv.cc), or a stub
// that always declines when Kiln is built without oneDNN (ops/onednn_none.cc, chosen by CMake).
// ops/conv.cc tries it first and runs its own im2col + GEMM kernels when it declines.
#pragma once

#include <array>
#include <cstdint>
#include <functional>

#include "kiln/op_registry.h"

namespace kiln::ops::onednn {

// A 1-d or 2-d convolution in Kiln's layouts: input [batch, h, w, c_in] (NHWC), kernel
// [kh, kw, c_in / groups, c_out] (HWIO), output [batch, oh, ow, c_out]. A 1-d convolution is
// passed with h = kh = oh = 1. Dilation is Kiln's (1 = dense); an input (lhs) dilation other
// than 1 is not passed here: oneDNN has none. With bf16 the operands and the result are bf16,
// products are summed in f32 and the result rounded once (as Kiln's own bf16 kernels do); on a
// CPU with AVX512-BF16 oneDNN multiplies with vdpbf16ps.
struct ConvShape {
  int64_t batch = 0, c_in = 0, c_out = 0, groups = 1;
  bool bf16 = false;  // otherwise f32
  std::array<int64_t, 2> in{}, kernel{}, out{}, strides{}, pad_low{}, pad_high{}, dilation{};
};

// Called on each block of output rows [row0, row0 + rows) of the output seen as a
// [batch * oh * ow, c_out] matrix, right after oneDNN wrote it (ops/conv.h's ConvEpilogue).
using Epilogue = std::function<void(float* block, int64_t row0, int64_t rows)>;

// A bf16 kernel's epilogue inside oneDNN (the compiler's fused_conv and fused_dot): a bias (one
// bf16 value per output column, i.e. channel; none when null) added to each f32 sum, then the
// activation, then the one rounding to bf16. tanh and logistic are oneDNN's eltwise post-ops;
// relu is Kiln's, applied to each block right after oneDNN rounded it (the same bits, since
// rounding commutes with relu), because oneDNN's relu turns NaN into 0 and Kiln's keeps NaN.
enum class Activation { kNone, kRelu, kTanh, kLogistic };
struct BiasActivation {
  const void* bias = nullptr;
  Activation activation = Activation::kNone;
};

// Whether Kiln was built with oneDNN.
bool built();
// Whether the kernels try oneDNN: built, and not switched off (by set_enabled(false), or by
// KILN_ONEDNN=0 in the environment at startup). For tests and benchmarks that compare paths.
bool enabled();
void set_enabled(bool on);

// Each runs one convolution pass and returns true, or returns false without touching the output
// when oneDNN is not enabled or has no implementation for the case. A failure inside oneDNN is
// reported through ctx.fail (a kiln::Error naming the op and the shapes).
// Pointers are to float or bfloat16 elements, as s.bf16 says.
// y = conv(x, w), calling `epilogue` (when set; f32 only) on every block of y as soon as it is
// written.
bool forward(const KernelContext& ctx, const ConvShape& s, const void* x, const void* w, void* y,
             const Epilogue& epilogue);
// y = activation(conv(x, w) + bias) in bf16 (s.bf16), `fused` applied inside oneDNN's kernel as
// BiasActivation says. Declines (false) also where the host has no bf16 unit (AVX512-BF16 or
// AMX, as oneDNN sees it: ONEDNN_MAX_CPU_ISA included).
bool fused_forward(const KernelContext& ctx, const ConvShape& s, const void* x, const void* w,
                   void* y, const BiasActivation& fused);
// dx = the input gradient of conv(., w) for the output gradient dy.
bool input_grad(const KernelContext& ctx, const ConvShape& s, const void* dy, const void* w,
                void* dx);
// dw = the kernel gradient of conv(x, .) for the output gradient dy.
bool kernel_grad(const KernelContext& ctx, const ConvShape& s, const void* x, const void* dy,
                 void* dw);

// How many passes of each kind oneDNN has run in this process: tests read it to say which path
// served a convolution.
struct Counts {
  int64_t forward = 0, input_grad = 0, kernel_grad = 0;
  int64_t fused_forward = 0;  // of the forwards, those run by fused_forward
};
Counts counts();

}  // namespace kiln::ops::onednn
