// Trains a small CNN (two 3x3 convolutions with max pooling, then two dense layers) on
// Fashion-MNIST with Adam (its learning rate decayed along a cosine) and reports the test
// accuracy. Flags: examples/common/trainer.h (--strategy=mirrored --replicas=N,
// --strategy=multi_worker under mpirun, --dtype_policy=mixed_bfloat16, --device=gpu, ...).
#include <iostream>

#include "examples/common/trainer.h"

int main(int argc, char** argv) {
  examples::Flags parsed(argc, argv);
  const examples::TrainerFlags flags(parsed, /*default_batch_size=*/128, /*distributable=*/true);
  try {
    std::shared_ptr<kiln::distribute::Strategy> strategy = flags.make_strategy();
    examples::TrainerData data = examples::load_trainer_data(flags, {28, 28, 1});
    using namespace kiln::nn;
    flags.apply_dtype_policy();
    Sequential model({Conv2D(32, {3, 3}, "relu"), MaxPool2D({2, 2}), Conv2D(64, {3, 3}, "relu"),
                      MaxPool2D({2, 2}), Flatten(), Dense(128, "relu"), Dense(10)});
    model.set_seed(flags.seed);
    model.compile(kiln::optim::Adam(examples::cosine_learning_rate(flags, data.x_train.dim(0))),
                  SparseCategoricalCrossentropy(/*from_logits=*/true), {"accuracy"},
                  {.strategy = strategy, .device = flags.compile_device()});
    examples::train_and_report(model, flags, data, /*eval_batch_size=*/500, strategy.get());
  } catch (const kiln::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
