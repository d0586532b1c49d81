// The serving tests' model: versions 1 and 2 under `dir` of a Dense(2) without bias over 3
// inputs, every weight equal to the version number (so [1, 1, 1] predicts [3v, 3v]), served
// with policy "all" and the label "stable" on version 1.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kiln/nn.h"
#include "serving/model_manager.h"

namespace kiln::testing_util {

inline std::unique_ptr<serving::ModelManager> two_versions(const std::string& dir) {
  for (float w : {1.0f, 2.0f}) {
    nn::Sequential model({nn::Dense(2, "", false)});
    model.build({3});
    for (Variable v : model.weights()) v.assign(full(v.value().shape(), w));
    io::save_model(model, dir, {3});
  }
  serving::ModelSpec s{.name = "m", .base_path = dir};
  s.policy.kind = serving::VersionPolicy::Kind::kAll;
  s.labels = {{"stable", 1}};
  auto mm = std::make_unique<serving::ModelManager>(std::vector<serving::ModelSpec>{s});
  mm->poll();
  return mm;
}

}  // namespace kiln::testing_util
