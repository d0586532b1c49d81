// Device programs (compile_for_device, compiler/run_device.cc) without a GPU: on the emulated
// GPU (compiler/cpu/emulated_device.h, memory apart from the host's, poisoned when allocated),
// a program's loops, dots, convolutions and pooling run on the device and its other ops on the
// host, its values copied between them only when the other side reads them; results match the
// CPU program's.
// On a GPU (skipped here, saying so) the same MLP step on cuda:0.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <thread>

#include "compiler/cpu/emulated_device.h"
#include "compiler/device_backend.h"
#include "compiler/executable.h"
#include "kiln/control_flow.h"
#include "kiln/data/dataset.h"
#include "kiln/kiln.h"
#include "kiln/nn.h"
#include "kiln/optim.h"
#include "runtime/cuda/driver.h"
#include "src/core/device_memory.h"
#include "src/core/variable_capture.h"
#include "tests/compiler/compiler_test_util.h"
#include "tests/compiler/mlp_step.h"
#include "tests/subprocess.h"

namespace kiln::compiler {
namespace {

using ::testing::HasSubstr;

using testing::expect_close;

int64_t bytes_of(const std::vector<Tensor>& ts) {
  int64_t n = 0;
  for (const Tensor& t : ts) n += static_cast<int64_t>(t.nbytes());
  return n;
}

// Loops and dots alone: x -> dense(relu) -> dense -> tanh, and a row sum.
struct Chain {
  Graph g{"device_chain"};
  Tensor x = g.placeholder(f32, {64, 32}, "x");
  Tensor w1 = g.placeholder(f32, {32, 16}, "w1");
  Tensor b1 = g.placeholder(f32, {16}, "b1");
  Tensor w2 = g.placeholder(f32, {16, 4}, "w2");
  Tensor y = tanh(matmul(relu(matmul(x, w1) + b1), w2));
  Tensor s = sum(y * y, {1});
  FeedList feeds = {{x, test_models::random_tensor({64, 32}, 1)},
                    {w1, test_models::random_tensor({32, 16}, 2)},
                    {b1, test_models::random_tensor({16}, 3)},
                    {w2, test_models::random_tensor({16, 4}, 4)}};
};

TEST(DeviceProgram, LoopsAndDotsRunOnTheDeviceAndMatchTheCpu) {
  Chain c;
  auto gpu = cpu::emulated_gpu();
  const int64_t live_at_start = cpu::emulated_gpu_counts().live_allocations;
  {
    Executable host = compile(c.g, {c.y, c.s}, c.feeds);
    Executable dev = compile_for_device(gpu, c.g, {c.y, c.s}, c.feeds);
    int dots = 0, fused_dots = 0, fused = 0;
    for (const std::string& d : dev.thunk_descriptions()) {
      dots += d == "kernel dot on emulated-gpu";
      fused_dots += d == "kernel fused_dot on emulated-gpu";
      fused += d.rfind("fused(", 0) == 0;
    }
    // The first dot takes its bias as the matmul's epilogue (its relu is a loop); the second's
    // tanh is a loop.
    EXPECT_EQ(dots, 1) << ::testing::PrintToString(dev.thunk_descriptions());
    EXPECT_EQ(fused_dots, 1) << ::testing::PrintToString(dev.thunk_descriptions());
    EXPECT_GE(fused, 1);
    int64_t fed = 0;
    for (const auto& [k, v] : c.feeds) fed += static_cast<int64_t>(v.nbytes());
    for (int run = 0; run < 3; ++run) {
      SCOPED_TRACE("run " + std::to_string(run));
      const cpu::EmulatedGpuCounts before = cpu::emulated_gpu_counts();
      std::vector<Tensor> got = dev.run(c.feeds);
      const cpu::EmulatedGpuCounts after = cpu::emulated_gpu_counts();
      expect_close(got, host.run(c.feeds), 1e-5);
      EXPECT_EQ(after.dots - before.dots, 2);
      EXPECT_EQ(after.launches - before.launches, fused);
      // The values stay on the device: the feeds go down (and, in the first run, the scalar
      // constants), the two fetched outputs come up; nothing else crosses.
      const int64_t up = after.upload_bytes - before.upload_bytes;
      if (run == 0) {
        EXPECT_GE(up, fed);
        EXPECT_LE(up, fed + 64);
      } else {
        EXPECT_EQ(up, fed) << "constants stay on the device";
        EXPECT_EQ(after.live_allocations, before.live_allocations) << "a run frees its memory";
      }
      EXPECT_EQ(after.downloads - before.downloads, 2);
      EXPECT_EQ(after.download_bytes - before.download_bytes, bytes_of(got));
    }
  }
  EXPECT_EQ(cpu::emulated_gpu_counts().live_allocations, live_at_start)
      << "the executable frees its constants";
}

// ---- control flow on the device (compiler/device_control_flow.h) ----

// An RNN over 12 steps as a scan: its body runs on the device, the carry and the ys stay
// there (each step's row copied into place within the device); a run copies up its feeds and
// down its fetches, nothing per step. The same in reverse, and over no steps.
// h_t = tanh(x_t W + h_{t-1} U) over 12 steps as a scan; fetches the last h and every 2 h_t.
struct RnnScan {
  Graph g{"rnn"};
  FeedList feeds;
  std::vector<Tensor> fetches;
  explicit RnnScan(bool reverse) {
    Tensor h0 = g.placeholder(f32, {4, 16}, "h0");
    Tensor xs = g.placeholder(f32, {12, 4, 8}, "xs");
    Tensor w = g.placeholder(f32, {8, 16}, "w");
    Tensor u = g.placeholder(f32, {16, 16}, "u");
    ScanResult r = scan(
        [&](const std::vector<Tensor>& carry, const std::vector<Tensor>& x) {
          Tensor h = tanh(matmul(x[0], w) + matmul(carry[0], u));
          return std::make_pair(std::vector<Tensor>{h}, std::vector<Tensor>{h * 2.0f});
        },
        {h0}, {xs}, ScanOptions{.reverse = reverse});
    feeds = {{h0, test_models::random_tensor({4, 16}, 1)},
             {xs, test_models::random_tensor({12, 4, 8}, 2)},
             {w, test_models::random_tensor({8, 16}, 3) * 0.3f},
             {u, test_models::random_tensor({16, 16}, 4) * 0.3f}};
    fetches = {r.carry[0], r.ys[0]};
  }
};

TEST(DeviceControlFlow, AScanKeepsItsCarryAndItsOutputsOnTheDevice) {
  auto gpu = cpu::emulated_gpu();
  for (bool reverse : {false, true}) {
    SCOPED_TRACE(reverse ? "reverse" : "forward");
    RnnScan rnn(reverse);
    Graph& g = rnn.g;
    const FeedList& feeds = rnn.feeds;
    const std::vector<Tensor>& fetches = rnn.fetches;
    Executable host = compile(g, fetches, feeds);
    Executable dev = compile_for_device(gpu, g, fetches, feeds);
    EXPECT_THAT(::testing::PrintToString(dev.thunk_descriptions()),
                HasSubstr("scan(length 12, body:"));
    EXPECT_THAT(::testing::PrintToString(dev.thunk_descriptions()), HasSubstr("on emulated-gpu"));
    dev.run(feeds);  // the first run also copies the programs' constants up
    const cpu::EmulatedGpuCounts before = cpu::emulated_gpu_counts();
    std::vector<Tensor> got = dev.run(feeds);
    const cpu::EmulatedGpuCounts after = cpu::emulated_gpu_counts();
    expect_close(got, host.run(feeds), 1e-5);
    int64_t fed = 0;
    for (const auto& [k, v] : feeds) fed += static_cast<int64_t>(v.nbytes());
    EXPECT_EQ(after.upload_bytes - before.upload_bytes, fed) << "nothing goes up per step";
    EXPECT_EQ(after.download_bytes - before.download_bytes, bytes_of(got));
    // 12 rows of ys, then the carry and the ys into the program's outputs.
    EXPECT_EQ(after.copies - before.copies, 12 + 2);
  }
  Graph g{"empty_scan"};
  Tensor c0 = g.placeholder(f32, {3}, "c0");
  ScanResult r = scan(
      [](const std::vector<Tensor>& carry, const std::vector<Tensor>&) {
        return std::make_pair(std::vector<Tensor>{carry[0] + 1.0f}, std::vector<Tensor>{carry[0]});
      },
      {c0}, {}, ScanOptions{.length = 0});
  FeedList feeds = {{c0, test_models::random_tensor({3}, 5)}};
  Executable dev = compile_for_device(gpu, g, {r.carry[0], r.ys[0]}, feeds);
  std::vector<Tensor> got = dev.run(feeds);
  expect_close({got[0]}, {feeds[0].second}, 0);
  EXPECT_EQ(got[1].shape(), (Shape{0, 3}));
}

// A while loop's body runs on the device; only its predicate comes down, one byte a test.
TEST(DeviceControlFlow, AWhileLoopBringsDownOnlyItsPredicate) {
  auto gpu = cpu::emulated_gpu();
  Graph g{"halve"};
  Tensor x0 = g.placeholder(f32, {256}, "x0");
  Tensor limit = g.placeholder(f32, {}, "limit");
  std::vector<Tensor> out = while_loop(
      [&](const std::vector<Tensor>& v) { return sum(v[0] * v[0], {0}) > limit; },
      [](const std::vector<Tensor>& v) { return std::vector<Tensor>{v[0] * 0.5f, v[1] + 1.0f}; },
      {x0, g.constant(Tensor::scalar(0.0f))});
  FeedList feeds = {{x0, test_models::random_tensor({256}, 6) * 10.0f},
                    {limit, Tensor::scalar(1.0f)}};
  Executable host = compile(g, out, feeds);
  Executable dev = compile_for_device(gpu, g, out, feeds);
  EXPECT_THAT(::testing::PrintToString(dev.thunk_descriptions()), HasSubstr("while(cond:"));
  dev.run(feeds);
  const cpu::EmulatedGpuCounts before = cpu::emulated_gpu_counts();
  std::vector<Tensor> got = dev.run(feeds);
  const cpu::EmulatedGpuCounts after = cpu::emulated_gpu_counts();
  std::vector<Tensor> want = host.run(feeds);
  expect_close(got, want, 1e-6);
  const int64_t iterations = static_cast<int64_t>(want[1].item<float>());
  ASSERT_GT(iterations, 3);
  EXPECT_EQ(after.downloads - before.downloads, (iterations + 1) + 2)
      << "a predicate per test, then the two results";
}

// A cond's branch runs on the device, chosen by its predicate.
TEST(DeviceControlFlow, ACondRunsTheChosenBranchOnTheDevice) {
  auto gpu = cpu::emulated_gpu();
  Graph g{"branch"};
  Tensor p = g.placeholder(bool_, {}, "p");
  Tensor x = g.placeholder(f32, {64}, "x");
  std::vector<Tensor> out = cond(
      p, [](const std::vector<Tensor>& v) { return std::vector<Tensor>{exp(v[0])}; },
      [](const std::vector<Tensor>& v) { return std::vector<Tensor>{v[0] * 3.0f}; }, {x});
  for (bool pred : {true, false}) {
    FeedList feeds = {{p, Tensor::scalar(pred)}, {x, test_models::random_tensor({64}, 7)}};
    Executable host = compile(g, out, feeds);
    Executable dev = compile_for_device(gpu, g, out, feeds);
    EXPECT_THAT(::testing::PrintToString(dev.thunk_descriptions()), HasSubstr("on emulated-gpu"));
    expect_close(dev.run(feeds), host.run(feeds), 1e-6);
  }
}

// ---- split reductions (compiler/split_reduction.h) ----

Executable compile_on(const std::shared_ptr<const DeviceBackend>& device, const Graph& g,
                      const std::vector<Tensor>& fetches, const FeedList& feeds);

// Compiles `fetches` for `device` (the emulated GPU unless given; cuda:0 when null) and the
// host; the device program's results are close to the host's (bit for bit where `exact`), and
// on the emulated GPU one run launches `launches` kernels.
void check_split(Graph& g, const std::vector<Tensor>& fetches, const FeedList& feeds,
                 int64_t launches, bool exact = false,
                 const std::shared_ptr<const DeviceBackend>& device = cpu::emulated_gpu()) {
  Executable host = compile(g, fetches, feeds);
  Executable dev = compile_on(device, g, fetches, feeds);
  std::vector<Tensor> want = host.run(feeds);
  const cpu::EmulatedGpuCounts before = cpu::emulated_gpu_counts();
  std::vector<Tensor> got = dev.run(feeds);
  const cpu::EmulatedGpuCounts after = cpu::emulated_gpu_counts();
  if (device) EXPECT_EQ(after.launches - before.launches, launches) << dev.fusion_log();
  if (exact) {
    testing::expect_bitwise_equal(got, want);
  } else {
    for (size_t i = 0; i < got.size(); ++i) {
      if (got[i].dtype() == f32 || got[i].dtype() == f64) {
        expect_close({convert(got[i], f64)}, {convert(want[i], f64)}, 1e-5);
      } else {  // 16-bit results: within one unit of their last place
        expect_close({convert(got[i], f32)}, {convert(want[i], f32)},
                     got[i].dtype() == bf16 ? 1.0 / 128 : 1.0 / 1024);
      }
    }
  }
}

Tensor filled(DType dtype, Shape shape, uint32_t seed) {
  return convert(test_models::random_tensor(std::move(shape), seed), dtype);
}

// A column sum over 4096 rows: 8 outputs, each folded by 16 threads in chunks, the chunks then
// combined and rounded to f32 (three loops); a full sum the same way.
TEST(SplitReductions, FewOutputsOverManyElementsAreFoldedInChunks) {
  Graph g{"split"};
  Tensor x = g.placeholder(f32, {4096, 8}, "x");
  Tensor b = g.placeholder(f32, {8}, "b");
  Tensor col = g.placeholder(f32, {4096, 1}, "col");
  check_split(g, {sum(x, {0})}, {{x, filled(f32, {4096, 8}, 1)}}, 3);
  check_split(g, {sum(x * x, {0, 1})}, {{x, filled(f32, {4096, 8}, 2)}}, 3);
  // Broadcast operands: along the kept axis, along the split one.
  check_split(g, {sum(x * b + col, {0})},
              {{x, filled(f32, {4096, 8}, 3)}, {b, filled(f32, {8}, 4)},
               {col, filled(f32, {4096, 1}, 5)}},
              3);
}

TEST(SplitReductions, ReductionsInsideTheShapeAndThroughAMapSplitTheirAxis) {
  Graph g{"split_views"};
  Tensor x = g.placeholder(f32, {3, 4096, 5}, "x");
  Tensor t = g.placeholder(f32, {8, 4096}, "t");
  check_split(g, {sum(x, {1})}, {{x, filled(f32, {3, 4096, 5}, 6)}}, 3);
  check_split(g, {sum(transpose(t, {1, 0}), {0})}, {{t, filled(f32, {8, 4096}, 7)}}, 3);
}

// An iteration-shaped output beside the reduction is written by the chunks' loop.
TEST(SplitReductions, AnElementwiseOutputBesideTheReductionIsWrittenOnce) {
  Graph g{"split_multi"};
  Tensor x = g.placeholder(f32, {4, 20000}, "x");
  Tensor e = exp(x * 0.1f);
  check_split(g, {e, sum(e, {1})}, {{x, filled(f32, {4, 20000}, 8)}}, 3);
}

// 16-bit outputs round as the CPU's split kernels do; integer sums and f64 results need no
// rounding loop; random values are generated by the chunks where they are folded.
TEST(SplitReductions, EveryDtypeRoundsOnceAtTheEnd) {
  Graph g{"split_dtypes"};
  Tensor h = g.placeholder(bf16, {2048, 4}, "h");
  Tensor i = g.placeholder(i32, {8192, 2}, "i");
  Tensor d = g.placeholder(f64, {8192, 2}, "d");
  Tensor seed = g.placeholder(i64, {}, "seed");
  Tensor twice = h * 2.0f;  // one loop folds both reductions
  check_split(g, {max(twice, {0}), sum(twice, {0})}, {{h, filled(bf16, {2048, 4}, 9)}}, 3);
  check_split(g, {sum(i, {0})}, {{i, convert(filled(f32, {8192, 2}, 10) * 1000.0f, i32)}}, 2,
              /*exact=*/true);
  check_split(g, {sum(d, {0})}, {{d, filled(f64, {8192, 2}, 11)}}, 2);
  check_split(g, {sum(random_uniform({8192, 2}, seed, -1, 1), {0})},
              {{seed, Tensor::scalar(int64_t{3})}}, 3);
}

TEST(SplitReductions, WhatNeedsNoSplitOrHasNoDivisorIsOneLoop) {
  Graph g{"unsplit"};
  Tensor many = g.placeholder(f32, {64, 4096}, "many");  // 4096 outputs of 64 terms
  Tensor prime = g.placeholder(f32, {4099, 8}, "prime");
  check_split(g, {sum(many, {0})}, {{many, filled(f32, {64, 4096}, 12)}}, 1);
  check_split(g, {sum(prime, {0})}, {{prime, filled(f32, {4099, 8}, 13)}}, 1);
}

// The program for `device`, or for cuda:0 when it is null (the GPU tests).
Executable compile_on(const std::shared_ptr<const DeviceBackend>& device, const Graph& g,
                      const std::vector<Tensor>& fetches, const FeedList& feeds) {
  return device ? compile_for_device(device, g, fetches, feeds)
                : compile(g, fetches, feeds, {}, CompileOptions{Device::cuda(0)});
}

// The random ops generated in device loops (compiler/generator.h) give the CPU kernels' bits on
// `device` (cuda:0 when null): Philox is integer arithmetic, and the uniform's f64 multiply and
// add stay apart in PTX. The normals' log and cos are libdevice's on a GPU: close there.
void check_random_ops(const std::shared_ptr<const DeviceBackend>& device) {
  Graph g{"random_on_device"};
  Tensor seed = g.placeholder(i64, {}, "seed");
  Tensor x = g.placeholder(f32, {300, 257}, "x");
  std::vector<Tensor> fetches = {
      random_bernoulli({300, 257}, seed, 0.3, bool_),
      random_bernoulli({300, 257}, seed, 0.6, bf16),
      random_uniform({300, 257}, seed, -2, 3, f32),
      random_uniform({300, 257}, seed, 1, 1 + 4 * std::numeric_limits<double>::epsilon(), f64),
      random_normal({300, 257}, seed, 0.5, 2, f32),
      random_normal({300, 257}, seed, 0, 1, f64),
      sum(where(random_bernoulli_like(x, seed, 0.8), x * 1.25f, zeros_like(x)), {1})};
  for (int64_t s : {int64_t{0}, int64_t{-1}, int64_t{0x123456789abcdef}}) {
    FeedList feeds = {{seed, Tensor::scalar(s)}, {x, test_models::random_tensor({300, 257}, 9)}};
    Executable host = compile(g, fetches, feeds);
    Executable dev = compile_on(device, g, fetches, feeds);
    for (const std::string& d : dev.thunk_descriptions())
      EXPECT_THAT(d, ::testing::Not(HasSubstr("kernel random"))) << "drawn on the host";
    std::vector<Tensor> want = host.run(feeds), got = dev.run(feeds);
    for (size_t i = 0; i + 1 < got.size(); ++i) {
      // The normals on a GPU: libdevice's f64 log and cos, not libm's, may differ in the last
      // bits.
      if (!device && (i == 4 || i == 5)) {
        const std::vector<double> a = got[i].to_vector<double>(), b = want[i].to_vector<double>();
        for (size_t k = 0; k < a.size(); ++k)
          ASSERT_NEAR(a[k], b[k], 1e-6 * (1 + std::abs(b[k]))) << "output " << i << " at " << k;
        continue;
      }
      EXPECT_TRUE(testing::bitwise_equal(got[i], want[i])) << "seed " << s << ", output " << i;
    }
    // The row sums: a device's loop may add in another order.
    expect_close({got.back()}, {want.back()}, 1e-5);
  }
}

TEST(DeviceProgram, RandomOpsOnTheDeviceHaveTheCpusBits) { check_random_ops(cpu::emulated_gpu()); }

// The four operand layouts of a dot (which of its last two axes each operand contracts), with
// no batch axes and with two leading ones, become the device dot's transposes, batch count and
// m, n, k: each gives the CPU program's result. On the emulated GPU, bit for bit; on cuda:0
// (from a fresh thread: its context is made current there too), within cuBLASLt's summation
// order. A dot whose batch axes do not lead stays on the host.
void check_dot_layouts(const std::shared_ptr<const DeviceBackend>& device, double tol) {
  for (const Shape& batch : {Shape{}, Shape{2, 3}}) {
    for (int64_t ca : {0, 1}) {
      for (int64_t cb : {0, 1}) {
        SCOPED_TRACE("batch " + ::testing::PrintToString(batch) + ", contract a's axis " +
                     std::to_string(ca) + ", b's " + std::to_string(cb));
        const int64_t m = 5, k = 7, n = 3, nb = static_cast<int64_t>(batch.size());
        Shape as = batch, bs = batch, cs = batch;
        for (int64_t v : ca == 1 ? Shape{m, k} : Shape{k, m}) as.push_back(v);
        for (int64_t v : cb == 0 ? Shape{k, n} : Shape{n, k}) bs.push_back(v);
        cs.push_back(m);
        cs.push_back(n);
        std::vector<int64_t> axes;
        for (int64_t i = 0; i < nb; ++i) axes.push_back(i);
        Graph g{"dot_layout"};
        Tensor a = g.placeholder(f32, as, "a");
        Tensor b = g.placeholder(f32, bs, "b");
        Tensor c = dot(a, b, {ca + nb}, {cb + nb}, axes, axes);
        FeedList feeds = {{a, test_models::random_tensor(as, 11)},
                          {b, test_models::random_tensor(bs, 12)}};
        Executable host = compile(g, {c}, feeds);
        Executable dev = compile_on(device, g, {c}, feeds);
        EXPECT_THAT(::testing::PrintToString(dev.thunk_descriptions()), HasSubstr("dot on "));
        std::vector<Tensor> got = dev.run(feeds);
        ASSERT_EQ(got[0].shape(), cs);
        expect_close(got, host.run(feeds), tol);
      }
    }
  }
  // Batch axis last in a: on the host, with the same result.
  Graph g{"dot_trailing_batch"};
  Tensor a = g.placeholder(f32, {5, 7, 2}, "a");
  Tensor b = g.placeholder(f32, {2, 7, 3}, "b");
  Tensor c = dot(a, b, {1}, {1}, {2}, {0});
  FeedList feeds = {{a, test_models::random_tensor({5, 7, 2}, 13)},
                    {b, test_models::random_tensor({2, 7, 3}, 14)}};
  Executable host = compile(g, {c}, feeds);
  Executable dev = compile_on(device, g, {c}, feeds);
  EXPECT_THAT(::testing::PrintToString(dev.thunk_descriptions()),
              ::testing::Not(HasSubstr("dot on ")));
  expect_close(dev.run(feeds), host.run(feeds), 0);
}

// The epilogue pass fuses into a device's dots what its matmul applies (cuBLASLt's bias
// epilogue): a bias of n elements along the last dimension; the activation stays a loop (relu
// too: cuBLASLt's may not keep a NaN), as do a bias of another shape and a convolution's
// epilogue. Against the CPU, in f32 and bf16, batched too.
TEST(DeviceProgram, DotsTakeTheirBiasAsTheirMatmulsEpilogue) {
  auto gpu = cpu::emulated_gpu();
  for (DType dt : {f32, bf16}) {
    SCOPED_TRACE(dtype_name(dt));
    Graph g{"dot_epilogues"};
    FeedList feeds;
    auto input = [&](Shape shape, const char* name) {
      Tensor p = g.placeholder(dt, shape, name);
      feeds.push_back({p, convert(test_models::random_tensor(shape, 80 + feeds.size()), dt)});
      return p;
    };
    Tensor x = input({48, 32}, "x"), xb = input({2, 24, 32}, "xb"), b = input({16}, "b");
    Tensor col = input({48, 1}, "col");
    std::vector<Tensor> w;
    for (const char* name : {"w0", "w1", "w2", "w3", "w4"}) w.push_back(input({32, 16}, name));
    Tensor wb = input({2, 32, 16}, "wb");
    const std::vector<Tensor> outs = {
        relu(matmul(x, w[0]) + b),         // the bias: a fused_dot (relu a loop)
        tanh(matmul(x, w[1]) + b),         // the same
        relu(matmul(xb, wb) + b),          // batched
        sigmoid(matmul(x, w[2]) + 0.5f),   // a scalar bias: a plain dot and a loop
        matmul(x, w[3]) + col,             // a bias along the rows: the same
        relu(matmul(x, w[4]))};            // relu alone: the same
    Executable host = compile(g, outs, feeds);
    Executable dev = compile_for_device(gpu, g, outs, feeds);
    int fused_dots = 0, dots = 0;
    for (const std::string& d : dev.thunk_descriptions()) {
      fused_dots += d == "kernel fused_dot on emulated-gpu";
      dots += d == "kernel dot on emulated-gpu";
      EXPECT_NE(d, "kernel fused_dot") << "none on the host";
    }
    const std::string listed = ::testing::PrintToString(dev.thunk_descriptions());
    EXPECT_EQ(fused_dots, 3) << listed;
    EXPECT_EQ(dots, 3) << listed;
    const cpu::EmulatedGpuCounts before = cpu::emulated_gpu_counts();
    std::vector<Tensor> got = dev.run(feeds), want = host.run(feeds);
    EXPECT_EQ(cpu::emulated_gpu_counts().dots - before.dots, 6);
    std::vector<Tensor> got32, want32;
    for (size_t i = 0; i < got.size(); ++i) {
      got32.push_back(convert(got[i], f32));
      want32.push_back(convert(want[i], f32));
    }
    expect_close(got32, want32, dt == f32 ? 1e-5 : 1e-2);
  }
}

// A reduction with nothing to fold in (of a dot's output, of a feed) is a loop of its own on a
// device, where the CPU leaves it to its reference kernel: on the device no value crosses.
TEST(DeviceProgram, AReductionWithNoFusibleProducerIsALoopOnTheDevice) {
  auto gpu = cpu::emulated_gpu();
  Graph g{"lone_reductions"};
  Tensor x = g.placeholder(f32, {32, 24}, "x");
  Tensor w = g.placeholder(f32, {24, 16}, "w");
  Tensor logits = matmul(x, w);
  const std::vector<Tensor> outs = {max(logits, {1}), sum(logits, {0}), sum(x, {1})};
  FeedList feeds = {{x, test_models::random_tensor({32, 24}, 95)},
                    {w, test_models::random_tensor({24, 16}, 96)}};
  Executable host = compile(g, outs, feeds);
  Executable dev = compile_for_device(gpu, g, outs, feeds);
  auto kernels = [](const Executable& e) {
    int n = 0;
    for (const std::string& d : e.thunk_descriptions()) n += d.rfind("kernel reduce", 0) == 0;
    return n;
  };
  EXPECT_EQ(kernels(host), 3) << ::testing::PrintToString(host.thunk_descriptions());
  for (const std::string& d : dev.thunk_descriptions())
    EXPECT_EQ(d.rfind("kernel reduce", 0), std::string::npos) << "on the host: " << d;
  const cpu::EmulatedGpuCounts before = cpu::emulated_gpu_counts();
  std::vector<Tensor> got = dev.run(feeds);
  const cpu::EmulatedGpuCounts after = cpu::emulated_gpu_counts();
  EXPECT_EQ(after.downloads - before.downloads, 3) << "the three results alone";
  expect_close(got, host.run(feeds), 1e-5);
}

// argmax and argmin run on a device as two reductions (ArgReductions), with the reference
// kernel's answer bit for bit: the first extremum wins, a NaN beats every number (the first
// NaN wins), -0 and +0 tie; along either axis, of f32, bf16 and i32. An axis of unknown size
// when the graph is optimized (the batch) keeps the kernel.
TEST(DeviceProgram, ArgmaxAndArgminRunOnTheDeviceWithTheKernelsAnswers) {
  auto gpu = cpu::emulated_gpu();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // Rows: ties (the first wins), a NaN after the maximum, two NaNs, signed zeros, negatives.
  const std::vector<float> values = {1, 3, 3, 0,  5, 2, nan, 9,  nan, 1, nan, 0,
                                     -0.0f, 0, 0, -1,  -4, -2, -2, -8};
  for (DType dt : {f32, bf16, i32}) {
    SCOPED_TRACE(dtype_name(dt));
    Graph g{"arg_reductions"};
    Tensor x = g.placeholder(dt, {kUnknownDim, 4}, "x");
    Tensor known = g.placeholder(dt, {5, 4}, "known");
    const std::vector<Tensor> outs = {argmax(x, 1),     argmin(x, 1),    argmax(known, 0),
                                      argmin(known, 0), argmax(x, 0)};
    Tensor value = Tensor::from_vector(values, {5, 4});
    if (dt == i32) value = Tensor::from_vector<float>({1, 3, 3, 0, 5, 2, 7, 9, 6, 1, 6, 0, 0, 0,
                                                        0, -1, -4, -2, -2, -8}, {5, 4});
    const FeedList feeds = {{x, convert(value, dt)}, {known, convert(value, dt)}};
    Executable host = compile(g, outs, feeds);
    Executable dev = compile_for_device(gpu, g, outs, feeds);
    int kernels = 0;
    for (const std::string& d : dev.thunk_descriptions())
      kernels += d == "kernel argmax" || d == "kernel argmin";
    EXPECT_EQ(kernels, 1) << "argmax(x, 0) alone: "
                          << ::testing::PrintToString(dev.thunk_descriptions());
    std::vector<Tensor> got = dev.run(feeds), want = host.run(feeds);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_TRUE(testing::bitwise_equal(got[i], want[i]))
          << "output " << i << ": " << got[i].str() << " vs " << want[i].str();
  }
}

TEST(DeviceProgram, EveryDotLayoutMatchesTheCpu) { check_dot_layouts(cpu::emulated_gpu(), 0); }

// A convolution's geometry for check_convs.
struct ConvCase {
  std::string name;
  Shape x, w;
  ConvOptions options;
  bool on_device = true;  // false: the device takes none of its passes
};

std::vector<ConvCase> conv_cases() {
  return {
      {"3x3 same", {2, 6, 5, 3}, {3, 3, 3, 4}, {.padding_low = {1, 1}, .padding_high = {1, 1}}},
      {"strided, padded apart per axis",
       {3, 9, 7, 2},
       {3, 2, 2, 5},
       {.strides = {2, 3}, .padding_low = {1, 0}, .padding_high = {1, 0}}},
      {"dilated", {1, 8, 8, 2}, {2, 3, 2, 3}, {.dilation = {2, 1}}},
      {"grouped", {2, 5, 5, 4}, {3, 3, 2, 6}, {.padding_low = {1, 1}, .padding_high = {1, 1},
                                               .groups = 2}},
      {"1-d", {2, 11, 3}, {4, 3, 2}, {.strides = {2}, .padding_low = {2}, .padding_high = {2}}},
      {"padded unevenly: on the host",
       {1, 6, 6, 2},
       {3, 3, 2, 2},
       {.strides = {2, 2}, .padding_low = {0, 0}, .padding_high = {1, 1}},
       false},
      {"input dilation: on the host",
       {1, 4, 4, 2},
       {2, 2, 2, 2},
       {.lhs_dilation = {2, 2}},
       false},
  };
}

// A convolution, its input gradient and its kernel gradient (of sum(y * r)) each run on the
// device where the device takes the geometry, with the CPU program's results: on the emulated
// GPU bit for bit (it runs the CPU's kernels), on cuda:0 within cuDNN's summation order.
void check_convs(const std::shared_ptr<const DeviceBackend>& device, double tol) {
  const std::string where = device ? device->name() : "cuda:0";
  for (const ConvCase& cc : conv_cases()) {
    SCOPED_TRACE(cc.name);
    Graph g{"device_conv"};
    Tensor x = g.placeholder(f32, cc.x, "x");
    Tensor w = g.placeholder(f32, cc.w, "w");
    Tensor y = conv(x, w, cc.options);
    Tensor r = g.placeholder(f32, y.shape(), "r");
    std::vector<Tensor> grads = gradients(sum(y * r), {x, w});
    FeedList feeds = {{x, test_models::random_tensor(cc.x, 21)},
                      {w, test_models::random_tensor(cc.w, 22)},
                      {r, test_models::random_tensor(y.shape(), 23)}};
    const std::vector<Tensor> fetches = {y, grads[0], grads[1]};
    Executable host = compile(g, fetches, feeds);
    Executable dev = compile_on(device, g, fetches, feeds);
    const std::string thunks = ::testing::PrintToString(dev.thunk_descriptions());
    for (const char* op : {"convolution on ", "convolution_input_grad on ",
                           "convolution_kernel_grad on "}) {
      if (cc.on_device)
        EXPECT_THAT(thunks, HasSubstr(std::string("kernel ") + op + where));
      else
        EXPECT_THAT(thunks, ::testing::Not(HasSubstr(std::string("kernel ") + op)));
    }
    const int64_t convs_before = cpu::emulated_gpu_counts().convs;
    std::vector<Tensor> want = host.run(feeds);
    for (int run = 0; run < 2; ++run) {
      std::vector<Tensor> got = dev.run(feeds);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i].shape(), want[i].shape());
      expect_close(got, want, tol);
    }
    if (device)
      EXPECT_EQ(cpu::emulated_gpu_counts().convs - convs_before, cc.on_device ? 6 : 0);
  }
}

TEST(DeviceProgram, ConvolutionsAndTheirGradientsMatchTheCpu) {
  const int64_t live_at_start = cpu::emulated_gpu_counts().live_allocations;
  check_convs(cpu::emulated_gpu(), 0);
  EXPECT_EQ(cpu::emulated_gpu_counts().live_allocations, live_at_start)
      << "each convolution's scratch is freed";
}

// The same in half precision: the device keeps the dtype (cuDNN's tensor cores on a GPU).
TEST(DeviceProgram, HalfPrecisionConvolutionsRunOnTheDevice) {
  for (DType t : {bf16, f16}) {
    SCOPED_TRACE(dtype_name(t));
    Graph g{"device_conv_lowp"};
    Tensor x = g.placeholder(t, {2, 6, 6, 3}, "x");
    Tensor w = g.placeholder(t, {3, 3, 3, 4}, "w");
    Tensor y = conv2d(x, w, {1, 1}, "same");
    FeedList feeds = {{x, test_models::random_tensor({2, 6, 6, 3}, 31, t)},
                      {w, test_models::random_tensor({3, 3, 3, 4}, 32, t)}};
    Executable host = compile(g, {y}, feeds);
    Executable dev = compile_for_device(cpu::emulated_gpu(), g, {y}, feeds);
    EXPECT_THAT(::testing::PrintToString(dev.thunk_descriptions()),
                HasSubstr("kernel convolution on emulated-gpu"));
    std::vector<Tensor> got = dev.run(feeds);
    EXPECT_EQ(got[0].dtype(), t);
    expect_close(got, host.run(feeds), 0);
  }
}

// A pooling op's input for check_pools: pool(x) as the case builds it.
struct PoolCase {
  std::string name;
  Shape x;
  std::function<Tensor(const Tensor&)> pool;
  bool on_device = true;  // false: the device takes none of its passes
};

std::vector<PoolCase> pool_cases() {
  return {
      {"max 2x2/2", {2, 6, 6, 3}, [](const Tensor& x) { return max_pool2d(x, {2, 2}); }},
      {"max 2x2/2 on odd sizes (the last row and column unread)",
       {1, 7, 5, 2},
       [](const Tensor& x) { return max_pool2d(x, {2, 2}); }},
      {"max 3x3/2 padded (overlapping windows)",
       {2, 7, 7, 2},
       [](const Tensor& x) {
         return reduce_window_max(x, {.window = {1, 3, 3, 1},
                                      .strides = {1, 2, 2, 1},
                                      .padding_low = {0, 1, 1, 0},
                                      .padding_high = {0, 1, 1, 0}});
       }},
      {"max after relu (its gradient a device loop, not a mask)",
       {2, 4, 4, 3},
       [](const Tensor& x) { return max_pool2d(relu(x), {2, 2}); }},
      {"average 2x2/2", {2, 6, 4, 3}, [](const Tensor& x) { return avg_pool2d(x, {2, 2}); }},
      {"sum 3x3/1 padded",
       {1, 5, 5, 2},
       [](const Tensor& x) {
         return reduce_window_sum(x, {.window = {1, 3, 3, 1},
                                      .strides = {1, 1, 1, 1},
                                      .padding_low = {0, 1, 1, 0},
                                      .padding_high = {0, 1, 1, 0}});
       }},
      {"max padded unevenly: on the host",
       {1, 6, 6, 2},
       [](const Tensor& x) { return max_pool2d(x, {3, 3}, {2, 2}, "same"); },
       false},
      {"a window over channels: on the host",
       {1, 4, 4, 4},
       [](const Tensor& x) {
         return reduce_window_max(x, {.window = {1, 2, 2, 2}, .strides = {1, 2, 2, 2}});
       },
       false},
  };
}

// Pooling and its gradient (of sum(y * r)) run on the device where it takes them, with the CPU
// program's results: on the emulated GPU bit for bit, on cuda:0 within cuDNN's rounding.
void check_pools(const std::shared_ptr<const DeviceBackend>& device, double tol) {
  const std::string where = device ? device->name() : "cuda:0";
  for (const PoolCase& pc : pool_cases()) {
    SCOPED_TRACE(pc.name);
    Graph g{"device_pool"};
    Tensor x = g.placeholder(f32, pc.x, "x");
    Tensor y = pc.pool(x);
    Tensor r = g.placeholder(f32, y.shape(), "r");
    Tensor dx = gradients(sum(y * r), {x})[0];
    FeedList feeds = {{x, test_models::random_tensor(pc.x, 41)},
                      {r, test_models::random_tensor(y.shape(), 42)}};
    Executable host = compile(g, {y, dx}, feeds);
    Executable dev = compile_on(device, g, {y, dx}, feeds);
    const std::vector<std::string> thunks = dev.thunk_descriptions();
    int pools = 0;
    for (const std::string& d : thunks) {
      if (d.rfind("kernel reduce_window", 0) != 0) continue;
      EXPECT_EQ(d.find(" on " + where) != std::string::npos, pc.on_device) << d;
      pools += d.find(" on ") != std::string::npos;
    }
    EXPECT_EQ(pools > 0, pc.on_device) << ::testing::PrintToString(thunks);
    const int64_t before = cpu::emulated_gpu_counts().pools;
    std::vector<Tensor> want = host.run(feeds);
    expect_close(dev.run(feeds), want, tol);
    expect_close(dev.run(feeds), want, tol);
    if (device) EXPECT_EQ(cpu::emulated_gpu_counts().pools - before, 2 * pools);
  }
}

TEST(DeviceProgram, PoolingAndItsGradientsMatchTheCpu) {
  const int64_t live_at_start = cpu::emulated_gpu_counts().live_allocations;
  check_pools(cpu::emulated_gpu(), 0);
  EXPECT_EQ(cpu::emulated_gpu_counts().live_allocations, live_at_start);
}

// A layout op between two device ops, read by no loop, is a device copy loop (on the CPU its
// kernel aliases or copies): the value never comes up to the host.
TEST(DeviceProgram, LayoutOpsBetweenDeviceOpsStayOnTheDevice) {
  Graph g{"layout_between_dots"};
  Tensor x = g.placeholder(f32, {6, 8}, "x");
  Tensor w1 = g.placeholder(f32, {8, 12}, "w1");
  Tensor w2 = g.placeholder(f32, {4, 5}, "w2");
  Tensor h = reshape(transpose(matmul(x, w1), {1, 0}), {18, 4});
  Tensor out = matmul(h, w2);
  FeedList feeds = {{x, test_models::random_tensor({6, 8}, 51)},
                    {w1, test_models::random_tensor({8, 12}, 52)},
                    {w2, test_models::random_tensor({4, 5}, 53)}};
  Executable host = compile(g, {out}, feeds);
  Executable dev = compile_for_device(cpu::emulated_gpu(), g, {out}, feeds);
  for (const std::string& d : dev.thunk_descriptions())
    EXPECT_TRUE(d.find(" on emulated-gpu") != std::string::npos || d.rfind("fused(", 0) == 0)
        << d << " runs on the host";
  const cpu::EmulatedGpuCounts before = cpu::emulated_gpu_counts();
  expect_close(dev.run(feeds), host.run(feeds), 0);
  EXPECT_EQ(cpu::emulated_gpu_counts().downloads - before.downloads, 1) << "the result alone";
}

// A boolean fold (`any`, a host kernel: the loops fold no booleans) between device loops: its
// input comes up from the device, its output goes down for the dot; a value both sides read
// is copied once.
TEST(DeviceProgram, HostOpsBetweenDeviceOpsGetTheirValuesCopied) {
  Graph g{"crossing"};
  Tensor x = g.placeholder(f32, {10, 8}, "x");
  Tensor w = g.placeholder(f32, {8, 3}, "w");
  Tensor h = tanh(x) * 2.0f;
  Tensor picked = where(any(h > Tensor::scalar(1.5f), {1}, /*keepdims=*/true), h, -h);
  Tensor out = matmul(picked + 1.0f, w);
  Tensor also = sum(h, {0});  // h read by a device loop too
  FeedList feeds = {{x, test_models::random_tensor({10, 8}, 5)},
                    {w, test_models::random_tensor({8, 3}, 6)}};
  const int64_t live_at_start = cpu::emulated_gpu_counts().live_allocations;
  {
    Executable host = compile(g, {out, also}, feeds);
    Executable dev = compile_for_device(cpu::emulated_gpu(), g, {out, also}, feeds);
    const cpu::EmulatedGpuCounts before = cpu::emulated_gpu_counts();
    std::vector<Tensor> got = dev.run(feeds);
    const cpu::EmulatedGpuCounts after = cpu::emulated_gpu_counts();
    expect_close(got, host.run(feeds), 1e-5);
    // Up: h > 1.5 for the fold, then the two outputs.
    EXPECT_EQ(after.downloads - before.downloads, 3);
  }
  EXPECT_EQ(cpu::emulated_gpu_counts().live_allocations, live_at_start);
}

// The MLP training step (dense-relu, dropout, dense, cross-entropy, gradients, Adam): every
// fetched value close to the CPU program's, run after run, from several threads at once.
TEST(DeviceProgram, TheMlpTrainingStepMatchesTheCpuConcurrently) {
  test_models::MlpStep step = test_models::make_mlp_step(20, 16, 5, 12);
  Executable host = compile(step.graph, step.fetches, step.feeds);
  Executable dev = compile_for_device(cpu::emulated_gpu(), step.graph, step.fetches, step.feeds);
  const std::vector<Tensor> want = host.run(step.feeds);
  const std::vector<Tensor> first = dev.run(step.feeds);
  expect_close(first, want, 1e-5);
  std::vector<std::thread> threads;
  std::vector<int> mismatches(3, 0);
  for (int t = 0; t < 3; ++t)
    threads.emplace_back([&, t] {
      for (int r = 0; r < 5; ++r) {
        std::vector<Tensor> again = dev.run(step.feeds);
        for (size_t i = 0; i < again.size(); ++i)
          mismatches[t] += !testing::bitwise_equal(again[i], first[i]);
      }
    });
  for (std::thread& th : threads) th.join();
  for (int m : mismatches) EXPECT_EQ(m, 0) << "a device program's runs are deterministic";
}

// ---- device tensors ----

// Three training steps whose parameters and optimizer slots live on the device: fed as device
// tensors, fetched as device tensors (outputs_on_device) and fed back. Against the same device
// program fed and fetching host tensors, each step copies the state down and the results up
// less, exactly (nothing else crosses: the dropout's mask is drawn on the device), and the
// parameters brought back at the end are the CPU program's after the same three steps.
TEST(DeviceTensors, ATrainingLoopKeepsItsParametersOnTheDevice) {
  auto gpu = cpu::emulated_gpu();
  const int64_t live_at_start = cpu::emulated_gpu_counts().live_allocations;
  {
    test_models::MlpStep step = test_models::make_mlp_step(20, 16, 5, 12);
    Executable host = compile(step.graph, step.fetches, step.feeds);
    Executable dev = compile_for_device(gpu, step.graph, step.fetches, step.feeds, {},
                                        /*outputs_on_device=*/true);
    Executable staged = compile_for_device(gpu, step.graph, step.fetches, step.feeds);
    constexpr size_t kFirstParam = 5;  // feeds: x, seed, lr, iteration, y, then the state
    FeedList host_feeds = step.feeds, dev_feeds = step.feeds;
    int64_t state_bytes = 0;
    for (size_t i = kFirstParam; i < dev_feeds.size(); ++i) {
      state_bytes += static_cast<int64_t>(dev_feeds[i].second.nbytes());
      dev_feeds[i].second = detail::to_device(gpu, dev_feeds[i].second);
    }
    std::vector<Tensor> dev_out;
    for (int run = 0; run < 3; ++run) {
      SCOPED_TRACE("step " + std::to_string(run));
      std::vector<Tensor> host_out = host.run(host_feeds);
      cpu::EmulatedGpuCounts before = cpu::emulated_gpu_counts();
      staged.run(host_feeds);
      cpu::EmulatedGpuCounts after = cpu::emulated_gpu_counts();
      const int64_t staged_up = after.upload_bytes - before.upload_bytes;
      const int64_t staged_down = after.download_bytes - before.download_bytes;
      before = cpu::emulated_gpu_counts();
      dev_out = dev.run(dev_feeds);
      after = cpu::emulated_gpu_counts();
      ASSERT_EQ(dev_out.size(), host_out.size());
      for (const Tensor& t : dev_out) EXPECT_EQ(t.device(), Device::cuda(0));
      EXPECT_EQ(after.download_bytes - before.download_bytes, staged_down - bytes_of(host_out))
          << "the results stay on the device";
      // Nothing comes up: the dropout's mask is generated on the device from the seed there
      // (compiler/generator.h), not by a host kernel that would need the seed.
      EXPECT_EQ(after.download_bytes - before.download_bytes, 0);
      if (run > 0)
        EXPECT_EQ(after.upload_bytes - before.upload_bytes, staged_up - state_bytes)
            << "the state is not copied down";
      for (size_t i = 1; i < dev_out.size(); ++i) {  // the new state, fed back
        host_feeds[kFirstParam + i - 1].second = host_out[i];
        dev_feeds[kFirstParam + i - 1].second = dev_out[i];
      }
    }
    std::vector<Tensor> back, want;
    for (size_t i = kFirstParam; i < dev_feeds.size(); ++i) {
      back.push_back(dev_feeds[i].second.to(Device::cpu()));
      want.push_back(host_feeds[i].second);
    }
    expect_close(back, want, 1e-5);
    // The loss is a device tensor too: its bytes are not on the host.
    try {
      dev_out[0].item<float>();
      ADD_FAILURE() << "read a device tensor's bytes on the host";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kFailedPrecondition);
      EXPECT_THAT(e.what(), HasSubstr("is on cuda:0"));
      EXPECT_THAT(e.what(), HasSubstr(".to(Device::cpu())"));
    }
    EXPECT_THAT(dev_out[0].str(), HasSubstr("<on cuda:0>"));
    // The CPU program refuses a device tensor, naming it.
    try {
      host.run(dev_feeds);
      ADD_FAILURE() << "the host program took a device tensor";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_THAT(e.what(), HasSubstr("is on cuda:0, but the program runs on the host"));
    }
  }
  EXPECT_EQ(cpu::emulated_gpu_counts().live_allocations, live_at_start)
      << "device tensors free their memory";
}

// A program keeping its outputs on the device hands a fetched feed back as itself (a device
// tensor) or as a copy (a host feed), and an output a host op computed uploaded.
// Donation on the device: the MLP step's parameters and slots, fed as device tensors and
// donated to their new values, are updated in their own device buffers (the step hands back the
// same tensors, and no new memory stays allocated); a donation the caller still holds a handle
// to is refused and leaves that tensor as it was; the values are the CPU program's.
TEST(DeviceTensors, DonatedDeviceParametersAreUpdatedInPlace) {
  auto gpu = cpu::emulated_gpu();
  const int64_t live_at_start = cpu::emulated_gpu_counts().live_allocations;
  {
    test_models::MlpStep step = test_models::make_mlp_step(20, 16, 5, 12);
    constexpr size_t kFirstParam = 5;  // feeds: x, seed, lr, iteration, y, then the state
    std::vector<Donation> donations;
    for (size_t i = kFirstParam; i < step.feeds.size(); ++i)
      donations.push_back({step.feeds[i].first, static_cast<int>(i - kFirstParam + 1)});
    Executable host = compile(step.graph, step.fetches, step.feeds, donations);
    Executable dev = compile_for_device(gpu, step.graph, step.fetches, step.feeds, donations,
                                        /*outputs_on_device=*/true);
    ASSERT_EQ(dev.memory_stats().num_donated_in_place, static_cast<int>(donations.size()));
    FeedList host_feeds = step.feeds, dev_feeds = step.feeds;
    for (size_t i = kFirstParam; i < dev_feeds.size(); ++i)
      dev_feeds[i].second = detail::to_device(gpu, dev_feeds[i].second);
    // Kept by the caller: the first parameter's donation is refused and it stays as it was.
    const Tensor kept = dev_feeds[kFirstParam].second;
    const Tensor kept_before = kept.to(Device::cpu());
    for (int run = 0; run < 3; ++run) {
      SCOPED_TRACE("step " + std::to_string(run));
      std::vector<const void*> buffers;
      for (size_t i = kFirstParam; i < dev_feeds.size(); ++i)
        buffers.push_back(detail::device_pointer(dev_feeds[i].second));
      std::vector<Tensor> host_out = host.run(host_feeds);
      const DonationStats stats_before = dev.donation_stats();
      FeedList lent = dev_feeds;  // the run takes the donated tensors from `lent`
      for (size_t i = kFirstParam; i < dev_feeds.size(); ++i)
        if (run > 0 || i != kFirstParam) dev_feeds[i].second = Tensor();
      const int64_t live_before = cpu::emulated_gpu_counts().live_allocations;
      std::vector<Tensor> dev_out = dev.run_donating(std::move(lent));
      const DonationStats stats = dev.donation_stats();
      const int64_t refused = run == 0 ? 1 : 0;
      EXPECT_EQ(stats.written_in_place - stats_before.written_in_place,
                static_cast<int64_t>(donations.size()) - refused);
      EXPECT_EQ(stats.refused - stats_before.refused, refused);
      for (size_t i = 1; i < dev_out.size(); ++i) {
        const bool in_place = run > 0 || i != 1;
        EXPECT_EQ(detail::device_pointer(dev_out[i]) == buffers[i - 1], in_place)
            << "parameter " << i - 1;
      }
      // What a step leaves allocated: the loss's buffer (the first also keeps the program's
      // constants on the device, and the refused parameter's new value beside the kept one).
      if (run > 0) EXPECT_EQ(cpu::emulated_gpu_counts().live_allocations - live_before, 1);
      for (size_t i = 1; i < dev_out.size(); ++i) {
        host_feeds[kFirstParam + i - 1].second = host_out[i];
        dev_feeds[kFirstParam + i - 1].second = dev_out[i];
      }
      expect_close({dev_out[0].to(Device::cpu())}, {host_out[0]}, 1e-5);
    }
    EXPECT_TRUE(testing::bitwise_equal(kept.to(Device::cpu()), kept_before))
        << "a refused donation leaves the fed tensor unchanged";
    std::vector<Tensor> back, want;
    for (size_t i = kFirstParam; i < dev_feeds.size(); ++i) {
      back.push_back(dev_feeds[i].second.to(Device::cpu()));
      want.push_back(host_feeds[i].second);
    }
    expect_close(back, want, 1e-5);
  }
  EXPECT_EQ(cpu::emulated_gpu_counts().live_allocations, live_at_start);
}

// A donation whose old value is read after the new one is computed (q = p . 2p, a dot, reads p
// last) is copied into the fed buffer within the device after that read.
TEST(DeviceTensors, ADonationReadAfterItsNewValueIsCopiedInWithinTheDevice) {
  auto gpu = cpu::emulated_gpu();
  Graph g{"copied_donation"};
  Tensor p = g.placeholder(f32, {10, 10}, "p");
  Tensor next = p * 2.0f;
  Tensor q = matmul(p, next);
  const Tensor start = test_models::random_tensor({10, 10}, 8);
  Executable dev = compile_for_device(gpu, g, {next, q}, {{p, start}}, {Donation{p, 0}},
                                      /*outputs_on_device=*/true);
  ASSERT_EQ(dev.memory_stats().num_donated_copied, 1) << "the plan copies it in";
  Tensor fed = detail::to_device(gpu, start);
  const void* buffer = detail::device_pointer(fed);
  FeedList feeds = {{p, std::move(fed)}};
  const cpu::EmulatedGpuCounts before = cpu::emulated_gpu_counts();
  std::vector<Tensor> got = dev.run_donating(std::move(feeds));
  const cpu::EmulatedGpuCounts after = cpu::emulated_gpu_counts();
  EXPECT_EQ(detail::device_pointer(got[0]), buffer) << "the new value is in the fed buffer";
  EXPECT_EQ(dev.donation_stats().copied, 1);
  EXPECT_EQ(after.copies - before.copies, 1);
  expect_close({got[0].to(Device::cpu()), got[1].to(Device::cpu())},
               {start * 2.0f, matmul(start, start * 2.0f)}, 1e-5);
}

// A donation to an output that is another feed (no buffer of its own to compute into) is
// refused on the device, the fed tensor handed back unchanged.
TEST(DeviceTensors, ADonationToAnotherFeedIsRefused) {
  auto gpu = cpu::emulated_gpu();
  Graph g{"donate_to_feed"};
  Tensor p = g.placeholder(f32, {16}, "p");
  Tensor r = g.placeholder(f32, {16}, "r");
  const Tensor pv = test_models::random_tensor({16}, 1), rv = test_models::random_tensor({16}, 2);
  Executable dev = compile_for_device(gpu, g, {p * 2.0f, r}, {{p, pv}, {r, rv}},
                                      {Donation{p, 1}}, /*outputs_on_device=*/true);
  FeedList feeds = {{p, detail::to_device(gpu, pv)}, {r, detail::to_device(gpu, rv)}};
  std::vector<Tensor> got = dev.run_donating(std::move(feeds));
  EXPECT_EQ(dev.donation_stats().refused, 1);
  expect_close({got[0].to(Device::cpu()), got[1].to(Device::cpu())}, {pv * 2.0f, rv}, 0);
  ASSERT_TRUE(feeds[0].second.defined()) << "the refused feed goes back to its entry";
  expect_close({feeds[0].second.to(Device::cpu())}, {pv}, 0);
}

TEST(DeviceTensors, EveryKindOfFetchedValueComesBackOnTheDevice) {
  auto gpu = cpu::emulated_gpu();
  Graph g{"fetch_kinds"};
  Tensor a = g.placeholder(f32, {4, 3}, "a");
  Tensor b = g.placeholder(i64, {2}, "b");
  Tensor picked = gather(tanh(a), b, 0);                     // a device loop's output, fetched
  Tensor folded = any(tanh(a) > Tensor::scalar(0.5f), {1});  // a host kernel's, fetched
  FeedList feeds = {{a, test_models::random_tensor({4, 3}, 61)},
                    {b, Tensor::from_vector<int64_t>({3, 1}, {2})}};
  Executable host = compile(g, {a, b, picked, folded}, feeds);
  Executable dev = compile_for_device(gpu, g, {a, b, picked, folded}, feeds, {}, true);
  const Tensor a_on_device = detail::to_device(gpu, feeds[0].second);
  std::vector<Tensor> got = dev.run({{a, a_on_device}, feeds[1]});
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[0].impl(), a_on_device.impl()) << "a device feed comes back as itself";
  std::vector<Tensor> back;
  for (const Tensor& t : got) {
    EXPECT_EQ(t.device(), Device::cuda(0));
    back.push_back(t.to(Device::cpu()));
  }
  expect_close(back, host.run(feeds), 0);
}

// A variable whose value is on the device (as fit leaves a GPU model's) is read on the host
// through one copy, made again only after the value may have changed; a host program (a
// kiln::function) reads it through a copy and leaves its new value on the host.
TEST(DeviceTensors, AVariableOnTheDeviceIsReadThroughOneHostCopy) {
  auto gpu = cpu::emulated_gpu();
  const Tensor host = test_models::random_tensor({8, 4}, 71);
  Variable v(host, "v");
  EXPECT_EQ(v.device(), Device::cpu());
  v.assign(detail::to_device(gpu, host));
  EXPECT_EQ(v.device(), Device::cuda(0));
  cpu::EmulatedGpuCounts before = cpu::emulated_gpu_counts();
  EXPECT_EQ(v.dtype(), f32);
  EXPECT_EQ(v.shape(), (Shape{8, 4}));
  EXPECT_EQ(cpu::emulated_gpu_counts().downloads, before.downloads) << "a type needs no copy";
  const Tensor first = v.value();
  const Tensor again = v.value();
  EXPECT_EQ(cpu::emulated_gpu_counts().downloads - before.downloads, 1);
  EXPECT_EQ(first.device(), Device::cpu());
  EXPECT_EQ(again.impl(), first.impl()) << "one copy while the value is unchanged";
  EXPECT_TRUE(testing::bitwise_equal(first, host));
  // A step's write access (it lends the variable and puts back its new value) drops the copy.
  const Tensor doubled = host * 2.0f;
  detail::VariableAccess::held(v) = detail::to_device(gpu, doubled);
  EXPECT_TRUE(testing::bitwise_equal(v.value(), doubled));
  EXPECT_TRUE(testing::bitwise_equal(first, host)) << "a Tensor kept from value() is a snapshot";
  EXPECT_EQ(cpu::emulated_gpu_counts().downloads - before.downloads, 2);
  // A compiled function on the host reads it through a copy; its new value stays on the host.
  auto bump = function(
      [&](const Tensor& x) {
        v.assign(v.value() + x);
        return v.value();
      },
      {.name = "bump", .mode = ExecutionMode::kCompiled});
  const Tensor one = ones({8, 4});
  const std::vector<Tensor> got = bump.call({one});
  EXPECT_EQ(v.device(), Device::cpu());
  expect_close({v.value(), got[0]}, {doubled + one, doubled + one}, 0);
  // Assigning a host value brings it back to the host.
  v.assign(detail::to_device(gpu, host));
  v.assign(doubled);
  EXPECT_EQ(v.device(), Device::cpu());
  EXPECT_EQ(v.value().impl(), doubled.impl());
}

// Eager ops on device tensors run on their device as one-op device programs (compiled once per
// signature), their results left there; a host operand is copied up; a gather is a device
// loop; an op the device has no kernel for (a boolean fold) runs on the host inside the
// program; the op's own shape errors come through; recorded into a graph, a device tensor is a
// constant of its value.
TEST(DeviceTensors, EagerOpsOnDeviceTensorsRunThere) {
  auto gpu = cpu::emulated_gpu();
  const Tensor a = test_models::random_tensor({16, 8}, 91);
  const Tensor w = test_models::random_tensor({8, 4}, 92);
  const Tensor da = detail::to_device(gpu, a), dw = detail::to_device(gpu, w);
  for (int round = 0; round < 2; ++round) {  // the second from the kept programs
    SCOPED_TRACE("round " + std::to_string(round));
    const cpu::EmulatedGpuCounts before = cpu::emulated_gpu_counts();
    const Tensor y = relu(matmul(da, dw) + 1.0f);
    const cpu::EmulatedGpuCounts after = cpu::emulated_gpu_counts();
    EXPECT_EQ(y.device(), Device::cuda(0));
    EXPECT_EQ(after.dots - before.dots, 1);
    EXPECT_EQ(after.download_bytes, before.download_bytes) << "nothing comes down";
    expect_close({y.to(Device::cpu())}, {relu(matmul(a, w) + 1.0f)}, 1e-5);
  }
  const Tensor product = da * a;  // a host operand, copied up
  EXPECT_EQ(product.device(), Device::cuda(0));
  expect_close({product.to(Device::cpu())}, {a * a}, 0);
  EXPECT_NEAR(sum(da).to(Device::cpu()).item<float>(), sum(a).item<float>(), 1e-4);
  const Tensor picked = argmax(da, 1);
  EXPECT_EQ(picked.device(), Device::cuda(0));
  EXPECT_TRUE(testing::bitwise_equal(picked.to(Device::cpu()), argmax(a, 1)));
  const Tensor rows = Tensor::from_vector<int64_t>({3, 0, 3}, {3});
  const Tensor gathered = gather(da, rows, 0);
  EXPECT_EQ(gathered.device(), Device::cuda(0));
  EXPECT_TRUE(testing::bitwise_equal(gathered.to(Device::cpu()), gather(a, rows, 0)));
  const Tensor any_positive = any(da > Tensor::scalar(0.0f), {1});
  EXPECT_EQ(any_positive.device(), Device::cuda(0));
  EXPECT_TRUE(
      testing::bitwise_equal(any_positive.to(Device::cpu()), any(a > Tensor::scalar(0.0f), {1})));
  EXPECT_EQ(reshape(da, {8, 16}).device(), Device::cuda(0));
  // Attributes the programs' key prints alike (floats to 6 digits) still get their own program.
  const Tensor seed = Tensor::scalar<int64_t>(7);
  const Tensor device_seed = detail::to_device(gpu, seed);
  for (double high : {1.0, 1.0000004}) {
    const Tensor drawn = random_uniform({64}, device_seed, 0.0, high, f32);
    EXPECT_EQ(drawn.device(), Device::cuda(0));
    EXPECT_TRUE(testing::bitwise_equal(drawn.to(Device::cpu()),
                                       random_uniform({64}, seed, 0.0, high, f32)))
        << "high " << high;
  }
  try {
    matmul(da, da);
    ADD_FAILURE() << "a [16, 8] x [16, 8] product";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
  }
  Graph g{"captures_a_device_tensor"};
  Tensor doubled;
  {
    auto guard = g.as_default();
    doubled = da * 2.0f;
  }
  expect_close(compile(g, {doubled}, {}).run({}), {a * 2.0f}, 0);
}

TEST(DeviceTensors, MisuseIsAClearError) {
  Tensor x = Tensor::from_vector<float>({1, 2, 3});
  EXPECT_EQ(x.to(Device::cpu()).impl(), x.impl()) << "already there";
  auto code_of = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::make_pair(e.code(), std::string(e.what()));
    }
    return std::make_pair(ErrorCode::kInternal, std::string("no error thrown"));
  };
  auto [c1, m1] = code_of([&] { x.to(Device{DeviceType::kCpu, 1}); });
  EXPECT_EQ(c1, ErrorCode::kInvalidArgument) << m1;
  Graph g{"sym"};
  Tensor p = g.placeholder(f32, {3}, "p");
  auto [c2, m2] = code_of([&] { p.to(Device::cuda(0)); });
  EXPECT_EQ(c2, ErrorCode::kInvalidArgument) << m2;
  EXPECT_THAT(m2, HasSubstr("symbolic"));
  auto [c3, m3] = code_of([&] {
    compile(g, {p * 2.0f}, {{p, x}}, {}, CompileOptions{.outputs_on_device = true});
  });
  EXPECT_EQ(c3, ErrorCode::kInvalidArgument) << m3;
  EXPECT_THAT(m3, HasSubstr("outputs_on_device"));
  std::string why;
  if (runtime::cuda::driver(&why) == nullptr) {
    auto [c4, m4] = code_of([&] { x.to(Device::cuda(0)); });
    EXPECT_EQ(c4, ErrorCode::kUnavailable) << m4;
    EXPECT_THAT(m4, HasSubstr("to(cuda:0)"));
    auto [c5, m5] = code_of([&] {
      data::Dataset::from_tensors({x}).batch(2).prefetch_to_device(Device::cuda(0));
    });
    EXPECT_EQ(c5, ErrorCode::kUnavailable) << m5;
    EXPECT_THAT(m5, HasSubstr("prefetch_to_device(cuda:0)"));
  }
}

// A host tensor donated to a device program is refused (the program reads a copy of it on the
// device; device tensors are donated: DeviceTensors.DonatedDeviceParametersAreUpdatedInPlace).
TEST(DeviceProgram, DonatedHostTensorsAreRefusedAndTheFeedKept) {
  Graph g{"donate"};
  Tensor p = g.placeholder(f32, {8}, "p");
  Tensor next = p * 0.5f + 1.0f;
  Tensor fed = test_models::random_tensor({8}, 7);
  const Tensor kept = Tensor::from_vector(fed.to_vector<float>(), {8});
  Executable dev =
      compile_for_device(cpu::emulated_gpu(), g, {next}, {{p, fed}}, {Donation{p, 0}});
  FeedList feeds = {{p, std::move(fed)}};
  std::vector<Tensor> out = dev.run_donating(std::move(feeds));
  EXPECT_EQ(dev.donation_stats().refused, 1);
  EXPECT_EQ(dev.donation_stats().written_in_place, 0);
  expect_close(out, {kept * 0.5f + 1.0f}, 0);
  // The caller's feed is left in its entry, its bytes unchanged.
  ASSERT_TRUE(feeds[0].second.defined());
  expect_close({feeds[0].second}, {kept}, 0);
}

TEST(DeviceProgram, ChoosingADeviceThisMachineLacksIsAClearError) {
  Chain c;
  std::string why;
  if (runtime::cuda::driver(&why) == nullptr) {
    try {
      compile(c.g, {c.y}, c.feeds, {}, CompileOptions{Device::cuda(0)});
      ADD_FAILURE() << "compiled for cuda:0 without a GPU";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kUnavailable) << e.what();
      EXPECT_THAT(e.what(), HasSubstr("compile for cuda:0"));
      EXPECT_THAT(e.what(), HasSubstr(why));
    }
  }
  try {
    compile(c.g, {c.y}, c.feeds, {}, CompileOptions{Device::cpu()});  // the host: fine
    compile(c.g, {c.y}, c.feeds, {}, CompileOptions{Device{DeviceType::kCpu, 1}});
    ADD_FAILURE() << "compiled for cpu:1";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    EXPECT_THAT(e.what(), HasSubstr("cpu:1"));
  }
  // A wrong feed is the CPU program's error.
  Executable dev = compile_for_device(cpu::emulated_gpu(), c.g, {c.y}, c.feeds);
  FeedList bad = c.feeds;
  bad[0].second = test_models::random_tensor({63, 32}, 1);
  try {
    dev.run(bad);
    ADD_FAILURE() << "ran with a wrong feed";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_THAT(e.what(), HasSubstr("placeholder 'x'"));
  }
}

// Two Gaussian blobs in 4-d, labels 0/1.
std::pair<Tensor, Tensor> blobs(int64_t n, uint64_t seed) {
  Tensor labels = convert(random_bernoulli({n}, seed, 0.5), i32);
  Tensor centers = expand_dims(convert(labels, f32) * 4.0 - 2.0, 1);
  return {random_normal({n, 4}, seed + 1) * 0.5 + centers, labels};
}

// A model or a function asked for a GPU this machine lacks says so when compiled or made, and
// the model is left as it was: it still trains on the host.
TEST(DeviceProgram, AModelOrFunctionOnAMissingGpuIsAClearErrorAndTheModelUnchanged) {
  std::string why;
  if (runtime::cuda::driver(&why) != nullptr) GTEST_SKIP() << "this machine has a GPU";
  auto [x, y] = blobs(64, 3);
  nn::Sequential model({nn::Dense(8, "relu"), nn::Dense(2)});
  model.compile(optim::Adam(0.05), nn::SparseCategoricalCrossentropy(true), {"accuracy"});
  try {
    model.compile(optim::Adam(0.05), nn::SparseCategoricalCrossentropy(true), {"accuracy"},
                  {.device = Device::cuda(0)});
    ADD_FAILURE() << "compiled a model for cuda:0 without a GPU";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnavailable) << e.what();
    EXPECT_THAT(e.what(), HasSubstr("cuda:0"));
  }
  nn::History h = model.fit(x, y, {.epochs = 2, .batch_size = 16, .seed = 1, .verbose = 0});
  EXPECT_EQ(h.history["loss"].size(), 2u);
  try {
    Function f([](const std::vector<Tensor>& a) { return std::vector<Tensor>{a[0] * 2.0f}; },
               {.device = Device::cuda(0)});
    ADD_FAILURE() << "made a function for cuda:0 without a GPU";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnavailable) << e.what();
  }
}

// The random differential tests with every compile() a device program on the emulated GPU
// (KILN_TEST_ONLY_DEVICE), against the interpreter: loops, dots and every kernel op, crossing
// between the two memories in every order the generator makes. In a child process.
TEST(DeviceProgram, RandomGraphsOnTheEmulatedGpuMatchTheInterpreter) {
  // kiln_gpu_tests holds the random graph tests but not the model tests the child runs too.
  bool random = false, models = false;
  const ::testing::UnitTest& unit = *::testing::UnitTest::GetInstance();
  for (int i = 0; i < unit.total_test_suite_count(); ++i) {
    random = random || std::string(unit.GetTestSuite(i)->name()) == "Shard/CompiledRandomGraphs";
    models = models || std::string(unit.GetTestSuite(i)->name()) == "Model";
  }
  if (!random || !models) GTEST_SKIP() << "this binary has not every test the child runs";
  const std::string log = ::testing::TempDir() + "/kiln_device_" + std::to_string(getpid());
  const std::string filter =
      "--gtest_filter=Shard/CompiledRandomGraphs.MatchTheInterpreter/0:"
      "Shard/CompiledRandomKernelOpGraphs.MatchTheInterpreter/0:"
      "Shard/CompiledRandomGradients.MatchTheInterpreter/0:"
      "CompiledRandomGraphsConcurrently.MatchTheInterpreter:"
      "Model.FitLearnsASeparableProblem:Model.CompiledAndInterpretedFitAgree:"
      "Model.FitOnADatasetMatchesFitOnTheSameTensors:"
      "DeviceProgram.ChildCompilesForTheEmulatedGpu:"
      "DeviceProgram.ChildModelsKeepTheirVariablesOnTheDevice:"
      "DeviceProgram.ChildFunctionsKeepTheirVariablesOnTheDevice:"
      "DeviceProgram.ChildRecurrentModelsTrainOnTheDevice:"
      "DeviceProgram.ChildEmbeddingModelsTrainOnTheDevice:"
      "RandomControlFlow.CompiledBodiesMatchTheInterpreter";
  const std::map<std::string, std::string> env = {{"KILN_RANDOM_GRAPHS_PER_SHARD", "40"},
                                                  {"GTEST_TOTAL_SHARDS", "1"},
                                                  {"GTEST_SHARD_INDEX", "0"},
                                                  {"KILN_TEST_ONLY_DEVICE", "emulated-gpu"}};
  testing_util::ProcessResult r = testing_util::run_process({"/proc/self/exe", filter}, log, env);
  EXPECT_TRUE(r.exited_ok()) << r.output;
  for (const char* test :
       {"Shard/CompiledRandomGraphs.MatchTheInterpreter/0",
        "Shard/CompiledRandomKernelOpGraphs.MatchTheInterpreter/0",
        "Shard/CompiledRandomGradients.MatchTheInterpreter/0",
        "CompiledRandomGraphsConcurrently.MatchTheInterpreter", "Model.FitLearnsASeparableProblem",
        "Model.CompiledAndInterpretedFitAgree", "Model.FitOnADatasetMatchesFitOnTheSameTensors",
        "DeviceProgram.ChildCompilesForTheEmulatedGpu",
        "DeviceProgram.ChildModelsKeepTheirVariablesOnTheDevice",
        "DeviceProgram.ChildFunctionsKeepTheirVariablesOnTheDevice",
        "DeviceProgram.ChildRecurrentModelsTrainOnTheDevice",
        "DeviceProgram.ChildEmbeddingModelsTrainOnTheDevice",
        "RandomControlFlow.CompiledBodiesMatchTheInterpreter"})
    EXPECT_THAT(r.output, HasSubstr(std::string("[       OK ] ") + test));
}

// A classifier of `layers` (seeded) compiled with Adam and sparse cross-entropy for `device`.
std::unique_ptr<nn::Sequential> classifier_on(Device device, uint64_t seed,
                                              std::vector<nn::LayerRef> layers) {
  auto m = std::make_unique<nn::Sequential>(std::move(layers));
  m->set_seed(seed);
  m->compile(optim::Adam(0.01), nn::SparseCategoricalCrossentropy(true), {"accuracy"},
             {.device = device});
  return m;
}

// What a second epoch of `make`'s model costs on cuda:0 (the emulated GPU in the child) beside
// the host: both first fit once (compiling; the GPU's variables move up), then the epoch's loss
// on each and the GPU's traffic per step of `batch`.
struct DeviceFit {
  double cpu_loss, gpu_loss;
  int64_t down_per_step, up_per_step;
  int64_t copies;  // within the device, over the epoch
};
DeviceFit fit_on_both(const std::function<std::unique_ptr<nn::Sequential>(Device)>& make,
                      const Tensor& x, const Tensor& y, int64_t batch) {
  auto on_cpu = make(Device::cpu()), on_gpu = make(Device::cuda(0));
  const nn::FitOptions fit{.epochs = 1, .batch_size = batch, .seed = 1, .verbose = 0};
  on_cpu->fit(x, y, fit);
  on_gpu->fit(x, y, fit);
  DeviceFit out;
  out.cpu_loss = on_cpu->fit(x, y, fit).history["loss"].at(0);
  const cpu::EmulatedGpuCounts before = cpu::emulated_gpu_counts();
  out.gpu_loss = on_gpu->fit(x, y, fit).history["loss"].at(0);
  const cpu::EmulatedGpuCounts after = cpu::emulated_gpu_counts();
  const int64_t steps = x.dim(0) / batch;
  out.down_per_step = (after.download_bytes - before.download_bytes) / steps;
  out.up_per_step = (after.upload_bytes - before.upload_bytes) / steps;
  out.copies = after.copies - before.copies;
  return out;
}

// Run by the test above in its child: compile() builds device programs there, and so do a
// model's steps.
TEST(DeviceProgram, ChildCompilesForTheEmulatedGpu) {
  const char* mode = std::getenv("KILN_TEST_ONLY_DEVICE");
  if (mode == nullptr) GTEST_SKIP() << "only in RandomGraphsOnTheEmulatedGpuMatchTheInterpreter's child";
  Chain c;
  cpu::EmulatedGpuCounts before = cpu::emulated_gpu_counts();
  Executable e = compile(c.g, {c.s}, c.feeds);
  std::vector<Tensor> got = e.run(c.feeds);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_GT(cpu::emulated_gpu_counts().dots, before.dots);
  EXPECT_THAT(::testing::PrintToString(e.thunk_descriptions()), HasSubstr("on emulated-gpu"));
  auto [x, y] = blobs(64, 3);
  nn::Sequential model({nn::Dense(8, "relu"), nn::Dense(2)});
  model.compile(optim::Adam(0.05), nn::SparseCategoricalCrossentropy(true), {"accuracy"});
  before = cpu::emulated_gpu_counts();
  model.fit(x, y, {.epochs = 1, .batch_size = 16, .seed = 1, .verbose = 0});
  EXPECT_GE(cpu::emulated_gpu_counts().dots - before.dots, 4 * 3) << "forward and backward dots";
  // Here cuda:0 is the emulated GPU: Tensor::to and CompileOptions reach it.
  const Tensor xs = test_models::random_tensor({64, 32}, 1);
  const Tensor on_gpu = xs.to(Device::cuda(0));
  EXPECT_EQ(on_gpu.device(), Device::cuda(0));
  EXPECT_TRUE(testing::bitwise_equal(on_gpu.to(Device::cpu()), xs));
  Executable kept = compile(c.g, {c.s}, c.feeds, {},
                            CompileOptions{.device = Device::cuda(0), .outputs_on_device = true});
  FeedList fed = c.feeds;
  fed[0].second = on_gpu;
  const std::vector<Tensor> out = kept.run(fed);
  EXPECT_EQ(out[0].device(), Device::cuda(0));
  expect_close({out[0].to(Device::cpu())}, got, 1e-6);
  // fit on batches prefetched to the device (the step reads them there): the same weights as
  // from host batches.
  auto fit_weights = [&](bool to_device) {
    nn::Sequential m({nn::Dense(8, "relu"), nn::Dense(2)});
    m.set_seed(3);
    m.compile(optim::Adam(0.05), nn::SparseCategoricalCrossentropy(true), {},
              {.device = Device::cuda(0)});
    data::Dataset batches = data::Dataset::from_tensors({x, y}).batch(16);
    m.fit(to_device ? batches.prefetch_to_device(Device::cuda(0)) : batches,
          {.epochs = 2, .seed = 1, .verbose = 0});
    std::vector<Tensor> w;
    for (const Variable& v : m.weights()) w.push_back(v.value());
    return w;
  };
  const std::vector<Tensor> from_host = fit_weights(false);
  expect_close(fit_weights(true), from_host, 0);
}

// Run by the test above in its child, where cuda:0 is the emulated GPU: fit on the device keeps
// the model's variables and the optimizer's slots there between steps (each step copies its
// batch up and its losses and metrics down, not the state), matching the same model trained on
// the host; the host reads them through copies (weights, last_gradients, save); evaluate and
// predict read them in place; compiled again for the host, the model trains on from them.
TEST(DeviceProgram, ChildModelsKeepTheirVariablesOnTheDevice) {
  if (std::getenv("KILN_TEST_ONLY_DEVICE") == nullptr)
    GTEST_SKIP() << "only in RandomGraphsOnTheEmulatedGpuMatchTheInterpreter's child";
  auto [x, y] = blobs(256, 5);
  auto make = [](Device device) {
    return classifier_on(device, 11, {nn::Dense(512, "relu"), nn::Dense(512, "relu"), nn::Dense(2)});
  };
  auto on_cpu = make(Device::cpu()), on_gpu = make(Device::cuda(0));
  const nn::FitOptions fit{.epochs = 1, .batch_size = 32, .seed = 1, .verbose = 0};
  on_cpu->fit(x, y, fit);
  on_gpu->fit(x, y, fit);
  std::vector<Variable> state = on_gpu->weights();
  for (const Variable& w : on_gpu->trainable_weights())
    for (const Variable& slot : on_gpu->optimizer().slots(w)) state.push_back(slot);
  int64_t state_bytes = 0;
  for (const Variable& v : state) {
    EXPECT_EQ(v.device(), Device::cuda(0)) << v.name();
    state_bytes += static_cast<int64_t>(num_elements(v.shape())) * dtype_size(v.dtype());
  }
  // A second epoch with the state resident: per step, the batch goes up and the losses and
  // metric statistics come down (a few KiB here), never the state (about 3 MiB). (In this
  // child the host model's programs run on the emulated GPU too: not counted.)
  const std::vector<double> cpu_loss = on_cpu->fit(x, y, fit).history["loss"];
  std::vector<const void*> buffers;
  for (const Variable& v : state)
    buffers.push_back(detail::device_pointer(detail::VariableAccess::stored(v)));
  const cpu::EmulatedGpuCounts before = cpu::emulated_gpu_counts();
  const std::vector<double> gpu_loss = on_gpu->fit(x, y, fit).history["loss"];
  const cpu::EmulatedGpuCounts after = cpu::emulated_gpu_counts();
  // Each step donates the state to its new values: updated in its own buffers.
  for (size_t i = 0; i < state.size(); ++i)
    EXPECT_EQ(detail::device_pointer(detail::VariableAccess::stored(state[i])), buffers[i])
        << state[i].name() << " moved: not updated in place";
  const int64_t steps = 256 / 32;
  EXPECT_LT((after.upload_bytes - before.upload_bytes) / steps, 64 << 10) << state_bytes;
  EXPECT_LT((after.download_bytes - before.download_bytes) / steps, 64 << 10) << state_bytes;
  EXPECT_NEAR(gpu_loss.at(0), cpu_loss.at(0), 1e-4 * (1 + cpu_loss.at(0)));
  auto values = [](const std::vector<Variable>& vs) {
    std::vector<Tensor> out;
    for (const Variable& v : vs) out.push_back(v.value());
    return out;
  };
  expect_close(values(on_gpu->weights()), values(on_cpu->weights()), 1e-4);
  // The host sees every variable through a copy: the weights, the last gradients, a save.
  for (const auto& [v, g] : on_gpu->last_gradients()) EXPECT_EQ(g.device(), Device::cpu());
  const std::string path = ::testing::TempDir() + "/kiln_device_model_" + std::to_string(getpid());
  on_gpu->save(path);
  expect_close(values(nn::load_model(path)->weights()), values(on_gpu->weights()), 0);
  std::remove(path.c_str());
  // predict and evaluate read the variables where they are.
  const Tensor predicted_on_cpu = on_cpu->predict(x, 64);
  const cpu::EmulatedGpuCounts before_predict = cpu::emulated_gpu_counts();
  const Tensor predicted = on_gpu->predict(x, 64);
  EXPECT_LT(cpu::emulated_gpu_counts().upload_bytes - before_predict.upload_bytes, state_bytes / 4)
      << "the weights are not copied up again";
  expect_close({predicted}, {predicted_on_cpu}, 1e-4);
  EXPECT_NEAR(on_gpu->evaluate(x, y, 64).at("loss"), on_cpu->evaluate(x, y, 64).at("loss"), 1e-4);
  // Interpreted (on the host), the model reads its device variables through host copies.
  on_gpu->set_execution_mode(ExecutionMode::kInterpreted);
  expect_close({on_gpu->predict(x, 64)}, {predicted_on_cpu}, 1e-4);
  on_gpu->set_execution_mode(ExecutionMode::kCompiled);
  // Compiled again for the host, the model trains on from the device's values, which come back
  // to the host.
  on_gpu->compile(optim::Adam(0.01), nn::SparseCategoricalCrossentropy(true), {"accuracy"},
                  {.device = Device::cpu()});
  on_gpu->fit(x, y, fit);
  for (const Variable& v : on_gpu->weights()) EXPECT_EQ(v.device(), Device::cpu()) << v.name();
}

// Run by the test above in its child: an LSTM trains on cuda:0 (the emulated GPU there) as on
// the host, its scans (forward and the gradient's) running on the device: a step copies up its
// batch and down its losses and metric statistics, not the scans' inputs and outputs.
TEST(DeviceProgram, ChildRecurrentModelsTrainOnTheDevice) {
  if (std::getenv("KILN_TEST_ONLY_DEVICE") == nullptr)
    GTEST_SKIP() << "only in RandomGraphsOnTheEmulatedGpuMatchTheInterpreter's child";
  const int64_t n = 128, steps = 10, features = 6;
  Tensor x = test_models::random_tensor({n, steps, features}, 21);
  std::vector<float> labels(n);
  const std::vector<float> xv = x.to_vector<float>();
  for (int64_t i = 0; i < n; ++i) labels[i] = xv[(i * steps + steps - 1) * features] > 0 ? 1 : 0;
  Tensor y = Tensor::from_vector(labels, {n});
  auto make = [](Device device) { return classifier_on(device, 5, {nn::LSTM(32), nn::Dense(2)}); };
  const DeviceFit f = fit_on_both(make, x, y, 32);
  EXPECT_NEAR(f.gpu_loss, f.cpu_loss, 1e-4 * (1 + f.cpu_loss));
  // A batch is 32 x 10 x 6 floats (7.5 KiB); the scans' xs and ys would be 32 x 10 x 128
  // floats each way.
  EXPECT_LT(f.down_per_step, 1024) << "the scans' values come down";
  EXPECT_LT(f.up_per_step, 16 << 10);
  EXPECT_GT(f.copies, 0) << "the ys are filled within the device";
}

// Run by the test above in its child: a text classifier (Embedding, average over the
// sequence, Dense) trains on cuda:0 (the emulated GPU there) as on the host, its lookups
// (gathers in loops) and their gradient (scatter_add, the device's loop) on the device: a step
// copies up its batch of ids and down its losses and metric statistics, not the table.
TEST(DeviceProgram, ChildEmbeddingModelsTrainOnTheDevice) {
  if (std::getenv("KILN_TEST_ONLY_DEVICE") == nullptr)
    GTEST_SKIP() << "only in RandomGraphsOnTheEmulatedGpuMatchTheInterpreter's child";
  const int64_t n = 128, steps = 12, vocab = 500;
  std::vector<int32_t> ids(n * steps);
  std::vector<float> labels(n);
  std::mt19937 gen(7);
  for (int64_t i = 0; i < n; ++i) {
    labels[i] = static_cast<float>(i % 2);
    // Class 1 draws its ids from the top half of the vocabulary more often.
    for (int64_t t = 0; t < steps; ++t)
      ids[i * steps + t] =
          static_cast<int32_t>(gen() % (vocab / 2) + (i % 2 && t % 3 ? vocab / 2 : 0));
  }
  Tensor x = Tensor::from_vector(ids, {n, steps});
  Tensor y = Tensor::from_vector(labels, {n});
  auto make = [&](Device device) {
    return classifier_on(device, 9,
                         {nn::Embedding(vocab, 64), nn::GlobalAveragePooling1D(), nn::Dense(2)});
  };
  const DeviceFit f = fit_on_both(make, x, y, 32);
  EXPECT_NEAR(f.gpu_loss, f.cpu_loss, 1e-4 * (1 + f.cpu_loss));
  // The table is 500 x 64 floats (125 KiB); a batch of ids 1.5 KiB, its rows' plan for the
  // gradient's scatter_add at most 9 KiB.
  EXPECT_LT(f.down_per_step, 1024) << "the table or its gradient comes down";
  EXPECT_LT(f.up_per_step, 12 << 10);
}

// Run by the test above in its child: a kiln::function on cuda:0 (the emulated GPU there) keeps
// the variables it updates on the device between calls, its results coming back to the host:
// a call copies up its argument and down its result, not the variable.
TEST(DeviceProgram, ChildFunctionsKeepTheirVariablesOnTheDevice) {
  if (std::getenv("KILN_TEST_ONLY_DEVICE") == nullptr)
    GTEST_SKIP() << "only in RandomGraphsOnTheEmulatedGpuMatchTheInterpreter's child";
  const Tensor start = test_models::random_tensor({256, 256}, 3);  // 256 KiB
  Variable w(start, "w");
  auto step = function(
      [&](const Tensor& x) {
        Tensor y = sum(matmul(x, w.value()));
        w.assign(w.value() * 0.5f + 1.0f);
        return y;
      },
      {.name = "step", .mode = ExecutionMode::kCompiled, .device = Device::cuda(0)});
  const Tensor x = test_models::random_tensor({4, 256}, 4);
  Tensor want = start;
  std::vector<Tensor> results;
  const int64_t bytes = static_cast<int64_t>(start.nbytes());
  const void* buffer = nullptr;
  for (int call = 0; call < 4; ++call) {
    SCOPED_TRACE("call " + std::to_string(call));
    const cpu::EmulatedGpuCounts before = cpu::emulated_gpu_counts();
    const Tensor got = step.call({x}).at(0);
    const cpu::EmulatedGpuCounts after = cpu::emulated_gpu_counts();
    EXPECT_EQ(got.device(), Device::cpu());
    EXPECT_EQ(w.device(), Device::cuda(0));
    // The first call moves w up; the later ones update it in that buffer (donated).
    const void* now = detail::device_pointer(detail::VariableAccess::stored(w));
    if (call > 0) EXPECT_EQ(now, buffer) << "w moved: not updated in place";
    buffer = now;
    if (call > 0) EXPECT_LT(after.upload_bytes - before.upload_bytes, bytes / 4);
    EXPECT_LT(after.download_bytes - before.download_bytes, bytes / 4);
    expect_close({got}, {sum(matmul(x, want))}, 1e-5);
    want = want * 0.5f + 1.0f;
  }
  expect_close({w.value()}, {want}, 1e-6);
}

// ---- on a GPU: skipped without one, saying so ----

TEST(DeviceProgramGpu, TheMlpTrainingStepOnCuda0MatchesTheCpu) {
  std::string why;
  if (runtime::cuda::driver(&why) == nullptr) GTEST_SKIP() << "no GPU: " << why;
  test_models::MlpStep step = test_models::make_mlp_step(784, 256, 10, 128);
  Executable host = compile(step.graph, step.fetches, step.feeds);
  Executable dev = compile(step.graph, step.fetches, step.feeds, {},
                           CompileOptions{Device::cuda(0)});
  EXPECT_THAT(::testing::PrintToString(dev.thunk_descriptions()), HasSubstr("on cuda:0"));
  // cuBLASLt sums in another order than the CPU's gemm: close, not equal.
  expect_close(dev.run(step.feeds), host.run(step.feeds), 1e-4);
  expect_close(dev.run(step.feeds), host.run(step.feeds), 1e-4);
}

TEST(DeviceProgramGpu, RandomOpsOnCuda0HaveTheCpusBits) {
  std::string why;
  if (runtime::cuda::driver(&why) == nullptr) GTEST_SKIP() << "no GPU: " << why;
  check_random_ops(nullptr);
}

// Split reductions (compiler/split_reduction.h) on cuda:0: a column sum, a full sum, a bf16
// max and sum, an elementwise output beside its reduction.
TEST(DeviceProgramGpu, SplitReductionsOnCuda0MatchTheCpu) {
  std::string why;
  if (runtime::cuda::driver(&why) == nullptr) GTEST_SKIP() << "no GPU: " << why;
  Graph g{"split_on_gpu"};
  Tensor x = g.placeholder(f32, {65536, 8}, "x");
  Tensor h = g.placeholder(bf16, {2048, 4}, "h");
  Tensor twice = h * 2.0f;
  Tensor e = exp(x * 0.1f);
  check_split(g, {sum(x, {0}), sum(x * x, {0, 1})}, {{x, filled(f32, {65536, 8}, 1)}}, -1,
              false, nullptr);
  check_split(g, {max(twice, {0}), sum(twice, {0})}, {{h, filled(bf16, {2048, 4}, 9)}}, -1,
              false, nullptr);
  check_split(g, {e, sum(e, {0})}, {{x, filled(f32, {65536, 8}, 2)}}, -1, false, nullptr);
}

// A scan on cuda:0 (compiler/device_control_flow.h): its body's dots by cuBLASLt, close to
// the CPU's.
TEST(DeviceProgramGpu, AScanOnCuda0MatchesTheCpu) {
  std::string why;
  if (runtime::cuda::driver(&why) == nullptr) GTEST_SKIP() << "no GPU: " << why;
  for (bool reverse : {false, true}) {
    RnnScan rnn(reverse);
    Executable host = compile(rnn.g, rnn.fetches, rnn.feeds);
    Executable dev = compile_on(nullptr, rnn.g, rnn.fetches, rnn.feeds);
    EXPECT_THAT(::testing::PrintToString(dev.thunk_descriptions()), HasSubstr("on cuda:0"));
    expect_close(dev.run(rnn.feeds), host.run(rnn.feeds), 1e-4);
  }
}

TEST(DeviceProgramGpu, EveryDotLayoutMatchesTheCpuFromAFreshThread) {
  std::string why;
  if (runtime::cuda::driver(&why) == nullptr) GTEST_SKIP() << "no GPU: " << why;
  std::thread([] { check_dot_layouts(nullptr, 1e-5); }).join();
}

TEST(DeviceProgramGpu, ConvolutionsAndTheirGradientsOnCuda0MatchTheCpu) {
  std::string why;
  if (runtime::cuda::driver(&why) == nullptr) GTEST_SKIP() << "no GPU: " << why;
  check_convs(nullptr, 1e-4);
}

TEST(DeviceProgramGpu, PoolingAndItsGradientsOnCuda0MatchTheCpu) {
  std::string why;
  if (runtime::cuda::driver(&why) == nullptr) GTEST_SKIP() << "no GPU: " << why;
  check_pools(nullptr, 1e-5);  // random normal inputs: no ties
}

// Device tensors on cuda:0: a round trip keeps every bit, and three MLP steps with the state
// resident on the GPU (outputs_on_device, fed back) end close to the CPU's parameters.
TEST(DeviceTensorsGpu, ATrainingLoopOnCuda0KeepsItsStateThereAndMatchesTheCpu) {
  std::string why;
  if (runtime::cuda::driver(&why) == nullptr) GTEST_SKIP() << "no GPU: " << why;
  const Tensor x = test_models::random_tensor({33, 7}, 71);
  const Tensor up = x.to(Device::cuda(0));
  EXPECT_EQ(up.device(), Device::cuda(0));
  EXPECT_TRUE(testing::bitwise_equal(up.to(Device::cpu()), x));
  test_models::MlpStep step = test_models::make_mlp_step(784, 128, 10, 256);
  Executable host = compile(step.graph, step.fetches, step.feeds);
  Executable dev = compile(step.graph, step.fetches, step.feeds, {},
                           CompileOptions{.device = Device::cuda(0), .outputs_on_device = true});
  constexpr size_t kFirstParam = 5;
  FeedList host_feeds = step.feeds, dev_feeds = step.feeds;
  for (size_t i = kFirstParam; i < dev_feeds.size(); ++i)
    dev_feeds[i].second = dev_feeds[i].second.to(Device::cuda(0));
  for (int run = 0; run < 3; ++run) {
    std::vector<Tensor> host_out = host.run(host_feeds);
    std::vector<Tensor> dev_out = dev.run(dev_feeds);
    for (size_t i = 1; i < dev_out.size(); ++i) {
      EXPECT_EQ(dev_out[i].device(), Device::cuda(0));
      host_feeds[kFirstParam + i - 1].second = host_out[i];
      dev_feeds[kFirstParam + i - 1].second = dev_out[i];
    }
  }
  std::vector<Tensor> back, want;
  for (size_t i = kFirstParam; i < dev_feeds.size(); ++i) {
    back.push_back(dev_feeds[i].second.to(Device::cpu()));
    want.push_back(host_feeds[i].second);
  }
  expect_close(back, want, 1e-4);
}

// Fit on cuda:0 (its loops and dots there) keeps the CPU fit's losses, epoch by epoch.
TEST(DeviceProgramGpu, ModelFitOnCuda0MatchesTheCpu) {
  std::string why;
  if (runtime::cuda::driver(&why) == nullptr) GTEST_SKIP() << "no GPU: " << why;
  auto [x, y] = blobs(512, 3);
  std::vector<std::vector<double>> losses;
  for (Device device : {Device::cpu(), Device::cuda(0)}) {
    nn::Sequential model({nn::Dense(64, "relu"), nn::Dense(2)});
    model.set_seed(7);
    model.compile(optim::Adam(0.01), nn::SparseCategoricalCrossentropy(true), {"accuracy"},
                  {.device = device});
    losses.push_back(
        model.fit(x, y, {.epochs = 3, .batch_size = 64, .seed = 1, .verbose = 0}).history["loss"]);
    for (const Variable& v : model.weights()) EXPECT_EQ(v.device(), device) << v.name();
  }
  ASSERT_EQ(losses[0].size(), losses[1].size());
  for (size_t i = 0; i < losses[0].size(); ++i)
    EXPECT_NEAR(losses[1][i], losses[0][i], 1e-3 * (1 + losses[0][i])) << "epoch " << i;
}

// Eager ops on tensors on cuda:0 run there (cuBLASLt, the PTX loops) and match the host's.
TEST(DeviceTensorsGpu, EagerOpsOnCuda0MatchTheHost) {
  std::string why;
  if (runtime::cuda::driver(&why) == nullptr) GTEST_SKIP() << "no GPU: " << why;
  const Tensor a = test_models::random_tensor({64, 32}, 97);
  const Tensor w = test_models::random_tensor({32, 16}, 98);
  const Tensor da = a.to(Device::cuda(0)), dw = w.to(Device::cuda(0));
  const Tensor y = relu(matmul(da, dw) + 1.0f);
  ASSERT_EQ(y.device(), Device::cuda(0));
  expect_close({y.to(Device::cpu()), sum(da * a, {1}).to(Device::cpu())},
               {relu(matmul(a, w) + 1.0f), sum(a * a, {1})}, 1e-4);
}

}  // namespace
}  // namespace kiln::compiler
