// The compiled execution path (compiler/executable.h, compiler/passes/fusion.h): fused thunks
// and reference-kernel thunks agree with the interpreter; fusion groups and refusals.
#include "compiler/executable.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <thread>

#include "compiler/compile_cache.h"
#include "kiln/kiln.h"
#include "kiln/nn.h"
#include "kiln/optim.h"
#include "tests/compiler/compiler_test_util.h"
#include "tests/compiler/mlp_step.h"
#include "tests/testing/values.h"

namespace kiln::compiler {
namespace {

using ::testing::HasSubstr;

Tensor random_tensor(Shape shape, std::mt19937& rng, float scale = 1) {
  std::normal_distribution<float> normal(0, scale);
  std::vector<float> v(num_elements(shape));
  for (float& x : v) x = normal(rng);
  return Tensor::from_vector(v, shape);
}

using testing::expect_close;

TEST(ExecutableTest, ElementwiseChainBecomesOneFusedThunk) {
  Graph g{"chain"};
  Tensor x = g.placeholder(f32, {kUnknownDim, 8}, "x");
  Tensor y = g.placeholder(f32, {8}, "y");
  Tensor h = tanh(x * 0.5f + y);  // mul, add, tanh
  Tensor out = exp(neg(abs(h))) - maximum(h, y) * 3.0f;
  std::mt19937 rng(1);
  FeedList feeds = {{x, random_tensor({5, 8}, rng)}, {y, random_tensor({8}, rng)}};
  Executable e = compile(g, {out}, feeds);
  EXPECT_EQ(e.num_fused_thunks(), 1) << e.fusion_log();
  int kernels = 0;
  for (const std::string& d : e.thunk_descriptions()) {
    if (d.rfind("fused(", 0) == 0) {
      EXPECT_THAT(d, HasSubstr("tanh"));
      EXPECT_THAT(d, HasSubstr("exp"));
    } else {
      EXPECT_THAT(d, HasSubstr("constant")) << d;  // only the scalar constants remain
      ++kernels;
    }
  }
  EXPECT_EQ(e.num_thunks(), 1 + kernels);
  expect_close(e.run(feeds), g.run(feeds, std::vector<Tensor>{out}));
  // Run twice: the executable is reusable.
  FeedList feeds2 = {{x, random_tensor({5, 8}, rng)}, {y, random_tensor({8}, rng)}};
  expect_close(e.run(feeds2), g.run(feeds2, std::vector<Tensor>{out}));
}

TEST(ExecutableTest, ScalarsAndZeroSizedShapes) {
  Graph g{"edge"};
  Tensor x = g.placeholder(f32, {kUnknownDim, 3}, "x");
  Tensor s = g.placeholder(f32, {}, "s");
  Tensor scalar_out = s * s + 1.0f;  // all-scalar group
  Tensor empty_out = exp(x) * s;
  for (int64_t rows : {0, 2}) {
    std::vector<float> xv(rows * 3, 0.0f);
    FeedList feeds = {{x, Tensor::from_vector(xv, {rows, 3})}, {s, Tensor::scalar<float>(3)}};
    Executable e = compile(g, {scalar_out, empty_out}, feeds);
    std::vector<Tensor> got = e.run(feeds);
    EXPECT_EQ(got[0].shape(), Shape{});
    EXPECT_EQ(got[0].to_vector<float>(), std::vector<float>{10});  // 3 * 3 + 1
    EXPECT_EQ(got[1].shape(), (Shape{rows, 3}));
    EXPECT_EQ(got[1].to_vector<float>(), std::vector<float>(rows * 3, 3.0f));  // exp(0) * 3
  }
}

TEST(ExecutableTest, MultiConsumerValueIsFusedWhenAllConsumersAreInTheGroup) {
  Graph g{"multi"};
  Tensor x = g.placeholder(f32, {4, 4}, "x");
  Tensor a = exp(x);
  Tensor b = a * 2.0f;
  Tensor c = a + 1.0f;
  Tensor d = b * c;  // a has two consumers, both fused
  std::mt19937 rng(2);
  FeedList feeds = {{x, random_tensor({4, 4}, rng)}};
  Executable e = compile(g, {d, b}, feeds);  // b is also fetched: a second group output
  EXPECT_EQ(e.num_fused_thunks(), 1) << e.fusion_log();
  bool two_outputs = false;
  for (const std::string& s : e.thunk_descriptions()) two_outputs |= s.find("2 outputs") != s.npos;
  EXPECT_TRUE(two_outputs) << e.fusion_log();
  expect_close(e.run(feeds), g.run(feeds, {d, b}));
}

TEST(ExecutableTest, FusionThatWouldCreateACycleIsRefusedWithItsReason) {
  Graph g{"cycle"};
  Tensor x = g.placeholder(f32, {4, 4}, "x");
  Tensor w = g.placeholder(f32, {4, 4}, "w");
  Tensor a = exp(x);
  Tensor b = matmul(a, w);  // leaves the would-be group
  Tensor c = a + b;         // and comes back
  std::mt19937 rng(3);
  FeedList feeds = {{x, random_tensor({4, 4}, rng)}, {w, random_tensor({4, 4}, rng)}};
  Executable e = compile(g, {c}, feeds);
  EXPECT_THAT(e.fusion_log(), HasSubstr("would create a cycle")) << e.fusion_log();
  EXPECT_EQ(e.num_fused_thunks(), 2) << e.fusion_log();
  expect_close(e.run(feeds), g.run(feeds, std::vector<Tensor>{c}));
}

TEST(ExecutableTest, UnsupportedDtypesAndBroadcastProducersAreRefusedWithReasons) {
  Graph g{"refuse"};
  Tensor x = g.placeholder(i32, {3}, "x");
  Tensor b = g.placeholder(bool_, {3}, "b");
  Tensor y = g.placeholder(f32, {3}, "y");
  Tensor z = g.placeholder(f32, {2, 3}, "z");
  Tensor r1 = call_op("logical_and", {b, b})[0];  // not an emitter op: no note needed
  Tensor u = g.placeholder(u8, {3}, "u");
  Tensor r2 = call_op("add", {u, u})[0];          // u8: a dtype the emitter does not support
  Tensor small = exp(y);                          // [3] broadcast into [2,3]
  Tensor big = small * z;
  FeedList feeds = {{x, Tensor::from_list<int32_t>({1, 2, 3})},
                    {b, Tensor::from_vector(std::vector<bool>{true, false, true}, {3})},
                    {y, Tensor::from_list<float>({0.5f, 1, 2})},
                    {z, Tensor::from_list<float>({1, 2, 3, 4, 5, 6}, {2, 3})},
                    {u, Tensor::from_list<uint8_t>({1, 2, 200})}};
  std::vector<Tensor> fetches = {r1, big};
  bool add_ok = true;
  try {
    g.run(feeds, r2);
  } catch (const Error&) {
    add_ok = false;  // the reference kernel refuses bool add too: leave it out
  }
  if (add_ok) fetches.push_back(r2);
  Executable e = compile(g, fetches, feeds);
  if (add_ok) EXPECT_THAT(e.fusion_log(), HasSubstr("unsupported dtypes")) << e.fusion_log();
  EXPECT_THAT(e.fusion_log(), HasSubstr("is broadcast to f32[2,3]")) << e.fusion_log();
  expect_close(e.run(feeds), g.run(feeds, fetches));
}

TEST(ExecutableTest, MixesFusedAndKernelThunks) {
  Graph g{"mixed"};
  Tensor x = g.placeholder(f32, {kUnknownDim, 6}, "x");
  Tensor w = g.placeholder(f32, {6, 4}, "w");
  Tensor bias = g.placeholder(f32, {4}, "b");
  Tensor h = relu(matmul(x, w) + bias);
  Tensor r = reshape(transpose(h), {-1});
  Tensor s = sum(h * h, {1}, true);
  Tensor out = h / (s + 1.0f);
  Tensor m = mean(out, {0});
  std::mt19937 rng(4);
  FeedList feeds = {{x, random_tensor({7, 6}, rng)},
                    {w, random_tensor({6, 4}, rng)},
                    {bias, random_tensor({4}, rng)}};
  std::vector<Tensor> fetches = {out, r, m, s};
  Executable e = compile(g, fetches, feeds);
  EXPECT_GE(e.num_fused_thunks(), 2) << e.fusion_log();
  EXPECT_GT(e.num_thunks(), e.num_fused_thunks());
  expect_close(e.run(feeds), g.run(feeds, fetches));
}

KILN_REGISTER_OP(executable_test_softsign).input("x").shape_fn([](const InferContext& ctx) {
  if (ctx.input(0).dtype != f32) ctx.fail("expects f32, got " + ctx.input(0).str());
  return std::vector<TensorType>{ctx.input(0)};
});
KILN_REGISTER_KERNEL(executable_test_softsign).dtypes({f32}).fn([](KernelContext& ctx) {
  auto x = ctx.input(0).data<float>();
  auto y = ctx.allocate_output(0).mutable_data<float>();
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] / (1 + (x[i] < 0 ? -x[i] : x[i]));
});

TEST(ExecutableTest, CustomOpRunsAsAKernelThunk) {
  Graph g{"custom"};
  Tensor x = g.placeholder(f32, {3}, "x");
  Tensor y = call_op("executable_test_softsign", {x * 2.0f})[0] + 1.0f;
  FeedList feeds = {{x, Tensor::from_list<float>({-1, 0, 1.5f})}};
  Executable e = compile(g, {y}, feeds);
  bool custom = false;
  for (const std::string& d : e.thunk_descriptions())
    custom |= d == "kernel executable_test_softsign";
  EXPECT_TRUE(custom);
  // By hand: 2x = -2, 0, 3 -> softsign -2/3, 0, 3/4 -> + 1.
  std::vector<float> got = e.run(feeds)[0].to_vector<float>();
  ASSERT_EQ(got.size(), 3u);
  EXPECT_NEAR(got[0], 1.0f / 3, 1e-6);
  EXPECT_NEAR(got[1], 1.0f, 1e-6);
  EXPECT_NEAR(got[2], 1.75f, 1e-6);
}

TEST(ExecutableTest, FeedsAreCheckedWithClearErrors) {
  Graph g{"feeds"};
  Tensor x = g.placeholder(f32, {kUnknownDim}, "x");
  Tensor y = g.placeholder(f32, {2}, "y");
  Tensor out = x * 2.0f + y;
  FeedList feeds = {{x, Tensor::from_list<float>({1, 2})}, {y, Tensor::from_list<float>({3, 4})}};
  Executable e = compile(g, {out}, feeds);
  EXPECT_EQ(e.run(feeds)[0].to_vector<float>(), (std::vector<float>{5, 8}));
  try {
    e.run({{x, Tensor::from_list<float>({1, 2})}});
    ADD_FAILURE() << "missing feed accepted";
  } catch (const Error& err) {
    EXPECT_THAT(err.what(), HasSubstr("missing feed for placeholder 'y'"));
  }
  try {
    e.run({{x, Tensor::from_list<float>({1, 2, 3})}, {y, Tensor::from_list<float>({3, 4})}});
    ADD_FAILURE() << "wrong shape accepted";
  } catch (const Error& err) {
    EXPECT_THAT(err.what(), HasSubstr("compiled for f32[2]"));
  }
  try {
    e.run({{x, Tensor::from_list<int32_t>({1, 2})}, {y, Tensor::from_list<float>({3, 4})}});
    ADD_FAILURE() << "wrong dtype accepted";
  } catch (const Error& err) {
    EXPECT_THAT(err.what(), HasSubstr("feed for placeholder 'x' is i32[2]"));
  }
  EXPECT_THROW(e.run({{out, Tensor::from_list<float>({1, 2})}}), Error);
  try {
    compile(g, {out}, {{y, Tensor::from_list<float>({3, 4})}});
    ADD_FAILURE() << "unknown dims compiled";
  } catch (const Error& err) {
    EXPECT_THAT(err.what(), HasSubstr("unknown dimensions"));
  }
}

TEST(ExecutableTest, MlpTrainingStepMatchesTheInterpreter) {
  test_models::MlpStep step = test_models::make_mlp_step(/*in=*/16, /*hidden_units=*/32,
                                                          /*classes=*/10, /*batch=*/8);
  const Graph& g = step.graph;
  const std::vector<Tensor>& fetches = step.fetches;
  const FeedList& feeds = step.feeds;
  Executable e = compile(g, fetches, feeds);
  EXPECT_GT(e.num_fused_thunks(), 5) << e.fusion_log();
  expect_close(e.run(feeds), g.run(feeds, fetches), 1e-5);
}

TEST(ExecutableTest, MlpStepMemoryPlanIsConsistent) {
  test_models::MlpStep step = test_models::make_mlp_step(/*in=*/16, /*hidden_units=*/32,
                                                          /*classes=*/10, /*batch=*/8);
  Executable e = compile(step.graph, step.fetches, step.feeds);
  MemoryStats m = e.memory_stats();
  EXPECT_GT(m.num_buffers, 10);
  EXPECT_GT(m.num_reused, 0);
  EXPECT_GT(m.num_in_place, 0);
  EXPECT_GE(m.arena_bytes, m.live_min_bytes);
  EXPECT_LT(m.arena_bytes, m.no_reuse_bytes);  // reuse pays
  EXPECT_GE(m.peak_vs_live_min(), 1.0);
  // Outside the arena, by hand: x f32[8,16] 512 bytes, y i64[8] 64, seed 8, learning rate 4,
  // iteration 4, and 874 parameters (16*32 + 32 + 32*10 + 10) fed three times (value, m, v)
  // as f32: 10488. Fetched: the loss (4) and the new parameters and slots (10488).
  EXPECT_EQ(m.fed_bytes, 512 + 64 + 8 + 4 + 4 + 10488);
  EXPECT_EQ(m.output_bytes, 4 + 10488);
  EXPECT_EQ(m.outside_bytes(), m.fed_bytes + m.output_bytes + m.constant_bytes);
}

TEST(ExecutableTest, OutputsNeverAliasTheArenaOfALaterRun) {
  Graph g{"alias"};
  Tensor x = g.placeholder(f32, {4, 3}, "x");
  Tensor w = g.placeholder(f32, {3, 5}, "w");
  Tensor h = matmul(x, w);                    // an arena value
  Tensor flat = reshape(h, {20});             // the kernel views h: fetched, so copied out
  Tensor inner = reshape(exp(h), {5, 4});     // views an arena value read after exp's buffer
  Tensor out = matmul(transpose(inner), inner) * 2.0f;
  std::mt19937 rng(7);
  FeedList feeds1 = {{x, random_tensor({4, 3}, rng)}, {w, random_tensor({3, 5}, rng)}};
  FeedList feeds2 = {{x, random_tensor({4, 3}, rng)}, {w, random_tensor({3, 5}, rng)}};
  std::vector<Tensor> fetches = {flat, out, inner};
  Executable e = compile(g, fetches, feeds1);
  std::vector<Tensor> first = e.run(feeds1);
  std::vector<Tensor> want1 = g.run(feeds1, fetches);
  expect_close(first, want1);
  std::vector<Tensor> second = e.run(feeds2);
  expect_close(second, g.run(feeds2, fetches));
  expect_close(first, want1);  // the second run did not write over the first one's outputs
}

TEST(ExecutableTest, FusedElementwiseWritesOverADyingInput) {
  Graph g{"in_place"};
  Tensor x = g.placeholder(f32, {6, 4}, "x");
  Tensor w = g.placeholder(f32, {4, 4}, "w");
  Tensor h = matmul(x, w);            // dies in the fused thunk below
  Tensor a = tanh(h) * 3.0f + 1.0f;   // same shape: may take h's buffer
  Tensor out = matmul(a, w);
  std::mt19937 rng(8);
  FeedList feeds = {{x, random_tensor({6, 4}, rng)}, {w, random_tensor({4, 4}, rng)}};
  Executable e = compile(g, {out}, feeds);
  EXPECT_EQ(e.memory_stats().num_in_place, 1);
  EXPECT_EQ(e.memory_stats().num_buffers, 2);                // h and a; out is fetched
  EXPECT_EQ(e.memory_stats().arena_bytes, 128);  // one buffer: 96 bytes, aligned to 64
  expect_close(e.run(feeds), g.run(feeds, std::vector<Tensor>{out}));
}

// Records where allocate_output put its output.
const void* last_twice_output = nullptr;
KILN_REGISTER_OP(executable_test_twice).input("x").shape_fn([](const InferContext& ctx) {
  return std::vector<TensorType>{ctx.input(0)};
});
KILN_REGISTER_KERNEL(executable_test_twice).dtypes({f32}).fn([](KernelContext& ctx) {
  auto x = ctx.input(0).data<float>();
  Tensor& out = ctx.allocate_output(0);
  auto y = out.mutable_data<float>();
  for (size_t i = 0; i < x.size(); ++i) y[i] = 2 * x[i];
  last_twice_output = out.raw_data();
});

TEST(ExecutableTest, KernelOpOutputsAreWrittenIntoTheCachedArena) {
  Graph g{"kernel_arena"};
  Tensor x = g.placeholder(f32, {3}, "x");
  Tensor y = call_op("executable_test_twice", {exp(x)})[0] + 1.0f;  // an arena value in between
  FeedList feeds = {{x, Tensor::from_list<float>({0, 0, 0})}};
  Executable e = compile(g, {y}, feeds);
  EXPECT_EQ(e.run(feeds)[0].to_vector<float>(), std::vector<float>(3, 3.0f));  // 2 * e^0 + 1
  const void* first = last_twice_output;
  EXPECT_EQ(e.run(feeds)[0].to_vector<float>(), std::vector<float>(3, 3.0f));
  EXPECT_EQ(last_twice_output, first);  // the planned buffer of the same arena block
  EXPECT_EQ(e.memory_stats().num_buffers, 2);  // exp's and the kernel's outputs
}

TEST(ExecutableTest, ConcurrentRunsGetTheirOwnArena) {
  test_models::MlpStep step = test_models::make_mlp_step(/*in=*/16, /*hidden_units=*/32,
                                                          /*classes=*/10, /*batch=*/8);
  Executable e = compile(step.graph, step.fetches, step.feeds);
  std::vector<Tensor> want = e.run(step.feeds);
  std::vector<std::vector<std::vector<Tensor>>> got(4);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      for (int k = 0; k < 10; ++k) got[i].push_back(e.run(step.feeds));
    });
  }
  for (std::thread& t : threads) t.join();
  for (const auto& runs : got)
    for (const auto& r : runs) expect_close(r, want, 1e-6);
}

// Random graphs: elementwise (with broadcasting), reshape/transpose/slice, reductions and dot.
bool broadcastable(const Shape& a, const Shape& b) {
  size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < a.size() ? a[a.size() - 1 - i] : 1;
    int64_t db = i < b.size() ? b[b.size() - 1 - i] : 1;
    if (da != db && da != 1 && db != 1) return false;
  }
  return true;
}

TEST(ExecutableTest, RandomGraphsMatchTheInterpreter) {
  int fused_total = 0;
  for (int seed = 0; seed < 300; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    auto pick = [&](int n) { return static_cast<int>(rng() % n); };
    Graph g{"random" + std::to_string(seed)};
    int64_t A = 1 + pick(5), B = 1 + pick(5);
    Tensor p0 = g.placeholder(f32, {kUnknownDim, B}, "p0");
    Tensor p1 = g.placeholder(f32, {A, B}, "p1");
    Tensor p2 = g.placeholder(f32, {B}, "p2");
    FeedList feeds = {{p0, random_tensor({A, B}, rng)},
                      {p1, random_tensor({A, B}, rng)},
                      {p2, random_tensor({B}, rng)}};
    std::vector<Tensor> pool = {p0, p1, p2};
    std::vector<Shape> shapes = {{A, B}, {A, B}, {B}};
    int steps = 4 + pick(12);
    for (int s = 0; s < steps; ++s) {
      int i = pick(static_cast<int>(pool.size()));
      const Tensor x = pool[i];
      const Shape xs = shapes[i];
      Tensor r;
      Shape rs = xs;
      int kind = pick(14);
      if (kind <= 5) {  // binary with broadcasting
        std::vector<int> cands;
        for (size_t j = 0; j < pool.size(); ++j)
          if (broadcastable(xs, shapes[j])) cands.push_back(static_cast<int>(j));
        int j = cands[pick(static_cast<int>(cands.size()))];
        const Tensor& y = pool[j];
        switch (pick(6)) {
          case 0: r = x + y; break;
          case 1: r = x - y; break;
          case 2: r = x * y; break;
          case 3: r = maximum(x, y); break;
          case 4: r = minimum(x, y); break;
          default: r = where(x > y, x, y * 0.5f); break;
        }
        size_t n = std::max(xs.size(), shapes[j].size());
        rs = Shape(n);
        for (size_t k = 0; k < n; ++k) {
          int64_t da = k < xs.size() ? xs[xs.size() - 1 - k] : 1;
          int64_t db = k < shapes[j].size() ? shapes[j][shapes[j].size() - 1 - k] : 1;
          rs[n - 1 - k] = std::max(da, db);
        }
      } else if (kind <= 8) {  // unary
        switch (pick(7)) {
          case 0: r = tanh(x); break;
          case 1: r = exp(tanh(x)); break;
          case 2: r = neg(abs(x)); break;
          case 3: r = sqrt(abs(x) + 1.0f); break;
          case 4: r = sin(x); break;
          case 5: r = convert(convert(x * 4.0f, i32), f32); break;
          default: r = sigmoid(x) * 2.0f; break;
        }
      } else if (kind == 9 && xs.size() == 2) {
        r = transpose(x);
        rs = {xs[1], xs[0]};
      } else if (kind == 10) {
        int64_t n = num_elements(xs);
        r = reshape(x, {n});
        rs = {n};
        if (xs.size() == 1 && n % 2 == 0) {
          r = reshape(x, {2, n / 2});
          rs = {2, n / 2};
        }
      } else if (kind == 11 && !xs.empty() && xs[0] > 1) {
        Axes start(xs.size(), 0), limit(xs.begin(), xs.end());
        start[0] = 1;
        r = slice(x, start, limit);
        rs[0] = xs[0] - 1;
      } else if (kind == 12 && !xs.empty()) {
        int axis = pick(static_cast<int>(xs.size()));
        r = sum(x, {axis}, true);
        rs[axis] = 1;
      } else if (xs.size() == 2) {
        int64_t n = 1 + pick(4);
        std::string name = "w" + std::to_string(s);
        Tensor w = g.placeholder(f32, {xs[1], n}, name);
        feeds.push_back({w, random_tensor({xs[1], n}, rng, 0.5f)});
        r = matmul(x, w);
        rs = {xs[0], n};
      } else {
        r = x * 1.5f;
      }
      pool.push_back(r);
      shapes.push_back(rs);
    }
    std::vector<Tensor> fetches = {pool.back()};
    if (pool.size() > 4 && pick(2)) fetches.push_back(pool[pool.size() - 2]);
    Executable e = compile(g, fetches, feeds);
    fused_total += e.num_fused_thunks();
    std::vector<Tensor> want = g.run(feeds, fetches);
    expect_close(e.run(feeds), want, 1e-4);
    expect_close(e.run(feeds), want, 1e-4);  // over the arena the first run left behind
    MemoryStats m = e.memory_stats();
    EXPECT_LE(m.arena_bytes, m.no_reuse_bytes);
    EXPECT_GE(m.arena_bytes, m.live_min_bytes);
    if (::testing::Test::HasFailure()) {
      ADD_FAILURE() << g.to_text() << "\n" << e.fusion_log();
      return;
    }
  }
  EXPECT_GT(fused_total, 300);
}

}  // namespace
}  // namespace kiln::compiler

namespace kiln::compiler {
namespace {

// An undefined value fed to a placeholder is named as such, with the placeholder; a key that is
// no placeholder is the other error.
TEST(CompileCacheTest, AnUndefinedFeedValueNamesThePlaceholder) {
  Graph g{"cached"};
  Tensor x = g.placeholder(f32, {2}, "x");
  Tensor out = exp(x);
  CompileCache cache(2);
  Error e = test_values::thrown_error([&] { cache.run(g, {out}, {{x, Tensor()}}); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(e.what(), ::testing::HasSubstr(
                            "the value fed to placeholder 'x' of graph 'cached' is an undefined"));
  e = test_values::thrown_error([&] {
    cache.run(g, {out}, {{Tensor::scalar(1.0f), Tensor::scalar(1.0f)}});
  });
  EXPECT_THAT(e.what(), ::testing::HasSubstr("a feed key is not a placeholder"));
}

TEST(CompileCacheTest, CompilesOncePerSignatureAndEvictsLeastRecentlyUsed) {
  Graph g{"cached"};
  Tensor x = g.placeholder(f32, {kUnknownDim}, "x");
  Tensor out = exp(x) * 2.0f + 1.0f;
  CompileCache cache(2);
  auto feed = [&](int n) {
    return FeedList{{x, Tensor::from_vector(std::vector<float>(n, 0.0f))}};
  };
  // exp(0) * 2 + 1 = 3 everywhere.
  EXPECT_EQ(cache.run(g, {out}, feed(3))[0].to_vector<float>(), std::vector<float>(3, 3.0f));
  EXPECT_EQ(cache.run(g, {out}, feed(3))[0].to_vector<float>(), std::vector<float>(3, 3.0f));
  CompileCache::Stats s = cache.stats();
  EXPECT_EQ(s.misses, 1);
  EXPECT_EQ(s.hits, 1);
  EXPECT_EQ(s.recompiles, 0);
  EXPECT_EQ(cache.run(g, {out}, feed(5))[0].to_vector<float>(), std::vector<float>(5, 3.0f));
  s = cache.stats();
  EXPECT_EQ(s.misses, 2);
  EXPECT_EQ(s.recompiles, 1);
  EXPECT_EQ(cache.size(), 2u);
  cache.run(g, {out}, feed(7));  // evicts the [3] executable (least recently used)
  s = cache.stats();
  EXPECT_EQ(s.evictions, 1);
  EXPECT_EQ(cache.size(), 2u);
  cache.run(g, {out}, feed(5));  // still cached
  EXPECT_EQ(cache.stats().hits, 2);
  cache.run(g, {out}, feed(3));  // was evicted: compiled again
  EXPECT_EQ(cache.stats().misses, 4);
  EXPECT_EQ(cache.stats().recompiles, 3);
}

// The step profile counts only the runs made while profiling is on, and puts each thunk's time
// in its kind: a dot under GEMMs, the loop fusion after it under fused loops, a gather under
// other kernels.
TEST(ExecutableTest, TheStepProfileSumsTheThunksByKind) {
  Graph g{"profiled"};
  Tensor x = g.placeholder(f32, {64, 96}, "x");
  Tensor w = g.placeholder(f32, {96, 80}, "w");
  Tensor idx = g.placeholder(i32, {16}, "idx");
  Tensor h = matmul(x, w);
  Tensor y = exp(h) * 2.0f - h;
  Tensor rows = gather(y, idx, 0);
  FeedList feeds = {{x, random_normal({64, 96}, 1)},
                    {w, random_normal({96, 80}, 2)},
                    {idx, Tensor::from_vector(std::vector<int32_t>(16, 3), {16})}};
  Executable e = compile(g, {rows}, feeds);
  e.run(feeds);
  EXPECT_EQ(e.profile().runs, 0) << "no profile before it is switched on";
  e.set_profiling(true);
  for (int i = 0; i < 3; ++i) e.run(feeds);
  e.set_profiling(false);
  e.run(feeds);
  const StepProfile p = e.profile();
  EXPECT_EQ(p.runs, 3);
  EXPECT_GT(p.gemm_conv_us, 0);
  EXPECT_GT(p.fused_loops_us, 0);
  EXPECT_GT(p.other_kernels_us, 0);
  EXPECT_GE(p.host_us(), 0);
  EXPECT_GE(p.total_us, p.gemm_conv_us + p.fused_loops_us + p.other_kernels_us);

  // Per thunk: one entry each, adding up to the kinds' sum.
  const std::vector<std::string> thunks = e.thunk_descriptions();
  ASSERT_EQ(p.thunk_us.size(), thunks.size());
  double per_thunk = 0;
  for (double us : p.thunk_us) {
    EXPECT_GE(us, 0);
    per_thunk += us;
  }
  EXPECT_NEAR(per_thunk, p.gemm_conv_us + p.fused_loops_us + p.other_kernels_us, 1e-6 * per_thunk);
  // The report names the costliest thunks, most costly first, and at most `top` of them.
  const std::string report = format_profile(p, thunks, /*top=*/2);
  EXPECT_NE(report.find("3 runs"), std::string::npos) << report;
  size_t best = 0;
  for (size_t i = 1; i < thunks.size(); ++i) best = p.thunk_us[i] > p.thunk_us[best] ? i : best;
  const size_t first_line = report.find('\n') + 1;
  EXPECT_NE(report.find(thunks[best], first_line), std::string::npos) << report;
  EXPECT_LT(report.find(thunks[best], first_line), report.find('\n', first_line)) << report;
  EXPECT_EQ(std::count(report.begin(), report.end(), '\n'), 3) << report;

  e.set_profiling(true);
  EXPECT_EQ(e.profile().runs, 0) << "switching it on again starts a new profile";
  EXPECT_TRUE(e.profile().thunk_us.empty());
}

}  // namespace
}  // namespace kiln::compiler
