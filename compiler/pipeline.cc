// Pass scheduling, the KILN_DUMP dump, and optimize().
#include "compiler/pipeline.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <system_error>
#include <utility>

#include "compiler/dump.h"
#include "compiler/passes/algebraic_simplifier.h"
#include "compiler/passes/arg_reductions.h"
#include "compiler/passes/constant_folding.h"
#include "compiler/passes/conv_pool_grad_fusion.h"
#include "compiler/passes/cse.h"
#include "compiler/passes/dce.h"
#include "compiler/passes/epilogue_fusion.h"
#include "compiler/passes/layout.h"
#include "compiler/passes/merge_scans.h"
#include "compiler/passes/unroll.h"
#include "compiler/passes/verify.h"
#include "kiln/error.h"

namespace kiln::compiler {
namespace {

void write_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  if (!out) {
    throw Error(ErrorCode::kFailedPrecondition, "KILN_DUMP: cannot write '" + path.string() + "'");
  }
}

}  // namespace

namespace {

bool verify_each_by_default() {
#ifndef NDEBUG
  return true;
#else
  const char* env = std::getenv("KILN_VERIFY_PASSES");
  return env != nullptr && std::string(env) == "1";
#endif
}

// Whether KILN_DISABLE_PASSES (a comma-separated list of pass names, as XLA's
// --xla_disable_hlo_passes) names `pass`: to measure what a pass gains, or to rule it out.
bool disabled_by_env(const Pass& pass) {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    const char* env = std::getenv("KILN_DISABLE_PASSES");
    std::string rest = env == nullptr ? "" : env;
    for (size_t at = 0; at <= rest.size();) {
      const size_t comma = std::min(rest.find(',', at), rest.size());
      if (comma > at) out.push_back(rest.substr(at, comma - at));
      at = comma + 1;
    }
    return out;
  }();
  return std::find(names.begin(), names.end(), pass.name()) != names.end();
}

}  // namespace

Pipeline::Pipeline(std::string name, Rewrites rewrites)
    : name_(std::move(name)), rewrites_(rewrites), verify_each_(verify_each_by_default()) {}

Pipeline& Pipeline::add(std::unique_ptr<Pass> pass) {
  if (rewrites_ == Rewrites::kExact && !pass->exact()) return *this;
  if (disabled_by_env(*pass)) return *this;
  Stage stage;
  stage.passes.push_back(std::move(pass));
  stages_.push_back(std::move(stage));
  return *this;
}

Pipeline& Pipeline::add_fixed_point(std::vector<std::unique_ptr<Pass>> passes, int max_iterations) {
  if (rewrites_ == Rewrites::kExact)
    std::erase_if(passes, [](const std::unique_ptr<Pass>& p) { return !p->exact(); });
  std::erase_if(passes, [](const std::unique_ptr<Pass>& p) { return disabled_by_env(*p); });
  stages_.push_back(Stage{std::move(passes), max_iterations});
  return *this;
}

bool Pipeline::exact() const {
  for (const Stage& stage : stages_)
    for (const auto& pass : stage.passes)
      if (!pass->exact()) return false;
  return true;
}

std::string Pipeline::pass_names() const {
  std::string names;
  for (const Stage& stage : stages_)
    for (const auto& pass : stage.passes) names += (names.empty() ? "" : " ") + pass->name();
  return names;
}

bool Pipeline::run(Module& module) {
  // Passes compute on concrete tensors (folding, reading constants); a graph the caller is
  // recording into must not capture that work.
  struct NoDefaultGraph {
    std::shared_ptr<detail::GraphImpl> saved = std::exchange(detail::default_graph(), nullptr);
    ~NoDefaultGraph() { detail::default_graph() = saved; }
  } no_default_graph;
  run_dump_dir_ = dump_dir_ ? *dump_dir_ : dump_dir_for(module.graph.name());
  bool changed = false;
  for (Stage& stage : stages_) {
    for (int round = 0; round < stage.max_iterations; ++round) {
      bool round_changed = false;
      for (auto& pass : stage.passes) {
        std::string label = pass->name();
        if (stage.max_iterations > 1) label += ".round" + std::to_string(round);
        round_changed |= run_pass(*pass, module, label);
      }
      changed |= round_changed;
      if (!round_changed) break;
    }
  }
  return changed;
}

bool Pipeline::run_pass(Pass& pass, Module& module, const std::string& label) {
  int before = static_cast<int>(nodes_of(module.graph).size());
  pass.clear_notes();
  bool changed = pass.run(module);
  ++step_;
  if (verify_each_ && pass.name() != "verify") {
    try {
      Verify().run(module);
    } catch (const Error& e) {
      throw Error(ErrorCode::kInternal,
                  name_ + ": the module is broken after pass " + label + ": " + e.what());
    }
  }
  if (run_dump_dir_.empty()) return changed;
  std::error_code error;
  std::filesystem::create_directories(run_dump_dir_, error);
  if (error) {
    throw Error(ErrorCode::kFailedPrecondition,
                "KILN_DUMP: cannot create '" + run_dump_dir_ + "': " + error.message());
  }
  char prefix[16];
  std::snprintf(prefix, sizeof prefix, "%03d_", step_);
  std::filesystem::path base =
      std::filesystem::path(run_dump_dir_) / (prefix + name_ + "." + label);
  write_file(base.string() + ".txt", module_text(module));
  write_file(base.string() + ".dot", module.graph.to_dot());
  std::string log = pass.name() + ": " + (changed ? "changed" : "no change") + ", " +
                    std::to_string(before) + " -> " +
                    std::to_string(nodes_of(module.graph).size()) + " nodes\n";
  for (const std::string& line : pass.notes()) log += "  " + line + "\n";
  write_file(base.string() + ".log", log);
  return changed;
}

Pipeline default_pipeline(Rewrites rewrites, const FusionTarget* target) {
  Pipeline p("optimize", rewrites);
  p.add(std::make_unique<Verify>());
  // Before the simplifier, whose CSE shares what the rewrites and the graph both compute.
  if (target && target->arg_reductions_as_loops()) p.add(std::make_unique<ArgReductions>());
  std::vector<std::unique_ptr<Pass>> simplify;
  simplify.push_back(std::make_unique<ConstantFolding>());
  simplify.push_back(std::make_unique<AlgebraicSimplifier>(!target || target->masked_max_grad()));
  simplify.push_back(std::make_unique<Cse>());
  simplify.push_back(std::make_unique<MergeAugmentedScans>());
  simplify.push_back(std::make_unique<UnrollLoops>());  // after the merge: it changes bodies
  simplify.push_back(std::make_unique<Dce>());
  p.add_fixed_point(std::move(simplify), 8);
  p.add(std::make_unique<LayoutFolding>());  // not exact: after the exact group
  // Exact pipelines fuse only f32 and f64 epilogues (bf16/f16 ones round once, not per op).
  p.add(std::make_unique<EpilogueFusion>(/*fuse_narrow=*/rewrites == Rewrites::kAll, target));
  p.add(std::make_unique<ConvPoolGradFusion>());  // reads the pools epilogue fusion made
  p.add(std::make_unique<Dce>());  // what the epilogues absorbed (relu's 0, the bias add)
  p.add(std::make_unique<DropConvOutputs>());  // after DCE removed the readers fusion left
  p.add(std::make_unique<Verify>());
  return p;
}

Module make_module(const Graph& graph, const std::vector<Tensor>& outputs) {
  Module module;
  {
    std::lock_guard lock(graph.impl()->mu);
    auto copy = std::make_shared<detail::GraphImpl>(graph.name());
    copy->nodes = graph.impl()->nodes;
    copy->by_name = graph.impl()->by_name;
    module.graph = Graph(copy);
  }
  const std::vector<detail::Node>& nodes = nodes_of(module.graph);
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& t = outputs[i];
    if (!t.defined() || !t.is_symbolic() || t.impl()->graph != graph.impl()) {
      throw Error(ErrorCode::kInvalidArgument, "optimize: output " + std::to_string(i) +
                                                   " is not a value of graph '" + graph.name() +
                                                   "'");
    }
    module.outputs.push_back({t.impl()->node, t.impl()->output});
  }
  for (size_t id = 0; id < nodes.size(); ++id) {
    if (nodes[id].op == "placeholder") {
      module.placeholders.push_back({static_cast<int>(id), static_cast<int>(id)});
    }
  }

  return module;
}

CompiledGraph optimize(const Graph& graph, const std::vector<Tensor>& outputs) {
  Pipeline pipeline = default_pipeline();
  return optimize(graph, outputs, pipeline);
}

CompiledGraph optimize(const Graph& graph, const std::vector<Tensor>& outputs, Pipeline& pipeline) {
  Module module = make_module(graph, outputs);
  CompiledGraph result;
  result.nodes_before = static_cast<int>(nodes_of(module.graph).size());
  result.original_ = graph.impl();
  pipeline.run(module);

  result.graph = module.graph;
  for (ValueRef v : module.outputs) {
    result.outputs.push_back(result.graph.value(v.node, v.output));
  }
  for (const Module::Placeholder& p : module.placeholders) {
    result.placeholders_[p.original] = p.current;
  }
  return result;
}

Tensor CompiledGraph::placeholder(const Tensor& original) const {
  if (!original.defined() || !original.is_symbolic() || original.impl()->graph != original_) {
    throw Error(ErrorCode::kInvalidArgument,
                "CompiledGraph: the feed key is not a placeholder of the original graph");
  }
  auto it = placeholders_.find(original.impl()->node);
  if (it == placeholders_.end()) {
    throw Error(ErrorCode::kInvalidArgument, "CompiledGraph: feed key '" +
                                                 original_->nodes[original.impl()->node].name +
                                                 "' is not a placeholder");
  }
  return graph.value(it->second);
}

FeedList CompiledGraph::map_feeds(const FeedList& original) const {
  FeedList feeds;
  for (const auto& [key, value] : original) feeds.push_back({placeholder(key), value});
  return feeds;
}

std::vector<Tensor> CompiledGraph::run(const FeedList& original_feeds) const {
  return graph.run(map_feeds(original_feeds), outputs);
}

}  // namespace kiln::compiler
