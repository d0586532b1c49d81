// Trains Dense(128, relu) -> Dropout(0.2) -> Dense(10) on Fashion-MNIST with Adam (its learning
// rate decayed along a cosine) and reports the test accuracy. Data: the Debian package dataset-fashion-mnist (or --data_dir). Flags:
// examples/common/trainer.h (--epochs, --batch_size, --checkpoint_dir, --logdir,
// --strategy=mirrored --replicas=N, --strategy=multi_worker under mpirun,
// --dtype_policy=mixed_bfloat16, --device=gpu, ...).
#include <iostream>

#include "examples/common/trainer.h"

int main(int argc, char** argv) {
  examples::Flags parsed(argc, argv);
  const examples::TrainerFlags flags(parsed, /*default_batch_size=*/64, /*distributable=*/true);
  try {
    std::shared_ptr<kiln::distribute::Strategy> strategy = flags.make_strategy();
    examples::TrainerData data = examples::load_trainer_data(flags, {784});
    flags.apply_dtype_policy();
    kiln::nn::Sequential model(
        {kiln::nn::Dense(128, "relu"), kiln::nn::Dropout(0.2), kiln::nn::Dense(10)});
    model.set_seed(flags.seed);
    model.compile(kiln::optim::Adam(examples::cosine_learning_rate(flags, data.x_train.dim(0))),
                  kiln::nn::SparseCategoricalCrossentropy(/*from_logits=*/true), {"accuracy"},
                  {.strategy = strategy, .device = flags.compile_device()});
    examples::train_and_report(model, flags, data, /*eval_batch_size=*/1000, strategy.get());
  } catch (const kiln::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
