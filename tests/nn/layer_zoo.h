// The layer zoo: one small model per layer class, each trained, saved, loaded in a separate
// process and trained further by tests/nn/layer_zoo_test.cc (loss decreases; the loaded model
// continues to the identical weights an uninterrupted run reaches). Each layer test file adds
// its cases with KILN_ZOO_CASE at namespace scope.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/nn.h"

namespace kiln::nn::testing {

struct ZooCase {
  std::string name;  // unique, [A-Za-z0-9_]
  // A fresh model, not compiled; a Sequential one is built by the harness from x's shape.
  std::function<std::unique_ptr<Model>()> make;
  // Training data (deterministic): x [n, ...], y [n, ...] matching `loss`.
  std::function<std::pair<Tensor, Tensor>()> data;
  // "mse" (y f32 like the output) or "sparse_categorical_crossentropy" (logits, y i32 [n]).
  std::string loss = "mse";
  double learning_rate = 0.01;
};

std::vector<ZooCase>& zoo();

struct ZooRegistration {
  explicit ZooRegistration(ZooCase c) { zoo().push_back(std::move(c)); }
};

#define KILN_ZOO_CAT2(a, b) a##b
#define KILN_ZOO_CAT(a, b) KILN_ZOO_CAT2(a, b)
#define KILN_ZOO_CASE(...)                                                        \
  static const ::kiln::nn::testing::ZooRegistration KILN_ZOO_CAT(zoo_case_, __COUNTER__)( \
      ::kiln::nn::testing::ZooCase{__VA_ARGS__})

}  // namespace kiln::nn::testing
