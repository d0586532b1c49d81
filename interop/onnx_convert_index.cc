// ONNX's element and N-d indexing ops (GatherElements, GatherND, ScatterElements, ScatterND,
// Scatter) on Kiln's one-axis gather and scatter_add: every indexed position becomes a flat
// offset into the flattened data, so one primitive serves every axis and batch layout.
#include <algorithm>

#include "interop/onnx_converters.h"
#include "kiln/error.h"

namespace kiln::onnx::internal {
namespace {

using Vec = std::vector<Tensor>;

// The product of s[from:to].
int64_t product(const Shape& s, int64_t from = 0, int64_t to = -1) {
  const int64_t end = to < 0 ? static_cast<int64_t>(s.size()) : to;
  int64_t n = 1;
  for (int64_t i = from; i < end; ++i) n *= s[i];
  return n;
}

// Row-major element strides of `s`.
std::vector<int64_t> strides_of(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (size_t i = s.size(); i-- > 1;) st[i - 1] = st[i] * s[i];
  return st;
}

std::string shape_text(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? "," : "") + std::to_string(s[i]);
  return out + "]";
}

// The indices as i64 with negative ones counted from the end of their dimension: `dims` holds
// one dimension for every index, or one per position along the indices' last axis. Indices
// known while importing are checked here, so a bad model fails naming the index.
Tensor wrap_indices(const NodeContext& c, const Tensor& indices, const std::vector<int64_t>& dims) {
  if (!is_integer(indices.dtype())) c.invalid("the indices must be integers");
  Tensor idx = convert(indices, i64);
  if (!idx.is_symbolic()) {
    const std::vector<int64_t> v = idx.to_vector<int64_t>();
    for (size_t i = 0; i < v.size(); ++i) {
      const int64_t dim = dims[i % dims.size()];
      if (v[i] < -dim || v[i] >= dim) {
        c.invalid("index " + std::to_string(v[i]) + " (element " + std::to_string(i) +
                  " of the indices) is out of range for a dimension of " + std::to_string(dim));
      }
    }
  }
  Tensor d = dims.size() == 1 ? Tensor::scalar<int64_t>(dims[0]) : Tensor::from_vector(dims);
  return where(less(idx, Tensor::scalar<int64_t>(0)), add(idx, d), idx);
}

// The flat offset into data (shape `ds`) of each element position of idx: its value along
// `axis`, its own coordinate along the others (GatherElements and ScatterElements).
Tensor element_offsets(const NodeContext& c, const Tensor& indices, const Shape& ds,
                       int64_t axis) {
  const Shape& is = static_shape(c, indices);
  if (is.size() != ds.size()) {
    c.invalid("the indices " + shape_text(is) + " must have the rank of the data " +
              shape_text(ds));
  }
  for (size_t d = 0; d < is.size(); ++d) {
    if (static_cast<int64_t>(d) != axis && is[d] > ds[d])
      c.invalid("the indices " + shape_text(is) + " exceed the data " + shape_text(ds));
  }
  const std::vector<int64_t> st = strides_of(ds);
  Tensor offs = mul(wrap_indices(c, indices, {ds[axis]}), Tensor::scalar<int64_t>(st[axis]));
  for (size_t d = 0; d < is.size(); ++d) {
    if (static_cast<int64_t>(d) == axis || ds[d] == 1) continue;
    offs = add(offs, mul(iota(is, static_cast<int64_t>(d), i64), Tensor::scalar<int64_t>(st[d])));
  }
  return offs;
}

// The flat offset into data's first b + k dimensions (row-major over ds[:b+k]) of each
// k-vector along the indices' last axis, b leading dimensions being batch (GatherND,
// ScatterND). The result has the indices' shape without the last axis.
Tensor nd_offsets(const NodeContext& c, const Tensor& indices, const Shape& ds, int64_t b) {
  const Shape& is = static_shape(c, indices);
  if (is.empty()) c.invalid("the indices must have rank 1 or more");
  const int64_t q = static_cast<int64_t>(is.size());
  const int64_t k = is.back();
  if (b < 0 || b >= q || b + k > static_cast<int64_t>(ds.size())) {
    c.invalid("indices " + shape_text(is) + " with batch_dims " + std::to_string(b) +
              " do not index data " + shape_text(ds));
  }
  for (int64_t d = 0; d < b; ++d) {
    if (is[d] != ds[d])
      c.invalid("the batch dimensions of indices " + shape_text(is) + " and data " +
                shape_text(ds) + " differ");
  }
  const Shape lead(is.begin(), is.end() - 1);
  const Shape indexed(ds.begin(), ds.begin() + b + k);
  const std::vector<int64_t> st = strides_of(indexed);
  Tensor offs = zeros(lead, i64);
  if (k > 0) {
    const std::vector<int64_t> dims(indexed.begin() + b, indexed.end());
    Tensor idx = wrap_indices(c, indices, dims);
    const std::vector<int64_t> kst(st.begin() + b, st.end());
    offs = sum(mul(idx, Tensor::from_vector(kst)), {q - 1});
  }
  for (int64_t d = 0; d < b; ++d)
    offs = add(offs, mul(iota(lead, d, i64), Tensor::scalar<int64_t>(st[d])));
  return offs;
}

// Pairwise reductions touch every (update, target) pair: fine for the small tensors that use
// them, refused past this many elements.
constexpr int64_t kMaxPairwiseElements = int64_t{1} << 24;

// data2 [N, R] with rows offs [M] combined with updates [M, R] by `reduction`.
Tensor scatter_rows(const NodeContext& c, const Tensor& data2, const Tensor& offs,
                    const Tensor& updates, const std::string& reduction) {
  const int64_t n = data2.shape()[0], r = data2.shape()[1], m = offs.shape()[0];
  if (updates.dtype() != data2.dtype()) c.invalid("the updates must have the dtype of the data");
  const bool boolean = data2.dtype() == bool_;
  if (reduction == "add") {
    if (boolean) c.unsupported("reduction 'add' on bool data");
    return scatter_add(data2, offs, updates, 0);
  }
  if (reduction == "none") {
    // Targets are distinct (ONNX leaves duplicates undefined), so adding into zeros places
    // each update; a count of hits says which rows to take.
    const Tensor hits = scatter_add(zeros(Shape{n}, i32), offs, ones(Shape{m}, i32), 0);
    const Tensor u = boolean ? convert(updates, u8) : updates;
    Tensor placed = scatter_add(zeros(Shape{n, r}, u.dtype()), offs, u, 0);
    if (boolean) placed = convert(placed, bool_);
    return where(reshape(greater(hits, Tensor::scalar<int32_t>(0)), {n, 1}), placed, data2);
  }
  if (reduction != "mul" && reduction != "max" && reduction != "min")
    c.invalid("reduction '" + reduction + "'");
  if (m * n * r > kMaxPairwiseElements || m == 0) {
    c.unsupported("reduction '" + reduction + "' over " + std::to_string(m) + " updates into " +
                  std::to_string(n * r) + " elements (Kiln has only an additive scatter)");
  }
  // hit[m, n]: update m targets row n. Untouched pairs contribute the row itself, which
  // leaves max and min unchanged; for mul they contribute 1.
  const Tensor hit = reshape(one_hot(offs, n, bool_), {m, n, 1});
  const Tensor u = reshape(updates, {m, 1, r});
  if (reduction == "mul") return mul(data2, prod(where(hit, u, scalar_of(1, u.dtype())), {0}));
  const Tensor picked = where(hit, u, reshape(data2, {1, n, r}));
  return reduction == "max" ? maximum(data2, max(picked, {0})) : minimum(data2, min(picked, {0}));
}

Vec scatter_elements(const NodeContext& c, const std::string& reduction) {
  const Tensor& x = c.input(0);
  const Shape& ds = static_shape(c, x);
  if (ds.empty()) c.invalid("the data must have rank 1 or more");
  const int64_t axis = normalize_axis(c, c.attr_int("axis", 0), x.rank());
  const Tensor& updates = c.input(2);
  const Shape& is = static_shape(c, c.input(1));
  if (static_shape(c, updates) != is) {
    c.invalid("the updates " + shape_text(updates.shape()) + " must have the shape of the indices " +
              shape_text(is));
  }
  const int64_t m = product(is), n = product(ds);
  const Tensor offs = reshape(element_offsets(c, c.input(1), ds, axis), {m});
  const Tensor out = scatter_rows(c, reshape(x, {n, 1}), offs, reshape(updates, {m, 1}), reduction);
  return {reshape(out, ds)};
}

}  // namespace

Vec convert_GatherElements(const NodeContext& c) {
  const Tensor& x = c.input(0);
  const Shape& ds = static_shape(c, x);
  if (ds.empty()) c.invalid("the data must have rank 1 or more");
  const int64_t axis = normalize_axis(c, c.attr_int("axis", 0), x.rank());
  const Tensor offs = element_offsets(c, c.input(1), ds, axis);
  return {gather(reshape(x, {product(ds)}), offs, 0)};
}

Vec convert_ScatterElements(const NodeContext& c) {
  return scatter_elements(c, c.attr_string("reduction", "none"));
}

Vec convert_Scatter(const NodeContext& c) { return scatter_elements(c, "none"); }

// data [B..., K..., R...] viewed as [B*K, R]: each index vector picks a row.
Vec convert_GatherND(const NodeContext& c) {
  const Tensor& x = c.input(0);
  const Shape& ds = static_shape(c, x);
  const int64_t b = c.attr_int("batch_dims", 0);
  const Tensor offs = nd_offsets(c, c.input(1), ds, b);
  const int64_t used = b + c.input(1).shape().back();
  Shape out = offs.shape();
  out.insert(out.end(), ds.begin() + used, ds.end());
  const Tensor rows = reshape(x, {product(ds, 0, used), product(ds, used)});
  return {reshape(gather(rows, offs, 0), out)};
}

Vec convert_ScatterND(const NodeContext& c) {
  const Tensor& x = c.input(0);
  const Shape& ds = static_shape(c, x);
  const Tensor offs = nd_offsets(c, c.input(1), ds, 0);
  const int64_t used = c.input(1).shape().back();
  Shape want = offs.shape();
  want.insert(want.end(), ds.begin() + used, ds.end());
  const Tensor& updates = c.input(2);
  if (static_shape(c, updates) != want) {
    c.invalid("the updates " + shape_text(updates.shape()) + " must have shape " +
              shape_text(want) + " (the indices' leading dimensions, then the data's unindexed)");
  }
  const int64_t m = product(offs.shape()), r = product(ds, used);
  const Tensor out = scatter_rows(c, reshape(x, {product(ds, 0, used), r}), reshape(offs, {m}),
                                  reshape(updates, {m, r}), c.attr_string("reduction", "none"));
  return {reshape(out, ds)};
}

}  // namespace kiln::onnx::internal
