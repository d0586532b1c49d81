// A rank of an MPI job for tests/distribute/mpi_test.cc, started by mpirun. Without settings it
// checks every collective on every dtype and prints "rank R of N: ok". With
// KILN_TEST_KILL_RANK=k and KILN_TEST_KILL_STEP=s, rank k kills itself with SIGKILL as it starts
// its s-th collective (all_reduces in a loop); the others print the error they get.
#include <signal.h>

#include <cstdlib>
#include <iostream>

#include "kiln/distribute/collective.h"
#include "kiln/error.h"
#include "tests/distribute/collective_cases.h"

using namespace kiln;

namespace {

int env_int(const char* name, int fallback) {
  const char* value = std::getenv(name);
  return value ? std::atoi(value) : fallback;
}

int run() {
  std::unique_ptr<distribute::Collective> c = distribute::make_mpi_collective();
  const std::string me = "rank " + std::to_string(c->rank()) + " of " + std::to_string(c->size());
  const int kill_rank = env_int("KILN_TEST_KILL_RANK", -1);
  if (kill_rank >= 0) {
    const int kill_step = env_int("KILN_TEST_KILL_STEP", 1);
    const Tensor x = testing_util::case_input(DType::f32, c->rank(), 4);
    for (int step = 1; step <= kill_step + 5; ++step) {
      if (c->rank() == kill_rank && step == kill_step) raise(SIGKILL);
      c->all_reduce(x);
    }
    std::cout << me << ": finished without noticing the killed rank" << std::endl;
    return 1;
  }
  const std::vector<std::string> failures = testing_util::check_every_collective(*c);
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
