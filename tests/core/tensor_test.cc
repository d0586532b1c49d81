// Tensor creation, access, value semantics and printing.
#include <gtest/gtest.h>

#include "kiln/kiln.h"

namespace kiln {
namespace {

TEST(Tensor, FromVectorKeepsValuesAndShape) {
  Tensor t = Tensor::from_list<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(t.dtype(), f32);
  EXPECT_EQ(t.shape(), (Shape{2, 3}));
  EXPECT_EQ(t.size(), 6);
  EXPECT_EQ(t.dim(-1), 3);
  EXPECT_FALSE(t.is_symbolic());
  EXPECT_EQ(t.data<float>()[4], 5.0f);
}

TEST(Tensor, ItemConvertsAndRequiresOneElement) {
  EXPECT_EQ(Tensor::scalar<int32_t>(7).item<double>(), 7.0);
  EXPECT_EQ(Tensor::scalar(2.5).item<int64_t>(), 2);
  EXPECT_THROW(Tensor::from_list<float>({1, 2}).item<float>(), Error);
}

TEST(Tensor, DataWithWrongTypeThrows) {
  Tensor t = Tensor::from_list<float>({1, 2});
  EXPECT_THROW(t.data<double>(), Error);
}

TEST(Tensor, MutableDataCopiesSharedStorage) {
  Tensor a = Tensor::from_list<int32_t>({1, 2, 3});
  Tensor b = a;
  b.mutable_data<int32_t>()[0] = 100;
  EXPECT_EQ(a.data<int32_t>()[0], 1);
  EXPECT_EQ(b.data<int32_t>()[0], 100);
}

TEST(Tensor, FromVectorWithWrongCountThrows) {
  EXPECT_THROW(Tensor::from_vector<float>({1, 2, 3}, {2, 2}), Error);
}

TEST(Tensor, PrintsLikeNumpy) {
  Tensor t = Tensor::from_list<int32_t>({1, 2, 3, 4}, {2, 2});
  EXPECT_EQ(t.str(), "tensor([[1, 2],\n        [3, 4]], dtype=i32)");
  EXPECT_EQ(Tensor::scalar(1.5f).str(), "tensor(1.5, dtype=f32)");
  EXPECT_EQ(Tensor::from_list<bool>({true, false}).str(), "tensor([ true, false], dtype=bool)");
}

TEST(Tensor, PrintElidesLargeTensors) {
  std::vector<int32_t> v(2000);
  for (int i = 0; i < 2000; ++i) v[i] = i;
  std::string s = Tensor::from_vector(v).str();
  EXPECT_EQ(s, "tensor([   0,    1,    2, ..., 1997, 1998, 1999], dtype=i32, shape=[2000])");
}

TEST(DType, PromotionRules) {
  EXPECT_EQ(promote_types(f32, f32), f32);
  EXPECT_EQ(promote_types(bool_, i8), i8);
  EXPECT_EQ(promote_types(u8, i8), i32);
  EXPECT_EQ(promote_types(i32, i64), i64);
  EXPECT_EQ(promote_types(i64, f16), f16);
  EXPECT_EQ(promote_types(f16, bf16), f32);
  EXPECT_EQ(promote_types(f32, f64), f64);
}

TEST(DType, HalfRoundTrips) {
  for (float f : {0.0f, 1.0f, -2.5f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f}) {
    EXPECT_EQ(static_cast<float>(half(f)), f) << f;
  }
  EXPECT_EQ(static_cast<float>(half(1e6f)), std::numeric_limits<float>::infinity());
  EXPECT_EQ(static_cast<float>(bfloat16(1.0f)), 1.0f);
  EXPECT_EQ(static_cast<float>(bfloat16(3.0f)), 3.0f);
}

}  // namespace
}  // namespace kiln
