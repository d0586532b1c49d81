// Names and arities of the elemental primitives (kiln/elemental.h).
#include "kiln/elemental.h"

namespace kiln {
namespace {

struct PrimInfo {
  Prim prim;
  const char* name;
  int arity;
};

constexpr PrimInfo kPrims[] = {
#define KILN_PRIM_INFO_(e, name, arity) {Prim::e, name, arity},
    KILN_ELEMENTAL_PRIMS(KILN_PRIM_INFO_)
#undef KILN_PRIM_INFO_
};

}  // namespace

const std::vector<Prim>& all_prims() {
  static const std::vector<Prim> prims = [] {
    std::vector<Prim> v;
    for (const PrimInfo& p : kPrims) v.push_back(p.prim);
    return v;
  }();
  return prims;
}

// The enumerators are declared in kPrims' order, so a primitive indexes its own entry.
const char* prim_name(Prim prim) { return kPrims[static_cast<int>(prim)].name; }
int prim_arity(Prim prim) { return kPrims[static_cast<int>(prim)].arity; }

std::optional<Prim> prim_from_name(std::string_view name) {
  for (const PrimInfo& p : kPrims)
    if (name == p.name) return p.prim;
  return std::nullopt;
}

const char* reduce_kind_name(ReduceKind kind) {
  switch (kind) {
    case ReduceKind::kSum: return "reduce_sum";
    case ReduceKind::kProd: return "reduce_prod";
    case ReduceKind::kMax: return "reduce_max";
    case ReduceKind::kMin: return "reduce_min";
  }
  return "reduce_?";
}

StridedView row_major_view(const Shape& shape) {
  StridedView v;
  v.strides.assign(shape.size(), 0);
  int64_t st = 1;
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    v.strides[d] = shape[d] == 1 ? 0 : st;
    st *= shape[d];
  }
  return v;
}

}  // namespace kiln
