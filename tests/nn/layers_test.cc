// Layers: shapes and values against hand-computed cases.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "kiln/nn.h"

namespace kiln::nn {
namespace {

using ::testing::HasSubstr;

Tensor f32s(std::vector<float> v, Shape s) { return Tensor::from_vector(v, s); }

void expect_values(const Tensor& t, const std::vector<float>& want, float tol = 1e-5f) {
  std::vector<float> got = t.to_vector<float>();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "element " << i;
}

TEST(Dense, ComputesAffineThenActivation) {
  Dense dense(2, "relu");
  CallContext ctx;
  dense(f32s({0, 0, 0}, {1, 3}), ctx);  // builds: kernel [3,2], bias [2]
  ASSERT_EQ(dense.weights().size(), 2u);
  Variable kernel = dense.weights()[0], bias = dense.weights()[1];
  kernel.assign(f32s({1, -1, 2, -2, 3, -3}, {3, 2}));
  bias.assign(f32s({0.5f, 0.5f}, {2}));
  // x = [1, 1, 1]: x @ k = [6, -6]; + b = [6.5, -5.5]; relu = [6.5, 0]
  expect_values(dense(f32s({1, 1, 1}, {1, 3}), ctx), {6.5f, 0});
  EXPECT_EQ(dense.count_params(), 8);
}

TEST(Dense, UnknownActivationIsAnError) {
  try {
    Dense d(3, "relux");
    FAIL() << "expected kiln::Error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("relux"));
    EXPECT_THAT(e.what(), HasSubstr("relu"));
  }
}

TEST(Dropout, IsIdentityInInference) {
  Dropout d(0.5);
  Tensor x = ones({4, 8});
  EXPECT_TRUE(allclose(d(x), x));
}

TEST(Dropout, ZeroesAboutRateAndScalesTheRestInTraining) {
  Dropout d(0.25);
  CallContext ctx(/*training=*/true, /*seed=*/7);
  std::vector<float> y = d(ones({100, 100}), ctx).to_vector<float>();
  int zeros_count = 0;
  for (float v : y) {
    if (v == 0) ++zeros_count;
    else EXPECT_NEAR(v, 1 / 0.75f, 1e-6f);
  }
  EXPECT_NEAR(zeros_count / 10000.0, 0.25, 0.03);
  // The same seed gives the same mask.
  CallContext again(true, 7);
  EXPECT_EQ(d(ones({100, 100}), again).to_vector<float>(), y);
}

TEST(Flatten, KeepsTheBatchDimension) {
  Flatten f;
  EXPECT_EQ(f(zeros({2, 3, 4, 5})).shape(), (Shape{2, 60}));
}

TEST(Conv2D, OutputShapesForValidAndSame) {
  Conv2D valid(8, {3, 3}, "relu");
  EXPECT_EQ(valid(zeros({2, 28, 28, 1})).shape(), (Shape{2, 26, 26, 8}));
  Conv2D same(4, {3, 3}, "", {2, 2}, "same");
  EXPECT_EQ(same(zeros({1, 9, 9, 3})).shape(), (Shape{1, 5, 5, 4}));
  EXPECT_EQ(valid.count_params(), 3 * 3 * 1 * 8 + 8);
}

TEST(Conv2D, SumsTheWindowWithAnAllOnesKernel) {
  Conv2D conv(1, {2, 2}, "", {1, 1}, "valid", /*use_bias=*/false, ones_init());
  // 3x3 input 1..9: windows sum to 1+2+4+5=12, 2+3+5+6=16, 4+5+7+8=24, 5+6+8+9=28
  Tensor x = f32s({1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 3, 3, 1});
  expect_values(conv(x), {12, 16, 24, 28});
}

TEST(MaxPool2D, TakesTheWindowMaximum) {
  MaxPool2D pool({2, 2});
  Tensor x = f32s({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, {1, 4, 4, 1});
  expect_values(pool(x), {6, 8, 14, 16});
}

TEST(AveragePool2D, AveragesTheWindow) {
  AveragePool2D pool({2, 2});
  Tensor x = f32s({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, {1, 4, 4, 1});
  expect_values(pool(x), {3.5f, 5.5f, 11.5f, 13.5f});
}

TEST(Embedding, LooksUpRows) {
  Embedding emb(4, 2);
  CallContext ctx;
  emb(Tensor::from_list<int32_t>({0}, {1}), ctx);
  Variable table = emb.weights()[0];
  table.assign(f32s({0, 1, 10, 11, 20, 21, 30, 31}, {4, 2}));
  Tensor out = emb(Tensor::from_list<int32_t>({3, 1, 3}, {1, 3}), ctx);
  EXPECT_EQ(out.shape(), (Shape{1, 3, 2}));
  expect_values(out, {30, 31, 10, 11, 30, 31});
  EXPECT_THROW(emb(Tensor::from_list<int32_t>({4}, {1}), ctx), Error);
}

TEST(LayerNormalization, NormalisesTheLastAxis) {
  LayerNormalization ln(/*epsilon=*/0);
  // Row [1, 2, 3]: mean 2, variance 2/3 -> [-1.2247449, 0, 1.2247449]
  expect_values(ln(f32s({1, 2, 3, 0, 0, 3}, {2, 3})),
                {-1.2247449f, 0, 1.2247449f, -0.70710677f, -0.70710677f, 1.4142135f});
}

TEST(BatchNormalization, UsesBatchStatisticsInTrainingAndMovingOnesInInference) {
  BatchNormalization bn(/*momentum=*/0.5, /*epsilon=*/0);
  Tensor x = f32s({1, 10, 3, 30}, {2, 2});  // column means [2, 20], variances [1, 100]
  CallContext train(true, 0);
  expect_values(bn(x, train), {-1, -1, 1, 1});
  ASSERT_EQ(train.updates().size(), 2u);
  // moving = 0.5 * initial + 0.5 * batch: mean [1, 10], variance [1, 50.5]
  expect_values(train.updates()[0].second, {1, 10});
  expect_values(train.updates()[1].second, {1, 50.5f});
  // Inference uses the (still initial) moving statistics: mean 0, variance 1.
  expect_values(bn(x), {1, 10, 3, 30});
}

TEST(MultiHeadAttention, ProducesQueryShapedOutputAndAttendsUniformlyToEqualKeys) {
  MultiHeadAttention mha(2, 4);
  Tensor q = random_normal({2, 3, 6}, 1);
  Tensor v = random_normal({2, 5, 6}, 2);
  CallContext ctx;
  Tensor out = mha({q, v}, ctx);
  EXPECT_EQ(out.shape(), (Shape{2, 3, 6}));
  // With all value rows equal, attention weights do not matter: every output row is the same.
  Tensor same_rows = broadcast_to(slice(v, {0, 0, 0}, {2, 1, 6}), {2, 5, 6});
  std::vector<float> y = mha({q, same_rows}, ctx).to_vector<float>();
  for (int b = 0; b < 2; ++b)
    for (int s = 1; s < 3; ++s)
      for (int f = 0; f < 6; ++f) EXPECT_NEAR(y[(b * 3 + s) * 6 + f], y[(b * 3) * 6 + f], 1e-5f);
}

}  // namespace
}  // namespace kiln::nn
