// The epilogue the GEMM-based fused kernel ops (fused_dot, fused_conv) apply to each block of
// output rows while it is in cache: a bias add, then relu, tanh or logistic, with the reference
// kernels' formulas (so the same bits as the separate add and activation ops).
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

#include "compiler/fused_ops.h"
#include "kiln/graph.h"
#include "kiln/op_registry.h"
#include "ops/approximations.h"

namespace kiln::compiler {

// Shape-function checks shared by the fused ops: the output is f32, f64, bf16 or f16, the
// "activation" attribute names an activation, and the optional bias (input `bias_input`) fits
// the output.
void check_epilogue(const InferContext& ctx, const TensorType& out, int bias_input,
                    bool allow_full_bias);

// As the reference kernels compute them: f32 through the approximations of
// ops/approximations.h (the same bits as the code generator's), f64 through std::.
template <class T>
T logistic_of(T x) {
  if constexpr (std::is_same_v<T, float>) {
    return ops::logistic_f32(x);
  } else {
    if (x >= 0) return T(1) / (T(1) + std::exp(-x));
    T e = std::exp(x);
    return e / (T(1) + e);
  }
}

template <class T>
T tanh_of(T x) {
  if constexpr (std::is_same_v<T, float>) {
    return ops::tanh_f32(x);
  } else {
    return std::tanh(x);
  }
}

// A fused op's epilogue over an output whose rows have n = bias_len columns.
template <class T>
struct Epilogue {
  const T* bias = nullptr;  // none: no bias add
  BiasKind kind = BiasKind::kScalar;
  int64_t bias_len = 1;
  Activation act = Activation::kNone;

  // Adds the bias to rows [row0, row0 + rows) (global row numbers) of width n starting at `c`,
  // then applies the activation; compiled for the host's vector ISA (cpu::dispatch). T is float
  // or double.
  void apply(T* c, int64_t row0, int64_t rows, int64_t n) const;
};

// The epilogue of a fused kernel: its "activation" attribute and its optional bias, input
// `bias_input` (checked against the output's shape: ctx.fail when it does not fit).
template <class T>
Epilogue<T> epilogue_of(const KernelContext& ctx, int bias_input, bool allow_full_bias) {
  Epilogue<T> e;
  e.act = *activation_from_name(ctx.attrs().get_string("activation"));
  const Shape& out = ctx.output_type(0).shape;
  e.bias_len = out.empty() ? 1 : out.back();
  if (ctx.num_inputs() > bias_input) {
    const Tensor& b = ctx.input(bias_input);
    std::string why;
    auto k = bias_kind(b.shape(), out, allow_full_bias, &why);
    if (!k) ctx.fail("bias " + shape_str(b.shape()) + ": " + why);
    e.kind = *k;
    e.bias = static_cast<const T*>(b.raw_data());
  }
  return e;
}

// Applies `e` to all of `y` (rows of n columns) in parallel: the second pass of a fused kernel
// that could not apply it block by block.
template <class T>
void apply_epilogue_pass(const Epilogue<T>& e, T* y, int64_t size, int64_t n);

}  // namespace kiln::compiler
