// Constant folding: a pure node whose inputs are all constants runs with its reference kernel at
// compile time and becomes a constant. Placeholders, random and stateful ops, results over the
// size cap and kernels that fail are left alone, each with a note saying why.
#pragma once

#include <cstdint>

#include "compiler/passes/pass.h"

namespace kiln::compiler {

// Folding a broadcast or iota can turn a tiny graph into a huge constant held by the compiled
// graph for its lifetime; larger results stay computed at run time.
inline constexpr int64_t kMaxFoldElements = int64_t{1} << 20;

class ConstantFolding : public Pass {
 public:
  explicit ConstantFolding(int64_t max_elements = kMaxFoldElements) : max_elements_(max_elements) {}
  std::string name() const override { return "constant_folding"; }
  bool run(Module& module) override;

 private:
  int64_t max_elements_;
};

}  // namespace kiln::compiler
