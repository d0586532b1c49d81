// The compiled execution path: optimize() + loop fusion + JIT'd fused kernels, run as a flat
// sequence of thunks (fused kernels, and the registered reference kernel for every other node)
// over one arena planned by buffer assignment. Compiled for concrete feed shapes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "compiler/pipeline.h"
#include "kiln/graph.h"

namespace kiln::compiler {

// The memory plan of an Executable, known before it runs. Values computed by thunks live in one
// arena (fused-kernel and kernel-op outputs alike); fed values, fetched outputs and constants live
// outside it (outputs are handed to the caller and must not alias memory a later run reuses).
struct MemoryStats {
  int64_t arena_bytes = 0;     // the planned peak: the arena each run takes
  int64_t live_min_bytes = 0;  // max over thunks of the bytes live in the arena: a lower bound
  int64_t no_reuse_bytes = 0;  // the arena without any reuse (the sum of its values' sizes)
  int num_buffers = 0;         // values planned in the arena
  int num_reused = 0;          // placed over the memory of a value already dead
  int num_in_place = 0;        // written over an input dying at their thunk
  int64_t fed_bytes = 0;       // fed values (the caller's tensors)
  int64_t output_bytes = 0;    // fetched outputs (blocks recycled once the caller drops them)
  int64_t constant_bytes = 0;  // constants the executable holds
  int64_t outside_bytes() const { return fed_bytes + output_bytes + constant_bytes; }
  // The benchmark key arena_peak_vs_live_min (1 for an empty arena).
  double peak_vs_live_min() const {
    return live_min_bytes > 0 ? static_cast<double>(arena_bytes) / live_min_bytes : 1.0;
  }
};

class Executable {
 public:
  // Runs the compiled step. Feeds are keyed by the original graph's placeholders and must have
  // the dtypes and shapes compiled for; throws kiln::Error for missing or wrong feeds. Runs may
  // be concurrent (from several threads): each takes its own arena, and one block is kept for
  // the next run that finds it free.
  std::vector<Tensor> run(const FeedList& feeds) const;

  MemoryStats memory_stats() const;

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
// compile time). With KILN_DUMP=<dir>, also writes <dir>/fusion.txt and <dir>/buffers.txt (the
// memory plan: each value's bytes, live range and arena offset).
Executable compile(const Graph& graph, const std::vector<Tensor>& outputs, const FeedList& feeds);

}  // namespace kiln::compiler
