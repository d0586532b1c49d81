// See conv_pool_grad_fusion.h.
#include "compiler/passes/conv_pool_grad_fusion.h"

#include <algorithm>
#include <string>
#include <vector>

#include "compiler/fused_ops.h"
#include "ops/conv_direct.h"

namespace kiln::compiler {

namespace {

struct Match {
  int fused = -1;   // the fused_conv_pool
  int grad = -1;    // reduce_window_max_grad of its output 0
  int kernel = -1;  // convolution_kernel_grad of the grad
  int bias = -1;    // reduce_sum of the grad over batch and space, if any
};

std::vector<int64_t> ints_or(const Attrs& attrs, const char* name, std::vector<int64_t> fallback) {
  return attrs.has(name) ? attrs.get_ints(name) : fallback;
}

// Whether a convolution's attributes describe a 2-d one with groups 1 and no lhs_dilation (what
// conv_pool_kernel_grad takes).
bool plain_2d(const Attrs& a) {
  const int64_t groups = a.has("groups") ? a.get_int("groups") : 1;
  return groups == 1 && ints_or(a, "lhs_dilation", {1, 1}) == std::vector<int64_t>{1, 1} &&
         ints_or(a, "strides", {1, 1}).size() == 2;
}

// Whether two convolutions' attributes agree on strides, dilation and padding.
bool same_window(const Attrs& a, const Attrs& b) {
  for (const char* name : {"strides", "dilation", "lhs_dilation"}) {
    if (ints_or(a, name, {1, 1}) != ints_or(b, name, {1, 1})) return false;
  }
  for (const char* name : {"padding_low", "padding_high"}) {
    if (ints_or(a, name, {0, 0}) != ints_or(b, name, {0, 0})) return false;
  }
  return true;
}

// Whether reduce_window_max_grad node `g` is the gradient of the pool that fused_conv_pool `f`
// computes: the same disjoint, unpadded [1, ph, pw, 1] windows.
bool is_pool_of(const detail::Node& g, const detail::Node& f) {
  return fusable_pool_window(g.attrs) == f.attrs.get_ints("pool");
}

// Whether fused_conv_pool node `id`, still writing its output 0, is one that the CPU's direct
// kernels pool without it (ops/conv_direct.h): f32, a 2-d convolution with groups 1 and no
// lhs_dilation, few enough channels, a 2 x 2 pool, no activation or relu, and those kernels not
// switched off. Others would compute output 0 anyway, into a buffer of their own.
bool pooled_in_registers(const std::vector<detail::Node>& nodes, int id) {
  const detail::Node& f = nodes[id];
  if (f.op != kFusedConvPoolOp || !f.attrs.get_bool("conv_output", true) ||
      f.outputs[0].dtype != f32 || !plain_2d(f.attrs))
    return false;
  const std::string act = f.attrs.has("activation") ? f.attrs.get_string("activation") : "none";
  const Shape& k = nodes[f.inputs[1].node].outputs[f.inputs[1].output].shape;
  const std::vector<int64_t>& pool = f.attrs.get_ints("pool");
  return (act == "none" || act == "relu") && k.size() == 4 && pool.size() == 2 &&
         ops::direct_conv::enabled() && ops::direct_conv::takes_pool(k[2], k[3], pool[0], pool[1]);
}

}  // namespace

bool ConvPoolGradFusion::run(Module& module) {
  const std::vector<detail::Node>& nodes = nodes_of(module.graph);
  const int n = static_cast<int>(nodes.size());
  const Readers readers = readers_of(module);
  const std::vector<std::vector<int>>& users = readers.users;
  const std::vector<int>& uses = readers.uses;

  std::vector<Match> matches;
  std::vector<char> taken(n, 0);  // fused_conv_pools already given taps
  for (int id = 0; id < n; ++id) {
    const detail::Node& g = nodes[id];
    if (g.op != "reduce_window_max_grad" || g.inputs.size() != 2 || g.inputs[0].output != 0)
      continue;
    const int f = g.inputs[0].node;
    const detail::Node& fused = nodes[f];
    if (fused.op != kFusedConvPoolOp || fused.outputs.size() != 2 || !is_pool_of(g, fused))
      continue;
    const std::string what = "not fused: " + node_label(nodes, id) + " of " + node_label(nodes, f);
    if (taken[f]) {
      note(what + ": another pool gradient already reads its taps");
      continue;
    }
    if (!plain_2d(fused.attrs) || fused.outputs[0].shape.size() != 4) {
      note(what + ": the convolution is not a 2-d one with groups 1 and no lhs_dilation");
      continue;
    }
    Match m{f, id};
    std::string why;
    if (uses[id] != static_cast<int>(users[id].size())) why = "the gradient is an output";
    const Shape& kernel_shape = nodes[fused.inputs[1].node].outputs[fused.inputs[1].output].shape;
    const std::vector<int64_t> kernel_spatial = {kernel_shape[0], kernel_shape[1]};
    for (int u : users[id]) {
      if (!why.empty()) break;
      const detail::Node& r = nodes[u];
      if (r.op == "convolution_kernel_grad" && m.kernel < 0 && r.inputs.size() == 2 &&
          r.inputs[0] == fused.inputs[0] && r.inputs[1] == ValueRef{id, 0} && plain_2d(r.attrs) &&
          same_window(r.attrs, fused.attrs) &&
          ints_or(r.attrs, "kernel_spatial", {}) == kernel_spatial) {
        m.kernel = u;
      } else if (r.op == "reduce_sum" && m.bias < 0 && r.inputs.size() == 1 &&
                 ints_or(r.attrs, "axes", {}) == std::vector<int64_t>{0, 1, 2} &&
                 !r.attrs.get_bool("keepdims", false)) {
        m.bias = u;
      } else {
        why = "it is also read by " + node_label(nodes, u) +
              " (only the kernel's and the bias's gradients may read it)";
      }
    }
    if (why.empty() && m.kernel < 0) why = "no convolution_kernel_grad of the same input reads it";
    if (!why.empty()) {
      note(what + ": " + why);
      continue;
    }
    taken[f] = 1;
    matches.push_back(m);
  }
  if (matches.empty()) return false;

  std::vector<int> role(n, -1);  // the match a node belongs to
  for (size_t i = 0; i < matches.size(); ++i) {
    for (int id : {matches[i].fused, matches[i].grad, matches[i].kernel, matches[i].bias})
      if (id >= 0) role[id] = static_cast<int>(i);
  }
  std::vector<int> fused_at(matches.size(), -1), grad_at(matches.size(), -1);
  Rewriter rw(module);
  for (int id = 0; id < n; ++id) {
    if (role[id] < 0) {
      rw.keep(id);
      continue;
    }
    const size_t i = static_cast<size_t>(role[id]);
    const Match& m = matches[i];
    if (id == m.fused) {  // the forward also numbers each pooled maximum's tap
      detail::Node fused = nodes[id];
      for (ValueRef& in : fused.inputs) in = rw.map(in);
      fused.attrs.set("taps", true);
      fused.outputs.push_back({u8, fused.outputs[1].shape});

      fused_at[i] = rw.replace(id, std::move(fused));
    } else if (id == m.grad) {  // in the gradient's place: both parameter gradients
      const detail::Node& kernel = nodes[m.kernel];
      detail::Node grad;
      grad.name = kernel.name;
      grad.op = kConvPoolKernelGradOp;
      grad.inputs = {rw.map(nodes[m.fused].inputs[0]), ValueRef{fused_at[i], 2},
                     rw.map(nodes[id].inputs[1])};
      grad.attrs = kernel.attrs;
      grad.attrs.set("pool", nodes[m.fused].attrs.get_ints("pool"));
      grad.attrs.set("relu_mask", nodes[id].attrs.get_bool("relu_mask", false));
      const TensorType& k = kernel.outputs[0];
      grad.outputs = {k, TensorType{k.dtype, {k.shape.back()}}};
      grad_at[i] = rw.replace(id, std::move(grad));
      note("fused " + node_label(nodes, id) + ", " + node_label(nodes, m.kernel) +
           (m.bias >= 0 ? " and " + node_label(nodes, m.bias) : std::string()) +
           " into one conv_pool_kernel_grad reading the taps of " + node_label(nodes, m.fused));
    } else if (id == m.kernel) {
      rw.alias(id, {ValueRef{grad_at[i], 0}});
    } else {
      rw.alias(id, {ValueRef{grad_at[i], 1}});
    }
  }
  module = rw.finish();
  return true;
}

bool DropConvOutputs::run(Module& module) {
  const std::vector<detail::Node>& nodes = nodes_of(module.graph);
  const int n = static_cast<int>(nodes.size());
  std::vector<char> unread(n, 0);
  for (int id = 0; id < n; ++id) unread[id] = pooled_in_registers(nodes, id);
  for (const detail::Node& node : nodes)
    for (const ValueRef& in : node.inputs)
      if (in.output == 0) unread[in.node] = 0;
  for (ValueRef v : module.outputs)
    if (v.output == 0) unread[v.node] = 0;
  if (std::find(unread.begin(), unread.end(), 1) == unread.end()) return false;
  Rewriter rw(module);
  for (int id = 0; id < n; ++id) {
    if (!unread[id]) {
      rw.keep(id);
      continue;
    }
    detail::Node fused = nodes[id];
    for (ValueRef& in : fused.inputs) in = rw.map(in);
    fused.attrs.set("conv_output", false);
    fused.outputs[0].shape = {0};
    rw.replace(id, std::move(fused));
    note("dropped output 0 of " + node_label(nodes, id) + ": nothing reads it");
  }
  module = rw.finish();
  return true;
}

}  // namespace kiln::compiler
