// Scans unrolled, fully or by their unroll factor (compiler/passes/unroll.h).
#include "compiler/passes/unroll.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/ops.h"
#include "ops/control_flow.h"

namespace kiln::compiler {
namespace {

using Ts = std::vector<Tensor>;

bool fully_known(const TensorType& t) {
  for (int64_t d : t.shape)
    if (d < 0) return false;
  return true;
}

TensorType type_of(const Tensor& t) { return {t.dtype(), t.shape()}; }

// Rows [begin, end) of x's first dimension (x itself when that is all of them).
Tensor rows(const Tensor& x, int64_t begin, int64_t end) {
  if (begin == 0 && end == x.shape()[0]) return x;
  Axes start(x.shape().size(), 0), limit(x.shape().begin(), x.shape().end());
  start[0] = begin;
  limit[0] = end;
  return slice(x, std::move(start), std::move(limit));
}

Tensor row(const Tensor& x, int64_t t) { return squeeze(rows(x, t, t + 1), {0}); }

// The rows stacked along a new first dimension.
Tensor stack_rows(const Ts& rs) {
  Ts expanded;
  for (const Tensor& r : rs) expanded.push_back(expand_dims(r, 0));
  return expanded.size() == 1 ? expanded[0] : concatenate(expanded, 0);
}

// A scan's inputs and body, split up.
struct Scan {
  const SubGraph* body;
  int64_t nc, nx, length;
  bool reverse;
};

// Steps [begin, end) of the scan inlined into the graph being recorded, in the scan's order,
// from `carry`, reading row t of each xs. Returns the carry after them and, per output, its
// rows in time order.
std::pair<Ts, std::vector<Ts>> inline_steps(const Scan& s, Ts carry, const Ts& xs,
                                            const Ts& captures, int64_t begin, int64_t end) {
  const size_t ny = s.body->results.size() - static_cast<size_t>(s.nc);
  std::vector<Ts> ys(ny, Ts(static_cast<size_t>(end - begin)));
  for (int64_t i = 0; i < end - begin; ++i) {
    const int64_t t = s.reverse ? end - 1 - i : begin + i;
    Ts args = std::move(carry);
    for (const Tensor& x : xs) args.push_back(row(x, t));
    args.insert(args.end(), captures.begin(), captures.end());
    Ts r = ops::inline_subgraph(*s.body, args);
    carry.assign(r.begin(), r.begin() + s.nc);
    for (size_t k = 0; k < ny; ++k) ys[k][static_cast<size_t>(t - begin)] = r[s.nc + k];
  }
  return {std::move(carry), std::move(ys)};
}

// A body running `k` steps of s's body: params carry, xs blocks [k, ...] and captures, as the
// original's; results the carry and each output's k rows.
std::shared_ptr<const SubGraph> unrolled_body(const Scan& s, int64_t k, const std::string& name) {
  auto sub = std::make_shared<SubGraph>();
  sub->graph = Graph(name);
  const std::vector<TensorType> types = s.body->param_types();
  for (size_t i = 0; i < types.size(); ++i) {
    TensorType t = types[i];
    const bool is_xs = static_cast<int64_t>(i) >= s.nc && static_cast<int64_t>(i) < s.nc + s.nx;
    if (is_xs) t.shape.insert(t.shape.begin(), k);
    sub->params.push_back(sub->graph.placeholder(t.dtype, t.shape, "arg" + std::to_string(i)));
  }
  auto guard = sub->graph.as_default();
  const Ts& p = sub->params;
  Ts carry(p.begin(), p.begin() + s.nc), xs(p.begin() + s.nc, p.begin() + s.nc + s.nx),
      captures(p.begin() + s.nc + s.nx, p.end());
  auto [last, ys] = inline_steps(s, std::move(carry), xs, captures, 0, k);
  sub->results = std::move(last);
  for (const Ts& y : ys) sub->results.push_back(stack_rows(y));
  return sub;
}

int64_t body_size(const SubGraph& body) {
  int64_t n = 0;
  for (const detail::Node& node : nodes_of(body.graph)) n += node.op != "placeholder";
  return n;
}

}  // namespace

bool UnrollLoops::run(Module& module) {
  const std::vector<detail::Node>& nodes = nodes_of(module.graph);
  std::vector<int64_t> factor(nodes.size(), 0);  // per scan to unroll: steps per iteration
  bool any = false;
  for (size_t id = 0; id < nodes.size(); ++id) {
    const detail::Node& n = nodes[id];
    if (n.op != "scan") continue;
    const int64_t length = n.attrs.get_int("length"), unroll = n.attrs.get_int("unroll", 1);
    const int64_t size = body_size(n.attrs.get_subgraph("body"));
    const bool small = length <= kMaxAutoUnrollSteps && length * size <= kMaxAutoUnrollNodes;
    if (length == 0 || (unroll <= 1 && !small)) continue;
    if (!is_pure(n)) {
      note("scan '" + n.name + "' is not unrolled: its body holds a stateful or random op");
      continue;
    }
    bool known = true;
    for (const ValueRef& in : n.inputs) known &= fully_known(nodes[in.node].outputs[in.output]);
    for (const TensorType& t : n.outputs) known &= fully_known(t);
    if (!known) {
      note("scan '" + n.name + "' is not unrolled: a type at its boundary has an unknown size");
      continue;
    }
    factor[id] = (small || unroll >= length) ? length : unroll;
    any = true;
  }
  if (!any) return false;

  Rewriter rw(module);
  Graph out = rw.graph();
  auto default_guard = out.as_default();
  bool changed = false;
  for (int id = 0; id < rw.num_old(); ++id) {
    if (factor[id] == 0) {
      rw.keep(id);
      continue;
    }
    const detail::Node& n = nodes[id];
    Scan s{&n.attrs.get_subgraph("body"), n.attrs.get_int("num_carry"), n.attrs.get_int("num_xs"),
           n.attrs.get_int("length"), n.attrs.get_bool("reverse", false)};
    Ts in;
    for (const ValueRef& v : n.inputs) {
      const ValueRef m = rw.map(v);
      in.push_back(out.value(m.node, m.output));
    }
    const Ts carry(in.begin(), in.begin() + s.nc), xs(in.begin() + s.nc, in.begin() + s.nc + s.nx),
        captures(in.begin() + s.nc + s.nx, in.end());
    const int64_t k = factor[id], q = s.length / k, main = q * k;
    Ts results;
    {
      // The steps' nodes are named under the scan's name ("a/scan/tanh"), one scope a level.
      std::vector<std::unique_ptr<Graph::NameScope>> scopes;
      for (size_t b = 0, e; b <= n.name.size(); b = e + 1) {
        e = std::min(n.name.find('/', b), n.name.size());
        if (e > b)
          scopes.push_back(std::make_unique<Graph::NameScope>(out, n.name.substr(b, e - b)));
      }
      if (k == s.length) {
        auto [last, ys] = inline_steps(s, carry, xs, captures, 0, s.length);
        results = std::move(last);
        for (const Ts& y : ys) results.push_back(stack_rows(y));
      } else {
        // The loop over [0, main) in blocks of k; the steps [main, length) inlined after it
        // (before it in reverse).
        auto run_loop = [&](const Ts& from) {
          Ts inputs = from;
          for (const Tensor& x : xs) {
            Shape blocks = x.shape();
            blocks[0] = k;
            blocks.insert(blocks.begin(), q);
            inputs.push_back(reshape(rows(x, 0, main), blocks));
          }
          inputs.insert(inputs.end(), captures.begin(), captures.end());
          Attrs a;
          a.set("num_carry", s.nc).set("num_xs", s.nx).set("length", q);
          a.set("reverse", s.reverse).set("unroll", int64_t{1});
          a.set("body", unrolled_body(s, k, s.body->graph.name() + "_x" + std::to_string(k)));
          Ts r = call_op("scan", inputs, a);
          for (size_t j = static_cast<size_t>(s.nc); j < r.size(); ++j) {
            Shape flat = r[j].shape();
            flat.erase(flat.begin());
            flat[0] = main;
            r[j] = reshape(r[j], flat);
          }
          return r;
        };
        Ts loop;
        std::pair<Ts, std::vector<Ts>> rest;
        if (s.reverse) {
          rest = inline_steps(s, carry, xs, captures, main, s.length);
          loop = run_loop(rest.first);
          results.assign(loop.begin(), loop.begin() + s.nc);
        } else {
          loop = run_loop(carry);
          rest =
              inline_steps(s, Ts(loop.begin(), loop.begin() + s.nc), xs, captures, main, s.length);
          results = rest.first;
        }
        for (size_t j = 0; j < rest.second.size(); ++j) {
          Ts parts = {loop[s.nc + j]};
          for (const Tensor& r : rest.second[j]) parts.push_back(expand_dims(r, 0));
          results.push_back(concatenate(parts, 0));
        }
      }
    }
    std::vector<ValueRef> values;
    bool same_types = results.size() == n.outputs.size();
    for (size_t o = 0; same_types && o < results.size(); ++o) {
      same_types = type_of(results[o]) == n.outputs[o];
      values.push_back({results[o].impl()->node, results[o].impl()->output});
    }
    if (!same_types) {  // what was recorded has no users: DCE removes it
      note("scan '" + n.name + "' is not unrolled: its steps inlined give other types");
      rw.keep(id);
      continue;
    }
    rw.alias(id, std::move(values));
    note("scan '" + n.name + "' of " + std::to_string(s.length) + " steps unrolled " +
         (k == s.length ? std::string("fully") : "by " + std::to_string(k)));
    changed = true;
  }
  module = rw.finish();
  return changed;
}

}  // namespace kiln::compiler
