// A worker of tests/distribute/multi_host_test.sh, one per host (network namespace) of an mpirun
// job: trains tests/distribute/linear_regression.h's model under MultiWorkerMirroredStrategy for
// KILN_TEST_EPOCHS epochs (default 3), printing "rank r of n: epoch e" as each ends, then
// "rank r of n: weights identical to the chief's" (or "FAIL weights differ"). A kiln::Error ends
// it with status 2 after printing "rank r of n: error <code>: <message>". Each line also goes to
// KILN_TEST_LOG_DIR/rank<r>.log when set: a rank's standard output reaches mpirun over the
// network, which the test cuts.
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>

#include "kiln/distribute/multi_worker_mirrored_strategy.h"
#include "kiln/error.h"
#include "tests/distribute/linear_regression.h"

using namespace kiln;

namespace {

std::string me = "rank ? of ?";
std::string log_path;  // "" until the rank is known, or without KILN_TEST_LOG_DIR

void say(const std::string& what) {
  std::cout << me << ": " << what << std::endl;
  if (!log_path.empty()) std::ofstream(log_path, std::ios::app) << me << ": " << what << std::endl;
}

class PrintEpochs : public nn::Callback {
 public:
  void on_epoch_end(int epoch, nn::Logs&) override { say("epoch " + std::to_string(epoch + 1)); }
};

}  // namespace

int main() {
  using namespace testing_util;  // NOLINT: the shared linear-regression setup
  try {
    auto strategy = std::make_shared<distribute::MultiWorkerMirroredStrategy>();
    const int rank = strategy->first_local_replica();
    me = "rank " + std::to_string(rank) + " of " + std::to_string(strategy->num_replicas_in_sync());
    if (const char* dir = std::getenv("KILN_TEST_LOG_DIR"))
      log_path = std::string(dir) + "/rank" + std::to_string(rank) + ".log";
    const Tensor x = uniform({kRows, kK}, 95), y = uniform({kRows, kM}, 96);
    auto model = linear_model(strategy);
    if (rank > 0) {  // fit must replace these by the chief's weights
      for (Variable v : model->weights()) v.assign(uniform(v.shape(), 100 + rank));
    }
    const char* epochs = std::getenv("KILN_TEST_EPOCHS");
    nn::FitOptions options = {
        .epochs = epochs ? std::atoi(epochs) : 3, .batch_size = 10, .shuffle = true, .verbose = 0};
    options.add_callback(PrintEpochs());
    model->fit(x, y, options);
    const std::vector<double> got = parameters(*model);
    const Tensor mine = Tensor::from_vector<double>(got, {static_cast<int64_t>(got.size())});
    const Tensor chiefs = strategy->communicator().broadcast(mine, 0);
    const bool same = std::memcmp(mine.raw_data(), chiefs.raw_data(), mine.nbytes()) == 0;
    say(same ? "weights identical to the chief's" : "FAIL weights differ");
    return same ? 0 : 1;
  } catch (const Error& e) {
    say(std::string("error ") + error_code_name(e.code()) + ": " + e.what());
    return 2;
  }
}
