// The bundled trainers' models, shared by the benchmarks that train them: the MLP 784-128-10
// (ReLU, dropout 0.2), examples/fashion_mnist_cnn's CNN and examples/fashion_mnist_lstm's LSTM.
#pragma once

#include <memory>

#include "kiln/nn.h"

namespace kiln::bench {

inline std::unique_ptr<kiln::nn::Sequential> mlp() {
  using namespace kiln::nn;
  return std::make_unique<Sequential>(
      std::vector<LayerRef>{Dense(128, "relu"), Dropout(0.2), Dense(10)});
}

inline std::unique_ptr<kiln::nn::Sequential> cnn() {
  using namespace kiln::nn;
  return std::make_unique<Sequential>(std::vector<LayerRef>{
      Conv2D(32, {3, 3}, "relu"), MaxPool2D({2, 2}), Conv2D(64, {3, 3}, "relu"), MaxPool2D({2, 2}),
      Flatten(), Dense(128, "relu"), Dense(10)});
}

// LSTM(128) over 28 steps of 28 features, then Dense(10) on its last output.
inline std::unique_ptr<kiln::nn::Sequential> lstm() {
  using namespace kiln::nn;
  return std::make_unique<Sequential>(std::vector<LayerRef>{LSTM(128), Dense(10)});
}

}  // namespace kiln::bench
