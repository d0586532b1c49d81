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
  explicit Simplifier(Rewriter& rw) : rw_(rw) {}

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
      if (start[d] != 0 || limit[d] != shape[d] || shape[d] < 0) return false;
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

  Rewriter& rw_;
};

}  // namespace

bool AlgebraicSimplifier::run(Module& module) {
  Rewriter rw(module);
  Simplifier simplifier(rw);
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
