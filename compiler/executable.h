// The compiled execution path: optimize() + loop fusion + JIT'd fused kernels, run as a flat
// sequence of thunks (fused kernels, and the registered reference kernel for every other node).
// Compiled for concrete feed shapes; the interpreter stays the default everywhere.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "compiler/pipeline.h"
#include "kiln/graph.h"

namespace kiln::compiler {

class Executable {
 public:
  // Runs the compiled step. Feeds are keyed by the original graph's placeholders and must have
  // the dtypes and shapes compiled for; throws kiln::Error for missing or wrong feeds.
  std::vector<Tensor> run(const FeedList& feeds) const;

  int num_thunks() const;
  int num_fused_thunks() const;
  // One line per thunk: "fused(add,mul,exp) -> 1 output" or "kernel dot".
  std::vector<std::string> thunk_descriptions() const;
  // The fusion plan's log (groups and refused fusions with reasons).
  const std::string& fusion_log() const;
  const CompiledGraph& optimized() const;

  struct Impl;
  explicit Executable(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

 private:
  std::shared_ptr<const Impl> impl_;
};

// Compiles the part of `graph` computing `outputs` for the dtypes and shapes of `feeds` (values
// keyed by `graph`'s placeholders; placeholders whose shape is fully known need not be fed at
// compile time). With KILN_DUMP=<dir>, also writes <dir>/fusion.txt.
Executable compile(const Graph& graph, const std::vector<Tensor>& outputs, const FeedList& feeds);

}  // namespace kiln::compiler
