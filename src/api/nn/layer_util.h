// What the built-in layers share: checking the inputs they are called with.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kiln/nn/layer.h"

namespace kiln::nn::detail {

// The input of a layer that takes one: kInvalidArgument "<Type> '<name>' takes one input, got
// N" otherwise.
const Tensor& single_input(const std::vector<Tensor>& inputs, const Layer& layer);

// The one input, of rank `rank` (any rank when negative): otherwise kInvalidArgument "<where> takes
// one input, got N" or "<where> expects input <layout>, got <shape>".
const Tensor& single_input_of_rank(const std::vector<Tensor>& inputs, int64_t rank,
                                   const std::string& where, const std::string& layout);

// Normalization layers compute in f32 under a mixed policy, as Keras' do (their means and
// variances lose too much in f16/bf16): `fn` gets the input cast to f32 and reads variables in
// f32; its result is cast back to the input's dtype.
Tensor in_f32(const Tensor& x, CallContext& ctx, const std::function<Tensor(const Tensor&)>& fn);

// "[1,2,3]", for messages.
std::string ints_str(const std::vector<int64_t>& values);

}  // namespace kiln::nn::detail
