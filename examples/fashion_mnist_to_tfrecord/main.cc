// Converts the Fashion-MNIST IDX files to TFRecord files of tf.Examples — "image": the 784
// pixel bytes of one image, "label": its class (int64) — written as train.tfrecord and
// test.tfrecord in --out_dir, the layout fashion_mnist_tfrecord_mlp reads.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>

#include "examples/common/flags.h"
#include "kiln/data/fashion_mnist.h"
#include "kiln/io/example.h"
#include "kiln/io/tfrecord.h"
#include "kiln/kiln.h"

namespace {

// Writes the first `limit` images (all when limit <= 0) with their labels; returns the count.
int64_t write_split(const std::string& path, const kiln::Tensor& images, const kiln::Tensor& labels,
                    int64_t limit) {
  const int64_t n = limit > 0 ? std::min(limit, images.dim(0)) : images.dim(0);
  const int64_t pixels = images.size() / images.dim(0);  // 784
  const char* data = static_cast<const char*>(images.raw_data());
  const std::vector<int64_t> classes = kiln::convert(labels, kiln::i64).to_vector<int64_t>();
  kiln::io::RecordWriter writer(path);
  for (int64_t i = 0; i < n; ++i) {
    kiln::io::Example example;
    example.set_bytes("image", {std::string(data + i * pixels, pixels)});
    example.set_int64s("label", {classes[i]});
    writer.write(example.serialize());
  }
  writer.close();  // the file appears complete, or not at all
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  examples::Flags flags(argc, argv);
  const std::string data_dir = flags.str("data_dir", kiln::data::default_fashion_mnist_dir());
  const std::string out_dir = flags.str("out_dir", "fashion_mnist_tfrecord");
  const int64_t limit = flags.integer("limit", 0, 0, examples::kMaxInt64);  // per split; 0: all
  flags.check();

  try {
    kiln::data::FashionMnist data = kiln::data::load_fashion_mnist(data_dir, /*normalize=*/false);
    std::filesystem::create_directories(out_dir);
    int64_t train =
        write_split(out_dir + "/train.tfrecord", data.train_images, data.train_labels, limit);
    int64_t test =
        write_split(out_dir + "/test.tfrecord", data.test_images, data.test_labels, limit);
    std::printf("wrote %lld train and %lld test examples to %s\n", static_cast<long long>(train),
                static_cast<long long>(test), out_dir.c_str());
  } catch (const kiln::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  } catch (const std::filesystem::filesystem_error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
