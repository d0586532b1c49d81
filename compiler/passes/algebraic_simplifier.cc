// Rewrites that remove work without changing a single bit of any result. Rules that are exact
// only up to signed zeros or NaNs (x+0.0, floating-point x*0) are deliberately left out.
#include "compiler/passes/algebraic_simplifier.h"

#include <cmath>
#include <optional>

namespace kiln::compiler {
namespace {

// Whether node is a constant every element of which satisfies pred.
template <typename Pred>
bool constant_all(const detail::Node& node, Pred pred) {
  if (node.op != "constant") return false;
  for (double v : node.attrs.get_tensor("value").to_vector<double>()) {
    if (!pred(v)) return false;
  }
  return true;
}

bool is_one(const detail::Node& n) {
  return constant_all(n, [](double v) { return v == 1; });
}
// The zero that x + zero leaves x unchanged for every x: -0.0 for floats (x + +0.0 turns -0.0
// into +0.0), any zero for integers.
bool is_additive_identity(const detail::Node& n, DType dtype) {
  bool fp = is_floating(dtype);
  return constant_all(n, [fp](double v) { return v == 0 && (!fp || std::signbit(v)); });
}
// The zero that x - zero leaves x unchanged for every x: +0.0 for floats.
bool is_subtractive_identity(const detail::Node& n, DType dtype) {
  bool fp = is_floating(dtype);
  return constant_all(n, [fp](double v) { return v == 0 && (!fp || !std::signbit(v)); });
}

// x * 0 = 0 only for integers: for floats NaN * 0 and inf * 0 are NaN, and -1.0 * 0 is -0.0.
bool is_integer_zero(const detail::Node& n, DType dtype) {
  return is_integer(dtype) && constant_all(n, [](double v) { return v == 0; });
}

bool known(const Shape& s) { return num_elements(s) >= 0; }

bool is_iota(const std::vector<int64_t>& v) {
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] != static_cast<int64_t>(i)) return false;
  }
  return true;
}

std::vector<int64_t> normalized_perm(const std::vector<int64_t>& perm) {
  std::vector<int64_t> out = perm;
  int64_t r = static_cast<int64_t>(perm.size());
  for (int64_t& p : out) p = p < 0 ? p + r : p;
  return out;
}

class Simplifier {
 public:
  Simplifier(Rewriter& rw, const Module& module, bool mask_max_grads)
      : rw_(rw), uses_(rw.num_old(), 0), mask_max_grads_(mask_max_grads) {
    for (int id = 0; id < rw.num_old(); ++id) {
      for (const ValueRef& v : rw.old_node(id).inputs) ++uses_[v.node];
    }
    for (const ValueRef& v : module.outputs) ++uses_[v.node];
  }

  // Rewrites old node `id` if a rule applies; returns whether one did.
  bool simplify(int id) {
    const detail::Node& n = rw_.old_node(id);
    const std::string& op = n.op;
    if (op == "add") {
      return forward_if(id, 0, is_additive_identity(in(id, 1), dtype(id))) ||
             forward_if(id, 1, is_additive_identity(in(id, 0), dtype(id)));
    }
    if (op == "sub") return forward_if(id, 0, is_subtractive_identity(in(id, 1), dtype(id)));
    if (op == "mul") {
      return forward_if(id, 0, is_one(in(id, 1))) || forward_if(id, 1, is_one(in(id, 0))) ||
             forward_if(id, 1, is_integer_zero(in(id, 1), dtype(id))) ||
             forward_if(id, 0, is_integer_zero(in(id, 0), dtype(id)));
    }
    if (op == "div") return forward_if(id, 0, is_one(in(id, 1)));
    if (op == "neg" && in(id, 0).op == "neg") return forward_value(id, in(id, 0).inputs[0]);
    if (op == "convert") return forward_if(id, 0, true);  // the type check decides
    if (op == "reshape") return forward_if(id, 0, known(n.outputs[0].shape)) || reshape(id);
    if (op == "transpose") return transpose(id);
    if (op == "broadcast_in_dim") return forward_if(id, 0, is_iota(n.attrs.get_ints("dims")));
    if (op == "slice") return forward_if(id, 0, identity_slice(id));
    if (op == "select") return mask_max_grads_ && relu_masked_max_grad(id);
    if (op == "random_uniform" || op == "random_normal" || op == "random_bernoulli")
      return random_without_like(id);
    return false;
  }

 private:
  const detail::Node& in(int id, int i) const { return rw_.input_node(id, i); }
  DType dtype(int id) const { return rw_.old_node(id).outputs[0].dtype; }

  // Replaces node id by its input `i` if `cond` holds and the types agree exactly (so x * 1
  // with a broadcasting 1 stays).
  bool forward_if(int id, int i, bool cond) {
    return cond && forward_value(id, rw_.map(rw_.old_node(id).inputs[i]));
  }
  bool forward_value(int id, ValueRef v) {
    if (rw_.new_type(v) != rw_.old_node(id).outputs[0]) return false;
    rw_.alias(id, {v});
    return true;
  }

  bool identity_slice(int id) const {
    const detail::Node& n = rw_.old_node(id);
    const Shape& shape = rw_.new_type(rw_.map(n.inputs[0])).shape;
    const auto& start = n.attrs.get_ints("start");
    const auto& limit = n.attrs.get_ints("limit");
    std::vector<int64_t> strides =
        n.attrs.has("strides") ? n.attrs.get_ints("strides") : std::vector<int64_t>{};
    if (start.size() != shape.size() || limit.size() != shape.size()) return false;
    for (size_t d = 0; d < shape.size(); ++d) {
      if (start[d] != 0 || (limit[d] != shape[d] && limit[d] != kUnknownDim) || shape[d] < 0)
        return false;
      if (!strides.empty() && strides[d] != 1) return false;
    }
    return true;
  }

  // reshape(reshape(x)) -> reshape(x): a reshape depends only on the element count.
  bool reshape(int id) {
    const detail::Node& inner = in(id, 0);
    if (inner.op != "reshape") return false;
    detail::Node node = rw_.old_node(id);
    node.inputs = {inner.inputs[0]};
    rw_.replace(id, std::move(node));
    return true;
  }

  // transpose(transpose(x, p), q) -> transpose(x, p∘q), or x when that is the identity.
  bool transpose(int id) {
    const detail::Node& n = rw_.old_node(id);
    std::vector<int64_t> perm = normalized_perm(n.attrs.get_ints("perm"));
    const detail::Node& inner = in(id, 0);
    ValueRef source = rw_.map(n.inputs[0]);
    bool composed = false;
    if (inner.op == "transpose") {
      std::vector<int64_t> p = normalized_perm(inner.attrs.get_ints("perm"));
      for (int64_t& q : perm) q = p.at(q);
      source = inner.inputs[0];
      composed = true;
    }
    if (is_iota(perm) && forward_value(id, source)) return true;
    if (!composed) return false;
    detail::Node node = n;
    node.inputs = {source};
    node.attrs.set("perm", perm);
    rw_.replace(id, std::move(node));
    return true;
  }

  // select(x <= 0, +0, reduce_window_max_grad(x, dy)) -> reduce_window_max_grad(x, dy) with
  // relu_mask: the gradient of a relu before a max pool, folded into the pool's gradient so
  // that it costs no pass of its own. The mask is x <= 0 itself (x = relu(z) after the epilogue
  // pass), or z <= 0 where x = select(z <= 0, 0, z) (relu as recorded): either way it holds
  // exactly where the masked kernel sees a window maximum <= 0. The gradient must have no
  // other reader, and the select's zero must be +0.0, the zero the masked kernel writes.
  bool relu_masked_max_grad(int id) {
    const detail::Node& n = rw_.old_node(id);
    const detail::Node& grad_old = rw_.old_node(n.inputs[2].node);
    if (grad_old.op != "reduce_window_max_grad" || uses_[n.inputs[2].node] != 1 ||
        grad_old.attrs.get_bool("relu_mask", false) ||
        !is_subtractive_identity(in(id, 1), dtype(id)) || !is_floating(dtype(id)) ||
        rw_.new_type(rw_.map(n.inputs[2])) != n.outputs[0]) {
      return false;
    }
    const ValueRef mask = rw_.map(n.inputs[0]);
    const detail::Node& grad = in(id, 2);
    const ValueRef x = grad.inputs[0];
    if (!is_nonpositive_test(mask, x)) {
      const detail::Node& relu = rw_.new_node(x.node);  // x = select(z <= 0, 0, z)?
      if (relu.op != "select" || relu.inputs[0] != mask ||
          !constant_all(rw_.new_node(relu.inputs[1].node), [](double v) { return v == 0; }) ||
          !is_nonpositive_test(mask, relu.inputs[2])) {
        return false;
      }
    }
    detail::Node masked = grad;
    masked.name = n.name;
    masked.attrs.set("relu_mask", true);
    rw_.replace(id, std::move(masked));
    return true;
  }

  // random_*(seed, shape_like) -> random_*(seed) with the like-tensor's shape as its "shape"
  // attribute, where that shape is known: the kernel reads only the like-tensor's shape (element
  // i's bits depend on the seed and i alone), so the values are the same, and the dependency
  // on the like-tensor's data goes (dropout's mask no longer waits for the activations, and a
  // device program no longer copies them to the host for it).
  bool random_without_like(int id) {
    const detail::Node& n = rw_.old_node(id);
    if (n.inputs.size() != 2 || n.outputs.size() != 1 || !known(n.outputs[0].shape)) return false;
    detail::Node r = n;
    r.inputs = {rw_.map(n.inputs[0])};
    r.attrs.set("shape", n.outputs[0].shape);
    rw_.replace(id, std::move(r));
    return true;
  }

  // Whether `mask` is le(v, 0) (either signed zero: v <= -0.0 and v <= +0.0 agree).
  bool is_nonpositive_test(ValueRef mask, ValueRef v) const {
    const detail::Node& le = rw_.new_node(mask.node);
    return le.op == "le" && le.inputs.size() == 2 && le.inputs[0] == v &&
           constant_all(rw_.new_node(le.inputs[1].node), [](double c) { return c == 0; });
  }

  Rewriter& rw_;
  std::vector<int> uses_;  // per old node: how many inputs and outputs read it
  bool mask_max_grads_;
};

}  // namespace

bool AlgebraicSimplifier::run(Module& module) {
  Rewriter rw(module);
  Simplifier simplifier(rw, module, mask_max_grads_);
  bool changed = false;
  for (int id = 0; id < rw.num_old(); ++id) {
    if (simplifier.simplify(id)) {
      changed = true;
    } else {
      rw.keep(id);
    }
  }
  if (!changed) return false;
  module = rw.finish();
  return true;
}

}  // namespace kiln::compiler
