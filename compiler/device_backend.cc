// What every device backend shares (compiler/device_backend.h): the dots a device matmul takes,
// the row plan of a scatter_add.
#include "compiler/device_backend.h"

#include <algorithm>

#include "ops/kernel_util.h"

namespace kiln::compiler {

std::vector<int64_t> scatter_add_plan(const Tensor& indices, int64_t dim) {
  const int64_t n = indices.size();
  const std::vector<int64_t> row = ops::indices_as_i64(indices);
  // The positions ordered by row, each row's in ascending order: a counting sort over the rows
  // when they are few for the indices, else a sort of (row, j).
  std::vector<int64_t> order(static_cast<size_t>(n));
  if (dim <= 4 * n + 4096) {
    std::vector<int64_t> start(static_cast<size_t>(dim) + 1, 0);
    for (int64_t r : row) ++start[static_cast<size_t>(r) + 1];
    for (int64_t r = 0; r < dim; ++r) start[r + 1] += start[r];
    for (int64_t j = 0; j < n; ++j) order[start[row[j]]++] = j;
  } else {
    for (int64_t j = 0; j < n; ++j) order[j] = j;
    std::sort(order.begin(), order.end(),
              [&](int64_t a, int64_t b) { return row[a] != row[b] ? row[a] < row[b] : a < b; });
  }
  std::vector<int64_t> rows, starts;
  for (int64_t t = 0; t < n; ++t)
    if (t == 0 || row[order[t]] != row[order[t - 1]]) {
      rows.push_back(row[order[t]]);
      starts.push_back(t);
    }
  starts.push_back(n);
  std::vector<int64_t> plan;
  plan.reserve(1 + rows.size() + starts.size() + order.size());
  plan.push_back(static_cast<int64_t>(rows.size()));
  plan.insert(plan.end(), rows.begin(), rows.end());
  plan.insert(plan.end(), starts.begin(), starts.end());
  plan.insert(plan.end(), order.begin(), order.end());
  return plan;
}

std::optional<DeviceDot> device_dot_geometry(const TensorType& a, const TensorType& b,
                                             const Attrs& attrs, std::string* why) {
  auto refuse = [&](std::string reason) -> std::optional<DeviceDot> {
    if (why != nullptr) *why = "the device's matmul takes no dot with " + std::move(reason);
    return std::nullopt;
  };
  if (a.dtype != b.dtype)
    return refuse(std::string("operands of ") + dtype_name(a.dtype) + " and " + dtype_name(b.dtype));
  const std::vector<int64_t> none;
  const std::vector<int64_t>& lb = attrs.has("lhs_batch") ? attrs.get_ints("lhs_batch") : none;
  const std::vector<int64_t>& rb = attrs.has("rhs_batch") ? attrs.get_ints("rhs_batch") : none;
  const size_t nb = lb.size();
  const Shape& as = a.shape;
  const Shape& bs = b.shape;
  if (rb.size() != nb || as.size() != nb + 2 || bs.size() != nb + 2)
    return refuse("operands " + shape_str(as) + " and " + shape_str(bs) +
                  " that are not matrices after their batch axes");
  DeviceDot d;
  for (size_t i = 0; i < nb; ++i) {
    if (lb[i] != static_cast<int64_t>(i) || rb[i] != static_cast<int64_t>(i) || as[i] != bs[i])
      return refuse("batch axes that do not lead both operands in order");
    d.batch *= as[i];
  }
  const std::vector<int64_t> lc = attrs.has("lhs_contract") ? attrs.get_ints("lhs_contract") : none;
  const std::vector<int64_t> rc = attrs.has("rhs_contract") ? attrs.get_ints("rhs_contract") : none;
  const int64_t first = static_cast<int64_t>(nb);
  if (lc.size() != 1 || rc.size() != 1 || lc[0] < first || rc[0] < first)
    return refuse("other than one contracted axis per operand after the batch axes");
  d.dtype = a.dtype;
  d.trans_a = lc[0] == first;
  d.trans_b = rc[0] == first + 1;
  d.m = as[nb + (d.trans_a ? 1 : 0)];
  d.k = as[nb + (d.trans_a ? 0 : 1)];
  d.n = bs[nb + (d.trans_b ? 0 : 1)];
  if (d.batch <= 0 || d.m <= 0 || d.n <= 0 || d.k <= 0) return refuse("an empty dimension");
  return d;
}

}  // namespace kiln::compiler
