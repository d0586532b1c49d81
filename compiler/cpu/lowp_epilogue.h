// What fused_dot and fused_conv share for bf16 and f16 outputs: the epilogue with the reference
// kernels' roundings (their fallback, bit-equal to the ops run apart), the epilogue widened to f32
// (applied to the f32 sums before their one rounding), and the activation as oneDNN's kernels
// take it.
#pragma once

#include <cstdint>
#include <vector>

#include "compiler/cpu/epilogue.h"
#include "ops/onednn_conv.h"

namespace kiln::compiler {

// y = activation(d + bias) over `size` values from d, the unfused op's rounded result, with the
// reference kernels' roundings: after the add and after the activation, each computed in f32.
// The same bits as the add and activation ops run apart. T is bfloat16 or half.
template <class T>
void apply_rounded_epilogue(const Epilogue<T>& e, const T* d, T* y, int64_t size);

// e with its bias (bias_size values) widened to f32 into *storage: the epilogue to apply to the
// f32 sums of a widened GEMM before their one rounding to T.
template <class T>
Epilogue<float> widened_epilogue(const Epilogue<T>& e, int64_t bias_size,
                                 std::vector<float>* storage);

// The activation as ops/onednn_conv.h names it.
ops::onednn::Activation onednn_activation(Activation a);

}  // namespace kiln::compiler
