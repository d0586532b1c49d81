// reduce_window_max and its gradient pair (reduce_window_max_grad, reduce_window_max_select) on
// random shapes, windows, strides and padding, disjoint and overlapping, against a naive
// reference written here: every output element walks its window in row-major order, the first
// maximum wins ties and the first NaN beats every number. The values are small integers (many
// ties) with NaNs sprinkled in, so the comparisons are exact.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "kiln/kiln.h"

namespace kiln {
namespace {

struct Case {
  Shape in, window, strides, low, high, out;
};

Case random_case(std::mt19937& rng, bool disjoint) {
  auto pick = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  Case c;
  const int64_t rank = pick(1, 4);
  for (int64_t d = 0; d < rank; ++d) {
    const int64_t n = pick(1, 7), w = pick(1, 3);
    const int64_t s = disjoint ? pick(w, w + 1) : pick(1, w);
    const int64_t lo = pick(0, w - 1);
    const int64_t hi = std::max(pick(0, w - 1), w - n - lo);  // the window fits the padded size
    const int64_t padded = n + lo + hi;
    c.in.push_back(n);
    c.window.push_back(w);
    c.strides.push_back(s);
    c.low.push_back(lo);
    c.high.push_back(hi);
    c.out.push_back((padded - w) / s + 1);
  }
  return c;
}

int64_t elements(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

// For output element o (flat): the flat operand index of its window's maximum, or -1 when the
// window lies wholly on padding.
int64_t reference_argmax(const Case& c, const std::vector<float>& x, int64_t o) {
  const size_t rank = c.in.size();
  std::vector<int64_t> pos(rank), tap(rank, 0);
  for (size_t d = rank; d-- > 0;) {
    pos[d] = o % c.out[d];
    o /= c.out[d];
  }
  int64_t best = -1;
  while (true) {
    int64_t flat = 0;
    bool inside = true;
    for (size_t d = 0; d < rank; ++d) {
      const int64_t at = pos[d] * c.strides[d] - c.low[d] + tap[d];
      inside = inside && at >= 0 && at < c.in[d];
      flat = flat * c.in[d] + at;
    }
    if (inside) {
      const float v = x[flat];
      if (best < 0) {
        best = flat;
      } else {
        const float w = x[best];
        if (v > w || (std::isnan(v) && !std::isnan(w))) best = flat;
      }
    }
    size_t d = rank;
    while (d-- > 0) {
      if (++tap[d] < c.window[d]) break;
      tap[d] = 0;
    }
    if (d == static_cast<size_t>(-1)) break;
  }
  return best;
}

std::vector<float> random_values(std::mt19937& rng, int64_t n) {
  std::vector<float> v(n);
  std::uniform_int_distribution<int> value(-3, 3), nan(0, 19);
  for (float& e : v) e = nan(rng) == 0 ? std::nanf("") : static_cast<float>(value(rng));
  return v;
}

bool same_bits(float a, float b) {
  return std::memcmp(&a, &b, sizeof a) == 0 || (std::isnan(a) && std::isnan(b));
}

void check(const Case& c, std::mt19937& rng, const std::string& what) {
  SCOPED_TRACE(what);
  const std::vector<float> xv = random_values(rng, elements(c.in));
  std::vector<float> dyv(elements(c.out)), vv(elements(c.in));
  for (size_t i = 0; i < dyv.size(); ++i) dyv[i] = static_cast<float>(i % 13 + 1);
  for (size_t i = 0; i < vv.size(); ++i) vv[i] = static_cast<float>(i % 7 + 1) * 0.5f;
  const Tensor x = Tensor::from_vector(xv, c.in);
  const Attrs w{{"window", Axes(c.window.begin(), c.window.end())},
                {"strides", Axes(c.strides.begin(), c.strides.end())},
                {"padding_low", Axes(c.low.begin(), c.low.end())},
                {"padding_high", Axes(c.high.begin(), c.high.end())}};

  std::vector<float> want_y(dyv.size()), want_dx(xv.size(), 0.0f), want_sel(dyv.size());
  for (int64_t o = 0; o < static_cast<int64_t>(dyv.size()); ++o) {
    const int64_t i = reference_argmax(c, xv, o);
    want_y[o] = i < 0 ? -std::numeric_limits<float>::infinity() : xv[i];
    if (i >= 0) want_dx[i] += dyv[o];
    want_sel[o] = i < 0 ? 0.0f : vv[i];
  }

  const std::vector<float> y = call_op("reduce_window_max", {x}, w)[0].to_vector<float>();
  const std::vector<float> dx =
      call_op("reduce_window_max_grad", {x, Tensor::from_vector(dyv, c.out)}, w)[0]
          .to_vector<float>();
  const std::vector<float> sel =
      call_op("reduce_window_max_select", {x, Tensor::from_vector(vv, c.in)}, w)[0]
          .to_vector<float>();
  ASSERT_EQ(y.size(), want_y.size());
  for (size_t o = 0; o < y.size(); ++o) {
    ASSERT_TRUE(same_bits(y[o], want_y[o]))
        << "max at " << o << ": " << y[o] << " vs " << want_y[o];
    ASSERT_EQ(sel[o], want_sel[o]) << "select at " << o;
  }
  ASSERT_EQ(dx.size(), want_dx.size());
  for (size_t i = 0; i < dx.size(); ++i) ASSERT_EQ(dx[i], want_dx[i]) << "grad at " << i;
}

std::string describe(const Case& c) {
  auto s = [](const Shape& v) {
    std::string r = "[";
    for (size_t i = 0; i < v.size(); ++i) r += (i ? "," : "") + std::to_string(v[i]);
    return r + "]";
  };
  return "in " + s(c.in) + " window " + s(c.window) + " strides " + s(c.strides) + " low " +
         s(c.low) + " high " + s(c.high);
}

TEST(ReduceWindowRandom, DisjointWindowsMatchTheNaiveReference) {
  std::mt19937 rng(7);
  for (int k = 0; k < 150; ++k) {
    const Case c = random_case(rng, /*disjoint=*/true);
    check(c, rng, describe(c));
  }
}

TEST(ReduceWindowRandom, OverlappingWindowsMatchTheNaiveReference) {
  std::mt19937 rng(11);
  for (int k = 0; k < 150; ++k) {
    const Case c = random_case(rng, /*disjoint=*/false);
    check(c, rng, describe(c));
  }
}

// The shape the CNN trainers pool: NHWC, 2x2 windows, stride 2, a channel row that vectorizes.
TEST(ReduceWindowRandom, ChannelsLastTwoByTwoPooling) {
  std::mt19937 rng(3);
  Case c{{3, 9, 8, 37}, {1, 2, 2, 1}, {1, 2, 2, 1}, {0, 0, 0, 0}, {0, 1, 0, 0}, {3, 5, 4, 37}};
  check(c, rng, describe(c));
}

// relu_mask (set by the algebraic simplifier): the same bits as masking the plain gradient with
// select(x <= 0, 0, dx), on disjoint and overlapping windows, with zeros, negatives and NaNs.
TEST(ReduceWindowRandom, ReluMaskedGradientEqualsTheMaskedPlainGradient) {
  std::mt19937 rng(5);
  for (int k = 0; k < 120; ++k) {
    const Case c = random_case(rng, /*disjoint=*/k % 2 == 0);
    SCOPED_TRACE(describe(c));
    const Tensor x = Tensor::from_vector(random_values(rng, elements(c.in)), c.in);
    std::vector<float> dyv(elements(c.out));
    for (size_t i = 0; i < dyv.size(); ++i) dyv[i] = static_cast<float>(i % 11) - 4.5f;
    const Tensor dy = Tensor::from_vector(dyv, c.out);
    Attrs w{{"window", Axes(c.window.begin(), c.window.end())},
            {"strides", Axes(c.strides.begin(), c.strides.end())},
            {"padding_low", Axes(c.low.begin(), c.low.end())},
            {"padding_high", Axes(c.high.begin(), c.high.end())}};
    const Tensor plain = call_op("reduce_window_max_grad", {x, dy}, w)[0];
    const Tensor zero = zeros_like(plain);
    const std::vector<float> want = where(less_equal(x, zero), zero, plain).to_vector<float>();
    w.set("relu_mask", true);
    const std::vector<float> got =
        call_op("reduce_window_max_grad", {x, dy}, w)[0].to_vector<float>();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_TRUE(same_bits(got[i], want[i])) << "at " << i << ": " << got[i] << " vs " << want[i];
    }
  }
}

// Its gradient with respect to dy: the select at each window's maximum, zero where that
// maximum is <= 0 (checked against the definition <u, masked_grad(x, dy)> by hand).
TEST(ReduceWindowRandom, ReluMaskedGradientsAdjoint) {
  const Tensor x = Tensor::from_vector(std::vector<float>{1, -2, 0, -1, 3, 5, -4, 2}, {8});
  const Tensor dy = Tensor::from_vector(std::vector<float>{1, 1, 1, 1}, {4});
  const Tensor u = Tensor::from_vector(std::vector<float>{10, 20, 30, 40, 50, 60, 70, 80}, {8});
  const Attrs w{{"window", Axes{2}}, {"strides", Axes{2}}, {"relu_mask", true}};
  // Windows {1,-2} {0,-1} {3,5} {-4,2}: maxima 1 (at 0), 0 (masked), 5 (at 5), 2 (at 7).
  const Tensor d = grad(
      [&](const std::vector<Tensor>& a) {
        return sum(call_op("reduce_window_max_grad", {x, a[0]}, w)[0] * u);
      },
      {dy})[0];
  EXPECT_EQ(d.to_vector<float>(), (std::vector<float>{10, 0, 60, 80}));
}

}  // namespace
}  // namespace kiln
