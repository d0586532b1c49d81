// Control-flow thunks: sub-graphs compiled for the node's concrete types, run by the loops of
// ops/control_flow.cc.
#include "compiler/control_flow.h"

#include "compiler/device_backend.h"
#include "compiler/executable.h"
#include "ops/control_flow.h"

namespace kiln::compiler {

std::vector<Tensor> CompiledSub::operator()(std::vector<Tensor>&& args) const {
  FeedList feeds;
  feeds.reserve(args.size());
  for (size_t i = 0; i < args.size(); ++i) feeds.emplace_back(sub->params[i], std::move(args[i]));
  return exe->run_donating(std::move(feeds));
}

std::string CompiledSub::thunks() const {
  return std::to_string(exe->num_thunks()) + " thunk" + (exe->num_thunks() == 1 ? "" : "s");
}

CompiledSub compile_sub(const std::shared_ptr<const DeviceBackend>& device,
                        const std::shared_ptr<const SubGraph>& sub,
                        const std::vector<TensorType>& params, size_t carried,
                        bool results_on_host) {
  FeedList feeds;
  for (size_t i = 0; i < params.size(); ++i)
    feeds.emplace_back(sub->params[i], Tensor::empty(params[i].dtype, params[i].shape));
  std::vector<Donation> donations;
  for (size_t i = 0; i < carried; ++i) donations.push_back({sub->params[i], static_cast<int>(i)});
  auto exe = std::make_shared<const Executable>(
      device ? compile_for_device(device, sub->graph, sub->results, feeds, donations,
                                  /*outputs_on_device=*/!results_on_host)
             : compile(sub->graph, sub->results, feeds, donations));
  return {sub, std::move(exe)};
}

std::shared_ptr<const SubGraph> sub_of(const detail::Node& node, const std::string& attr) {
  node.attrs.get_subgraph(attr);  // throws naming the attribute when missing or mistyped
  return std::get<std::shared_ptr<const SubGraph>>(node.attrs.values().at(attr));
}

const KernelDef* control_flow_kernel(const detail::Node& node,
                                     const std::vector<TensorType>& inputs,
                                     std::vector<std::unique_ptr<KernelDef>>& owned,
                                     std::string* description) {
  auto kernel = std::make_unique<KernelDef>();
  kernel->op = node.op;
  kernel->source = "compiler/control_flow.cc";
  if (node.op == "cond") {
    std::vector<TensorType> params(inputs.begin() + 1, inputs.end());
    CompiledSub a = compile_sub(nullptr, sub_of(node, "then_branch"), params, 0);
    CompiledSub b = compile_sub(nullptr, sub_of(node, "else_branch"), params, 0);
    kernel->fn = [a, b](KernelContext& ctx) { ops::run_cond(ctx, a, b); };
    *description = "cond(then: " + a.thunks() + ", else: " + b.thunks() + ")";
  } else if (node.op == "while") {
    const size_t num_vars = node.attrs.get_int("num_vars");
    CompiledSub c = compile_sub(nullptr, sub_of(node, "cond"), inputs, 0);
    CompiledSub b = compile_sub(nullptr, sub_of(node, "body"), inputs, num_vars);
    kernel->fn = [c, b](KernelContext& ctx) { ops::run_while(ctx, c, b); };
    *description = "while(cond: " + c.thunks() + ", body: " + b.thunks() + ")";
  } else if (node.op == "scan") {
    const size_t nc = node.attrs.get_int("num_carry"), nx = node.attrs.get_int("num_xs");
    std::vector<TensorType> params = inputs;
    for (size_t j = nc; j < nc + nx; ++j) params[j].shape.erase(params[j].shape.begin());
    CompiledSub b = compile_sub(nullptr, sub_of(node, "body"), params, nc);
    kernel->fn = [b](KernelContext& ctx) { ops::run_scan(ctx, b); };
    *description = "scan(length " + std::to_string(node.attrs.get_int("length")) +
                   ", body: " + b.thunks() + ")";
  } else {
    throw Error(ErrorCode::kInternal, "control_flow_kernel: '" + node.op + "' is not control flow");
  }
  owned.push_back(std::move(kernel));
  return owned.back().get();
}

}  // namespace kiln::compiler
