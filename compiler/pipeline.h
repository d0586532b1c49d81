// The pass pipeline and the optimizer entry point: runs passes in order, repeats a
// simplification group to a fixed point, and with KILN_DUMP=<dir> writes the graph after every
// pass (text and DOT) with a log of what each pass did and why it declined, in the compile's
// dump directory (compiler/dump.h).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "compiler/passes/pass.h"
#include "kiln/graph.h"

namespace kiln::compiler {

class FusionTarget;  // compiler/passes/fusion.h

// Which rewrites a pipeline may make: every pass, or only those whose results are bit-identical
// to the original graph's (Pass::exact).
enum class Rewrites { kAll, kExact };

class Pipeline {
 public:
  explicit Pipeline(std::string name = "pipeline", Rewrites rewrites = Rewrites::kAll);

  // Adds a pass; with Rewrites::kExact (see the constructor), a pass that is not exact is dropped.
  Pipeline& add(std::unique_ptr<Pass> pass);
  // Passes run in order, repeatedly, until none changes the module or `max_iterations` rounds.
  Pipeline& add_fixed_point(std::vector<std::unique_ptr<Pass>> passes, int max_iterations = 8);
  // Where run() dumps: by default the compile's dump directory, or outside a compile a new
  // subdirectory of $KILN_DUMP per run (compiler/dump.h). Overrides that ("" turns dumping off).
  void set_dump_dir(std::string dir) { dump_dir_ = std::move(dir); }
  // Whether the module is verified (compiler/passes/verify.h) after every pass, so a broken
  // rewrite is reported by the pass that made it. On in debug builds and wherever
  // KILN_VERIFY_PASSES=1 (the test suite sets it); otherwise only the pipeline's own verify
  // passes run.
  void set_verify_each(bool on) { verify_each_ = on; }

  // Returns whether any pass changed the module.
  bool run(Module& module);
  // Whether every pass in the pipeline is exact (so are the results of optimize with it).
  bool exact() const;
  // The passes' names, in order ("verify constant_folding ... dce verify").
  std::string pass_names() const;

 private:
  struct Stage {
    std::vector<std::unique_ptr<Pass>> passes;
    int max_iterations = 1;
  };
  bool run_pass(Pass& pass, Module& module, const std::string& label);

  std::string name_;
  Rewrites rewrites_;
  std::vector<Stage> stages_;
  std::optional<std::string> dump_dir_;  // set_dump_dir's
  std::string run_dump_dir_;             // the current run's
  int step_ = 0;
  bool verify_each_;
};

// The result of optimize: a new graph, the values standing for the requested outputs, and the
// new placeholder for each original one.
struct CompiledGraph {
  Graph graph;
  std::vector<Tensor> outputs;  // in the order requested
  int nodes_before = 0;

  // The new graph's placeholder for a placeholder of the original graph.
  Tensor placeholder(const Tensor& original) const;
  // Feeds keyed by the original graph's placeholders, re-keyed for the new graph.
  FeedList map_feeds(const FeedList& original) const;
  // Runs the optimized graph with the interpreter; returns the requested outputs.
  std::vector<Tensor> run(const FeedList& original_feeds) const;

  // Internal: the original graph and its placeholders' new node ids (filled by optimize).
  std::shared_ptr<detail::GraphImpl> original_;
  std::unordered_map<int, int> placeholders_;
};

// The standard pipeline: verify, then {constant folding, algebraic simplification, CSE, DCE} to a
// fixed point, then layout folding (transposes into dot operands; not exact), epilogue fusion
// (bias add and activation into fused_dot / fused_conv), DCE, verify. kExact leaves out the
// layout pass. Epilogue fusion asks `target` (null: the host's) which fused ops exist.
Pipeline default_pipeline(Rewrites rewrites = Rewrites::kAll,
                          const FusionTarget* target = nullptr);

// A module over a copy of `graph` whose outputs are `outputs` (symbolic values of `graph`).
Module make_module(const Graph& graph, const std::vector<Tensor>& outputs);

// Optimizes the part of `graph` that computes `outputs` with `pipeline` (by default, the
// standard one).
CompiledGraph optimize(const Graph& graph, const std::vector<Tensor>& outputs);
CompiledGraph optimize(const Graph& graph, const std::vector<Tensor>& outputs, Pipeline& pipeline);

}  // namespace kiln::compiler
