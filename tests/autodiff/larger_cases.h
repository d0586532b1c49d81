// The gradient table's cases (differentiable_cases() in tests/testing/op_cases.h) at a larger
// shape, for gradcheck_test: big enough that compiled loops run vector bodies and not only
// their tails, windows slide over more positions and indices repeat over more rows.
#pragma once

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "kiln/kiln.h"
#include "tests/testing/op_cases.h"

namespace kiln::op_cases {

// Most ops relate their inputs' shapes only by equal sizes (elementwise broadcasting, the
// contracted dimensions of dot, the "shape" of broadcast_in_dim and reshape), so one injective
// map of sizes applied to every input and to the "shape" attribute keeps a case valid: 0 and 1
// stay (1 is what broadcasting stretches), d >= 2 becomes 2d + 1 (2x3 becomes 5x7).
inline int64_t larger_size(int64_t d) { return d >= 2 ? 2 * d + 1 : d; }

inline Shape larger_shape(const Shape& shape) {
  Shape out;
  for (int64_t d : shape) out.push_back(larger_size(d));
  return out;
}

// Ops whose sizes are tied by arithmetic (windows and strides, indices and their bound, slice
// limits, padding) get their larger inputs written out, keyed by case_name().
inline const std::map<std::string, OpCase>& written_larger_cases() {
  static const std::map<std::string, OpCase> kCases = [] {
    // clang-format off
    const std::vector<OpCase> cases = {
      {"convolution", {in({3, 9, 8, 4}), in({3, 3, 4, 5})}},
      {"convolution", {in({2, 11, 9, 3}), in({3, 2, 3, 4})},
       {{"strides", Axes{2, 2}}, {"padding_low", Axes{1, 0}}, {"padding_high", Axes{2, 1}}},
       "strides_padding"},
      {"convolution", {in({3, 10, 9, 3}), in({2, 3, 3, 4})},
       {{"dilation", Axes{3, 2}}, {"padding_low", Axes{1, 1}}, {"padding_high", Axes{0, 1}}},
       "dilation"},
      {"convolution", {in({3, 7, 6, 8}), in({3, 3, 4, 6})},
       {{"groups", int64_t{2}}, {"padding_low", Axes{1, 1}}, {"padding_high", Axes{1, 1}}},
       "groups"},
      {"convolution", {in({2, 9, 8, 3}), in({3, 3, 1, 6})},
       {{"groups", int64_t{3}}, {"strides", Axes{2, 2}}, {"padding_low", Axes{1, 1}},
        {"padding_high", Axes{1, 1}}},
       "depthwise_strided"},
      {"convolution", {in({2, 5, 4, 3}), in({3, 3, 3, 2})},
       {{"lhs_dilation", Axes{2, 2}}, {"padding_low", Axes{2, 1}}, {"padding_high", Axes{2, 2}}},
       "lhs_dilation"},
      {"convolution", {in({3, 12, 9, 2}), in({2, 2, 2, 3})}, {{"strides", Axes{3, 3}}},
       "uncovered"},
      {"convolution", {in({3, 17, 4}), in({3, 4, 3})},
       {{"strides", Axes{3}}, {"dilation", Axes{2}}, {"padding_low", Axes{2}},
        {"padding_high", Axes{1}}},
       "1d"},
      {"convolution", {in({2, 5, 6, 4, 3}), in({2, 2, 2, 3, 2})},
       {{"strides", Axes{1, 2, 1}}, {"padding_low", Axes{0, 1, 1}},
        {"padding_high", Axes{1, 0, 0}}},
       "3d"},
      {"convolution_input_grad", {in({3, 7, 6, 5}), in({3, 3, 4, 5})},
       {{"input_spatial", Axes{9, 8}}}},
      {"convolution_input_grad", {in({2, 6, 4, 6}), in({3, 2, 2, 6})},
       {{"input_spatial", Axes{11, 9}}, {"strides", Axes{2, 2}}, {"padding_low", Axes{1, 0}},
        {"padding_high", Axes{2, 1}}, {"dilation", Axes{1, 2}}, {"groups", int64_t{2}}},
       "strided_grouped"},
      {"convolution_kernel_grad", {in({3, 9, 8, 4}), in({3, 7, 6, 5})},
       {{"kernel_spatial", Axes{3, 3}}}},
      {"convolution_kernel_grad", {in({2, 11, 9, 4}), in({2, 6, 4, 6})},
       {{"kernel_spatial", Axes{3, 2}}, {"strides", Axes{2, 2}}, {"padding_low", Axes{1, 0}},
        {"padding_high", Axes{2, 1}}, {"dilation", Axes{1, 2}}, {"groups", int64_t{2}}},
       "strided_grouped"},
      {"reduce_window_max", {in({3, 8, 6, 5})},
       {{"window", Axes{1, 2, 2, 1}}, {"strides", Axes{1, 2, 2, 1}}}, "pool_2x2"},
      {"reduce_window_max", {in({2, 9, 8, 3})},
       {{"window", Axes{1, 3, 3, 1}}, {"strides", Axes{1, 2, 2, 1}},
        {"padding_low", Axes{0, 1, 1, 0}}, {"padding_high", Axes{0, 1, 1, 0}}},
       "overlapping_padded"},
      {"reduce_window_max", {in({7, 11})}, {{"window", Axes{2, 3}}, {"strides", Axes{1, 2}}},
       "every_dimension"},
      {"reduce_window_max_grad", {in({3, 8, 6, 5}), in({3, 4, 3, 5})},
       {{"window", Axes{1, 2, 2, 1}}, {"strides", Axes{1, 2, 2, 1}}}},
      {"reduce_window_max_grad", {in({9, 7}), in({5, 6})},
       {{"window", Axes{3, 2}}, {"strides", Axes{2, 1}}, {"padding_low", Axes{1, 0}},
        {"padding_high", Axes{1, 0}}},
       "overlapping"},
      {"reduce_window_max_select", {in({3, 7, 6, 4}), in({3, 7, 6, 4})},
       {{"window", Axes{1, 3, 3, 1}}, {"strides", Axes{1, 1, 1, 1}},
        {"padding_low", Axes{0, 1, 1, 0}}, {"padding_high", Axes{0, 1, 1, 0}}}},
      {"reduce_window_sum", {in({3, 8, 6, 5})},
       {{"window", Axes{1, 2, 2, 1}}, {"strides", Axes{1, 2, 2, 1}}}, "pool_2x2"},
      {"reduce_window_sum", {in({2, 9, 10, 3})},
       {{"window", Axes{1, 3, 2, 1}}, {"strides", Axes{1, 2, 3, 1}},
        {"padding_low", Axes{0, 2, 0, 0}}, {"padding_high", Axes{0, 1, 2, 0}}},
       "strided_padded"},
      {"reduce_window_sum", {in({7, 11})}, {{"window", Axes{2, 3}}, {"strides", Axes{1, 2}}},
       "every_dimension"},
      {"reduce_window_sum_grad", {in({3, 4, 3, 5})},
       {{"operand_shape", Axes{3, 8, 7, 5}}, {"window", Axes{1, 2, 2, 1}},
        {"strides", Axes{1, 2, 2, 1}}}},
      {"reduce_window_sum_grad", {in({2, 5, 4, 3})},
       {{"operand_shape", Axes{2, 9, 10, 3}}, {"window", Axes{1, 3, 2, 1}},
        {"strides", Axes{1, 2, 3, 1}}, {"padding_low", Axes{0, 2, 0, 0}},
        {"padding_high", Axes{0, 1, 2, 0}}},
       "strided_padded"},
      {"gather", {in({9, 7}), indices({13}, 9)}},
      {"gather", {in({3, 11, 4}), indices({4, 5}, 11)}, {{"axis", int64_t{1}}},
       "axis_1_2d_indices"},
      {"gather", {in({7, 9}), indices({11}, 9)}, {{"axis", int64_t{-1}}}, "negative_axis"},
      {"scatter_add", {in({9, 7}), indices({13}, 9), in({13, 7})}},
      {"scatter_add", {in({3, 11, 4}), indices({4, 5}, 11), in({3, 4, 5, 4})},
       {{"axis", int64_t{1}}}, "axis_1_2d_indices"},
      {"slice", {in({9, 11})},
       {{"start", Axes{1, 2}}, {"limit", Axes{7, 10}}, {"strides", Axes{1, 1}}}},
      {"slice", {in({11, 13})},
       {{"start", Axes{1, 0}}, {"limit", Axes{11, 13}}, {"strides", Axes{2, 3}}}, "strided"},
      {"slice", {in({7, 9})},
       {{"start", Axes{2, 0}}, {"limit", Axes{2, 9}}, {"strides", Axes{1, 1}}}, "empty"},
      {"slice", {in({7, 9})},
       {{"start", Axes{5, 1}}, {"limit", Axes{7, 9}}, {"strides", Axes{INT64_MAX, 1}}},
       "huge_stride"},
      {"pad", {in({3, 0}), in({})},
       {{"low", Axes{0, 1}}, {"high", Axes{1, 0}}, {"interior", Axes{3, 2}}},
       "sizes_one_and_zero"},
    };
    // clang-format on
    std::map<std::string, OpCase> by_name;
    for (const OpCase& c : cases) by_name.emplace(case_name(c), c);
    return by_name;
  }();
  return kCases;
}

// Ops the size map above would break: every case of theirs must be written out. (pad's cases
// map, as its attributes do not depend on its input's size; its case of sizes 1 and 0, which
// the map leaves as it is, is written out.)
inline bool needs_written_larger_case(const std::string& op) {
  static const std::set<std::string> kOps = {"convolution",
                                             "convolution_input_grad",
                                             "convolution_kernel_grad",
                                             "reduce_window_max",
                                             "reduce_window_max_grad",
                                             "reduce_window_max_select",
                                             "reduce_window_sum",
                                             "reduce_window_sum_grad",
                                             "gather",
                                             "scatter_add",
                                             "slice"};
  return kOps.count(op) > 0;
}

// `c` at its larger shape: written out, or mapped by larger_size. Throws kiln::Error when `c`
// is of an op that needs a written-out case and has none.
inline OpCase larger_case(const OpCase& c) {
  auto written = written_larger_cases().find(case_name(c));
  if (written != written_larger_cases().end()) {
    OpCase out = written->second;
    out.step = c.step;
    out.tol = c.tol;
    return out;
  }
  if (needs_written_larger_case(c.op)) {
    throw Error(ErrorCode::kNotFound,
                "no larger case for " + case_name(c) +
                    ": write one into written_larger_cases() in tests/autodiff/larger_cases.h");
  }
  OpCase out = c;
  for (Input& input : out.inputs) input.shape = larger_shape(input.shape);
  if (c.attrs.has("shape")) out.attrs.set("shape", larger_shape(c.attrs.get_ints("shape")));
  return out;
}

}  // namespace kiln::op_cases
