// Asynchronous all_reduce: Collective::start_all_reduce returns before the peers arrive and the
// collective completes on the communicator's thread; a compiled step overlaps a bucket's
// all_reduce with the rest of the backward pass under both schedules; buckets give the same
// bits eagerly, interpreted and compiled; a peer that never arrives ends the wait with the
// deadline error naming the collective, its step and the missing rank.
#include <gtest/gtest.h>

#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "compiler/executable.h"
#include "kiln/autodiff.h"
#include "kiln/distribute/ops.h"
#include "kiln/error.h"
#include "kiln/graph.h"
#include "kiln/op_registry.h"
#include "kiln/ops.h"
#include "tests/testing/forwarding_collective.h"

namespace kiln::distribute {
namespace {

Tensor uniform(Shape shape, uint32_t seed) { return random_uniform(shape, seed, -1.0, 1.0); }

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

// What the overlap test records, in order: "probe" when the probe op runs, and "started" /
// "finished" around the first all_reduce, which waits (up to 10 s) for the probe to have run.
struct Events {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> log;
  bool probed = false;
  void add(const std::string& event) {
    std::lock_guard lock(mu);
    log.push_back(event);
    if (event == "probe") probed = true;
    cv.notify_all();
  }
};
Events* g_events = nullptr;

// Identity that records "probe": put on the first layer's gradient, it runs after the backward
// pass's last dot.
KILN_REGISTER_OP(overlap_probe)
    .input("x")
    .kind(OpKind::kKernel)
    .stateful()
    .non_differentiable()
    .shape_fn([](const InferContext& ctx) { return std::vector<TensorType>{ctx.input(0)}; });
KILN_REGISTER_KERNEL(overlap_probe).fn([](KernelContext& ctx) {
  if (g_events) g_events->add("probe");
  Tensor& out = ctx.allocate_output(0);
  std::memcpy(out.raw_mutable_data(), ctx.input(0).raw_data(), out.nbytes());
});

// Its first all_reduce does not return before the probe has run (or 10 s have passed): only an
// all_reduce in flight while the step goes on lets the probe run meanwhile.
class HeldCollective : public testing::ForwardingCollective {
 public:
  using ForwardingCollective::ForwardingCollective;

 protected:
  Tensor all_reduce_through(const Tensor& x, ReduceOp op) override {
    if (first_) {
      first_ = false;
      g_events->add("started");
      std::unique_lock lock(g_events->mu);
      g_events->cv.wait_for(lock, std::chrono::seconds(10), [] { return g_events->probed; });
      lock.unlock();
      g_events->add("finished");
    }
    return ForwardingCollective::all_reduce_through(x, op);
  }

 private:
  bool first_ = true;
};

// Sets KILN_SCHEDULE for its lifetime.
class ScheduleEnv {
 public:
  explicit ScheduleEnv(const char* value) {
    if (const char* old = std::getenv("KILN_SCHEDULE")) old_ = old;
    setenv("KILN_SCHEDULE", value, 1);
  }
  ~ScheduleEnv() {
    if (old_.empty()) {
      unsetenv("KILN_SCHEDULE");
    } else {
      setenv("KILN_SCHEDULE", old_.c_str(), 1);
    }
  }

 private:
  std::string old_;
};

// A 2-layer MLP's SGD step with its gradients in 64-byte buckets; the first layer's gradient
// (the backward pass's last dot) goes through overlap_probe.
struct MlpStep {
  Graph g{"step"};
  Tensor x, w1, w2, b2;
  std::vector<Tensor> updated;
  std::vector<Tensor> feeds_values;  // made outside the graph: concrete
  FeedList feeds;
  MlpStep() {
    feeds_values = {uniform({8, 20}, 1), uniform({20, 16}, 2), uniform({16, 4}, 3),
                    uniform({4}, 4)};
    auto guard = g.as_default();
    x = g.placeholder(DType::f32, {8, 20}, "x");
    w1 = g.placeholder(DType::f32, {20, 16}, "w1");
    w2 = g.placeholder(DType::f32, {16, 4}, "w2");
    b2 = g.placeholder(DType::f32, {4}, "b2");
    const Tensor y = matmul(relu(matmul(x, w1)), w2) + b2;
    std::vector<Tensor> grads = gradients(sum(y * y), {w1, w2, b2});
    grads[0] = call_op("overlap_probe", {grads[0]}, {})[0];
    const std::vector<Tensor> params = {w1, w2, b2};
    const std::vector<Tensor> summed = all_reduce_in_buckets(grads, 64);
    for (size_t i = 0; i < params.size(); ++i) updated.push_back(params[i] - 0.01 * summed[i]);
    feeds = {
        {x, feeds_values[0]}, {w1, feeds_values[1]}, {w2, feeds_values[2]}, {b2, feeds_values[3]}};
  }
};

TEST(AsyncAllReduce, StartReturnsBeforeThePeerArrivesAndWaitGivesTheSum) {
  auto group = make_in_process_group(2, {.timeout = Seconds(30)});
  const Tensor a0 = uniform({5}, 1), a1 = uniform({5}, 2), b0 = uniform({3}, 3),
               b1 = uniform({3}, 4), c0 = uniform({2}, 5), c1 = uniform({2}, 6);
  std::mutex mu;
  std::condition_variable cv;
  bool started = false;
  std::string error1;
  Tensor sum_a, sum_b, sum_c, peer_a, peer_b, peer_c;
  std::thread peer([&] {
    try {
      std::unique_lock lock(mu);
      // A blocking start would never get here: it waits for this replica.
      cv.wait(lock, [&] { return started; });
      lock.unlock();
      peer_a = group[1]->all_reduce(a1);
      peer_b = group[1]->all_reduce(b1);
      peer_c = group[1]->all_reduce(c1);
    } catch (const Error& e) {
      error1 = e.what();
    }
  });
  std::string error0;
  try {
    const int64_t step_a = group[0]->start_all_reduce(a0);
    const int64_t step_b = group[0]->start_all_reduce(b0);
    {
      std::lock_guard lock(mu);
      started = true;
    }
    cv.notify_all();
    EXPECT_EQ(step_a, 1);
    EXPECT_EQ(step_b, 2);
    sum_c = group[0]->all_reduce(c0);  // blocking: step 3, after the two in flight
    sum_b = group[0]->wait(step_b);    // waited for in any order
    sum_a = group[0]->wait(step_a);
  } catch (const Error& e) {
    error0 = e.what();
    std::lock_guard lock(mu);
    started = true;
    cv.notify_all();
  }
  peer.join();
  ASSERT_EQ(error0, "");
  ASSERT_EQ(error1, "");
  EXPECT_TRUE(same_bits(sum_a, a0 + a1));
  EXPECT_TRUE(same_bits(sum_b, b0 + b1));
  EXPECT_TRUE(same_bits(sum_c, c0 + c1));
  EXPECT_TRUE(same_bits(peer_a, sum_a));
  EXPECT_TRUE(same_bits(peer_c, sum_c));
  EXPECT_EQ(group[0]->steps(), 3);
}

TEST(AsyncAllReduce, WaitingForAStepNotStartedOrWaitedForAlreadyIsAnErrorNamingIt) {
  auto group = make_in_process_group(1);
  try {
    group[0]->wait(7);
    ADD_FAILURE() << "wait(7) returned";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("step 7 (rank 0 of 1, in_process) was not started"),
              std::string::npos)
        << e.what();
  }
  const int64_t step = group[0]->start_all_reduce(uniform({2}, 1));
  group[0]->wait(step);
  EXPECT_THROW(group[0]->wait(step), Error);
}

// Its all_reduces ignore their deadline: they return only once released.
class StuckCollective : public testing::ForwardingCollective {
 public:
  using ForwardingCollective::ForwardingCollective;
  void release() {
    std::lock_guard lock(mu_);
    released_ = true;
    cv_.notify_all();
  }

 protected:
  Tensor all_reduce_through(const Tensor& x, ReduceOp op) override {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return released_; });
    lock.unlock();
    return ForwardingCollective::all_reduce_through(x, op);
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool released_ = false;
};

// A backend that overruns its deadline does not hold the wait: it gives up a timeout (at least
// 1 s) after the deadline, naming the collective and its step. The collective is released 10 s
// later in any case, so a wait without a deadline returns instead of hanging.
TEST(AsyncAllReduce, AWaitGivesUpOnABackendThatOverrunsItsDeadline) {
  StuckCollective comm(std::move(make_in_process_group(1, {.timeout = Seconds(0.2)})[0]));
  const int64_t step = comm.start_all_reduce(uniform({4}, 1));
  std::mutex mu;
  std::condition_variable cv;
  bool waited = false;
  std::thread releaser([&] {
    std::unique_lock lock(mu);
    cv.wait_for(lock, std::chrono::seconds(10), [&] { return waited; });
    comm.release();
  });
  std::string error;
  ErrorCode code = ErrorCode::kInternal;
  try {
    comm.wait(step);
  } catch (const Error& e) {
    error = e.what();
    code = e.code();
  }
  {
    std::lock_guard lock(mu);
    waited = true;
  }
  cv.notify_all();
  releaser.join();
  EXPECT_EQ(code, ErrorCode::kDeadlineExceeded) << error;
  EXPECT_NE(error.find("all_reduce step 1 (rank 0 of 1, in_process): did not complete within "
                       "0.2 s, nor did the communicator report why"),
            std::string::npos)
      << error;
}

// The first bucket's all_reduce is held until the probe (after the backward pass's last dot)
// has run: it finishes after the probe only when the step went on while it was in flight (a
// blocking all_reduce gives up waiting after 10 s and finishes before the probe).
TEST(AsyncAllReduce, TheBackwardPassRunsWhileABucketIsInFlightUnderBothSchedules) {
  for (const char* schedule : {"memory", "graph"}) {
    SCOPED_TRACE(schedule);
    MlpStep step;
    std::optional<compiler::Executable> exe;
    {
      ScheduleEnv env(schedule);
      exe.emplace(compiler::compile(step.g, step.updated, step.feeds));
    }
    const std::vector<std::string> thunks = exe->thunk_descriptions();
    std::string listing;
    int first_start = -1, last_dot = -1, first_done = -1;
    for (int k = 0; k < static_cast<int>(thunks.size()); ++k) {
      listing += std::to_string(k) + " " + thunks[k] + "\n";
      if (thunks[k].find("all_reduce_start") != std::string::npos && first_start < 0)
        first_start = k;
      if (thunks[k].find("all_reduce_done") != std::string::npos && first_done < 0) first_done = k;
      if (thunks[k].find("dot") != std::string::npos) last_dot = k;
    }
    EXPECT_LT(first_start, last_dot) << listing;
    EXPECT_LT(last_dot, first_done) << listing;

    Events events;
    g_events = &events;
    HeldCollective comm(std::move(make_in_process_group(1, {.timeout = Seconds(60)})[0]));
    std::vector<Tensor> got;
    {
      CollectiveScope scope(comm);
      got = exe->run(step.feeds);
    }
    g_events = nullptr;
    // "started" may come before or after "probe" (the communication thread picks the bucket up
    // when it gets to run); the probe must have run before the all_reduce finished.
    std::vector<std::string> log = events.log;
    ASSERT_EQ(log.size(), 3u) << listing;
    EXPECT_EQ(log.back(), "finished") << log[0] << ", " << log[1] << ", " << log[2] << "\n"
                                      << listing;
    // The same bits as the interpreter, which runs start and done back to back.
    auto replica = make_in_process_group(1);
    CollectiveScope scope(*replica[0]);
    const std::vector<Tensor> want = step.g.run(step.feeds, step.updated);
    for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(same_bits(got[i], want[i])) << i;
  }
}

// 2 replicas: each bucketed sum is the same bits eagerly, interpreted and compiled.
TEST(AsyncAllReduce, BucketsGiveTheSameBitsEagerInterpretedAndCompiled) {
  auto group = make_in_process_group(2, {.timeout = Seconds(60)});
  std::vector<std::vector<Tensor>> eager(2), interpreted(2), compiled(2);
  std::vector<std::string> errors(2);
  auto values_of = [](int r) {
    return std::vector<Tensor>{uniform({3, 5}, 10 + r), uniform({7}, 20 + r),
                               convert(uniform({4}, 30 + r), DType::f64)};
  };
  auto replica = [&](int r) {
    try {
      CollectiveScope scope(*group[r]);
      eager[r] = all_reduce_in_buckets(values_of(r), 24);
      Graph g("buckets");
      std::vector<Tensor> in, out;
      {
        auto guard = g.as_default();
        for (const Tensor& v : values_of(r)) in.push_back(g.placeholder(v.dtype(), v.shape()));
        out = all_reduce_in_buckets(in, 24);
      }
      FeedList feeds;
      for (size_t i = 0; i < in.size(); ++i) feeds.push_back({in[i], values_of(r)[i]});
      interpreted[r] = g.run(feeds, out);
      compiled[r] = compiler::compile(g, out, feeds).run(feeds);
    } catch (const Error& e) {
      errors[r] = e.what();
    }
  };
  std::thread other(replica, 1);
  replica(0);
  other.join();
  ASSERT_EQ(errors[0], "");
  ASSERT_EQ(errors[1], "");
  for (int r = 0; r < 2; ++r) {
    for (size_t i = 0; i < 3; ++i) {
      const Tensor want = values_of(0)[i] + values_of(1)[i];
      EXPECT_EQ(eager[r][i].shape(), want.shape());
      EXPECT_TRUE(same_bits(interpreted[r][i], eager[r][i])) << "replica " << r << ", " << i;
      EXPECT_TRUE(same_bits(compiled[r][i], eager[r][i])) << "replica " << r << ", " << i;
      EXPECT_TRUE(same_bits(eager[r][i], eager[0][i])) << "replica " << r << ", " << i;
    }
  }
}

// Replica 1 never arrives: replica 0's compiled step starts its first bucket, goes on through
// the backward pass (the probe runs), and fails in the wait with the deadline error.
TEST(AsyncAllReduce, APeerThatNeverArrivesEndsTheWaitWithTheDeadlineError) {
  MlpStep step;
  const compiler::Executable exe = compiler::compile(step.g, step.updated, step.feeds);
  auto group = make_in_process_group(2, {.timeout = Seconds(0.5)});
  Events events;
  g_events = &events;
  std::string error;
  ErrorCode code = ErrorCode::kInternal;
  try {
    CollectiveScope scope(*group[0]);
    exe.run(step.feeds);
  } catch (const Error& e) {
    error = e.what();
    code = e.code();
  }
  g_events = nullptr;
  EXPECT_EQ(code, ErrorCode::kDeadlineExceeded) << error;
  EXPECT_NE(error.find("all_reduce step 1 (rank 0 of 2, in_process): rank 1 did not arrive "
                       "within 0.5 s"),
            std::string::npos)
      << error;
  EXPECT_EQ(events.log, std::vector<std::string>{"probe"});  // the step went on past the start
}

}  // namespace
}  // namespace kiln::distribute
