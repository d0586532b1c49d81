// The fused_dot kernel op: a dot (ops/linalg.cc's attributes) whose epilogue (bias add and/or an
// activation) is applied to each block of output rows right after Eigen computes it, while the
// block is in cache. Created by the dot-epilogue pass (compiler/passes/dot_epilogue.h).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "kiln/graph.h"

namespace kiln::compiler {

// fused_dot(a, b[, bias]) with dot's attributes (lhs_contract, rhs_contract, lhs_batch,
// rhs_batch) plus "activation" ("none", "relu" = max(x, 0), "tanh", "logistic"). The bias is
// added before the activation and must be a single element, a vector along the last output
// dimension (shape [..., 1, N]), or of the output's shape; b must have a free dimension.
// f32 and f64. Results equal dot, add, activation run by the reference kernels, bit for bit.
inline constexpr const char* kFusedDotOp = "fused_dot";

enum class Activation { kNone, kRelu, kTanh, kLogistic };
const char* activation_name(Activation a);
std::optional<Activation> activation_from_name(std::string_view name);
// The activation an elementwise op name stands for ("tanh", "logistic"; relu is "max" with a
// zero constant and is matched by the pass).
std::optional<Activation> unary_activation(std::string_view op);

// Why `bias` cannot be the bias of a fused_dot with output type `out`, or "".
std::string fused_dot_bias_refusal(const TensorType& bias, const TensorType& out);

// Why a dot with these attributes and operand shapes would need its operands copied (the kernel
// then runs the dot first and the epilogue as a second pass), or "".
std::string fused_dot_layout_refusal(const Shape& a, const Shape& b, const Attrs& attrs);

}  // namespace kiln::compiler
