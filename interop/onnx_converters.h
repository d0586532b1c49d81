// The converters of the ONNX op table (interop/onnx_op_table.cc), by family, and the helpers
// they share.
#pragma once

#include <vector>

#include "interop/onnx_ops.h"
#include "kiln/graph.h"
#include "kiln/ops.h"

namespace kiln::onnx::internal {

// `axis` (negative counts from the end) as an index below `rank`; invalid otherwise.
int64_t normalize_axis(const NodeContext& c, int64_t axis, int64_t rank);
// A scalar of `dtype`.
Tensor scalar_of(double value, DType dtype);
// The static shape of x; Unsupported when a dimension is only known at run time.
const Shape& static_shape(const NodeContext& c, const Tensor& x);

#define KILN_ONNX_CONVERTERS(X)                                                                 \
  /* onnx_convert_math.cc */                                                                    \
  X(Abs) X(Neg) X(Exp) X(Log) X(Sqrt) X(Reciprocal) X(Sin) X(Cos) X(Tan) X(Tanh) X(Sigmoid)     \
  X(Erf) X(Sign) X(Floor) X(Ceil) X(Round) X(Not) X(IsNaN) X(IsInf) X(Asin) X(Acos) X(Atan)     \
  X(Sinh) X(Cosh) X(Asinh) X(Acosh) X(Atanh) X(Add) X(Sub) X(Mul) X(Div) X(Pow) X(Mod) X(And)   \
  X(Or) X(Xor) X(Equal) X(Less) X(LessOrEqual) X(Greater) X(GreaterOrEqual) X(Max) X(Min)       \
  X(Sum) X(Mean) X(Clip6) X(Clip11) X(Where) X(Cast) X(CastLike) X(MatMul) X(Gemm)              \
  X(ReduceSum1) X(ReduceSum13) X(ReduceMean) X(ReduceMax) X(ReduceMin) X(ReduceProd)            \
  X(ReduceL1) X(ReduceL2) X(ReduceLogSum) X(ReduceLogSumExp) X(ReduceSumSquare) X(ArgMax)       \
  X(ArgMin) X(CumSum) X(Identity)                                                               \
  /* onnx_convert_shape.cc */                                                                   \
  X(Reshape) X(Flatten) X(Squeeze1) X(Squeeze13) X(Unsqueeze1) X(Unsqueeze13) X(Transpose)     \
  X(Concat) X(Split2) X(Split13) X(Slice1) X(Slice10) X(Gather) X(Expand) X(Tile) X(Shape)      \
  X(Size) X(ConstantOfShape) X(Constant) X(Range) X(DepthToSpace) X(SpaceToDepth) X(Trilu)      \
  X(EyeLike) X(OneHot) X(Pad2) X(Pad11) X(Dropout)                                              \
  /* onnx_convert_nn.cc */                                                                      \
  X(Relu) X(LeakyRelu) X(Elu) X(Selu) X(Celu) X(HardSigmoid) X(HardSwish) X(Softplus)           \
  X(Softsign) X(ThresholdedRelu) X(PRelu) X(Shrink) X(Softmax1) X(Softmax13) X(LogSoftmax1)     \
  X(LogSoftmax13) X(Hardmax1) X(Hardmax13) X(Conv) X(ConvTranspose) X(MaxPool) X(AveragePool)   \
  X(GlobalAveragePool) X(GlobalMaxPool) X(BatchNormalization) X(InstanceNormalization)          \
  X(LayerNormalization) X(LRN) X(MeanVarianceNormalization) X(NegativeLogLikelihoodLoss)        \
  X(SoftmaxCrossEntropyLoss)                                                                    \
  /* onnx_convert_index.cc */                                                                   \
  X(GatherElements) X(GatherND) X(ScatterElements) X(Scatter) X(ScatterND) X(Einsum)           \
  /* onnx_convert_resize.cc */                                                                  \
  X(Resize) X(Upsample)                                                                         \
  /* onnx_convert_quant.cc */                                                                   \
  X(QuantizeLinear) X(DequantizeLinear) X(DynamicQuantizeLinear)                               \
  /* onnx_convert_rnn.cc */                                                                     \
  X(RNN) X(GRU) X(LSTM)                                                                         \
  /* onnx_convert_misc.cc */                                                                    \
  X(HannWindow) X(HammingWindow) X(BlackmanWindow) X(BitShift) X(ReverseSequence) X(TopK1)      \
  X(TopK10) X(Det)

#define KILN_ONNX_DECLARE(name) std::vector<Tensor> convert_##name(const NodeContext& c);
KILN_ONNX_CONVERTERS(KILN_ONNX_DECLARE)
#undef KILN_ONNX_DECLARE

}  // namespace kiln::onnx::internal
