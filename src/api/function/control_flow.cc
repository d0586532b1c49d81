// cond, while_loop, scan and fori_loop: run eagerly, or traced into sub-graphs held by one
// node; and the gradient rules of the ops "cond", "scan" and "while", which differentiate
// their sub-graphs.
#include "kiln/control_flow.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <memory>
#include <unordered_map>
#include <utility>

#include "kiln/autodiff.h"
#include "kiln/graph.h"
#include "kiln/op_registry.h"
#include "kiln/ops.h"
#include "ops/control_flow.h"
#include "src/core/tensor_impl.h"
#include "src/core/variable_capture.h"

namespace kiln {
namespace {

using detail::GraphImpl;
using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

[[noreturn]] void fail(const std::string& where, const std::string& message,
                       ErrorCode code = ErrorCode::kInvalidArgument) {
  throw Error(code, where + ": " + message);
}

TensorType type_of(const Tensor& t) { return {t.dtype(), t.shape()}; }

std::vector<TensorType> types_of(const std::vector<Tensor>& ts) {
  std::vector<TensorType> out;
  for (const Tensor& t : ts) out.push_back(type_of(t));
  return out;
}

bool same_value(const Tensor& a, const Tensor& b) {
  return a.impl()->graph == b.impl()->graph && a.impl()->node == b.impl()->node &&
         a.impl()->output == b.impl()->output;
}

// The graph a control-flow op records into: the one being recorded on this thread, else the
// graph of a symbolic operand; null when the op runs eagerly.
std::shared_ptr<GraphImpl> recording_graph(const std::vector<Tensor>& values) {
  if (const auto& g = detail::default_graph()) return g;
  for (const Tensor& v : values)
    if (v.defined() && v.is_symbolic()) return v.impl()->graph;
  return nullptr;
}

void check_defined(const std::string& where, const std::vector<Tensor>& values,
                   const std::string& what) {
  for (size_t i = 0; i < values.size(); ++i) {
    if (!values[i].defined()) fail(where, what + " " + std::to_string(i) + " is undefined");
  }
}

// ---- tracing ------------------------------------------------------------------------------

// A function traced into a sub-graph of `parent`.
struct Traced {
  std::shared_ptr<SubGraph> sub;
  size_t explicit_params = 0;
  std::vector<Tensor> captured;  // values of `parent`, one per param after the explicit ones
};

Traced trace(const std::string& where, const std::string& name,
             const std::shared_ptr<GraphImpl>& parent, const std::vector<TensorType>& params,
             const Fn& fn) {
  auto impl = std::make_shared<GraphImpl>(name);
  impl->parent = parent;
  struct Detach {  // the sub-graph must not keep its parent alive (the parent holds it)
    GraphImpl* g;
    ~Detach() {
      g->parent = nullptr;
      g->captures.clear();
    }
  } detach{impl.get()};
  Traced t;
  t.sub = std::make_shared<SubGraph>();
  t.sub->graph = Graph(impl);
  for (size_t i = 0; i < params.size(); ++i) {
    t.sub->params.push_back(
        t.sub->graph.placeholder(params[i].dtype, params[i].shape, "arg" + std::to_string(i)));
  }
  t.explicit_params = params.size();
  std::vector<Tensor> results;
  {
    auto guard = t.sub->graph.as_default();
    results = fn(t.sub->params);
  }
  for (size_t i = 0; i < results.size(); ++i) {
    Tensor& r = results[i];
    if (!r.defined())
      fail(where, name + " returned an undefined tensor as result " + std::to_string(i));
    if (!r.is_symbolic()) {
      r = t.sub->graph.constant(r, "result" + std::to_string(i));
    } else if (r.impl()->graph != impl) {
      if (!detail::encloses(r.impl()->graph.get(), impl.get())) {
        fail(where, name + " returned a value of graph '" + r.graph().name() +
                        "', which does not enclose it");
      }
      r = detail::capture(impl, r);
    }
  }
  t.sub->results = std::move(results);
  for (auto& [outer, placeholder] : impl->captures) {
    t.captured.push_back(outer);
    t.sub->params.push_back(placeholder);
  }
  return t;
}

// Gives every traced function the same captured params (the union of what each captured, in
// one order) and returns those values: the node's last inputs.
std::vector<Tensor> unify_captures(std::vector<Traced*> traced) {
  std::vector<Tensor> all;
  for (Traced* t : traced) {
    for (const Tensor& c : t->captured) {
      if (std::none_of(all.begin(), all.end(), [&](const Tensor& a) { return same_value(a, c); }))
        all.push_back(c);
    }
  }
  for (Traced* t : traced) {
    std::vector<Tensor> params(
        t->sub->params.begin(),
        t->sub->params.begin() + static_cast<std::ptrdiff_t>(t->explicit_params));
    for (const Tensor& c : all) {
      Tensor p;
      for (size_t k = 0; k < t->captured.size(); ++k)
        if (same_value(t->captured[k], c)) p = t->sub->params[t->explicit_params + k];
      if (!p.defined()) p = t->sub->graph.placeholder(c.dtype(), c.shape(), "unused_capture");
      params.push_back(p);
    }
    t->sub->params = std::move(params);
    t->captured = all;
  }
  return all;
}

// ---- variables read and assigned inside traced bodies -------------------------------------
// Inside kiln::function a variable assigned in a branch or loop body becomes a value the node
// carries: a loop carries it from step to step (its value before the loop is the initial one)
// and gives it back as an output, and a cond gives it as an output of both branches (the value
// before the cond from a branch that leaves it alone). The enclosing trace then assigns that
// output. The bodies are traced once to find the variables they assign and, if any, again with
// those threaded through.

// The capture installed while a body is traced: reads of a threaded variable give its param
// (or its latest assignment in this body), others go to the enclosing capture; assignments are
// recorded.
class BodyCapture : public detail::VariableCapture {
 public:
  BodyCapture(detail::VariableCapture* outer, const std::vector<Variable>& threaded,
              const std::vector<Tensor>& params)
      : outer_(outer), threaded_(threaded), params_(params) {}

  const Tensor& read(const Variable& v) override {
    for (auto& [var, value] : assigned_)
      if (var == v) return value;
    for (size_t k = 0; k < threaded_.size() && k < params_.size(); ++k)
      if (threaded_[k] == v) return params_[k];
    outer_reads_.push_back(outer_->read(v));  // a value of an enclosing graph: captured on use
    return outer_reads_.back();
  }

  void assign(const Variable& v, const Tensor& value) override {
    for (auto& [var, current] : assigned_) {
      if (var == v) {
        current = value;
        return;
      }
    }
    assigned_.emplace_back(v, value);
  }

  const std::vector<std::pair<Variable, Tensor>>& assigned() const { return assigned_; }

  // Each threaded variable's value at the end of the body.
  std::vector<Tensor> values() {
    std::vector<Tensor> out;
    for (const Variable& v : threaded_) out.push_back(read(v));
    return out;
  }

 private:
  detail::VariableCapture* outer_;
  const std::vector<Variable>& threaded_;
  std::vector<Tensor> params_;  // per threaded variable (loops); empty for cond's branches
  std::vector<std::pair<Variable, Tensor>> assigned_;
  std::deque<Tensor> outer_reads_;  // stable addresses: read returns references
};

// The variables a node threads through, found by tracing its bodies. `outer` is the capture of
// the trace the node is recorded in (null outside kiln::function: nothing is threaded, and an
// assignment of a symbolic value fails as it does anywhere else).
struct Threading {
  detail::VariableCapture* outer = detail::variable_capture();
  std::vector<Variable> threaded;  // the second trace's
  std::vector<Variable> found;     // assigned by the bodies traced so far

  // Runs `body` with a BodyCapture for `params` (the threaded variables' params, or none) and
  // returns the threaded variables' values after it, appended to what `body` returns.
  // `no_assign` (a while_loop's condition): an assignment is an error naming it.
  std::vector<Tensor> run(const std::vector<Tensor>& params,
                          const std::function<std::vector<Tensor>()>& body,
                          const std::string& no_assign = "") {
    if (!outer) return body();
    BodyCapture capture(outer, threaded, params);
    std::vector<Tensor> out;
    {
      detail::VariableCaptureScope scope(&capture);
      out = body();
    }
    if (!no_assign.empty()) {
      if (!capture.assigned().empty()) {
        fail(no_assign, "assigns variable '" + capture.assigned()[0].first.name() +
                            "'; a loop's condition may read variables but not assign them "
                            "(assign in its body)");
      }
      return out;
    }
    for (const auto& [v, value] : capture.assigned())
      if (std::find(found.begin(), found.end(), v) == found.end()) found.push_back(v);
    std::vector<Tensor> values = capture.values();
    out.insert(out.end(), values.begin(), values.end());
    return out;
  }
  // Whether the bodies assigned variables that are not threaded yet: trace them again.
  bool retrace() {
    if (found.size() == threaded.size()) return false;
    threaded = found;
    return true;
  }
  // The threaded variables' values where the node is recorded.
  std::vector<Tensor> initial() const {
    std::vector<Tensor> out;
    for (const Variable& v : threaded) out.push_back(v.value());
    return out;
  }
  std::vector<TensorType> types() const {
    std::vector<TensorType> out;
    for (const Variable& v : threaded) out.push_back({v.dtype(), v.shape()});
    return out;
  }
  // Assigns the node's outputs for the threaded variables.
  void assign(const std::vector<Tensor>& values) const {
    for (size_t k = 0; k < threaded.size(); ++k) Variable(threaded[k]).assign(values.at(k));
  }
};

ValueRef ref_of(const Tensor& t) { return {t.impl()->node, t.impl()->output}; }

using ops::inline_subgraph;
using ops::needed_for;
using ops::replay;

std::vector<Tensor> concat(std::vector<Tensor> a, const std::vector<Tensor>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::vector<TensorType> concat_types(std::vector<TensorType> a, const std::vector<TensorType>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::vector<Tensor> part(const std::vector<Tensor>& v, size_t begin, size_t end) {
  return {v.begin() + static_cast<std::ptrdiff_t>(begin),
          v.begin() + static_cast<std::ptrdiff_t>(end)};
}

void check_carried(const std::string& where, const char* what,
                   const std::vector<TensorType>& before, const std::vector<Tensor>& after,
                   const char* fn_name) {
  if (after.size() != before.size()) {
    fail(where, std::string(fn_name) + " returns " + std::to_string(after.size()) + " " + what +
                    "s for " + std::to_string(before.size()));
  }
  for (size_t i = 0; i < before.size(); ++i) {
    if (!after[i].defined())
      fail(where,
           std::string(fn_name) + " returned an undefined " + what + " " + std::to_string(i));
    if (!ops::types_compatible(before[i], type_of(after[i]))) {
      fail(where, std::string(what) + " " + std::to_string(i) + " is " + before[i].str() +
                      " before the " + fn_name + " and " + type_of(after[i]).str() +
                      " after it: loop-carried values keep their dtype and shape");
    }
  }
}

void check_pred(const std::string& where, const Tensor& pred, const char* what) {
  if (!pred.defined()) fail(where, std::string(what) + " is undefined");
  if (pred.dtype() != bool_ || pred.rank() != 0) {
    fail(where, std::string(what) + " must be a bool scalar, got " + type_of(pred).str());
  }
}

}  // namespace

// ---- cond ---------------------------------------------------------------------------------

std::vector<Tensor> cond(const Tensor& pred, const BranchFn& true_fn, const BranchFn& false_fn,
                         const std::vector<Tensor>& operands) {
  const std::string where = "cond";
  if (!true_fn || !false_fn) fail(where, "a branch function is empty");
  check_pred(where, pred, "the predicate");
  check_defined(where, operands, "operand");
  auto parent = recording_graph(concat({pred}, operands));
  if (!parent) return pred.item<bool>() ? true_fn(operands) : false_fn(operands);

  const std::vector<TensorType> types = types_of(operands);
  Threading vars;
  Traced a, b;
  do {
    a = trace(where, "true_fn", parent, types,
              [&](const std::vector<Tensor>& x) { return vars.run({}, [&] { return true_fn(x); }); });
    b = trace(where, "false_fn", parent, types, [&](const std::vector<Tensor>& x) {
      return vars.run({}, [&] { return false_fn(x); });
    });
  } while (vars.retrace());
  const auto& ra = a.sub->results;
  const auto& rb = b.sub->results;
  if (ra.size() != rb.size()) {
    fail(where, "true_fn returns " + std::to_string(ra.size()) + " values, false_fn " +
                    std::to_string(rb.size()));
  }
  for (size_t i = 0; i < ra.size(); ++i) {
    if (!ops::types_compatible(type_of(ra[i]), type_of(rb[i]))) {
      fail(where, "result " + std::to_string(i) + " is " + type_of(ra[i]).str() +
                      " from true_fn but " + type_of(rb[i]).str() +
                      " from false_fn: both branches return the same dtypes and shapes");
    }
  }
  std::vector<Tensor> captured = unify_captures({&a, &b});
  Attrs attrs;
  attrs.set("then_branch", std::shared_ptr<const SubGraph>(a.sub));
  attrs.set("else_branch", std::shared_ptr<const SubGraph>(b.sub));
  std::vector<Tensor> out = call_op("cond", concat(concat({pred}, operands), captured), attrs);
  const size_t n = out.size() - vars.threaded.size();
  vars.assign(part(out, n, out.size()));
  return part(out, 0, n);
}

// ---- while_loop ---------------------------------------------------------------------------

std::vector<Tensor> while_loop(const LoopCondFn& cond_fn, const BranchFn& body_fn,
                               const std::vector<Tensor>& loop_vars, const WhileOptions& options) {
  const std::string where = "while_loop '" + options.name + "'";
  if (!cond_fn || !body_fn) fail(where, "cond_fn or body_fn is empty");
  check_defined(where, loop_vars, "loop variable");
  if (options.maximum_iterations && *options.maximum_iterations < 0) {
    fail(where,
         "maximum_iterations must be >= 0, got " + std::to_string(*options.maximum_iterations));
  }
  const std::vector<TensorType> types = types_of(loop_vars);
  auto parent = recording_graph(loop_vars);
  if (!parent) {
    std::vector<Tensor> vars = loop_vars;
    for (int64_t i = 0; !options.maximum_iterations || i < *options.maximum_iterations; ++i) {
      Tensor c = cond_fn(vars);
      check_pred(where, c, "cond_fn's result");
      if (c.is_symbolic())
        fail(where, "cond_fn returned a symbolic value for concrete loop variables");
      if (!c.item<bool>()) break;
      std::vector<Tensor> next = body_fn(vars);
      check_carried(where, "loop variable", types, next, "body");
      vars = std::move(next);
    }
    return vars;
  }
  const size_t n = loop_vars.size();
  Threading vars;
  Traced c, b;
  do {
    const std::vector<TensorType> all = concat_types(types, vars.types());
    c = trace(where, options.name + "_cond", parent, all, [&](const std::vector<Tensor>& v) {
      return vars.run(
          part(v, n, v.size()), [&] { return std::vector<Tensor>{cond_fn(part(v, 0, n))}; },
          where + ": cond_fn");
    });
    check_pred(where, c.sub->results.at(0), "cond_fn's result");
    b = trace(where, options.name + "_body", parent, all, [&](const std::vector<Tensor>& v) {
      return vars.run(part(v, n, v.size()), [&] {
        std::vector<Tensor> next = body_fn(part(v, 0, n));
        check_carried(where, "loop variable", types, next, "body");
        return next;
      });
    });
  } while (vars.retrace());
  std::vector<Tensor> captured = unify_captures({&c, &b});
  Attrs attrs;
  attrs.set("cond", std::shared_ptr<const SubGraph>(c.sub));
  attrs.set("body", std::shared_ptr<const SubGraph>(b.sub));
  attrs.set("num_vars", static_cast<int64_t>(n + vars.threaded.size()));
  if (options.maximum_iterations) attrs.set("max_iterations", *options.maximum_iterations);
  std::vector<Tensor> out =
      call_op("while", concat(concat(loop_vars, vars.initial()), captured), attrs);
  vars.assign(part(out, n, out.size()));
  return part(out, 0, n);
}

// ---- scan ---------------------------------------------------------------------------------

namespace {

int64_t scan_length(const std::string& where, const std::vector<Tensor>& xs,
                    const ScanOptions& options) {
  std::optional<int64_t> length = options.length;
  for (size_t j = 0; j < xs.size(); ++j) {
    const Shape& s = xs[j].shape();
    if (s.empty())
      fail(where, "xs " + std::to_string(j) + " is a scalar; scan steps over xs' first dimension");
    if (s[0] == kUnknownDim) {
      fail(where, "xs " + std::to_string(j) + " is " + type_of(xs[j]).str() +
                      ": the number of steps (its first dimension) must be known while recording");
    }
    if (length && *length != s[0]) {
      fail(where, "xs " + std::to_string(j) + " has " + std::to_string(s[0]) + " rows, but " +
                      (options.length && j == 0 ? "length is " : "earlier xs have ") +
                      std::to_string(*length));
    }
    length = s[0];
  }
  if (!length) fail(where, "with no xs, give ScanOptions::length");
  if (*length < 0) fail(where, "length must be >= 0, got " + std::to_string(*length));
  return *length;
}

// Stacks per-step values (one vector per step, each of `types`) along a new first dimension.
std::vector<Tensor> stack_steps(const std::vector<std::vector<Tensor>>& steps,
                                const std::vector<TensorType>& types, bool reverse) {
  const int64_t length = static_cast<int64_t>(steps.size());
  std::vector<Tensor> out;
  for (size_t k = 0; k < types.size(); ++k) {
    Shape shape = types[k].shape;
    shape.insert(shape.begin(), length);
    Tensor y = Tensor::empty(types[k].dtype, shape);
    const size_t row_bytes = length == 0 ? 0 : y.nbytes() / static_cast<size_t>(length);
    for (int64_t s = 0; s < length; ++s) {
      const int64_t t = reverse ? length - 1 - s : s;
      std::memcpy(static_cast<char*>(y.raw_mutable_data()) + row_bytes * t, steps[s][k].raw_data(),
                  row_bytes);
    }
    out.push_back(std::move(y));
  }
  return out;
}

}  // namespace

ScanResult scan(const ScanFn& fn, const std::vector<Tensor>& init, const std::vector<Tensor>& xs,
                const ScanOptions& options) {
  const std::string where = "scan '" + options.name + "'";
  if (!fn) fail(where, "the step function is empty");
  check_defined(where, init, "carry");
  check_defined(where, xs, "xs");
  if (options.unroll < 1) fail(where, "unroll must be >= 1, got " + std::to_string(options.unroll));
  const int64_t length = scan_length(where, xs, options);
  const std::vector<TensorType> carry_types = types_of(init);
  std::vector<TensorType> params = carry_types;
  for (const Tensor& x : xs)
    params.push_back({x.dtype(), Shape(x.shape().begin() + 1, x.shape().end())});
  const size_t nc = init.size(), nx = xs.size();
  Threading vars;
  // args: the carry, the threaded variables, this step's rows of xs.
  auto step = [&](const std::vector<Tensor>& args) {
    const size_t nv = vars.threaded.size();
    std::vector<Tensor> ys;
    std::vector<Tensor> carry = vars.run(part(args, nc, nc + nv), [&] {
      auto [c, y] = fn(part(args, 0, nc), part(args, nc + nv, nc + nv + nx));
      check_carried(where, "carry", carry_types, c, "step function");
      check_defined(where, y, "output");
      ys = std::move(y);
      return c;
    });
    return concat(std::move(carry), ys);
  };

  auto parent = recording_graph(concat(init, xs));
  if (!parent && length > 0) {
    std::vector<Tensor> carry = init;
    std::vector<std::vector<Tensor>> outs;
    std::vector<TensorType> y_types;
    for (int64_t s = 0; s < length; ++s) {
      const int64_t t = options.reverse ? length - 1 - s : s;
      std::vector<Tensor> args = carry;
      for (const Tensor& x : xs) args.push_back(ops::row_view(x, t));
      std::vector<Tensor> r = step(args);
      carry = part(r, 0, nc);
      std::vector<Tensor> ys = part(r, nc, r.size());
      if (s == 0) {
        y_types = types_of(ys);
      } else if (types_of(ys) != y_types) {
        fail(where, "the step function's outputs changed type at step " + std::to_string(t));
      }
      outs.push_back(std::move(ys));
    }
    return {carry, stack_steps(outs, y_types, options.reverse)};
  }

  // Traced (eagerly with no steps too: the trace gives the ys' types).
  std::shared_ptr<GraphImpl> eager_graph;
  if (!parent) parent = eager_graph = std::make_shared<GraphImpl>("scan_types");
  Traced b;
  do {
    std::vector<TensorType> all = concat_types(carry_types, vars.types());
    all.insert(all.end(), params.begin() + static_cast<std::ptrdiff_t>(nc), params.end());
    b = trace(where, options.name + "_body", parent, all, step);
  } while (vars.retrace());
  const size_t nv = vars.threaded.size();
  if (eager_graph) {
    ScanResult out{init, {}};
    for (size_t k = nc + nv; k < b.sub->results.size(); ++k) {
      Shape shape = b.sub->results[k].shape();
      if (std::count(shape.begin(), shape.end(), kUnknownDim))
        fail(where, "an output's shape depends on the steps, and there are none");
      shape.insert(shape.begin(), 0);
      out.ys.push_back(Tensor::empty(b.sub->results[k].dtype(), shape));
    }
    return out;
  }
  std::vector<Tensor> captured = unify_captures({&b});
  Attrs attrs;
  attrs.set("body", std::shared_ptr<const SubGraph>(b.sub));
  attrs.set("num_carry", static_cast<int64_t>(nc + nv));
  attrs.set("num_xs", static_cast<int64_t>(nx));
  attrs.set("length", length);
  attrs.set("reverse", options.reverse);
  attrs.set("unroll", options.unroll);
  attrs.set("remat", options.remat);
  std::vector<Tensor> out =
      call_op("scan", concat(concat(concat(init, vars.initial()), xs), captured), attrs);
  vars.assign(part(out, nc, nc + nv));
  return {part(out, 0, nc), part(out, nc + nv, out.size())};
}

// ---- fori_loop ----------------------------------------------------------------------------

std::vector<Tensor> fori_loop(int64_t lower, int64_t upper, const ForiFn& body,
                              const std::vector<Tensor>& init, const ScanOptions& options) {
  if (!body) fail("fori_loop", "the body is empty");
  ScanOptions o = options;
  if (o.name == "scan") o.name = "fori_loop";
  const int64_t length = std::max<int64_t>(upper - lower, 0);
  if (!recording_graph(init)) {
    const std::string where = "fori_loop '" + o.name + "'";
    check_defined(where, init, "loop variable");
    const std::vector<TensorType> types = types_of(init);
    std::vector<Tensor> vars = init;
    for (int64_t i = lower; i < upper; ++i) {
      std::vector<Tensor> next = body(Tensor::scalar<int64_t>(i), vars);
      check_carried(where, "loop variable", types, next, "body");
      vars = std::move(next);
    }
    return vars;
  }
  Tensor steps = arange(static_cast<double>(lower), static_cast<double>(lower + length), 1, i64);
  o.length.reset();
  ScanResult r = scan(
      [&](const std::vector<Tensor>& carry, const std::vector<Tensor>& x) {
        return std::make_pair(body(x[0], carry), std::vector<Tensor>{});
      },
      init, {steps}, o);
  return r.carry;
}

// ---- gradients ----------------------------------------------------------------------------

namespace {

std::vector<Tensor> cond_gradient(const GradContext& g) {
  const SubGraph& then_branch = g.attrs().get_subgraph("then_branch");
  const SubGraph& else_branch = g.attrs().get_subgraph("else_branch");
  const std::vector<Tensor> operands = part(g.inputs, 1, g.inputs.size());
  std::vector<size_t> wrt, with_grad;  // floating operands; outputs with a gradient
  for (size_t i = 0; i < operands.size(); ++i)
    if (is_floating(operands[i].dtype())) wrt.push_back(i);
  for (size_t k = 0; k < g.output_grads.size(); ++k)
    if (g.output_grads[k].defined() && is_floating(g.outputs[k].dtype())) with_grad.push_back(k);
  std::vector<Tensor> out(g.inputs.size());
  if (wrt.empty() || with_grad.empty()) return out;
  std::vector<Tensor> dys;
  for (size_t k : with_grad) dys.push_back(g.output_grads[k]);
  const size_t n = operands.size();
  auto branch_gradient = [&](const SubGraph& branch) {
    return [&branch, &wrt, &with_grad, n](const std::vector<Tensor>& args) {
      std::vector<Tensor> ops = part(args, 0, n), gys = part(args, n, args.size());
      std::vector<Tensor> results = inline_subgraph(branch, ops);
      std::vector<Tensor> ys, xs;
      for (size_t k : with_grad) ys.push_back(results[k]);
      for (size_t i : wrt) xs.push_back(ops[i]);
      return gradients(ys, xs, gys);
    };
  };
  std::vector<Tensor> grads = cond(g.inputs[0], branch_gradient(then_branch),
                                   branch_gradient(else_branch), concat(operands, dys));
  for (size_t j = 0; j < wrt.size(); ++j) out[1 + wrt[j]] = grads[j];
  return out;
}

// The gradient of scan: a reverse scan. The joint step J(c, x, caps, dc', dy) -> (dc, dx, dcaps)
// (the body inlined, then differentiated) is split by what each node depends on: nodes of the
// forward alone that vary per step are computed by an augmented forward scan, which saves the
// values the backward part reads (its residuals) as extra stacked outputs; the backward scan
// reads them instead of recomputing them. With remat, only the carries are saved and the
// backward scan recomputes the forward. The augmented scan repeats the original scan's work with
// more outputs: it names that scan's body ("augments"), and the compiler's control-flow pass
// lets the original's users read it instead, so a compiled step runs the forward once.
std::vector<Tensor> scan_gradient(const GradContext& g) {
  const Attrs& a = g.attrs();
  const SubGraph& body = a.get_subgraph("body");
  const size_t nc = a.get_int("num_carry"), nx = a.get_int("num_xs");
  const size_t ni = g.inputs.size(), ny = g.outputs.size() - nc;
  const bool reverse = a.get_bool("reverse", false), remat = a.get_bool("remat", false);
  std::vector<Tensor> out(ni);

  std::vector<size_t> wrt;  // floating inputs (carries, xs, captures), by input index
  for (size_t i = 0; i < ni; ++i)
    if (is_floating(g.inputs[i].dtype())) wrt.push_back(i);
  std::vector<size_t> float_carry, with_grad;  // carries that carry gradient; ys with one
  for (size_t i = 0; i < nc; ++i)
    if (is_floating(g.inputs[i].dtype())) float_carry.push_back(i);
  for (size_t k = 0; k < ny; ++k)
    if (g.output_grads[nc + k].defined() && is_floating(g.outputs[nc + k].dtype()))
      with_grad.push_back(k);
  bool any_seed = !with_grad.empty();
  for (size_t i : float_carry) any_seed |= g.output_grads[i].defined();
  if (wrt.empty() || !any_seed) return out;

  // The joint step, traced on its own.
  std::vector<TensorType> jparams;
  for (size_t i = 0; i < ni; ++i) {
    TensorType t = type_of(g.inputs[i]);
    if (i >= nc && i < nc + nx) t.shape.erase(t.shape.begin());
    jparams.push_back(t);
  }
  for (size_t i : float_carry) jparams.push_back(type_of(g.inputs[i]));
  for (size_t k : with_grad) {
    TensorType t = type_of(g.outputs[nc + k]);
    t.shape.erase(t.shape.begin());
    jparams.push_back(t);
  }
  std::vector<Tensor> primal_results;  // the body's results inside the joint step
  Traced joint =
      trace("scan gradient", "scan_joint", nullptr, jparams, [&](const std::vector<Tensor>& p) {
        std::vector<Tensor> results = inline_subgraph(body, part(p, 0, ni));
        primal_results = results;
        std::vector<Tensor> ys, xs, dys;
        for (size_t j = 0; j < float_carry.size(); ++j) {
          ys.push_back(results[float_carry[j]]);
          dys.push_back(p[ni + j]);
        }
        for (size_t j = 0; j < with_grad.size(); ++j) {
          ys.push_back(results[nc + with_grad[j]]);
          dys.push_back(p[ni + float_carry.size() + j]);
        }
        for (size_t i : wrt) xs.push_back(p[i]);
        return gradients(ys, xs, dys);
      });
  const SubGraph& J = *joint.sub;
  std::vector<detail::Node> jn;
  {
    std::lock_guard lock(J.graph.impl()->mu);
    jn = J.graph.impl()->nodes;
  }
  // 0: loop-invariant (constants, captures); 1: varies per step, forward only; 2: backward.
  std::vector<int> kind(jn.size(), 0);
  for (size_t i = 0; i < J.params.size(); ++i) {
    const int id = J.params[i].impl()->node;
    kind[id] = i < nc + nx ? 1 : i < ni ? 0 : 2;
  }
  for (size_t id = 0; id < jn.size(); ++id)
    for (const ValueRef& in : jn[id].inputs) kind[id] = std::max(kind[id], kind[in.node]);

  // Residuals: step-varying forward values the backward part (or a result) reads. With remat,
  // the carries and xs only.
  std::vector<ValueRef> residuals;
  auto add_residual = [&](ValueRef v) {
    if (std::find(residuals.begin(), residuals.end(), v) == residuals.end()) residuals.push_back(v);
  };
  if (remat) {
    for (size_t i = 0; i < nc + nx; ++i) add_residual(ref_of(J.params[i]));
  } else {
    for (size_t id = 0; id < jn.size(); ++id) {
      if (kind[id] != 2) continue;
      for (const ValueRef& in : jn[id].inputs)
        if (kind[in.node] == 1) add_residual(in);
    }
    for (const Tensor& r : J.results)
      if (kind[r.impl()->node] == 1) add_residual(ref_of(r));
  }
  // A residual that is a row of the xs is read from the xs; the others are saved.
  std::vector<ValueRef> saved;
  std::unordered_map<int, size_t> x_param;  // joint node id -> xs index
  for (size_t j = 0; j < nx; ++j) x_param[J.params[nc + j].impl()->node] = j;
  for (const ValueRef& r : residuals)
    if (!x_param.count(r.node)) saved.push_back(r);

  // The augmented forward scan: the body's results, then the saved residuals.
  std::vector<ValueRef> fwd_roots;
  for (const Tensor& r : primal_results) fwd_roots.push_back(ref_of(r));
  fwd_roots.insert(fwd_roots.end(), saved.begin(), saved.end());
  std::vector<bool> fwd_needed = needed_for(J, fwd_roots);
  const std::vector<TensorType> fparams(jparams.begin(),
                                        jparams.begin() + static_cast<std::ptrdiff_t>(ni));
  Traced fwd = trace("scan gradient", body.graph.name() + "_with_residuals",
                     detail::default_graph(), fparams, [&](const std::vector<Tensor>& p) {
                       std::vector<std::vector<Tensor>> values(jn.size());
                       for (size_t i = 0; i < ni; ++i) values[J.params[i].impl()->node] = {p[i]};
                       replay(J, values, &fwd_needed);
                       std::vector<Tensor> results;
                       for (const ValueRef& r : fwd_roots)
                         results.push_back(values[r.node].at(r.output));
                       return results;
                     });
  Attrs fa = a;
  fa.set("body", std::shared_ptr<const SubGraph>(fwd.sub));
  fa.set("augments", a.values().at("body"));
  std::vector<Tensor> forward = call_op("scan", g.inputs, fa);
  std::vector<Tensor> stacks = part(forward, nc + ny, forward.size());

  // The backward scan: carries (dc for the floating carries, the captures' summed gradients),
  // xs (saved residuals, xs read as residuals, dys), stepping the other way.
  std::vector<size_t> float_caps;
  for (size_t i : wrt)
    if (i >= nc + nx) float_caps.push_back(i);
  std::vector<Tensor> init;
  for (size_t i : float_carry)
    init.push_back(g.output_grads[i].defined() ? g.output_grads[i] : zeros_like(g.inputs[i]));
  for (size_t i : float_caps) init.push_back(zeros_like(g.inputs[i]));
  std::vector<Tensor> bxs = stacks;
  std::vector<size_t> x_residuals;  // xs index per x residual
  for (const ValueRef& r : residuals) {
    if (auto it = x_param.find(r.node); it != x_param.end()) {
      x_residuals.push_back(it->second);
      bxs.push_back(g.inputs[nc + it->second]);
    }
  }
  for (size_t k : with_grad) bxs.push_back(g.output_grads[nc + k]);

  std::vector<ValueRef> bwd_roots;
  for (const Tensor& r : J.results) bwd_roots.push_back(ref_of(r));
  // Replayed in the backward step: everything the results need, except (unless remat) the
  // step-varying forward nodes, whose values the backward part reads from the residuals.
  std::vector<bool> bwd_want = needed_for(J, bwd_roots);
  for (size_t id = 0; id < jn.size(); ++id)
    if (!remat && kind[id] == 1) bwd_want[id] = false;
  const size_t nfc = float_carry.size();
  ScanOptions bo;
  bo.reverse = !reverse;
  bo.unroll = a.get_int("unroll", 1);
  bo.length = a.get_int("length");  // a scan with no outputs and no residuals has no xs
  bo.name = "scan_gradient";
  ScanResult back = scan(
      [&](const std::vector<Tensor>& carry, const std::vector<Tensor>& x) {
        std::vector<std::vector<Tensor>> values(jn.size());
        size_t k = 0;
        for (const ValueRef& r : saved) {
          values[r.node].resize(jn[r.node].outputs.size());
          values[r.node][r.output] = x[k++];
        }
        for (size_t j : x_residuals) values[J.params[nc + j].impl()->node] = {x[k++]};
        for (size_t i = nc + nx; i < ni; ++i) values[J.params[i].impl()->node] = {g.inputs[i]};
        for (size_t j = 0; j < nfc; ++j) values[J.params[ni + j].impl()->node] = {carry[j]};
        for (size_t j = 0; j < with_grad.size(); ++j)
          values[J.params[ni + nfc + j].impl()->node] = {x[k++]};
        replay(J, values, &bwd_want);
        std::vector<Tensor> grads;
        for (const Tensor& r : J.results)
          grads.push_back(values[r.impl()->node].at(r.impl()->output));
        // grads: one per wrt input, in order.
        std::vector<Tensor> next, dx;
        size_t w = 0;
        std::vector<Tensor> by_input(ni);
        for (size_t i : wrt) by_input[i] = grads[w++];
        for (size_t i : float_carry) next.push_back(by_input[i]);
        for (size_t c = 0; c < float_caps.size(); ++c)
          next.push_back(add(carry[nfc + c], by_input[float_caps[c]]));
        for (size_t i : wrt)
          if (i >= nc && i < nc + nx) dx.push_back(by_input[i]);
        return std::make_pair(next, dx);
      },
      init, bxs, bo);
  for (size_t j = 0; j < nfc; ++j) out[float_carry[j]] = back.carry[j];
  for (size_t c = 0; c < float_caps.size(); ++c) out[float_caps[c]] = back.carry[nfc + c];
  size_t d = 0;
  for (size_t i : wrt)
    if (i >= nc && i < nc + nx) out[i] = back.ys[d++];
  return out;
}

// The gradient of a while loop with a maximum trip count: the same loop as a scan of that many
// steps whose body updates the variables only while cond holds (a cond inside the scan, so
// the steps after the loop ended cost one cond evaluation each), differentiated as a scan.
std::vector<Tensor> while_gradient(const GradContext& g) {
  if (!g.attrs().has("max_iterations")) {
    throw Error(ErrorCode::kUnimplemented,
                "gradients: while_loop node '" + g.node.name +
                    "' has no maximum_iterations, so it is not differentiable (reverse mode needs "
                    "a bound on the steps to save); give WhileOptions::maximum_iterations, or use "
                    "scan or fori_loop");
  }
  const SubGraph& cond_sub = g.attrs().get_subgraph("cond");
  const SubGraph& body_sub = g.attrs().get_subgraph("body");
  const size_t nv = g.attrs().get_int("num_vars");
  const std::vector<Tensor> vars = part(g.inputs, 0, nv),
                            caps = part(g.inputs, nv, g.inputs.size());
  std::vector<Tensor> out(g.inputs.size());
  std::vector<Tensor> ys, dys, xs;
  std::vector<size_t> wrt, with_grad;  // floating inputs; loop variables with a gradient
  for (size_t k = 0; k < nv; ++k) {
    if (g.output_grads[k].defined() && is_floating(g.outputs[k].dtype())) {
      with_grad.push_back(k);
      dys.push_back(g.output_grads[k]);
    }
  }
  for (size_t i = 0; i < g.inputs.size(); ++i)
    if (is_floating(g.inputs[i].dtype())) wrt.push_back(i);
  if (dys.empty() || wrt.empty()) return out;

  ScanOptions o;
  o.length = g.attrs().get_int("max_iterations");
  o.name = "while_as_scan";
  ScanResult r = scan(
      [&](const std::vector<Tensor>& carry, const std::vector<Tensor>&) {
        std::vector<Tensor> v = part(carry, 0, nv);
        Tensor go = logical_and(carry[nv], inline_subgraph(cond_sub, concat(v, caps)).at(0));
        std::vector<Tensor> next = cond(
            go,
            [&](const std::vector<Tensor>& ops) {
              return inline_subgraph(body_sub, concat(ops, caps));
            },
            [](const std::vector<Tensor>& ops) { return ops; }, v);
        next.push_back(go);
        return std::make_pair(next, std::vector<Tensor>{});
      },
      concat(vars, {Tensor::scalar(true)}), {}, o);
  for (size_t k : with_grad) ys.push_back(r.carry[k]);
  for (size_t i : wrt) xs.push_back(g.inputs[i]);
  std::vector<Tensor> grads = gradients(ys, xs, dys);
  for (size_t j = 0; j < wrt.size(); ++j) out[wrt[j]] = grads[j];
  return out;
}

}  // namespace

KILN_REGISTER_GRADIENT(cond, cond_gradient);
KILN_REGISTER_GRADIENT(scan, scan_gradient);
KILN_REGISTER_GRADIENT(while, while_gradient);

}  // namespace kiln
