// Windowed reductions (reduce_window_max / reduce_window_sum over every dimension, with
// strides and padding), their gradient ops, and the Keras-style pooling functions built on them.
#include <cmath>
#include <limits>
#include <type_traits>

#include "kiln/ops.h"
#include "ops/kernel_util.h"
#include "ops/narrow.h"
#include "ops/window_util.h"
#include "src/core/cpu_isa.h"

namespace kiln {
namespace ops {

namespace {

struct WindowParams {
  Axes window, strides, padding_low, padding_high;
};

template <class Ctx>
Axes window_attr(const Ctx& ctx, const char* name, size_t rank, int64_t fallback, int64_t min) {
  return per_dim_attr(ctx, name, rank, fallback, min,
                      "dimension of the operand (rank " + std::to_string(rank) + ")");
}

template <class Ctx>
WindowParams window_params(const Ctx& ctx, size_t rank) {
  return {window_attr(ctx, "window", rank, -1, 1), window_attr(ctx, "strides", rank, 1, 1),
          window_attr(ctx, "padding_low", rank, 0, 0),
          window_attr(ctx, "padding_high", rank, 0, 0)};
}

std::vector<TensorType> reduce_window_shape(const InferContext& ctx) {
  require_dtype_in(ctx, 0, TypeSet::kNumeric);
  const TensorType& x = ctx.input(0);
  WindowParams p = window_params(ctx, x.shape.size());
  Shape out(x.shape.size());
  for (size_t i = 0; i < out.size(); ++i) {
    if (x.shape[i] == kUnknownDim) {
      out[i] = kUnknownDim;
      continue;
    }
    __int128 padded = static_cast<__int128>(x.shape[i]) + p.padding_low[i] + p.padding_high[i];
    if (padded == 0) {  // nothing to slide over: an empty dimension stays empty
      out[i] = 0;
      continue;
    }
    if (padded < p.window[i]) {
      ctx.fail("the window " + ints_str(p.window) + " is larger than the padded operand in " +
               "dimension " + std::to_string(i) + " (" + std::to_string(p.window[i]) + " > " +
               std::to_string(static_cast<int64_t>(padded)) + "; operand " + x.str() +
               ", padding " + ints_str(p.padding_low) + " / " + ints_str(p.padding_high) + ")");
    }
    out[i] = static_cast<int64_t>((padded - p.window[i]) / p.strides[i] + 1);
  }
  return {{x.dtype, out}};
}

// ---- kernel -----------------------------------------------------------------------------
// Max and sum are separable: the window reduction is done one dimension at a time. Each
// pass views its source as [outer, len, inner] and reduces contiguous rows of `inner`.

struct MaxOp {
  template <class C>
  static C identity() {
    if constexpr (std::numeric_limits<C>::has_infinity) {
      return -std::numeric_limits<C>::infinity();
    } else {
      return std::numeric_limits<C>::lowest();
    }
  }
  template <class C>
  static C apply(C acc, C v) {  // NaN wins, as in max()
    if constexpr (std::is_floating_point_v<C>) return (v > acc || v != v) ? v : acc;
    return v > acc ? v : acc;
  }
};

struct SumOp {
  template <class C>
  static C identity() {
    return C(0);
  }
  template <class C>
  static C apply(C acc, C v) {
    if constexpr (std::is_integral_v<C>) {  // wraps instead of overflowing
      using U = std::make_unsigned_t<C>;
      return static_cast<C>(static_cast<U>(static_cast<U>(acc) + static_cast<U>(v)));
    } else {
      return acc + v;
    }
  }
};

// Which source positions each destination position of one dimension reduces:
// sources[starts[j], starts[j + 1]) for destination j.
struct Taps {
  std::vector<int64_t> starts{0}, sources;
  int64_t size() const { return static_cast<int64_t>(starts.size()) - 1; }
};

// The sweep of one dimension: output o reduces the positions o * stride - low + k for k in
// [0, window) that lie inside [0, len) (the others are padding).
Taps window_taps(int64_t len, int64_t out_len, int64_t window, int64_t stride, int64_t low) {
  Taps t;
  for (int64_t o = 0; o < out_len; ++o) {
    for (int64_t k = 0; k < window; ++k) {
      const int64_t at = o * stride - low + k;
      if (at >= 0 && at < len) t.sources.push_back(at);
    }
    t.starts.push_back(static_cast<int64_t>(t.sources.size()));
  }
  return t;
}

// The adjoint sweep: each of the `len` positions receives from every destination of `t` that
// reads it, in increasing order.
Taps transposed(const Taps& t, int64_t len) {
  Taps r;
  r.starts.assign(len + 1, 0);
  for (int64_t at : t.sources) ++r.starts[at + 1];
  for (int64_t i = 0; i < len; ++i) r.starts[i + 1] += r.starts[i];
  r.sources.resize(t.sources.size());
  std::vector<int64_t> fill(r.starts.begin(), r.starts.end() - 1);
  for (int64_t o = 0; o < t.size(); ++o) {
    for (int64_t j = t.starts[o]; j < t.starts[o + 1]; ++j) r.sources[fill[t.sources[j]]++] = o;
  }
  return r;
}

// One pass: src viewed as [outer, len, inner] becomes dst [outer, taps.size(), inner].
template <class Op, class C, class S>
void window_pass(const S* src, C* dst, int64_t outer, int64_t len, int64_t inner,
                 const Taps& taps) {
  const int64_t out_len = taps.size(), rows = outer * out_len;
  const int64_t per_row = std::max<int64_t>(1, taps.sources.size() / std::max<int64_t>(1, out_len));
  const int64_t grain =
      std::max<int64_t>(1, (int64_t{1} << 14) / std::max<int64_t>(1, inner * per_row));
  runtime::parallel_for(rows, grain, [&](int64_t begin, int64_t end) {
    cpu::dispatch([&] {
      for (int64_t r = begin; r < end; ++r) {
        const int64_t b = r / out_len, o = r % out_len;
        C* d = dst + r * inner;
        std::fill(d, d + inner, Op::template identity<C>());
        for (int64_t k = taps.starts[o]; k < taps.starts[o + 1]; ++k) {
          const S* s = src + (b * len + taps.sources[k]) * inner;
          for (int64_t j = 0; j < inner; ++j) d[j] = Op::apply(d[j], static_cast<C>(s[j]));
        }
      }
    });
  });
}

// A sweep lists its (output, tap) pairs: refuse one too large to list (a huge padded window).
void check_sweep(const KernelContext& ctx, const WindowParams& p, size_t i, int64_t out_len) {
  if (static_cast<__int128>(out_len) * p.window[i] > (int64_t{1} << 32)) {
    ctx.fail("the window " + ints_str(p.window) + " sweeps " + std::to_string(out_len) +
             " positions in dimension " + std::to_string(i) + ": too many to list");
  }
}

// Whether the window does nothing along dimension i.
bool trivial(const WindowParams& p, size_t i) {
  return p.window[i] == 1 && p.strides[i] == 1 && p.padding_low[i] == 0 && p.padding_high[i] == 0;
}

// Reduces input 0 into output 0 one dimension at a time: taps_of(i, from, to) gives the sweep
// of each dimension i where the window is not trivial (the identity elsewhere).
template <class Op, class T, class TapsOf>
void separable_kernel(KernelContext& ctx, TapsOf taps_of) {
  using C = ComputeType<T>;
  const Tensor& x = ctx.input(0);
  const Shape& in = x.shape();
  const Shape& out_shape = ctx.output_type(0).shape;
  WindowParams p = window_params(ctx, in.size());
  std::vector<size_t> active;
  for (size_t i = 0; i < in.size(); ++i) {
    if (!trivial(p, i)) active.push_back(i);
  }
  if (active.empty()) {
    ctx.set_output(0, x);
    return;
  }
  ComputeOutput<T> result(ctx.allocate_output(0));
  if (num_elements(out_shape) == 0) return;
  // The shape so far: dimensions before the current pass are already reduced.
  Shape cur = in;
  const T* first = in_ptr<T>(ctx, 0);
  std::vector<C> a, b;  // ping-pong buffers in the compute type
  const C* src = nullptr;
  for (size_t n = 0; n < active.size(); ++n) {
    const size_t i = active[n];
    int64_t outer = 1, inner = 1;
    for (size_t j = 0; j < i; ++j) outer *= cur[j];
    for (size_t j = i + 1; j < cur.size(); ++j) inner *= cur[j];
    const int64_t len = cur[i];
    cur[i] = out_shape[i];
    check_sweep(ctx, p, i, std::max(len, cur[i]));
    const Taps taps = taps_of(p, i, len, cur[i]);
    std::vector<C>& buf = (n % 2 == 0) ? a : b;
    C* dst = result.data();
    if (n + 1 < active.size()) {
      buf.resize(outer * cur[i] * inner);
      dst = buf.data();
    }
    if (n == 0) {
      window_pass<Op>(first, dst, outer, len, inner, taps);
    } else {
      window_pass<Op>(src, dst, outer, len, inner, taps);
    }
    src = dst;
  }
  result.store();
}

Taps forward_taps(const WindowParams& p, size_t i, int64_t len, int64_t out_len) {
  return window_taps(len, out_len, p.window[i], p.strides[i], p.padding_low[i]);
}

// ---- gradients --------------------------------------------------------------------------
// reduce_window_sum is linear and separable: its gradient reduce_window_sum_grad(dy) sums, for
// each operand element, the dy of the windows covering it (the transposed sweep, dimension by
// dimension), and the gradient of that is reduce_window_sum again.
// reduce_window_max routes each window's gradient to the window's maximum:
// reduce_window_max_grad(x, dy) scatters dy[o] to the position of the maximum of window o of x
// (the first one in row-major window order on ties; a NaN wins, like in the forward op), and
// its adjoint reduce_window_max_select(x, v) gathers v at those positions. Both are linear in
// their second operand and piecewise constant in x, so their rules are each other.

// The operand, seen as [outer, mid..., inner]: the window is trivial over the leading outer
// and trailing inner dimensions. tables[j] maps (output position o, tap k) of mid dimension j
// at [o * window[j] + k] to the operand position, or -1 on padding.
struct ArgmaxPlan {
  int64_t outer = 1, inner = 1, mid_in = 1, mid_out = 1, taps = 1;
  bool disjoint = true;  // no operand element lies in two windows
  bool covering = true;  // every operand element lies in some window
  Shape out_dims, window;
  std::vector<int64_t> in_strides;  // of the mid dimensions, in units of inner
  std::vector<std::vector<int64_t>> tables;
};

ArgmaxPlan argmax_plan(const KernelContext& ctx, const Shape& in, const Shape& out) {
  const WindowParams p = window_params(ctx, in.size());
  ArgmaxPlan plan;
  size_t first = 0, last = in.size();
  while (first < last && trivial(p, first)) ++first;
  while (last > first && trivial(p, last - 1)) --last;
  for (size_t i = 0; i < first; ++i) plan.outer *= in[i];
  for (size_t i = last; i < in.size(); ++i) plan.inner *= in[i];
  for (size_t i = first; i < last; ++i) {
    check_sweep(ctx, p, i, out[i]);
    if (plan.taps > std::numeric_limits<int32_t>::max() / p.window[i]) {
      ctx.fail("the window " + ints_str(p.window) + " has more than 2^31 elements");
    }
    plan.mid_in *= in[i];
    plan.mid_out *= out[i];
    plan.taps *= p.window[i];
    plan.disjoint = plan.disjoint && p.strides[i] >= p.window[i];
    plan.covering = plan.covering && p.strides[i] <= p.window[i] &&
                    (out[i] - 1) * p.strides[i] - p.padding_low[i] + p.window[i] >= in[i];
    plan.out_dims.push_back(out[i]);
    plan.window.push_back(p.window[i]);
    plan.tables.push_back(window_table(in[i], out[i], p.window[i], p.strides[i], p.padding_low[i]));
  }
  plan.in_strides.assign(last - first, 1);
  for (size_t j = last - first; j-- > 1;) {
    plan.in_strides[j - 1] = plan.in_strides[j] * in[first + j];
  }
  return plan;
}

// One thread's scratch for the windows it visits: per inner element, the best value so far and
// the tap it came from (32-bit, like a float: the loops vectorize).
template <class C>
struct WindowScratch {
  std::vector<int32_t> tap;
  std::vector<C> value;
};

// The operand offsets of the taps of the window at mid position pos, relative to the start of
// its outer index's slice and in elements (times inner), into offsets[0, plan.taps); -1 for a
// tap on padding. next is scratch of plan.taps entries.
void list_taps(const ArgmaxPlan& plan, const std::vector<int64_t>& pos, int64_t* offsets,
               int64_t* next) {
  // One dimension at a time: after dimension j, entry i of the first (taps so far) holds the
  // offset of tap i over dimensions 0..j (row-major).
  int64_t n = 1;
  int64_t* cur = offsets;
  cur[0] = 0;
  for (size_t j = 0; j < plan.out_dims.size(); ++j) {
    const int64_t w = plan.window[j], stride = plan.in_strides[j];
    const int64_t* row = plan.tables[j].data() + pos[j] * w;
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t k = 0; k < w; ++k) {
        next[i * w + k] = cur[i] < 0 || row[k] < 0 ? -1 : cur[i] + row[k] * stride;
      }
    }
    n *= w;
    std::swap(cur, next);
  }
  for (int64_t t = 0; t < n; ++t) offsets[t] = cur[t] < 0 ? -1 : cur[t] * plan.inner;
}

// Calls window(out_base, in_base, offsets, scratch) for every window of every outer index b:
// out_base is the flat output index of the window's first inner element, in_base the flat
// operand index where b's slice starts, and offsets[t] the offset from in_base of tap t's first
// inner element, or -1 for a tap on padding. Outer indices run in parallel: start(b) and then
// all the windows of outer index b run on one thread, compiled for the host's vector ISA
// (cpu::dispatch). The windows' taps are listed once for all outer indices (the per-window
// bookkeeping cost more than a 2x2 window's work over 32 channels) unless the list would be
// large (many overlapping windows of many taps); then each window lists its own.
template <class C, class Start, class Window>
void for_each_window(const ArgmaxPlan& plan, Start&& start, Window&& window) {
  constexpr int64_t kMaxListed = int64_t{1} << 20;  // 8 MiB of offsets
  const bool listed = plan.mid_out * plan.taps <= kMaxListed;
  std::vector<int64_t> list;
  if (listed) {
    list.resize(plan.mid_out * plan.taps);
    std::vector<int64_t> pos(plan.out_dims.size()), next(plan.taps);
    for (int64_t q = 0; q < plan.mid_out; ++q, next_index(pos, plan.out_dims)) {
      list_taps(plan, pos, list.data() + q * plan.taps, next.data());
    }
  }
  const int64_t work = std::max<int64_t>(1, plan.mid_out * plan.inner * plan.taps);
  runtime::parallel_for(
      plan.outer, std::max<int64_t>(1, (int64_t{1} << 14) / work), [&](int64_t begin, int64_t end) {
        WindowScratch<C> scratch{std::vector<int32_t>(plan.inner), std::vector<C>(plan.inner)};
        std::vector<int64_t> pos, offsets, next;
        if (!listed) {
          pos.resize(plan.out_dims.size());
          offsets.resize(plan.taps);
          next.resize(plan.taps);
        }
        cpu::dispatch([&] {
          for (int64_t b = begin; b < end; ++b) {
            start(b);
            const int64_t in_base = b * plan.mid_in * plan.inner;
            const int64_t out_base = b * plan.mid_out * plan.inner;
            if (listed) {
              for (int64_t q = 0; q < plan.mid_out; ++q) {
                window(out_base + q * plan.inner, in_base, list.data() + q * plan.taps, scratch);
              }
              continue;
            }
            std::fill(pos.begin(), pos.end(), 0);
            for (int64_t q = 0; q < plan.mid_out; ++q, next_index(pos, plan.out_dims)) {
              list_taps(plan, pos, offsets.data(), next.data());
              window(out_base + q * plan.inner, in_base, offsets.data(), scratch);
            }
          }
        });
      });
}

// The window's maximum of each inner element into s.value and the tap it is at into s.tap: the
// first in row-major window order on ties, and the first NaN wins. False when every tap lies on
// padding (s is then untouched).
template <class C, class T>
bool window_argmax(const ArgmaxPlan& plan, const T* x, const int64_t* offsets,
                   WindowScratch<C>& s) {
  int32_t t = 0;
  while (t < plan.taps && offsets[t] < 0) ++t;
  if (t == plan.taps) return false;
  int32_t* __restrict bt = s.tap.data();
  C* __restrict bv = s.value.data();
  const T* first = x + offsets[t];
  for (int64_t c = 0; c < plan.inner; ++c) {
    bt[c] = t;
    bv[c] = static_cast<C>(first[c]);
  }
  for (++t; t < plan.taps; ++t) {
    if (offsets[t] < 0) continue;
    const T* __restrict xs = x + offsets[t];
    for (int64_t c = 0; c < plan.inner; ++c) {
      const C v = static_cast<C>(xs[c]), w = bv[c];
      const bool take = takes_max(v, w);
      bt[c] = take ? t : bt[c];
      bv[c] = take ? v : w;
    }
  }
  return true;
}

// Whether no two windows share an operand element (every stride at least its window): then one
// pass over the windows reads the operand once, and beats reducing one dimension at a time.
bool windows_disjoint(const WindowParams& p) {
  for (size_t i = 0; i < p.window.size(); ++i) {
    if (!trivial(p, i) && p.strides[i] < p.window[i]) return false;
  }
  return true;
}

// reduce_window_max over disjoint windows, in one pass: each window's inner row is the
// elementwise maximum of its taps' rows (the identity where every tap is padding). A bf16/f16
// row is taken in f32 in the thread's scratch and rounded into the output while in cache (the
// maximum of rounded values rounds to itself; NaNs come out quiet, as through f32 staging).
template <class T>
void disjoint_max_kernel(KernelContext& ctx) {
  using C = ComputeType<T>;
  constexpr bool kNarrow = !std::is_same_v<T, C>;
  const Tensor& x = ctx.input(0);
  const Shape& out_shape = ctx.output_type(0).shape;
  T* y = out_ptr<T>(ctx.allocate_output(0));
  if (num_elements(out_shape) == 0) return;
  const T* xs = in_ptr<T>(ctx, 0);
  const ArgmaxPlan plan = argmax_plan(ctx, x.shape(), out_shape);
  for_each_window<C>(
      plan, [](int64_t) {},
      [&](int64_t out_base, int64_t in_base, const int64_t* offsets, WindowScratch<C>& s) {
        // The maximum by the argmax's rule (the first NaN wins), without tracking which tap it
        // came from.
        C* __restrict d = nullptr;
        if constexpr (kNarrow) {
          d = s.value.data();
        } else {
          d = y + out_base;
        }
        const T* xb = xs + in_base;
        int32_t t = 0;
        while (t < plan.taps && offsets[t] < 0) ++t;
        if (t == plan.taps) {  // every tap on padding
          std::fill(d, d + plan.inner, MaxOp::identity<C>());
        } else {
          const T* __restrict first = xb + offsets[t];
          for (int64_t c = 0; c < plan.inner; ++c) d[c] = static_cast<C>(first[c]);
          for (++t; t < plan.taps; ++t) {
            if (offsets[t] < 0) continue;
            const T* __restrict row = xb + offsets[t];
            for (int64_t c = 0; c < plan.inner; ++c) {
              const C v = static_cast<C>(row[c]), w = d[c];
              d[c] = takes_max(v, w) ? v : w;
            }
          }
        }
        if constexpr (kNarrow) {
          T* __restrict o = y + out_base;
          for (int64_t c = 0; c < plan.inner; ++c) o[c] = narrowed<T>(d[c]);
        }
      });
}

template <class Op>
KernelFn reduce_window_fn() {
  return typed_kernel<TypeSet::kNumeric>([](auto tag, KernelContext& ctx) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<Op, MaxOp>) {
      const WindowParams p = window_params(ctx, ctx.input(0).shape().size());
      bool any_window = false;
      for (size_t i = 0; i < p.window.size(); ++i) any_window |= !trivial(p, i);
      if (any_window && windows_disjoint(p)) return disjoint_max_kernel<T>(ctx);
    }
    separable_kernel<Op, T>(ctx, forward_taps);
  });
}

// Requires input `i` to have x's dtype and the shape `want`.
void require_operand(const InferContext& ctx, int i, const Shape& want) {
  const TensorType& x = ctx.input(0);
  const TensorType& t = ctx.input(i);
  if (t.dtype != x.dtype || !shapes_agree(t.shape, want)) {
    ctx.fail("expects the " + std::string(i == 1 ? "second operand" : "operand") + " to be " +
             TensorType{x.dtype, want}.str() + " (" + types_str(ctx) + ")");
  }
}

// The output type of the forward reduce_window over input 0.
TensorType forward_type(const InferContext& ctx, const TensorType& x) {
  return infer_with(ctx, reduce_window_shape, {x})[0];
}

// reduce_window_max_grad(x, dy) -> x's type; dy has the forward output's type.
std::vector<TensorType> max_grad_shape(const InferContext& ctx) {
  require_dtype_in(ctx, 0, TypeSet::kFloat);
  require_operand(ctx, 1, forward_type(ctx, ctx.input(0)).shape);
  return {ctx.input(0)};
}

// reduce_window_max_select(x, v) -> the forward output's type; v has x's type.
std::vector<TensorType> max_select_shape(const InferContext& ctx) {
  require_dtype_in(ctx, 0, TypeSet::kFloat);
  require_operand(ctx, 1, ctx.input(0).shape);
  return {forward_type(ctx, ctx.input(0))};
}

// reduce_window_max_grad into dx, of element type D: T itself where windows are disjoint (each
// element is stored once, the gradient or 0, exact in T), else T's compute type (elements
// shared by windows add up).
template <class T, class D>
void max_grad_windows(const KernelContext& ctx, const ArgmaxPlan& plan, const T* xs, const T* g,
                      D* dx) {
  using C = ComputeType<T>;
  const int64_t slice = plan.mid_in * plan.inner;  // of one outer index, zeroed in its task
  // Disjoint windows: every operand element receives from at most one window, so the taps' rows
  // are stored (the gradient or 0) rather than added to, and the slice is zeroed first only
  // where some element lies in no window.
  const bool store = plan.disjoint;
  const bool zero_first = !(plan.disjoint && plan.covering);
  // relu_mask: a window whose maximum is <= 0 passes nothing (select(x <= 0, 0, dx), the
  // gradient of a relu before the pool, which the algebraic simplifier folds in here).
  const bool relu_mask = ctx.attrs().get_bool("relu_mask", false);
  auto stored = [](C v) {
    if constexpr (std::is_same_v<D, C>) {
      return v;
    } else {
      return narrowed<D>(v);
    }
  };
  for_each_window<C>(
      plan,
      [&](int64_t b) {
        if (zero_first) std::fill(dx + b * slice, dx + (b + 1) * slice, stored(C(0)));
      },
      [&](int64_t out_base, int64_t in_base, const int64_t* offsets, WindowScratch<C>& s) {
        if (!window_argmax(plan, xs + in_base, offsets, s)) return;
        int32_t* __restrict bt = s.tap.data();
        const T* __restrict gs = g + out_base;
        if (relu_mask) {  // no tap is numbered -1: a masked element matches none
          const C* __restrict bv = s.value.data();
          for (int64_t c = 0; c < plan.inner; ++c) bt[c] = bv[c] <= C(0) ? -1 : bt[c];
        }
        // Tap by tap, so that each pass writes one contiguous row (a masked vector op).
        for (int32_t t = 0; t < plan.taps; ++t) {
          if (offsets[t] < 0) continue;
          D* __restrict d = dx + in_base + offsets[t];
          if (store) {
            for (int64_t c = 0; c < plan.inner; ++c) {
              d[c] = stored(bt[c] == t ? static_cast<C>(gs[c]) : C(0));
            }
          } else if constexpr (std::is_same_v<D, C>) {
            for (int64_t c = 0; c < plan.inner; ++c) {
              d[c] = bt[c] == t ? d[c] + static_cast<C>(gs[c]) : d[c];
            }
          }
        }
      });
}

template <class T>
void max_grad_kernel(KernelContext& ctx) {
  using C = ComputeType<T>;
  const Tensor &x = ctx.input(0), &dy = ctx.input(1);
  Tensor& out = ctx.allocate_output(0);
  if (dy.size() == 0) {
    T* dx = out_ptr<T>(out);
    std::fill(dx, dx + x.size(), T(0));
    return;
  }
  const ArgmaxPlan plan = argmax_plan(ctx, x.shape(), dy.shape());
  const T* xs = x.data<T>().data();
  const T* g = dy.data<T>().data();
  if (std::is_same_v<T, C> || plan.disjoint) {
    max_grad_windows(ctx, plan, xs, g, out_ptr<T>(out));
  } else {  // overlapping windows add up in the compute type, rounded once at the end
    ComputeOutput<T> result(out);
    max_grad_windows(ctx, plan, xs, g, result.data());
    result.store();
  }
}

template <class T>
void max_select_kernel(KernelContext& ctx) {
  using C = ComputeType<T>;
  const Tensor &x = ctx.input(0), &v = ctx.input(1);
  Tensor& out = ctx.allocate_output(0);
  if (out.size() == 0) return;
  const T* values = v.data<T>().data();
  const T* xs = x.data<T>().data();
  T* y = out_ptr<T>(out);
  const ArgmaxPlan plan = argmax_plan(ctx, x.shape(), out.shape());
  for_each_window<C>(
      plan, [](int64_t) {},
      [&](int64_t out_base, int64_t in_base, const int64_t* offsets, WindowScratch<C>& s) {
        T* __restrict d = y + out_base;
        if (!window_argmax(plan, xs + in_base, offsets, s)) {
          std::fill(d, d + plan.inner, T(0));
          return;
        }
        const int32_t* __restrict bt = s.tap.data();
        for (int32_t t = 0; t < plan.taps; ++t) {
          if (offsets[t] < 0) continue;
          const T* __restrict vs = values + in_base + offsets[t];
          for (int64_t c = 0; c < plan.inner; ++c) d[c] = bt[c] == t ? vs[c] : d[c];
        }
      });
}

// reduce_window_sum_grad(dy), attribute operand_shape: the operand's shape, where a
// dimension over which the window is trivial may be kUnknownDim (it is dy's).
std::vector<TensorType> sum_grad_shape(const InferContext& ctx) {
  require_dtype_in(ctx, 0, TypeSet::kNumeric);
  const TensorType& dy = ctx.input(0);
  const size_t rank = dy.shape.size();
  const Axes& given = ctx.attrs().get_ints("operand_shape");
  if (given.size() != rank) {
    ctx.fail("operand_shape " + ints_str(given) + " must have the rank of output_grad " + dy.str());
  }
  const WindowParams p = window_params(ctx, rank);
  Shape operand(rank);
  for (size_t i = 0; i < rank; ++i) {
    operand[i] = given[i];
    if (given[i] == kUnknownDim && trivial(p, i)) {
      operand[i] = dy.shape[i];
    } else if (given[i] < 0) {
      ctx.fail("operand_shape " + ints_str(given) + " must be known in dimension " +
               std::to_string(i) + ", where the window " + ints_str(p.window) +
               " reduces (the gradient needs the operand's size there when it is recorded)");
    }
  }
  const TensorType x{dy.dtype, operand};
  const Shape want = forward_type(ctx, x).shape;
  if (!shapes_agree(dy.shape, want)) {
    ctx.fail("output_grad is " + dy.str() + ", but the windows over an operand " + x.str() +
             " give " + TensorType{dy.dtype, want}.str());
  }
  return {x};
}

Taps adjoint_taps(const WindowParams& p, size_t i, int64_t out_len, int64_t len) {
  return transposed(forward_taps(p, i, len, out_len), len);
}

// The window attributes of a node (without operand_shape).
Attrs window_attrs_of(const Attrs& attrs) {
  return copy_attrs(attrs, {"window", "strides", "padding_low", "padding_high"});
}

Tensor call1(const std::string& op, const std::vector<Tensor>& inputs, const Attrs& attrs) {
  return call_op(op, inputs, attrs)[0];
}

std::vector<Tensor> max_gradient(const GradContext& g) {
  return {call1("reduce_window_max_grad", {g.inputs[0], g.output_grads[0]}, g.attrs())};
}
std::vector<Tensor> max_grad_gradient(const GradContext& g) {
  const Attrs window = window_attrs_of(g.attrs());
  const bool relu_mask = g.attrs().get_bool("relu_mask", false);
  Tensor selected = call1("reduce_window_max_select", {g.inputs[0], g.output_grads[0]}, window);
  if (relu_mask) {  // the windows whose maximum is <= 0 passed nothing
    Tensor max = call1("reduce_window_max", {g.inputs[0]}, window);
    Tensor zero = zeros_like(selected);
    selected = where(less_equal(max, zero), zero, selected);
  }
  return {Tensor(), selected};
}
std::vector<Tensor> max_select_gradient(const GradContext& g) {
  return {Tensor(), call1("reduce_window_max_grad", {g.inputs[0], g.output_grads[0]}, g.attrs())};
}
std::vector<Tensor> sum_gradient(const GradContext& g) {
  Attrs attrs = window_attrs_of(g.attrs());
  attrs.set("operand_shape", g.inputs[0].shape());
  return {call1("reduce_window_sum_grad", {g.output_grads[0]}, attrs)};
}
std::vector<Tensor> sum_grad_gradient(const GradContext& g) {
  return {call1("reduce_window_sum", {g.output_grads[0]}, window_attrs_of(g.attrs()))};
}

}  // namespace

KILN_REGISTER_OP(reduce_window_max)
    .input("x")
    .kind(OpKind::kCodegen)
    .shape_fn(reduce_window_shape)
    .gradient(max_gradient);
KILN_REGISTER_KERNEL(reduce_window_max)
    .dtypes(dtypes_of(TypeSet::kNumeric))
    .fn(reduce_window_fn<MaxOp>());

KILN_REGISTER_OP(reduce_window_sum)
    .input("x")
    .kind(OpKind::kCodegen)
    .shape_fn(reduce_window_shape)
    .gradient(sum_gradient);
KILN_REGISTER_KERNEL(reduce_window_sum)
    .dtypes(dtypes_of(TypeSet::kNumeric))
    .fn(reduce_window_fn<SumOp>());

KILN_REGISTER_OP(reduce_window_max_grad)
    .input("x")
    .input("output_grad")
    .shape_fn(max_grad_shape)
    .gradient(max_grad_gradient);
KILN_REGISTER_TYPED_KERNEL(reduce_window_max_grad, TypeSet::kFloat, max_grad_kernel);

KILN_REGISTER_OP(reduce_window_max_select)
    .input("x")
    .input("v")
    .shape_fn(max_select_shape)
    .gradient(max_select_gradient);
KILN_REGISTER_TYPED_KERNEL(reduce_window_max_select, TypeSet::kFloat, max_select_kernel);

KILN_REGISTER_OP(reduce_window_sum_grad)
    .input("output_grad")
    .shape_fn(sum_grad_shape)
    .gradient(sum_grad_gradient);
KILN_REGISTER_KERNEL(reduce_window_sum_grad)
    .dtypes(dtypes_of(TypeSet::kNumeric))
    .fn(typed_kernel<TypeSet::kNumeric>([](auto tag, KernelContext& ctx) {
      separable_kernel<SumOp, typename decltype(tag)::type>(ctx, adjoint_taps);
    }));

}  // namespace ops

// ---- public functions -------------------------------------------------------------------
namespace {

Attrs window_attrs(const Tensor& x, const WindowOptions& o) {
  const size_t rank = x.shape().size();
  return {{"window", o.window},
          {"strides", o.strides.empty() ? Axes(rank, 1) : o.strides},
          {"padding_low", o.padding_low.empty() ? Axes(rank, 0) : o.padding_low},
          {"padding_high", o.padding_high.empty() ? Axes(rank, 0) : o.padding_high}};
}

// The NHWC window of a Keras pooling layer.
WindowOptions pool2d_window(const std::string& op, const Tensor& x, const Axes& pool, Axes strides,
                            const std::string& padding) {
  const std::string what = "input " + TensorType{x.dtype(), x.shape()}.str();
  if (x.rank() != 4) {
    throw Error(ErrorCode::kInvalidArgument, op + ": expects a 4-d NHWC input (" + what + ")");
  }
  if (strides.empty()) strides = pool;
  if (pool.size() != 2 || strides.size() != 2) {
    throw Error(ErrorCode::kInvalidArgument, op + ": pool and strides must have 2 values, got " +
                                                 ops::ints_str(pool) + " and " +
                                                 ops::ints_str(strides));
  }
  Axes low, high;
  ops::keras_padding(op, padding, {x.dim(1), x.dim(2)}, pool, strides, what, low, high);
  return {{1, pool[0], pool[1], 1},
          {1, strides[0], strides[1], 1},
          {0, low[0], low[1], 0},
          {0, high[0], high[1], 0}};
}

// How many of the window's taps along one dimension land inside [0, n), per output position.
std::vector<double> taps_inside(int64_t n, int64_t window, int64_t stride, int64_t low,
                                int64_t out) {
  std::vector<double> count(out);
  for (int64_t o = 0; o < out; ++o) {
    int64_t start = o * stride - low;
    count[o] = static_cast<double>(std::min(start + window, n) - std::max<int64_t>(start, 0));
  }
  return count;
}

}  // namespace

Tensor reduce_window_max(const Tensor& x, const WindowOptions& options) {
  return call_op("reduce_window_max", {x}, window_attrs(x, options))[0];
}

Tensor reduce_window_sum(const Tensor& x, const WindowOptions& options) {
  return call_op("reduce_window_sum", {x}, window_attrs(x, options))[0];
}

Tensor max_pool2d(const Tensor& x, Axes pool, Axes strides, const std::string& padding) {
  return reduce_window_max(x, pool2d_window("max_pool2d", x, pool, strides, padding));
}

// The mean over the window's taps that fall inside the input: padding is not counted.
Tensor avg_pool2d(const Tensor& x, Axes pool, Axes strides, const std::string& padding) {
  WindowOptions w = pool2d_window("avg_pool2d", x, pool, strides, padding);
  Tensor xf = is_floating(x.dtype()) ? x : convert(x, f32);
  Tensor sum = reduce_window_sum(xf, w);
  if (padding == "valid") return sum / static_cast<double>(pool[0] * pool[1]);
  const int64_t h = x.dim(1), wd = x.dim(2);
  if (h == kUnknownDim || wd == kUnknownDim) {
    return sum / reduce_window_sum(ones_like(xf), w);
  }
  const int64_t oh = sum.dim(1), ow = sum.dim(2);
  std::vector<double> rows = taps_inside(h, w.window[1], w.strides[1], w.padding_low[1], oh);
  std::vector<double> cols = taps_inside(wd, w.window[2], w.strides[2], w.padding_low[2], ow);
  std::vector<double> count(oh * ow);
  for (int64_t i = 0; i < oh; ++i)
    for (int64_t j = 0; j < ow; ++j) count[i * ow + j] = rows[i] * cols[j];
  return sum / convert(Tensor::from_vector(count, {1, oh, ow, 1}), xf.dtype());
}

}  // namespace kiln
