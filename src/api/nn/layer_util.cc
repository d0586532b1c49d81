// What the built-in layers share: checking the inputs they are called with, normalizing in f32.
#include "src/api/nn/layer_util.h"

#include "kiln/error.h"
#include "kiln/ops.h"

namespace kiln::nn::detail {

const Tensor& single_input(const std::vector<Tensor>& inputs, const Layer& layer) {
  if (inputs.size() != 1) {
    throw Error(ErrorCode::kInvalidArgument, layer.type_name() + " '" + layer.name() +
                                                 "' takes one input, got " +
                                                 std::to_string(inputs.size()));
  }
  return inputs[0];
}

const Tensor& single_input_of_rank(const std::vector<Tensor>& inputs, int64_t rank,
                                   const std::string& where, const std::string& layout) {
  if (inputs.size() != 1) {
    throw Error(ErrorCode::kInvalidArgument,
                where + " takes one input, got " + std::to_string(inputs.size()));
  }
  if (rank >= 0 && inputs[0].rank() != rank) {
    throw Error(ErrorCode::kInvalidArgument,
                where + " expects input " + layout + ", got " + shape_str(inputs[0].shape()));
  }
  return inputs[0];
}

std::string ints_str(const std::vector<int64_t>& values) {
  std::string out;
  for (int64_t v : values) out += (out.empty() ? "" : ",") + std::to_string(v);
  return "[" + out + "]";
}

Tensor in_f32(const Tensor& x, CallContext& ctx, const std::function<Tensor(const Tensor&)>& fn) {
  if (x.dtype() != f16 && x.dtype() != bf16) return fn(x);
  struct Restore {
    CallContext& ctx;
    DType previous;
    ~Restore() { ctx.set_compute_dtype(previous); }
  } restore{ctx, ctx.set_compute_dtype(f32)};
  return convert(fn(convert(x, f32)), x.dtype());
}

}  // namespace kiln::nn::detail
