// Transpose folding into dot and fused_dot operands: rewrites the operand's dimension attributes
// through the transpose's permutation when the kernel then reads the source in place.
#include "compiler/passes/layout.h"

#include <algorithm>
#include <optional>

#include "ops/dot_util.h"
#include "runtime/execute.h"

namespace kiln::compiler {
namespace {

using ops::concat;
using ops::free_dims;
using ops::ints_or_empty;
using ops::is_layout;

// Whether the dot kernel reads an operand of this dtype and shape without a copy: stored as
// `canonical`, or (floating point only) as `swapped`. f16/bf16 operands are always converted
// through a copy, which reads any layout, so for them every layout counts. An unknown dimension
// is not taken to be 1, so a layout accepted here is in place for any size it takes at run time.
bool read_in_place(DType t, const Shape& shape, const std::vector<int64_t>& canonical,
                   const std::vector<int64_t>& swapped) {
  if (t == f16 || t == bf16) return true;
  if (is_layout(shape, canonical)) return true;
  return (t == f32 || t == f64) && is_layout(shape, swapped);
}

std::string label(const detail::Node& node, int id) {
  return "%" + std::to_string(id) + " " + node.name + " (" + node.op + ")";
}

// The operand's batch and contracting dimensions renamed through the transpose that produces it.
struct Folded {
  std::vector<int64_t> batch, contract;
};

// Operand `side` ("lhs"/"rhs") of a dot with `attrs` is transpose(x, perm) of rank `rank`; the
// dot's dimensions of x instead, or why not.
std::optional<Folded> fold_operand(const Attrs& attrs, const std::string& side,
                                   const std::vector<int64_t>& perm, std::string* why) {
  const int64_t rank = static_cast<int64_t>(perm.size());
  const std::vector<int64_t> batch = ints_or_empty(attrs, side + "_batch");
  const std::vector<int64_t> contract = ints_or_empty(attrs, side + "_contract");
  // The output lists an operand's free dimensions in increasing order: they must stay in order.
  int64_t prev = -1;
  for (int64_t d : free_dims(rank, batch, contract)) {
    if (perm[d] < prev) {
      *why = "it would reorder the dot's output dimensions";
      return std::nullopt;
    }
    prev = perm[d];
  }
  Folded f;
  for (int64_t d : batch) f.batch.push_back(perm.at(d));
  for (int64_t d : contract) f.contract.push_back(perm.at(d));
  return f;
}

// Whether `node` with these inputs and attributes still has its recorded output types.
bool keeps_types(const detail::Node& node, const std::vector<TensorType>& inputs,
                 const Attrs& attrs) {
  try {
    return runtime::infer_types(OpRegistry::global().find(node.op), node.name, inputs, attrs) ==
           node.outputs;
  } catch (const Error&) {
    return false;
  }
}

std::vector<int64_t> normalized(std::vector<int64_t> perm) {
  const int64_t r = static_cast<int64_t>(perm.size());
  for (int64_t& p : perm) p = p < 0 ? p + r : p;
  return perm;
}

// Operand `side` of a dot reads a value of this type in place with these batch and contracting
// dimensions (lhs as [B, M, K], rhs as [B, K, N]; Eigen also reads either one transposed).
bool operand_in_place(const TensorType& x, bool lhs, const std::vector<int64_t>& batch,
                      const std::vector<int64_t>& contract) {
  const std::vector<int64_t> free =
      free_dims(static_cast<int64_t>(x.shape.size()), batch, contract);
  const auto free_first = concat({&batch, &free, &contract});
  const auto contract_first = concat({&batch, &contract, &free});
  return lhs ? read_in_place(x.dtype, x.shape, free_first, contract_first)
             : read_in_place(x.dtype, x.shape, contract_first, free_first);
}

class Folder {
 public:
  Folder(const Module& module, Rewriter& rw, std::vector<std::string>& notes)
      : rw_(rw), notes_(notes), uses_(rw.num_old(), 0) {
    for (int id = 0; id < rw.num_old(); ++id)
      for (const ValueRef& in : rw.old_node(id).inputs) ++uses_[in.node];
    for (const ValueRef& v : module.outputs) ++uses_[v.node];
  }

  // dot(transpose(x), y) -> dot(x, y) with x's dimensions (either operand, or both).
  bool fold_operands(int id) {
    const detail::Node& old = rw_.old_node(id);
    detail::Node node = old;
    for (ValueRef& in : node.inputs) in = rw_.map(in);
    bool folded = false;
    for (int i = 0; i < 2; ++i) {
      const detail::Node& t = rw_.new_node(node.inputs[i].node);
      if (t.op != "transpose") continue;
      const std::string side = i == 0 ? "lhs" : "rhs";
      std::string why;
      std::optional<Folded> f =
          fold_operand(node.attrs, side, normalized(t.attrs.get_ints("perm")), &why);
      const TensorType& x = rw_.new_type(t.inputs[0]);
      if (f && !operand_in_place(x, i == 0, f->batch, f->contract))
        why = "the kernel would copy " + x.str() + " to read it";
      if (!why.empty()) {
        notes_.push_back(label(old, id) + ": keeps its " + side + " transpose: " + why);
        continue;
      }
      Attrs attrs = node.attrs;
      if (!f->batch.empty() || attrs.has(side + "_batch")) attrs.set(side + "_batch", f->batch);
      attrs.set(side + "_contract", f->contract);
      std::vector<TensorType> in_types;
      for (int k = 0; k < static_cast<int>(node.inputs.size()); ++k)
        in_types.push_back(k == i ? x : rw_.new_type(node.inputs[k]));
      if (!keeps_types(old, in_types, attrs)) continue;  // (a bug guard: it always should)
      node.attrs = std::move(attrs);
      node.inputs[i] = t.inputs[0];
      folded = true;
    }
    if (folded) rw_.replace(id, std::move(node));
    return folded;
  }

  // transpose(dot(a, b)) that puts b's free dimensions before a's (the batch ones first, each
  // group in order) -> dot(b, a), when nothing else reads dot(a, b): the backward pass of
  // x . transpose(w) computes dw as transpose(dot(x, dz)).
  bool fold_output(int id) {
    const detail::Node& old = rw_.old_node(id);
    const ValueRef in = old.inputs[0];
    if (rw_.old_node(in.node).op != "dot") return false;
    const detail::Node& d = rw_.new_node(rw_.map(in).node);  // with its operands folded
    if (d.op != "dot") return false;
    const TensorType& a = rw_.new_type(d.inputs[0]);
    const TensorType& b = rw_.new_type(d.inputs[1]);
    const std::vector<int64_t> a_batch = ints_or_empty(d.attrs, "lhs_batch");
    const std::vector<int64_t> a_contract = ints_or_empty(d.attrs, "lhs_contract");
    const std::vector<int64_t> b_batch = ints_or_empty(d.attrs, "rhs_batch");
    const std::vector<int64_t> b_contract = ints_or_empty(d.attrs, "rhs_contract");
    const int64_t nb = static_cast<int64_t>(a_batch.size());
    const int64_t na = static_cast<int64_t>(a.shape.size() - a_batch.size() - a_contract.size());
    const int64_t nf = static_cast<int64_t>(b.shape.size() - b_batch.size() - b_contract.size());
    std::vector<int64_t> swap;
    for (int64_t i = 0; i < nb; ++i) swap.push_back(i);
    for (int64_t i = 0; i < nf; ++i) swap.push_back(nb + na + i);
    for (int64_t i = 0; i < na; ++i) swap.push_back(nb + i);
    if (na == 0 || nf == 0 || normalized(old.attrs.get_ints("perm")) != swap) return false;
    if (uses_[in.node] != 1) {
      notes_.push_back(label(old, id) + ": stays: its dot has other users");
      return false;
    }
    if (!operand_in_place(b, true, b_batch, b_contract) ||
        !operand_in_place(a, false, a_batch, a_contract)) {
      notes_.push_back(label(old, id) + ": stays: the swapped dot would copy an operand");
      return false;
    }
    detail::Node node = d;
    node.name = old.name;
    node.inputs = {d.inputs[1], d.inputs[0]};
    for (const char* dims : {"_batch", "_contract"}) {
      node.attrs.set(std::string("lhs") + dims, ints_or_empty(d.attrs, std::string("rhs") + dims));
      node.attrs.set(std::string("rhs") + dims, ints_or_empty(d.attrs, std::string("lhs") + dims));
    }
    node.outputs = old.outputs;
    if (!keeps_types(node, {b, a}, node.attrs)) return false;  // (a bug guard)
    rw_.replace(id, std::move(node));
    return true;
  }

 private:
  Rewriter& rw_;
  std::vector<std::string>& notes_;
  std::vector<int> uses_;  // per old node: its inputs' readers and module outputs
};

}  // namespace

bool LayoutFolding::run(Module& module) {
  Rewriter rw(module);
  std::vector<std::string> notes;
  Folder folder(module, rw, notes);
  bool changed = false;
  for (int id = 0; id < rw.num_old(); ++id) {
    const detail::Node& old = rw.old_node(id);
    bool is_dot = (old.op == "dot" || old.op == "fused_dot") && old.inputs.size() >= 2;
    if ((is_dot && folder.fold_operands(id)) || (old.op == "transpose" && folder.fold_output(id))) {
      changed = true;
    } else {
      rw.keep(id);
    }
  }
  for (std::string& line : notes) note(std::move(line));
  if (!changed) return false;
  module = rw.finish();
  return true;
}

}  // namespace kiln::compiler
