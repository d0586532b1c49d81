// Matches dot | convolution [-> add(bias)] [-> tanh | logistic | relu] chains whose
// intermediates have no other use and rewrites each into one fused_dot or fused_conv node
// standing where the chain ends. relu is select(x <= 0, 0, x) (ops/nn.cc); its mask x <= 0 may
// have other users (relu's gradient), which then read relu(x) <= 0 instead, the same values.
#include "compiler/passes/epilogue_fusion.h"

#include <optional>

#include "compiler/fused_ops.h"

namespace kiln::compiler {
namespace {

// An op whose output an epilogue folds into, and the fused op it becomes.
struct Producer {
  const char* noun;  // in notes: "the dot's result"
  const char* fused_op;
  bool allow_full_bias;  // fused_dot adds an output-shaped bias; fused_conv only broadcasts
  // Whether the bias fuses when the activation must stay apart (its input has other users).
  // Not for convolutions: the activation's loop then re-reads the large pre-activation, and
  // masks computed beside the bias add move to loops reading 4-byte floats; when relu's
  // gradient still read its pre-activation, that measured 2-4% slower on the CNN train step
  // (benchmarks/train_step_bench cnn_b128) than leaving the bias in the activation's loop.
  bool fuse_bias_alone;
};

const Producer* producer_of(const std::string& op) {
  static const Producer kDot{"dot", kFusedDotOp, true, true};
  static const Producer kConv{"convolution", kFusedConvOp, false, false};
  if (op == "dot") return &kDot;
  if (op == "convolution") return &kConv;
  return nullptr;
}

struct Match {
  int dot = -1, add = -1, act_node = -1, end = -1;
  int pool = -1;  // a max pool of a convolution's epilogue output, fused as its output 1
  int mask = -1;  // relu's x <= 0, rewritten to read the fused output
  ValueRef bias{-1, 0};
  Activation act = Activation::kNone;
};

// The [ph, pw] of a reduce_window_max that a fused_conv can take as its output 1
// (fusable_pool_window); the empty list otherwise.
std::vector<int64_t> fusable_pool(const detail::Node& n) {
  if (n.op != "reduce_window_max" || n.outputs.size() != 1) return {};
  return fusable_pool_window(n.attrs);
}

bool is_zero_scalar(const detail::Node& n) {
  if (n.op != "constant") return false;
  const Tensor& v = n.attrs.get_tensor("value");
  if (v.size() != 1) return false;
  for (double x : v.to_vector<double>())
    if (x != 0) return false;
  return true;
}

}  // namespace

bool EpilogueFusion::run(Module& module) {
  const std::vector<detail::Node>& nodes = nodes_of(module.graph);
  const int n = static_cast<int>(nodes.size());
  const Readers readers = readers_of(module);
  const std::vector<std::vector<int>>& users = readers.users;
  const std::vector<int>& uses = readers.uses;
  auto type = [&](ValueRef v) -> const TensorType& { return nodes[v.node].outputs[v.output]; };
  // Whether value v depends on node `target` (inputs precede users: search ids above target).
  auto depends_on = [&](ValueRef v, int target) {
    std::vector<char> seen(n, 0);
    std::vector<int> stack = {v.node};
    while (!stack.empty()) {
      int id = stack.back();
      stack.pop_back();
      if (id == target) return true;
      if (id < target || seen[id]) continue;
      seen[id] = 1;
      for (const ValueRef& in : nodes[id].inputs) stack.push_back(in.node);
    }
    return false;
  };
  // The activation that user `id` of value `x` starts, if it is one: a unary activation op, or
  // relu's mask x <= 0 (`id`) with its select(mask, 0, x), which take two of x's uses.
  struct Act {
    Activation act;
    int node;       // the activation's result
    int mask = -1;  // relu's mask
    int x_uses = 1;
  };
  auto activation_of = [&](int id, int x) -> std::optional<Act> {
    const detail::Node& node = nodes[id];
    const TensorType& xt = nodes[x].outputs[0];
    if (node.outputs.size() != 1 || node.inputs.empty() || node.inputs[0].node != x)
      return std::nullopt;
    if (node.op == "le" && node.inputs.size() == 2 && node.inputs[1].node != x &&
        is_zero_scalar(nodes[node.inputs[1].node]) && node.outputs[0].shape == xt.shape) {
      for (int s : users[id]) {
        const detail::Node& sel = nodes[s];
        if (sel.op == "select" && sel.inputs.size() == 3 && sel.inputs[0].node == id &&
            sel.inputs[2].node == x && sel.inputs[1].node != x &&
            is_zero_scalar(nodes[sel.inputs[1].node]) && sel.outputs[0] == xt)
          return Act{Activation::kRelu, s, id, 2};
      }
      return std::nullopt;
    }
    if (node.outputs[0] != xt) return std::nullopt;
    if (auto a = unary_activation(node.op)) return Act{*a, id};
    return std::nullopt;
  };

  std::vector<Match> matches;
  std::vector<char> claimed(n, 0);  // the nodes an earlier match takes into its epilogue
  for (int d = 0; d < n; ++d) {
    const detail::Node& dot = nodes[d];  // the dot or convolution
    const Producer* producer = producer_of(dot.op);
    if (producer == nullptr || dot.outputs.size() != 1) continue;
    const TensorType& out = dot.outputs[0];
    const std::string used_elsewhere = std::string("the ") + producer->noun +
                                       "'s result is also used elsewhere (" +
                                       std::to_string(uses[d]) + " uses)";
    // The backend's fused kernels take some dtypes (the CPU's: the floating types, bf16 and f16
    // with the bias and activation applied to the f32 sums before their one rounding).
    const bool takes = target_->epilogue_dtype(out.dtype);
    const bool narrow = target_->narrow_dtype(out.dtype);
    if (!takes || (narrow && !fuse_narrow_)) {
      for (int u : users[d]) {
        if (nodes[u].op != "add" && !activation_of(u, d)) continue;
        note("not fused: epilogue of " + node_label(nodes, d) + ": its output is " + out.str() +
             (!takes ? "; the backend's fused kernels do not take " +
                           std::string(dtype_name(out.dtype))
                     : "; a fused bf16/f16 epilogue rounds once, not per op, and this pipeline "
                       "keeps exact rewrites only"));
        break;
      }
      continue;
    }
    // A candidate consumer: an add with a bias, or an activation.
    Match m;
    m.dot = d;
    for (int u : users[d]) {
      const detail::Node& un = nodes[u];
      if (un.op == "add" && un.inputs.size() == 2 && un.outputs[0] == out) {
        int k = un.inputs[0].node == d ? 1 : 0;
        if (un.inputs[k].node == d) continue;  // dot + dot
        std::string why = bias_refusal(type(un.inputs[k]), out, producer->allow_full_bias);
        if (why.empty()) why = target_->epilogue_bias_refusal(dot.op, type(un.inputs[k]), out);
        if (why.empty() && type(un.inputs[k]).shape == out.shape && num_elements(out.shape) != 1)
          why = std::string("the addend ") + type(un.inputs[k]).str() +
                " is not a broadcast bias (a full-size add stays in loop fusion)";
        if (uses[d] > 1 && why.empty()) {
          why = depends_on(un.inputs[k], d) ? std::string("the bias depends on the ") +
                                                  producer->noun + " (fusing would create a cycle)"
                                            : used_elsewhere;
        }
        if (!why.empty()) {
          note(std::string("not fused: ") + node_label(nodes, u) + " into " + node_label(nodes, d) +
               ": " + why);
          continue;
        }
        m.add = u;
        m.bias = un.inputs[k];
      } else if (auto a = activation_of(u, d)) {
        if (!target_->epilogue_activation(dot.op, a->act)) {
          note(std::string("not fused: ") + node_label(nodes, u) + " into " + node_label(nodes, d) +
               ": the backend's fused " + producer->noun + " applies no " +
               activation_name(a->act));
          continue;
        }
        if (uses[d] > a->x_uses) {
          note(std::string("not fused: ") + node_label(nodes, u) + " into " + node_label(nodes, d) +
               ": " + used_elsewhere);
          continue;
        }
        m.act_node = a->node;
        m.mask = a->mask;
        m.act = a->act;
      }
    }
    if (m.add < 0 && m.act_node < 0) continue;
    std::string layout = dot.op != "dot"
                             ? std::string()
                             : target_->fused_dot_layout_refusal(
                                   type(dot.inputs[0]).shape, type(dot.inputs[1]).shape, dot.attrs);
    if (!layout.empty()) {
      note("not fused: epilogue of " + node_label(nodes, d) + ": " + layout);
      continue;
    }
    if (m.add >= 0) {
      for (int v : users[m.add]) {
        auto a = activation_of(v, m.add);
        if (!a) continue;
        const bool applies = target_->epilogue_activation(dot.op, a->act);
        if (uses[m.add] > a->x_uses || !applies) {
          const std::string why =
              !applies ? std::string(": the backend's fused ") + producer->noun + " applies no " +
                             activation_name(a->act)
                       : ": the pre-activation " + node_label(nodes, m.add) +
                             " is also used elsewhere (" + std::to_string(uses[m.add]) + " uses)";
          if (!producer->fuse_bias_alone) {
            note("not fused: " + node_label(nodes, m.add) + " and " + node_label(nodes, v) +
                 " into " + node_label(nodes, d) + why +
                 ", and a convolution does not take the bias alone (it stays in the "
                 "activation's loop)");
            m.add = -1;
            break;
          }
          note(std::string("fused only the bias: ") + node_label(nodes, v) + " stays apart from " +
               node_label(nodes, d) + why);
          break;
        }
        m.act_node = a->node;
        m.mask = a->mask;
        m.act = a->act;
      }
    }
    if (m.add < 0 && m.act_node < 0) continue;
    m.end = m.act_node >= 0 ? m.act_node : m.add;
    // add(dot_a, dot_b) of one-element outputs: each dot may take the add as its epilogue, but
    // only the first one does; the other stays the first one's bias.
    int taken = -1;
    for (int id : {m.add, m.end})
      if (id >= 0 && claimed[id]) taken = id;
    if (taken >= 0) {
      note(std::string("not fused: ") + node_label(nodes, taken) + " into " + node_label(nodes, d) +
           ": it is already the epilogue of another " + producer->noun);
      continue;
    }
    // A convolution's max pool (the CPU's: f32, f64) is computed image by image right after the
    // epilogue: it then reads the output while it is in cache.
    if (dot.op == "convolution" && target_->conv_pool_dtype(out.dtype)) {
      for (int u : users[m.end]) {
        if (!fusable_pool(nodes[u]).empty() && !claimed[u] &&
            nodes[u].inputs[0] == ValueRef{m.end, 0}) {
          m.pool = u;
          break;
        }
      }
    }
    for (int id : {m.add, m.act_node, m.mask, m.end, m.pool})
      if (id >= 0) claimed[id] = 1;
    matches.push_back(m);
  }
  if (matches.empty()) return false;

  // The fused node stands where the chain ends, or at relu's mask, which comes before the
  // select and is rewritten to read the fused output.
  std::vector<int> match_at(n, -1), pool_of(n, -1), fused_at(matches.size(), -1);
  std::vector<char> absorbed(n, 0), emitted(n, 0);
  for (size_t i = 0; i < matches.size(); ++i) {
    const Match& m = matches[i];
    match_at[m.mask >= 0 ? m.mask : m.end] = static_cast<int>(i);
    if (m.pool >= 0) pool_of[m.pool] = static_cast<int>(i);
    absorbed[m.dot] = 1;
    if (m.add >= 0 && m.add != m.end) absorbed[m.add] = 1;
  }
  Rewriter rw(module);
  for (int id = 0; id < n; ++id) {
    if (emitted[id]) continue;
    if (absorbed[id]) {
      rw.drop(id);
      continue;
    }
    if (pool_of[id] >= 0) {  // the max pool is the fused node's output 1
      rw.alias(id, {ValueRef{fused_at[pool_of[id]], 1}});
      continue;
    }
    if (match_at[id] < 0) {
      rw.keep(id);
      continue;
    }
    const Match& m = matches[match_at[id]];
    const detail::Node& dot = nodes[m.dot];
    detail::Node fused;
    fused.name = nodes[m.end].name;
    fused.op = producer_of(dot.op)->fused_op;
    fused.inputs = {rw.map(dot.inputs[0]), rw.map(dot.inputs[1])};
    if (m.add >= 0) fused.inputs.push_back(rw.map(m.bias));
    fused.attrs = dot.attrs;
    fused.attrs.set("activation", std::string(activation_name(m.act)));
    fused.outputs = nodes[m.end].outputs;
    if (m.pool >= 0) {
      fused.op = kFusedConvPoolOp;
      fused.attrs.set("pool", fusable_pool(nodes[m.pool]));
      fused.outputs.push_back(nodes[m.pool].outputs[0]);
    }
    const int f = rw.replace(m.end, std::move(fused));
    fused_at[match_at[id]] = f;
    if (m.mask >= 0) {
      detail::Node mask = nodes[m.mask];
      mask.inputs = {ValueRef{f, 0}, rw.map(mask.inputs[1])};
      rw.replace(m.mask, std::move(mask));
      emitted[m.end] = 1;
    }
  }
  module = rw.finish();
  return true;
}

}  // namespace kiln::compiler
