// kiln::profiler (the process-wide profiler over compiled programs): what a start()/stop()
// window collects from Model::fit's step and from an Executable, the runs outside the window,
// programs destroyed inside it, and misuse.
#include "kiln/profiler.h"

#include <gtest/gtest.h>

#include <optional>

#include "compiler/executable.h"
#include "kiln/kiln.h"
#include "kiln/nn.h"
#include "kiln/optim.h"

namespace kiln {
namespace {

// Stops a profiler a failed assertion left running, so that the next test can start one.
struct StopOnExit {
  ~StopOnExit() {
    if (compiler::global_profiling()) profiler::stop();
  }
};

std::optional<profiler::ProgramProfile> find(const std::vector<profiler::ProgramProfile>& all,
                                             const std::string& name) {
  for (const profiler::ProgramProfile& p : all) {
    if (p.name == name) return p;
  }
  return std::nullopt;
}

struct Program {
  Graph g{"profiled_program"};
  Tensor x = g.placeholder(f32, {32, 48}, "x");
  Tensor w = g.placeholder(f32, {48, 16}, "w");
  Tensor y = exp(matmul(x, w)) * 0.5f;
  FeedList feeds = {{x, random_normal({32, 48}, 1)}, {w, random_normal({48, 16}, 2)}};
  compiler::Executable compile() const { return compiler::compile(g, {y}, feeds); }
};

TEST(Profiler, CountsOnlyTheRunsBetweenStartAndStop) {
  StopOnExit guard;
  Program prog;
  compiler::Executable e = prog.compile();
  e.run(prog.feeds);  // before start: not counted
  profiler::start();
  for (int i = 0; i < 3; ++i) e.run(prog.feeds);
  std::vector<profiler::ProgramProfile> all = profiler::stop();
  e.run(prog.feeds);  // after stop: not counted, and not carried into the next window
  std::optional<profiler::ProgramProfile> p = find(all, "profiled_program");
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->runs, 3);
  ASSERT_EQ(p->thunks.size(), e.thunk_descriptions().size());
  double thunks = 0;
  for (size_t i = 0; i < p->thunks.size(); ++i) {
    EXPECT_EQ(p->thunks[i].description, e.thunk_descriptions()[i]);
    thunks += p->thunks[i].us;
  }
  EXPECT_GT(p->gemm_conv_us, 0);
  EXPECT_GT(p->fused_loops_us, 0);
  EXPECT_NEAR(thunks, p->gemm_conv_us + p->fused_loops_us + p->other_kernels_us, 1e-6 * thunks);
  EXPECT_NEAR(p->step_us, thunks + p->host_us, 1e-6 * p->step_us);
  EXPECT_GE(p->host_us, 0);
  EXPECT_NE(profiler::format(*p).find("3 runs"), std::string::npos) << profiler::format(*p);

  profiler::start();
  e.run(prog.feeds);
  p = find(profiler::stop(), "profiled_program");
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->runs, 1);
  // The executable's own profile (set_profiling) is separate and stayed off.
  EXPECT_EQ(e.profile().runs, 0);
}

TEST(Profiler, KeepsTheProfileOfAProgramDestroyedBeforeStop) {
  StopOnExit guard;
  Program prog;
  profiler::start();
  {
    compiler::Executable e = prog.compile();
    e.run(prog.feeds);
    e.run(prog.feeds);
  }
  std::optional<profiler::ProgramProfile> p = find(profiler::stop(), "profiled_program");
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->runs, 2);
}

TEST(Profiler, ProfilesAModelsTrainingStep) {
  StopOnExit guard;
  Tensor x = random_normal({96, 8}, 3);
  Tensor y = convert(random_uniform({96}, 4, 0, 3), i32);
  nn::Sequential model({nn::Dense(16, "relu"), nn::Dense(3)});
  model.compile(optim::Adam(0.01), nn::SparseCategoricalCrossentropy(true));
  model.fit(x, y, {.epochs = 1, .batch_size = 32, .verbose = 0});  // compiles the step
  profiler::start();
  model.fit(x, y, {.epochs = 2, .batch_size = 32, .verbose = 0});
  std::vector<profiler::ProgramProfile> all = profiler::stop();
  std::optional<profiler::ProgramProfile> step = find(all, "step");
  ASSERT_TRUE(step.has_value()) << all.size() << " programs";
  EXPECT_EQ(step->runs, 6) << "2 epochs of 3 batches";
  EXPECT_GT(step->gemm_conv_us, 0);
}

TEST(Profiler, StartTwiceOrStopUnstartedIsAnError) {
  StopOnExit guard;
  try {
    profiler::stop();
    FAIL() << "stop without start";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kFailedPrecondition);
    EXPECT_NE(std::string(e.what()).find("not started"), std::string::npos) << e.what();
  }
  profiler::start();
  try {
    profiler::start();
    FAIL() << "second start";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kFailedPrecondition);
    EXPECT_NE(std::string(e.what()).find("already started"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(profiler::stop());
}

}  // namespace
}  // namespace kiln
