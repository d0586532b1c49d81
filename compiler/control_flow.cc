// Control-flow thunks: sub-graphs compiled for the node's concrete types, run by the loops of
// ops/control_flow.cc.
#include "compiler/control_flow.h"

#include "compiler/executable.h"
#include "ops/control_flow.h"

namespace kiln::compiler {
namespace {

struct CompiledSub {
  std::shared_ptr<const SubGraph> sub;  // keeps the placeholders the executable is keyed by
  std::shared_ptr<const Executable> exe;
};

// `sub` compiled for params of these types; params [0, carried) may be donated to results
// [0, carried) (loop-carried values the body may update in place).
CompiledSub compile_sub(const std::shared_ptr<const SubGraph>& sub,
                        const std::vector<TensorType>& params, size_t carried) {
  FeedList feeds;
  for (size_t i = 0; i < params.size(); ++i)
    feeds.emplace_back(sub->params[i], Tensor::empty(params[i].dtype, params[i].shape));
  std::vector<Donation> donations;
  for (size_t i = 0; i < carried; ++i) donations.push_back({sub->params[i], static_cast<int>(i)});
  auto exe =
      std::make_shared<const Executable>(compile(sub->graph, sub->results, feeds, donations));
  return {sub, std::move(exe)};
}

ops::SubRunner runner(const CompiledSub& c) {
  return [c](std::vector<Tensor>&& args) {
    FeedList feeds;
    feeds.reserve(args.size());
    for (size_t i = 0; i < args.size(); ++i)
      feeds.emplace_back(c.sub->params[i], std::move(args[i]));
    return c.exe->run_donating(std::move(feeds));
  };
}

std::shared_ptr<const SubGraph> sub_of(const detail::Node& node, const std::string& attr) {
  node.attrs.get_subgraph(attr);  // throws naming the attribute when missing or mistyped
  return std::get<std::shared_ptr<const SubGraph>>(node.attrs.values().at(attr));
}

std::string thunks_of(const CompiledSub& c) {
  return std::to_string(c.exe->num_thunks()) + " thunk" + (c.exe->num_thunks() == 1 ? "" : "s");
}

}  // namespace

const KernelDef* control_flow_kernel(const detail::Node& node,
                                     const std::vector<TensorType>& inputs,
                                     std::vector<std::unique_ptr<KernelDef>>& owned,
                                     std::string* description) {
  auto kernel = std::make_unique<KernelDef>();
  kernel->op = node.op;
  kernel->source = "compiler/control_flow.cc";
  if (node.op == "cond") {
    std::vector<TensorType> params(inputs.begin() + 1, inputs.end());
    CompiledSub a = compile_sub(sub_of(node, "then_branch"), params, 0);
    CompiledSub b = compile_sub(sub_of(node, "else_branch"), params, 0);
    kernel->fn = [a, b](KernelContext& ctx) { ops::run_cond(ctx, runner(a), runner(b)); };
    *description = "cond(then: " + thunks_of(a) + ", else: " + thunks_of(b) + ")";
  } else if (node.op == "while") {
    const size_t num_vars = node.attrs.get_int("num_vars");
    CompiledSub c = compile_sub(sub_of(node, "cond"), inputs, 0);
    CompiledSub b = compile_sub(sub_of(node, "body"), inputs, num_vars);
    kernel->fn = [c, b](KernelContext& ctx) { ops::run_while(ctx, runner(c), runner(b)); };
    *description = "while(cond: " + thunks_of(c) + ", body: " + thunks_of(b) + ")";
  } else if (node.op == "scan") {
    const size_t nc = node.attrs.get_int("num_carry"), nx = node.attrs.get_int("num_xs");
    std::vector<TensorType> params = inputs;
    for (size_t j = nc; j < nc + nx; ++j) params[j].shape.erase(params[j].shape.begin());
    CompiledSub b = compile_sub(sub_of(node, "body"), params, nc);
    kernel->fn = [b](KernelContext& ctx) { ops::run_scan(ctx, runner(b)); };
    *description = "scan(length " + std::to_string(node.attrs.get_int("length")) +
                   ", body: " + thunks_of(b) + ")";
  } else {
    throw Error(ErrorCode::kInternal, "control_flow_kernel: '" + node.op + "' is not control flow");
  }
  owned.push_back(std::move(kernel));
  return owned.back().get();
}

}  // namespace kiln::compiler
