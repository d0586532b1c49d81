// Eager dispatch (call_op) and single-op execution.
#include "runtime/execute.h"

#include <atomic>
#include <optional>

#include "kiln/execution_mode.h"
#include "runtime/thread_pool.h"
#include "src/core/tensor_impl.h"

namespace kiln::runtime {

std::vector<TensorType> infer_types(const OpDef& def, const std::string& node_name,
                                    const std::vector<TensorType>& inputs, const Attrs& attrs) {
  size_t fixed = def.inputs.size() - (def.variadic ? 1 : 0);
  size_t required = def.variadic ? fixed + 1 : fixed - def.optional_inputs;
  bool count_ok = def.variadic ? inputs.size() >= required
                               : inputs.size() >= required && inputs.size() <= fixed;
  if (!count_ok) {
    InferContext ctx(def.name, node_name, inputs, attrs);
    std::string want = def.variadic ? "at least " + std::to_string(required)
                       : required == fixed
                           ? std::to_string(fixed)
                           : std::to_string(required) + " to " + std::to_string(fixed);
    ctx.fail("expects " + want + " input(s), got " + std::to_string(inputs.size()));
  }
  InferContext ctx(def.name, node_name, inputs, attrs);
  std::vector<TensorType> out;
  try {
    out = def.shape_fn(ctx);
  } catch (const Error& e) {
    std::string msg = e.what();
    // Errors from Attrs accessors do not know the op yet: add it.
    if (msg.rfind(def.name + ":", 0) != 0) ctx.fail(msg, e.code());
    throw;
  }
  if (def.num_outputs != kVariadicOutputs && static_cast<int>(out.size()) != def.num_outputs) {
    ctx.fail("shape function returned " + std::to_string(out.size()) + " outputs, the op has " +
                 std::to_string(def.num_outputs),
             ErrorCode::kInternal);
  }
  return out;
}

namespace {

std::atomic<EagerRunner> g_eager_runner{nullptr};
std::atomic<DeviceRunner> g_device_runner{nullptr};

void check_outputs(const KernelContext& ctx, const std::vector<Tensor>& outs,
                   const std::vector<TensorType>& out_types) {
  for (size_t i = 0; i < outs.size(); ++i) {
    if (!outs[i].defined())
      ctx.fail("kernel did not set output " + std::to_string(i), ErrorCode::kInternal);
    if (outs[i].dtype() != out_types[i].dtype || outs[i].shape() != out_types[i].shape) {
      ctx.fail("kernel produced " + TensorType{outs[i].dtype(), outs[i].shape()}.str() +
                   " for output " + std::to_string(i) + ", the shape function said " +
                   out_types[i].str(),
               ErrorCode::kInternal);
    }
  }
}

}  // namespace

void set_eager_runner(EagerRunner runner) { g_eager_runner.store(runner); }
void set_device_runner(DeviceRunner runner) { g_device_runner.store(runner); }

const KernelDef& find_cpu_kernel(const OpDef& def, const std::vector<TensorType>& inputs,
                                 const std::vector<TensorType>& outputs) {
  DType key = !inputs.empty() ? inputs[0].dtype : !outputs.empty() ? outputs[0].dtype : f32;
  return KernelRegistry::global().find(def.name, DeviceType::kCpu, key);
}

std::vector<Tensor> run_kernel(const OpDef& def, const std::string& node_name,
                               const std::vector<Tensor>& inputs, const Attrs& attrs) {
  std::vector<TensorType> in_types;
  in_types.reserve(inputs.size());
  for (const Tensor& t : inputs) in_types.push_back({t.dtype(), t.shape()});
  std::vector<TensorType> out_types = infer_types(def, node_name, in_types, attrs);
  const KernelDef& kernel = find_cpu_kernel(def, in_types, out_types);
  KernelContext ctx(def.name, node_name, inputs, attrs, out_types);
  kernel.fn(ctx);
  check_outputs(ctx, ctx.outputs(), out_types);
  return std::move(ctx.outputs());
}

void run_prepared_kernel(const KernelDef& kernel, const OpDef& def, const std::string& node_name,
                         const std::vector<Tensor>& inputs, const Attrs& attrs,
                         const std::vector<TensorType>& out_types, std::vector<Tensor>* outputs) {
  KernelContext ctx(def.name, node_name, inputs, attrs, out_types);
  for (size_t i = 0; i < outputs->size() && i < out_types.size(); ++i) {
    Tensor& buffer = (*outputs)[i];
    if (buffer.defined()) ctx.preallocate_output(static_cast<int>(i), std::move(buffer));
  }
  kernel.fn(ctx);
  check_outputs(ctx, ctx.outputs(), out_types);
  *outputs = std::move(ctx.outputs());
}

}  // namespace kiln::runtime

namespace kiln {

std::vector<Tensor> call_op(const std::string& op, const std::vector<Tensor>& given,
                            const Attrs& attrs) {
  const OpDef& def = OpRegistry::global().find(op);
  // While a function is traced as a sub-graph, values of the graphs enclosing it are captured:
  // the op reads a placeholder of the sub-graph standing for each.
  std::vector<Tensor> captured;
  if (const auto& tracing = detail::default_graph(); tracing && tracing->parent) {
    for (size_t i = 0; i < given.size(); ++i) {
      const Tensor& t = given[i];
      if (!t.defined() || !t.is_symbolic() || t.impl()->graph == tracing ||
          !detail::encloses(t.impl()->graph.get(), tracing.get())) {
        continue;
      }
      if (captured.empty()) captured = given;
      captured[i] = detail::capture(tracing, t);
    }
  }
  const std::vector<Tensor>& inputs = captured.empty() ? given : captured;
  std::shared_ptr<detail::GraphImpl> graph;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) {
      throw Error(ErrorCode::kInvalidArgument,
                  op + ": input " + std::to_string(i) + " is an undefined tensor");
    }
    if (!inputs[i].is_symbolic()) continue;
    const auto& g = inputs[i].impl()->graph;
    if (graph && graph != g) {
      throw Error(ErrorCode::kFailedPrecondition, op + ": inputs come from different graphs ('" +
                                                      graph->name + "' and '" + g->name + "')");
    }
    graph = g;
  }
  if (!graph) graph = detail::default_graph();
  // Concrete inputs on a device (a GPU): the op runs there, unless it is being recorded.
  std::optional<Device> on_device;
  for (const Tensor& t : inputs) {
    if (t.is_symbolic() || t.device().type == DeviceType::kCpu) continue;
    if (on_device && *on_device != t.device()) {
      throw Error(ErrorCode::kInvalidArgument,
                  op + ": inputs are on " + on_device->str() + " and " + t.device().str() +
                      "; copy them to one device first (Tensor::to)");
    }
    on_device = t.device();
  }
  if (!graph && on_device) {
    runtime::DeviceRunner runner = runtime::g_device_runner.load(std::memory_order_relaxed);
    if (runner == nullptr) {
      throw Error(ErrorCode::kUnimplemented,
                  op + ": an input is on " + on_device->str() +
                      " and this build runs no ops there; copy it to the host first "
                      "(.to(Device::cpu()))");
    }
    return runner(def, inputs, attrs, *on_device);
  }
  if (!graph) {
    // An eager op in idle work (the input pipeline on a pool worker) lets the step's kernels
    // go first.
    runtime::ThreadPool::yield_to_tasks();
    runtime::EagerRunner runner = runtime::g_eager_runner.load(std::memory_order_relaxed);
    std::vector<Tensor> outputs;
    if (runner && default_execution_mode() == ExecutionMode::kCompiled &&
        runner(def, inputs, attrs, &outputs)) {
      return outputs;
    }
    return runtime::run_kernel(def, op, inputs, attrs);
  }

  // Record a node. Concrete inputs become constants of the graph.
  Graph handle(graph);
  std::vector<ValueRef> refs;
  std::vector<TensorType> types;
  for (const Tensor& t : inputs) {
    // A device tensor recorded as a constant: its value, copied to the host.
    Tensor sym = t.is_symbolic()                        ? t
                 : t.device().type == DeviceType::kCpu ? handle.constant(t)
                                                        : handle.constant(t.to(Device::cpu()));
    refs.push_back({sym.impl()->node, sym.impl()->output});
    types.push_back({sym.dtype(), sym.shape()});
  }
  detail::Node node;
  {
    std::lock_guard lock(graph->mu);
    node.name = graph->unique_name(op);
  }
  node.outputs = runtime::infer_types(def, node.name, types, attrs);
  node.op = op;
  node.def = &def;
  node.inputs = std::move(refs);
  node.attrs = attrs;
  std::lock_guard lock(graph->mu);
  node.name = graph->unique_name(op);  // unchanged unless another thread raced us
  int id = graph->add_node(std::move(node));
  std::vector<Tensor> outs;
  const int num_outputs = static_cast<int>(graph->nodes[id].outputs.size());
  for (int i = 0; i < num_outputs; ++i) {
    outs.push_back(graph->value(id, i));
    outs.back().impl()->graph = graph;
  }
  return outs;
}

}  // namespace kiln
