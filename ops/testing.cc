// Comparison helpers for tests: allclose on concrete tensors, computed in f64.
#include <cmath>

#include "kiln/ops.h"
#include "src/core/type_switch.h"

namespace kiln {
namespace {

// Element values as f64, read directly (no op is run, so it works inside a graph scope too).
std::vector<double> values_f64(const Tensor& t) {
  std::vector<double> out(t.size());
  visit_dtype(t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p = static_cast<const T*>(t.raw_data());
    for (size_t i = 0; i < out.size(); ++i) {
      out[i] = static_cast<double>(static_cast<ComputeType<T>>(p[i]));
    }
  });
  return out;
}

bool close(double a, double b, double rtol, double atol) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  if (std::isinf(a) || std::isinf(b)) return a == b;
  return std::abs(a - b) <= atol + rtol * std::abs(b);
}

void require_concrete(const Tensor& t, const char* which) {
  if (!t.defined() || t.is_symbolic()) {
    throw Error(ErrorCode::kInvalidArgument,
                std::string("allclose: ") + which + " must be a concrete tensor, got " +
                    (t.defined() ? "a symbolic one (" + t.name() + "); run the graph first"
                                 : "an undefined tensor"));
  }
}

}  // namespace

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol) {
  require_concrete(a, "a");
  require_concrete(b, "b");
  if (a.shape() != b.shape()) return false;
  std::vector<double> va = values_f64(a), vb = values_f64(b);
  for (size_t i = 0; i < va.size(); ++i) {
    if (!close(va[i], vb[i], rtol, atol)) return false;
  }
  return true;
}

}  // namespace kiln
