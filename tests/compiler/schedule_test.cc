// The thunk scheduler (compiler/schedule.h): every order respects the dependencies, the memory
// schedule's planned arena never exceeds the graph order's, a hand-computed case where it is
// strictly smaller, and the effect on an Executable's memory plan (including the MLP step's).
#include "compiler/schedule.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>

#include "compiler/executable.h"
#include "kiln/kiln.h"
#include "tests/compiler/compiler_test_util.h"
#include "tests/compiler/mlp_step.h"

namespace kiln::compiler {
namespace {

using ::testing::HasSubstr;

// Sets KILN_SCHEDULE for one scope.
struct ScheduleEnv {
  explicit ScheduleEnv(const char* value) { setenv("KILN_SCHEDULE", value, 1); }
  ~ScheduleEnv() { unsetenv("KILN_SCHEDULE"); }
};

// Units over values {node, output}; types[node][output] is f32[bytes / 4].
struct Dag {
  std::vector<ScheduleUnit> units;
  std::vector<std::vector<TensorType>> types;
  std::vector<ValueRef> outside;
  ValueSizes sizes() const { return {types, outside}; }
  ValueRef value(int64_t bytes) {
    types.push_back({TensorType{f32, {bytes / 4}}});
    return {static_cast<int>(types.size()) - 1, 0};
  }
};

void expect_valid_order(const Dag& d, const std::vector<int>& order) {
  const int n = static_cast<int>(d.units.size());
  ASSERT_EQ(static_cast<int>(order.size()), n);
  std::vector<int> position(n, -1);
  for (int k = 0; k < n; ++k) {
    ASSERT_GE(order[k], 0);
    ASSERT_LT(order[k], n);
    ASSERT_EQ(position[order[k]], -1) << "unit " << order[k] << " twice";
    position[order[k]] = k;
  }
  for (int u = 0; u < n; ++u) {
    for (const ValueRef& r : d.units[u].reads) {
      for (int w = 0; w < n; ++w) {
        for (const ValueRef& v : d.units[w].writes) {
          if (v.node == r.node && v.output == r.output) {
            EXPECT_LT(position[w], position[u])
                << "unit " << u << " runs before unit " << w << ", which writes what it reads";
          }
        }
      }
    }
  }
}

TEST(ScheduleTest, RandomDagsRespectDependenciesAndNeverPlanMoreThanTheGraphOrder) {
  int smaller = 0;
  for (uint32_t seed = 0; seed < 300; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    auto pick = [&](int n) { return static_cast<int>(rng() % n); };
    Dag d;
    const int n = 1 + pick(40);
    std::vector<ValueRef> external = {d.value(256), d.value(64)};  // placeholders, constants
    std::vector<ValueRef> written;
    for (int u = 0; u < n; ++u) {
      ScheduleUnit unit;
      int reads = pick(4);
      for (int r = 0; r < reads; ++r) {
        bool from_unit = !written.empty() && pick(5) != 0;
        unit.reads.push_back(from_unit ? written[pick(written.size())] : external[pick(2)]);
      }
      int writes = 1 + pick(2);
      for (int w = 0; w < writes; ++w) {
        ValueRef v = d.value(4 * (1 + pick(2000)));
        unit.writes.push_back(v);
        written.push_back(v);
        if (pick(8) == 0) d.outside.push_back(v);  // fetched
      }
      d.units.push_back(std::move(unit));
    }
    // Unit indices in a random order, so the index order need not be topological.
    std::vector<int> perm(n);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    std::vector<ScheduleUnit> shuffled(n);
    for (int u = 0; u < n; ++u) shuffled[perm[u]] = d.units[u];
    d.units = std::move(shuffled);

    std::vector<int> graph = schedule_units(d.units, d.sizes(), ScheduleKind::kGraphOrder);
    std::vector<int> memory = schedule_units(d.units, d.sizes(), ScheduleKind::kMemory);
    expect_valid_order(d, graph);
    expect_valid_order(d, memory);
    int64_t g = planned_arena_bytes(d.units, d.sizes(), graph);
    int64_t m = planned_arena_bytes(d.units, d.sizes(), memory);
    EXPECT_LE(m, g);
    smaller += m < g;
  }
  std::printf("[ schedule ] the memory schedule planned a smaller arena for %d of 300 DAGs\n",
              smaller);
  EXPECT_GT(smaller, 0);
}

// a (2048 bytes) is read only by z, which also needs b2; b1 (1024) dies at b2 (64). The graph
// order runs a first, so a, b1 and b2 are all live at b2: 3136 bytes. Running the b branch first
// keeps b1 and a apart: b1 [0, 1] and a [2, 3] share offset 0, b2 [1, 3] sits above a: 2112.
TEST(ScheduleTest, RunningTheCheapBranchFirstLowersThePeakByHand) {
  Dag d;
  ValueRef a = d.value(2048), b1 = d.value(1024), b2 = d.value(64), z = d.value(4);
  d.outside = {z};
  d.units = {{{}, {a}}, {{}, {b1}}, {{b1}, {b2}}, {{a, b2}, {z}}};
  std::vector<int> graph = schedule_units(d.units, d.sizes(), ScheduleKind::kGraphOrder);
  std::vector<int> memory = schedule_units(d.units, d.sizes(), ScheduleKind::kMemory);
  EXPECT_EQ(graph, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(memory, (std::vector<int>{1, 2, 0, 3}));
  EXPECT_EQ(planned_arena_bytes(d.units, d.sizes(), graph), 2048 + 1024 + 64);
  EXPECT_EQ(planned_arena_bytes(d.units, d.sizes(), memory), 2048 + 64);
}

TEST(ScheduleTest, EmptyAndErrors) {
  Dag d;
  EXPECT_TRUE(schedule_units(d.units, d.sizes()).empty());
  ValueRef x = d.value(64), y = d.value(64);
  d.units = {{{y}, {x}}, {{x}, {y}}};
  try {
    schedule_units(d.units, d.sizes());
    ADD_FAILURE() << "a cycle was scheduled";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInternal);
    EXPECT_THAT(e.what(), HasSubstr("schedule: the units' dependencies have a cycle"));
  }
  d.units = {{{}, {x}}, {{}, {x}}};
  EXPECT_THROW(
      {
        try {
          schedule_units(d.units, d.sizes());
        } catch (const Error& e) {
          EXPECT_THAT(e.what(), HasSubstr("value %0:0 is written by two units"));
          throw;
        }
      },
      Error);
  ScheduleEnv env("fastest");
  try {
    default_schedule_kind();
    ADD_FAILURE() << "a bad KILN_SCHEDULE was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_THAT(e.what(), HasSubstr("KILN_SCHEDULE='fastest': expected 'memory' or 'graph'"));
  }
}

// The same graph as the hand-computed case, as dots (kernel thunks, no fusion between them):
// a = x.wa [64, 256] (64 KiB) waits for b2 = (x.wb).wc [64, 2] while b1 = x.wb [64, 128] (32 KiB)
// lives; z = a^T b2 reads both (one dot, contracting the rows).
TEST(ScheduleTest, ExecutableArenaShrinksWhenTheCheapBranchRunsFirst) {
  Graph g{"branches"};
  Tensor x = g.placeholder(f32, {64, 256}, "x");
  Tensor wa = g.placeholder(f32, {256, 256}, "wa");
  Tensor wb = g.placeholder(f32, {256, 128}, "wb");
  Tensor wc = g.placeholder(f32, {128, 2}, "wc");
  Tensor a = matmul(x, wa);
  Tensor b2 = matmul(matmul(x, wb), wc);
  Tensor z = dot(a, b2, {0}, {0});
  std::mt19937 rng(3);
  auto rand = [&](Shape s) { return test_models::random_normal_tensor(s, rng, 0.1f); };
  FeedList feeds = {
      {x, rand({64, 256})}, {wa, rand({256, 256})}, {wb, rand({256, 128})}, {wc, rand({128, 2})}};
  MemoryStats graph_order, memory;
  std::vector<Tensor> graph_result, memory_result;
  {
    ScheduleEnv env("graph");
    Executable e = compile(g, {z}, feeds);
    graph_order = e.memory_stats();
    graph_result = e.run(feeds);
  }
  Executable e = compile(g, {z}, feeds);
  memory = e.memory_stats();
  memory_result = e.run(feeds);
  std::printf("[ schedule ] branches: arena %lld bytes in graph order, %lld scheduled\n",
              static_cast<long long>(graph_order.arena_bytes),
              static_cast<long long>(memory.arena_bytes));
  // Graph order: a (65536), b1 (32768) and b2 (512) live together; scheduled, b1 dies before a
  // is computed, and the peak is a and b2 (z is fetched: outside the arena).
  EXPECT_EQ(graph_order.arena_bytes, 65536 + 32768 + 512);
  EXPECT_EQ(memory.arena_bytes, 65536 + 512);
  testing::expect_bitwise_equal(memory_result, graph_result);  // the same kernels, reordered
}

TEST(ScheduleTest, MlpTrainingStepArena) {
  for (int64_t batch : {64, 1024}) {
    test_models::MlpStep step = test_models::make_mlp_step(784, 128, 10, batch);
    MemoryStats graph_order, memory;
    std::vector<Tensor> graph_result;
    {
      ScheduleEnv env("graph");
      Executable e = compile(step.graph, step.fetches, step.feeds);
      graph_order = e.memory_stats();
      graph_result = e.run(step.feeds);
    }
    Executable e = compile(step.graph, step.fetches, step.feeds);
    memory = e.memory_stats();
    std::printf(
        "[ schedule ] MLP 784-128-10 batch %lld: arena %lld bytes in graph order, %lld "
        "scheduled (live minimum %lld -> %lld)\n",
        static_cast<long long>(batch), static_cast<long long>(graph_order.arena_bytes),
        static_cast<long long>(memory.arena_bytes),
        static_cast<long long>(graph_order.live_min_bytes),
        static_cast<long long>(memory.live_min_bytes));
    EXPECT_LE(memory.arena_bytes, graph_order.arena_bytes);
    testing::expect_bitwise_equal(e.run(step.feeds), graph_result);
  }
}

}  // namespace
}  // namespace kiln::compiler
