// bf16 and f16 in generated loops (#16): loads widen to f32 exactly and every op computes in
// f32. Without excess precision each op rounds its result to the narrow type as the op's
// reference kernel does, so a fused bf16/f16 chain gives the interpreter's bits (the census
// checks every op alone: tests/compiler/elemental_census_test.cc); with it (the default,
// kiln::allow_excess_precision) a chain rounds once per stored value, which makes it exactly the
// same chain in f32 rounded where it is stored or read by another dtype. Layout reads keep a
// value's bits, NaN payloads too.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "compiler/executable.h"
#include "kiln/kiln.h"
#include "tests/compiler/compiler_test_util.h"

namespace kiln::compiler {
namespace {

Tensor random_narrow(DType dtype, Shape shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0, 2);
  std::vector<float> v(num_elements(shape));
  for (float& x : v) x = normal(rng);
  return convert(Tensor::from_vector(v, shape), dtype);
}

// Sets kiln::allow_excess_precision for one test.
class ExcessPrecision {
 public:
  explicit ExcessPrecision(bool allow) : before_(allow_excess_precision()) {
    set_allow_excess_precision(allow);
  }
  ~ExcessPrecision() { set_allow_excess_precision(before_); }

 private:
  bool before_;
};

// The number of elements whose bits differ.
int64_t bits_differing(const Tensor& a, const Tensor& b) {
  const auto* pa = static_cast<const uint16_t*>(a.raw_data());
  const auto* pb = static_cast<const uint16_t*>(b.raw_data());
  int64_t n = 0;
  for (int64_t i = 0; i < a.size(); ++i) n += pa[i] != pb[i];
  return n;
}

class NarrowFusion : public ::testing::TestWithParam<DType> {};

TEST_P(NarrowFusion, AChainComputesInF32AndRoundsEachOpAsTheInterpreterDoes) {
  const DType t = GetParam();
  ExcessPrecision exact(false);
  Graph g{"narrow_chain"};
  Tensor x = g.placeholder(t, {6, 40}, "x");
  Tensor w = g.placeholder(t, {40, 6}, "w");
  Tensor b = g.placeholder(t, {40}, "b");
  // transpose read through its map, a broadcast bias, and ops that round differently per op
  // than once at the end (x * w + b then tanh, exp, a division).
  Tensor h = transpose(w, {1, 0}) * x + b;
  Tensor y = tanh(h) + exp(h * 0.25f) / (abs(h) + 1.0f);
  FeedList feeds = {{x, random_narrow(t, {6, 40}, 1)},
                    {w, random_narrow(t, {40, 6}, 2)},
                    {b, random_narrow(t, {40}, 3)}};
  Executable e = compile(g, {y}, feeds);
  EXPECT_EQ(e.num_thunks(), 1) << e.fusion_log();
  Tensor got = e.run(feeds)[0], want = g.run(feeds, std::vector<Tensor>{y})[0];
  EXPECT_EQ(got.dtype(), t);
  EXPECT_TRUE(testing::bitwise_equal(got, want)) << e.fusion_log();
}

TEST_P(NarrowFusion, PiecesAndViewsKeepTheirBitsNaNPayloadsIncluded) {
  const DType t = GetParam();
  Graph g{"narrow_layout"};
  Tensor x = g.placeholder(t, {3, 4}, "x");
  Tensor m = g.placeholder(bool_, {4, 6}, "m");
  Tensor wide = transpose(concatenate({x, x}, 1), {1, 0});  // [8, 3]
  Tensor p = pad(x, {1, 1}, {0, 1}, 0.5);                   // [4, 6]
  Tensor y = where(m, p, p);                                // a select of loaded values
  Tensor xv = random_narrow(t, {3, 4}, 4);
  auto* bits = static_cast<uint16_t*>(xv.raw_mutable_data());
  bits[0] = t == bf16 ? 0x7f81 : 0x7c01;  // signalling NaNs with payloads
  bits[5] = t == bf16 ? 0xffc3 : 0xfe05;
  std::vector<bool> mv(24);
  for (size_t i = 0; i < mv.size(); ++i) mv[i] = i % 3 == 0;
  FeedList feeds = {{x, xv}, {m, Tensor::from_vector(mv, {4, 6})}};
  Executable e = compile(g, {wide + wide, y}, feeds);
  std::vector<Tensor> got = e.run(feeds), want = g.run(feeds, std::vector<Tensor>{wide + wide, y});
  // wide + wide computes: equal bits, or NaN on both sides (payloads may differ there, as in any
  // f32 arithmetic); the pad and the select only move values: bit for bit.
  ASSERT_EQ(got[0].shape(), want[0].shape());
  const auto* g0 = static_cast<const uint16_t*>(got[0].raw_data());
  const auto* w0 = static_cast<const uint16_t*>(want[0].raw_data());
  auto is_nan = [&](uint16_t b) {
    return t == bf16 ? (b & 0x7fff) > 0x7f80 : (b & 0x7fff) > 0x7c00;
  };
  for (int64_t i = 0; i < got[0].size(); ++i)
    EXPECT_TRUE(g0[i] == w0[i] || (is_nan(g0[i]) && is_nan(w0[i]))) << "element " << i;
  EXPECT_TRUE(testing::bitwise_equal(got[1], want[1])) << e.fusion_log();
  EXPECT_EQ(e.num_fused_thunks(), 2) << e.fusion_log();
}

// Reductions of bf16/f16 fuse with the loop computing what they fold: sums and products
// accumulate in f64 and max/min in f32, rounding once through f32, as the reference kernels do.
// Row and column folds, the split path (chunks folded in parallel, then combined) and a
// multi-output loop (a relu's gradient and the bias gradient's sum) all give the interpreter's
// bits. NaN and infinities included.
TEST_P(NarrowFusion, ReductionsFuseAndFoldAsTheInterpreterDoes) {
  const DType t = GetParam();
  ExcessPrecision exact(false);
  for (const Shape& shape : {Shape{7, 33}, Shape{3, 70000}, Shape{70000, 5}}) {
    SCOPED_TRACE(shape_str(shape));
    Graph g{"narrow_reduce"};
    Tensor x = g.placeholder(t, shape, "x");
    Tensor y = g.placeholder(t, shape, "y");
    Tensor dz = where(less_equal(y, zeros_like(y)), zeros_like(x), x * 1.5f);  // relu gradient
    std::vector<Tensor> outs = {dz,
                                sum(dz, {0}),
                                sum(x * y, {1}),
                                max(x + y, {0}),
                                min(x * y, {1}),
                                prod(abs(x) * 0.5f + 0.75f, {1}),
                                sum(x - y)};
    Tensor xv = random_narrow(t, shape, 5), yv = random_narrow(t, shape, 6);
    auto* bits = static_cast<uint16_t*>(xv.raw_mutable_data());
    bits[3] = t == bf16 ? 0x7fc0 : 0x7e00;             // NaN
    bits[shape[1] + 1] = t == bf16 ? 0x7f80 : 0x7c00;  // +inf
    FeedList feeds = {{x, xv}, {y, yv}};
    Executable e = compile(g, outs, feeds);
    const std::vector<std::string> thunks = e.thunk_descriptions();
    for (const std::string& d : thunks)
      EXPECT_EQ(d.find("kernel reduce"), std::string::npos) << d << "\n" << e.fusion_log();
    std::vector<Tensor> got = e.run(feeds), want = g.run(feeds, outs);
    for (size_t i = 0; i < outs.size(); ++i) {
      EXPECT_EQ(got[i].dtype(), t);
      EXPECT_TRUE(testing::bitwise_equal(got[i], want[i])) << "output " << i;
    }
  }
}

// A graph over dtype t: a chain of arithmetic, a relu gradient, reductions of chains, and
// values read by other dtypes (a convert to f32, a comparison).
struct MixedGraph {
  Graph g{"narrow_excess"};
  Tensor x, y, b;
  std::vector<Tensor> outs;
  MixedGraph(DType t, const Shape& shape) {
    x = g.placeholder(t, shape, "x");
    y = g.placeholder(t, shape, "y");
    b = g.placeholder(t, {shape[1]}, "b");
    Tensor h = x * y + b;
    Tensor chain = tanh(h) + exp(h * 0.25f) / (abs(h) + 1.0f);
    Tensor dz = where(less_equal(y, zeros_like(y)), zeros_like(x), x * 1.5f);
    // h leaves its dtype: converted to f32 and compared (it is rounded first).
    Tensor wide = convert(h, f32) * 3.0f;
    Tensor flag = where(greater(h * 2.0f, ones_like(h)), x, y);
    outs = {chain, dz, sum(dz, {0}), sum(x * y + b, {1}), max(h * h, {1}),
            prod(abs(x) * 0.5f + 0.75f, {1}), wide, flag};
  }
  FeedList feeds(const Tensor& xv, const Tensor& yv, const Tensor& bv) const {
    return {{x, xv}, {y, yv}, {b, bv}};
  }
};

// With excess precision the narrow graph's compiled results are exactly the f32 graph's
// (compiled, on the same values widened) rounded to the narrow type where stored, with the
// narrow values read by a convert or a comparison rounded first: one rounding per stored value.
// Without it they are the interpreter's, which round each op; the two differ.
TEST_P(NarrowFusion, WithExcessPrecisionAChainRoundsOnceWhereItIsStored) {
  const DType t = GetParam();
  for (const Shape& shape : {Shape{7, 33}, Shape{3, 70000}, Shape{70000, 5}}) {
    SCOPED_TRACE(shape_str(shape));
    Tensor xv = random_narrow(t, shape, 7), yv = random_narrow(t, shape, 8);
    Tensor bv = random_narrow(t, {shape[1]}, 9);
    auto* bits = static_cast<uint16_t*>(xv.raw_mutable_data());
    bits[3] = t == bf16 ? 0x7fc0 : 0x7e00;             // NaN
    bits[shape[1] + 1] = t == bf16 ? 0x7f80 : 0x7c00;  // +inf

    MixedGraph narrow(t, shape), wide(f32, shape);
    FeedList nf = narrow.feeds(xv, yv, bv);
    // In the f32 graph the narrow graph's rounding points are explicit: h is rounded where the
    // narrow graph converts or compares it.
    Tensor h = wide.x * wide.y + wide.b;
    wide.outs[6] = convert(convert(h, t), f32) * 3.0f;
    wide.outs[7] =
        where(greater(convert(convert(h * 2.0f, t), f32), ones_like(h)), wide.x, wide.y);
    FeedList wf = wide.feeds(convert(xv, f32), convert(yv, f32), convert(bv, f32));

    std::vector<Tensor> got, rounded_wide, interpreted = narrow.g.run(nf, narrow.outs);
    {
      ExcessPrecision excess(true);
      Executable e = compile(narrow.g, narrow.outs, nf);
      for (const std::string& d : e.thunk_descriptions())
        EXPECT_EQ(d.find("kernel"), std::string::npos) << d << "\n" << e.fusion_log();
      got = e.run(nf);
      rounded_wide = compile(wide.g, wide.outs, wf).run(wf);
    }
    int64_t differ_from_interpreter = 0;
    for (size_t i = 0; i < narrow.outs.size(); ++i) {
      SCOPED_TRACE("output " + std::to_string(i));
      Tensor want = i == 6 ? rounded_wide[i] : convert(rounded_wide[i], t);
      ASSERT_EQ(got[i].dtype(), want.dtype());
      EXPECT_TRUE(testing::bitwise_equal(got[i], want));
      if (got[i].dtype() == t) differ_from_interpreter += bits_differing(got[i], interpreted[i]);
    }
    EXPECT_GT(differ_from_interpreter, 0) << "the chains round as often as the interpreter's";
    // Switched off, the same graph compiles again (not from the kernel cache) to the
    // interpreter's bits.
    ExcessPrecision exact(false);
    std::vector<Tensor> per_op = compile(narrow.g, narrow.outs, nf).run(nf);
    for (size_t i = 0; i < narrow.outs.size(); ++i)
      EXPECT_TRUE(testing::bitwise_equal(per_op[i], interpreted[i])) << "output " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Types, NarrowFusion, ::testing::Values(bf16, f16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace kiln::compiler
