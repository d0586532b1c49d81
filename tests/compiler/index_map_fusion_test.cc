// Layout ops fused as index maps (#13 step 3): transpose, slice, reverse, broadcast and reshape
// become strided reads inside their consumers' loops instead of copies, concatenate and pad
// reads of each input inside its piece; compiled results equal the interpreter's bit for bit,
// and where a layout op cannot fuse the log says why.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

#include "compiler/executable.h"
#include "kiln/kiln.h"
#include "tests/compiler/compiler_test_util.h"

namespace kiln::compiler {
namespace {

using ::testing::HasSubstr;

Tensor random_tensor(Shape shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0, 1);
  std::vector<float> v(num_elements(shape));
  for (float& x : v) x = normal(rng);
  return Tensor::from_vector(v, shape);
}

// Compiles `out` with `feeds`, checks it against the interpreter bit for bit, and returns the
// executable for the caller's structural checks.
Executable compile_and_check(Graph& g, const std::vector<Tensor>& out, const FeedList& feeds) {
  Executable e = compile(g, out, feeds);
  std::vector<Tensor> got = e.run(feeds), want = g.run(feeds, out);
  EXPECT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size() && i < want.size(); ++i)
    EXPECT_TRUE(testing::bitwise_equal(got[i], want[i])) << "output " << i << "\n"
                                                         << e.fusion_log();
  return e;
}

int kernel_thunks(const Executable& e) { return e.num_thunks() - e.num_fused_thunks(); }

TEST(IndexMapFusion, TransposeIsReadThroughItsMapInsideTheConsumersLoop) {
  Graph g{"transpose"};
  Tensor x = g.placeholder(f32, {3, 5}, "x");
  Tensor b = g.placeholder(f32, {5, 3}, "b");
  Tensor y = exp(transpose(x, {1, 0})) + b;
  Executable e = compile_and_check(g, {y}, {{x, random_tensor({3, 5}, 1)}, {b, random_tensor({5, 3}, 2)}});
  EXPECT_EQ(e.num_fused_thunks(), 1) << e.fusion_log();
  EXPECT_EQ(kernel_thunks(e), 0) << "the transpose still runs as a copy\n" << e.fusion_log();
}

TEST(IndexMapFusion, SliceReverseAndBroadcastFuseWithTheirConsumers) {
  Graph g{"slice_reverse_broadcast"};
  Tensor x = g.placeholder(f32, {6, 7}, "x");
  Tensor v = g.placeholder(f32, {3}, "v");
  Tensor s = slice(x, {1, 2}, {6, 5}, {2, 1});  // rows 1,3,5; columns 2..4: [3, 3]
  Tensor r = reverse(s, {0, 1});
  Tensor bv = broadcast_in_dim(v, {3, 3}, {1});
  Tensor y = r * bv - s;
  Executable e = compile_and_check(g, {y}, {{x, random_tensor({6, 7}, 3)}, {v, random_tensor({3}, 4)}});
  EXPECT_EQ(e.num_thunks(), 1) << e.fusion_log();
}

// Attention's head split: [B, T, H*D] -> reshape [B, T, H, D] -> transpose [B, H, T, D].
TEST(IndexMapFusion, AReshapeThenTransposeChainComposesIntoOneView) {
  Graph g{"heads"};
  Tensor x = g.placeholder(f32, {2, 3, 4 * 5}, "x");
  Tensor heads = transpose(reshape(x, {2, 3, 4, 5}), {0, 2, 1, 3});
  Tensor y = heads * 0.5f + 1.0f;
  Executable e = compile_and_check(g, {y}, {{x, random_tensor({2, 3, 20}, 5)}});
  EXPECT_EQ(e.num_thunks(), 1) << e.fusion_log();
}

TEST(IndexMapFusion, AReshapeOfATransposedViewMaterialisesTheTransposeAndSaysWhy) {
  Graph g{"merge_heads"};
  Tensor x = g.placeholder(f32, {2, 4, 3, 5}, "x");
  Tensor merged = reshape(transpose(x, {0, 2, 1, 3}), {2, 3, 20});
  Tensor y = merged + 1.0f;
  Executable e = compile_and_check(g, {y}, {{x, random_tensor({2, 4, 3, 5}, 6)}});
  EXPECT_THAT(e.fusion_log(), HasSubstr("compose to no strided view")) << e.fusion_log();
}

TEST(IndexMapFusion, AReductionFoldsATransposedView) {
  Graph g{"reduce_transposed"};
  Tensor x = g.placeholder(f32, {4, 6}, "x");
  Tensor y = sum(transpose(x, {1, 0}) * 2.0f, {1});  // [6]
  Executable e = compile_and_check(g, {y}, {{x, random_tensor({4, 6}, 7)}});
  EXPECT_EQ(e.num_thunks(), 1) << e.fusion_log();
}

TEST(IndexMapFusion, ALayoutOpAloneIsLeftToItsKernel) {
  Graph g{"alone"};
  Tensor x = g.placeholder(f32, {3, 4}, "x");
  Tensor y = transpose(x, {1, 0});
  Executable e = compile_and_check(g, {y}, {{x, random_tensor({3, 4}, 8)}});
  EXPECT_EQ(e.num_fused_thunks(), 0) << e.fusion_log();
  EXPECT_THAT(e.fusion_log(), HasSubstr("no loop reads it")) << e.fusion_log();
}

// a = exp(x) is computed by a loop; transpose(a) + a may not read a at other indices in that
// same loop, so the transpose reads a's buffer from the next loop.
TEST(IndexMapFusion, ALayoutOpDoesNotReadAValueItsOwnLoopComputes) {
  Graph g{"own_value"};
  Tensor x = g.placeholder(f32, {4, 4}, "x");
  Tensor a = exp(x);
  Tensor y = transpose(a, {1, 0}) + a;
  Executable e = compile_and_check(g, {y}, {{x, random_tensor({4, 4}, 9)}});
  EXPECT_THAT(e.fusion_log(), HasSubstr("would read a value the same loop computes"))
      << e.fusion_log();
  EXPECT_EQ(e.num_fused_thunks(), 2) << e.fusion_log();
}

// A layout op whose output is also fetched is stored by the loop that reads it.
TEST(IndexMapFusion, AFetchedLayoutOpIsStoredByTheLoop) {
  Graph g{"fetched"};
  Tensor x = g.placeholder(f32, {3, 4}, "x");
  Tensor t = transpose(x, {1, 0});
  Tensor y = t * t;
  Executable e = compile_and_check(g, {t, y}, {{x, random_tensor({3, 4}, 10)}});
  EXPECT_EQ(e.num_thunks(), 1) << e.fusion_log();
}

TEST(IndexMapFusion, IntegerAndBoolViewsFuseToo) {
  Graph g{"ints"};
  Tensor x = g.placeholder(i32, {2, 3}, "x");
  Tensor m = g.placeholder(bool_, {3, 2}, "m");
  Tensor t = transpose(x, {1, 0});
  Tensor y = where(m, t, t * 2);
  Tensor xv = Tensor::from_vector(std::vector<int32_t>{1, -2, 3, -4, 5, -6}, {2, 3});
  Tensor mv = Tensor::from_vector(std::vector<bool>{true, false, false, true, true, false}, {3, 2});
  Executable e = compile_and_check(g, {y}, {{x, xv}, {m, mv}});
  EXPECT_EQ(e.num_thunks(), 1) << e.fusion_log();
}

// Rows 1-2 of x, flattened: a view reading its elements in order from offset 5, which the
// flat loop reads at that offset.
TEST(IndexMapFusion, AnInOrderViewAtAnOffsetIsReadByTheFlatLoop) {
  Graph g{"rows"};
  Tensor x = g.placeholder(f32, {4, 5}, "x");
  Tensor y = exp(reshape(slice(x, {1, 0}, {3, 5}), {10})) + 1.0f;
  Executable e = compile_and_check(g, {y}, {{x, random_tensor({4, 5}, 11)}});
  EXPECT_EQ(e.num_thunks(), 1) << e.fusion_log();
}

// The kernel cache keys a flat loop without sizes; a view's offset must still tell two kernels
// apart (a plain convert of one element, then one of x[3]).
TEST(IndexMapFusion, TheKernelCacheKeepsViewsApartFromPlainReads) {
  Graph plain{"plain"};
  Tensor p = plain.placeholder(f32, {1}, "p");
  compile_and_check(plain, {convert(p, i64)}, {{p, Tensor::from_vector(std::vector<float>{7}, {1})}});
  Graph g{"view"};
  Tensor x = g.placeholder(f32, {4}, "x");
  Tensor y = convert(slice(x, {3}, {4}), i64);
  Executable e = compile_and_check(g, {y}, {{x, Tensor::from_vector(std::vector<float>{1, 2, 3, 4}, {4})}});
  EXPECT_EQ(e.run({{x, Tensor::from_vector(std::vector<float>{1, 2, 3, 4}, {4})}})[0].item<int64_t>(), 4);
}

// ---- piecewise layout ops: concatenate and pad ----

TEST(PieceFusion, ConcatenateAlongTheInnerAxisIsReadPieceByPieceInTheConsumersLoop) {
  Graph g{"concat_inner"};
  Tensor a = g.placeholder(f32, {3, 5}, "a");
  Tensor b = g.placeholder(f32, {3, 2}, "b");
  Tensor c = g.placeholder(f32, {3, 4}, "c");
  Tensor y = exp(concatenate({a, b, c}, 1)) * 2.0f;
  Executable e = compile_and_check(g, {y}, {{a, random_tensor({3, 5}, 20)},
                                            {b, random_tensor({3, 2}, 21)},
                                            {c, random_tensor({3, 4}, 22)}});
  EXPECT_EQ(e.num_thunks(), 1) << "the concatenate still runs as a copy\n" << e.fusion_log();
}

TEST(PieceFusion, ConcatenateAlongAnOuterAxisPicksThePiecePerRow) {
  Graph g{"concat_outer"};
  Tensor a = g.placeholder(f32, {2, 3, 4}, "a");
  Tensor b = g.placeholder(f32, {2, 1, 4}, "b");
  Tensor w = g.placeholder(f32, {2, 4, 4}, "w");
  Tensor y = concatenate({a, b}, 1) - w;  // along the middle axis
  Executable e = compile_and_check(g, {y}, {{a, random_tensor({2, 3, 4}, 23)},
                                            {b, random_tensor({2, 1, 4}, 24)},
                                            {w, random_tensor({2, 4, 4}, 25)}});
  EXPECT_EQ(e.num_thunks(), 1) << e.fusion_log();
}

TEST(PieceFusion, PadIsReadInsideItsPieceAndTheValueElsewhere) {
  Graph g{"pad"};
  Tensor x = g.placeholder(f32, {3, 4}, "x");
  Tensor y = logistic(pad(x, {1, 2}, {2, 0}, -1.5)) + 1.0f;  // [6, 6]
  Executable e = compile_and_check(g, {y}, {{x, random_tensor({3, 4}, 26)}});
  EXPECT_EQ(e.num_thunks(), 1) << e.fusion_log();
}

TEST(PieceFusion, InteriorPaddingIsReadEveryStepElements) {
  Graph g{"pad_interior"};
  Tensor x = g.placeholder(f32, {3, 4}, "x");
  Tensor y = pad(x, {0, 1}, {1, 1}, 0.25, {2, 1}) * 3.0f;  // [8, 9]
  Executable e = compile_and_check(g, {y}, {{x, random_tensor({3, 4}, 27)}});
  EXPECT_EQ(e.num_thunks(), 1) << e.fusion_log();
}

TEST(PieceFusion, IntegerAndBoolPiecesFuseToo) {
  Graph g{"int_pieces"};
  Tensor x = g.placeholder(i32, {2, 3}, "x");
  Tensor m = g.placeholder(bool_, {2, 2}, "m");
  Tensor mask = concatenate({m, m}, 1);        // [2, 4] bool
  Tensor wide = pad(x, {0, 1}, {0, 0}, 7);     // [2, 4] i32
  Tensor y = where(mask, wide, wide * 3);
  Tensor xv = Tensor::from_vector(std::vector<int32_t>{1, -2, 3, -4, 5, -6}, {2, 3});
  Tensor mv = Tensor::from_vector(std::vector<bool>{true, false, false, true}, {2, 2});
  Executable e = compile_and_check(g, {y}, {{x, xv}, {m, mv}});
  EXPECT_EQ(e.num_thunks(), 1) << e.fusion_log();
}

// A trivial pad of a = exp(x) read beside a itself: the loop computing a cannot also read a's
// buffer at the pad's positions, so the pad reads a from the next loop.
TEST(PieceFusion, APieceIsNotReadFromTheLoopThatComputesIt) {
  Graph g{"own_piece"};
  Tensor x = g.placeholder(f32, {4, 3}, "x");
  Tensor a = exp(x);
  Tensor y = concatenate({a, slice(x, {0, 0}, {0, 3})}, 0) + a;  // a and an empty piece
  Executable e = compile_and_check(g, {y}, {{x, random_tensor({4, 3}, 28)}});
  EXPECT_THAT(e.fusion_log(), HasSubstr("would read a value the same loop computes"))
      << e.fusion_log();
}

TEST(PieceFusion, AReductionDoesNotFoldPiecesAndSaysWhy) {
  Graph g{"reduce_pad"};
  Tensor x = g.placeholder(f32, {3, 4}, "x");
  Tensor y = sum(pad(x, {1, 1}, {1, 1}) * 2.0f, {1});
  Executable e = compile_and_check(g, {y}, {{x, random_tensor({3, 4}, 29)}});
  EXPECT_THAT(e.fusion_log(), HasSubstr("the loops of reductions do not read")) << e.fusion_log();
}

// The same shapes split at other bounds are other kernels.
TEST(PieceFusion, TheKernelCacheKeepsPieceBoundsApart) {
  for (int64_t first : {2, 4}) {
    Graph g{"split"};
    Tensor a = g.placeholder(f32, {first}, "a");
    Tensor b = g.placeholder(f32, {6 - first}, "b");
    compile_and_check(g, {concatenate({a, b}, 0) + 1.0f},
                      {{a, random_tensor({first}, 30)}, {b, random_tensor({6 - first}, 31)}});
  }
}

// Random concatenates and pads of ranks 1-3 (some pieces empty, some dimensions 1), each read
// by a consumer, against the interpreter.
TEST(PieceFusion, RandomConcatenatesAndPadsMatchTheInterpreter) {
  std::mt19937 rng(2026);
  auto draw = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int trial = 0; trial < 40; ++trial) {
    const int rank = draw(1, 3);
    Shape shape(rank);
    for (int64_t& d : shape) d = draw(1, 5);
    Graph g{"random_pieces"};
    FeedList feeds;
    Tensor y;
    std::string what;
    if (trial % 2 == 0) {
      const int64_t axis = draw(0, rank - 1);
      std::vector<Tensor> xs;
      for (int i = 0, n = draw(1, 4); i < n; ++i) {
        Shape s = shape;
        s[axis] = draw(0, 3);
        Tensor x = g.placeholder(f32, s, "x" + std::to_string(i));
        feeds.push_back({x, random_tensor(s, 100 + trial * 8 + i)});
        xs.push_back(x);
        what += shape_str(s);
      }
      Tensor c = concatenate(xs, axis);
      if (num_elements(c.shape()) == 0) continue;
      y = c * c + 1.0f;
      what = "concatenate along " + std::to_string(axis) + " of " + what;
    } else {
      Axes low(rank), high(rank), interior(rank);
      for (int d = 0; d < rank; ++d) {
        low[d] = draw(0, 2);
        high[d] = draw(0, 2);
        interior[d] = draw(0, 2);
      }
      Tensor x = g.placeholder(f32, shape, "x");
      feeds.push_back({x, random_tensor(shape, 200 + trial)});
      y = exp(pad(x, low, high, 0.5, interior));
      what = "pad of " + shape_str(shape) + " low " + shape_str(low) + " high " +
             shape_str(high) + " interior " + shape_str(interior);
    }
    SCOPED_TRACE(what);
    Executable e = compile_and_check(g, {y}, feeds);
    EXPECT_EQ(e.num_thunks(), 1) << e.fusion_log();
  }
}

}  // namespace
}  // namespace kiln::compiler
