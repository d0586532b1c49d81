// The Fashion-MNIST data set (Zalando's 28x28 grey clothing images in 10 classes), loaded from
// its four IDX files as installed by the Debian package dataset-fashion-mnist.
#pragma once

#include <string>

#include "kiln/tensor.h"

namespace kiln::data {

struct FashionMnist {
  Tensor train_images;  // [60000,28,28]: f32 in [0,1] when normalized, u8 otherwise
  Tensor train_labels;  // [60000] i32 in [0,10)
  Tensor test_images;   // [10000,28,28]
  Tensor test_labels;   // [10000]
};

// $KILN_FASHION_MNIST_DIR if set and not empty, else /usr/share/datasets/fashion-mnist.
std::string default_fashion_mnist_dir();

// Reads train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz and
// t10k-labels-idx1-ubyte.gz from `dir` (a file also counts when present without ".gz").
// With `normalize`, images become f32 pixel / 255; otherwise they stay u8.
// Throws kiln::Error naming the file: kNotFound when a file is missing, kDataLoss when a file
// is not what Fashion-MNIST holds (shape, type, image and label counts, labels out of range).
FashionMnist load_fashion_mnist(const std::string& dir = default_fashion_mnist_dir(),
                                bool normalize = true);

}  // namespace kiln::data
