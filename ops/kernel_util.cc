// Shared shape-function and kernel helpers.
#include "ops/kernel_util.h"

namespace kiln::ops {

std::string ints_str(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ",";
    s += std::to_string(v[i]);
  }
  return s + "]";
}

std::vector<DType> dtypes_of(TypeSet set) {
  std::vector<DType> out;
  for (DType d : {f32, f64, f16, bf16, i8, u8, i32, i64, bool_})
    if (dtype_in(set, d)) out.push_back(d);
  return out;
}

bool dtype_in(TypeSet set, DType d) {
  switch (set) {
    case TypeSet::kFloat: return is_floating(d);
    case TypeSet::kNumeric: return d != bool_;
    case TypeSet::kInteger: return is_integer(d);
    case TypeSet::kBool: return d == bool_;
    case TypeSet::kAll: return true;
  }
  return false;
}

const char* type_set_name(TypeSet set) {
  switch (set) {
    case TypeSet::kFloat: return "floating-point";
    case TypeSet::kNumeric: return "numeric";
    case TypeSet::kInteger: return "integer";
    case TypeSet::kBool: return "bool";
    case TypeSet::kAll: return "any";
  }
  return "?";
}

std::string types_str(const InferContext& ctx) {
  std::string s;
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    if (i) s += ", ";
    // Fall back to a positional name for variadic inputs.
    s += "input " + std::to_string(i) + " is " + ctx.input(i).str();
  }
  return s;
}

Shape broadcast_shapes(const InferContext& ctx, const Shape& a, const Shape& b) {
  size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da == db) out[i] = da;
    else if (da == 1) out[i] = db;
    else if (db == 1) out[i] = da;
    else if (da == kUnknownDim) out[i] = db;
    else if (db == kUnknownDim) out[i] = da;
    else
      ctx.fail("shapes " + shape_str(a) + " and " + shape_str(b) +
               " cannot be broadcast together (dimension " + std::to_string(i) + ": " +
               std::to_string(da) + " vs " + std::to_string(db) + ")");
  }
  return out;
}

int64_t normalize_axis(const InferContext& ctx, int64_t axis, int64_t rank, const Shape& shape) {
  if (axis < -rank || axis >= rank || (rank == 0 && axis != 0)) {
    ctx.fail("axis " + std::to_string(axis) + " is out of range for shape " + shape_str(shape) +
             " (rank " + std::to_string(rank) + ")");
  }
  return axis < 0 ? axis + rank : axis;
}

void require_same_dtype(const InferContext& ctx) {
  for (int i = 1; i < ctx.num_inputs(); ++i) {
    if (ctx.input(i).dtype != ctx.input(0).dtype) {
      ctx.fail("dtype mismatch: " + types_str(ctx) + " (convert one of them)");
    }
  }
}

void require_dtype_in(const InferContext& ctx, int input, TypeSet set) {
  DType d = ctx.input(input).dtype;
  if (!dtype_in(set, d)) {
    ctx.fail(std::string("expects a ") + type_set_name(set) + " input, got " +
             ctx.input(input).str());
  }
}

bool shapes_agree(const Shape& a, const Shape& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i] && a[i] != kUnknownDim && b[i] != kUnknownDim) return false;
  }
  return true;
}

std::vector<TensorType> infer_with(const InferContext& ctx, const ShapeFn& shape_fn,
                                   const std::vector<TensorType>& types) {
  return shape_fn(InferContext(ctx.op(), ctx.node_name(), types, ctx.attrs()));
}

Attrs copy_attrs(const Attrs& attrs, std::initializer_list<const char*> names) {
  Attrs out;
  for (const char* name : names) {
    if (attrs.has(name)) out.set(name, attrs.values().at(name));
  }
  return out;
}

std::vector<int64_t> broadcast_strides(const Shape& in, const Shape& out) {
  std::vector<int64_t> strides(out.size(), 0);
  std::vector<int64_t> own = row_major_strides(in);
  size_t lead = out.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i) strides[lead + i] = in[i] == 1 ? 0 : own[i];
  return strides;
}

}  // namespace kiln::ops
