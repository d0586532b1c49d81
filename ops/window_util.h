// Sliding windows, shared by convolution (ops/conv.cc) and windowed reductions (ops/pool.cc):
// per-dimension attributes, the Keras padding rule, a window's tap table, and the multi-index
// step their loops take.
#pragma once

#include <string>
#include <type_traits>
#include <vector>

#include "kiln/op_registry.h"
#include "ops/kernel_util.h"

namespace kiln::ops {

// Window and convolution attributes are bounded so that no size computation can overflow.
inline constexpr int64_t kMaxAttr = int64_t{1} << 24;

// A per-dimension attribute of `count` values in [min, kMaxAttr]; `fallback` (>= 0) fills it
// when absent, otherwise it is required. `per` names the dimensions in the error message
// ("spatial dimension (2)").
template <class Ctx>
std::vector<int64_t> per_dim_attr(const Ctx& ctx, const char* name, size_t count, int64_t fallback,
                                  int64_t min, const std::string& per) {
  if (!ctx.attrs().has(name) && fallback >= 0) return std::vector<int64_t>(count, fallback);
  const std::vector<int64_t>& v = ctx.attrs().get_ints(name);
  if (v.size() != count) {
    ctx.fail(std::string(name) + " " + ints_str(v) + " must have one value per " + per);
  }
  for (int64_t x : v) {
    if (x < min || x > kMaxAttr) {
      ctx.fail(std::string(name) + " " + ints_str(v) + " must hold values in [" +
               std::to_string(min) + ", " + std::to_string(kMaxAttr) + "]");
    }
  }
  return v;
}

// Keras/TF padding of a window sweep over `in` (one entry per swept dimension): "valid" pads
// nothing; "same" pads so that out = ceil(in / stride), the odd element going to the high side.
// `what` names the operands for error messages.
void keras_padding(const std::string& op, const std::string& padding, const Shape& in,
                   const std::vector<int64_t>& window, const std::vector<int64_t>& strides,
                   const std::string& what, std::vector<int64_t>& low, std::vector<int64_t>& high);

// The sweep of one dimension of `n` elements by `out` windows of `taps` taps, as a table:
// entry [o * taps + k] is the input position under tap k of window o, that is
// o * stride - low + k * dilation in the input dilated by `lhs_dilation`, or -1 where the tap
// falls on padding or on a hole of the dilated input. The table holds every div and mod of the
// window arithmetic, so the loops that read it have none.
std::vector<int64_t> window_table(int64_t n, int64_t out, int64_t taps, int64_t stride, int64_t low,
                                  int64_t dilation = 1, int64_t lhs_dilation = 1);

// Whether v takes over from w as a window's maximum, reduce_window_max's rule: a greater value,
// or the first NaN (a NaN, once taken, stays). Every kernel that must give that op's bits
// (ops/pool.cc, compiler/cpu/fused_conv.cc's pooled output) decides with it.
template <class C>
inline bool takes_max(C v, C w) {
  if constexpr (std::is_floating_point_v<C>) {
    return (v > w) | ((v != v) & (w == w));
  } else {
    return v > w;
  }
}

// Steps a multi-index (row-major, last dimension fastest) to the next position; returns true
// when it wraps around to all zeros.
inline bool next_index(std::vector<int64_t>& idx, const Shape& dims) {
  for (size_t i = idx.size(); i-- > 0;) {
    if (++idx[i] < dims[i]) return false;
    idx[i] = 0;
  }
  return true;
}

}  // namespace kiln::ops
