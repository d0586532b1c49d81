// The table of op cases shared by the gradient check (tests/autodiff/gradcheck_test.cc) and the
// compiled-vs-interpreted test of every op (tests/compiler/op_modes_test.cc): per case, an op,
// its attributes and where each input's random values come from.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kiln/kiln.h"

namespace kiln::op_cases {

// Where an input's random values come from: a union of intervals (one is picked uniformly, then
// a value in it), so that a case stays in an op's domain (x > 0 for log) and off its kinks
// (0 for abs, the integers for floor).
struct Domain {
  std::vector<std::pair<double, double>> intervals;
};
inline Domain range(double lo, double hi) { return {{{lo, hi}}}; }
inline Domain away_from_zero(double lo = 0.2, double hi = 2) { return {{{-hi, -lo}, {lo, hi}}}; }
// k + [lo, hi] for the integers k in [-3, 2].
inline Domain offsets(double lo, double hi) {
  Domain d;
  for (int k = -3; k <= 2; ++k) d.intervals.push_back({k + lo, k + hi});
  return d;
}

struct Input {
  Shape shape;
  Domain domain = range(-2, 2);
  DType dtype = f64;  // floating-point inputs are f64, the others are not differentiated
};
inline Input in(Shape shape, Domain domain = range(-2, 2)) { return {std::move(shape), domain}; }
inline Input pred(Shape shape) { return {std::move(shape), range(0, 1), bool_}; }
// i64 indices in [0, bound): the f64 draws are truncated.
inline Input indices(Shape shape, int64_t bound) {
  return {std::move(shape), range(0, static_cast<double>(bound)), i64};
}

struct OpCase {
  std::string op;
  std::vector<Input> inputs;
  Attrs attrs = {};
  std::string label = "";  // tells apart several cases of one op
  double step = 1e-6;      // gradcheck: of the central differences
  double tol = 1e-6;       // gradcheck: |rule - differences| <= tol * (1 + |differences|)
  // Set for ops whose attributes depend on the input types (the control-flow ops' sub-graphs
  // are traced for them): the attributes for these inputs, used instead of `attrs`.
  std::function<Attrs(const std::vector<TensorType>&)> typed_attrs = nullptr;
};

// The attributes of case `c` for these arguments.
inline Attrs attrs_for(const OpCase& c, const std::vector<Tensor>& args) {
  if (!c.typed_attrs) return c.attrs;
  std::vector<TensorType> types;
  for (const Tensor& a : args) types.push_back({a.dtype(), a.shape()});
  return c.typed_attrs(types);
}

// A sub-graph of f over params of these types (the control-flow ops' cases).
inline std::shared_ptr<const SubGraph> subgraph_of(
    const std::string& name, const std::vector<TensorType>& params,
    const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& f) {
  auto sub = std::make_shared<SubGraph>();
  sub->graph = Graph(name);
  for (const TensorType& t : params) sub->params.push_back(sub->graph.placeholder(t.dtype, t.shape));
  auto guard = sub->graph.as_default();
  sub->results = f(sub->params);
  for (Tensor& r : sub->results)
    if (!r.is_symbolic()) r = sub->graph.constant(r);
  return sub;
}

// cond: pred ? sin(x) * w : x * x + w.
inline Attrs cond_case_attrs(const std::vector<TensorType>& in) {
  std::vector<TensorType> params(in.begin() + 1, in.end());
  Attrs a;
  a.set("then_branch", subgraph_of("then", params, [](const std::vector<Tensor>& p) {
          return std::vector<Tensor>{sin(p[0]) * p[1]};
        }));
  a.set("else_branch", subgraph_of("else", params, [](const std::vector<Tensor>& p) {
          return std::vector<Tensor>{p[0] * p[0] + p[1]};
        }));
  return a;
}

// scan over (carry h, xs x, captured w): h' = tanh(h w + x), y = h' * x.
inline Attrs scan_case_attrs(const std::vector<TensorType>& in, bool reverse, bool remat) {
  std::vector<TensorType> params = in;
  params[1].shape.erase(params[1].shape.begin());
  Attrs a;
  a.set("body", subgraph_of("body", params, [](const std::vector<Tensor>& p) {
          Tensor h = tanh(matmul(p[0], p[2]) + p[1]);
          return std::vector<Tensor>{h, h * p[1]};
        }));
  a.set("num_carry", int64_t{1}).set("num_xs", int64_t{1}).set("length", in[1].shape[0]);
  a.set("reverse", reverse).set("remat", remat).set("unroll", int64_t{1});
  return a;
}

// while (at most 3 steps, cond always true) over (x, captured w): x' = tanh(x * w) + x / 2.
inline Attrs while_case_attrs(const std::vector<TensorType>& in) {
  Attrs a;
  a.set("cond", subgraph_of("cond", in, [](const std::vector<Tensor>&) {
          return std::vector<Tensor>{Tensor::scalar(true)};
        }));
  a.set("body", subgraph_of("body", in, [](const std::vector<Tensor>& p) {
          return std::vector<Tensor>{tanh(p[0] * p[1]) + p[0] / 2.0};
        }));
  a.set("num_vars", int64_t{1}).set("max_iterations", int64_t{3});
  return a;
}

// The gradient table (tests/autodiff/gradcheck_test.cc): one line per case, at least one case
// per differentiable op.
inline const std::vector<OpCase>& differentiable_cases() {
  // clamp's x stays away from its bounds low and high.
  const Domain low = range(-1.1, -0.9), high = range(0.9, 1.1);
  const Domain off_bounds = {{{-2, -1.2}, {-0.8, 0.8}, {1.2, 2}}};
  static const std::vector<OpCase> kCases = {
      // ---- elementwise (ops/elementwise.cc)
      {"neg", {in({2, 3})}},
      {"abs", {in({2, 3}, away_from_zero())}},
      {"exp", {in({2, 3})}},
      {"log", {in({2, 3}, range(0.5, 3))}},
      {"log1p", {in({2, 3}, range(-0.5, 2))}},
      {"expm1", {in({2, 3})}},
      {"sqrt", {in({2, 3}, range(0.5, 3))}},
      {"rsqrt", {in({2, 3}, range(0.5, 3))}},
      {"tanh", {in({2, 3})}},
      {"logistic", {in({2, 3}, range(-4, 4))}},
      {"sin", {in({2, 3}, range(-4, 4))}},
      {"cos", {in({2, 3}, range(-4, 4))}},
      {"tan", {in({2, 3}, range(-1.2, 1.2))}},
      {"erf", {in({2, 3})}},
      {"sign", {in({2, 3}, away_from_zero())}},
      {"floor", {in({2, 3}, offsets(0.1, 0.9))}},
      {"ceil", {in({2, 3}, offsets(0.1, 0.9))}},
      {"round", {in({2, 3}, offsets(-0.4, 0.4))}},
      {"add", {in({2, 3}), in({2, 3})}},
      {"add", {in({2, 3}), in({3})}, {}, "broadcast"},
      {"sub", {in({2, 3}), in({2, 3})}},
      {"sub", {in({2, 1}), in({1, 3})}, {}, "broadcast"},
      {"mul", {in({2, 3}), in({2, 3})}},
      {"mul", {in({}), in({2, 3})}, {}, "scalar"},
      {"div", {in({2, 3}), in({2, 3}, away_from_zero(0.5, 2))}},
      {"div", {in({2, 3}), in({2, 1}, away_from_zero(0.5, 2))}, {}, "broadcast"},
      {"pow", {in({2, 3}, range(0.5, 2)), in({2, 3})}},
      {"max", {in({2, 3}, offsets(0.1, 0.4)), in({2, 3}, offsets(0.6, 0.9))}},
      {"min", {in({2, 3}, offsets(0.1, 0.4)), in({2, 3}, offsets(0.6, 0.9))}},
      {"rem", {in({2, 3}, away_from_zero(2.2, 2.9)), in({2, 3}, away_from_zero(1, 1.05))}},
      {"atan2", {in({2, 3}, away_from_zero(0.5, 2)), in({2, 3}, away_from_zero(0.5, 2))}},
      {"select", {pred({2, 3}), in({2, 3}), in({2, 3})}},
      {"select", {pred({2, 3}), in({3}), in({2, 1})}, {}, "broadcast"},
      {"clamp", {in({2, 3}, off_bounds), in({2, 3}, low), in({2, 3}, high)}},
      {"clamp", {in({2, 3}, off_bounds), in({}, low), in({}, high)}, {}, "scalar_bounds"},
      {"convert", {in({2, 3})}, {{"dtype", f64}}},
      {"convert", {in({2, 3})}, {{"dtype", f32}}, "to_f32", 1e-3, 1e-3},
      // ---- convolution, pooling, gather (ops/conv.cc, ops/pool.cc, ops/gather.cc)
      // clang-format off
      {"convolution", {in({2, 5, 5, 3}), in({3, 3, 3, 4})}},
      {"convolution", {in({1, 6, 5, 2}), in({3, 2, 2, 3})},
       {{"strides", Axes{2, 2}}, {"padding_low", Axes{1, 0}}, {"padding_high", Axes{2, 1}}},
       "strides_padding"},
      {"convolution", {in({2, 7, 6, 2}), in({2, 3, 2, 2})},
       {{"dilation", Axes{3, 2}}, {"padding_low", Axes{1, 1}}, {"padding_high", Axes{0, 1}}},
       "dilation"},
      {"convolution", {in({2, 4, 4, 6}), in({3, 3, 3, 4})},
       {{"groups", int64_t{2}}, {"padding_low", Axes{1, 1}}, {"padding_high", Axes{1, 1}}},
       "groups"},
      {"convolution", {in({1, 5, 5, 3}), in({3, 3, 1, 6})},
       {{"groups", int64_t{3}}, {"strides", Axes{2, 2}}, {"padding_low", Axes{1, 1}},
        {"padding_high", Axes{1, 1}}},
       "depthwise_strided"},
      {"convolution", {in({1, 3, 3, 2}), in({3, 3, 2, 2})},
       {{"lhs_dilation", Axes{2, 2}}, {"padding_low", Axes{2, 1}}, {"padding_high", Axes{2, 2}}},
       "lhs_dilation"},
      // Stride 3 over 6 leaves input rows and columns that no window reads.
      {"convolution", {in({2, 6, 6, 1}), in({2, 2, 1, 2})}, {{"strides", Axes{3, 3}}}, "uncovered"},
      {"convolution", {in({2, 9, 3}), in({3, 3, 2})},
       {{"strides", Axes{3}}, {"dilation", Axes{2}}, {"padding_low", Axes{2}},
        {"padding_high", Axes{1}}},
       "1d"},
      {"convolution", {in({1, 3, 4, 3, 2}), in({2, 2, 2, 2, 2})},
       {{"strides", Axes{1, 2, 1}}, {"padding_low", Axes{0, 1, 1}},
        {"padding_high", Axes{1, 0, 0}}},
       "3d"},
      {"convolution_input_grad", {in({2, 3, 3, 4}), in({3, 3, 3, 4})},
       {{"input_spatial", Axes{5, 5}}}},
      {"convolution_input_grad", {in({1, 4, 2, 4}), in({3, 2, 1, 4})},
       {{"input_spatial", Axes{6, 5}}, {"strides", Axes{2, 2}}, {"padding_low", Axes{1, 0}},
        {"padding_high", Axes{2, 1}}, {"dilation", Axes{1, 2}}, {"groups", int64_t{2}}},
       "strided_grouped"},
      {"convolution_kernel_grad", {in({2, 5, 5, 3}), in({2, 3, 3, 4})},
       {{"kernel_spatial", Axes{3, 3}}}},
      {"convolution_kernel_grad", {in({1, 6, 5, 2}), in({1, 4, 2, 4})},
       {{"kernel_spatial", Axes{3, 2}}, {"strides", Axes{2, 2}}, {"padding_low", Axes{1, 0}},
        {"padding_high", Axes{2, 1}}, {"dilation", Axes{1, 2}}, {"groups", int64_t{2}}},
       "strided_grouped"},
      {"reduce_window_max", {in({2, 4, 4, 3})},
       {{"window", Axes{1, 2, 2, 1}}, {"strides", Axes{1, 2, 2, 1}}}, "pool_2x2"},
      {"reduce_window_max", {in({1, 5, 5, 2})},
       {{"window", Axes{1, 3, 3, 1}}, {"strides", Axes{1, 2, 2, 1}},
        {"padding_low", Axes{0, 1, 1, 0}}, {"padding_high", Axes{0, 1, 1, 0}}},
       "overlapping_padded"},
      {"reduce_window_max", {in({4, 5})}, {{"window", Axes{2, 3}}, {"strides", Axes{1, 2}}},
       "every_dimension"},
      {"reduce_window_max_grad", {in({2, 4, 4, 3}), in({2, 2, 2, 3})},
       {{"window", Axes{1, 2, 2, 1}}, {"strides", Axes{1, 2, 2, 1}}}},
      {"reduce_window_max_grad", {in({5, 4}), in({3, 3})},
       {{"window", Axes{3, 2}}, {"strides", Axes{2, 1}}, {"padding_low", Axes{1, 0}},
        {"padding_high", Axes{1, 0}}},
       "overlapping"},
      {"reduce_window_max_select", {in({2, 4, 4, 3}), in({2, 4, 4, 3})},
       {{"window", Axes{1, 3, 3, 1}}, {"strides", Axes{1, 1, 1, 1}},
        {"padding_low", Axes{0, 1, 1, 0}}, {"padding_high", Axes{0, 1, 1, 0}}}},
      {"reduce_window_sum", {in({2, 4, 4, 3})},
       {{"window", Axes{1, 2, 2, 1}}, {"strides", Axes{1, 2, 2, 1}}}, "pool_2x2"},
      {"reduce_window_sum", {in({1, 5, 6, 2})},
       {{"window", Axes{1, 3, 2, 1}}, {"strides", Axes{1, 2, 3, 1}},
        {"padding_low", Axes{0, 2, 0, 0}}, {"padding_high", Axes{0, 1, 2, 0}}},
       "strided_padded"},
      {"reduce_window_sum", {in({4, 5})}, {{"window", Axes{2, 3}}, {"strides", Axes{1, 2}}},
       "every_dimension"},
      {"reduce_window_sum_grad", {in({2, 2, 2, 3})},
       {{"operand_shape", Axes{2, 4, 5, 3}}, {"window", Axes{1, 2, 2, 1}},
        {"strides", Axes{1, 2, 2, 1}}}},
      {"reduce_window_sum_grad", {in({1, 3, 3, 2})},
       {{"operand_shape", Axes{1, 5, 6, 2}}, {"window", Axes{1, 3, 2, 1}},
        {"strides", Axes{1, 2, 3, 1}}, {"padding_low", Axes{0, 2, 0, 0}},
        {"padding_high", Axes{0, 1, 2, 0}}},
       "strided_padded"},
      // More indices than rows: some rows are taken (or scattered to) several times.
      {"gather", {in({4, 3}), indices({6}, 4)}},
      {"gather", {in({2, 5, 3}), indices({2, 3}, 5)}, {{"axis", int64_t{1}}}, "axis_1_2d_indices"},
      {"gather", {in({3, 4}), indices({5}, 4)}, {{"axis", int64_t{-1}}}, "negative_axis"},
      {"scatter_add", {in({4, 3}), indices({6}, 4), in({6, 3})}},
      {"scatter_add", {in({2, 5, 3}), indices({2, 3}, 5), in({2, 2, 3, 3})},
       {{"axis", int64_t{1}}}, "axis_1_2d_indices"},
      // clang-format on
      // ---- layout (ops/layout.cc)
      {"broadcast_in_dim", {in({3})}, {{"shape", Shape{2, 3}}, {"dims", Axes{1}}}},
      {"broadcast_in_dim",
       {in({2, 1})},
       {{"shape", Shape{2, 4, 3}}, {"dims", Axes{0, 2}}},
       "stretch"},
      {"broadcast_in_dim",
       {in({3, 2})},
       {{"shape", Shape{2, 4, 3}}, {"dims", Axes{2, 0}}},
       "permuted"},
      {"broadcast_in_dim", {in({})}, {{"shape", Shape{2, 3}}, {"dims", Axes{}}}, "scalar"},
      {"broadcast_in_dim", {in({3})}, {{"shape", Shape{2, 3}}, {"dims", Axes{-1}}}, "negative"},
      {"broadcast_like", {in({3, 1}), in({2, 3, 4})}, {{"dims", Axes{1, 2}}}},
      {"reshape", {in({2, 3})}, {{"shape", Shape{3, 2}}}},
      {"reshape", {in({2, 3, 1})}, {{"shape", Shape{-1}}}, "inferred"},
      {"reshape_like", {in({2, 3}), in({3, 1, 2})}},
      {"transpose", {in({2, 3, 4})}, {{"perm", Axes{2, 0, 1}}}},
      {"transpose", {in({2, 3, 4})}, {{"perm", Axes{-1, 0, -2}}}, "negative"},
      {"slice",
       {in({4, 5})},
       {{"start", Axes{1, 1}}, {"limit", Axes{3, 4}}, {"strides", Axes{1, 1}}}},
      {"slice",
       {in({5, 7})},
       {{"start", Axes{1, 0}}, {"limit", Axes{5, 7}}, {"strides", Axes{2, 3}}},
       "strided"},
      {"slice",
       {in({3, 4})},
       {{"start", Axes{1, 0}}, {"limit", Axes{1, 4}}, {"strides", Axes{1, 1}}},
       "empty"},
      {"slice",
       {in({3, 4})},
       {{"start", Axes{2, 1}}, {"limit", Axes{3, 4}}, {"strides", Axes{INT64_MAX, 1}}},
       "huge_stride"},
      {"concatenate", {in({2, 3}), in({2, 1}), in({2, 2})}, {{"axis", int64_t{1}}}},
      {"concatenate", {in({1, 3}), in({2, 3})}, {{"axis", int64_t{-2}}}, "negative_axis"},
      {"pad",
       {in({2, 3}), in({})},
       {{"low", Axes{1, 2}}, {"high", Axes{2, 0}}, {"interior", Axes{0, 0}}}},
      {"pad",
       {in({2, 3}), in({})},
       {{"low", Axes{1, 0}}, {"high", Axes{0, 2}}, {"interior", Axes{1, 2}}},
       "interior"},
      {"pad",
       {in({1, 0}), in({})},
       {{"low", Axes{0, 1}}, {"high", Axes{1, 0}}, {"interior", Axes{3, 2}}},
       "sizes_one_and_zero"},
      {"reverse", {in({2, 3, 4})}, {{"axes", Axes{0, 2}}}},
      {"reverse", {in({2, 3})}, {{"axes", Axes{-1}}}, "negative"},
      // ---- reductions (ops/reduce.cc): random values make ties unlikely for max and min
      {"reduce_sum", {in({2, 3, 4})}, {{"axes", Axes{0, 2}}}},
      {"reduce_sum", {in({2, 3})}, {{"axes", Axes{0, 1}}}, "all"},
      {"reduce_sum", {in({2, 3})}, {{"axes", Axes{}}}, "none"},
      {"reduce_sum", {in({})}, {{"axes", Axes{}}}, "scalar"},
      {"reduce_prod", {in({2, 3, 4}, away_from_zero(0.5, 1.5))}, {{"axes", Axes{1}}}},
      {"reduce_prod", {in({2, 3})}, {{"axes", Axes{0, 1}}}, "all"},
      {"reduce_max", {in({3, 4})}, {{"axes", Axes{1}}}},
      {"reduce_max", {in({2, 3, 2})}, {{"axes", Axes{0, 2}}}, "two_axes"},
      {"reduce_min", {in({3, 4})}, {{"axes", Axes{0}}}},
      {"reduce_min", {in({2, 3})}, {{"axes", Axes{0, 1}}}, "all"},
      // ---- linear algebra (ops/linalg.cc)
      {"dot", {in({2, 3}), in({3, 4})}, {{"lhs_contract", Axes{1}}, {"rhs_contract", Axes{0}}}},
      {"dot",
       {in({2, 3, 4}), in({4, 5})},
       {{"lhs_contract", Axes{2}}, {"rhs_contract", Axes{0}}},
       "rank3_by_matrix"},
      {"dot",
       {in({2, 3, 4}), in({2, 4, 5})},
       {{"lhs_contract", Axes{2}},
        {"rhs_contract", Axes{1}},
        {"lhs_batch", Axes{0}},
        {"rhs_batch", Axes{0}}},
       "batched"},
      {"dot",
       {in({4, 3}), in({5, 4})},
       {{"lhs_contract", Axes{0}}, {"rhs_contract", Axes{1}}},
       "transposed"},
      {"dot",
       {in({3, 2, 4, 5}), in({5, 2, 3, 6})},
       {{"lhs_contract", Axes{0, 3}},
        {"rhs_contract", Axes{2, 0}},
        {"lhs_batch", Axes{1}},
        {"rhs_batch", Axes{1}}},
       "general"},
      {"dot",
       {in({4}), in({4})},
       {{"lhs_contract", Axes{0}}, {"rhs_contract", Axes{0}}},
       "vectors"},
      {"dot", {in({2}), in({3})}, {{"lhs_contract", Axes{}}, {"rhs_contract", Axes{}}}, "outer"},
      // ---- control flow (ops/control_flow.cc; gradients in src/api/function/control_flow.cc)
      {"cond", {pred({}), in({3}), in({3})}, {}, "", 1e-6, 1e-6, cond_case_attrs},
      {"scan", {in({2, 3}), in({4, 2, 3}), in({3, 3})}, {}, "", 1e-6, 1e-6,
       [](const std::vector<TensorType>& t) { return scan_case_attrs(t, false, false); }},
      {"scan", {in({2, 3}), in({4, 2, 3}), in({3, 3})}, {}, "reverse_remat", 1e-6, 1e-6,
       [](const std::vector<TensorType>& t) { return scan_case_attrs(t, true, true); }},
      {"while", {in({2}), in({2})}, {}, "", 1e-6, 1e-6, while_case_attrs},
  };
  return kCases;
}

inline std::string case_name(const OpCase& c) {
  return c.label.empty() ? c.op : c.op + "_" + c.label;
}
inline void PrintTo(const OpCase& c, std::ostream* os) { *os << case_name(c); }

inline Tensor random_input(const Input& input, std::mt19937_64& rng) {
  int64_t n = num_elements(input.shape);
  if (input.dtype == bool_) {
    std::vector<bool> v(n);
    for (int64_t i = 0; i < n; ++i) v[i] = std::bernoulli_distribution(0.5)(rng);
    return Tensor::from_vector(v, input.shape);
  }
  const auto& intervals = input.domain.intervals;
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) {
    auto [lo, hi] = intervals[std::uniform_int_distribution<size_t>(0, intervals.size() - 1)(rng)];
    v[i] = std::uniform_real_distribution<double>(lo, hi)(rng);
  }
  return convert(Tensor::from_vector(v, input.shape), input.dtype);
}

// Cases of the ops without a gradient (compares, logical ops, arg-reductions, iota, random ops,
// casts) and of dtypes the gradient table does not use (integers, bools): op_modes_test runs
// them with the differentiable ones.
inline const std::vector<OpCase>& non_differentiable_cases() {
  auto ints = [](Shape shape, int64_t bound = 7) {  // i32 in [-3, 3]: ties are common
    return Input{std::move(shape), range(-bound / 2, bound - bound / 2), i32};
  };
  auto seed = [](int64_t value) { return Input{{}, range(value, value + 0.5), i64}; };
  static const std::vector<OpCase> kCases = {
      // ---- compares and logical ops (ops/elementwise.cc)
      {"eq", {ints({2, 3}), ints({2, 3})}},
      {"ne", {in({2, 3}), in({3})}, {}, "broadcast"},
      {"lt", {in({2, 3}), in({2, 3})}},
      {"le", {ints({2, 1}), ints({1, 3})}, {}, "i32_broadcast"},
      {"gt", {in({}), in({2, 3})}, {}, "scalar"},
      {"ge", {ints({2, 3}), ints({2, 3})}},
      {"eq", {pred({2, 3}), pred({2, 3})}, {}, "bool"},
      {"logical_not", {pred({2, 3})}},
      {"logical_and", {pred({2, 3}), pred({3})}},
      {"logical_or", {pred({2, 1}), pred({1, 3})}},
      {"is_finite", {in({2, 3})}},
      {"stop_gradient", {in({2, 3})}},
      // ---- integer elementwise (every numeric op the emitter supports for i32)
      {"neg", {ints({2, 3})}, {}, "i32"},
      {"abs", {ints({2, 3})}, {}, "i32"},
      {"sign", {ints({2, 3})}, {}, "i32"},
      {"add", {ints({2, 3}), ints({3})}, {}, "i32"},
      {"sub", {ints({2, 3}), ints({2, 3})}, {}, "i32"},
      {"mul", {ints({2, 3}), ints({2, 1})}, {}, "i32"},
      {"div", {ints({3, 4}), ints({3, 4})}, {}, "i32_with_zero_divisors"},
      {"rem", {ints({3, 4}), ints({3, 4})}, {}, "i32_with_zero_divisors"},
      {"max", {ints({2, 3}), ints({2, 3})}, {}, "i32"},
      {"min", {ints({2, 3}), ints({})}, {}, "i32"},
      {"clamp", {ints({2, 3}), ints({}, 3), ints({3}, 3)}, {}, "i32"},
      {"select", {pred({2, 3}), ints({2, 3}), ints({3})}, {}, "i32"},
      {"select", {pred({2, 3}), pred({2, 3}), pred({})}, {}, "bool"},
      // ---- casts (ops/elementwise.cc)
      {"convert", {in({2, 3}, range(-300, 300))}, {{"dtype", i32}}, "f64_to_i32"},
      {"convert",
       {in({2, 3}, away_from_zero(3e9, 1e12))},
       {{"dtype", i32}},
       "f64_to_i32_saturating"},
      {"convert", {in({2, 3})}, {{"dtype", bool_}}, "f64_to_bool"},
      {"convert", {ints({2, 3})}, {{"dtype", f32}}, "i32_to_f32"},
      {"convert", {ints({2, 3})}, {{"dtype", i64}}, "i32_to_i64"},
      {"convert", {ints({2, 3})}, {{"dtype", bool_}}, "i32_to_bool"},
      {"convert", {pred({2, 3})}, {{"dtype", f32}}, "bool_to_f32"},
      {"convert", {pred({2, 3})}, {{"dtype", i32}}, "bool_to_i32"},
      {"convert", {indices({2, 3}, 1000)}, {{"dtype", i32}}, "i64_to_i32"},
      // ---- reductions (ops/reduce.cc)
      {"reduce_sum", {ints({2, 3, 4})}, {{"axes", Axes{0, 2}}}, "i32"},
      {"reduce_max", {ints({3, 4})}, {{"axes", Axes{1}}}, "i32"},
      {"reduce_any", {pred({3, 4})}, {{"axes", Axes{1}}}},
      {"reduce_all", {pred({2, 3, 2})}, {{"axes", Axes{0, 2}}}},
      {"argmax", {in({3, 4})}, {{"axis", int64_t{1}}}},
      {"argmax", {ints({3, 4})}, {{"axis", int64_t{0}}}, "i32_ties"},
      {"argmin", {in({2, 3, 4})}, {{"axis", int64_t{2}}}},
      // ---- creation and random numbers (ops/creation.cc, ops/random.cc): the seed is an input,
      // fed the same in both modes
      {"iota", {}, {{"shape", Shape{2, 3}}, {"dimension", int64_t{1}}, {"dtype", f32}}},
      {"iota", {}, {{"shape", Shape{4, 2}}, {"dimension", int64_t{0}}, {"dtype", i32}}, "i32"},
      {"random_uniform", {seed(7)}, {{"shape", Shape{3, 5}}, {"low", -2.0}, {"high", 3.0}}},
      {"random_uniform", {seed(11), in({2, 3})}, {{"dtype", f64}}, "shape_like_f64"},
      {"random_normal", {seed(7)}, {{"shape", Shape{4, 3}}, {"mean", 1.0}, {"stddev", 2.0}}},
      {"random_bernoulli", {seed(3)}, {{"shape", Shape{4, 5}}, {"p", 0.3}}},
      {"random_bernoulli", {seed(5)}, {{"shape", Shape{4, 5}}, {"p", 0.6}, {"dtype", f32}}, "f32"},
      // ---- integer layout and linear algebra
      {"transpose", {ints({2, 3, 4})}, {{"perm", Axes{1, 2, 0}}}, "i32"},
      {"pad",
       {ints({2, 3}), ints({})},
       {{"low", Axes{1, 0}}, {"high", Axes{0, 1}}, {"interior", Axes{1, 0}}},
       "i32"},
      {"dot",
       {ints({2, 3}), ints({3, 4})},
       {{"lhs_contract", Axes{1}}, {"rhs_contract", Axes{0}}},
       "i32"},
  };
  return kCases;
}

// Cases of ops the compiler's passes create (registered by compiler/, present only once that
// pass is built in): all_cases() holds those whose op is registered.
inline const std::vector<OpCase>& compiler_op_cases() {
  auto dims = [](Axes lc, Axes rc, const char* activation) {
    return Attrs{{"lhs_contract", std::move(lc)},
                 {"rhs_contract", std::move(rc)},
                 {"activation", std::string(activation)}};
  };
  static const std::vector<OpCase> kCases = {
      // fused_dot (compiler/cpu/fused_dot.cc): dot + optional bias + activation in one kernel
      {"fused_dot", {in({3, 4}), in({4, 5})}, dims({1}, {0}, "none")},
      {"fused_dot", {in({3, 4}), in({4, 5}), in({5})}, dims({1}, {0}, "relu"), "bias_relu"},
      {"fused_dot", {in({2, 4}), in({4, 3}), in({2, 3})}, dims({1}, {0}, "tanh"), "full_bias_tanh"},
      {"fused_dot",
       {in({4, 3}), in({4, 2}), in({})},
       dims({0}, {0}, "logistic"),
       "transposed_scalar_bias_logistic"},
      // fused_conv (compiler/cpu/fused_conv.cc): convolution + optional bias + activation
      {"fused_conv", {in({2, 5, 5, 3}), in({3, 3, 3, 4})}, {{"activation", std::string("none")}}},
      {"fused_conv",
       {in({2, 6, 5, 4}), in({2, 3, 2, 6}), in({6})},
       {{"strides", Axes{2, 1}},
        {"padding_low", Axes{1, 0}},
        {"padding_high", Axes{0, 1}},
        {"groups", int64_t{2}},
        {"activation", std::string("relu")}},
       "strided_grouped_bias_relu"},
      {"fused_conv",
       {in({2, 9, 3}), in({3, 3, 2}), in({1, 2})},
       {{"dilation", Axes{2}}, {"activation", std::string("tanh")}},
       "1d_dilated_bias_tanh"},
      {"fused_conv",
       {in({1, 3, 4, 3, 2}), in({2, 2, 2, 2, 2}), in({})},
       {{"activation", std::string("logistic")}},
       "3d_scalar_bias_logistic"},
      // fused_conv_pool: fused_conv and its max pool over disjoint windows (a row left over)
      {"fused_conv_pool",
       {in({2, 7, 6, 3}), in({2, 2, 3, 4}), in({4})},
       {{"activation", std::string("relu")}, {"pool", Axes{2, 2}}},
       "bias_relu_2x2"},
      {"fused_conv_pool",
       {in({1, 8, 9, 2}), in({3, 2, 2, 3})},
       {{"strides", Axes{1, 2}}, {"activation", std::string("none")}, {"pool", Axes{3, 2}}},
       "strided_3x2"},
      // fused_conv_pool with taps (output 2), and the kernel and bias gradients read from them
      {"fused_conv_pool",
       {in({2, 7, 6, 3}), in({2, 2, 3, 4}), in({4})},
       {{"activation", std::string("relu")}, {"pool", Axes{2, 2}}, {"taps", true}},
       "bias_relu_2x2_taps"},
      // ... without its convolution output (pooled in registers by the direct kernels, f32)
      {"fused_conv_pool",
       {in({2, 7, 6, 3}), in({2, 2, 3, 4}), in({4})},
       {{"activation", std::string("relu")}, {"pool", Axes{2, 2}}, {"taps", true},
        {"conv_output", false}},
       "bias_relu_2x2_taps_pooled_only"},
      {"conv_pool_kernel_grad",
       {in({2, 7, 6, 3}), Input{{2, 3, 2, 4}, range(0, 4), u8}, in({2, 3, 2, 4})},
       {{"kernel_spatial", Axes{2, 2}}, {"pool", Axes{2, 2}}},
       "2x2_pool_2x2_kernel"},
      {"conv_pool_kernel_grad",
       {in({1, 9, 8, 2}), Input{{1, 2, 2, 3}, range(0, 6), u8}, in({1, 2, 2, 3})},
       {{"kernel_spatial", Axes{3, 2}}, {"pool", Axes{2, 3}}, {"strides", Axes{2, 1}},
        {"padding_low", Axes{1, 0}}, {"padding_high", Axes{0, 1}}, {"dilation", Axes{1, 2}},
        {"relu_mask", true}},
       "strided_padded_dilated_2x3_pool"},
  };
  return kCases;
}

// Every case: the gradient table's, then the others.
inline const std::vector<OpCase>& all_cases() {
  static const std::vector<OpCase> kAll = [] {
    std::vector<OpCase> all = differentiable_cases();
    for (const OpCase& c : non_differentiable_cases()) all.push_back(c);
    for (const OpCase& c : compiler_op_cases())
      if (OpRegistry::global().contains(c.op)) all.push_back(c);
    return all;
  }();
  return kAll;
}

// Ops registered by test files (custom-op fixtures: *_test.cc, or any file under tests/) are
// not part of the library.
inline bool registered_by_a_test(const OpDef& def) {
  std::string file = def.source.substr(0, def.source.rfind(':'));
  return (file.size() >= 8 && file.compare(file.size() - 8, 8, "_test.cc") == 0) ||
         file.rfind("tests/", 0) == 0 || file.find("/tests/") != std::string::npos;
}

}  // namespace kiln::op_cases
