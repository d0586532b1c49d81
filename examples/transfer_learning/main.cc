// Transfer learning, TF Hub's way: a CNN trained on Fashion-MNIST's classes 0-4 (T-shirt,
// trouser, pullover, dress, coat) is exported without its head, loaded back through kiln::hub as
// a frozen feature extractor, given a new head, and trained on only --labelled examples of
// classes 5-9 (sandal, shirt, sneaker, bag, ankle boot); then again with the extractor
// trainable (fine-tuned with the head). The same model trained from scratch on the same
// examples is the baseline; all are scored on every test image of classes 5-9.
//
//   transfer_learning [--base_epochs=2] [--epochs=30] [--labelled=1000] [--seed=1]
//                     [--data_dir=...] [--export_dir=<temp>] [--verbose=0]
//
// Prints `result: transfer_accuracy=A finetuned_accuracy=B scratch_accuracy=C`. Exit 77 without
// the data.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <iostream>

#include "examples/common/flags.h"
#include "kiln/data/fashion_mnist.h"
#include "kiln/hub.h"
#include "kiln/kiln.h"
#include "kiln/nn.h"

namespace {

using kiln::Tensor;
using namespace kiln::nn;

// The images of labels in [low, low + 5), at most `limit` of them (0: all), in the order they
// come, with labels shifted to [0, 5).
std::pair<Tensor, Tensor> classes(const Tensor& images, const Tensor& labels, int32_t low,
                                  int64_t limit) {
  std::vector<int64_t> rows;
  std::vector<int32_t> y;
  const std::vector<int32_t> all = labels.to_vector<int32_t>();
  for (size_t i = 0; i < all.size() && (limit == 0 || static_cast<int64_t>(rows.size()) < limit);
       ++i) {
    if (all[i] >= low && all[i] < low + 5) {
      rows.push_back(static_cast<int64_t>(i));
      y.push_back(all[i] - low);
    }
  }
  const int64_t n = static_cast<int64_t>(rows.size());
  Tensor x = kiln::gather(images, Tensor::from_vector(rows, {n}), 0);
  return {kiln::reshape(x, {n, 28, 28, 1}), Tensor::from_vector(y, {n})};
}

// The feature extractor's layers, and a head of 5 classes on top.
std::vector<LayerRef> extractor_layers() {
  return {Conv2D(32, {3, 3}, "relu"), MaxPool2D({2, 2}), Conv2D(64, {3, 3}, "relu"),
          MaxPool2D({2, 2}), Flatten(), Dense(128, "relu")};
}

double accuracy(Model& model, const Tensor& x, const Tensor& y) {
  return model.evaluate(x, y, 500).at("accuracy");
}

}  // namespace

int main(int argc, char** argv) {
  examples::Flags flags(argc, argv);
  const int base_epochs = static_cast<int>(flags.integer("base_epochs", 2, 1, 1000));
  const int epochs = static_cast<int>(flags.integer("epochs", 30, 1, 10000));
  const int64_t labelled = flags.integer("labelled", 1000, 5, 30000);
  const uint64_t seed = static_cast<uint64_t>(flags.integer("seed", 1, 0, 1 << 30));
  const std::string data_dir = flags.str("data_dir", kiln::data::default_fashion_mnist_dir());
  std::string export_dir = flags.str("export_dir", "");
  const int verbose = static_cast<int>(flags.integer("verbose", 0, 0, 2));
  flags.check();
  if (!std::filesystem::exists(data_dir + "/train-images-idx3-ubyte.gz") &&
      !std::filesystem::exists(data_dir + "/train-images-idx3-ubyte")) {
    std::cout << "Fashion-MNIST not found in " << data_dir
              << " (install dataset-fashion-mnist): skipped\n";
    return 77;
  }
  const bool temporary = export_dir.empty();
  if (temporary) {
    export_dir = (std::filesystem::temp_directory_path() /
                  ("kiln_transfer_" + std::to_string(getpid())))
                     .string();
  }
  try {
    kiln::data::FashionMnist data = kiln::data::load_fashion_mnist(data_dir);
    auto [x_base, y_base] = classes(data.train_images, data.train_labels, 0, 0);
    auto [x_new, y_new] = classes(data.train_images, data.train_labels, 5, labelled);
    auto [x_test, y_test] = classes(data.test_images, data.test_labels, 5, 0);
    const FitOptions fit{.epochs = base_epochs, .batch_size = 128, .seed = seed,
                         .verbose = verbose};

    // 1. The base model on classes 0-4; its extractor (the same layers, without the head)
    //    exported as a saved model.
    Tensor in = Input({28, 28, 1}, kiln::f32, "image");
    Tensor features = in;
    for (const LayerRef& layer : extractor_layers()) features = (*layer)(features);
    Model base(in, Dense(5)(features), "base");
    base.set_seed(seed);
    base.compile(kiln::optim::Adam(1e-3), SparseCategoricalCrossentropy(true), {"accuracy"});
    base.fit(x_base, y_base, fit);
    Model extractor(in, features, "extractor");
    const std::string saved = kiln::io::save_model(extractor, export_dir);

    // 2. The extractor, frozen, under a new head, fine-tuned on the labelled examples.
    Sequential transfer({kiln::hub::layer(saved, /*trainable=*/false), Dense(5)});
    transfer.set_seed(seed);
    transfer.compile(kiln::optim::Adam(1e-3), SparseCategoricalCrossentropy(true), {"accuracy"});
    FitOptions tune = fit;
    tune.epochs = epochs;
    tune.batch_size = 32;
    transfer.fit(x_new, y_new, tune);

    // 2b. The same, the extractor trainable too (fine-tuned with the head).
    Sequential tuned({kiln::hub::layer(saved, /*trainable=*/true), Dense(5)});
    tuned.set_seed(seed);
    tuned.compile(kiln::optim::Adam(1e-3), SparseCategoricalCrossentropy(true), {"accuracy"});
    tuned.fit(x_new, y_new, tune);

    // 3. The same architecture from scratch on the same examples.
    std::vector<LayerRef> layers = extractor_layers();
    layers.push_back(Dense(5));
    Sequential scratch(layers);
    scratch.set_seed(seed);
    scratch.compile(kiln::optim::Adam(1e-3), SparseCategoricalCrossentropy(true), {"accuracy"});
    scratch.fit(x_new, y_new, tune);

    const double transfer_accuracy = accuracy(transfer, x_test, y_test);
    const double tuned_accuracy = accuracy(tuned, x_test, y_test);
    const double scratch_accuracy = accuracy(scratch, x_test, y_test);
    std::printf("base (classes 0-4, %lld examples, %d epochs): exported to %s\n",
                static_cast<long long>(x_base.dim(0)), base_epochs, saved.c_str());
    std::printf("classes 5-9 from %lld labelled examples, %d epochs, tested on %lld images:\n",
                static_cast<long long>(x_new.dim(0)), epochs,
                static_cast<long long>(x_test.dim(0)));
    std::printf("  frozen extractor + new head:   %.4f\n"
                "  fine-tuned extractor + head:   %.4f\n"
                "  same model from scratch:       %.4f\n",
                transfer_accuracy, tuned_accuracy, scratch_accuracy);
    std::printf("result: transfer_accuracy=%.4f finetuned_accuracy=%.4f scratch_accuracy=%.4f\n",
                transfer_accuracy, tuned_accuracy, scratch_accuracy);
  } catch (const kiln::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    if (temporary) std::filesystem::remove_all(export_dir);
    return 1;
  }
  if (temporary) std::filesystem::remove_all(export_dir);
  return 0;
}
