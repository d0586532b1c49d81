// The ONNX op table: one row per op and opset range (a row holds from its `since` version up to
// the next row of the same op), with the attributes the converter understands. An op or an
// attribute not listed here is reported by the importer, never silently ignored.
#include <algorithm>

#include "interop/onnx_converters.h"

namespace kiln::onnx::internal {
namespace {

#define ROW(op, since, attrs, fn) OpEntry{op, since, attrs, convert_##fn}

const std::vector<OpEntry>& table() {
  static const std::vector<OpEntry> rows = {
      // elementwise
      ROW("Abs", 6, "", Abs), ROW("Neg", 6, "", Neg), ROW("Exp", 6, "", Exp),
      ROW("Log", 6, "", Log), ROW("Sqrt", 6, "", Sqrt), ROW("Reciprocal", 6, "", Reciprocal),
      ROW("Sin", 7, "", Sin), ROW("Cos", 7, "", Cos), ROW("Tan", 7, "", Tan),
      ROW("Tanh", 6, "", Tanh), ROW("Sigmoid", 6, "", Sigmoid), ROW("Erf", 9, "", Erf),
      ROW("Sign", 9, "", Sign), ROW("Floor", 6, "", Floor), ROW("Ceil", 6, "", Ceil),
      ROW("Round", 11, "", Round), ROW("Not", 1, "", Not), ROW("IsNaN", 9, "", IsNaN),
      ROW("IsInf", 10, "detect_negative,detect_positive", IsInf), ROW("Asin", 7, "", Asin),
      ROW("Acos", 7, "", Acos), ROW("Atan", 7, "", Atan), ROW("Sinh", 9, "", Sinh),
      ROW("Cosh", 9, "", Cosh), ROW("Asinh", 9, "", Asinh), ROW("Acosh", 9, "", Acosh),
      ROW("Atanh", 9, "", Atanh), ROW("Identity", 1, "", Identity),
      ROW("Add", 7, "", Add), ROW("Sub", 7, "", Sub), ROW("Mul", 7, "", Mul),
      ROW("Div", 7, "", Div), ROW("Pow", 7, "", Pow), ROW("Mod", 10, "fmod", Mod),
      ROW("And", 7, "", And), ROW("Or", 7, "", Or), ROW("Xor", 7, "", Xor),
      ROW("Equal", 7, "", Equal), ROW("Less", 7, "", Less),
      ROW("LessOrEqual", 12, "", LessOrEqual), ROW("Greater", 7, "", Greater),
      ROW("GreaterOrEqual", 12, "", GreaterOrEqual), ROW("Max", 8, "", Max),
      ROW("Min", 8, "", Min), ROW("Sum", 8, "", Sum), ROW("Mean", 8, "", Mean),
      ROW("Clip", 6, "max,min", Clip6), ROW("Clip", 11, "", Clip11),
      ROW("Where", 9, "", Where), ROW("Cast", 6, "to", Cast), ROW("CastLike", 15, "", CastLike),
      // linear algebra and reductions
      ROW("MatMul", 1, "", MatMul), ROW("Gemm", 7, "alpha,beta,transA,transB", Gemm),
      ROW("ReduceSum", 1, "axes,keepdims", ReduceSum1),
      ROW("ReduceSum", 13, "keepdims,noop_with_empty_axes", ReduceSum13),
      ROW("ReduceMean", 1, "axes,keepdims", ReduceMean),
      ROW("ReduceMax", 1, "axes,keepdims", ReduceMax),
      ROW("ReduceMin", 1, "axes,keepdims", ReduceMin),
      ROW("ReduceProd", 1, "axes,keepdims", ReduceProd),
      ROW("ReduceL1", 1, "axes,keepdims", ReduceL1),
      ROW("ReduceL2", 1, "axes,keepdims", ReduceL2),
      ROW("ReduceLogSum", 1, "axes,keepdims", ReduceLogSum),
      ROW("ReduceLogSumExp", 1, "axes,keepdims", ReduceLogSumExp),
      ROW("ReduceSumSquare", 1, "axes,keepdims", ReduceSumSquare),
      ROW("ArgMax", 1, "axis,keepdims,select_last_index", ArgMax),
      ROW("ArgMin", 1, "axis,keepdims,select_last_index", ArgMin),
      ROW("CumSum", 11, "exclusive,reverse", CumSum),
      // shapes and layout
      ROW("Reshape", 5, "allowzero", Reshape), ROW("Flatten", 1, "axis", Flatten),
      ROW("Squeeze", 1, "axes", Squeeze1), ROW("Squeeze", 13, "", Squeeze13),
      ROW("Unsqueeze", 1, "axes", Unsqueeze1), ROW("Unsqueeze", 13, "", Unsqueeze13),
      ROW("Transpose", 1, "perm", Transpose), ROW("Concat", 4, "axis", Concat),
      ROW("Split", 2, "axis,split", Split2), ROW("Split", 13, "axis", Split13),
      ROW("Slice", 1, "axes,ends,starts", Slice1), ROW("Slice", 10, "", Slice10),
      ROW("Gather", 1, "axis", Gather), ROW("Expand", 8, "", Expand), ROW("Tile", 6, "", Tile),
      ROW("Shape", 1, "end,start", Shape), ROW("Size", 1, "", Size),
      ROW("ConstantOfShape", 9, "value", ConstantOfShape),
      ROW("Constant", 1, "value,value_float,value_floats,value_int,value_ints", Constant),
      ROW("Range", 11, "", Range), ROW("DepthToSpace", 1, "blocksize,mode", DepthToSpace),
      ROW("SpaceToDepth", 1, "blocksize", SpaceToDepth), ROW("Trilu", 14, "upper", Trilu),
      ROW("EyeLike", 9, "dtype,k", EyeLike), ROW("OneHot", 9, "axis", OneHot),
      ROW("Pad", 2, "mode,pads,value", Pad2), ROW("Pad", 11, "mode", Pad11),
      ROW("Dropout", 7, "ratio,seed", Dropout),
      // neural-network ops
      ROW("Relu", 6, "", Relu), ROW("LeakyRelu", 6, "alpha", LeakyRelu),
      ROW("Elu", 6, "alpha", Elu), ROW("Selu", 6, "alpha,gamma", Selu),
      ROW("Celu", 12, "alpha", Celu), ROW("HardSigmoid", 6, "alpha,beta", HardSigmoid),
      ROW("HardSwish", 14, "", HardSwish), ROW("Softplus", 1, "", Softplus),
      ROW("Softsign", 1, "", Softsign), ROW("ThresholdedRelu", 10, "alpha", ThresholdedRelu),
      ROW("PRelu", 7, "", PRelu), ROW("Shrink", 9, "bias,lambd", Shrink),
      ROW("Softmax", 1, "axis", Softmax1), ROW("Softmax", 13, "axis", Softmax13),
      ROW("LogSoftmax", 1, "axis", LogSoftmax1), ROW("LogSoftmax", 13, "axis", LogSoftmax13),
      ROW("Hardmax", 1, "axis", Hardmax1), ROW("Hardmax", 13, "axis", Hardmax13),
      ROW("Conv", 1, "auto_pad,dilations,group,kernel_shape,pads,strides", Conv),
      ROW("ConvTranspose", 1,
          "auto_pad,dilations,group,kernel_shape,output_padding,output_shape,pads,strides",
          ConvTranspose),
      ROW("MaxPool", 1, "auto_pad,ceil_mode,dilations,kernel_shape,pads,storage_order,strides",
          MaxPool),
      ROW("AveragePool", 1, "auto_pad,ceil_mode,count_include_pad,kernel_shape,pads,strides",
          AveragePool),
      ROW("GlobalAveragePool", 1, "", GlobalAveragePool),
      ROW("GlobalMaxPool", 1, "", GlobalMaxPool),
      ROW("BatchNormalization", 7, "epsilon,momentum,training_mode", BatchNormalization),
      ROW("InstanceNormalization", 6, "epsilon", InstanceNormalization),
      ROW("LayerNormalization", 17, "axis,epsilon,stash_type", LayerNormalization),
      ROW("LRN", 1, "alpha,beta,bias,size", LRN),
      ROW("MeanVarianceNormalization", 9, "axes", MeanVarianceNormalization),
      ROW("NegativeLogLikelihoodLoss", 12, "ignore_index,reduction", NegativeLogLikelihoodLoss),
      ROW("SoftmaxCrossEntropyLoss", 12, "ignore_index,reduction", SoftmaxCrossEntropyLoss),
      // indexing
      ROW("GatherElements", 11, "axis", GatherElements),
      ROW("GatherND", 11, "", GatherND), ROW("GatherND", 12, "batch_dims", GatherND),
      ROW("ScatterElements", 11, "axis", ScatterElements),
      ROW("ScatterElements", 16, "axis,reduction", ScatterElements),
      ROW("Scatter", 9, "axis", Scatter), ROW("ScatterND", 11, "", ScatterND),
      ROW("ScatterND", 16, "reduction", ScatterND), ROW("Einsum", 12, "equation", Einsum),
      ROW("Resize", 10, "mode", Resize),
      ROW("Resize", 11,
          "coordinate_transformation_mode,cubic_coeff_a,exclude_outside,extrapolation_value,mode,"
          "nearest_mode",
          Resize),
      ROW("Resize", 18,
          "antialias,axes,coordinate_transformation_mode,cubic_coeff_a,exclude_outside,"
          "extrapolation_value,keep_aspect_ratio_policy,mode,nearest_mode",
          Resize),
      ROW("Upsample", 7, "mode,scales", Upsample), ROW("Upsample", 9, "mode", Upsample),
      // quantization
      ROW("QuantizeLinear", 10, "", QuantizeLinear),
      ROW("QuantizeLinear", 13, "axis", QuantizeLinear),
      ROW("QuantizeLinear", 19, "axis,saturate", QuantizeLinear),
      ROW("DequantizeLinear", 10, "", DequantizeLinear),
      ROW("DequantizeLinear", 13, "axis", DequantizeLinear),
      ROW("DynamicQuantizeLinear", 11, "", DynamicQuantizeLinear),
      // recurrent layers
      ROW("RNN", 7, "activations,clip,direction,hidden_size", RNN),
      ROW("RNN", 14, "activations,clip,direction,hidden_size,layout", RNN),
      ROW("GRU", 7, "activations,clip,direction,hidden_size,linear_before_reset", GRU),
      ROW("GRU", 14, "activations,clip,direction,hidden_size,layout,linear_before_reset", GRU),
      ROW("LSTM", 7, "activations,clip,direction,hidden_size,input_forget", LSTM),
      ROW("LSTM", 14, "activations,clip,direction,hidden_size,input_forget,layout", LSTM),
      // built from other ops
      ROW("HannWindow", 17, "output_datatype,periodic", HannWindow),
      ROW("HammingWindow", 17, "output_datatype,periodic", HammingWindow),
      ROW("BlackmanWindow", 17, "output_datatype,periodic", BlackmanWindow),
      ROW("BitShift", 11, "direction", BitShift),
      ROW("ReverseSequence", 10, "batch_axis,time_axis", ReverseSequence),
      ROW("TopK", 1, "axis,k", TopK1), ROW("TopK", 10, "axis", TopK10),
      ROW("TopK", 11, "axis,largest,sorted", TopK10), ROW("Det", 11, "", Det),
  };
  return rows;
}

#undef ROW

}  // namespace

const OpEntry* find_op(const std::string& op, int64_t opset) {
  const OpEntry* best = nullptr;
  for (const OpEntry& e : table()) {
    if (op == e.op && e.since <= opset && (!best || e.since > best->since)) best = &e;
  }
  return best;
}

std::vector<std::string> table_ops() {
  std::vector<std::string> ops;
  for (const OpEntry& e : table()) ops.push_back(e.op);
  std::sort(ops.begin(), ops.end());
  ops.erase(std::unique(ops.begin(), ops.end()), ops.end());
  return ops;
}

}  // namespace kiln::onnx::internal
