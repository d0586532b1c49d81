// The MLP's (784-128-10, dropout, Adam) fit step with 2 MPI workers of 1 thread each against
// 1 worker of 2 threads, at the same global batch (512); and, for the workers, one all_reduce
// per step (unbucketed) against 64 KB buckets (7 a step) run blocking (KILN_OVERLAP_COLLECTIVES=0
// when traced) and overlapped with the backward pass (the default), the three alternated fit by
// fit in one process. A step's time is from one on_train_batch_end to the next (the first step
// of each fit left out); its blocked share, the time the step's thread spent blocked in the
// communicator (Collective::blocked_seconds: blocking all_reduces and waits, the slower worker
// included) over the step. benchmarks/run.sh runs it both ways:
//   KILN_NUM_THREADS=2 mlp_2workers_step_vs_1                 RESULT mlp_1worker_2threads_step_us
//   mpirun -np 2 -x KILN_NUM_THREADS=1 mlp_2workers_step_vs_1 RESULT mlp_2workers_1thread_step_us,
//     mlp_2workers_bucketed{,_blocking}_step_us, mlp_2workers{,_bucketed{,_blocking}}_comm_share,
//     mlp_2workers_overlapped_vs_blocking (median over fits of blocking / overlapped step; > 1:
//     overlap faster) (rank 0 prints)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "benchmarks/bench_models.h"
#include "benchmarks/bench_util.h"
#include "kiln/distribute/multi_worker_mirrored_strategy.h"
#include "kiln/kiln.h"
#include "kiln/nn.h"
#include "tests/testing/forwarding_collective.h"

namespace {

using namespace kiln;
using Clock = std::chrono::steady_clock;

constexpr int64_t kGlobalBatch = 512, kStepsPerFit = 16, kTimedFits = 5;
constexpr int64_t kBucketBytes = 64 << 10;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Counts the seconds its all_reduces take where they run (on the communication thread when
// overlapped).
class TimedCollective : public kiln::testing::ForwardingCollective {
 public:
  using ForwardingCollective::ForwardingCollective;
  double all_reduce_seconds = 0;

 protected:
  Tensor all_reduce_through(const Tensor& x, distribute::ReduceOp op) override {
    const auto start = Clock::now();
    Tensor out = ForwardingCollective::all_reduce_through(x, op);
    all_reduce_seconds += seconds_since(start);
    return out;
  }
};

// Each step's seconds and blocked share, from the second step of each fit on.
class StepTimes : public nn::Callback {
 public:
  explicit StepTimes(const TimedCollective* comm) : comm_(comm) {}
  void on_train_begin(nn::Logs&) override {
    first_ = true;
    step.emplace_back();
    blocked_share.emplace_back();
  }
  void on_train_batch_end(int64_t, nn::Logs&) override {
    const auto now = Clock::now();
    const double blocked = comm_ ? comm_->blocked_seconds() : 0;
    if (!first_) {
      step.back().push_back(std::chrono::duration<double>(now - last_).count());
      blocked_share.back().push_back((blocked - last_blocked_) / step.back().back());
    }
    first_ = false;
    last_ = now;
    last_blocked_ = blocked;
  }
  std::vector<std::vector<double>> step, blocked_share;  // per fit, per step

 private:
  const TimedCollective* comm_;
  bool first_ = true;
  Clock::time_point last_;
  double last_blocked_ = 0;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string loadavg() {
  std::ifstream in("/proc/loadavg");
  std::string line;
  std::getline(in, line);
  return line + "\n";
}

std::vector<double> flat(const std::vector<std::vector<double>>& per_fit) {
  std::vector<double> all;
  for (const auto& v : per_fit) all.insert(all.end(), v.begin(), v.end());
  return all;
}

// One way of training: a model and, for the workers, its strategy's timed communicator.
struct Trainer {
  std::unique_ptr<nn::Sequential> model;
  TimedCollective* comm = nullptr;
  std::shared_ptr<StepTimes> times;
  bool overlapped = true;
};

Trainer make_trainer(bool workers, int64_t bucket_bytes, bool overlapped) {
  Trainer t;
  t.model = bench::mlp();
  t.model->set_seed(1);
  t.overlapped = overlapped;
  nn::CompileOptions options;
  if (workers) {
    auto comm = std::make_unique<TimedCollective>(distribute::make_mpi_collective());
    t.comm = comm.get();
    auto strategy = std::make_shared<distribute::MultiWorkerMirroredStrategy>(std::move(comm));
    strategy->set_bucket_bytes(bucket_bytes);
    options.strategy = strategy;
  }
  t.model->compile(optim::Adam(1e-3), nn::SparseCategoricalCrossentropy(true), {}, options);
  t.times = std::make_shared<StepTimes>(t.comm);
  return t;
}

}  // namespace

int main() {
  try {
    const char* world = std::getenv("OMPI_COMM_WORLD_SIZE");
    const bool workers = world != nullptr;
    const char* threads = std::getenv("KILN_NUM_THREADS");
    const Tensor x = random_uniform({kGlobalBatch * kStepsPerFit, 784}, 1);
    const Tensor y = convert(random_uniform({kGlobalBatch * kStepsPerFit}, 2, 0, 10), i32);
    std::vector<Trainer> trainers;
    trainers.push_back(make_trainer(workers, 0, true));
    if (workers) {
      trainers.push_back(make_trainer(workers, kBucketBytes, false));
      trainers.push_back(make_trainer(workers, kBucketBytes, true));
    }
    const int rank = workers ? trainers[0].comm->rank() : 0;
    const int size = workers ? trainers[0].comm->size() : 1;
    if (workers && size != 2) {
      std::fprintf(stderr, "mlp_2workers_step_vs_1: run it with mpirun -np 2 (got %d)\n", size);
      return 2;
    }
    for (int64_t fit = 0; fit <= kTimedFits; ++fit) {  // fit 0 traces and compiles: not timed
      for (Trainer& t : trainers) {
        nn::FitOptions options{
            .epochs = 1, .batch_size = kGlobalBatch, .shuffle = false, .verbose = 0};
        if (fit > 0) options.add_callback(t.times);
        if (fit == 0 && !t.overlapped) setenv("KILN_OVERLAP_COLLECTIVES", "0", 1);
        t.model->fit(x, y, options);
        unsetenv("KILN_OVERLAP_COLLECTIVES");
      }
    }
    if (rank != 0) return 0;
    std::printf("load average at the end: %s", loadavg().c_str());
    const std::string where = std::string(workers ? "2 workers" : "1 worker") + ", " +
                              (threads ? threads : "default") + " thread(s) each";
    if (!workers) {
      const double step = median(flat(trainers[0].times->step));
      std::printf("%s: step %.0f us (global batch %lld)\n", where.c_str(), 1e6 * step,
                  static_cast<long long>(kGlobalBatch));
      bench::result("mlp_1worker_2threads_step_us", 1e6 * step);
      return 0;
    }
    const char* labels[] = {"one all_reduce a step", "64 KB buckets, blocking",
                            "64 KB buckets, overlapped"};
    const char* steps[] = {"mlp_2workers_1thread_step_us", "mlp_2workers_bucketed_blocking_step_us",
                           "mlp_2workers_bucketed_step_us"};
    const char* shares[] = {"mlp_2workers_comm_share", "mlp_2workers_bucketed_blocking_comm_share",
                            "mlp_2workers_bucketed_comm_share"};
    for (size_t k = 0; k < trainers.size(); ++k) {
      const double step = median(flat(trainers[k].times->step));
      const double share = median(flat(trainers[k].times->blocked_share));
      const double comm_us = 1e6 * trainers[k].comm->all_reduce_seconds /
                             static_cast<double>(kTimedFits * kStepsPerFit);
      std::printf(
          "%s, %s: step %.0f us, %.0f%% of it blocked on communication (%.0f us of "
          "all_reduce a step)\n",
          where.c_str(), labels[k], 1e6 * step, 100 * share, comm_us);
      bench::result(steps[k], 1e6 * step);
      bench::result(shares[k], share);
    }
    // Per fit (the three alternate fit by fit): blocking / overlapped and bucketed / one.
    std::vector<double> overlap_gain, bucket_cost;
    for (int64_t f = 0; f < kTimedFits; ++f) {
      const double one = median(trainers[0].times->step[f]);
      const double blocking = median(trainers[1].times->step[f]);
      const double overlapped = median(trainers[2].times->step[f]);
      overlap_gain.push_back(blocking / overlapped);
      bucket_cost.push_back(one / overlapped);
    }
    auto range = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      char text[64];
      std::snprintf(text, sizeof text, "%.2f (%.2f-%.2f)", median(v), v.front(), v.back());
      return std::string(text);
    };
    std::printf(
        "per fit: buckets blocking / overlapped %s; one all_reduce / overlapped buckets "
        "%s (> 1: overlapped buckets faster)\n",
        range(overlap_gain).c_str(), range(bucket_cost).c_str());
    bench::result("mlp_2workers_overlapped_vs_blocking", median(overlap_gain));
    bench::result("mlp_2workers_overlapped_vs_one_all_reduce", median(bucket_cost));
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "mlp_2workers_step_vs_1: %s\n", e.what());
    return 1;
  }
}
