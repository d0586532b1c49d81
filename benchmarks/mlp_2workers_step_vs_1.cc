// The MLP's (784-128-10, dropout, Adam) fit step with 2 MPI workers of 1 thread each against
// 1 worker of 2 threads, at the same global batch (512), and the share of the 2 workers' step
// spent in their all_reduces, with one all_reduce per step (unbucketed) and with 64 KB buckets
// (7 a step). A step's time is from one on_train_batch_end to the next (the first step of each
// fit left out); its communication, the time spent inside Collective::all_reduce meanwhile,
// waiting for the slower worker included. benchmarks/run.sh runs it both ways:
//   KILN_NUM_THREADS=2 mlp_2workers_step_vs_1                 RESULT mlp_1worker_2threads_step_us
//   mpirun -np 2 -x KILN_NUM_THREADS=1 mlp_2workers_step_vs_1 RESULT mlp_2workers_1thread_step_us,
//     mlp_2workers_bucketed_step_us, mlp_2workers{,_bucketed}_comm_share (rank 0 prints)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
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

// Adds up the seconds spent in the all_reduces it passes on.
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

// Each step's seconds and communication seconds, from the second step of each fit on.
class StepTimes : public nn::Callback {
 public:
  explicit StepTimes(const TimedCollective* comm) : comm_(comm) {}
  void on_train_begin(nn::Logs&) override { first_ = true; }
  void on_train_batch_end(int64_t, nn::Logs&) override {
    const auto now = Clock::now();
    const double comm = comm_ ? comm_->all_reduce_seconds : 0;
    if (!first_) {
      step.push_back(std::chrono::duration<double>(now - last_).count());
      comm_share.push_back((comm - last_comm_) / step.back());
    }
    first_ = false;
    last_ = now;
    last_comm_ = comm;
  }
  std::vector<double> step, comm_share;

 private:
  const TimedCollective* comm_;
  bool first_ = true;
  Clock::time_point last_;
  double last_comm_ = 0;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// One way of training: a model and, for the workers, its strategy's timed communicator.
struct Trainer {
  std::unique_ptr<nn::Sequential> model;
  TimedCollective* comm = nullptr;
  std::shared_ptr<StepTimes> times;
};

Trainer make_trainer(bool workers, int64_t bucket_bytes) {
  Trainer t;
  t.model = bench::mlp();
  t.model->set_seed(1);
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
    trainers.push_back(make_trainer(workers, 0));
    if (workers) trainers.push_back(make_trainer(workers, kBucketBytes));
    const int rank = workers ? trainers[0].comm->rank() : 0;
    const int size = workers ? trainers[0].comm->size() : 1;
    if (workers && size != 2) {
      std::fprintf(stderr, "mlp_2workers_step_vs_1: run it with mpirun -np 2 (got %d)\n", size);
      return 2;
    }
    for (int64_t fit = 0; fit <= kTimedFits; ++fit) {  // fit 0 compiles: not timed
      for (Trainer& t : trainers) {
        nn::FitOptions options{
            .epochs = 1, .batch_size = kGlobalBatch, .shuffle = false, .verbose = 0};
        if (fit > 0) options.add_callback(t.times);
        t.model->fit(x, y, options);
      }
    }
    if (rank != 0) return 0;
    const std::string where = std::string(workers ? "2 workers" : "1 worker") + ", " +
                              (threads ? threads : "default") + " thread(s) each";
    if (!workers) {
      const double step = median(trainers[0].times->step);
      std::printf("%s: step %.0f us (global batch %lld)\n", where.c_str(), 1e6 * step,
                  static_cast<long long>(kGlobalBatch));
      bench::result("mlp_1worker_2threads_step_us", 1e6 * step);
      return 0;
    }
    const char* names[] = {"mlp_2workers_1thread", "mlp_2workers_bucketed"};
    for (size_t k = 0; k < trainers.size(); ++k) {
      const double step = median(trainers[k].times->step);
      const double share = median(trainers[k].times->comm_share);
      std::printf("%s, %s: step %.0f us, %.0f%% of it in all_reduce\n", where.c_str(),
                  k == 0 ? "one all_reduce a step" : "64 KB buckets", 1e6 * step, 100 * share);
      bench::result(std::string(names[k]) + "_step_us", 1e6 * step);
      bench::result(std::string(k == 0 ? "mlp_2workers" : "mlp_2workers_bucketed") + "_comm_share",
                    share);
    }
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "mlp_2workers_step_vs_1: %s\n", e.what());
    return 1;
  }
}
