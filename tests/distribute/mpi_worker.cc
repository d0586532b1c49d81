// A rank of an MPI job for tests/distribute/mpi_test.cc, started by mpirun. Without settings it
// checks every collective on every dtype, on small and large tensors, and prints
// "rank R of N: ok". With KILN_TEST_KILL_RANK=k and KILN_TEST_KILL_STEP=s, rank k kills itself
// with SIGKILL as it starts its s-th collective (all_reduces of KILN_TEST_KILL_ROWS rows of 3
// in a loop, default 4); the others print the error they get. With KILN_TEST_STOP_RANK=k, rank
// k stops itself (SIGSTOP) KILN_TEST_STOP_MS after starting a loop of 12 MB all_reduces. With
// KILN_TEST_MODE=resumed_wait (2 ranks), rank 1 is stopped while it waits for rank 0 and resumed
// (SIGCONT, by rank 0) past its deadline, after rank 0 arrived; both print "resumed ok". With
// KILN_TEST_MODE=fit, the
// workers train tests/distribute/linear_regression.h's model with MultiWorkerMirroredStrategy
// (global batch KILN_TEST_BATCH, or KILN_TEST_WORKER1_BATCH on worker 1), each printing
// whether its weights equal the chief's (KILN_TEST_WORKER1_MODEL=two_layers, f64 or
// mixed_bfloat16: worker 1 trains another model, dtype or dtype policy), and the chief whether
// they are within the bound of one process's (gradient buckets of KILN_TEST_BUCKET_BYTES when
// set). With KILN_TEST_DATASET=1 they fit a Dataset of the first KILN_TEST_ROWS rows (or
// KILN_TEST_WORKER1_ROWS on worker 1) batched at the global batch. With KILN_TEST_EXIT_RANK=k,
// rank k leaves before fit, as KILN_TEST_EXIT says: "error" (throws a kiln::Error, which main
// prints, exiting 2) or "kill" (SIGKILL). With KILN_TEST_MODE=resume,
// they train it for 4 epochs with BackupAndRestore into KILN_TEST_BACKUP_DIR every 7 batches; with
// KILN_TEST_SIGNAL_RANK=k, rank k sends itself KILN_TEST_SIGNAL (KILL or STOP) at the end of its
// KILN_TEST_SIGNAL_BATCH-th batch of this run; the chief prints "rank 0 of N: weights <hex of the
// float bytes>" when training ends.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <thread>

#include "kiln/data/dataset.h"
#include "kiln/distribute/collective.h"
#include "kiln/distribute/multi_worker_mirrored_strategy.h"
#include "kiln/error.h"
#include "kiln/nn/checkpoint_callbacks.h"
#include "kiln/nn/policy.h"
#include "kiln/ops.h"
#include "tests/distribute/collective_cases.h"
#include "tests/distribute/linear_regression.h"

using namespace kiln;

namespace {

int env_int(const char* name, int fallback) {
  const char* value = std::getenv(name);
  return value ? std::atoi(value) : fallback;
}

int run_fit() {
  using namespace testing_util;  // NOLINT: the shared linear-regression setup
  auto strategy = std::make_shared<distribute::MultiWorkerMirroredStrategy>();
  const int rank = strategy->first_local_replica(), n = strategy->num_replicas_in_sync();
  const std::string me = "rank " + std::to_string(rank) + " of " + std::to_string(n);
  if (std::getenv("KILN_TEST_BUCKET_BYTES"))
    strategy->set_bucket_bytes(env_int("KILN_TEST_BUCKET_BYTES", 0));
  int64_t batch = env_int("KILN_TEST_BATCH", 10);
  if (rank == 1) batch = env_int("KILN_TEST_WORKER1_BATCH", static_cast<int>(batch));
  int64_t rows = env_int("KILN_TEST_ROWS", static_cast<int>(kRows));
  if (rank == 1) rows = env_int("KILN_TEST_WORKER1_ROWS", static_cast<int>(rows));
  const Tensor x = uniform({kRows, kK}, 91), y = uniform({kRows, kM}, 92);
  const nn::FitOptions options = {.epochs = 2, .batch_size = batch, .shuffle = false, .verbose = 1};
  // KILN_TEST_WORKER1_MODEL: worker 1 trains another model ("two_layers"), dtype ("f64") or
  // dtype policy ("mixed_bfloat16").
  const char* other = rank == 1 ? std::getenv("KILN_TEST_WORKER1_MODEL") : nullptr;
  const std::string variant = other ? other : "";
  std::unique_ptr<nn::Sequential> model;
  if (variant == "mixed_bfloat16") nn::set_global_policy(variant);  // as --dtype_policy does
  if (variant.empty()) {
    model = linear_model(strategy);
  } else {
    model = std::make_unique<nn::Sequential>(variant == "two_layers"
                                                 ? std::vector<nn::LayerRef>{Dense(4), Dense(kM)}
                                                 : std::vector<nn::LayerRef>{Dense(kM)});
    model->build({kK}, variant == "f64" ? DType::f64 : DType::f32);
    model->compile(optim::SGD(kLr), MeanSquaredError(), {"mse"}, {.strategy = strategy});
  }
  if (rank > 0) {  // the chief's weights must replace these
    for (Variable v : model->weights()) v.assign(uniform(v.shape(), 100 + rank));
  }
  if (env_int("KILN_TEST_EXIT_RANK", -1) == rank) {
    const char* how = std::getenv("KILN_TEST_EXIT");
    if (how && std::string(how) == "kill") raise(SIGKILL);
    throw Error(ErrorCode::kNotFound, me + ": leaving at start-up (KILN_TEST_EXIT_RANK)");
  }
  if (std::getenv("KILN_TEST_DATASET")) {
    model->fit(
        data::Dataset::from_tensors({slice(x, {0, 0}, {rows, kK}), slice(y, {0, 0}, {rows, kM})})
            .batch(batch),
        {.epochs = 2, .shuffle = false, .verbose = 1});  // batched by the dataset, as examples/ do
  } else {
    model->fit(variant == "f64" ? convert(x, DType::f64) : x, y, options);
  }
  const std::vector<double> got = parameters(*model);
  const Tensor mine = Tensor::from_vector<double>(got, {static_cast<int64_t>(got.size())});
  const Tensor chiefs = strategy->communicator().broadcast(mine, 0);
  const bool same = std::memcmp(mine.raw_data(), chiefs.raw_data(), mine.nbytes()) == 0;
  std::cout << me << ": " << (same ? "weights identical to the chief's" : "FAIL weights differ")
            << std::endl;
  if (rank != 0) return same ? 0 : 1;
  auto single = linear_model(nullptr);
  const std::vector<double> theta0 = parameters(*single);
  single->fit(x, y, {.epochs = 2, .batch_size = batch, .shuffle = false, .verbose = 0});
  const std::vector<double> want = parameters(*single);
  const std::vector<double> bound = equivalence_bound(values(x), values(y), theta0, batch, 2);
  double worst = 0;
  for (size_t p = 0; p < want.size(); ++p)
    worst = std::max(worst, std::abs(got[p] - want[p]) / bound[p]);
  std::cout << me << ": " << (worst <= 1 ? "within" : "FAIL outside")
            << " the bound of one process's weights (largest difference " << worst << " of it)"
            << std::endl;
  return worst <= 1 && same ? 0 : 1;
}

// Sends this process `signal` at the end of its `at`-th training batch (counted from 1).
class SignalAtBatch : public nn::Callback {
 public:
  SignalAtBatch(int signal, int64_t at) : signal_(signal), at_(at) {}
  void on_train_batch_end(int64_t, nn::Logs&) override {
    if (++batches_ == at_) raise(signal_);
  }

 private:
  int signal_;
  int64_t at_, batches_ = 0;
};

int run_resume() {
  using namespace testing_util;  // NOLINT: the shared linear-regression setup
  auto strategy = std::make_shared<distribute::MultiWorkerMirroredStrategy>();
  const int rank = strategy->first_local_replica(), n = strategy->num_replicas_in_sync();
  const Tensor x = uniform({kRows, kK}, 93), y = uniform({kRows, kM}, 94);
  auto model = linear_model(strategy);
  nn::FitOptions options = {.epochs = 4, .batch_size = 10, .shuffle = true, .verbose = 0};
  const char* dir = std::getenv("KILN_TEST_BACKUP_DIR");
  options.add_callback(nn::BackupAndRestore(dir ? dir : "", int64_t{7}));
  if (env_int("KILN_TEST_SIGNAL_RANK", -1) == rank) {
    const char* name = std::getenv("KILN_TEST_SIGNAL");
    const int signal = name && std::string(name) == "STOP" ? SIGSTOP : SIGKILL;
    options.add_callback(SignalAtBatch(signal, env_int("KILN_TEST_SIGNAL_BATCH", 1)));
  }
  model->fit(x, y, options);
  if (rank != 0) return 0;
  std::string hex;
  for (const Variable& v : model->weights()) {
    const Tensor value = v.value();
    const auto* bytes = static_cast<const unsigned char*>(value.raw_data());
    for (size_t i = 0; i < value.nbytes(); ++i) {
      static const char kDigits[] = "0123456789abcdef";
      hex += kDigits[bytes[i] >> 4];
      hex += kDigits[bytes[i] & 15];
    }
  }
  std::cout << "rank 0 of " << n << ": weights " << hex << std::endl;
  return 0;
}

// KILN_TEST_MODE=resumed_wait: rank 1 (deadline 1 s) stops itself 0.3 s into a barrier; rank 0
// (deadline 60 s) arrives at 0.6 s, while it is stopped, and resumes it at 2.5 s, past its
// deadline. Rank 0 was there all along, so rank 1's barrier must complete: a deadline error
// there, naming rank 0 or no rank, blames a rank that was not late.
int run_resumed_wait() {
  std::unique_ptr<distribute::Collective> c = distribute::make_mpi_collective();
  const std::string me = "rank " + std::to_string(c->rank()) + " of " + std::to_string(c->size());
  const Tensor pids =
      c->all_gather(Tensor::from_vector<int64_t>({static_cast<int64_t>(getpid())}, {1}));
  c->barrier();
  using std::chrono::milliseconds;
  std::jthread signaller;  // joined also when the barrier throws
  if (c->rank() == 1) {
    c->set_timeout(distribute::Seconds(1));
    signaller = std::jthread([] {
      std::this_thread::sleep_for(milliseconds(300));
      raise(SIGSTOP);
    });
  } else {
    c->set_timeout(distribute::Seconds(60));
    const auto peer = static_cast<pid_t>(static_cast<const int64_t*>(pids.raw_data())[1]);
    signaller = std::jthread([peer] {
      std::this_thread::sleep_for(milliseconds(2500));
      kill(peer, SIGCONT);
    });
    std::this_thread::sleep_for(milliseconds(600));
  }
  c->barrier();  // rank 1 is stopped in it
  signaller.join();
  c->set_timeout(distribute::Seconds(60));
  c->barrier();
  std::cout << me << ": resumed ok" << std::endl;
  return 0;
}

int run() {
  const char* mode = std::getenv("KILN_TEST_MODE");
  if (mode && std::string(mode) == "resumed_wait") return run_resumed_wait();
  if (mode && std::string(mode) == "fit") return run_fit();
  if (mode && std::string(mode) == "resume") return run_resume();
  std::unique_ptr<distribute::Collective> c = distribute::make_mpi_collective();
  const std::string me = "rank " + std::to_string(c->rank()) + " of " + std::to_string(c->size());
  const int kill_rank = env_int("KILN_TEST_KILL_RANK", -1);
  if (kill_rank >= 0) {
    const int kill_step = env_int("KILN_TEST_KILL_STEP", 1);
    const Tensor x =
        testing_util::case_input(DType::f32, c->rank(), env_int("KILN_TEST_KILL_ROWS", 4));
    for (int step = 1; step <= kill_step + 5; ++step) {
      if (c->rank() == kill_rank && step == kill_step) raise(SIGKILL);
      c->all_reduce(x);
    }
    std::cout << me << ": finished without noticing the killed rank" << std::endl;
    return 1;
  }
  const int stop_rank = env_int("KILN_TEST_STOP_RANK", -1);
  if (stop_rank >= 0) {
    // Large all_reduces in a loop; rank stop_rank stops itself (SIGSTOP) after a while, most
    // likely while a transfer is under way.
    const Tensor x = testing_util::case_input(DType::f32, c->rank(), 1 << 20);  // 12 MB
    if (c->rank() == stop_rank) {
      std::thread([] {
        std::this_thread::sleep_for(std::chrono::milliseconds(env_int("KILN_TEST_STOP_MS", 500)));
        raise(SIGSTOP);
      }).detach();
    }
    for (int step = 1; step <= 100000; ++step) c->all_reduce(x);
    std::cout << me << ": finished without noticing the stopped rank" << std::endl;
    return 1;
  }
  std::vector<std::string> failures = testing_util::check_every_collective(*c);
  // Tensors of 100s of KB: the backend moves these on its communication thread.
  for (const std::string& f : testing_util::check_every_collective(*c, 4096))
    failures.push_back("large: " + f);
  for (const std::string& f : failures) std::cout << me << ": FAIL " << f << "\n";
  if (!failures.empty()) return 1;
  std::cout << me << ": ok, local rank " << c->local_rank() << ", " << c->steps() << " collectives"
            << std::endl;
  return 0;
}

}  // namespace

int main() {
  try {
    return run();
  } catch (const Error& e) {
    std::cout << "error " << error_code_name(e.code()) << ": " << e.what() << std::endl;
    return 2;
  }
}
