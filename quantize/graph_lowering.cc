// lower_graph (quantize/lowering.h): an exported graph's nodes as the lite runtime's float ops.
// Layers export as small patterns of primitive ops (a Dense as dot, add of the bias, and a relu
// as select(x <= 0, 0, x)); each pattern is matched at its first node, in node order, and its
// nodes are consumed. A node no pattern takes, reading the input's values, is refused by name.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "kiln/error.h"
#include "kiln/graph.h"
#include "kiln/op_registry.h"
#include "kiln/shape.h"
#include "quantize/lowering.h"
#include "src/core/tensor_impl.h"

namespace kiln::lite {
namespace {

using format::OpCode;
using kernels::Activation;

class GraphLowering {
 public:
  explicit GraphLowering(const io::ExportedGraph& exported) : exported_(exported) {
    const Graph& g = exported.graph;
    for (int i = 0; i < g.num_nodes(); ++i) nodes_.push_back(g.node(i));
    users_.assign(nodes_.size(), {});
    for (const NodeInfo& node : nodes_) {
      for (const ValueRef& r : node.inputs) users_.at(r.node).push_back(node.id);
    }
    for (std::vector<int>& u : users_) {
      std::sort(u.begin(), u.end());
      u.erase(std::unique(u.begin(), u.end()), u.end());
    }
    for (const auto& [variable, placeholder] : exported.variables) {
      constants_[node_of(placeholder)] = variable.value();
    }
  }

  std::vector<FloatOp> run(std::vector<int64_t>* input_shape, int* output);

 private:
  static int node_of(const Tensor& t) { return t.impl()->node; }
  const std::string& model() const { return exported_.model_name; }
  // The layer a node came from: its name's scope ("dense_1/dot" -> "dense_1").
  static std::string scope(const std::string& name) {
    const size_t slash = name.rfind('/');
    return slash == std::string::npos ? name : name.substr(0, slash);
  }

  // The node's value where it does not depend on the input: a variable, a constant, or a
  // convert of one. Null otherwise.
  const Tensor* constant(int node);
  const Tensor* evaluate(int node);  // constant()'s work, not memoized
  bool is_zero(const ValueRef& r) {
    const Tensor* c = r.output == 0 ? constant(r.node) : nullptr;
    if (c == nullptr || c->size() == 0) return false;
    const std::vector<float> v = c->to(f32).to_vector<float>();
    return std::all_of(v.begin(), v.end(), [](float x) { return x == 0.f; });
  }
  // The lite value a node's output 0 holds, or -1.
  int value_of(const ValueRef& r) const {
    if (r.output != 0) return -1;
    auto it = value_.find(r.node);
    return it == value_.end() ? -1 : it->second;
  }
  const std::vector<int>& users(int node) const { return users_.at(node); }
  // The one node reading `node`, if it has exactly one reader and that reader is `op`.
  int only_user(int node, const std::string& op) const {
    const std::vector<int>& u = users(node);
    return u.size() == 1 && !consumed_.count(u[0]) && nodes_[u[0]].op == op ? u[0] : -1;
  }
  bool reads(int node, std::initializer_list<int> inputs) const {
    const NodeInfo& n = nodes_[node];
    if (n.inputs.size() != inputs.size()) return false;
    size_t i = 0;
    for (int in : inputs) {
      if (n.inputs[i].node != in || n.inputs[i].output != 0) return false;
      ++i;
    }
    return true;
  }
  std::vector<int64_t> out_shape(int node) const {
    std::vector<int64_t> s(nodes_[node].outputs.at(0).shape.begin(),
                           nodes_[node].outputs.at(0).shape.end());
    if (!s.empty()) s[0] = -1;
    return s;
  }
  int emit(FloatOp op, std::vector<int> in) {
    op.in = std::move(in);
    shapes_.push_back(op.out_shape);
    ops_.push_back(std::move(op));
    return static_cast<int>(ops_.size());
  }
  int emit_activation(int node, int x, const std::string& name) {
    std::optional<FloatOp> op = float_activation_op(name, scope(nodes_[node].name), shapes_[x]);
    return emit(*op, {x});
  }
  void consume(std::initializer_list<int> nodes) { consumed_.insert(nodes); }

  // The matchers: each tries the pattern that starts at `node`; on a match it emits its op,
  // consumes the pattern's nodes and gives the last one the op's value.
  bool weighted(int node);
  int relu_after(int node);  // the relu reading `node` (and nothing else reading it), or -1
  bool relu(int node);
  bool softmax(int node);
  bool softplus(int node);
  bool logistic(int node);
  bool pool(int node);
  bool reshape(int node);
  bool join(int node);
  bool affine(int node);
  bool gelu(int node);
  bool global_pool(int node);
  bool layer_norm(int node);
  // A scalar constant operand of `node` (input 0 or 1), or NaN.
  float scalar_operand(int node, int* other);
  void simplify(int* output);

  const io::ExportedGraph& exported_;
  std::vector<NodeInfo> nodes_;
  std::vector<std::vector<int>> users_;  // node -> the nodes reading it, each once
  std::map<int, Tensor> constants_;
  std::set<int> not_constant_;
  std::map<int, int> value_;  // node -> the lite value its output holds
  std::set<int> consumed_;
  std::vector<std::vector<int64_t>> shapes_;  // by lite value
  std::vector<FloatOp> ops_;
};

const Tensor* GraphLowering::constant(int node) {
  auto it = constants_.find(node);
  if (it != constants_.end()) return &it->second;
  if (not_constant_.count(node)) return nullptr;
  const Tensor* c = evaluate(node);
  if (c == nullptr) not_constant_.insert(node);
  return c;
}

const Tensor* GraphLowering::evaluate(int node) {
  const NodeInfo& n = nodes_.at(node);
  if (n.op == "constant" && n.attrs.has("value")) {
    return &(constants_[node] = n.attrs.get_tensor("value"));
  }
  // Any other op on constants alone (a batch normalization's rsqrt(variance + epsilon)),
  // evaluated now. Ops without inputs other than `constant` (random ones) are not constants.
  if (n.inputs.empty() || n.op == "placeholder" || n.outputs.size() != 1) return nullptr;
  std::vector<Tensor> inputs;
  for (const ValueRef& r : n.inputs) {
    const Tensor* c = r.output == 0 ? constant(r.node) : nullptr;
    if (c == nullptr) return nullptr;
    inputs.push_back(*c);
  }
  try {
    return &(constants_[node] = call_op(n.op, inputs, n.attrs).at(0));
  } catch (const Error&) {
    return nullptr;  // not evaluable here (a control-flow op, say): not a constant
  }
}

float GraphLowering::scalar_operand(int node, int* other) {
  const NodeInfo& n = nodes_[node];
  for (int side : {0, 1}) {
    const Tensor* c = n.inputs.size() == 2 && n.inputs[side].output == 0
                          ? constant(n.inputs[side].node)
                          : nullptr;
    if (c != nullptr && c->size() == 1) {
      *other = n.inputs[1 - side].node;
      return c->to(f32).to_vector<float>()[0];
    }
  }
  return std::numeric_limits<float>::quiet_NaN();
}

// gelu, as ops::gelu exports it: mul(0.5, v) * (1 + erf(v * (1 / sqrt 2))), starting at
// whichever of the two multiplications of v comes first.
bool GraphLowering::gelu(int node) {
  int v = -1;
  const float k = scalar_operand(node, &v);
  if ((k != 0.5f && std::abs(k - 0.70710678f) > 1e-6f) || value_of({v, 0}) < 0) return false;
  int scaled = -1, half = -1;
  for (int u : users(v)) {
    int other = -1;
    if (consumed_.count(u) || nodes_[u].op != "mul") continue;
    const float f = scalar_operand(u, &other);
    if (other != v) continue;
    if (std::abs(f - 0.70710678f) <= 1e-6f) scaled = u;
    if (f == 0.5f) half = u;
  }
  if (scaled < 0 || half < 0) return false;
  const int e = only_user(scaled, "erf");
  const int one_plus = e < 0 ? -1 : only_user(e, "add");
  const int y = one_plus < 0 ? -1 : only_user(one_plus, "mul");
  int a = -1;
  if (y < 0 || scalar_operand(one_plus, &a) != 1.f || a != e ||
      !(reads(y, {half, one_plus}) || reads(y, {one_plus, half})) ||
      users(half) != std::vector<int>{y}) {
    return false;
  }
  consume({scaled, e, one_plus, half, y});
  value_[y] = emit_activation(node, value_of({v, 0}), "gelu");
  return true;
}

// GlobalAveragePooling2D and GlobalMaxPooling2D: reduce_sum over H and W divided by H * W, or
// reduce_max over them, of an NHWC value: a pool whose one window is the whole image, then a
// Reshape to the node's [batch, c] (none when the dims are kept).
bool GraphLowering::global_pool(int node) {
  const NodeInfo& n = nodes_[node];
  const int x = n.inputs.size() == 1 ? value_of(n.inputs[0]) : -1;
  if (x < 0 || shapes_[x].size() != 4 || n.attrs.get_ints("axes") != std::vector<int64_t>{1, 2}) {
    return false;
  }
  const std::vector<int64_t>& xs = shapes_[x];
  const bool max = n.op == "reduce_max";
  int end = node;
  if (!max) {
    const int div = only_user(node, "div");
    int other = -1;
    if (div < 0 || nodes_[div].inputs[0].node != node ||
        scalar_operand(div, &other) != static_cast<float>(xs[1] * xs[2])) {
      return false;
    }
    end = div;
  }
  if (per_example(out_shape(end)) != xs[3]) return false;
  consume({end});
  FloatOp op;
  op.layer = scope(n.name);
  op.code = max ? OpCode::kMaxPool2D : OpCode::kAvgPool2D;
  op.window = {xs[1], xs[2], xs[1], xs[2]};
  op.out_shape = {-1, 1, 1, xs[3]};
  int v = emit(op, {x});
  if (out_shape(end) != op.out_shape) {
    FloatOp flat;
    flat.layer = op.layer;
    flat.code = OpCode::kReshape;
    flat.out_shape = out_shape(end);
    v = emit(flat, {v});
  }
  value_[end] = v;
  return true;
}

// LayerNormalization as it exports: c = v - sum(v) / n; c * rsqrt(sum(c * c) / n + epsilon),
// over the last axis, starting at the first reduce_sum; its gamma and beta follow as a mul and
// an add, ChannelAffines that simplify() folds into it.
bool GraphLowering::layer_norm(int node) {
  const NodeInfo& n = nodes_[node];
  const int x = n.inputs.size() == 1 ? value_of(n.inputs[0]) : -1;
  if (x < 0) return false;
  const int v = n.inputs[0].node;
  const int64_t c = shapes_[x].back(), last = static_cast<int64_t>(shapes_[x].size()) - 1;
  auto over_last = [&](int r) {
    const std::vector<int64_t>& axes = nodes_[r].attrs.get_ints("axes");
    return axes.size() == 1 && (axes[0] == last || axes[0] == -1);
  };
  // reduce_sum -> reshape -> div by n: the mean, or the variance.
  auto mean_of = [&](int sum) {
    const int r = only_user(sum, "reshape");
    const int d = r < 0 ? -1 : only_user(r, "div");
    int other = -1;
    return d >= 0 && over_last(sum) && nodes_[d].inputs[0].node == r &&
                   scalar_operand(d, &other) == static_cast<float>(c) && other == r
               ? d
               : -1;
  };
  const int mean = mean_of(node);
  const int centered = mean < 0 ? -1 : only_user(mean, "sub");
  if (centered < 0 || !reads(centered, {v, mean})) return false;
  // centered is read by mul(centered, centered) and by the final mul.
  const std::vector<int>& cu = users(centered);
  if (cu.size() != 2) return false;
  const int sq = reads(cu[0], {centered, centered}) ? cu[0] : cu[1];
  const int scaled = sq == cu[0] ? cu[1] : cu[0];
  const int sum2 = only_user(sq, "reduce_sum");
  const int var = sum2 < 0 ? -1 : mean_of(sum2);
  const int plus = var < 0 ? -1 : only_user(var, "add");
  const int rs = plus < 0 ? -1 : only_user(plus, "rsqrt");
  int other = -1;
  const float epsilon = plus < 0 ? -1.f : scalar_operand(plus, &other);
  if (nodes_[sq].op != "mul" || !reads(sq, {centered, centered}) || rs < 0 || other != var ||
      !(epsilon >= 0.f) || nodes_[scaled].op != "mul" || only_user(rs, "mul") != scaled ||
      !(reads(scaled, {centered, rs}) || reads(scaled, {rs, centered}))) {
    return false;
  }
  consume({nodes_[mean].inputs[0].node, mean, centered, sq, sum2, nodes_[var].inputs[0].node, var,
           plus, rs, scaled});
  FloatOp op;
  op.layer = scope(n.name);
  op.code = OpCode::kLayerNorm;
  op.weight_shape = {c};
  op.weights.assign(c, 1.f);
  op.bias.assign(c, 0.f);
  op.epsilon = epsilon;
  op.out_shape = shapes_[x];
  value_[scaled] = emit(op, {x});
  return true;
}

// mul, add, sub or div of a value by a constant of one value per channel (shape [c], or 1s
// then c) or a scalar: a ChannelAffine (simplify() folds it into the op before it).
bool GraphLowering::affine(int node) {
  const NodeInfo& n = nodes_[node];
  if (n.inputs.size() != 2) return false;
  const int side = value_of(n.inputs[0]) >= 0 ? 0 : 1;
  const int x = value_of(n.inputs[side]);
  const Tensor* k = n.inputs[1 - side].output == 0 ? constant(n.inputs[1 - side].node) : nullptr;
  if (x < 0 || k == nullptr || shapes_[x].size() < 2 || out_shape(node) != shapes_[x]) {
    return false;  // (a value of the batch dimension alone has no channels)
  }
  const int64_t c = shapes_[x].back();
  for (int64_t i = 0; i + 1 < k->rank(); ++i) {
    if (k->dim(i) != 1) return false;
  }
  if (k->size() != 1 && (k->rank() == 0 || k->dim(-1) != c)) return false;
  if ((n.op == "sub" || n.op == "div") && side != 0) return false;  // c - x, c / x
  std::vector<float> v = k->to(f32).to_vector<float>();
  if (v.size() == 1) v.assign(c, v[0]);
  FloatOp op;
  op.layer = scope(n.name);
  op.code = OpCode::kChannelAffine;
  op.weight_shape = {c};
  op.out_shape = shapes_[x];
  op.weights.assign(c, 1.f);
  op.bias.assign(c, 0.f);
  for (int64_t j = 0; j < c; ++j) {
    if (n.op == "mul") op.weights[j] = v[j];
    if (n.op == "div") op.weights[j] = 1.f / v[j];
    if (n.op == "add") op.bias[j] = v[j];
    if (n.op == "sub") op.bias[j] = -v[j];
  }
  value_[node] = emit(op, {x});
  return true;
}

// convolution (NHWC x, HWIO kernel) or dot ([batch, k] x [k, m] or [m, k]), then an add of a
// [m] bias and a relu, each when it is the only reader of what comes before.
bool GraphLowering::weighted(int node) {
  const NodeInfo& n = nodes_[node];
  if (n.inputs.size() != 2) return false;
  const int x = value_of(n.inputs[0]);
  const Tensor* w = n.inputs[1].output == 0 ? constant(n.inputs[1].node) : nullptr;
  if (x < 0 || w == nullptr || w->dtype() != f32) return false;
  const std::vector<int64_t>& xs = shapes_[x];
  FloatOp op;
  op.layer = scope(n.name);
  int64_t m = 0;
  if (n.op == "convolution") {
    const Attrs& a = n.attrs;
    const std::vector<int64_t> ones{1, 1};
    if (xs.size() != 4 || w->rank() != 4 || w->dim(2) != xs[3] || a.get_int("groups", 1) != 1 ||
        (a.has("dilation") && a.get_ints("dilation") != ones) ||
        (a.has("lhs_dilation") && a.get_ints("lhs_dilation") != ones) ||
        a.get_ints("strides").size() != 2 || a.get_ints("padding_low").size() != 2 ||
        a.get_ints("padding_high").size() != 2) {
      return false;
    }
    m = w->dim(3);
    op.code = OpCode::kConv2D;
    op.weights = output_major(*w);
    op.weight_shape = {m, w->dim(0), w->dim(1), w->dim(2)};
    const std::vector<int64_t>&s = a.get_ints("strides"), &lo = a.get_ints("padding_low"),
          &hi = a.get_ints("padding_high");
    op.window = {w->dim(0), w->dim(1), s[0], s[1], lo[0], lo[1], hi[0], hi[1]};
    op.out_shape = {-1, op.window.out_h(xs[1]), op.window.out_w(xs[2]), m};
  } else {
    const Attrs& a = n.attrs;
    const std::vector<int64_t> one{1}, zero{0}, none{};
    if (xs.size() != 2 || w->rank() != 2 || a.get_ints("lhs_batch") != none ||
        a.get_ints("rhs_batch") != none || a.get_ints("lhs_contract") != one) {
      return false;
    }
    const bool k_first = a.get_ints("rhs_contract") == zero;  // a Dense's [k, m] kernel
    if (!k_first && a.get_ints("rhs_contract") != one) return false;
    m = w->dim(k_first ? 1 : 0);
    const int64_t k = w->dim(k_first ? 0 : 1);
    if (k != xs[1]) return false;
    op.code = OpCode::kFullyConnected;
    op.weights = k_first ? output_major(*w) : w->to_vector<float>();
    op.weight_shape = {m, k};
    op.out_shape = {-1, m};
  }
  if (out_shape(node) != op.out_shape) return false;
  int end = node;
  if (const int add = only_user(end, "add"); add >= 0) {
    const NodeInfo& a = nodes_[add];
    const int other = a.inputs[0].node == end ? 1 : 0;
    const Tensor* b = a.inputs[other].output == 0 ? constant(a.inputs[other].node) : nullptr;
    if (b != nullptr && b->size() == m && b->rank() >= 1 && b->dim(-1) == m &&
        out_shape(add) == op.out_shape) {
      op.bias = b->to(f32).to_vector<float>();
      consume({add});
      end = add;
    }
  }
  if (const int r = relu_after(end); r >= 0) {
    op.activation = Activation::kRelu;
    end = r;
  }
  value_[end] = emit(op, {x});
  return true;
}

// select(le(v, 0), 0, v), or max(v, 0), as the only readers of v; consumes them.
int GraphLowering::relu_after(int v) {
  const std::vector<int>& u = users(v);
  if (u.size() == 1 && nodes_[u[0]].op == "max" && !consumed_.count(u[0])) {
    const NodeInfo& mx = nodes_[u[0]];
    if (mx.inputs.size() == 2 && ((mx.inputs[0].node == v && is_zero(mx.inputs[1])) ||
                                  (mx.inputs[1].node == v && is_zero(mx.inputs[0])))) {
      consume({u[0]});
      return u[0];
    }
    return -1;
  }
  if (u.size() != 2) return -1;
  const int le = nodes_[u[0]].op == "le" ? u[0] : u[1], sel = le == u[0] ? u[1] : u[0];
  if (consumed_.count(le) || consumed_.count(sel) || nodes_[le].op != "le" ||
      nodes_[sel].op != "select" || nodes_[le].inputs.size() != 2 ||
      !reads(le, {v, nodes_[le].inputs[1].node}) || !is_zero(nodes_[le].inputs[1]) ||
      users(le) != std::vector<int>{sel} || nodes_[sel].inputs.size() != 3 ||
      !reads(sel, {le, nodes_[sel].inputs[1].node, v}) || !is_zero(nodes_[sel].inputs[1])) {
    return -1;
  }
  consume({le, sel});
  return sel;
}

// A relu on a value with other readers: a float Activation.
bool GraphLowering::relu(int node) {
  const NodeInfo& n = nodes_[node];
  if (n.inputs.empty()) return false;
  const int v = n.inputs[0].node, x = value_of(n.inputs[0]);
  if (x < 0) return false;
  if (n.op == "le") {
    const int sel = only_user(node, "select");
    if (n.inputs.size() != 2 || !is_zero(n.inputs[1]) || sel < 0 ||
        nodes_[sel].inputs.size() != 3 || !reads(sel, {node, nodes_[sel].inputs[1].node, v}) ||
        !is_zero(nodes_[sel].inputs[1])) {
      return false;
    }
    consume({sel});
    value_[sel] = emit_activation(node, x, "relu");
    return true;
  }
  if (n.inputs.size() != 2 || !is_zero(n.inputs[1])) return false;  // max(v, 0)
  // Softplus's max(v, 0), when its abs(v) comes later in node order.
  for (int u : users(v)) {
    if (!consumed_.count(u) && nodes_[u].op == "abs" && softplus(u)) return true;
  }
  value_[node] = emit_activation(node, x, "relu");
  return true;
}

// exp(v - reshape(reduce_max(v))) / reshape(reduce_sum(that)), over v's last axis.
bool GraphLowering::softmax(int node) {
  const NodeInfo& rm = nodes_[node];
  if (rm.inputs.size() != 1) return false;
  const int v = rm.inputs[0].node, x = value_of(rm.inputs[0]);
  if (x < 0) return false;
  const int64_t last = static_cast<int64_t>(shapes_[x].size()) - 1;
  auto over_last = [&](int r) {
    const std::vector<int64_t>& axes = nodes_[r].attrs.get_ints("axes");
    return axes.size() == 1 && (axes[0] == last || axes[0] == -1);
  };
  const int r1 = only_user(node, "reshape");
  const int sub = r1 < 0 ? -1 : only_user(r1, "sub");
  const int e = sub < 0 ? -1 : only_user(sub, "exp");
  if (!over_last(node) || e < 0 || !reads(sub, {v, r1}) || users(e).size() != 2) return false;
  const int rs = nodes_[users(e)[0]].op == "reduce_sum" ? users(e)[0] : users(e)[1];
  const int r2 = only_user(rs, "reshape");
  const int div = r2 < 0 ? -1 : only_user(r2, "div");
  if (nodes_[rs].op != "reduce_sum" || !over_last(rs) || div < 0 || !reads(div, {e, r2}) ||
      users(e) != std::vector<int>{std::min(rs, div), std::max(rs, div)}) {
    return false;
  }
  consume({r1, sub, e, rs, r2, div});
  value_[div] = emit_activation(node, x, "softmax");
  return true;
}

// max(v, 0) + log1p(exp(-|v|)), starting at abs(v).
bool GraphLowering::softplus(int node) {
  const NodeInfo& n = nodes_[node];
  const int x = n.inputs.size() == 1 ? value_of(n.inputs[0]) : -1;
  const int neg = only_user(node, "neg");
  const int e = neg < 0 ? -1 : only_user(neg, "exp");
  const int lp = e < 0 ? -1 : only_user(e, "log1p");
  const int add = lp < 0 ? -1 : only_user(lp, "add");
  if (x < 0 || add < 0 || nodes_[add].inputs.size() != 2) return false;
  const int mx =
      nodes_[add].inputs[0].node == lp ? nodes_[add].inputs[1].node : nodes_[add].inputs[0].node;
  const int v = n.inputs[0].node;
  if (consumed_.count(mx) || nodes_[mx].op != "max" || nodes_[mx].inputs.size() != 2 ||
      !reads(mx, {v, nodes_[mx].inputs[1].node}) || !is_zero(nodes_[mx].inputs[1]) ||
      users(mx) != std::vector<int>{add}) {
    return false;
  }
  consume({neg, e, lp, mx, add});
  value_[add] = emit_activation(node, x, "softplus");
  return true;
}

// logistic(v): sigmoid, or swish when its one reader is v * logistic(v).
bool GraphLowering::logistic(int node) {
  const NodeInfo& n = nodes_[node];
  const int x = n.inputs.size() == 1 ? value_of(n.inputs[0]) : -1;
  if (x < 0) return false;
  const int v = n.inputs[0].node, mul = only_user(node, "mul");
  if (mul >= 0 && (reads(mul, {v, node}) || reads(mul, {node, v}))) {
    consume({mul});
    value_[mul] = emit_activation(node, x, "swish");
    return true;
  }
  value_[node] = emit_activation(node, x, "sigmoid");
  return true;
}

// reduce_window_max, or reduce_window_sum divided by each window's count of inputs (padding
// left out, as the lite AvgPool2D counts), over the H and W of an NHWC value.
bool GraphLowering::pool(int node) {
  const NodeInfo& n = nodes_[node];
  const int x = n.inputs.size() == 1 ? value_of(n.inputs[0]) : -1;
  if (x < 0 || shapes_[x].size() != 4) return false;
  const Attrs& a = n.attrs;
  const std::vector<int64_t>&win = a.get_ints("window"), &s = a.get_ints("strides"),
        &lo = a.get_ints("padding_low"), &hi = a.get_ints("padding_high");
  for (const char* dilation : {"base_dilation", "window_dilation"}) {
    if (a.has(dilation) && a.get_ints(dilation) != std::vector<int64_t>(4, 1)) return false;
  }
  if (win.size() != 4 || s.size() != 4 || lo.size() != 4 || hi.size() != 4 || win[0] != 1 ||
      win[3] != 1 || s[0] != 1 || s[3] != 1 || lo[0] || lo[3] || hi[0] || hi[3]) {
    return false;
  }
  FloatOp op;
  op.layer = scope(n.name);
  op.window = {win[1], win[2], s[1], s[2], lo[1], lo[2], hi[1], hi[2]};
  const std::vector<int64_t>& xs = shapes_[x];
  const int64_t oh = op.window.out_h(xs[1]), ow = op.window.out_w(xs[2]);
  op.out_shape = {-1, oh, ow, xs[3]};
  if (out_shape(node) != op.out_shape) return false;
  if (n.op == "reduce_window_max") {
    op.code = OpCode::kMaxPool2D;
    value_[node] = emit(op, {x});
    return true;
  }
  const int div = only_user(node, "div");
  if (div < 0 || nodes_[div].inputs.size() != 2 || nodes_[div].inputs[0].node != node) {
    return false;
  }
  const Tensor* counts = constant(nodes_[div].inputs[1].node);
  if (counts == nullptr || (counts->size() != 1 && counts->size() != oh * ow)) return false;
  const std::vector<float> c = counts->to(f32).to_vector<float>();
  const kernels::Window& w = op.window;
  for (int64_t oy = 0; oy < oh; ++oy) {
    for (int64_t ox = 0; ox < ow; ++ox) {
      const int64_t y = oy * w.stride_h - w.pad_top, xx = ox * w.stride_w - w.pad_left;
      const int64_t rows = std::min(y + w.kh, xs[1]) - std::max<int64_t>(y, 0);
      const int64_t cols = std::min(xx + w.kw, xs[2]) - std::max<int64_t>(xx, 0);
      if (c[counts->size() == 1 ? 0 : oy * ow + ox] != static_cast<float>(rows * cols)) {
        return false;  // another divisor: padding counted, or not an average
      }
    }
  }
  consume({div});
  op.code = OpCode::kAvgPool2D;
  value_[div] = emit(op, {x});
  return true;
}

bool GraphLowering::reshape(int node) {
  const NodeInfo& n = nodes_[node];
  const int x = n.inputs.size() == 1 ? value_of(n.inputs[0]) : -1;
  const Shape& to = n.outputs.at(0).shape;
  if (x < 0 || to.empty() || to[0] != kUnknownDim) return false;
  FloatOp op;
  op.layer = scope(n.name);
  op.code = OpCode::kReshape;
  op.out_shape = out_shape(node);
  if (per_example(op.out_shape) != per_example(shapes_[x])) return false;
  value_[node] = emit(op, {x});
  return true;
}

// add of two values of one shape; concatenate of 2-4 values along the last axis.
bool GraphLowering::join(int node) {
  const NodeInfo& n = nodes_[node];
  std::vector<int> in;
  for (const ValueRef& r : n.inputs) in.push_back(value_of(r));
  if (in.empty() || std::count(in.begin(), in.end(), -1) > 0) return false;
  FloatOp op;
  op.layer = scope(n.name);
  op.out_shape = out_shape(node);
  const std::vector<int64_t>& first = shapes_[in[0]];
  if (n.op == "add") {
    if (in.size() != 2 || shapes_[in[1]] != first || op.out_shape != first) return false;
    op.code = OpCode::kAdd;
  } else {
    const int64_t rank = static_cast<int64_t>(first.size()), axis = n.attrs.get_int("axis");
    if ((axis != -1 && axis != rank - 1) || in.size() > format::kMaxOpInputs) return false;
    for (int v : in) {
      if (shapes_[v].size() != first.size() ||
          !std::equal(first.begin(), first.end() - 1, shapes_[v].begin())) {
        return false;
      }
    }
    op.code = OpCode::kConcatenate;
  }
  value_[node] = emit(op, in);
  return true;
}

std::vector<FloatOp> GraphLowering::run(std::vector<int64_t>* input_shape, int* output) {
  const std::string what = "lite::convert: saved model " + model();
  if (exported_.inputs.size() != 1 || exported_.outputs.size() != 1) {
    throw Error(ErrorCode::kUnimplemented,
                what + " has several inputs or outputs; the lite runtime runs one of each");
  }
  const int input = node_of(exported_.inputs[0].second);
  const TensorType& in_type = nodes_.at(input).outputs.at(0);
  if (in_type.dtype != f32 || in_type.shape.empty() || in_type.shape[0] != kUnknownDim) {
    throw Error(ErrorCode::kUnimplemented,
                what + ": the input is " + in_type.str() +
                    "; the lite runtime takes f32 inputs with a batch dimension first");
  }
  *input_shape = out_shape(input);
  shapes_.push_back(*input_shape);
  value_[input] = 0;
  std::vector<int> unmatched;  // nodes reading values that no pattern took
  std::set<int> blocked;       // nodes reading what could not be lowered
  for (const NodeInfo& n : nodes_) {
    const int id = n.id;
    if (consumed_.count(id) || id == input || n.op == "placeholder" || constant(id)) continue;
    bool from_values = true;
    for (const ValueRef& r : n.inputs) {
      if (blocked.count(r.node) || std::count(unmatched.begin(), unmatched.end(), r.node)) {
        from_values = false;
      }
    }
    if (!from_values) {
      blocked.insert(id);
      continue;
    }
    bool matched = false;
    const std::string& op = n.op;
    if (op == "convolution" || op == "dot") {
      matched = weighted(id);
    } else if (op == "le" || op == "max") {
      matched = relu(id);
    } else if (op == "reduce_max") {
      matched = softmax(id) || global_pool(id);
    } else if (op == "abs") {
      matched = softplus(id);
    } else if (op == "logistic") {
      matched = logistic(id);
    } else if (op == "tanh") {
      const int x = value_of(n.inputs.at(0));
      if ((matched = x >= 0)) value_[id] = emit_activation(id, x, "tanh");
    } else if (op == "reduce_window_max" || op == "reduce_window_sum") {
      matched = pool(id);
    } else if (op == "reshape") {
      matched = reshape(id);
    } else if (op == "add" || op == "concatenate") {
      matched = join(id) || (op == "add" && affine(id));
    } else if (op == "mul" || op == "sub" || op == "div") {
      matched = (op == "mul" && gelu(id)) || affine(id);
    } else if (op == "reduce_sum") {
      matched = layer_norm(id) || global_pool(id);
    } else if (op == "identity" && n.inputs.size() == 1 && value_of(n.inputs[0]) >= 0) {
      value_[id] = value_of(n.inputs[0]);
      matched = true;
    }
    if (!matched) unmatched.push_back(id);
  }
  std::string list;
  for (int id : unmatched) {
    if (!consumed_.count(id)) list += "\n  " + nodes_[id].name + " (" + nodes_[id].op + ")";
  }
  if (!list.empty()) {
    throw Error(ErrorCode::kUnimplemented,
                what +
                    " has ops the lite runtime cannot run (it runs what Dense, Conv2D, "
                    "BatchNormalization, LayerNormalization, the 2-d pools, Flatten, Reshape, "
                    "Add, Concatenate and the activations relu, softmax, tanh, sigmoid, swish, "
                    "softplus and gelu export):" +
                    list);
  }
  const ValueRef out{node_of(exported_.outputs[0].second),
                     exported_.outputs[0].second.impl()->output};
  *output = value_of(out);
  if (*output <= 0) {
    throw Error(ErrorCode::kUnimplemented, what + " computes nothing the lite runtime runs");
  }
  simplify(output);
  return std::move(ops_);
}

// Folds what the patterns left apart: a ChannelAffine into the ChannelAffine, Dense or Conv2D
// (no activation) before it, and then a relu Activation into the Dense or Conv2D before it,
// where nothing else reads what they fold over. A batch normalization after a convolution
// exports as sub, mul, mul, add: four affines that fold into the convolution.
void GraphLowering::simplify(int* output) {
  for (bool changed = true; changed;) {
    changed = false;
    std::vector<int> readers(ops_.size() + 1, 0);
    for (const FloatOp& op : ops_) {
      for (int v : op.in) ++readers[v];
    }
    ++readers[*output];
    for (size_t i = 0; i < ops_.size() && !changed; ++i) {
      const FloatOp& op = ops_[i];
      const int x = op.in.at(0);
      if (x == 0 || readers[x] != 1) continue;
      FloatOp& p = ops_[x - 1];
      const bool weighted = p.weighted() && p.activation == Activation::kNone;
      // (A LayerNorm's gamma and beta compose the same way.)
      if (op.code == OpCode::kChannelAffine && (weighted || p.per_channel())) {
        p.fold_affine(op.weights, op.bias);
      } else if (op.code == OpCode::kActivation &&
                 op.float_kind == static_cast<int32_t>(format::FloatActivation::kRelu) &&
                 weighted) {
        p.activation = Activation::kRelu;
      } else {
        continue;
      }
      // Op i goes; its readers read x, and the values after it move down by one.
      const int gone = static_cast<int>(i) + 1;
      ops_.erase(ops_.begin() + static_cast<std::ptrdiff_t>(i));
      auto renumber = [&](int v) { return v == gone ? x : v > gone ? v - 1 : v; };
      for (FloatOp& o : ops_) {
        for (int& v : o.in) v = renumber(v);
      }
      *output = renumber(*output);
      changed = true;
    }
  }
}

}  // namespace

std::vector<FloatOp> lower_graph(const io::ExportedGraph& graph, std::vector<int64_t>* input_shape,
                                 int* output) {
  return GraphLowering(graph).run(input_shape, output);
}

}  // namespace kiln::lite
