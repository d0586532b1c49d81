// Fashion-MNIST loading: a small fake data set written in a temp dir (always runs), its error
// cases, and the real files of the Debian package dataset-fashion-mnist when installed.
#include "kiln/data/fashion_mnist.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "kiln/data/idx.h"
#include "kiln/kiln.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/values.h"

namespace kiln::data {
namespace {

using testing::HasSubstr;

// n images of 28x28 u8: image k holds first_value + k everywhere but pixel 0, which is 255.
Tensor fake_images(int64_t n, uint8_t first_value) {
  std::vector<uint8_t> pixels(static_cast<size_t>(n) * 28 * 28);
  for (int64_t k = 0; k < n; ++k) {
    for (int64_t p = 0; p < 28 * 28; ++p) {
      pixels[k * 784 + p] = p == 0 ? 255 : static_cast<uint8_t>(first_value + k);
    }
  }
  return Tensor::from_vector(pixels, {n, 28, 28});
}

class FashionMnistFake : public testing_util::TempDirTest {
 protected:
  // Train: 3 images of value 51, 52, 53 with labels 9, 0, 5; test: 2 images (102, 103), 1, 9.
  void write_fake(bool gzip = true) const {
    const std::string gz = gzip ? ".gz" : "";
    write_idx(path("train-images-idx3-ubyte" + gz), fake_images(3, 51), gzip);
    write_idx(path("train-labels-idx1-ubyte" + gz), Tensor::from_list<uint8_t>({9, 0, 5}), gzip);
    write_idx(path("t10k-images-idx3-ubyte" + gz), fake_images(2, 102), gzip);
    write_idx(path("t10k-labels-idx1-ubyte" + gz), Tensor::from_list<uint8_t>({1, 9}), gzip);
  }
  Error load_error() const {
    return test_values::thrown_error([&] { load_fashion_mnist(dir_); });
  }
};

TEST_F(FashionMnistFake, NormalizesImagesToUnitRangeAndLabelsToI32) {
  write_fake();
  FashionMnist data = load_fashion_mnist(dir_);
  EXPECT_EQ(data.train_images.dtype(), f32);
  EXPECT_EQ(data.train_images.shape(), (Shape{3, 28, 28}));
  EXPECT_EQ(data.test_images.shape(), (Shape{2, 28, 28}));
  auto train = data.train_images.data<float>();
  EXPECT_FLOAT_EQ(train[0], 1.0f);  // 255 / 255
  EXPECT_FLOAT_EQ(train[1], 0.2f);  // 51 / 255
  EXPECT_FLOAT_EQ(train[2 * 784 + 5], 53.0f / 255);
  EXPECT_FLOAT_EQ(data.test_images.data<float>()[784 + 1], 103.0f / 255);
  EXPECT_EQ(data.train_labels.dtype(), i32);
  EXPECT_EQ(data.train_labels.to_vector<int32_t>(), (std::vector<int32_t>{9, 0, 5}));
  EXPECT_EQ(data.test_labels.to_vector<int32_t>(), (std::vector<int32_t>{1, 9}));
}

TEST_F(FashionMnistFake, WithoutNormalizeImagesStayU8) {
  write_fake();
  FashionMnist data = load_fashion_mnist(dir_.string() + "/", /*normalize=*/false);
  EXPECT_EQ(data.train_images.dtype(), u8);
  EXPECT_EQ(data.train_images.data<uint8_t>()[1], 51);
  EXPECT_EQ(data.test_images.data<uint8_t>()[0], 255);
  EXPECT_EQ(data.test_labels.dtype(), i32);
}

TEST_F(FashionMnistFake, ReadsUncompressedFilesWhenTheGzipOnesAreAbsent) {
  write_fake(/*gzip=*/false);
  FashionMnist data = load_fashion_mnist(dir_);
  EXPECT_EQ(data.train_labels.to_vector<int32_t>(), (std::vector<int32_t>{9, 0, 5}));
}

TEST_F(FashionMnistFake, MissingFileNamesItAndSuggestsThePackage) {
  Error e = load_error();
  EXPECT_EQ(e.code(), ErrorCode::kNotFound);
  EXPECT_THAT(e.what(), HasSubstr(path("train-images-idx3-ubyte.gz")));
  EXPECT_THAT(e.what(), HasSubstr("dataset-fashion-mnist"));
  EXPECT_THAT(e.what(), HasSubstr("pass the directory"));

  write_fake();
  std::filesystem::remove(path("t10k-labels-idx1-ubyte.gz"));
  EXPECT_THAT(load_error().what(), HasSubstr(path("t10k-labels-idx1-ubyte.gz")));
}

TEST_F(FashionMnistFake, LabelCountDifferentFromImageCountIsAnError) {
  write_fake();
  write_idx(path("train-labels-idx1-ubyte.gz"), Tensor::from_list<uint8_t>({1, 2}), true);
  Error e = load_error();
  EXPECT_EQ(e.code(), ErrorCode::kDataLoss);
  EXPECT_THAT(e.what(), HasSubstr(path("train-labels-idx1-ubyte.gz")));
  EXPECT_THAT(e.what(), HasSubstr("holds 2 labels"));
  EXPECT_THAT(e.what(), HasSubstr("holds 3 images"));
}

TEST_F(FashionMnistFake, LabelOutOfRangeIsAnError) {
  write_fake();
  write_idx(path("t10k-labels-idx1-ubyte.gz"), Tensor::from_list<uint8_t>({3, 10}), true);
  Error e = load_error();
  EXPECT_EQ(e.code(), ErrorCode::kDataLoss);
  EXPECT_THAT(e.what(), HasSubstr(path("t10k-labels-idx1-ubyte.gz")));
  EXPECT_THAT(e.what(), HasSubstr("label 10 at index 1 is outside [0, 10)"));
}

TEST_F(FashionMnistFake, WrongImageShapeOrTypeIsAnError) {
  write_fake();
  write_idx(path("train-images-idx3-ubyte.gz"), Tensor::empty(u8, {3, 28, 27}), true);
  Error shape = load_error();
  EXPECT_EQ(shape.code(), ErrorCode::kDataLoss);
  EXPECT_THAT(shape.what(), HasSubstr(path("train-images-idx3-ubyte.gz")));
  EXPECT_THAT(shape.what(), HasSubstr("[3,28,27]"));

  write_idx(path("train-images-idx3-ubyte.gz"), Tensor::empty(f32, {3, 28, 28}), true);
  EXPECT_THAT(load_error().what(), HasSubstr("found f32"));
}

TEST(FashionMnistDefaultDir, ComesFromTheEnvironmentOrTheDebianPath) {
  const char* old = std::getenv("KILN_FASHION_MNIST_DIR");
  std::optional<std::string> saved = old ? std::optional<std::string>(old) : std::nullopt;
  setenv("KILN_FASHION_MNIST_DIR", "/data/fmnist", 1);
  EXPECT_EQ(default_fashion_mnist_dir(), "/data/fmnist");
  setenv("KILN_FASHION_MNIST_DIR", "", 1);
  EXPECT_EQ(default_fashion_mnist_dir(), "/usr/share/datasets/fashion-mnist");
  unsetenv("KILN_FASHION_MNIST_DIR");
  EXPECT_EQ(default_fashion_mnist_dir(), "/usr/share/datasets/fashion-mnist");
  if (saved) setenv("KILN_FASHION_MNIST_DIR", saved->c_str(), 1);
}

TEST(FashionMnistReal, LoadsThePublishedDataSet) {
  const std::string dir = default_fashion_mnist_dir();
  if (!std::filesystem::exists(dir + "/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "Fashion-MNIST is not installed in " << dir
                 << " (Debian package dataset-fashion-mnist)";
  }
  FashionMnist data = load_fashion_mnist(dir);
  EXPECT_EQ(data.train_images.shape(), (Shape{60000, 28, 28}));
  EXPECT_EQ(data.train_labels.shape(), (Shape{60000}));
  EXPECT_EQ(data.test_images.shape(), (Shape{10000, 28, 28}));
  EXPECT_EQ(data.test_labels.shape(), (Shape{10000}));
  EXPECT_EQ(data.train_images.dtype(), f32);

  // The first image of each split is an ankle boot (class 9).
  EXPECT_EQ(data.train_labels.data<int32_t>()[0], 9);
  EXPECT_EQ(data.test_labels.data<int32_t>()[0], 9);

  // Every class appears 6000 times in train and 1000 times in test.
  std::vector<int> train_counts(10), test_counts(10);
  for (int32_t l : data.train_labels.data<int32_t>()) ++train_counts.at(l);
  for (int32_t l : data.test_labels.data<int32_t>()) ++test_counts.at(l);
  EXPECT_EQ(train_counts, std::vector<int>(10, 6000));
  EXPECT_EQ(test_counts, std::vector<int>(10, 1000));

  double sum = 0;
  float lo = 1, hi = 0;
  for (float p : data.train_images.data<float>()) {
    sum += p;
    lo = std::min(lo, p);
    hi = std::max(hi, p);
  }
  EXPECT_NEAR(sum / data.train_images.size(), 0.286, 0.01);
  EXPECT_EQ(lo, 0.0f);
  EXPECT_EQ(hi, 1.0f);
}

}  // namespace
}  // namespace kiln::data
