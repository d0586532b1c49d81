// export_model's op table: each Kiln op's emitter of ONNX nodes.
#include <algorithm>
#include <limits>

#include "interop/onnx_export.h"
#include "kiln/error.h"
#include "kiln/op_registry.h"

namespace kiln::onnx::export_internal {
namespace {

// ---- emitters ------------------------------------------------------------------------------

// An op that is one ONNX op of the same inputs.
Emit same(const char* op) {
  return [op](NodeEmitter& e) {
    std::vector<std::string> ins;
    for (size_t i = 0; i < e.node().inputs.size(); ++i) ins.push_back(e.in(i));
    e.add(op, ins, e.out());
  };
}

// op(x) then a second op, for rsqrt (Reciprocal of Sqrt) and the negated comparisons.
Emit then(const char* first, const char* second) {
  return [first, second](NodeEmitter& e) {
    std::vector<std::string> ins;
    for (size_t i = 0; i < e.node().inputs.size(); ++i) ins.push_back(e.in(i));
    e.add(second, {e.value(first, ins)}, e.out());
  };
}

void emit_log1p(NodeEmitter& e) {
  e.add("Log", {e.value("Add", {e.in(0), e.scalar(1, e.in_type(0).dtype)})}, e.out());
}

void emit_expm1(NodeEmitter& e) {
  e.add("Sub", {e.value("Exp", {e.in(0)}), e.scalar(1, e.in_type(0).dtype)}, e.out());
}

void emit_is_finite(NodeEmitter& e) {
  e.add("Not", {e.value("Or", {e.value("IsNaN", {e.in(0)}), e.value("IsInf", {e.in(0)})})},
        e.out());
}

void emit_rem(NodeEmitter& e) { set_attr(e.add("Mod", {e.in(0), e.in(1)}, e.out()), "fmod", 1); }

void emit_clamp(NodeEmitter& e) {
  e.add("Min", {e.value("Max", {e.in(0), e.in(1)}), e.in(2)}, e.out());
}

void emit_convert(NodeEmitter& e) {
  set_attr(e.add("Cast", {e.in(0)}, e.out()), "to",
           int64_t{internal::onnx_dtype(e.attrs().get_dtype("dtype"))});
}

// reduce_* over `axes` (the reduced dimensions dropped); no axes reduces nothing.
Emit reduce(const char* op) {
  return [op](NodeEmitter& e) {
    const Ints& axes = e.attrs().get_ints("axes");
    if (axes.empty()) {
      e.add("Identity", {e.in(0)}, e.out());
      return;
    }
    ::onnx::NodeProto* n;
    if (std::string(op) == "ReduceSum") {  // axes an input from opset 13, the others from 18
      n = e.add(op, {e.in(0), e.ints(axes)}, e.out());
    } else {
      n = e.add(op, {e.in(0)}, e.out());
      set_attr(n, "axes", axes);
    }
    set_attr(n, "keepdims", 0);
  };
}

// reduce_any / reduce_all: ONNX 17 reduces no bools, so through int32.
Emit reduce_bool(const char* op) {
  return [op](NodeEmitter& e) {
    const Ints& axes = e.attrs().get_ints("axes");
    if (axes.empty()) {
      e.add("Identity", {e.in(0)}, e.out());
      return;
    }
    ::onnx::NodeProto* cast = e.add("Cast", {e.in(0)});
    set_attr(cast, "to", int64_t{::onnx::TensorProto::INT32});
    ::onnx::NodeProto* r = e.add(op, {cast->output(0)});
    set_attr(r, "axes", axes);
    set_attr(r, "keepdims", 0);
    set_attr(e.add("Cast", {r->output(0)}, e.out()), "to", int64_t{::onnx::TensorProto::BOOL});
  };
}

Emit arg(const char* op) {
  return [op](NodeEmitter& e) {
    ::onnx::NodeProto* n = e.add(op, {e.in(0)}, e.out());
    set_attr(n, "axis", e.attrs().get_int("axis"));
    set_attr(n, "keepdims", 0);
  };
}

Ints attr_ints_or(const Attrs& a, const std::string& name, Ints fallback) {
  return a.has(name) && !a.get_ints(name).empty() ? a.get_ints(name) : fallback;
}

// dot: MatMul where the dimensions are numpy's matmul (contract a's last with b's first or
// second to last, batch the leading ones), otherwise Einsum. Kiln's result is the batch
// dimensions, a's free ones, then b's free ones, as Einsum's output labels say.
void emit_dot(NodeEmitter& e) {
  const int64_t ra = static_cast<int64_t>(e.in_type(0).shape.size());
  const int64_t rb = static_cast<int64_t>(e.in_type(1).shape.size());
  const Ints lc = e.attrs().get_ints("lhs_contract"), rc = e.attrs().get_ints("rhs_contract");
  const Ints lb = attr_ints_or(e.attrs(), "lhs_batch", {});
  const Ints rbatch = attr_ints_or(e.attrs(), "rhs_batch", {});
  const int64_t nb = static_cast<int64_t>(lb.size());
  const Ints leading = iota_ints(0, nb);
  const bool matmul =
      lc.size() == 1 && rc.size() == 1 && lb == leading && rbatch == leading && lc[0] == ra - 1 &&
      (nb == 0 ? (rb <= 2 && rc[0] == 0) : (ra == nb + 2 && rb == nb + 2 && rc[0] == nb));
  if (matmul) {
    e.add("MatMul", {e.in(0), e.in(1)}, e.out());
    return;
  }
  if (ra + rb > 52) e.unsupported("a dot product of more than 52 dimensions");
  auto letter = [](int64_t i) { return static_cast<char>(i < 26 ? 'a' + i : 'A' + i - 26); };
  std::string a(ra, ' '), b(rb, ' '), batch, a_free, b_free;
  int64_t next = 0;
  for (size_t i = 0; i < lb.size(); ++i) {
    a[lb[i]] = b[rbatch[i]] = letter(next++);
    batch += a[lb[i]];
  }
  for (size_t i = 0; i < lc.size(); ++i) a[lc[i]] = b[rc[i]] = letter(next++);
  for (char& c : a)
    if (c == ' ') a_free += (c = letter(next++));
  for (char& c : b)
    if (c == ' ') b_free += (c = letter(next++));
  ::onnx::NodeProto* n = e.add("Einsum", {e.in(0), e.in(1)}, e.out());
  auto* attr = n->add_attribute();
  attr->set_name("equation");
  attr->set_type(::onnx::AttributeProto::STRING);
  attr->set_s(a + "," + b + "->" + batch + a_free + b_free);
}

void emit_transpose(NodeEmitter& e) {
  set_attr(e.add("Transpose", {e.in(0)}, e.out()), "perm", e.attrs().get_ints("perm"));
}

void emit_reshape(NodeEmitter& e) {
  const Ints& shape = e.attrs().get_ints("shape");
  const bool zero = std::count(shape.begin(), shape.end(), 0) > 0;
  ::onnx::NodeProto* n = e.add("Reshape", {e.in(0), e.ints(shape)}, e.out());
  if (zero) {  // a 0 is a size, not "copy the input's"
    if (std::count(shape.begin(), shape.end(), -1) > 0)
      e.unsupported("reshape to a shape with both a 0 and an inferred dimension");
    if (e.builder().opset() < 14) e.unsupported("reshape to a size 0 needs opset 14 (allowzero)");
    set_attr(n, "allowzero", 1);
  }
}

void emit_reshape_like(NodeEmitter& e) {
  e.add("Reshape", {e.in(0), e.value("Shape", {e.in(1)})}, e.out());
}

// broadcast_in_dim / broadcast_like: x's dimensions put in order (a Transpose), the output
// dimensions nothing maps to added as 1s (Unsqueeze), then Expand to the output's shape (known
// sizes, or like's shape).
void emit_broadcast(NodeEmitter& e) {
  const Ints& dims = e.attrs().get_ints("dims");
  const Shape& out = e.out_type().shape;
  const int64_t r = static_cast<int64_t>(out.size());
  Ints order(dims.size());  // x's dimensions by the output dimension they map to
  std::iota(order.begin(), order.end(), 0);
  auto norm = [r](int64_t d) { return d < 0 ? d + r : d; };
  std::sort(order.begin(), order.end(),
            [&](int64_t i, int64_t j) { return norm(dims[i]) < norm(dims[j]); });
  std::string x = e.in(0);
  if (!is_identity(order)) {
    ::onnx::NodeProto* t = e.add("Transpose", {x});
    set_attr(t, "perm", order);
    x = t->output(0);
  }
  std::vector<bool> mapped(r, false);
  for (int64_t d : dims) mapped[norm(d)] = true;
  Ints added, target(r, 1);
  for (int64_t o = 0; o < r; ++o) {
    if (mapped[o]) continue;
    added.push_back(o);
    target[o] = out[o];
  }
  if (!added.empty()) x = e.value("Unsqueeze", {x, e.ints(added)});
  std::string shape;
  if (e.node().op == "broadcast_like") {
    shape = e.value("Shape", {e.in(1)});
  } else {
    // Where x maps, Expand's 1 keeps x's size (known or not); elsewhere the output's size.
    for (int64_t o : added)
      if (out[o] == kUnknownDim)
        e.unsupported("broadcast to " + TensorType{e.out_type().dtype, out}.str() +
                      ": a dimension no operand dimension maps to has no known size");
    shape = e.ints(target);
  }
  e.add("Expand", {x, shape}, e.out());
}

// Slices only the axes that change: a whole dimension (limit kUnknownDim) is left alone.
void emit_slice(NodeEmitter& e) {
  const Ints& start = e.attrs().get_ints("start");
  const Ints& limit = e.attrs().get_ints("limit");
  const Ints strides = attr_ints_or(e.attrs(), "strides", Ints(start.size(), 1));
  const Shape& x = e.in_type(0).shape;
  Ints axes, starts, ends, steps;
  for (size_t d = 0; d < start.size(); ++d) {
    const bool whole =
        limit[d] == kUnknownDim || (start[d] == 0 && strides[d] == 1 && limit[d] == x[d]);
    if (whole) continue;
    axes.push_back(static_cast<int64_t>(d));
    starts.push_back(start[d]);
    ends.push_back(limit[d]);
    steps.push_back(strides[d]);
  }
  if (axes.empty()) {
    e.add("Identity", {e.in(0)}, e.out());
    return;
  }
  e.add("Slice", {e.in(0), e.ints(starts), e.ints(ends), e.ints(axes), e.ints(steps)}, e.out());
}

void emit_reverse(NodeEmitter& e) {
  const Ints& axes = e.attrs().get_ints("axes");
  if (axes.empty()) {
    e.add("Identity", {e.in(0)}, e.out());
    return;
  }
  const Ints starts(axes.size(), -1), steps(axes.size(), -1);
  const Ints ends(axes.size(), std::numeric_limits<int64_t>::min());
  e.add("Slice", {e.in(0), e.ints(starts), e.ints(ends), e.ints(axes), e.ints(steps)}, e.out());
}

void emit_concatenate(NodeEmitter& e) {
  std::vector<std::string> ins;
  for (size_t i = 0; i < e.node().inputs.size(); ++i) ins.push_back(e.in(i));
  set_attr(e.add("Concat", ins, e.out()), "axis", e.attrs().get_int("axis"));
}

void emit_pad(NodeEmitter& e) {
  if (e.attrs().has("interior")) {
    const Ints& interior = e.attrs().get_ints("interior");
    if (std::any_of(interior.begin(), interior.end(), [](int64_t i) { return i != 0; }))
      e.unsupported("interior padding " + ints_str(interior) + " (ONNX's Pad has none)");
  }
  const Ints pads = concat(e.attrs().get_ints("low"), e.attrs().get_ints("high"));
  e.add("Pad", {e.in(0), e.ints(pads), e.in(1)}, e.out());  // mode "constant"
}

void emit_gather(NodeEmitter& e) {
  set_attr(e.add("Gather", {e.in(0), e.in(1)}, e.out()), "axis", e.attrs().get_int("axis", 0));
}

// iota has no inputs: its value, computed now, is a constant.
void emit_iota(NodeEmitter& e) {
  if (!is_fully_defined(e.out_type().shape))
    e.unsupported("iota of shape " + e.out_type().str() + ", which is not fully known");
  const Tensor v = call_op("iota", {}, e.attrs())[0];
  e.builder().add_initializer(e.out(), v);
}

// NHWC <-> NCHW for a d-dimensional convolution or pool over [batch, spatial..., channels].
Ints to_channels_first(int64_t d) { return concat({0, d + 1}, iota_ints(1, d + 1)); }
Ints to_channels_last(int64_t d) { return inverse(to_channels_first(d)); }

std::string transposed(NodeEmitter& e, const std::string& x, const Ints& perm) {
  ::onnx::NodeProto* t = e.add("Transpose", {x});
  set_attr(t, "perm", perm);
  return t->output(0);
}

// A kernel for ONNX: `value`, reversed along `flip` and transposed by `perm`; folded into a
// new initializer when the kernel is one, otherwise Slice and Transpose nodes.
std::string onnx_kernel(NodeEmitter& e, const std::string& kernel, const Ints& flip,
                        const Ints& perm) {
  if (const Tensor* value = e.builder().initializer_value(kernel))
    return e.initializer(transpose(flip.empty() ? *value : reverse(*value, flip), perm));
  std::string k = kernel;
  if (!flip.empty()) {
    const Ints starts(flip.size(), -1), steps(flip.size(), -1);
    const Ints ends(flip.size(), std::numeric_limits<int64_t>::min());
    k = e.value("Slice", {k, e.ints(starts), e.ints(ends), e.ints(flip), e.ints(steps)});
  }
  return transposed(e, k, perm);
}

// convolution: Conv between transposes, the HWIO kernel made OIHW. With input dilation (Kiln's
// transposed convolution) and stride 1, ConvTranspose: Kiln correlates the dilated input with
// its kernel K; ConvTranspose scatters with W = K flipped, so W is K flipped back, [in, out, k],
// and ONNX's pads crop what Kiln's padding leaves out of the full result.
void emit_convolution(NodeEmitter& e) {
  const Shape& k = e.in_type(1).shape;
  const int64_t d = static_cast<int64_t>(k.size()) - 2;
  const Ints lhs_dilation = attr_ints_or(e.attrs(), "lhs_dilation", Ints(d, 1));
  const Ints strides = e.attrs().get_ints("strides");
  const Ints dilation = attr_ints_or(e.attrs(), "dilation", Ints(d, 1));
  const Ints low = e.attrs().get_ints("padding_low"), high = e.attrs().get_ints("padding_high");
  const int64_t groups = e.attrs().get_int("groups", 1);
  const Ints spatial = iota_ints(0, d);
  const bool transposed_conv = lhs_dilation != Ints(d, 1);
  ::onnx::NodeProto* conv;
  const std::string x = transposed(e, e.in(0), to_channels_first(d));
  if (!transposed_conv) {
    if (std::any_of(low.begin(), low.end(), [](int64_t p) { return p < 0; }) ||
        std::any_of(high.begin(), high.end(), [](int64_t p) { return p < 0; }))
      e.unsupported("negative padding, which ONNX's Conv lacks");
    conv = e.add("Conv", {x, onnx_kernel(e, e.in(1), {}, concat({d + 1, d}, spatial))});
    set_attr(conv, "strides", strides);
    set_attr(conv, "pads", concat(low, high));
    set_attr(conv, "group", groups);
  } else {
    if (strides != Ints(d, 1) || groups != 1)
      e.unsupported("input dilation with strides " + ints_str(strides) + " and groups " +
                    std::to_string(groups) + " (ONNX's ConvTranspose needs 1 and 1)");
    if (!is_fully_defined(Shape(k.begin(), k.begin() + d)))
      e.unsupported("a transposed convolution whose kernel size is not known");
    Ints pads_begin, pads_end, output_padding;
    for (int64_t i = 0; i < d; ++i) {
      const int64_t span = (k[i] - 1) * dilation[i] + 1;
      if (low[i] > span - 1 || low[i] < 0 || high[i] < 0)
        e.unsupported("padding " + ints_str(low) + " / " + ints_str(high) +
                      " of a transposed convolution outside [0, kernel span)");
      pads_begin.push_back(span - 1 - low[i]);
      pads_end.push_back(std::max<int64_t>(0, span - 1 - high[i]));
      output_padding.push_back(std::max<int64_t>(0, high[i] - (span - 1)));
    }
    conv =
        e.add("ConvTranspose", {x, onnx_kernel(e, e.in(1), spatial, concat({d, d + 1}, spatial))});
    set_attr(conv, "strides", lhs_dilation);
    set_attr(conv, "pads", concat(pads_begin, pads_end));
    if (output_padding != Ints(d, 0)) set_attr(conv, "output_padding", output_padding);
  }
  set_attr(conv, "dilations", dilation);
  if (is_fully_defined(Shape(k.begin(), k.begin() + d)))
    set_attr(conv, "kernel_shape", Ints(k.begin(), k.begin() + d));
  set_attr(e.add("Transpose", {conv->output(0)}, e.out()), "perm", to_channels_last(d));
}

// reduce_window_max / _sum: the dimensions the window leaves alone must be two (batch and
// channels, in either place); they go first, the windowed ones after, for MaxPool or
// AveragePool (counting the padding: a sum is that average times the window's size).
Emit pool(bool max) {
  return [max](NodeEmitter& e) {
    const Ints& window = e.attrs().get_ints("window");
    const int64_t r = static_cast<int64_t>(window.size());
    const Ints strides = attr_ints_or(e.attrs(), "strides", Ints(r, 1));
    const Ints low = attr_ints_or(e.attrs(), "padding_low", Ints(r, 0));
    const Ints high = attr_ints_or(e.attrs(), "padding_high", Ints(r, 0));
    Ints trivial;
    for (int64_t i = 0; i < r; ++i)
      if (window[i] == 1 && strides[i] == 1 && low[i] == 0 && high[i] == 0) trivial.push_back(i);
    if (static_cast<int64_t>(trivial.size()) == r) {
      e.add("Identity", {e.in(0)}, e.out());
      return;
    }
    if (trivial.size() < 2) {
      e.unsupported("a window over " + std::to_string(r - trivial.size()) + " of " +
                    std::to_string(r) + " dimensions; ONNX pools all but two (batch, channels)");
    }
    // The first and last dimensions the window leaves alone are ONNX's batch and channels; the
    // rest are pooled (with a window of 1 where Kiln's is trivial).
    const Ints kept = {trivial.front(), trivial.back()};
    Ints windowed;
    for (int64_t i = 0; i < r; ++i)
      if (i != kept[0] && i != kept[1]) windowed.push_back(i);
    if (!max && !is_floating(e.in_type(0).dtype))
      e.unsupported("a windowed sum of " + e.in_type(0).str() + " (AveragePool takes floats)");
    const Ints perm = concat(kept, windowed);
    const bool moved = !is_identity(perm);
    std::string x = moved ? transposed(e, e.in(0), perm) : e.in(0);
    ::onnx::NodeProto* p = e.add(max ? "MaxPool" : "AveragePool", {x});
    set_attr(p, "kernel_shape", pick(window, windowed));
    set_attr(p, "strides", pick(strides, windowed));
    set_attr(p, "pads", concat(pick(low, windowed), pick(high, windowed)));
    std::string y = p->output(0);
    if (!max) {
      set_attr(p, "count_include_pad", 1);
      const Ints size = pick(window, windowed);
      const double taps = std::accumulate(size.begin(), size.end(), 1.0, std::multiplies<double>());
      y = e.value("Mul", {y, e.scalar(taps, e.in_type(0).dtype)});
    }
    if (moved) {
      set_attr(e.add("Transpose", {y}, e.out()), "perm", inverse(perm));
    } else {
      e.add("Identity", {y}, e.out());
    }
  };
}

// Kiln op -> its emitter. An op not here (random ops, control flow, collectives, the gradient
// ops, custom ops) is reported by name.
}  // namespace

const std::unordered_map<std::string, Emit>& emitters() {
  // clang-format off
  static const std::unordered_map<std::string, Emit> t = {
      // elementwise
      {"neg", same("Neg")}, {"abs", same("Abs")}, {"exp", same("Exp")}, {"log", same("Log")},
      {"sqrt", same("Sqrt")}, {"rsqrt", then("Sqrt", "Reciprocal")}, {"log1p", emit_log1p},
      {"expm1", emit_expm1}, {"tanh", same("Tanh")}, {"logistic", same("Sigmoid")},
      {"sin", same("Sin")}, {"cos", same("Cos")}, {"tan", same("Tan")}, {"erf", same("Erf")},
      {"sign", same("Sign")}, {"floor", same("Floor")}, {"ceil", same("Ceil")},
      {"round", same("Round")}, {"logical_not", same("Not")}, {"is_finite", emit_is_finite},
      {"add", same("Add")}, {"sub", same("Sub")}, {"mul", same("Mul")}, {"div", same("Div")},
      {"pow", same("Pow")}, {"max", same("Max")}, {"min", same("Min")}, {"rem", emit_rem},
      {"logical_and", same("And")}, {"logical_or", same("Or")}, {"eq", same("Equal")},
      {"ne", then("Equal", "Not")}, {"lt", same("Less")}, {"le", same("LessOrEqual")},
      {"gt", same("Greater")}, {"ge", same("GreaterOrEqual")}, {"select", same("Where")},
      {"clamp", emit_clamp}, {"convert", emit_convert}, {"stop_gradient", same("Identity")},
      // reductions
      {"reduce_sum", reduce("ReduceSum")}, {"reduce_prod", reduce("ReduceProd")},
      {"reduce_max", reduce("ReduceMax")}, {"reduce_min", reduce("ReduceMin")},
      {"reduce_any", reduce_bool("ReduceMax")}, {"reduce_all", reduce_bool("ReduceMin")},
      {"argmax", arg("ArgMax")}, {"argmin", arg("ArgMin")},
      // layout
      {"transpose", emit_transpose}, {"reshape", emit_reshape},
      {"reshape_like", emit_reshape_like}, {"broadcast_in_dim", emit_broadcast},
      {"broadcast_like", emit_broadcast}, {"slice", emit_slice}, {"reverse", emit_reverse},
      {"concatenate", emit_concatenate}, {"pad", emit_pad}, {"gather", emit_gather},
      {"iota", emit_iota},
      // linear algebra and windows
      {"dot", emit_dot}, {"convolution", emit_convolution},
      {"reduce_window_max", pool(true)}, {"reduce_window_sum", pool(false)},
  };
  // clang-format on
  return t;
}

}  // namespace kiln::onnx::export_internal
