// Layout primitives (broadcast_in_dim, reshape, transpose, slice, concatenate, pad, reverse,
// reshape_like, broadcast_like) and the functions built on them (broadcast_to, flatten,
// expand_dims, squeeze).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <numeric>

#include "kiln/kiln.h"

namespace kiln {
namespace {

using testing::AllOf;
using testing::HasSubstr;

template <class T>
std::vector<T> values(const Tensor& t) {
  auto d = t.data<T>();
  return {d.begin(), d.end()};
}

// 0, 1, 2, ... in `shape` as T.
template <class T>
Tensor counting(Shape shape) {
  std::vector<T> v(num_elements(shape));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<T>(i);
  return Tensor::from_vector(v, shape);
}

// The message of the kiln::Error thrown by f.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

// ---- broadcast_in_dim / broadcast_to ---------------------------------------------------------

TEST(BroadcastInDim, RepeatsAlongNewDimensions) {
  Tensor x = Tensor::from_list<float>({1, 2, 3});
  Tensor y = broadcast_in_dim(x, {2, 3}, {1});
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
  EXPECT_EQ(values<float>(y), (std::vector<float>{1, 2, 3, 1, 2, 3}));
  Tensor z = broadcast_in_dim(x, {3, 2}, {0});
  EXPECT_EQ(values<float>(z), (std::vector<float>{1, 1, 2, 2, 3, 3}));
}

TEST(BroadcastInDim, ExpandsSizeOneDimensionsAndNegativeDims) {
  Tensor x = Tensor::from_list<int32_t>({7, 8}, {2, 1});
  Tensor y = broadcast_in_dim(x, {2, 3}, {0, -1});
  EXPECT_EQ(values<int32_t>(y), (std::vector<int32_t>{7, 7, 7, 8, 8, 8}));
}

TEST(BroadcastInDim, ScalarFillsTheShape) {
  Tensor y = broadcast_in_dim(Tensor::scalar<int8_t>(-4), {2, 2}, {});
  EXPECT_EQ(y.dtype(), i8);
  EXPECT_EQ(values<int8_t>(y), (std::vector<int8_t>{-4, -4, -4, -4}));
}

TEST(BroadcastInDim, UnsortedDimsTranspose) {
  // Operand dim 0 (size 2) -> output dim 1, operand dim 1 (size 3) -> output dim 0.
  Tensor x = counting<double>({2, 3});
  Tensor y = broadcast_in_dim(x, {3, 2}, {1, 0});
  EXPECT_EQ(values<double>(y), (std::vector<double>{0, 3, 1, 4, 2, 5}));
}

TEST(BroadcastInDim, LargeBias) {
  // A bias row repeated over many rows: out[i][j] = j.
  Tensor b = counting<float>({1000});
  Tensor y = broadcast_in_dim(b, {300, 1000}, {1});
  auto d = y.data<float>();
  for (int64_t i = 0; i < 300; ++i)
    for (int64_t j = 0; j < 1000; j += 97) ASSERT_EQ(d[i * 1000 + j], static_cast<float>(j));
  Tensor col = counting<int64_t>({500, 1});
  Tensor z = broadcast_in_dim(col, {500, 130}, {0, 1});
  auto e = z.data<int64_t>();
  for (int64_t i = 0; i < 500; ++i) ASSERT_EQ(e[i * 130 + 129], i);
}

TEST(BroadcastInDim, MismatchedSizeThrowsNamingShapes) {
  Tensor x = Tensor::from_list<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  std::string msg = error_of([&] { broadcast_in_dim(x, {4, 5}, {0, 1}); });
  EXPECT_THAT(msg, AllOf(HasSubstr("broadcast_in_dim"), HasSubstr("[2,3]"), HasSubstr("[4,5]")));
  EXPECT_THAT(error_of([&] {
                broadcast_in_dim(x, {2, 3}, {0});
              }),
              AllOf(HasSubstr("broadcast_in_dim"), HasSubstr("rank 2")));
  EXPECT_THAT(error_of([&] { broadcast_in_dim(x, {2, 3}, {1, 1}); }), HasSubstr("repeats"));
}

TEST(BroadcastTo, FollowsNumpyRules) {
  Tensor x = Tensor::from_list<float>({1, 2}, {2, 1});
  Tensor y = broadcast_to(x, {2, 2, 3});
  EXPECT_EQ(y.shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(values<float>(y), (std::vector<float>{1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2}));
  Tensor s = broadcast_to(Tensor::scalar(true), {3});
  EXPECT_EQ(s.to_vector<int>(), (std::vector<int>{1, 1, 1}));
}

TEST(BroadcastTo, IncompatibleShapesThrow) {
  Tensor x = Tensor::from_list<float>({1, 2, 3});
  EXPECT_THAT(error_of([&] {
                broadcast_to(x, {2, 4});
              }),
              AllOf(HasSubstr("broadcast_to"), HasSubstr("[3]"), HasSubstr("[2,4]")));
  EXPECT_THAT(error_of([&] {
                broadcast_to(counting<float>({2, 3}), {3});
              }),
              AllOf(HasSubstr("broadcast_to"), HasSubstr("[2,3]")));
}

// ---- reshape ----------------------------------------------------------------------------

TEST(Reshape, KeepsOrderAndSharesStorage) {
  Tensor x = counting<int32_t>({2, 3});
  Tensor y = reshape(x, {3, 2});
  EXPECT_EQ(y.shape(), (Shape{3, 2}));
  EXPECT_EQ(values<int32_t>(y), (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(y.raw_data(), x.raw_data());  // no copy
  // Value semantics still hold: writing to the view copies first.
  y.mutable_data<int32_t>()[0] = 42;
  EXPECT_EQ(x.data<int32_t>()[0], 0);
}

TEST(Reshape, InfersOneDimension) {
  Tensor x = counting<float>({2, 3, 4});
  EXPECT_EQ(reshape(x, {-1, 4}).shape(), (Shape{6, 4}));
  EXPECT_EQ(reshape(x, {2, -1}).shape(), (Shape{2, 12}));
  EXPECT_EQ(reshape(Tensor::from_list<float>({5}), {}).shape(), Shape{});
  EXPECT_EQ(reshape(Tensor::scalar(5.0f), {-1}).shape(), (Shape{1}));
  EXPECT_EQ(reshape(counting<float>({0, 3}), {3, 0}).shape(), (Shape{3, 0}));
}

TEST(Reshape, DifferentElementCountThrows) {
  Tensor x = counting<float>({2, 3});
  std::string msg = error_of([&] { reshape(x, {4, 2}); });
  EXPECT_THAT(msg, HasSubstr("reshape: cannot reshape [2,3] (6 elements) to [4,2] (8 elements)"));
  EXPECT_THAT(error_of([&] {
                reshape(x, {4, -1});
              }),
              AllOf(HasSubstr("reshape"), HasSubstr("[2,3]"), HasSubstr("[4,-1]")));
  EXPECT_THAT(error_of([&] { reshape(x, {-1, -1}); }), HasSubstr("more than one -1"));
  EXPECT_THAT(error_of([&] { reshape(x, {-2, -3}); }), HasSubstr("negative"));
}

// ---- transpose --------------------------------------------------------------------------

TEST(Transpose, SwapsMatrixDimensions) {
  Tensor x = counting<float>({2, 3});  // [[0,1,2],[3,4,5]]
  Tensor y = transpose(x);
  EXPECT_EQ(y.shape(), (Shape{3, 2}));
  EXPECT_EQ(values<float>(y), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(values<float>(transpose(x, {-1, 0})), (std::vector<float>{0, 3, 1, 4, 2, 5}));
}

TEST(Transpose, ThreeDimensionsSeveralDTypes) {
  // x[i][j][k] = 6i + 3j + k for shape [2,2,3].
  Tensor x = counting<int64_t>({2, 2, 3});
  Tensor y = transpose(x, {2, 0, 1});  // y[k][i][j] = x[i][j][k]
  EXPECT_EQ(y.shape(), (Shape{3, 2, 2}));
  EXPECT_EQ(values<int64_t>(y), (std::vector<int64_t>{0, 3, 6, 9, 1, 4, 7, 10, 2, 5, 8, 11}));
  Tensor h = transpose(counting<half>({2, 2, 3}), {1, 0, 2});  // swaps the outer two
  EXPECT_EQ(h.to_vector<float>(), (std::vector<float>{0, 1, 2, 6, 7, 8, 3, 4, 5, 9, 10, 11}));
  Tensor b = transpose(Tensor::from_list<bool>({true, false, false, false}, {2, 2}));
  EXPECT_EQ(b.to_vector<int>(), (std::vector<int>{1, 0, 0, 0}));
  Tensor s = transpose(Tensor::scalar(3.0));
  EXPECT_EQ(s.item<double>(), 3.0);
}

TEST(Transpose, LargeMatricesUseTiles) {
  for (DType dtype : {f32, i8, f64}) {
    Tensor x = counting<int64_t>({300, 217}).to(dtype);
    Tensor y = transpose(x).to(i64);
    ASSERT_EQ(y.shape(), (Shape{217, 300}));
    auto d = y.data<int64_t>();
    for (int64_t i = 0; i < 217; ++i) {
      for (int64_t j = 0; j < 300; ++j) {
        int64_t want = j * 217 + i;
        if (dtype == i8) want = static_cast<int8_t>(want);
        ASSERT_EQ(d[i * 300 + j], want) << dtype_name(dtype) << " at " << i << "," << j;
      }
    }
  }
}

TEST(Transpose, LargeFourDimensional) {
  // y = transpose(x, {2,0,3,1}): y[c][a][d][b] = x[a][b][c][d].
  const Shape s{40, 3, 50, 7};
  Tensor y = transpose(counting<int32_t>(s), {2, 0, 3, 1});
  ASSERT_EQ(y.shape(), (Shape{50, 40, 7, 3}));
  auto d = y.data<int32_t>();
  int64_t i = 0;
  for (int64_t c = 0; c < 50; ++c)
    for (int64_t a = 0; a < 40; ++a)
      for (int64_t dd = 0; dd < 7; ++dd)
        for (int64_t b = 0; b < 3; ++b, ++i) ASSERT_EQ(d[i], ((a * 3 + b) * 50 + c) * 7 + dd);
}

TEST(Transpose, InvalidPermutationThrows) {
  Tensor x = counting<float>({2, 3});
  for (Axes perm : {Axes{0, 0}, Axes{0, 1, 2}, Axes{0, 5}, Axes{1}}) {
    EXPECT_THAT(error_of([&] { transpose(x, perm); }),
                AllOf(HasSubstr("transpose"), HasSubstr("not a permutation"), HasSubstr("[2,3]")));
  }
}

// ---- slice ------------------------------------------------------------------------------

TEST(Slice, TakesARectangle) {
  Tensor x = counting<float>({3, 4});
  Tensor y = slice(x, {1, 1}, {3, 4});
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
  EXPECT_EQ(values<float>(y), (std::vector<float>{5, 6, 7, 9, 10, 11}));
}

TEST(Slice, WithStridesAndEmptyRanges) {
  Tensor x = counting<int32_t>({3, 5});
  Tensor y = slice(x, {0, 1}, {3, 5}, {2, 3});
  EXPECT_EQ(y.shape(), (Shape{2, 2}));
  EXPECT_EQ(values<int32_t>(y), (std::vector<int32_t>{1, 4, 11, 14}));
  EXPECT_EQ(slice(x, {1, 2}, {1, 5}).shape(), (Shape{0, 3}));
  EXPECT_EQ(slice(x, {0, 0}, {3, 5}, {INT64_MAX, 1}).shape(), (Shape{1, 5}));
  EXPECT_EQ(slice(Tensor::scalar<int8_t>(3), {}, {}).item<int>(), 3);
}

TEST(Slice, LargeStrided) {
  // x[i][j] = 400 i + j; y[a][b] = x[1 + 3a][3 + 7b].
  Tensor y = slice(counting<int64_t>({500, 400}), {1, 3}, {500, 400}, {3, 7});
  ASSERT_EQ(y.shape(), (Shape{167, 57}));
  auto d = y.data<int64_t>();
  for (int64_t a = 0; a < 167; ++a)
    for (int64_t b = 0; b < 57; ++b) ASSERT_EQ(d[a * 57 + b], (1 + 3 * a) * 400 + 3 + 7 * b);
}

TEST(Slice, WholeTensorSharesStorage) {
  Tensor x = counting<float>({4, 4});
  EXPECT_EQ(slice(x, {0, 0}, {4, 4}).raw_data(), x.raw_data());
}

// A limit of -1 takes the whole dimension, also one of unknown size while recording: the
// result's shape follows the input's when the graph runs, and the gradient pads only the others.
TEST(Slice, WholeDimensionLimit) {
  Tensor x = counting<float>({3, 4});
  Tensor y = slice(x, {0, 1}, {kUnknownDim, 3});
  EXPECT_EQ(y.shape(), (Shape{3, 2}));
  EXPECT_EQ(values<float>(y), (std::vector<float>{1, 2, 5, 6, 9, 10}));
  Graph g;
  Tensor p, grad;
  {
    auto guard = g.as_default();
    p = g.placeholder(f32, {kUnknownDim, 4}, "p");
    Tensor z = slice(p, {0, 1}, {kUnknownDim, 3});
    EXPECT_EQ(z.shape(), (Shape{kUnknownDim, 2}));
    grad = gradients(sum(z * z), {p})[0];
  }
  const Tensor dx = g.run({{p, x}}, grad);
  EXPECT_EQ(values<float>(dx), (std::vector<float>{0, 2, 4, 0, 0, 10, 12, 0, 0, 18, 20, 0}));
  EXPECT_THAT(error_of([&] { slice(x, {1, 0}, {kUnknownDim, 4}); }),
              HasSubstr("a whole dimension (limit -1) needs start 0 and stride 1"));
}

TEST(Slice, OutOfBoundsThrows) {
  Tensor x = counting<float>({4, 5});
  EXPECT_THAT(error_of([&] {
                slice(x, {0, 0}, {4, 6});
              }),
              AllOf(HasSubstr("slice"), HasSubstr("limit 6"), HasSubstr("[4,5]")));
  EXPECT_THAT(error_of([&] { slice(x, {3, 0}, {2, 5}); }), HasSubstr("greater than limit"));
  EXPECT_THAT(error_of([&] { slice(x, {-1, 0}, {2, 5}); }), HasSubstr("negative"));
  EXPECT_THAT(error_of([&] { slice(x, {0, 0}, {2, 5}, {1, 0}); }), HasSubstr("not positive"));
  EXPECT_THAT(error_of([&] { slice(x, {0}, {2}); }),
              AllOf(HasSubstr("slice"), HasSubstr("rank 2")));
}

// ---- concatenate ------------------------------------------------------------------------

TEST(Concatenate, AlongEachAxis) {
  Tensor a = counting<float>({2, 2});  // [[0,1],[2,3]]
  Tensor b = Tensor::from_list<float>({9, 8, 7, 6, 5, 4}, {3, 2});
  Tensor rows = concatenate({a, b}, 0);
  EXPECT_EQ(rows.shape(), (Shape{5, 2}));
  EXPECT_EQ(values<float>(rows), (std::vector<float>{0, 1, 2, 3, 9, 8, 7, 6, 5, 4}));
  Tensor c = Tensor::from_list<float>({9, 8}, {2, 1});
  Tensor cols = concatenate({a, c, a}, -1);
  EXPECT_EQ(cols.shape(), (Shape{2, 5}));
  EXPECT_EQ(values<float>(cols), (std::vector<float>{0, 1, 9, 0, 1, 2, 3, 8, 2, 3}));
}

TEST(Concatenate, ZeroSizedInputsAndPromotion) {
  Tensor a = Tensor::from_list<int32_t>({1, 2});
  Tensor e = Tensor::empty(i32, {0});
  Tensor f = Tensor::from_list<float>({0.5f});
  Tensor y = concatenate({a, e, f}, 0);
  EXPECT_EQ(y.dtype(), f32);
  EXPECT_EQ(values<float>(y), (std::vector<float>{1, 2, 0.5f}));
}

TEST(Concatenate, LargeAlongInnerAxis) {
  Tensor a = counting<int32_t>({200, 300});
  Tensor b = counting<int32_t>({200, 100});
  Tensor y = concatenate({a, b}, 1);
  auto d = y.data<int32_t>();
  for (int64_t i = 0; i < 200; ++i) {
    ASSERT_EQ(d[i * 400 + 299], i * 300 + 299);
    ASSERT_EQ(d[i * 400 + 300], i * 100);
  }
}

TEST(Concatenate, BadAxisOrShapesThrow) {
  Tensor a = counting<float>({2, 3});
  EXPECT_THAT(error_of([&] {
                concatenate({a, a}, 2);
              }),
              AllOf(HasSubstr("concatenate"), HasSubstr("axis 2"), HasSubstr("[2,3]")));
  EXPECT_THAT(error_of([&] {
                concatenate({a, counting<float>({2, 4})}, 0);
              }),
              AllOf(HasSubstr("concatenate"), HasSubstr("[2,3]"), HasSubstr("[2,4]")));
  EXPECT_THAT(error_of([&] {
                concatenate({a, counting<float>({6})}, 0);
              }),
              HasSubstr("ranks differ"));
  EXPECT_THAT(error_of([&] { concatenate({Tensor::scalar(1.0f)}, 0); }), HasSubstr("scalars"));
  EXPECT_THAT(error_of([&] { concatenate({}, 0); }), HasSubstr("concatenate"));
  // The primitive itself requires equal dtypes.
  EXPECT_THAT(error_of([&] {
                call_op("concatenate", {a, a.to(f64)}, {{"axis", int64_t{0}}});
              }),
              AllOf(HasSubstr("concatenate"), HasSubstr("dtype mismatch")));
}

// ---- pad --------------------------------------------------------------------------------

TEST(Pad, LowHighAndInterior) {
  Tensor x = Tensor::from_list<float>({1, 2, 3});
  EXPECT_EQ(values<float>(pad(x, {1}, {2}, 9)), (std::vector<float>{9, 1, 2, 3, 9, 9}));
  EXPECT_EQ(values<float>(pad(x, {0}, {0}, 0, {1})), (std::vector<float>{1, 0, 2, 0, 3}));
  Tensor m = Tensor::from_list<int32_t>({1, 2, 3, 4}, {2, 2});
  Tensor y = pad(m, {1, 0}, {0, 1}, -1);
  EXPECT_EQ(y.shape(), (Shape{3, 3}));
  EXPECT_EQ(values<int32_t>(y), (std::vector<int32_t>{-1, -1, -1, 1, 2, -1, 3, 4, -1}));
}

TEST(Pad, ZeroSizedAndBoolInputs) {
  Tensor y = pad(Tensor::empty(f64, {0}), {2}, {1}, 0.5, {3});
  EXPECT_EQ(values<double>(y), (std::vector<double>{0.5, 0.5, 0.5}));
  EXPECT_EQ(pad(Tensor::from_list<int8_t>({4}, {1, 1}), {0, 1}, {0, 0}, 0, {int64_t{1} << 40, 1})
                .to_vector<int>(),
            (std::vector<int>{0, 4}));
  Tensor b = pad(Tensor::from_list<bool>({false}), {1}, {1}, 1);
  EXPECT_EQ(b.to_vector<int>(), (std::vector<int>{1, 0, 1}));
}

TEST(Pad, NegativeAmountsThrow) {
  Tensor x = counting<float>({2, 3});
  EXPECT_THAT(error_of([&] {
                pad(x, {-1, 0}, {0, 0});
              }),
              AllOf(HasSubstr("pad"), HasSubstr("non-negative"), HasSubstr("[2,3]")));
  EXPECT_THAT(error_of([&] { pad(x, {0}, {0}); }), AllOf(HasSubstr("pad"), HasSubstr("rank 2")));
}

// ---- reverse ----------------------------------------------------------------------------

TEST(Reverse, AlongChosenAxes) {
  Tensor x = counting<int32_t>({2, 3});  // [[0,1,2],[3,4,5]]
  EXPECT_EQ(values<int32_t>(reverse(x, {0})), (std::vector<int32_t>{3, 4, 5, 0, 1, 2}));
  EXPECT_EQ(values<int32_t>(reverse(x, {-1})), (std::vector<int32_t>{2, 1, 0, 5, 4, 3}));
  EXPECT_EQ(values<int32_t>(reverse(x, {0, 1})), (std::vector<int32_t>{5, 4, 3, 2, 1, 0}));
  EXPECT_EQ(values<int32_t>(reverse(x, {})), (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(reverse(Tensor::empty(f32, {0, 3}), {0}).shape(), (Shape{0, 3}));
}

TEST(Reverse, Large) {
  Tensor y = reverse(counting<int64_t>({300, 1001}), {0, 1});
  auto d = y.data<int64_t>();
  const int64_t n = 300 * 1001;
  for (int64_t i = 0; i < n; i += 7) ASSERT_EQ(d[i], n - 1 - i);
}

TEST(Reverse, BadAxesThrow) {
  Tensor x = counting<float>({2, 3});
  EXPECT_THAT(error_of([&] { reverse(x, {2}); }),
              AllOf(HasSubstr("reverse"), HasSubstr("axis 2"), HasSubstr("[2,3]")));
  EXPECT_THAT(error_of([&] { reverse(x, {1, -1}); }), HasSubstr("repeats"));
}

// ---- flatten / expand_dims / squeeze ----------------------------------------------------

TEST(Flatten, MergesARangeOfAxes) {
  Tensor x = counting<float>({2, 3, 4});
  EXPECT_EQ(flatten(x).shape(), (Shape{24}));
  EXPECT_EQ(flatten(x, 1).shape(), (Shape{2, 12}));
  EXPECT_EQ(flatten(x, 0, -2).shape(), (Shape{6, 4}));
  EXPECT_EQ(flatten(Tensor::scalar(1.0f)).shape(), (Shape{1}));
  EXPECT_EQ(values<float>(flatten(x, 1))[13], 13.0f);
  EXPECT_THAT(error_of([&] { flatten(x, 2, 1); }),
              AllOf(HasSubstr("flatten"), HasSubstr("[2,3,4]")));
  EXPECT_THAT(error_of([&] { flatten(x, 3); }), AllOf(HasSubstr("flatten"), HasSubstr("axis 3")));
}

TEST(ExpandDims, InsertsASizeOneAxis) {
  Tensor x = counting<float>({2, 3});
  EXPECT_EQ(expand_dims(x, 0).shape(), (Shape{1, 2, 3}));
  EXPECT_EQ(expand_dims(x, 2).shape(), (Shape{2, 3, 1}));
  EXPECT_EQ(expand_dims(x, -1).shape(), (Shape{2, 3, 1}));
  EXPECT_EQ(expand_dims(x, -3).shape(), (Shape{1, 2, 3}));
  EXPECT_EQ(expand_dims(Tensor::scalar(2), 0).shape(), (Shape{1}));
}

TEST(ExpandDims, AxisOutOfRangeThrows) {
  Tensor x = counting<float>({2, 3});
  for (int64_t axis : {3, -4}) {
    EXPECT_THAT(error_of([&] { expand_dims(x, axis); }),
                AllOf(HasSubstr("expand_dims"), HasSubstr("axis " + std::to_string(axis)),
                      HasSubstr("[2,3]")));
  }
}

TEST(Squeeze, RemovesSizeOneAxes) {
  Tensor x = counting<float>({1, 2, 1, 3});
  EXPECT_EQ(squeeze(x, {}).shape(), (Shape{2, 3}));
  EXPECT_EQ(squeeze(x, {0}).shape(), (Shape{2, 1, 3}));
  EXPECT_EQ(squeeze(x, {-2}).shape(), (Shape{1, 2, 3}));
  EXPECT_EQ(values<float>(squeeze(x, {})), (std::vector<float>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(squeeze(Tensor::from_list<float>({5}, {1, 1}), {}).shape(), Shape{});
}

TEST(Squeeze, BadAxisThrows) {
  Tensor x = counting<float>({1, 2, 1, 3});
  EXPECT_THAT(
      error_of([&] { squeeze(x, {1}); }),
      AllOf(HasSubstr("squeeze"), HasSubstr("axis 1"), HasSubstr("[1,2,1,3]"), HasSubstr("not 1")));
  EXPECT_THAT(error_of([&] { squeeze(x, {4}); }),
              AllOf(HasSubstr("squeeze"), HasSubstr("out of range"), HasSubstr("[1,2,1,3]")));
}

// ---- recorded in a graph ----------------------------------------------------------------

// ---- reshape_like / broadcast_like -------------------------------------------------------

TEST(ReshapeLike, TakesTheShapeOfLike) {
  Tensor y = reshape_like(counting<float>({2, 3}), Tensor::empty(i32, {3, 1, 2}));
  EXPECT_EQ(y.dtype(), f32);
  EXPECT_EQ(y.shape(), (Shape{3, 1, 2}));
  EXPECT_EQ(values<float>(y), (std::vector<float>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(reshape_like(Tensor::scalar(2.5), Tensor::empty(f32, {1, 1})).shape(), (Shape{1, 1}));
  EXPECT_THAT(error_of([] {
                reshape_like(counting<float>({2, 3}), Tensor::empty(f32, {4}));
              }),
              HasSubstr("reshape_like: cannot reshape [2,3] (6 elements) to the shape [4] of like "
                        "(4 elements)"));
}

TEST(BroadcastLike, BroadcastsToTheShapeOfLike) {
  Tensor like = Tensor::empty(bool_, {2, 3});
  EXPECT_EQ(values<int32_t>(broadcast_like(Tensor::from_list<int32_t>({1, 2, 3}), like, {1})),
            (std::vector<int32_t>{1, 2, 3, 1, 2, 3}));
  EXPECT_EQ(
      values<int32_t>(broadcast_like(Tensor::from_list<int32_t>({7, 8}, {2, 1}), like, {0, -1})),
      (std::vector<int32_t>{7, 7, 7, 8, 8, 8}));
  EXPECT_THAT(
      error_of([&] {
        broadcast_like(Tensor::from_list<float>({1, 2}), like, {1});
      }),
      AllOf(HasSubstr("broadcast_like"), HasSubstr("cannot broadcast operand [2] to [2,3]")));
}

TEST(LayoutGraph, LikeShapesAreTakenWhenTheGraphRuns) {
  Graph g;
  Tensor like = g.placeholder(f32, {kUnknownDim, kUnknownDim}, "like");
  Tensor b = g.placeholder(f32, {1, kUnknownDim}, "b");
  Tensor x = g.placeholder(f32, {kUnknownDim, 2}, "x");
  Tensor wide = broadcast_like(b, like, {0, 1});
  Tensor flat = reshape_like(x, like);
  EXPECT_EQ(wide.shape(), (Shape{kUnknownDim, kUnknownDim}));
  EXPECT_EQ(flat.shape(), (Shape{kUnknownDim, kUnknownDim}));
  std::vector<Tensor> got = g.run({{like, Tensor::empty(f32, {3, 2})},
                                   {b, Tensor::from_list<float>({4, 5}, {1, 2})},
                                   {x, counting<float>({3, 2})}},
                                  {wide, flat});
  EXPECT_EQ(got[0].shape(), (Shape{3, 2}));
  EXPECT_EQ(values<float>(got[0]), (std::vector<float>{4, 5, 4, 5, 4, 5}));
  EXPECT_EQ(got[1].shape(), (Shape{3, 2}));
  got = g.run({{like, Tensor::empty(f32, {2, 3})},
               {b, Tensor::from_list<float>({6}, {1, 1})},
               {x, counting<float>({3, 2})}},
              {wide, flat});
  EXPECT_EQ(values<float>(got[0]), (std::vector<float>(6, 6)));
  EXPECT_EQ(got[1].shape(), (Shape{2, 3}));
  EXPECT_THAT(error_of([&] {
                g.run({{like, Tensor::empty(f32, {2, 2})}, {x, counting<float>({3, 2})}}, flat);
              }),
              AllOf(HasSubstr("reshape_like"), HasSubstr("[3,2]"), HasSubstr("[2,2]")));
}

TEST(LayoutGraph, RecordsWithUnknownDimsAndRuns) {
  Graph g("layout");
  Tensor x = g.placeholder(f32, {kUnknownDim, 3}, "x");
  Tensor t = transpose(x);
  Tensor r = reshape(x, {-1});
  Tensor s = slice(x, {1, 0}, {2, 3}, {1, 2});
  Tensor c = concatenate({x, x}, 0);
  Tensor p = pad(x, {1, 0}, {0, 1}, 7);
  Tensor v = reverse(x, {0, 1});
  Tensor b = broadcast_to(x, {2, kUnknownDim, 3});
  Tensor e = expand_dims(x, 1);
  Tensor q = squeeze(e, {1});
  Tensor f = flatten(b, 0, 1);
  for (const Tensor& y : {t, r, s, c, p, v, b, e, q, f}) EXPECT_TRUE(y.is_symbolic());
  EXPECT_EQ(t.shape(), (Shape{3, kUnknownDim}));
  EXPECT_EQ(s.shape(), (Shape{1, 2}));
  EXPECT_EQ(c.shape(), (Shape{kUnknownDim, 3}));
  EXPECT_EQ(p.shape(), (Shape{kUnknownDim, 4}));
  EXPECT_EQ(b.shape(), (Shape{2, kUnknownDim, 3}));
  EXPECT_EQ(e.shape(), (Shape{kUnknownDim, 1, 3}));
  EXPECT_EQ(q.shape(), (Shape{kUnknownDim, 3}));

  Tensor xv = counting<float>({2, 3});  // [[0,1,2],[3,4,5]]
  std::vector<Tensor> out = g.run({{x, xv}}, {t, r, s, c, p, v, b, e, q, f});
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(out[1].shape(), (Shape{6}));
  EXPECT_EQ(values<float>(out[2]), (std::vector<float>{3, 5}));
  EXPECT_EQ(out[3].shape(), (Shape{4, 3}));
  EXPECT_EQ(values<float>(out[4]), (std::vector<float>{7, 7, 7, 7, 0, 1, 2, 7, 3, 4, 5, 7}));
  EXPECT_EQ(values<float>(out[5]), (std::vector<float>{5, 4, 3, 2, 1, 0}));
  EXPECT_EQ(out[6].shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(values<float>(out[6]), (std::vector<float>{0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(out[7].shape(), (Shape{2, 1, 3}));
  EXPECT_EQ(out[8].shape(), (Shape{2, 3}));
  EXPECT_EQ(out[9].shape(), (Shape{4, 3}));
}

TEST(LayoutGraph, RunTimeShapeErrorsNameTheNode) {
  Graph g("layout");
  Tensor x = g.placeholder(f32, {kUnknownDim, 3}, "x");
  Tensor s = slice(x, {0, 0}, {5, 3});
  std::string msg = error_of([&] { g.run({{x, counting<float>({2, 3})}}, s); });
  EXPECT_THAT(msg, AllOf(HasSubstr("slice"), HasSubstr("limit 5"), HasSubstr("[2,3]")));
  Tensor r = reshape(x, {4, 2});
  EXPECT_THAT(error_of([&] {
                g.run({{x, counting<float>({2, 3})}}, r);
              }),
              HasSubstr("cannot reshape [2,3] (6 elements) to [4,2] (8 elements)"));
  // An output dimension nothing maps to must be known by run time.
  Tensor b = broadcast_in_dim(x, {kUnknownDim, kUnknownDim, 3}, {1, 2});
  EXPECT_THAT(error_of([&] {
                g.run({{x, counting<float>({2, 3})}}, b);
              }),
              AllOf(HasSubstr("broadcast_in_dim"), HasSubstr("not known at run time")));
}

TEST(LayoutGraph, DefaultGraphRecordsConcreteInputs) {
  Graph g("scope");
  Tensor y;
  {
    auto guard = g.as_default();
    y = transpose(counting<int32_t>({2, 2}));
  }
  ASSERT_TRUE(y.is_symbolic());
  EXPECT_EQ(values<int32_t>(g.run({}, y)), (std::vector<int32_t>{0, 2, 1, 3}));
}

}  // namespace
}  // namespace kiln
