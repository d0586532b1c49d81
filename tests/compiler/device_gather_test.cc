// Gathers in device loops (a gathered input, compiler/fused_subgraph.h): on a device a gather
// is read by the loop that uses its rows instead of running its kernel on the host, which
// would bring x down and send the rows back up. Its adjoint scatter_add is the device's own
// loop (compiler/llvm_ir/scatter_kernel.h) over a row plan, each row's updates added in the
// kernel's order. Their
// indices are checked before the loops run, with the kernels' errors. Without a GPU: on the
// emulated GPU, whose loops are the device's grid kernels run on the host; on a GPU (skipped here,
// saying so) the same checks on cuda:0.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

#include "compiler/cpu/emulated_device.h"
#include "compiler/cpu/fused_kernel.h"
#include "compiler/device_backend.h"
#include "compiler/executable.h"
#include "kiln/kiln.h"
#include "runtime/cuda/driver.h"
#include "tests/compiler/compiler_test_util.h"

namespace kiln::compiler {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// The program for `device`, or for cuda:0 when it is null (the GPU tests).
Executable compile_on(const std::shared_ptr<const DeviceBackend>& device, const Graph& g,
                      const std::vector<Tensor>& fetches, const FeedList& feeds) {
  return device ? compile_for_device(device, g, fetches, feeds)
                : compile(g, fetches, feeds, {}, CompileOptions{Device::cuda(0)});
}

std::string thunks(const Executable& e) { return ::testing::PrintToString(e.thunk_descriptions()); }

// The kOutOfRange error `run` throws (a failure when it throws none or another code), beside the
// one the reference `want_run` throws: the message the caller checks.
std::string out_of_range_error(const std::function<void()>& run,
                               const std::function<void()>& want_run) {
  std::string want, got;
  try {
    want_run();
  } catch (const Error& e) {
    want = e.what();
  }
  try {
    run();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kOutOfRange);
    got = e.what();
  }
  EXPECT_EQ(got, want);  // the kernel's message, word for word
  return got;
}

// Values 0.5 * (i mod 37) - 9 of `dtype` (exact in every dtype), never all zero.
Tensor table(DType dtype, const Shape& shape) {
  std::vector<double> v(num_elements(shape));
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.5 * static_cast<double>(i % 37) - 9;
  return Tensor::from_vector(v, shape).to(dtype);
}

Tensor indices(DType dtype, const std::vector<int64_t>& values, const Shape& shape) {
  return Tensor::from_vector(values, shape).to(dtype);
}

// A gather's or scatter_add's operands: x, the axis, the indices; and whether a device runs
// it (scatter_add in bf16 stays on the host).
struct Case {
  std::string name;
  DType dtype;
  Shape x;
  int64_t axis;
  DType index_dtype;
  std::vector<int64_t> index_values;
  Shape index_shape;
  bool on_device = true;
};

// Gathers along every kind of axis, of every index rank (a scalar index too), in several
// dtypes, each with an elementwise consumer and a row sum: on `device` they are loops (no
// gather kernel runs), and the gathered values and their consumers are the CPU program's bits;
// the sums are close (a device loop may add in another order).
void check_gathers(const std::shared_ptr<const DeviceBackend>& device) {
  const std::vector<Case> cases = {
      {"embedding rows", f32, {50, 16}, 0, i32, {3, 0, 49, 3, 17, 8}, {6}},
      {"embedding of a batch of sequences",
       bf16,
       {40, 12},
       0,
       i64,
       {1, 2, 3, 39, 0, 0, 7, 7, 38, 20, 11, 5},
       {3, 4}},
      {"a middle axis", f32, {3, 9, 5}, 1, i32, {8, 0, 4, 4}, {2, 2}},
      {"the last axis", f64, {6, 7}, -1, i64, {6, 5, 0}, {3}},
      {"a scalar index", f32, {10, 33}, 0, i32, {9}, {}},
      {"one element of a vector", f32, {7}, -1, i32, {4}, {}},
      {"integers", i32, {8, 4}, 0, i32, {7, 1, 1}, {3}},
      {"booleans", bool_, {5, 6}, 1, i64, {5, 0}, {2}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Graph g{"gathers"};
    Tensor x = g.placeholder(c.dtype, c.x, "x");
    Tensor idx = g.placeholder(c.index_dtype, c.index_shape, "idx");
    Tensor y = gather(x, idx, c.axis);
    std::vector<Tensor> fetches = {y};
    if (c.dtype == bool_) {
      fetches.push_back(logical_not(y));
    } else {
      fetches.push_back(y * 2 + 1);
      if (c.dtype != i32 && !y.shape().empty())
        fetches.push_back(sum(y * y, {static_cast<int64_t>(y.shape().size()) - 1}));
    }
    FeedList feeds = {{x, table(c.dtype, c.x)},
                      {idx, indices(c.index_dtype, c.index_values, c.index_shape)}};
    Executable host = compile(g, fetches, feeds);
    Executable dev = compile_on(device, g, fetches, feeds);
    EXPECT_THAT(thunks(dev), Not(HasSubstr("kernel gather"))) << dev.fusion_log();
    EXPECT_THAT(thunks(dev), HasSubstr("gather")) << dev.fusion_log();
    std::vector<Tensor> want = host.run(feeds), got = dev.run(feeds);
    ASSERT_EQ(got.size(), want.size());
    testing::expect_bitwise_equal({got[0], got[1]}, {want[0], want[1]});
    if (got.size() > 2) testing::expect_close({got[2]}, {want[2]}, 1e-6);
  }
}

TEST(DeviceGather, GathersAreLoopsWithTheKernelsValues) { check_gathers(cpu::emulated_gpu()); }

TEST(DeviceGatherGpu, GathersOnCuda0MatchTheCpu) {
  std::string why;
  if (runtime::cuda::driver(&why) == nullptr) GTEST_SKIP() << "no GPU: " << why;
  check_gathers(nullptr);
}

// An embedding bag: rows looked up, scaled and summed over the sequence, in one loop on the
// device. With indices fed from the host, a run copies up only its feeds and brings down only
// its result: no host kernel, no x down, no rows up.
TEST(DeviceGather, AnEmbeddingBagIsOneLoopAndMovesOnlyItsFeedsAndResult) {
  auto gpu = cpu::emulated_gpu();
  Graph g{"embedding_bag"};
  Tensor x = g.placeholder(f32, {100, 32}, "table");
  Tensor idx = g.placeholder(i32, {8, 5}, "tokens");
  Tensor w = g.placeholder(f32, {32}, "scale");
  Tensor bag = sum(gather(x, idx) * w, {1});  // [8, 32]
  std::vector<int64_t> tokens(40);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int64_t>((i * 37) % 100);
  FeedList feeds = {
      {x, table(f32, {100, 32})}, {idx, indices(i32, tokens, {8, 5})}, {w, table(f32, {32})}};
  Executable host = compile(g, {bag}, feeds);
  Executable dev = compile_for_device(gpu, g, {bag}, feeds);
  EXPECT_EQ(dev.num_thunks(), 1) << thunks(dev) << "\n" << dev.fusion_log();
  EXPECT_EQ(dev.num_fused_thunks(), 1) << dev.fusion_log();
  dev.run(feeds);
  const cpu::EmulatedGpuCounts before = cpu::emulated_gpu_counts();
  std::vector<Tensor> got = dev.run(feeds);
  const cpu::EmulatedGpuCounts after = cpu::emulated_gpu_counts();
  testing::expect_close(got, host.run(feeds), 1e-6);
  int64_t fed = 0;
  for (const auto& [t, v] : feeds) fed += static_cast<int64_t>(v.nbytes());
  EXPECT_EQ(after.upload_bytes - before.upload_bytes, fed);
  EXPECT_EQ(after.download_bytes - before.download_bytes, 8 * 32 * 4);
  EXPECT_EQ(after.launches - before.launches, 1);
}

// An index out of range fails the run with the kernel's error (kOutOfRange, naming the index,
// its position and the axis), negative ones too, and the program runs again afterwards.
TEST(DeviceGather, AnIndexOutOfRangeIsTheKernelsErrorAndTheProgramRunsOn) {
  auto gpu = cpu::emulated_gpu();
  Graph g{"out_of_range"};
  Tensor x = g.placeholder(f32, {5, 4}, "x");
  Tensor idx = g.placeholder(i64, {2, 2}, "idx");
  Tensor y = gather(x, idx) + 1.0f;
  const Tensor good = indices(i64, {0, 4, 2, 1}, {2, 2});
  FeedList feeds = {{x, table(f32, {5, 4})}, {idx, good}};
  Executable host = compile(g, {y}, feeds);
  Executable dev = compile_for_device(gpu, g, {y}, feeds);
  for (int64_t bad : {int64_t{5}, int64_t{-1}, int64_t{1} << 40}) {
    SCOPED_TRACE(bad);
    FeedList bad_feeds = {{x, feeds[0].second}, {idx, indices(i64, {0, 4, bad, 1}, {2, 2})}};
    const std::string got =
        out_of_range_error([&] { dev.run(bad_feeds); }, [&] { host.run(bad_feeds); });
    EXPECT_THAT(got, HasSubstr("index " + std::to_string(bad) + " at position [1,0]"));
    EXPECT_THAT(got, HasSubstr("out of range [0, 5) for axis 0 of x f32[5,4]"));
    testing::expect_bitwise_equal(dev.run(feeds), host.run(feeds));
  }
}

// Indices the device computes (a feed plus one, an argmax) come down to be checked before the
// gather's loop runs: the results are right, and one out of range is still the kernel's error.
TEST(DeviceGather, IndicesComputedOnTheDeviceAreCheckedToo) {
  auto gpu = cpu::emulated_gpu();
  Graph g{"computed_indices"};
  Tensor x = g.placeholder(f32, {6, 3}, "x");
  Tensor idx = g.placeholder(i32, {4}, "idx");
  Tensor scores = g.placeholder(f32, {4, 6}, "scores");
  Tensor shifted = gather(x, idx + 1) * 3.0f;
  Tensor best = gather(x, argmax(scores, 1)) - 1.0f;
  std::vector<float> s(24);
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<float>((i * 7) % 11);
  FeedList feeds = {{x, table(f32, {6, 3})},
                    {idx, indices(i32, {0, 4, 2, 1}, {4})},
                    {scores, Tensor::from_vector(s, {4, 6})}};
  Executable host = compile(g, {shifted, best}, feeds);
  Executable dev = compile_for_device(gpu, g, {shifted, best}, feeds);
  EXPECT_THAT(thunks(dev), Not(HasSubstr("kernel gather"))) << dev.fusion_log();
  testing::expect_bitwise_equal(dev.run(feeds), host.run(feeds));
  FeedList bad = feeds;
  bad[1].second = indices(i32, {0, 5, 2, 1}, {4});  // 5 + 1 is out of range
  try {
    dev.run(bad);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kOutOfRange);
    EXPECT_THAT(e.what(), HasSubstr("index 6 at position [1]"));
  }
}

// Training an embedding on the device: the gather's gradient (a scatter_add) runs there too,
// so a step copies up its feeds (and the scatter_add's row plan) and brings down only what it
// fetches, with the CPU program's values.
TEST(DeviceGather, AnEmbeddingsGradientRunsOnTheDevice) {
  auto gpu = cpu::emulated_gpu();
  Graph g{"embedding_grad"};
  Tensor x = g.placeholder(f32, {20, 8}, "table");
  Tensor idx = g.placeholder(i32, {6}, "tokens");
  Tensor loss = sum(square(gather(x, idx) * 0.5f), {0, 1});
  Tensor dx = gradients(loss, {x})[0];
  FeedList feeds = {{x, table(f32, {20, 8})}, {idx, indices(i32, {3, 3, 19, 0, 7, 3}, {6})}};
  Executable host = compile(g, {loss, dx}, feeds);
  Executable dev = compile_for_device(gpu, g, {loss, dx}, feeds);
  EXPECT_THAT(thunks(dev), HasSubstr("kernel scatter_add on emulated-gpu")) << thunks(dev);
  dev.run(feeds);
  const cpu::EmulatedGpuCounts before = cpu::emulated_gpu_counts();
  std::vector<Tensor> got = dev.run(feeds);
  const cpu::EmulatedGpuCounts after = cpu::emulated_gpu_counts();
  testing::expect_close(got, host.run(feeds), 1e-6);
  EXPECT_EQ(after.download_bytes - before.download_bytes, 4 + 20 * 8 * 4);
  // Up: the table, the ids, and the row plan of the gradient's scatter_add.
  const int64_t plan = static_cast<int64_t>(scatter_add_plan(feeds[1].second, 20).size()) * 8;
  EXPECT_EQ(after.upload_bytes - before.upload_bytes, 20 * 8 * 4 + 6 * 4 + plan);
}

// scatter_adds along every kind of axis, with duplicate indices, in each dtype the device's
// loop adds in: on `device` they run there (no host kernel) with the kernel's bits, since each
// row adds its updates in the kernel's order; a bf16 one stays the host's kernel.
void check_scatter_adds(const std::shared_ptr<const DeviceBackend>& device) {
  const std::vector<Case> cases = {
      {"an embedding's gradient", f32, {50, 16}, 0, i32, {3, 0, 49, 3, 17, 3, 8}, {7}, true},
      {"a batch of sequences", f64, {40, 12}, 0, i64, {1, 2, 1, 39, 0, 0, 7, 7}, {2, 4}, true},
      {"a middle axis", f32, {3, 9, 5}, 1, i32, {8, 0, 4, 4}, {2, 2}, true},
      {"the last axis", i64, {6, 7}, -1, i64, {6, 5, 0, 6}, {4}, true},
      {"integers", i32, {8, 4}, 0, i32, {7, 1, 1}, {3}, true},
      {"bf16 (a host kernel)", bf16, {8, 4}, 0, i32, {7, 1, 1}, {3}, false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Graph g{"scatter_adds"};
    Tensor x = g.placeholder(c.dtype, c.x, "x");
    Tensor idx = g.placeholder(c.index_dtype, c.index_shape, "idx");
    Shape us = c.x;
    const int64_t axis = c.axis < 0 ? c.axis + static_cast<int64_t>(c.x.size()) : c.axis;
    us.erase(us.begin() + axis);
    us.insert(us.begin() + axis, c.index_shape.begin(), c.index_shape.end());
    Tensor u = g.placeholder(c.dtype, us, "updates");
    // x computed on the device (x * 1), so that the loop reads a device value.
    Tensor y = scatter_add(x * 1, idx, u, c.axis);
    FeedList feeds = {{x, table(c.dtype, c.x)},
                      {idx, indices(c.index_dtype, c.index_values, c.index_shape)},
                      {u, table(c.dtype, us)}};
    Executable host = compile(g, {y}, feeds);
    Executable dev = compile_on(device, g, {y}, feeds);
    if (c.on_device) {
      EXPECT_THAT(thunks(dev), HasSubstr("kernel scatter_add on ")) << thunks(dev);
    } else {
      EXPECT_THAT(thunks(dev), Not(HasSubstr("kernel scatter_add on "))) << thunks(dev);
    }
    testing::expect_bitwise_equal(dev.run(feeds), host.run(feeds));
  }
}

TEST(DeviceScatterAdd, ScatterAddsRunOnTheDeviceWithTheKernelsBits) {
  check_scatter_adds(cpu::emulated_gpu());
}

TEST(DeviceScatterAddGpu, ScatterAddsOnCuda0MatchTheCpu) {
  std::string why;
  if (runtime::cuda::driver(&why) == nullptr) GTEST_SKIP() << "no GPU: " << why;
  check_scatter_adds(nullptr);
}

// Duplicate indices add in the kernel's order (the indices' order), which f32 rounding shows:
// 1e8, -1e8, 1 in that order sum to 1; in another order the 1 is lost.
TEST(DeviceScatterAdd, DuplicateIndicesAddInTheKernelsOrder) {
  Graph g{"scatter_order"};
  Tensor x = g.placeholder(f32, {3, 1}, "x");
  Tensor idx = g.placeholder(i32, {5}, "idx");
  Tensor u = g.placeholder(f32, {5, 1}, "u");
  Tensor y = scatter_add(x * 1, idx, u);
  FeedList feeds = {{x, Tensor::from_vector(std::vector<float>{0, 0, 0}, {3, 1})},
                    {idx, indices(i32, {1, 2, 1, 1, 2}, {5})},
                    {u, Tensor::from_vector(std::vector<float>{1e8f, 1, -1e8f, 1, -1}, {5, 1})}};
  Executable dev = compile_for_device(cpu::emulated_gpu(), g, {y}, feeds);
  EXPECT_THAT(thunks(dev), HasSubstr("kernel scatter_add on ")) << thunks(dev);
  const std::vector<Tensor> got = dev.run(feeds);
  EXPECT_EQ(got[0].to_vector<float>(), (std::vector<float>{0, 1, 0}));
  testing::expect_bitwise_equal(got, compile(g, {y}, feeds).run(feeds));
}

// An index out of range fails the run with scatter_add's kernel error, word for word.
TEST(DeviceScatterAdd, AnIndexOutOfRangeIsTheKernelsError) {
  Graph g{"scatter_out_of_range"};
  Tensor x = g.placeholder(f32, {5, 4}, "x");
  Tensor idx = g.placeholder(i32, {3}, "idx");
  Tensor u = g.placeholder(f32, {3, 4}, "u");
  Tensor y = scatter_add(x, idx, u) * 2.0f;
  FeedList feeds = {
      {x, table(f32, {5, 4})}, {idx, indices(i32, {0, -2, 1}, {3})}, {u, table(f32, {3, 4})}};
  Executable host = compile(g, {y}, feeds);
  Executable dev = compile_for_device(cpu::emulated_gpu(), g, {y}, feeds);
  const std::string got = out_of_range_error([&] { dev.run(feeds); }, [&] { host.run(feeds); });
  EXPECT_THAT(got, HasSubstr("scatter_add: index -2 at position [1]"));
}

// The row plan: the rows the indices name, ascending, each with its positions in order; the same
// from the counting sort (few rows) and the sort (many).
TEST(DeviceScatterAdd, TheRowPlanListsEachRowsPositionsInOrder) {
  const std::vector<int64_t> want = {3, 0, 1, 3, 0, 1, 2, 4, 1, 3, 0, 2};
  EXPECT_EQ(scatter_add_plan(indices(i32, {3, 0, 3, 1}, {4}), 4), want);
  EXPECT_EQ(scatter_add_plan(indices(i64, {3, 0, 3, 1}, {2, 2}), int64_t{1} << 40), want);
  EXPECT_EQ(scatter_add_plan(indices(i32, {}, {0}), 5), (std::vector<int64_t>{0, 0}));
}

// The loop on a host grid of every shape (one block of one thread, blocks of more threads than
// items, a grid-stride walk): every (o, row, k) is computed once, with the kernel's bits, and
// rows no index names keep x's values.
TEST(DeviceScatterAdd, EveryGridComputesEveryRowOnce) {
  const DeviceScatterAdd s{
      .dtype = f32, .outer = 3, .dim = 6, .inner = 5, .count = 6};
  cpu::HostGridKernels grid = cpu::compile_scatter_add_for_host(s);
  const Tensor x = table(f32, {3, 6, 5}), u = table(f32, {3, 6, 5}) * 2;
  const Tensor idx = indices(i64, {3, 0, 3, 5, 3, 1}, {6});
  Tensor want = Tensor::from_bytes(f32, {3, 6, 5}, x.raw_data(), x.nbytes());
  {
    auto w = want.mutable_data<float>();
    auto uv = u.data<float>();
    for (int64_t o = 0; o < 3; ++o)
      for (int64_t j = 0; j < 6; ++j)
        for (int64_t k = 0; k < 5; ++k)
          w[(o * 6 + idx.data<int64_t>()[j]) * 5 + k] += uv[(o * 6 + j) * 5 + k];
  }
  std::vector<int64_t> plan = scatter_add_plan(idx, 6);
  for (auto [blocks, threads] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {2, 7}, {1, 64}}) {
    Tensor y = Tensor::from_bytes(f32, {3, 6, 5}, x.raw_data(), x.nbytes());
    void* ins[] = {const_cast<void*>(u.raw_data()), plan.data()};
    void* outs[] = {y.raw_mutable_data()};
    for (int64_t b = 0; b < blocks; ++b)
      for (int64_t t = 0; t < threads; ++t) grid.fns[0](ins, outs, b, threads, t, blocks);
    EXPECT_TRUE(testing::bitwise_equal(y, want)) << blocks << " x " << threads;
  }
}

// The loop itself, on the CPU's emitter: an index outside [0, dim) (never run by a program,
// which checks first) reads nothing and gives 0, in a plain loop and in a reduction.
TEST(DeviceGather, TheLoopReadsZeroForAnIndexOutOfRange) {
  FusedSubgraph sg;
  sg.name = "gather_rows";
  const int idx = sg.add_mapped_input(i32, {4, 3}, StridedView{{1, 0}, 0}, {4});
  const int rows = sg.add_gathered_input(f32, {4, 3}, StridedView{{0, 1}, 0}, {2, 3},
                                         {.indices = idx, .stride = 3, .dim = 2});
  sg.add_output(rows);
  FusedSubgraph red = sg;
  red.name = "gather_row_sums";
  red.outputs.clear();
  red.add_output(red.add_reduce(ReduceKind::kSum, rows, {1}));
  std::vector<cpu::FusedKernel> k = cpu::compile_elementwise({sg, red});
  const std::vector<Tensor> in = {
      Tensor::from_vector(std::vector<int32_t>{1, -1, 2, 0}, {4}),
      Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3})};
  EXPECT_EQ(k[0].run(in)[0].to_vector<float>(),
            (std::vector<float>{4, 5, 6, 0, 0, 0, 0, 0, 0, 1, 2, 3}));
  EXPECT_EQ(k[1].run(in)[0].to_vector<float>(), (std::vector<float>{15, 0, 0, 6}));
}

// What the IR refuses: indices that are not an earlier integer input, and a view that would
// reach past the buffer at the largest index.
TEST(DeviceGather, TheIrRefusesAMalformedGather) {
  FusedSubgraph sg;
  const int f = sg.add_input(f32, {4, 3});
  EXPECT_THROW(sg.add_gathered_input(f32, {4, 3}, StridedView{{0, 1}, 0}, {2, 3},
                                     {.indices = f, .stride = 3, .dim = 2}),
               Error);
  const int idx = sg.add_mapped_input(i32, {4, 3}, StridedView{{1, 0}, 0}, {4});
  EXPECT_THROW(sg.add_gathered_input(f32, {4, 3}, StridedView{{0, 1}, 0}, {2, 3},
                                     {.indices = idx, .stride = 3, .dim = 3}),
               Error);
  EXPECT_THROW(sg.add_gathered_input(f32, {4, 3}, StridedView{{0, 1}, 0}, {2, 3},
                                     {.indices = idx + 5, .stride = 3, .dim = 2}),
               Error);
}

// The CPU reads gathers in the loops that use them too, with the kernel's check first; a gather
// nothing else in its loop reads is left to its kernel (it copies whole rows), and the log says
// so.
TEST(DeviceGather, TheCpuReadsGathersInLoopsAndLeavesALoneOneToItsKernel) {
  Graph g{"cpu_gather"};
  Tensor x = g.placeholder(f32, {5, 4}, "x");
  Tensor idx = g.placeholder(i32, {3}, "idx");
  Tensor scaled = gather(x, idx) * 2.0f;
  Tensor alone = gather(x, idx, 1);
  FeedList feeds = {{x, table(f32, {5, 4})}, {idx, indices(i32, {3, 0, 2}, {3})}};
  Executable e = compile(g, {scaled, alone}, feeds);
  EXPECT_EQ(e.num_fused_thunks(), 1) << e.fusion_log();
  EXPECT_EQ(e.num_thunks(), 2) << thunks(e);
  EXPECT_THAT(e.fusion_log(), HasSubstr("no loop reads it"));
  testing::expect_bitwise_equal(e.run(feeds), g.run(feeds, {scaled, alone}));
  FeedList bad = feeds;
  bad[1].second = indices(i32, {3, 4, 5}, {3});  // 5 is out of range for axis 0 only
  Executable only_scaled = compile(g, {scaled}, feeds);
  const std::string got =
      out_of_range_error([&] { only_scaled.run(bad); }, [&] { g.run(bad, {scaled}); });
  EXPECT_THAT(got, HasSubstr("index 5 at position [2]"));
}

}  // namespace
}  // namespace kiln::compiler
