// Trains the Fashion-MNIST MLP (Dense(128, relu) -> Dropout(0.2) -> Dense(10), Adam) from the
// TFRecord files fashion_mnist_to_tfrecord writes: every record is read with RecordReader and
// the batch of tf.Examples parsed into tensors with parse_example.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "examples/common/flags.h"
#include "kiln/io/example.h"
#include "kiln/io/tfrecord.h"
#include "kiln/kiln.h"
#include "kiln/nn.h"

namespace {

struct Split {
  kiln::Tensor images;  // [n, 784] f32 in [0, 1]
  kiln::Tensor labels;  // [n] i64
};

Split read_split(const std::string& path) {
  std::vector<std::string> records = kiln::io::read_records(path);
  auto features = kiln::io::parse_example(
      records, {kiln::io::FixedLen{"image", kiln::u8, {784}}, kiln::io::FixedLen{"label", kiln::i64, {}}});
  return {kiln::convert(features.at("image"), kiln::f32) / 255.0, features.at("label")};
}

}  // namespace

int main(int argc, char** argv) {
  examples::Flags flags(argc, argv);
  const std::string data_dir = flags.str("data_dir", "fashion_mnist_tfrecord");
  const int epochs = static_cast<int>(flags.integer("epochs", 5));
  const int64_t batch_size = flags.integer("batch_size", 64);
  const double learning_rate = flags.number("learning_rate", 1e-3);
  const uint64_t seed = static_cast<uint64_t>(flags.integer("seed", 1));
  const int verbose = static_cast<int>(flags.integer("verbose", 1));
  const std::string logdir = flags.str("logdir", "");  // TensorBoard logs, when set
  // Exit with status 3 when the test accuracy is lower (for tests).
  const double min_accuracy = flags.number("min_accuracy", 0);
  flags.check();

  try {
    Split train = read_split(data_dir + "/train.tfrecord");
    Split test = read_split(data_dir + "/test.tfrecord");
    std::printf("read %lld train and %lld test examples from %s\n",
                static_cast<long long>(train.images.dim(0)),
                static_cast<long long>(test.images.dim(0)), data_dir.c_str());

    kiln::nn::Sequential model({kiln::nn::Dense(128, "relu"), kiln::nn::Dropout(0.2),
                                kiln::nn::Dense(10)});
    model.set_seed(seed);
    model.compile(kiln::optim::Adam(learning_rate),
                  kiln::nn::SparseCategoricalCrossentropy(/*from_logits=*/true), {"accuracy"});
    std::vector<kiln::nn::CallbackRef> callbacks;
    if (!logdir.empty()) callbacks.push_back(kiln::nn::TensorBoard(logdir));

    auto start = std::chrono::steady_clock::now();
    model.fit(train.images, train.labels,
              {.epochs = epochs, .batch_size = batch_size, .seed = seed, .callbacks = callbacks,
               .verbose = verbose});
    double train_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

    auto scores = model.evaluate(test.images, test.labels, 1000);
    std::printf("result: test_accuracy=%.4f test_loss=%.4f train_seconds=%.1f\n",
                scores["accuracy"], scores["loss"], train_seconds);
    if (scores["accuracy"] < min_accuracy) {
      std::cerr << "error: test accuracy " << scores["accuracy"] << " is below --min_accuracy="
                << min_accuracy << "\n";
      return 3;
    }
  } catch (const kiln::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
