// The in-process collectives: every collective and dtype on 2 and 4 replica threads, rank-order
// (bit-reproducible) results, deadlines naming the replica that did not arrive, disagreeing
// calls, the timeout settings and the NCCL stub.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <thread>

#include "kiln/distribute/collective.h"
#include "kiln/error.h"
#include "tests/distribute/collective_cases.h"

namespace kiln::distribute {
namespace {

using Replicas = std::vector<std::unique_ptr<Collective>>;

// Runs fn(replica) on one thread per replica of `group` whose rank is in `ranks` (all when
// empty); returns each replica's error, if it threw one.
std::vector<std::optional<Error>> run_replicas(Replicas& group,
                                               const std::function<void(Collective&)>& fn,
                                               std::vector<int> ranks = {}) {
  if (ranks.empty()) {
    for (size_t r = 0; r < group.size(); ++r) ranks.push_back(static_cast<int>(r));
  }
  std::vector<std::optional<Error>> errors(group.size());
  std::vector<std::thread> threads;
  for (int r : ranks) {
    threads.emplace_back([&, r] {
      try {
        fn(*group[r]);
      } catch (const Error& e) {
        errors[r] = e;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return errors;
}

CollectiveOptions with_timeout(double seconds) { return {.timeout = Seconds(seconds)}; }

TEST(InProcessCollective, EveryCollectiveAndDTypeMatchesValuesComputedHereOn2And4Replicas) {
  for (int size : {2, 4}) {
    Replicas group = make_in_process_group(size, with_timeout(30));
    std::vector<std::vector<std::string>> failures(size);
    auto errors = run_replicas(group, [&](Collective& c) {
      failures[c.rank()] = testing_util::check_every_collective(c);
    });
    for (int r = 0; r < size; ++r) {
      EXPECT_FALSE(errors[r]) << errors[r]->what();
      for (const std::string& f : failures[r]) ADD_FAILURE() << size << " replicas: " << f;
      EXPECT_EQ(group[r]->rank(), r);
      EXPECT_EQ(group[r]->size(), size);
      EXPECT_EQ(group[r]->local_rank(), r);
      EXPECT_EQ(group[r]->backend(), "in_process");
    }
  }
}

TEST(InProcessCollective, FloatSumsAreFoldedInRankOrderBitIdenticallyOnEveryReplicaAndRun) {
  constexpr int kSize = 4;
  constexpr int64_t kN = 10000;
  std::vector<std::vector<float>> inputs(kSize);
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> dist(-1e3f, 1e3f);
  for (auto& v : inputs) {
    for (int64_t i = 0; i < kN; ++i) v.push_back(dist(gen) * std::pow(10.0f, float(i % 7) - 3));
  }
  std::vector<float> want(kN);
  for (int64_t i = 0; i < kN; ++i) {
    float acc = inputs[0][i];
    for (int r = 1; r < kSize; ++r) acc += inputs[r][i];
    want[i] = acc;
  }
  for (int run = 0; run < 3; ++run) {
    Replicas group = make_in_process_group(kSize, with_timeout(30));
    std::vector<Tensor> results(kSize);
    run_replicas(group, [&](Collective& c) {
      results[c.rank()] = c.all_reduce(Tensor::from_vector(inputs[c.rank()], {kN}));
    });
    for (int r = 0; r < kSize; ++r) {
      ASSERT_TRUE(results[r].defined());
      EXPECT_EQ(std::memcmp(results[r].raw_data(), want.data(), kN * sizeof(float)), 0)
          << "run " << run << " rank " << r;
    }
  }
}

TEST(InProcessCollective, ResultsAreCopyOnWritePerReplica) {
  Replicas group = make_in_process_group(2, with_timeout(30));
  std::vector<Tensor> results(2);
  run_replicas(group, [&](Collective& c) {
    results[c.rank()] = c.all_reduce(Tensor::from_vector(std::vector<float>{1, 2}, {2}));
    if (c.rank() == 0) results[0].mutable_data<float>()[0] = 100;
  });
  EXPECT_EQ(results[0].to_vector<float>(), (std::vector<float>{100, 4}));
  EXPECT_EQ(results[1].to_vector<float>(), (std::vector<float>{2, 4}));
}

TEST(InProcessCollective, AReplicaThatNeverArrivesMakesTheOthersThrowDeadlineExceededNamingIt) {
  Replicas group = make_in_process_group(3, with_timeout(0.5));
  const Tensor x = Tensor::from_vector(std::vector<float>{1, 2, 3}, {3});
  // Two collectives together, then replica 2 stops coming: the third fails on 0 and 1.
  run_replicas(group, [&](Collective& c) {
    c.all_reduce(x);
    c.barrier();
  });
  const auto start = std::chrono::steady_clock::now();
  auto errors = run_replicas(group, [&](Collective& c) { c.all_reduce(x); }, {0, 1});
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GE(seconds, 0.45);
  EXPECT_LT(seconds, 2.0);
  for (int r : {0, 1}) {
    ASSERT_TRUE(errors[r]) << "rank " << r << " did not fail";
    EXPECT_EQ(errors[r]->code(), ErrorCode::kDeadlineExceeded) << errors[r]->what();
    const std::string what = errors[r]->what();
    EXPECT_NE(what.find("all_reduce step 3 (rank " + std::to_string(r) + " of 3, in_process)"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("rank 2 did not arrive within 0.5 s"), std::string::npos) << what;
  }
  // The group is broken: the late replica and any later collective fail at once.
  const auto late = std::chrono::steady_clock::now();
  errors = run_replicas(group, [&](Collective& c) { c.all_reduce(x); }, {0, 2});
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - late).count(), 0.4);
  for (int r : {0, 2}) {
    ASSERT_TRUE(errors[r]);
    EXPECT_EQ(errors[r]->code(), ErrorCode::kUnavailable) << errors[r]->what();
    EXPECT_NE(std::string(errors[r]->what()).find("rank 2 did not arrive"), std::string::npos)
        << errors[r]->what();
  }
}

TEST(InProcessCollective, SeveralMissingReplicasAreAllNamed) {
  Replicas group = make_in_process_group(4, with_timeout(0.3));
  auto errors = run_replicas(group, [&](Collective& c) { c.barrier(); }, {1});
  ASSERT_TRUE(errors[1]);
  EXPECT_EQ(errors[1]->code(), ErrorCode::kDeadlineExceeded);
  EXPECT_NE(std::string(errors[1]->what())
                .find("barrier step 1 (rank 1 of 4, in_process): "
                      "ranks 0, 2 and 3 did not arrive"),
            std::string::npos)
      << errors[1]->what();
}

TEST(InProcessCollective, AReplicaWhoseCommunicatorIsDestroyedIsUnavailableAtOnce) {
  Replicas group = make_in_process_group(2, with_timeout(60));
  group[1].reset();
  const auto start = std::chrono::steady_clock::now();
  try {
    group[0]->broadcast(Tensor::from_vector(std::vector<int32_t>{1}, {1}));
    FAIL() << "broadcast with a departed replica returned";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnavailable) << e.what();
    EXPECT_NE(std::string(e.what()).find("broadcast step 1 (rank 0 of 2, in_process): rank 1 "
                                         "left the group"),
              std::string::npos)
        << e.what();
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 5);
}

// Every replica gets the same kInvalidArgument naming each replica's call; the group stays usable.
void expect_disagreement(int size, const std::function<Tensor(Collective&)>& call,
                         const std::vector<std::string>& fragments) {
  Replicas group = make_in_process_group(size, with_timeout(30));
  auto errors = run_replicas(group, [&](Collective& c) { call(c); });
  for (int r = 0; r < size; ++r) {
    ASSERT_TRUE(errors[r]) << "rank " << r << " did not fail";
    EXPECT_EQ(errors[r]->code(), ErrorCode::kInvalidArgument) << errors[r]->what();
    for (const std::string& f : fragments) {
      EXPECT_NE(std::string(errors[r]->what()).find(f), std::string::npos)
          << "missing '" << f << "' in: " << errors[r]->what();
    }
  }
  std::vector<Tensor> sums(size);
  errors = run_replicas(group, [&](Collective& c) {
    sums[c.rank()] = c.all_reduce(Tensor::scalar<int32_t>(c.rank()));
  });
  for (int r = 0; r < size; ++r) {
    EXPECT_FALSE(errors[r]) << errors[r]->what();
    EXPECT_EQ(sums[r].to_vector<int32_t>(), (std::vector<int32_t>{size * (size - 1) / 2}));
  }
}

TEST(InProcessCollective, DisagreeingOrInvalidCallsFailOnEveryReplicaNamingTheArguments) {
  expect_disagreement(2,
                      [](Collective& c) {
                        return c.all_reduce(Tensor::empty(DType::f32, {2 + c.rank(), 3}));
                      },
                      {"all_reduce step 1", "disagree", "rank 0: all_reduce(sum) f32[2,3]",
                       "rank 1: all_reduce(sum) f32[3,3]"});
  expect_disagreement(2,
                      [](Collective& c) {
                        return c.all_reduce(Tensor::empty(c.rank() ? DType::f64 : DType::f32, {2}));
                      },
                      {"rank 0: all_reduce(sum) f32[2]", "rank 1: all_reduce(sum) f64[2]"});
  expect_disagreement(3,
                      [](Collective& c) {
                        return c.rank() == 2 ? c.broadcast(Tensor::empty(DType::f32, {2}), 1)
                                             : c.all_gather(Tensor::empty(DType::f32, {2}));
                      },
                      {"rank 0: all_gather f32[2]", "rank 2: broadcast(root 1) f32[2]"});
  expect_disagreement(2,
                      [](Collective& c) {
                        return c.all_gather(Tensor::empty(DType::i32, {1, 2 + c.rank()}));
                      },
                      {"shapes equal but for dimension 0", "rank 1: all_gather i32[1,3]"});
  expect_disagreement(4,
                      [](Collective& c) {
                        return c.reduce_scatter(Tensor::empty(DType::f32, {6, 2}));
                      },
                      {"reduce_scatter step 1",
                       "dimension 0 of the input [6,2] must be a multiple of the group "
                       "size 4"});
  expect_disagreement(2,
                      [](Collective& c) { return c.broadcast(Tensor::empty(DType::i64, {2}), 5); },
                      {"broadcast step 1", "root 5 is not a rank of this group of 2"});
  expect_disagreement(2, [](Collective& c) { return c.all_reduce(Tensor::empty(DType::f16, {2})); },
                      {"dtype f16 is not supported"});
}

TEST(InProcessCollective, MaxAndMinPropagateNaNAndOrderSignedZeros) {
  Replicas group = make_in_process_group(2, with_timeout(30));
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<Tensor> mx(2), mn(2);
  run_replicas(group, [&](Collective& c) {
    const Tensor x = c.rank() == 0 ? Tensor::from_vector(std::vector<float>{nan, -0.0f, 1}, {3})
                                   : Tensor::from_vector(std::vector<float>{1, 0.0f, nan}, {3});
    mx[c.rank()] = c.all_reduce(x, ReduceOp::kMax);
    mn[c.rank()] = c.all_reduce(x, ReduceOp::kMin);
  });
  const std::vector<float> a = mx[1].to_vector<float>(), b = mn[1].to_vector<float>();
  EXPECT_TRUE(std::isnan(a[0]) && std::isnan(a[2]) && std::isnan(b[0]) && std::isnan(b[2]));
  EXPECT_FALSE(std::signbit(a[1]));
  EXPECT_TRUE(std::signbit(b[1]));
}

TEST(CollectiveTimeout, DefaultEnvironmentOptionsAndSetter) {
  unsetenv("KILN_COLLECTIVE_TIMEOUT");
  EXPECT_EQ(make_in_process_group(1)[0]->timeout().count(), 300);
  setenv("KILN_COLLECTIVE_TIMEOUT", "0.25", 1);
  EXPECT_EQ(make_in_process_group(1)[0]->timeout().count(), 0.25);
  EXPECT_EQ(make_in_process_group(1, with_timeout(7))[0]->timeout().count(), 7);
  setenv("KILN_COLLECTIVE_TIMEOUT", "ten", 1);
  try {
    make_in_process_group(1);
    ADD_FAILURE() << "a bad KILN_COLLECTIVE_TIMEOUT was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("KILN_COLLECTIVE_TIMEOUT must be a positive number of "
                                         "seconds, got 'ten'"),
              std::string::npos)
        << e.what();
  }
  unsetenv("KILN_COLLECTIVE_TIMEOUT");
  Replicas group = make_in_process_group(1);
  group[0]->set_timeout(Seconds(2));
  EXPECT_EQ(group[0]->timeout().count(), 2);
  EXPECT_THROW(group[0]->set_timeout(Seconds(-1)), Error);
  EXPECT_THROW(make_in_process_group(0), Error);
}

TEST(CollectiveTimeout, StepsCountEveryCollectiveOfTheCommunicator) {
  Replicas group = make_in_process_group(1);
  Collective& c = *group[0];
  const Tensor x = Tensor::from_vector(std::vector<int32_t>{1, 2}, {2, 1});
  EXPECT_EQ(c.all_reduce(x, ReduceOp::kMean).to_vector<int32_t>(), x.to_vector<int32_t>());
  c.all_gather(x);
  c.reduce_scatter(x);
  c.broadcast(x);
  c.barrier();
  EXPECT_EQ(c.steps(), 5);
  EXPECT_THROW(c.all_reduce(Tensor()), Error);
}

// make_nccl_collective's errors: tests/distribute/nccl_test.cc.
TEST(CollectiveErrors, CodesHaveNames) {
  EXPECT_STREQ(error_code_name(ErrorCode::kDeadlineExceeded), "deadline exceeded");
  EXPECT_STREQ(error_code_name(ErrorCode::kUnavailable), "unavailable");
}

}  // namespace
}  // namespace kiln::distribute
