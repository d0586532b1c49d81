// cond, while and scan: type rules, the loops, and reference kernels that interpret the
// sub-graphs. Gradient rules are registered by the API that builds these ops
// (src/api/function/control_flow.cc), which differentiates sub-graphs.
#include "ops/control_flow.h"

#include <cstring>
#include <string>
#include <unordered_map>

#include "ops/kernel_util.h"
#include "runtime/execute.h"
#include "src/core/graph_walk.h"
#include "src/core/tensor_impl.h"

namespace kiln::ops {
namespace {

// Checks that `args` fit the params of sub-graph `attr`.
void check_params(const InferContext& ctx, const std::string& attr,
                  const std::vector<TensorType>& args) {
  const SubGraph& sub = ctx.attrs().get_subgraph(attr);
  if (sub.params.size() != args.size()) {
    ctx.fail(attr + " takes " + std::to_string(sub.params.size()) + " values, the node gives " +
             std::to_string(args.size()));
  }
  for (size_t i = 0; i < args.size(); ++i) {
    TensorType want{sub.params[i].dtype(), sub.params[i].shape()};
    if (!types_compatible(want, args[i])) {
      ctx.fail(attr + "'s parameter " + std::to_string(i) + " is " + want.str() +
               ", the node gives " + args[i].str());
    }
  }
}

std::vector<TensorType> slice(const std::vector<TensorType>& v, size_t begin, size_t end) {
  return {v.begin() + static_cast<std::ptrdiff_t>(begin),
          v.begin() + static_cast<std::ptrdiff_t>(end)};
}

void check_result(const KernelContext& ctx, const char* what, size_t i, const Tensor& got,
                  const TensorType& want, int64_t step) {
  if (got.dtype() == want.dtype && got.shape() == want.shape) return;
  ctx.fail(std::string(what) + " " + std::to_string(i) + " is " +
           TensorType{got.dtype(), got.shape()}.str() + " at step " + std::to_string(step) +
           ", but " + want.str() + " before: loop-carried values keep their dtype and shape");
}

}  // namespace

Tensor row_view(const Tensor& x, int64_t t) {
  Shape shape(x.shape().begin() + 1, x.shape().end());
  const size_t row = x.shape()[0] == 0 ? 0 : x.nbytes() / static_cast<size_t>(x.shape()[0]);
  auto impl = std::make_shared<detail::TensorImpl>();
  impl->dtype = x.dtype();
  impl->shape = std::move(shape);
  const auto& storage = x.impl()->storage;
  impl->storage = std::make_shared<detail::Storage>(
      std::shared_ptr<void>(storage), static_cast<char*>(storage->data) + row * t, row);
  return Tensor(std::move(impl));
}

bool types_compatible(const TensorType& a, const TensorType& b) {
  if (a.dtype != b.dtype || a.shape.size() != b.shape.size()) return false;
  for (size_t i = 0; i < a.shape.size(); ++i) {
    if (a.shape[i] != b.shape[i] && a.shape[i] != kUnknownDim && b.shape[i] != kUnknownDim)
      return false;
  }
  return true;
}

// ---- replaying a sub-graph into the graph being recorded ----------------------------------

void replay(const SubGraph& sub, std::vector<std::vector<Tensor>>& values,
            const std::vector<bool>* wanted) {
  std::vector<detail::Node> nodes;
  {
    std::lock_guard lock(sub.graph.impl()->mu);
    nodes = sub.graph.impl()->nodes;
  }
  Graph target(detail::default_graph());
  for (size_t id = 0; id < nodes.size(); ++id) {
    if (!values[id].empty() || (wanted && !(*wanted)[id])) continue;
    const detail::Node& n = nodes[id];
    if (n.op == "placeholder") {
      throw Error(ErrorCode::kInternal, "control flow: sub-graph '" + sub.graph.name() +
                                            "' has an unmapped placeholder '" + n.name + "'");
    }
    if (n.op == "constant") {
      values[id] = {target.constant(n.attrs.get_tensor("value"))};
      continue;
    }
    std::vector<Tensor> inputs;
    for (const ValueRef& in : n.inputs) inputs.push_back(values[in.node].at(in.output));
    values[id] = call_op(n.op, inputs, n.attrs);
  }
}

std::vector<bool> needed_for(const SubGraph& sub, const std::vector<ValueRef>& roots) {
  std::lock_guard lock(sub.graph.impl()->mu);
  std::vector<int> ids;
  for (const ValueRef& r : roots) ids.push_back(r.node);
  return detail::ancestors(sub.graph.impl()->nodes, ids);
}

std::vector<Tensor> inline_subgraph(const SubGraph& sub, const std::vector<Tensor>& args) {
  std::vector<std::vector<Tensor>> values(sub.graph.num_nodes());
  for (size_t i = 0; i < sub.params.size(); ++i) values[sub.params[i].impl()->node] = {args.at(i)};
  std::vector<ValueRef> roots;
  for (const Tensor& r : sub.results) roots.push_back({r.impl()->node, r.impl()->output});
  std::vector<bool> needed = needed_for(sub, roots);
  replay(sub, values, &needed);
  std::vector<Tensor> out;
  for (const Tensor& r : sub.results) out.push_back(values[r.impl()->node].at(r.impl()->output));
  return out;
}

bool is_control_flow(const std::string& op) {
  return op == "cond" || op == "while" || op == "scan";
}

std::vector<TensorType> infer_subgraph(const SubGraph& sub, const std::vector<TensorType>& params,
                                       const std::string& node) {
  for (size_t i = 0; i < sub.params.size() + sub.results.size(); ++i) {
    const bool param = i < sub.params.size();
    const Tensor& t = param ? sub.params[i] : sub.results[i - sub.params.size()];
    if (!t.defined() || !t.is_symbolic() || !(t.graph() == sub.graph) ||
        (param && sub.graph.node(t.impl()->node).op != "placeholder")) {
      throw Error(
          ErrorCode::kInvalidArgument,
          node + ": sub-graph '" + sub.graph.name() + "': " +
              (param ? "param " + std::to_string(i) + " is not a placeholder"
                     : "result " + std::to_string(i - sub.params.size()) + " is not a value") +
              " of its graph");
    }
  }
  if (params == sub.param_types()) return sub.result_types();
  const std::shared_ptr<detail::GraphImpl>& g = sub.graph.impl();
  std::vector<detail::Node> nodes;
  {
    std::lock_guard lock(g->mu);
    nodes = g->nodes;
  }
  std::unordered_map<int, size_t> param_of;
  for (size_t i = 0; i < sub.params.size(); ++i) param_of[sub.params[i].impl()->node] = i;
  std::vector<std::vector<TensorType>> types(nodes.size());
  for (size_t id = 0; id < nodes.size(); ++id) {
    const detail::Node& n = nodes[id];
    if (auto it = param_of.find(static_cast<int>(id)); it != param_of.end()) {
      types[id] = {params.at(it->second)};
      continue;
    }
    if (n.inputs.empty()) {
      types[id] = n.outputs;
      continue;
    }
    std::vector<TensorType> in;
    for (const ValueRef& r : n.inputs) in.push_back(types[r.node][r.output]);
    types[id] = runtime::infer_types(*n.def, node + "/" + n.name, in, n.attrs);
  }
  std::vector<TensorType> out;
  for (const Tensor& r : sub.results) out.push_back(types[r.impl()->node][r.impl()->output]);
  return out;
}

// ---- cond -------------------------------------------------------------------------------

KILN_REGISTER_OP(cond)
    .input("pred")
    .variadic_input("operands")
    .variadic_outputs()
    .shape_fn([](const InferContext& ctx) {
      const TensorType& pred = ctx.input(0);
      if (pred.dtype != bool_ || !pred.shape.empty())
        ctx.fail("the predicate must be a bool scalar, got " + pred.str());
      std::vector<TensorType> args = slice(ctx.inputs(), 1, ctx.inputs().size());
      check_params(ctx, "then_branch", args);
      check_params(ctx, "else_branch", args);
      std::vector<TensorType> a =
          infer_subgraph(ctx.attrs().get_subgraph("then_branch"), args, ctx.node_name());
      std::vector<TensorType> b =
          infer_subgraph(ctx.attrs().get_subgraph("else_branch"), args, ctx.node_name());
      if (a.size() != b.size()) {
        ctx.fail("the branches return " + std::to_string(a.size()) + " and " +
                 std::to_string(b.size()) + " values");
      }
      for (size_t i = 0; i < a.size(); ++i) {
        if (!types_compatible(a[i], b[i])) {
          ctx.fail("result " + std::to_string(i) + " is " + a[i].str() + " in then_branch but " +
                   b[i].str() + " in else_branch");
        }
      }
      return a;
    });

void run_cond(KernelContext& ctx, const SubRunner& then_branch, const SubRunner& else_branch) {
  const bool pred = ctx.input(0).item<bool>();
  std::vector<Tensor> args;
  for (int i = 1; i < ctx.num_inputs(); ++i) args.push_back(ctx.input(i));
  std::vector<Tensor> out = (pred ? then_branch : else_branch)(std::move(args));
  for (size_t i = 0; i < out.size(); ++i) ctx.set_output(static_cast<int>(i), std::move(out[i]));
}

// ---- while ------------------------------------------------------------------------------

KILN_REGISTER_OP(while)
    .variadic_input("operands")
    .variadic_outputs()
    .shape_fn([](const InferContext& ctx) {
      const int64_t num_vars = ctx.attrs().get_int("num_vars");
      if (num_vars < 0 || num_vars > ctx.num_inputs()) {
        ctx.fail("num_vars " + std::to_string(num_vars) + " is not in [0, " +
                 std::to_string(ctx.num_inputs()) + "]");
      }
      check_params(ctx, "cond", ctx.inputs());
      check_params(ctx, "body", ctx.inputs());
      std::vector<TensorType> c =
          infer_subgraph(ctx.attrs().get_subgraph("cond"), ctx.inputs(), ctx.node_name());
      if (c.size() != 1 || c[0].dtype != bool_ || !c[0].shape.empty())
        ctx.fail("cond must return one bool scalar");
      std::vector<TensorType> vars = slice(ctx.inputs(), 0, num_vars);
      std::vector<TensorType> b =
          infer_subgraph(ctx.attrs().get_subgraph("body"), ctx.inputs(), ctx.node_name());
      if (b.size() != vars.size()) {
        ctx.fail("body returns " + std::to_string(b.size()) + " values for " +
                 std::to_string(vars.size()) + " loop variables");
      }
      for (size_t i = 0; i < b.size(); ++i) {
        if (!types_compatible(b[i], vars[i])) {
          ctx.fail("loop variable " + std::to_string(i) + " is " + vars[i].str() +
                   " before the body and " + b[i].str() + " after it");
        }
      }
      return vars;
    });

void run_while(KernelContext& ctx, const SubRunner& cond, const SubRunner& body) {
  const int64_t num_vars = ctx.attrs().get_int("num_vars");
  const int64_t max_iterations = ctx.attrs().get_int("max_iterations", -1);
  std::vector<Tensor> vars, captured;
  for (int i = 0; i < ctx.num_inputs(); ++i)
    (i < num_vars ? vars : captured).push_back(ctx.input(i));
  for (int64_t step = 0; max_iterations < 0 || step < max_iterations; ++step) {
    std::vector<Tensor> args = vars;
    args.insert(args.end(), captured.begin(), captured.end());
    if (!cond(std::move(args)).at(0).item<bool>()) break;
    args = std::move(vars);
    args.insert(args.end(), captured.begin(), captured.end());
    vars = body(std::move(args));
    for (size_t i = 0; i < vars.size(); ++i)
      check_result(ctx, "loop variable", i, vars[i], ctx.output_type(static_cast<int>(i)), step);
  }
  for (size_t i = 0; i < vars.size(); ++i) ctx.set_output(static_cast<int>(i), std::move(vars[i]));
}

// ---- scan -------------------------------------------------------------------------------

KILN_REGISTER_OP(scan)
    .variadic_input("operands")
    .variadic_outputs()
    .shape_fn([](const InferContext& ctx) {
      const Attrs& a = ctx.attrs();
      const int64_t nc = a.get_int("num_carry"), nx = a.get_int("num_xs");
      const int64_t length = a.get_int("length");
      if (nc < 0 || nx < 0 || nc + nx > ctx.num_inputs())
        ctx.fail("num_carry and num_xs do not fit " + std::to_string(ctx.num_inputs()) + " inputs");
      if (length < 0) ctx.fail("length must be >= 0, got " + std::to_string(length));
      std::vector<TensorType> args = ctx.inputs();
      for (int64_t j = nc; j < nc + nx; ++j) {
        const TensorType& x = ctx.input(static_cast<int>(j));
        if (x.shape.empty() || (x.shape[0] != length && x.shape[0] != kUnknownDim)) {
          ctx.fail("xs " + std::to_string(j - nc) + " is " + x.str() +
                   ", but scan steps over a first dimension of length " + std::to_string(length));
        }
        args[j].shape.erase(args[j].shape.begin());
      }
      check_params(ctx, "body", args);
      std::vector<TensorType> r = infer_subgraph(a.get_subgraph("body"), args, ctx.node_name());
      if (static_cast<int64_t>(r.size()) < nc) {
        ctx.fail("body returns " + std::to_string(r.size()) + " values for " + std::to_string(nc) +
                 " carried values");
      }
      std::vector<TensorType> out = slice(ctx.inputs(), 0, nc);
      for (int64_t i = 0; i < nc; ++i) {
        if (!types_compatible(r[i], out[i])) {
          ctx.fail("carry " + std::to_string(i) + " is " + out[i].str() + " before the body and " +
                   r[i].str() + " after it");
        }
      }
      for (size_t i = nc; i < r.size(); ++i) {
        TensorType y = r[i];
        y.shape.insert(y.shape.begin(), length);
        out.push_back(y);
      }
      return out;
    });

void run_scan(KernelContext& ctx, const SubRunner& body) {
  const Attrs& a = ctx.attrs();
  const int64_t nc = a.get_int("num_carry"), nx = a.get_int("num_xs"), length = a.get_int("length");
  const bool reverse = a.get_bool("reverse", false);
  const int num_out = static_cast<int>(ctx.outputs().size());
  std::vector<Tensor> carry, captured;
  for (int64_t i = 0; i < nc; ++i) carry.push_back(ctx.input(static_cast<int>(i)));
  for (int i = static_cast<int>(nc + nx); i < ctx.num_inputs(); ++i)
    captured.push_back(ctx.input(i));
  std::vector<char*> ys;
  std::vector<size_t> row_bytes;
  for (int k = static_cast<int>(nc); k < num_out; ++k) {
    Tensor& y = ctx.allocate_output(k);
    ys.push_back(static_cast<char*>(y.raw_mutable_data()));
    row_bytes.push_back(length == 0 ? 0 : y.nbytes() / static_cast<size_t>(length));
  }
  for (int64_t s = 0; s < length; ++s) {
    const int64_t t = reverse ? length - 1 - s : s;
    std::vector<Tensor> args = std::move(carry);
    for (int64_t j = 0; j < nx; ++j)
      args.push_back(row_view(ctx.input(static_cast<int>(nc + j)), t));
    args.insert(args.end(), captured.begin(), captured.end());
    std::vector<Tensor> r = body(std::move(args));
    carry.assign(std::make_move_iterator(r.begin()), std::make_move_iterator(r.begin() + nc));
    for (int64_t i = 0; i < nc; ++i)
      check_result(ctx, "carry", i, carry[i], ctx.output_type(static_cast<int>(i)), t);
    for (size_t k = 0; k < ys.size(); ++k) {
      const Tensor& y = r[nc + k];
      TensorType want = ctx.output_type(static_cast<int>(nc + k));
      want.shape.erase(want.shape.begin());
      check_result(ctx, "output", k, y, want, t);
      std::memcpy(ys[k] + row_bytes[k] * t, y.raw_data(), row_bytes[k]);
    }
  }
  for (int64_t i = 0; i < nc; ++i) ctx.set_output(static_cast<int>(i), std::move(carry[i]));
}

// ---- reference kernels: interpret the sub-graphs -----------------------------------------

namespace {

SubRunner interpreted(const SubGraph& sub) {
  return [&sub](std::vector<Tensor>&& args) {
    FeedList feeds;
    for (size_t i = 0; i < args.size(); ++i) feeds.emplace_back(sub.params[i], std::move(args[i]));
    return sub.graph.run(feeds, sub.results);
  };
}

}  // namespace

KILN_REGISTER_KERNEL(cond).fn([](KernelContext& ctx) {
  run_cond(ctx, interpreted(ctx.attrs().get_subgraph("then_branch")),
           interpreted(ctx.attrs().get_subgraph("else_branch")));
});

KILN_REGISTER_KERNEL(while).fn([](KernelContext& ctx) {
  run_while(ctx, interpreted(ctx.attrs().get_subgraph("cond")),
            interpreted(ctx.attrs().get_subgraph("body")));
});

KILN_REGISTER_KERNEL(scan).fn([](KernelContext& ctx) {
  run_scan(ctx, interpreted(ctx.attrs().get_subgraph("body")));
});

}  // namespace kiln::ops
