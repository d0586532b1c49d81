// What every device backend shares (compiler/device_backend.h): the dots a device matmul takes.
#include "compiler/device_backend.h"

namespace kiln::compiler {

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
