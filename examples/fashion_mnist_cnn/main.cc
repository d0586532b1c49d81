// Trains a small CNN (two 3x3 convolutions with max pooling, then two dense layers) on
// Fashion-MNIST with Adam and reports the test accuracy.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <vector>

#include "examples/common/flags.h"
#include "kiln/data/dataset.h"
#include "kiln/data/fashion_mnist.h"
#include "kiln/kiln.h"
#include "kiln/nn.h"

int main(int argc, char** argv) {
  examples::Flags flags(argc, argv);
  const int epochs = static_cast<int>(flags.integer("epochs", 5));
  const int64_t batch_size = flags.integer("batch_size", 128);
  const double learning_rate = flags.number("learning_rate", 1e-3);
  const uint64_t seed = static_cast<uint64_t>(flags.integer("seed", 1));
  const std::string data_dir = flags.str("data_dir", kiln::data::default_fashion_mnist_dir());
  const int64_t train_limit = flags.integer("train_limit", 0);
  const int verbose = static_cast<int>(flags.integer("verbose", 1));
  const std::string checkpoint_dir = flags.str("checkpoint_dir", "");  // backups: resume a crash
  const int64_t checkpoint_every_steps = flags.integer("checkpoint_every_steps", 0);  // 0: epoch
  const std::string logdir = flags.str("logdir", "");  // TensorBoard logs, when set
  flags.check();

  try {
    kiln::data::FashionMnist data = kiln::data::load_fashion_mnist(data_dir);
    kiln::Tensor x_train = kiln::reshape(data.train_images, {-1, 28, 28, 1});
    kiln::Tensor y_train = data.train_labels;
    if (train_limit > 0 && train_limit < x_train.dim(0)) {
      x_train = kiln::slice(x_train, {0, 0, 0, 0}, {train_limit, 28, 28, 1});
      y_train = kiln::slice(y_train, {0}, {train_limit});
    }
    kiln::Tensor x_test = kiln::reshape(data.test_images, {-1, 28, 28, 1});

    using namespace kiln::nn;
    Sequential model({Conv2D(32, {3, 3}, "relu"), MaxPool2D({2, 2}), Conv2D(64, {3, 3}, "relu"),
                      MaxPool2D({2, 2}), Flatten(), Dense(128, "relu"), Dense(10)});
    model.set_seed(seed);
    model.compile(kiln::optim::Adam(learning_rate),
                  SparseCategoricalCrossentropy(/*from_logits=*/true), {"accuracy"});

    std::vector<kiln::nn::CallbackRef> callbacks;
    if (!checkpoint_dir.empty()) {
      kiln::nn::SaveFreq freq = std::string("epoch");
      if (checkpoint_every_steps > 0) freq = checkpoint_every_steps;
      callbacks.push_back(kiln::nn::BackupAndRestore(checkpoint_dir, freq));
    }
    if (!logdir.empty()) callbacks.push_back(kiln::nn::TensorBoard(logdir));

    auto start = std::chrono::steady_clock::now();
    // The input pipeline: reshuffled every epoch (reproducibly for the seed), batched, and
    // prepared on a background thread while the previous step trains.
    kiln::data::Dataset train = kiln::data::Dataset::from_tensors({x_train, y_train})
                                    .shuffle(x_train.dim(0), seed)
                                    .batch(batch_size)
                                    .prefetch(kiln::data::kAutotune);
    model.fit(train, {.epochs = epochs, .seed = seed, .callbacks = callbacks, .verbose = verbose});
    double train_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (verbose) std::cout << model.summary();

    auto scores = model.evaluate(x_test, data.test_labels, 500);
    std::printf("result: test_accuracy=%.4f test_loss=%.4f train_seconds=%.1f\n",
                scores["accuracy"], scores["loss"], train_seconds);
  } catch (const kiln::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
