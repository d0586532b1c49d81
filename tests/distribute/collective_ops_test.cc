// The collective graph ops on 2 and 4 in-process replicas: eager, interpreted (Graph::run) and
// compiled (kiln::function) values against sums computed here; gradients through all_reduce,
// all_gather, reduce_scatter, broadcast and reduce_to_root against hand-derived ones; errors
// without a scope.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "compiler/executable.h"
#include "kiln/autodiff.h"
#include "kiln/distribute/ops.h"
#include "kiln/function.h"
#include "kiln/graph.h"
#include "kiln/op_registry.h"
#include "kiln/ops.h"

namespace kiln::distribute {
namespace {

// Runs fn(rank) on one thread per replica of a fresh in-process group, each under a
// CollectiveScope of its communicator (30 s deadlines, so a broken op fails instead of hanging);
// returns each replica's error message, "" when it threw none.
std::vector<std::string> on_replicas(int size, const std::function<void(int rank)>& fn) {
  auto group = make_in_process_group(size, {.timeout = Seconds(30)});
  std::vector<std::string> errors(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      CollectiveScope scope(*group[r]);
      try {
        fn(r);
      } catch (const Error& e) {
        errors[r] = e.what();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return errors;
}

void expect_no_errors(const std::vector<std::string>& errors) {
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "replica " << r;
}

// Replica r's input: {r+1, 10(r+1), -(r+1)^2}.
Tensor input_of(int r) {
  double v = r + 1;
  return Tensor::from_vector<double>({v, 10 * v, -v * v}, {3});
}

// Sum over replicas of input_of(r).
std::vector<double> summed_inputs(int size) {
  std::vector<double> s(3, 0.0);
  for (int r = 0; r < size; ++r) {
    double v = r + 1;
    s[0] += v, s[1] += 10 * v, s[2] += -v * v;
  }
  return s;
}

std::vector<double> values(const Tensor& t) {
  auto d = t.data<double>();
  return {d.begin(), d.end()};
}

std::vector<double> scaled(std::vector<double> v, double k) {
  for (double& x : v) x *= k;
  return v;
}

TEST(CollectiveOps, EagerAllReduceSumAndMeanEqualTheSumsOn2And4Replicas) {
  for (int size : {2, 4}) {
    std::vector<std::vector<double>> sums(size), means(size);
    expect_no_errors(on_replicas(size, [&](int r) {
      sums[r] = values(all_reduce(input_of(r)));
      means[r] = values(all_reduce(input_of(r), ReduceOp::kMean));
    }));
    for (int r = 0; r < size; ++r) {
      EXPECT_EQ(sums[r], summed_inputs(size)) << size << " replicas, replica " << r;
      EXPECT_EQ(means[r], scaled(summed_inputs(size), 1.0 / size)) << size << " replicas";
    }
  }
}

TEST(CollectiveOps, RecordedGraphsRunByTheInterpreterAllReduceGatherAndBroadcast) {
  for (int size : {2, 4}) {
    std::vector<std::vector<double>> sums(size), gathered(size), from_root(size);
    expect_no_errors(on_replicas(size, [&](int r) {
      Graph g("replica");
      Tensor x = g.placeholder(f64, {3}, "x");
      Tensor s = all_reduce(x * 2.0);
      Tensor a = all_gather(x);
      Tensor b = broadcast(x, size - 1);
      auto out = g.run({{x, input_of(r)}}, {s, a, b});
      sums[r] = values(out[0]);
      gathered[r] = values(out[1]);
      from_root[r] = values(out[2]);
    }));
    std::vector<double> all;
    for (int q = 0; q < size; ++q) {
      for (double v : values(input_of(q))) all.push_back(v);
    }
    for (int r = 0; r < size; ++r) {
      EXPECT_EQ(sums[r], scaled(summed_inputs(size), 2.0)) << size << " replicas, replica " << r;
      EXPECT_EQ(gathered[r], all) << size << " replicas, replica " << r;
      EXPECT_EQ(from_root[r], values(input_of(size - 1))) << size << " replicas, replica " << r;
    }
  }
}

// The gradient of sum(x * w) with respect to w is x: a replica's gradient, all-reduced inside
// one kiln::function that every replica thread calls.
TEST(CollectiveOps, OneKilnFunctionOnEveryReplicaAllReducesItsGradientCompiledAndInterpreted) {
  for (ExecutionMode mode : {ExecutionMode::kCompiled, ExecutionMode::kInterpreted}) {
    for (int size : {2, 4}) {
      auto step = kiln::function(
          [](const Tensor& x, const Tensor& w) {
            Tensor loss = sum(x * w);
            return all_reduce(gradients(loss, {w})[0]);
          },
          {.name = "step", .mode = mode});
      std::vector<std::vector<double>> got(size);
      expect_no_errors(on_replicas(size, [&](int r) {
        for (int call = 0; call < 2; ++call) {  // the second from the cache
          got[r] = values(step(input_of(r), Tensor::from_vector<double>({1, 2, 3}, {3})));
        }
      }));
      for (int r = 0; r < size; ++r) {
        EXPECT_EQ(got[r], summed_inputs(size))
            << size << " replicas, replica " << r
            << (mode == ExecutionMode::kCompiled ? " compiled" : " interpreted");
      }
    }
  }
}

// A collective of a constant is never folded while compiling: the compiling replica would call
// it alone (the others wait for the compiled step) and miss its peers.
TEST(CollectiveOps, ACollectiveOfAConstantRunsInTheCompiledStepNotAtCompileTime) {
  constexpr int kSize = 2;
  auto step = kiln::function(
      [](const Tensor& x) {
        return all_reduce(Tensor::from_vector<double>({1, 2}, {2})) + x;
      },
      {.name = "constant_step", .mode = ExecutionMode::kCompiled});
  std::vector<std::vector<double>> got(kSize);
  expect_no_errors(on_replicas(kSize, [&](int r) { got[r] = values(step(zeros({2}, f64))); }));
  for (int r = 0; r < kSize; ++r) EXPECT_EQ(got[r], (std::vector<double>{2, 4})) << r;
}

TEST(CollectiveOps, TheCompilerRunsCollectivesAsKernelThunks) {
  Graph g("step");
  Tensor x = g.placeholder(f32, {4}, "x");
  Tensor y = all_reduce(x * 2.0f) + 1.0f;
  compiler::Executable exe = compiler::compile(g, {y}, {{x, zeros({4})}});
  std::string thunks;
  for (const std::string& d : exe.thunk_descriptions()) thunks += d + "\n";
  EXPECT_NE(thunks.find("all_reduce"), std::string::npos) << thunks;
}

// Loss L = sum over replicas r of sum(op(x_r * c_r) * w_r), each replica differentiating its
// own term; the gradient rules' collectives make dL/dx_r exact. Checked interpreted and compiled.
struct GradCase {
  std::string name;
  std::function<Tensor(const Tensor&)> op;
  std::function<std::vector<double>(int r, int size)> want;  // dL/dx_r
  int64_t out_rows;                                          // op's output length
};

double c_of(int r, int j) { return (r + 1) * 0.5 + j; }
double w_of(int r, int j) { return 1.0 + r - 0.25 * j; }

Tensor c_tensor(int r, int64_t n) {
  std::vector<double> c;
  for (int j = 0; j < n; ++j) c.push_back(c_of(r, j));
  return Tensor::from_vector<double>(c, {n});
}
Tensor w_tensor(int r, int64_t n) {
  std::vector<double> w;
  for (int j = 0; j < n; ++j) w.push_back(w_of(r, j));
  return Tensor::from_vector<double>(w, {n});
}

std::vector<GradCase> grad_cases() {
  constexpr int n = 4;
  auto sum_w = [](int size, int j) {
    double s = 0;
    for (int q = 0; q < size; ++q) s += w_of(q, j);
    return s;
  };
  return {
      {"all_reduce_sum", [](const Tensor& t) { return all_reduce(t); },
       [=](int r, int size) {
         std::vector<double> g;
         for (int j = 0; j < n; ++j) g.push_back(c_of(r, j) * sum_w(size, j));
         return g;
       },
       n},
      {"all_reduce_mean", [](const Tensor& t) { return all_reduce(t, ReduceOp::kMean); },
       [=](int r, int size) {
         std::vector<double> g;
         for (int j = 0; j < n; ++j) g.push_back(c_of(r, j) * sum_w(size, j) / size);
         return g;
       },
       n},
      {"broadcast_from_1", [](const Tensor& t) { return broadcast(t, 1); },
       [=](int r, int size) {
         std::vector<double> g;
         for (int j = 0; j < n; ++j) g.push_back(r == 1 ? c_of(r, j) * sum_w(size, j) : 0.0);
         return g;
       },
       n},
      // y_r = the sum on replica 0, zeros elsewhere: dL/dx_r = c_r * w_0 (broadcast of w_0)
      {"reduce_to_root_0",
       [](const Tensor& t) {
         return call_op("reduce_to_root", {t}, {{"root", int64_t{0}}})[0];
       },
       [=](int r, int) {
         std::vector<double> g;
         for (int j = 0; j < n; ++j) g.push_back(c_of(r, j) * w_of(0, j));
         return g;
       },
       n},
      // y = all_gather(x): dL/dx_r[j] = c_r[j] * sum_q w_q[r*n + j]
      {"all_gather", [](const Tensor& t) { return all_gather(t); },
       [=](int r, int size) {
         std::vector<double> g;
         for (int j = 0; j < n; ++j) g.push_back(c_of(r, j) * sum_w(size, r * n + j));
         return g;
       },
       -1},
      // y_r = rows [r*n/size, ...) of the sum: dL/dx_r[j] = c_r[j] * w_{j / (n/size)}[j % (n/size)]
      {"reduce_scatter_sum", [](const Tensor& t) { return reduce_scatter(t); },
       [=](int r, int size) {
         std::vector<double> g;
         int k = n / size;
         for (int j = 0; j < n; ++j) g.push_back(c_of(r, j) * w_of(j / k, j % k));
         return g;
       },
       0},
  };
}

TEST(CollectiveOps, GradientsThroughEachCollectiveAreTheHandDerivedOnesOn2And4Replicas) {
  constexpr int64_t n = 4;
  for (const GradCase& gc : grad_cases()) {
    for (ExecutionMode mode : {ExecutionMode::kInterpreted, ExecutionMode::kCompiled}) {
      for (int size : {2, 4}) {
        int64_t out = gc.out_rows == -1 ? n * size : gc.out_rows == 0 ? n / size : gc.out_rows;
        auto dx = kiln::function(
            [&](const Tensor& x, const Tensor& c, const Tensor& w) {
              Tensor loss = sum(gc.op(x * c) * w);
              return gradients(loss, {x})[0];
            },
            {.name = gc.name, .mode = mode});
        std::vector<std::vector<double>> got(size);
        expect_no_errors(on_replicas(size, [&](int r) {
          got[r] = values(dx(w_tensor(r + 7, n), c_tensor(r, n), w_tensor(r, out)));
        }));
        for (int r = 0; r < size; ++r) {
          std::vector<double> want = gc.want(r, size);
          ASSERT_EQ(got[r].size(), want.size());
          for (size_t j = 0; j < want.size(); ++j) {
            EXPECT_NEAR(got[r][j], want[j], 1e-12 * (1 + std::abs(want[j])))
                << gc.name << ", " << size << " replicas, replica " << r << ", element " << j
                << (mode == ExecutionMode::kCompiled ? " compiled" : " interpreted");
          }
        }
      }
    }
  }
}

TEST(CollectiveOps, MaxHasNoGradientAndSaysSo) {
  auto errors = on_replicas(2, [](int) {
    Graph g("replica");
    Tensor x = g.placeholder(f64, {3}, "x");
    gradients(sum(all_reduce(x, ReduceOp::kMax)), {x});
  });
  for (const std::string& e : errors) {
    EXPECT_NE(e.find("all_reduce max has no gradient"), std::string::npos) << e;
  }
}

TEST(CollectiveOps, AnOpRunWithoutACommunicatorIsAnErrorNamingIt) {
  try {
    all_reduce(Tensor::from_vector<float>({1, 2}, {2}));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kFailedPrecondition);
    EXPECT_NE(std::string(e.what()).find("all_reduce"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("CollectiveScope"), std::string::npos) << e.what();
  }
  // Recorded fine, but the interpreter's run has no communicator either.
  Graph g("no_scope");
  Tensor x = g.placeholder(f32, {2}, "x");
  Tensor y = broadcast(x, 0);
  try {
    g.run({{x, Tensor::from_vector<float>({1, 2}, {2})}}, {y});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kFailedPrecondition);
    EXPECT_NE(std::string(e.what()).find("broadcast"), std::string::npos) << e.what();
  }
  // all_gather's shape needs the group size when it is recorded.
  try {
    all_gather(x);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kFailedPrecondition);
    EXPECT_NE(std::string(e.what()).find("all_gather"), std::string::npos) << e.what();
  }
}

TEST(CollectiveOps, AGraphRecordedForOneGroupSizeRefusesAnother) {
  Graph g("two");
  Tensor x = g.placeholder(f64, {2}, "x");
  std::optional<Tensor> y;
  {
    auto pair = make_in_process_group(1);
    CollectiveScope scope(*pair[0]);
    y = all_gather(x);  // recorded for 1 replica
  }
  auto errors = on_replicas(2, [&](int) { g.run({{x, zeros({2}, f64)}}, {*y}); });
  for (const std::string& e : errors) {
    EXPECT_NE(e.find("recorded for 1 replicas, run on a communicator of 2"), std::string::npos)
        << e;
  }
}

}  // namespace
}  // namespace kiln::distribute
