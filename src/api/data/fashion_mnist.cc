// Loads Fashion-MNIST from its four IDX files and checks they hold what the data set holds.
#include "kiln/data/fashion_mnist.h"

#include <sys/stat.h>

#include <cstdlib>
#include <string>
#include <tuple>
#include <utility>

#include "kiln/data/idx.h"

namespace kiln::data {
namespace {

constexpr int64_t kImageSide = 28;
constexpr int kNumClasses = 10;

[[noreturn]] void fail(ErrorCode code, const std::string& path, const std::string& what) {
  throw Error(code, "load_fashion_mnist: " + path + ": " + what);
}

bool file_exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

// `dir`/`name`.gz, or `dir`/`name` when only the uncompressed file is there.
std::string find_file(const std::string& dir, const std::string& name) {
  const std::string base = dir.empty() || dir.back() == '/' ? dir + name : dir + "/" + name;
  if (file_exists(base + ".gz") || !file_exists(base)) return base + ".gz";
  return base;
}

Tensor read(const std::string& path) {
  try {
    return read_idx(path);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kNotFound) throw;
    fail(ErrorCode::kNotFound, path,
         std::string("the Fashion-MNIST file is missing (") + e.what() +
             "). Install the Debian package dataset-fashion-mnist (apt-get install "
             "dataset-fashion-mnist), or pass the directory holding the files to "
             "load_fashion_mnist or set KILN_FASHION_MNIST_DIR");
  }
}

// Checks `t` is u8 of shape [n, 28, 28] and returns n.
int64_t check_images(const Tensor& t, const std::string& path) {
  if (t.dtype() != u8 || t.rank() != 3 || t.dim(1) != kImageSide || t.dim(2) != kImageSide) {
    fail(ErrorCode::kDataLoss, path,
         std::string("expected u8 images of shape [N,28,28], found ") + dtype_name(t.dtype()) +
             " of shape " + shape_str(t.shape()));
  }
  return t.dim(0);
}

// Checks `t` is u8 of shape [n] with values in [0, 10); returns them as i32.
Tensor check_labels(const Tensor& t, int64_t n, const std::string& path,
                    const std::string& images_path) {
  if (t.dtype() != u8 || t.rank() != 1) {
    fail(ErrorCode::kDataLoss, path,
         std::string("expected u8 labels of shape [N], found ") + dtype_name(t.dtype()) +
             " of shape " + shape_str(t.shape()));
  }
  if (t.dim(0) != n) {
    fail(ErrorCode::kDataLoss, path,
         "holds " + std::to_string(t.dim(0)) + " labels, but " + images_path + " holds " +
             std::to_string(n) + " images");
  }
  auto in = t.data<uint8_t>();
  Tensor out = Tensor::empty(i32, {n});
  auto labels = out.mutable_data<int32_t>();
  for (int64_t i = 0; i < n; ++i) {
    if (in[i] >= kNumClasses) {
      fail(ErrorCode::kDataLoss, path,
           "label " + std::to_string(in[i]) + " at index " + std::to_string(i) +
               " is outside [0, 10)");
    }
    labels[i] = in[i];
  }
  return out;
}

Tensor normalized(const Tensor& images) {
  Tensor out = Tensor::empty(f32, images.shape());
  auto in = images.data<uint8_t>();
  auto pixels = out.mutable_data<float>();
  for (size_t i = 0; i < in.size(); ++i) pixels[i] = in[i] / 255.0f;
  return out;
}

// One split: images and their labels.
std::pair<Tensor, Tensor> load_split(const std::string& dir, const std::string& prefix,
                                     bool normalize) {
  const std::string images_path = find_file(dir, prefix + "-images-idx3-ubyte");
  const std::string labels_path = find_file(dir, prefix + "-labels-idx1-ubyte");
  Tensor images = read(images_path);
  const int64_t n = check_images(images, images_path);
  Tensor labels = check_labels(read(labels_path), n, labels_path, images_path);
  return {normalize ? normalized(images) : images, labels};
}

}  // namespace

std::string default_fashion_mnist_dir() {
  const char* env = std::getenv("KILN_FASHION_MNIST_DIR");
  return env && *env ? env : "/usr/share/datasets/fashion-mnist";
}

FashionMnist load_fashion_mnist(const std::string& dir, bool normalize) {
  FashionMnist data;
  std::tie(data.train_images, data.train_labels) = load_split(dir, "train", normalize);
  std::tie(data.test_images, data.test_labels) = load_split(dir, "t10k", normalize);
  return data;
}

}  // namespace kiln::data
