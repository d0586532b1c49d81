// README example: train a classifier on Fashion-MNIST with the Keras-like API.
#include <iostream>

#include "kiln/data/fashion_mnist.h"
#include "kiln/kiln.h"
#include "kiln/nn.h"

int main() {
  kiln::data::FashionMnist data = kiln::data::load_fashion_mnist();  // [N,28,28] in [0,1]
  kiln::Tensor x = kiln::reshape(data.train_images, {-1, 784});
  kiln::Tensor x_test = kiln::reshape(data.test_images, {-1, 784});

  using namespace kiln::nn;
  Sequential model({Dense(128, "relu"), Dropout(0.2), Dense(10)});
  model.compile(kiln::optim::Adam(1e-3), SparseCategoricalCrossentropy(/*from_logits=*/true),
                {"accuracy"});
  model.fit(x, data.train_labels, {.epochs = 5, .batch_size = 64,
                                   .validation_data = {{x_test, data.test_labels}}});
  std::cout << model.summary();
  std::cout << "test accuracy: " << model.evaluate(x_test, data.test_labels)["accuracy"] << "\n";
}
