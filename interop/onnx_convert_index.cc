// ONNX's element and N-d indexing ops (GatherElements, GatherND, ScatterElements, ScatterND,
// Scatter) on Kiln's one-axis gather and scatter_add: every indexed position becomes a flat
// offset into the flattened data, so one primitive serves every axis and batch layout. Einsum
// too, whose labels index the operands: diagonals, sums, then dot products.
#include <algorithm>
#include <cctype>
#include <map>

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
Tensor element_offsets(const NodeContext& c, const Tensor& indices, const Shape& ds, int64_t axis) {
  const Shape& is = static_shape(c, indices);
  if (is.size() != ds.size()) {
    c.invalid("the indices " + shape_str(is) + " must have the rank of the data " + shape_str(ds));
  }
  for (size_t d = 0; d < is.size(); ++d) {
    if (static_cast<int64_t>(d) != axis && is[d] > ds[d])
      c.invalid("the indices " + shape_str(is) + " exceed the data " + shape_str(ds));
  }
  const std::vector<int64_t> st = row_major_strides(ds);
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
    c.invalid("indices " + shape_str(is) + " with batch_dims " + std::to_string(b) +
              " do not index data " + shape_str(ds));
  }
  for (int64_t d = 0; d < b; ++d) {
    if (is[d] != ds[d])
      c.invalid("the batch dimensions of indices " + shape_str(is) + " and data " + shape_str(ds) +
                " differ");
  }
  const Shape lead(is.begin(), is.end() - 1);
  const Shape indexed(ds.begin(), ds.begin() + b + k);
  const std::vector<int64_t> st = row_major_strides(indexed);
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
    c.invalid("the updates " + shape_str(updates.shape()) + " must have the shape of the indices " +
              shape_str(is));
  }
  const int64_t m = product(is), n = product(ds);
  const Tensor offs = reshape(element_offsets(c, c.input(1), ds, axis), {m});
  const Tensor out = scatter_rows(c, reshape(x, {n, 1}), offs, reshape(updates, {m, 1}), reduction);
  return {reshape(out, ds)};
}

// ---- Einsum -----------------------------------------------------------------------------

// A label per dimension: letters as themselves, the dimensions of "..." as 1000 + their
// position counted from the right, so ellipses of different lengths line up as in NumPy.
using Labels = std::vector<int>;
constexpr int kEllipsis = 1000;

// The labels of one term; its "..." stands for `ellipsis` dimensions, or for those its operand
// (of rank `rank`) has beyond the letters when rank is known.
Labels parse_term(const NodeContext& c, const std::string& term, int64_t rank, int64_t ellipsis) {
  int64_t letters = 0;
  for (char ch : term) letters += std::isalpha(static_cast<unsigned char>(ch)) != 0;
  const size_t dots = term.find("...");
  if (rank >= 0) ellipsis = dots == std::string::npos ? 0 : rank - letters;
  if (ellipsis < 0) c.invalid("term '" + term + "' has more labels than its operand dimensions");
  Labels out;
  for (size_t i = 0; i < term.size(); ++i) {
    const char ch = term[i];
    if (i == dots) {
      for (int64_t j = ellipsis; j-- > 0;) out.push_back(kEllipsis + static_cast<int>(j));
      i += 2;
    } else if (std::isalpha(static_cast<unsigned char>(ch))) {
      out.push_back(ch);
    } else {
      c.invalid("unexpected '" + std::string(1, ch) + "' in the equation");
    }
  }
  if (rank >= 0 && static_cast<int64_t>(out.size()) != rank)
    c.invalid("term '" + term + "' does not match an operand of rank " + std::to_string(rank));
  return out;
}

// x's diagonal over its repeated labels: each repeat is gathered away, keeping the first.
Tensor take_diagonals(Tensor x, Labels& labels) {
  for (size_t i = 0; i < labels.size(); ++i) {
    for (size_t j = labels.size(); j-- > i + 1;) {
      if (labels[j] != labels[i]) continue;
      // Move axes i and j last, merge them and gather the positions k * (n + 1).
      const int64_t r = static_cast<int64_t>(labels.size());
      Axes perm;
      for (int64_t a = 0; a < r; ++a)
        if (a != static_cast<int64_t>(i) && a != static_cast<int64_t>(j)) perm.push_back(a);
      perm.push_back(static_cast<int64_t>(i));
      perm.push_back(static_cast<int64_t>(j));
      const int64_t n = x.shape()[i];
      Shape merged;
      for (int64_t a = 0; a < r - 2; ++a) merged.push_back(x.shape()[perm[a]]);
      merged.push_back(n * n);
      x = reshape(transpose(x, perm), merged);
      std::vector<int64_t> pos(n);
      for (int64_t k = 0; k < n; ++k) pos[k] = k * (n + 1);
      x = gather(x, Tensor::from_vector(pos), r - 2);
      Labels kept;
      for (int64_t a = 0; a < r - 2; ++a) kept.push_back(labels[perm[a]]);
      kept.push_back(labels[i]);
      labels = kept;
      return take_diagonals(x, labels);  // positions moved: start over
    }
  }
  return x;
}

bool contains(const Labels& l, int v) { return std::find(l.begin(), l.end(), v) != l.end(); }

// Sums x over its labels that `keep` lacks.
Tensor sum_unused(const Tensor& x, Labels& labels, const Labels& keep) {
  Axes axes;
  Labels kept;
  for (size_t i = 0; i < labels.size(); ++i) {
    if (contains(keep, labels[i]))
      kept.push_back(labels[i]);
    else
      axes.push_back(static_cast<int64_t>(i));
  }
  labels = kept;
  return axes.empty() ? x : sum(x, axes);
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
    c.invalid("the updates " + shape_str(updates.shape()) + " must have shape " + shape_str(want) +
              " (the indices' leading dimensions, then the data's unindexed)");
  }
  const int64_t m = product(offs.shape()), r = product(ds, used);
  const Tensor out = scatter_rows(c, reshape(x, {product(ds, 0, used), r}), reshape(offs, {m}),
                                  reshape(updates, {m, r}), c.attr_string("reduction", "none"));
  return {reshape(out, ds)};
}

// Operands in turn: diagonals of repeated labels, sums over labels nothing else needs, then a
// dot with the running result that contracts the labels shared and no longer needed.
Vec convert_Einsum(const NodeContext& c) {
  std::string eq = c.attr_string("equation", "");
  eq.erase(std::remove(eq.begin(), eq.end(), ' '), eq.end());
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> terms;
  for (size_t at = 0;;) {
    const size_t comma = lhs.find(',', at);
    terms.push_back(lhs.substr(at, comma == std::string::npos ? comma : comma - at));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  if (terms.size() != c.num_inputs())
    c.invalid("the equation has " + std::to_string(terms.size()) + " terms for " +
              std::to_string(c.num_inputs()) + " inputs");
  std::vector<Tensor> xs;
  std::vector<Labels> labels;
  std::map<int, int64_t> size;
  int64_t ellipsis = 0;
  for (size_t i = 0; i < terms.size(); ++i) {
    xs.push_back(c.input(i));
    labels.push_back(parse_term(c, terms[i], xs.back().rank(), 0));
    static_shape(c, xs.back());
    for (size_t d = 0; d < labels[i].size(); ++d) {
      const int l = labels[i][d];
      const int64_t n = xs[i].shape()[d];
      if (l >= kEllipsis) ellipsis = std::max<int64_t>(ellipsis, l - kEllipsis + 1);
      if (size.count(l) && size[l] != n && size[l] != 1 && n != 1)
        c.invalid("label '" + std::string(1, static_cast<char>(l < kEllipsis ? l : '.')) +
                  "' has sizes " + std::to_string(size[l]) + " and " + std::to_string(n));
      size[l] = std::max(size.count(l) ? size[l] : 1, n);
    }
  }
  Labels out;
  if (arrow != std::string::npos) {
    out = parse_term(c, eq.substr(arrow + 2), -1, ellipsis);
  } else {
    // Implicit output: the ellipsis, then the letters seen once, in alphabetical order.
    for (int64_t j = ellipsis; j-- > 0;) out.push_back(kEllipsis + static_cast<int>(j));
    std::map<int, int> count;
    for (const Labels& l : labels)
      for (int v : l) ++count[v];
    for (const auto& [v, n] : count)
      if (v < kEllipsis && n == 1) out.push_back(v);
  }
  for (int l : out) {
    if (!size.count(l)) c.invalid("an output label is in no input");
  }
  // Size-1 dimensions broadcast (the ellipsis may differ in them between operands).
  for (size_t i = 0; i < xs.size(); ++i) {
    Shape full;
    bool grow = false;
    for (size_t d = 0; d < labels[i].size(); ++d) {
      full.push_back(size[labels[i][d]]);
      grow |= full.back() != xs[i].shape()[d];
    }
    if (grow) xs[i] = broadcast_to(xs[i], full);
    xs[i] = take_diagonals(xs[i], labels[i]);
  }
  // Labels needed after operand i: the output's and those of later operands.
  auto needed_after = [&](size_t i) {
    Labels keep = out;
    for (size_t j = i + 1; j < xs.size(); ++j)
      keep.insert(keep.end(), labels[j].begin(), labels[j].end());
    return keep;
  };
  Labels acc_labels = labels[0];
  Labels keep0 = needed_after(0);
  Tensor acc = sum_unused(xs[0], acc_labels, keep0);
  for (size_t i = 1; i < xs.size(); ++i) {
    const Labels keep = needed_after(i);
    Labels b_labels = labels[i];
    Labels keep_b = keep;
    keep_b.insert(keep_b.end(), acc_labels.begin(), acc_labels.end());
    Tensor b = sum_unused(xs[i], b_labels, keep_b);
    Labels keep_a = keep;
    keep_a.insert(keep_a.end(), b_labels.begin(), b_labels.end());
    acc = sum_unused(acc, acc_labels, keep_a);
    Axes a_batch, b_batch, a_con, b_con;
    Labels result;
    for (size_t d = 0; d < acc_labels.size(); ++d) {
      const auto it = std::find(b_labels.begin(), b_labels.end(), acc_labels[d]);
      if (it == b_labels.end()) continue;
      const int64_t e = it - b_labels.begin();
      if (contains(keep, acc_labels[d])) {
        a_batch.push_back(static_cast<int64_t>(d));
        b_batch.push_back(e);
        result.push_back(acc_labels[d]);
      } else {
        a_con.push_back(static_cast<int64_t>(d));
        b_con.push_back(e);
      }
    }
    for (int l : acc_labels)
      if (!contains(b_labels, l)) result.push_back(l);
    for (int l : b_labels)
      if (!contains(acc_labels, l)) result.push_back(l);
    acc = dot(acc, b, a_con, b_con, a_batch, b_batch);
    acc_labels = result;
  }
  acc = sum_unused(acc, acc_labels, out);
  Axes perm;
  for (int l : out)
    perm.push_back(std::find(acc_labels.begin(), acc_labels.end(), l) - acc_labels.begin());
  return {transpose(acc, perm)};
}

}  // namespace kiln::onnx::internal
