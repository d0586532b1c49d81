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

}  // namespace

bool LayoutFolding::run(Module& module) {
  Rewriter rw(module);
  bool changed = false;
  for (int id = 0; id < rw.num_old(); ++id) {
    const detail::Node& old = rw.old_node(id);
    if ((old.op != "dot" && old.op != "fused_dot") || old.inputs.size() < 2) {
      rw.keep(id);
      continue;
    }
    detail::Node node = old;
    for (ValueRef& in : node.inputs) in = rw.map(in);
    bool folded = false;
    for (int i = 0; i < 2; ++i) {
      const detail::Node& t = rw.new_node(node.inputs[i].node);
      if (t.op != "transpose") continue;
      const std::string side = i == 0 ? "lhs" : "rhs";
      const std::vector<int64_t> perm = normalized(t.attrs.get_ints("perm"));
      std::string why;
      std::optional<Folded> f = fold_operand(node.attrs, side, perm, &why);
      const TensorType& x = rw.new_type(t.inputs[0]);
      if (f) {
        const std::vector<int64_t> free =
            free_dims(static_cast<int64_t>(perm.size()), f->batch, f->contract);
        // lhs reads as [B, M, K], rhs as [B, K, N]; Eigen also reads either transposed.
        const auto rows_first = concat({&f->batch, &free, &f->contract});
        const auto contract_first = concat({&f->batch, &f->contract, &free});
        const bool in_place = i == 0 ? read_in_place(x.dtype, x.shape, rows_first, contract_first)
                                     : read_in_place(x.dtype, x.shape, contract_first, rows_first);
        if (!in_place) why = "the kernel would copy " + x.str() + " to read it";
      }
      if (!why.empty()) {
        note(label(old, id) + ": keeps its " + side + " transpose: " + why);
        continue;
      }
      Attrs attrs = node.attrs;
      if (!f->batch.empty() || attrs.has(side + "_batch")) attrs.set(side + "_batch", f->batch);
      attrs.set(side + "_contract", f->contract);
      std::vector<TensorType> in_types;
      ValueRef source = t.inputs[0];
      for (int k = 0; k < static_cast<int>(node.inputs.size()); ++k)
        in_types.push_back(k == i ? x : rw.new_type(node.inputs[k]));
      if (!keeps_types(old, in_types, attrs)) continue;  // (a bug guard: it always should)
      node.attrs = std::move(attrs);
      node.inputs[i] = source;
      folded = true;
    }
    if (!folded) {
      rw.keep(id);
      continue;
    }
    rw.replace(id, std::move(node));
    changed = true;
  }
  if (!changed) return false;
  module = rw.finish();
  return true;
}

}  // namespace kiln::compiler
