// kiln::onnx::export_model: a Kiln inference graph as an ONNX ModelProto. One table maps each Kiln
// op to a function emitting its ONNX nodes; variables and constants become initializers.
#include <algorithm>
#include <functional>
#include <limits>
#include <numeric>
#include <set>
#include <unordered_map>

#include "interop/onnx_tensor.h"
#include "kiln/error.h"
#include "kiln/graph.h"
#include "kiln/onnx.h"
#include "kiln/ops.h"
#include "kiln/version.h"
#include "src/api/io/file_io.h"
#include "src/core/graph_walk.h"

namespace kiln::onnx {
namespace {

using Ints = std::vector<int64_t>;

[[noreturn]] void fail(ErrorCode code, const std::string& message) { throw Error(code, message); }

// Thrown by an emitter for a node ONNX cannot express; export_model lists every one at once.
struct Unsupported {
  std::string why;
};

void set_attr(::onnx::NodeProto* n, const std::string& name, int64_t v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::INT);
  a->set_i(v);
}

void set_attr(::onnx::NodeProto* n, const std::string& name, const Ints& v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}

// Dims of `shape` at `axes`.
Ints pick(const Ints& v, const Ints& axes) {
  Ints out;
  for (int64_t a : axes) out.push_back(v[a]);
  return out;
}

Ints concat(Ints a, const Ints& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

Ints inverse(const Ints& perm) {
  Ints inv(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inv[perm[i]] = static_cast<int64_t>(i);
  return inv;
}

bool is_identity(const Ints& perm) {
  for (size_t i = 0; i < perm.size(); ++i)
    if (perm[i] != static_cast<int64_t>(i)) return false;
  return true;
}

std::string ints_str(const Ints& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(v[i]);
  }
  return s + ']';
}

Ints iota_ints(int64_t from, int64_t to) {
  Ints v(std::max<int64_t>(0, to - from));
  std::iota(v.begin(), v.end(), from);
  return v;
}

// The ONNX graph being built: unique value and node names, initializers and their values.
class Builder {
 public:
  Builder(::onnx::GraphProto* graph, int64_t opset) : graph_(graph), opset_(opset) {}
  int64_t opset() const { return opset_; }

  // `base`, or `base` with the first free numeric suffix.
  std::string unique_value(const std::string& base) { return unique(values_, base); }
  bool claim_value(const std::string& name) { return values_.insert(name).second; }

  ::onnx::NodeProto* add_node(const std::string& op, const std::string& name,
                              const std::vector<std::string>& inputs,
                              const std::vector<std::string>& outputs) {
    ::onnx::NodeProto* n = graph_->add_node();
    n->set_op_type(op);
    n->set_name(unique(nodes_, name));
    for (const std::string& i : inputs) n->add_input(i);
    for (const std::string& o : outputs) n->add_output(o);
    return n;
  }

  // An initializer holding `value` (concrete) under the name given.
  void add_initializer(const std::string& name, const Tensor& value) {
    ::onnx::TensorProto* t = graph_->add_initializer();
    internal::tensor_to_proto(value, t);
    t->set_name(name);
    initializer_values_[name] = value;
  }
  // The value of the initializer `name`, if it is one (a weight an emitter may fold).
  const Tensor* initializer_value(const std::string& name) const {
    auto it = initializer_values_.find(name);
    return it == initializer_values_.end() ? nullptr : &it->second;
  }

  ::onnx::GraphProto* graph() { return graph_; }

 private:
  static std::string unique(std::set<std::string>& used, const std::string& base) {
    std::string name = base;
    for (int i = 1; !used.insert(name).second; ++i) name = base + "_" + std::to_string(i);
    return name;
  }

  ::onnx::GraphProto* graph_;
  int64_t opset_;
  std::set<std::string> values_, nodes_;
  std::unordered_map<std::string, Tensor> initializer_values_;
};

// One Kiln node being exported: its inputs as ONNX value names and types, the names its outputs
// must get, and helpers adding ONNX nodes named after it.
class NodeEmitter {
 public:
  NodeEmitter(Builder& b, const NodeInfo& node, std::vector<std::string> inputs,
              std::vector<TensorType> input_types, std::vector<std::string> outputs)
      : b_(b),
        node_(node),
        inputs_(std::move(inputs)),
        input_types_(std::move(input_types)),
        outputs_(std::move(outputs)) {}

  const NodeInfo& node() const { return node_; }
  const Attrs& attrs() const { return node_.attrs; }
  const std::string& in(size_t i) const { return inputs_.at(i); }
  const TensorType& in_type(size_t i) const { return input_types_.at(i); }
  const TensorType& out_type(size_t i = 0) const { return node_.outputs.at(i); }
  const std::string& out(size_t i = 0) const { return outputs_.at(i); }
  Builder& builder() { return b_; }

  // Adds `op`(inputs) whose one output is `output`, or a new intermediate value when empty;
  // returns the node (its output is node->output(0)).
  ::onnx::NodeProto* add(const std::string& op, const std::vector<std::string>& inputs,
                         const std::string& output = "") {
    const std::string o = output.empty() ? b_.unique_value(node_.name + "/" + op) : output;
    return b_.add_node(op, node_.name + (output == out(0) ? "" : "/" + op), inputs, {o});
  }
  // The output name of add(...), for chaining.
  std::string value(const std::string& op, const std::vector<std::string>& inputs,
                    const std::string& output = "") {
    return add(op, inputs, output)->output(0);
  }
  // A 1-d int64 initializer (shapes, axes, starts).
  std::string ints(const Ints& v) {
    return initializer(Tensor::from_vector(v, {static_cast<int64_t>(v.size())}));
  }
  // A scalar of `dtype`.
  std::string scalar(double v, DType dtype) {
    return initializer(convert(Tensor::scalar(v), dtype));
  }
  std::string initializer(const Tensor& value) {
    const std::string name = b_.unique_value(node_.name + "/const");
    b_.add_initializer(name, value);
    return name;
  }

  [[noreturn]] void unsupported(const std::string& why) const { throw Unsupported{why}; }

 private:
  Builder& b_;
  const NodeInfo& node_;
  std::vector<std::string> inputs_;
  std::vector<TensorType> input_types_;
  std::vector<std::string> outputs_;
};

using Emit = std::function<void(NodeEmitter&)>;

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
const std::unordered_map<std::string, Emit>& table() {
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

// ---- the graph ------------------------------------------------------------------------------

void set_value_info(::onnx::ValueInfoProto* v, const std::string& name, const TensorType& type,
                    const std::vector<std::string>& dim_names) {
  v->set_name(name);
  auto* tt = v->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(internal::onnx_dtype(type.dtype));
  auto* shape = tt->mutable_shape();
  for (size_t i = 0; i < type.shape.size(); ++i) {
    auto* dim = shape->add_dim();
    const std::string& named = i < dim_names.size() ? dim_names[i] : std::string();
    if (!named.empty())
      dim->set_dim_param(named);
    else if (type.shape[i] != kUnknownDim)
      dim->set_dim_value(type.shape[i]);
  }
}

// The dim_params of a graph input or output: the options' names, else for an input "batch" for
// an unknown first dimension and "<input>_<axis>" for other unknown ones.
std::vector<std::string> dim_names_of(const std::string& name, const Shape& shape, bool input,
                                      const ExportOptions& options) {
  std::vector<std::string> names(shape.size());
  auto given = options.dim_names.find(name);
  for (size_t i = 0; i < shape.size(); ++i) {
    if (given != options.dim_names.end() && i < given->second.size() && !given->second[i].empty())
      names[i] = given->second[i];
    else if (input && shape[i] == kUnknownDim)
      names[i] = i == 0 ? "batch" : name + "_" + std::to_string(i);
  }
  return names;
}

int64_t ir_version_for(int64_t opset) { return opset >= 15 ? 8 : 7; }

class Exporter {
 public:
  Exporter(const io::ExportedGraph& graph, const ExportOptions& options)
      : g_(graph), options_(options), b_(model_.mutable_graph(), options.opset) {}

  ::onnx::ModelProto run() {
    if (options_.opset < 13 || options_.opset > 17) {
      fail(ErrorCode::kInvalidArgument, where() + "opset " + std::to_string(options_.opset) +
                                            " is out of range: Kiln exports opsets 13 to 17");
    }
    if (g_.outputs.empty()) fail(ErrorCode::kInvalidArgument, where() + "the graph has no outputs");
    model_.set_ir_version(ir_version_for(options_.opset));
    model_.set_producer_name("kiln");
    model_.set_producer_version(options_.producer_version.empty() ? kiln::version()
                                                                  : options_.producer_version);
    auto* opset = model_.add_opset_import();
    opset->set_domain("");
    opset->set_version(options_.opset);
    model_.mutable_graph()->set_name(g_.model_name.empty() ? "kiln_model" : g_.model_name);

    find_needed();
    name_signature();
    for (int id = 0; id < static_cast<int>(needed_.size()); ++id)
      if (needed_[id]) export_node(g_.graph.node(id));
    if (!problems_.empty()) {
      std::string msg = where() + "Kiln cannot export " + std::to_string(problems_.size()) +
                        " node" + (problems_.size() == 1 ? "" : "s") + " to ONNX:";
      for (const std::string& p : problems_) msg += "\n  " + p;
      fail(ErrorCode::kUnimplemented, msg);
    }
    add_outputs();
    drop_unused_initializers();
    return std::move(model_);
  }

 private:
  std::string where() const { return "export_model: '" + g_.model_name + "': "; }

  static ValueRef ref_of(const Tensor& t) { return {t.impl()->node, t.impl()->output}; }

  void find_needed() {
    std::vector<int> roots;
    for (const auto& [name, t] : g_.outputs) {
      if (!t.defined() || t.impl()->graph != g_.graph.impl())
        fail(ErrorCode::kInvalidArgument,
             where() + "output '" + name + "' is not a value of the graph");
      roots.push_back(t.impl()->node);
    }
    std::lock_guard lock(g_.graph.impl()->mu);
    needed_ = detail::ancestors(g_.graph.impl()->nodes, roots);
  }

  // Inputs and outputs keep their signature names; variables become initializers named after
  // them; an output that is an input, an initializer or another output's value goes through an
  // Identity (ONNX names each value once).
  void name_signature() {
    for (const auto& [name, t] : g_.inputs) claim(name);
    for (const auto& [name, t] : g_.outputs) claim(name);
    for (const auto& [name, t] : g_.inputs) {
      names_[key(ref_of(t))] = name;
      inputs_.insert(t.impl()->node);
      const TensorType type{t.dtype(), t.shape()};
      set_value_info(model_.mutable_graph()->add_input(), name, type,
                     dim_names_of(name, t.shape(), /*input=*/true, options_));
    }
    for (const auto& [var, placeholder] : g_.variables) {
      const int id = placeholder.impl()->node;
      if (id >= static_cast<int>(needed_.size()) || !needed_[id] || inputs_.count(id)) continue;
      const std::string name = b_.unique_value(var.name());
      names_[key(ref_of(placeholder))] = name;
      b_.add_initializer(name, var.value());
      variables_.insert(id);
    }
    for (const auto& [name, t] : g_.outputs) {
      const ValueRef r = ref_of(t);
      const std::string op = g_.graph.node(r.node).op;
      if (names_.count(key(r)) || op == "placeholder" || op == "constant") {
        identities_.emplace_back(r, name);
      } else {
        names_[key(r)] = name;
      }
    }
  }

  void claim(const std::string& name) {
    if (!b_.claim_value(name))
      fail(ErrorCode::kInvalidArgument, where() + "two inputs or outputs are named '" + name + "'");
  }

  static int64_t key(const ValueRef& r) { return (int64_t{r.node} << 20) | r.output; }

  // The ONNX name of a node's output, made on first use.
  std::string name_of(const ValueRef& r, const NodeInfo& node) {
    auto it = names_.find(key(r));
    if (it != names_.end()) return it->second;
    std::string base = node.name;
    if (r.output) base += ':' + std::to_string(r.output);
    return names_[key(r)] = b_.unique_value(base);
  }

  void export_node(const NodeInfo& node) {
    if (node.op == "placeholder") {
      if (!inputs_.count(node.id) && !variables_.count(node.id)) {
        fail(ErrorCode::kInvalidArgument, where() + "the outputs need placeholder '" + node.name +
                                              "', which is neither an input nor a variable");
      }
      return;
    }
    if (node.op == "constant") {
      b_.add_initializer(name_of({node.id, 0}, node), node.attrs.get_tensor("value"));
      return;
    }
    std::vector<std::string> ins;
    std::vector<TensorType> in_types;
    for (const ValueRef& in : node.inputs) {
      const NodeInfo producer = g_.graph.node(in.node);
      ins.push_back(name_of(in, producer));
      in_types.push_back(producer.outputs.at(in.output));
    }
    std::vector<std::string> outs;
    for (int o = 0; o < static_cast<int>(node.outputs.size()); ++o)
      outs.push_back(name_of({node.id, o}, node));
    auto it = table().find(node.op);
    if (it == table().end()) {
      problems_.push_back("node '" + node.name + "' (" + node.op + "): no ONNX form for op '" +
                          node.op + "'");
      return;
    }
    NodeEmitter e(b_, node, std::move(ins), std::move(in_types), std::move(outs));
    try {
      it->second(e);
    } catch (const Unsupported& u) {
      problems_.push_back("node '" + node.name + "' (" + node.op + "): " + u.why);
    }
  }

  void add_outputs() {
    for (const auto& [r, name] : identities_) {
      const NodeInfo node = g_.graph.node(r.node);
      b_.add_node("Identity", name, {name_of(r, node)}, {name});
    }
    for (const auto& [name, t] : g_.outputs) {
      set_value_info(model_.mutable_graph()->add_output(), name, {t.dtype(), t.shape()},
                     dim_names_of(name, t.shape(), /*input=*/false, options_));
    }
  }

  // Weights an emitter replaced (a convolution's kernel, transposed) and no node reads.
  void drop_unused_initializers() {
    ::onnx::GraphProto* graph = model_.mutable_graph();
    std::set<std::string> used;
    for (const auto& n : graph->node())
      for (const auto& i : n.input()) used.insert(i);
    for (const auto& o : graph->output()) used.insert(o.name());
    auto* inits = graph->mutable_initializer();
    inits->erase(
        std::remove_if(inits->begin(), inits->end(),
                       [&](const ::onnx::TensorProto& t) { return !used.count(t.name()); }),
        inits->end());
  }

  const io::ExportedGraph& g_;
  const ExportOptions& options_;
  ::onnx::ModelProto model_;
  Builder b_;
  std::vector<bool> needed_;
  std::unordered_map<int64_t, std::string> names_;
  std::set<int> inputs_, variables_;
  std::vector<std::pair<ValueRef, std::string>> identities_;
  std::vector<std::string> problems_;
};

}  // namespace

std::string export_model_to_string(const io::ExportedGraph& graph, const ExportOptions& options) {
  const ::onnx::ModelProto model = Exporter(graph, options).run();
  std::string bytes;
  if (!model.SerializeToString(&bytes)) {
    fail(ErrorCode::kInternal, "export_model: '" + graph.model_name +
                                   "': the model does not serialize (over protobuf's 2 GiB?)");
  }
  return bytes;
}

void export_model(const io::ExportedGraph& graph, const std::string& path,
                  const ExportOptions& options) {
  const std::string bytes = export_model_to_string(graph, options);
  io::internal::OutputFile file(path, io::internal::OutputFile::Mode::kAtomic,
                                io::Compression::kNone, "export_model");
  file.write(bytes.data(), bytes.size());
  file.close();
}

}  // namespace kiln::onnx
