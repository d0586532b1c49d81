// Reverse-mode autodiff: walks the graph backward from y in reverse node order, calls each
// op's gradient rule, and sums the contributions to every value; plus stop_gradient,
// unbroadcast and the value_and_grad tracer.
#include "kiln/autodiff.h"

#include <algorithm>
#include <string>

#include "kiln/graph.h"
#include "kiln/op_registry.h"
#include "kiln/ops.h"
#include "src/core/tensor_impl.h"

namespace kiln {

namespace {

[[noreturn]] void fail(const std::string& message, ErrorCode code = ErrorCode::kInvalidArgument) {
  throw Error(code, "gradients: " + message);
}

ValueRef ref_of(const Tensor& t) { return {t.impl()->node, t.impl()->output}; }

void require_value_of(const Graph& g, const Tensor& t, const std::string& what) {
  if (!t.defined()) fail(what + " is an undefined tensor");
  if (!t.is_symbolic()) {
    fail(what +
             " is a concrete tensor; gradients relate symbolic values of one graph "
             "(use value_and_grad to differentiate a function of concrete tensors)",
         ErrorCode::kFailedPrecondition);
  }
  if (!(t.graph() == g)) {
    fail(what + " belongs to graph '" + t.graph().name() + "', but y to graph '" + g.name() + "'",
         ErrorCode::kFailedPrecondition);
  }
}

bool compatible(const Shape& a, const Shape& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i] && a[i] != kUnknownDim && b[i] != kUnknownDim) return false;
  return true;
}

using Carries = std::vector<std::vector<bool>>;  // [node][output]

bool any_carries(const std::vector<ValueRef>& values, const Carries& carries) {
  return std::any_of(values.begin(), values.end(),
                     [&](const ValueRef& v) { return carries[v.node][v.output]; });
}

// Which values carry gradient from some x: the floating-point xs, and the floating-point
// outputs of differentiable ops with a carrying input. Node ids are a topological order.
Carries find_carriers(const std::vector<NodeInfo>& nodes, const std::vector<Tensor>& xs) {
  Carries carries(nodes.size());
  for (const NodeInfo& n : nodes) carries[n.id].resize(n.outputs.size());
  for (const Tensor& x : xs) {
    ValueRef r = ref_of(x);
    if (r.node < static_cast<int>(nodes.size())) carries[r.node][r.output] = true;
  }
  for (const NodeInfo& n : nodes) {
    bool from_inputs =
        OpRegistry::global().find(n.op).differentiable && any_carries(n.inputs, carries);
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      carries[n.id][k] = is_floating(n.outputs[k].dtype) && (carries[n.id][k] || from_inputs);
    }
  }
  return carries;
}

// The gradient flowing into y: dy checked against y (a concrete dy becomes a constant), or
// ones when dy is undefined.
Tensor seed_for(Graph g, const Tensor& y, const Tensor& dy) {
  if (!dy.defined()) return ones_like(y);
  Tensor seed = dy.is_symbolic() ? dy : g.constant(dy, "dy");
  require_value_of(g, seed, "dy");
  if (seed.dtype() != y.dtype() || !compatible(seed.shape(), y.shape())) {
    fail("dy is " + TensorType{seed.dtype(), seed.shape()}.str() + " but y is " +
         TensorType{y.dtype(), y.shape()}.str() + "; they must have the same dtype and shape");
  }
  return seed;
}

// Calls node n's rule; returns one gradient per input, each undefined or of the input's type.
std::vector<Tensor> apply_rule(Graph g, const NodeInfo& n, const std::vector<Tensor>& out_grads,
                               const std::vector<NodeInfo>& nodes) {
  std::string rule = "the gradient rule of op '" + n.op + "' (node '" + n.name + "')";
  const GradientFn& fn = OpRegistry::global().find(n.op).gradient;
  if (!fn) {
    fail("op '" + n.op + "' (node '" + n.name +
             "') is differentiable but has no gradient rule; register one with "
             "KILN_REGISTER_GRADIENT, or cut the path with stop_gradient",
         ErrorCode::kUnimplemented);
  }
  GradContext ctx{n, {}, {}, out_grads};
  for (const ValueRef& in : n.inputs) ctx.inputs.push_back(g.value(in.node, in.output));
  for (size_t k = 0; k < n.outputs.size(); ++k) ctx.outputs.push_back(g.value(n.id, k));
  std::vector<Tensor> in_grads = fn(ctx);
  if (in_grads.size() != n.inputs.size()) {
    fail(rule + " returned " + std::to_string(in_grads.size()) + " gradients for " +
             std::to_string(n.inputs.size()) + " inputs",
         ErrorCode::kInternal);
  }
  for (size_t i = 0; i < in_grads.size(); ++i) {
    Tensor& grad = in_grads[i];
    if (!grad.defined()) continue;
    const TensorType& input = nodes[n.inputs[i].node].outputs[n.inputs[i].output];
    if (!grad.is_symbolic()) grad = g.constant(grad);
    if (!(grad.graph() == g))
      fail(rule + " returned a value of another graph", ErrorCode::kInternal);
    if (grad.dtype() != input.dtype || !compatible(grad.shape(), input.shape)) {
      fail(rule + " returned " + TensorType{grad.dtype(), grad.shape()}.str() + " for input " +
               std::to_string(i) + " of type " + input.str() +
               "; a gradient has its input's dtype and shape (see unbroadcast)",
           ErrorCode::kInternal);
    }
  }
  return in_grads;
}

}  // namespace

std::vector<Tensor> gradients(const std::vector<Tensor>& ys, const std::vector<Tensor>& xs,
                              const std::vector<Tensor>& dys) {
  if (ys.empty()) fail("ys is empty");
  if (!dys.empty() && dys.size() != ys.size()) {
    fail("dys has " + std::to_string(dys.size()) + " tensors for " + std::to_string(ys.size()) +
         " ys");
  }
  for (size_t i = 0; i < ys.size(); ++i) {
    const std::string what = ys.size() == 1 ? "y" : "ys[" + std::to_string(i) + "]";
    if (!ys[i].defined()) fail(what + " is an undefined tensor");
    if (!ys[i].is_symbolic()) {
      fail(what + " is a concrete tensor; it must be a symbolic value recorded in a graph",
           ErrorCode::kFailedPrecondition);
    }
    if (!is_floating(ys[i].dtype())) {
      fail(what + " must be floating-point to be differentiated, got " +
           TensorType{ys[i].dtype(), ys[i].shape()}.str());
    }
  }
  Graph g = ys[0].graph();
  for (size_t i = 1; i < ys.size(); ++i) require_value_of(g, ys[i], "ys[" + std::to_string(i) + "]");
  for (size_t i = 0; i < xs.size(); ++i)
    require_value_of(g, xs[i], "xs[" + std::to_string(i) + "]");

  int last = 0;
  for (const Tensor& y : ys) last = std::max(last, ref_of(y).node);
  std::vector<NodeInfo> nodes;
  for (int id = 0; id <= last; ++id) nodes.push_back(g.node(id));
  const Carries carries = find_carriers(nodes, xs);

  auto scope = g.name_scope("gradients");
  auto recording = g.as_default();
  std::vector<std::vector<Tensor>> grads(nodes.size());  // [node][output], summed
  for (const NodeInfo& n : nodes) grads[n.id].resize(n.outputs.size());
  for (size_t i = 0; i < ys.size(); ++i) {
    const ValueRef target = ref_of(ys[i]);
    const Tensor dy = dys.empty() ? Tensor() : dys[i];
    if (!dy.defined() && !carries[target.node][target.output]) continue;
    Tensor seed = seed_for(g, ys[i], dy);
    if (!carries[target.node][target.output]) continue;
    Tensor& total = grads[target.node][target.output];
    total = total.defined() ? add(total, seed) : seed;
  }

  for (int id = last; id >= 0; --id) {
    const NodeInfo& n = nodes[id];
    bool reached = std::any_of(grads[id].begin(), grads[id].end(),
                               [](const Tensor& t) { return t.defined(); });
    if (!reached || !OpRegistry::global().find(n.op).differentiable ||
        !any_carries(n.inputs, carries)) {
      continue;
    }
    std::vector<Tensor> in_grads = apply_rule(g, n, grads[id], nodes);
    for (size_t i = 0; i < in_grads.size(); ++i) {
      const ValueRef& in = n.inputs[i];
      if (!in_grads[i].defined() || !carries[in.node][in.output]) continue;
      Tensor& total = grads[in.node][in.output];
      total = total.defined() ? add(total, in_grads[i]) : in_grads[i];
    }
  }

  std::vector<Tensor> out;
  for (const Tensor& x : xs) {
    ValueRef r = ref_of(x);
    bool reached = r.node <= last && grads[r.node][r.output].defined();
    out.push_back(reached ? grads[r.node][r.output] : zeros_like(x));
  }
  return out;
}

std::vector<Tensor> gradients(const Tensor& y, const std::vector<Tensor>& xs, const Tensor& dy) {
  return gradients(std::vector<Tensor>{y}, xs, std::vector<Tensor>{dy});
}

std::pair<Tensor, std::vector<Tensor>> value_and_grad(const DifferentiableFn& f,
                                                      const std::vector<Tensor>& args,
                                                      const Tensor& dy) {
  Graph g("value_and_grad");
  std::vector<Tensor> params;
  FeedList feeds;
  for (size_t i = 0; i < args.size(); ++i) {
    if (!args[i].defined() || args[i].is_symbolic()) {
      throw Error(ErrorCode::kInvalidArgument,
                  "value_and_grad: args[" + std::to_string(i) +
                      "] must be a concrete tensor (use gradients() inside a graph)");
    }
    params.push_back(g.placeholder(args[i].dtype(), args[i].shape(), "arg" + std::to_string(i)));
    feeds.emplace_back(params.back(), args[i]);
  }
  Tensor y;
  {
    auto recording = g.as_default();
    y = f(params);
  }
  if (!y.defined())
    throw Error(ErrorCode::kInvalidArgument, "value_and_grad: f returned an undefined tensor");
  if (!y.is_symbolic()) y = g.constant(y, "value");  // f ignored its arguments
  if (!(y.graph() == g)) {
    throw Error(ErrorCode::kFailedPrecondition,
                "value_and_grad: f returned a value of another graph ('" + y.graph().name() + "')");
  }
  std::vector<Tensor> fetches = {y};
  for (Tensor& t : gradients(y, params, dy)) fetches.push_back(std::move(t));
  std::vector<Tensor> values = g.run(feeds, fetches);
  Tensor value = values.front();
  values.erase(values.begin());
  return {value, values};
}

std::vector<Tensor> grad(const DifferentiableFn& f, const std::vector<Tensor>& args,
                         const Tensor& dy) {
  return value_and_grad(f, args, dy).second;
}

}  // namespace kiln
