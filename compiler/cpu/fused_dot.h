// The fused_dot kernel op: a dot (ops/linalg.cc's attributes) whose epilogue (bias add and/or an
// activation) is applied to each block of output rows right after Eigen computes it, while the
// block is in cache (bf16: inside oneDNN's matmul kernel; f16: before the block's rounding).
// Created by the epilogue fusion pass (compiler/passes/epilogue_fusion.h).
#pragma once

#include <string>

#include "compiler/cpu/epilogue.h"
#include "kiln/graph.h"

namespace kiln::compiler {

// fused_dot(a, b[, bias]) with dot's attributes (lhs_contract, rhs_contract, lhs_batch,
// rhs_batch) plus "activation" ("none", "relu" = max(x, 0), "tanh", "logistic"). The bias is
// added before the activation and must be a single element, a vector along the last output
// dimension (shape [..., 1, N]), or of the output's shape; b must have a free dimension.
// f32 and f64: results equal dot, add, activation run by the reference kernels, bit for bit.
// bf16 and f16: the bias added and the activation applied to the f32 sum before its one rounding
// (so within the dot's error bound of the unfused results, not bit-equal); relu keeps NaN, as
// the relu op does. bf16 runs as one oneDNN matmul where the host has a bf16 unit, elsewhere (and
// for a full-size bias) dot's kernel then the epilogue, bit-equal to the unfused ops. f16 runs
// Kiln's f32 GEMM blocks on the widened operands (oneDNN 2.6 has no f16 matmul), the epilogue
// applied to each block before its rounding.
// (The op name is kFusedDotOp, compiler/fused_ops.h.)

// Why a dot with these attributes and operand shapes would need its operands copied (the kernel
// then runs the dot first and the epilogue as a second pass), or "".
std::string fused_dot_layout_refusal(const Shape& a, const Shape& b, const Attrs& attrs);

}  // namespace kiln::compiler
