// The strided copy engine: general strides on both sides, broadcast and reversed reads, and the
// identity check that lets kernels share storage.
#include "ops/strided_copy.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace kiln::ops {
namespace {

TEST(StridedCopy, ScattersIntoAStridedOutput) {
  // A 2x2 input written into every other element of a 4x4 output, starting at (1, 1).
  std::vector<int32_t> in{1, 2, 3, 4}, out(16, 0);
  StridedCopy c{{2, 2}, {2, 1}, {8, 2}, 0, 5};
  strided_copy(c, sizeof(int32_t), in.data(), out.data());
  std::vector<int32_t> want(16, 0);
  want[5] = 1, want[7] = 2, want[13] = 3, want[15] = 4;
  EXPECT_EQ(out, want);
}

TEST(StridedCopy, BroadcastAndReversedReads) {
  std::vector<uint16_t> in{10, 20, 30}, out(6);
  // out[i][j] = in[2 - j]: a reversed row repeated twice.
  strided_copy({{2, 3}, {0, -1}, {3, 1}, 2, 0}, sizeof(uint16_t), in.data(), out.data());
  EXPECT_EQ(out, (std::vector<uint16_t>{30, 20, 10, 30, 20, 10}));
}

TEST(StridedCopy, ZeroSizedCopiesNothing) {
  std::vector<int64_t> in{1}, out{7};
  strided_copy({{0, 5}, {5, 1}, {5, 1}, 0, 0}, sizeof(int64_t), in.data(), out.data());
  EXPECT_EQ(out[0], 7);
}

TEST(StridedCopy, IdentityIsRecognised) {
  EXPECT_TRUE(is_identity({{2, 1, 3}, {3, 3, 1}, {3, 3, 1}, 0, 0}, 6));
  EXPECT_FALSE(is_identity({{3, 2}, {1, 3}, {2, 1}, 0, 0}, 6));  // a transpose
  EXPECT_FALSE(is_identity({{2, 3}, {3, 1}, {3, 1}, 3, 0}, 9));  // an offset slice
}

TEST(StridedCopy, FillSetsEveryElement) {
  std::vector<double> out(100000);
  const double v = 2.5;
  fill(out.data(), static_cast<int64_t>(out.size()), sizeof(double), &v);
  for (double x : out) ASSERT_EQ(x, 2.5);
}

}  // namespace
}  // namespace kiln::ops
