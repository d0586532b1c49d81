// The pass pipeline and the optimizer entry point: runs passes in order, repeats a
// simplification group to a fixed point, and with KILN_DUMP=<dir> writes the graph after every
// pass (text and DOT) with a log of what each pass did and why it declined.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "compiler/passes/pass.h"
#include "kiln/graph.h"

namespace kiln::compiler {

class Pipeline {
 public:
  explicit Pipeline(std::string name = "pipeline");

  Pipeline& add(std::unique_ptr<Pass> pass);
  // Passes run in order, repeatedly, until none changes the module or `max_iterations` rounds.
  Pipeline& add_fixed_point(std::vector<std::unique_ptr<Pass>> passes, int max_iterations = 8);
  // Overrides KILN_DUMP ("" turns dumping off).
  void set_dump_dir(std::string dir) { dump_dir_ = std::move(dir); }

  // Returns whether any pass changed the module.
  bool run(Module& module);

 private:
  struct Stage {
    std::vector<std::unique_ptr<Pass>> passes;
    int max_iterations = 1;
  };
  bool run_pass(Pass& pass, Module& module, const std::string& label);

  std::string name_;
  std::vector<Stage> stages_;
  std::string dump_dir_;
  int step_ = 0;
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
// fixed point, then dot epilogue fusion (bias add and activation into fused_dot), then verify.
Pipeline default_pipeline();

// A module over a copy of `graph` whose outputs are `outputs` (symbolic values of `graph`).
Module make_module(const Graph& graph, const std::vector<Tensor>& outputs);

// Optimizes the part of `graph` that computes `outputs` with `pipeline` (by default, the
// standard one).
CompiledGraph optimize(const Graph& graph, const std::vector<Tensor>& outputs);
CompiledGraph optimize(const Graph& graph, const std::vector<Tensor>& outputs, Pipeline& pipeline);

}  // namespace kiln::compiler
