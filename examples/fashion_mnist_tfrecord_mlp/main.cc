// Trains the Fashion-MNIST MLP (Dense(128, relu) -> Dropout(0.2) -> Dense(10), Adam) from the
// TFRecord files fashion_mnist_to_tfrecord writes, through a Dataset pipeline: records ->
// shuffle -> ragged_batch -> parse_example (one call per batch) -> scale -> prefetch.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "examples/common/flags.h"
#include "kiln/data/dataset.h"
#include "kiln/io/example.h"
#include "kiln/io/tfrecord.h"
#include "kiln/kiln.h"
#include "kiln/nn.h"

namespace {

const std::vector<kiln::io::FeatureSpec> kSpec = {kiln::io::FixedLen{"image", kiln::u8, {784}},
                                                  kiln::io::FixedLen{"label", kiln::i64, {}}};

// A parsed batch {image: u8 [n, 784], label: i64 [n]} -> {f32 [n, 784] in [0, 1], i64 [n]}.
// The conversion is a compiled function, as tf.data traces a map's function into a graph: one
// fused loop over the batch instead of two eager ops.
kiln::data::Element scale(kiln::data::Element batch) {
  static const kiln::Function to_unit_range([](const std::vector<kiln::Tensor>& x) {
    return std::vector<kiln::Tensor>{x[0].to(kiln::f32) / 255.0};
  });
  return {to_unit_range({batch[0]})[0], std::move(batch[1])};
}

// Every record of a file parsed as one batch: {images [n, 784] f32, labels [n] i64}.
std::pair<kiln::Tensor, kiln::Tensor> read_all(const std::string& path) {
  auto features = kiln::io::parse_example(kiln::io::read_records(path), kSpec);
  return {kiln::convert(features.at("image"), kiln::f32) / 255.0, features.at("label")};
}

}  // namespace

int main(int argc, char** argv) {
  examples::Flags flags(argc, argv);
  const std::string data_dir = flags.str("data_dir", "fashion_mnist_tfrecord");
  const int epochs = static_cast<int>(flags.integer("epochs", 5, 1, examples::kMaxInt));
  const int64_t batch_size = flags.integer("batch_size", 64, 1, examples::kMaxInt);
  const double learning_rate = flags.positive("learning_rate", 1e-3);
  const uint64_t seed = static_cast<uint64_t>(flags.integer("seed", 1, 0, examples::kMaxInt64));
  const int verbose = static_cast<int>(flags.integer("verbose", 1, 0, 2));
  const std::string logdir = flags.str("logdir", "");  // TensorBoard logs, when set
  // Exit with status 3 when the test accuracy is lower (for tests).
  const double min_accuracy = flags.number("min_accuracy", 0, 0, 1);
  flags.check();

  try {
    // Training data streams through a pipeline: the serialized records are shuffled and
    // batched, and each batch is parsed in one call (tf.data's "vectorized mapping"); the test
    // split is read at once.
    kiln::data::Dataset train = kiln::data::Dataset::tfrecord({data_dir + "/train.tfrecord"})
                                    .shuffle(10000, seed)
                                    .ragged_batch(batch_size)
                                    .parse_example(kSpec)
                                    .map(scale)
                                    .prefetch();
    auto [x_test, y_test] = read_all(data_dir + "/test.tfrecord");

    kiln::nn::Sequential model(
        {kiln::nn::Dense(128, "relu"), kiln::nn::Dropout(0.2), kiln::nn::Dense(10)});
    model.set_seed(seed);
    model.compile(kiln::optim::Adam(learning_rate),
                  kiln::nn::SparseCategoricalCrossentropy(/*from_logits=*/true), {"accuracy"});
    std::vector<kiln::nn::CallbackRef> callbacks;
    if (!logdir.empty()) callbacks.push_back(kiln::nn::TensorBoard(logdir));

    auto start = std::chrono::steady_clock::now();
    kiln::nn::History history = model.fit(
        train, {.epochs = epochs, .seed = seed, .callbacks = callbacks, .verbose = verbose});
    double train_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

    std::printf("trained %lld steps per epoch, testing on %lld examples\n",
                static_cast<long long>(epochs > 0 ? model.optimizer().iterations() / epochs : 0),
                static_cast<long long>(x_test.dim(0)));
    auto scores = model.evaluate(x_test, y_test, 1000);
    std::printf(
        "result: test_accuracy=%.4f test_loss=%.4f train_accuracy=%.4f train_seconds=%.1f\n",
        scores["accuracy"], scores["loss"], history.history["accuracy"].back(), train_seconds);
    if (scores["accuracy"] < min_accuracy) {
      std::cerr << "error: test accuracy " << scores["accuracy"]
                << " is below --min_accuracy=" << min_accuracy << "\n";
      return 3;
    }
  } catch (const kiln::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
