// Reads the Fashion-MNIST trainers' flags (examples/common/trainer.h) and prints the values it
// got, loading no data: flags_test.cc runs it with good and bad flags.
#include <cstdio>

#include "examples/common/trainer.h"

int main(int argc, char** argv) {
  examples::Flags parsed(argc, argv);
  const examples::TrainerFlags flags(parsed, /*default_batch_size=*/64, /*distributable=*/true);
  std::printf(
      "epochs=%d batch_size=%lld learning_rate=%g seed=%llu train_limit=%lld verbose=%d "
      "checkpoint_every_steps=%lld\n",
      flags.epochs, static_cast<long long>(flags.batch_size), flags.learning_rate,
      static_cast<unsigned long long>(flags.seed), static_cast<long long>(flags.train_limit),
      flags.verbose, static_cast<long long>(flags.checkpoint_every_steps));
  std::printf("strategy=%s replicas=%d dtype_policy=%s device=%s\n", flags.strategy.c_str(),
              flags.replicas, flags.dtype_policy.c_str(), flags.compile_device().str().c_str());
  return 0;
}
