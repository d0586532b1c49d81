// What the built-in layers share: checking the inputs they are called with.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/nn/layer.h"

namespace kiln::nn::detail {

// The input of a layer that takes one: kInvalidArgument "<Type> '<name>' takes one input, got
// N" otherwise.
const Tensor& single_input(const std::vector<Tensor>& inputs, const Layer& layer);

// The one input, of rank `rank` (any rank when negative): otherwise kInvalidArgument "<where> takes one input, got N"
// or "<where> expects input <layout>, got <shape>".
const Tensor& single_input_of_rank(const std::vector<Tensor>& inputs, int64_t rank,
                                   const std::string& where, const std::string& layout);

// "[1,2,3]", for messages.
std::string ints_str(const std::vector<int64_t>& values);

}  // namespace kiln::nn::detail
