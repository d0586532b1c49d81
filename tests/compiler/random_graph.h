// Seeded random graphs for differential tests of the compiler (optimize-only and compiled), and
// a shrinker that reduces a failing graph to a small reproducer. A graph is described by a
// GraphSpec (inputs, recipes, outputs) that build() replays: each recipe reads its parameters
// from its own seed *relative to its inputs' actual shapes*, so any edit the shrinker makes
// (a node replaced by one of its inputs, a smaller input dimension) still builds a valid graph.
// The kernel-op recipes (convolution, pooling, gather, scatter) are off by default (so the older
// tests keep their graphs, seed for seed) and on with GeneratorOptions::kernel_ops; differentiate()
// turns a built graph into the graph of its gradients.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "kiln/kiln.h"

namespace kiln::compiler::testing {

enum class Recipe : uint8_t {
  kIdentity,  // the input itself (the shrinker's replacement; records nothing)
  kUnary,     // elementwise unary, inputs kept in the op's domain (log(|x| + 0.5), ...)
  kBinary,    // elementwise binary with a broadcast partner (another value or a constant)
  kCompare,   // eq/ne/lt/le/gt/ge -> bool
  kSelect,
  kClamp,
  kConvert,
  kReshape,
  kTranspose,
  kSlice,
  kPad,
  kConcat,
  kBroadcast,  // broadcast_in_dim: a new dimension, or a size-1 dimension stretched
  kReverse,
  kReduce,  // sum/max/min/mean/prod/any/all/argmax/argmin over random axes, keepdims or not
  kDot,     // matmul / dot_general against a constant or a new placeholder
  kRandom,  // x + random_uniform/normal/bernoulli with a constant seed
  kConstantSubgraph,  // x + a * -b over constants: constant folding's target
  kDense,             // matmul + bias + relu/tanh/logistic: the dot epilogue fusion's pattern
  kNetwork,           // softmax, log_softmax, logsumexp, variance, gelu: reductions with producers
  // The kernel-op recipes (GeneratorOptions::kernel_ops):
  kConv,     // N-d convolution (0-2 spatial dimensions): strides, padding, dilations, groups
  kPool,     // reduce_window max/sum over every dimension, or Keras max/avg pooling of NHWC
  kGather,   // gather along a random axis, constant or computed (clamped) indices
  kScatter,  // scatter_add along a random axis (duplicate indices accumulate)
  kCount,
};

inline const char* recipe_name(Recipe r) {
  static const char* kNames[] = {
      "identity",  "unary",   "binary",    "compare", "select", "clamp",
      "convert",   "reshape", "transpose", "slice",   "pad",    "concat",
      "broadcast", "reverse", "reduce",    "dot",     "random", "constant_subgraph",
      "dense",     "network", "conv",      "pool",    "gather", "scatter"};
  return r < Recipe::kCount ? kNames[static_cast<int>(r)] : "?";
}

struct InputSpec {
  DType dtype = f32;
  Shape shape;
  uint32_t seed = 0;  // of its values
};

struct NodeSpec {
  Recipe recipe = Recipe::kIdentity;
  std::vector<int> args;  // value ids: inputs first (0 .. inputs-1), then nodes
  uint32_t seed = 0;      // of the recipe's choices and constants
};

struct GraphSpec {
  uint32_t seed = 0;  // of the generator (for the reproducer message)
  std::vector<InputSpec> inputs;
  std::vector<NodeSpec> nodes;
  std::vector<int> outputs;
  int64_t max_elements = 512;  // recipes that would grow a value past this many elements skip

  int num_values() const { return static_cast<int>(inputs.size() + nodes.size()); }
  bool operator==(const GraphSpec& o) const {
    if (inputs.size() != o.inputs.size() || nodes.size() != o.nodes.size() ||
        outputs != o.outputs || max_elements != o.max_elements)
      return false;
    for (size_t i = 0; i < inputs.size(); ++i)
      if (inputs[i].dtype != o.inputs[i].dtype || inputs[i].shape != o.inputs[i].shape ||
          inputs[i].seed != o.inputs[i].seed)
        return false;
    for (size_t i = 0; i < nodes.size(); ++i)
      if (nodes[i].recipe != o.nodes[i].recipe || nodes[i].args != o.nodes[i].args ||
          nodes[i].seed != o.nodes[i].seed)
        return false;
    return true;
  }
  std::string str() const {
    std::string s = "spec (generator seed " + std::to_string(seed) + "):\n";
    for (size_t i = 0; i < inputs.size(); ++i)
      s += "  v" + std::to_string(i) + " = input " +
           TensorType{inputs[i].dtype, inputs[i].shape}.str() + " seed " +
           std::to_string(inputs[i].seed) + "\n";
    for (size_t i = 0; i < nodes.size(); ++i) {
      s += "  v" + std::to_string(inputs.size() + i) + " = " + recipe_name(nodes[i].recipe) + "(";
      for (size_t k = 0; k < nodes[i].args.size(); ++k)
        s += (k ? ", v" : "v") + std::to_string(nodes[i].args[k]);
      s += ") seed " + std::to_string(nodes[i].seed) + "\n";
    }
    s += "  outputs:";
    for (int o : outputs) s += " v" + std::to_string(o);
    return s + "\n";
  }
};

// A spec recorded into a graph: the placeholders' feeds and the fetched outputs.
struct BuiltGraph {
  Graph graph{"random"};
  FeedList feeds;
  std::vector<Tensor> outputs;
  std::vector<Tensor> values;  // per value id

  std::vector<std::string> feed_names;  // per feed

  // "p0: f32[2,3], w: f32[3,2]"
  std::string feed_shapes() const {
    std::string s;
    for (size_t i = 0; i < feeds.size(); ++i)
      s += (i ? ", " : "") + feed_names[i] + ": " +
           TensorType{feeds[i].second.dtype(), feeds[i].second.shape()}.str();
    return s;
  }
};

namespace random_graph_detail {

inline constexpr size_t kMaxRank = 4;

inline bool broadcastable(const Shape& a, const Shape& b) {
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    int64_t x = a[a.size() - 1 - i], y = b[b.size() - 1 - i];
    if (x != y && x != 1 && y != 1) return false;
  }
  return true;
}

inline Shape broadcast_shape(const Shape& a, const Shape& b) {
  Shape r(std::max(a.size(), b.size()));
  for (size_t i = 0; i < r.size(); ++i) {
    int64_t x = i < a.size() ? a[a.size() - 1 - i] : 1, y = i < b.size() ? b[b.size() - 1 - i] : 1;
    r[r.size() - 1 - i] = x == 1 ? y : x;
  }
  return r;
}

// Values that are exact in every dtype: quarters in [-2, 2] for floats, [-3, 3] for integers.
inline Tensor random_value(DType dtype, const Shape& shape, uint32_t seed, double lo = -2,
                           double hi = 2, bool special = true) {
  std::mt19937 rng(seed);
  const int64_t n = num_elements(shape);
  if (dtype == bool_) {
    std::vector<bool> v(n);
    for (int64_t i = 0; i < n; ++i) v[i] = rng() & 1;
    return Tensor::from_vector(v, shape);
  }
  bool fp = is_floating(dtype);
  if (!fp) lo = std::floor(lo * 1.5), hi = std::ceil(hi * 1.5);
  std::vector<double> v(n);
  int steps = static_cast<int>(fp ? (hi - lo) * 4 : hi - lo);
  for (int64_t i = 0; i < n; ++i) {
    int k = std::uniform_int_distribution<int>(0, steps)(rng);
    v[i] = fp ? lo + 0.25 * k : lo + k;
  }
  // One floating-point tensor in eight also holds special values (a quarter of its elements):
  // signed zeros, infinities, NaN, subnormal, tiny and halfway-rounding values. No huge finite
  // values: a sum of 1e30, 7 and -1e30 is 0 or 7 depending on the order of the additions, and
  // fused reductions may reorder (they vectorise); infinities and NaN give one result in any order.
  if (fp && special && rng() % 8 == 0) {
    static const double kSpecial[] = {-0.0,   INFINITY, -INFINITY, NAN,  1e-40,
                                      -1e-41, 2.5,      -0.5,      1e-7, -3.5};
    for (int64_t i = 0; i < n; ++i)
      if (rng() % 4 == 0) v[i] = kSpecial[rng() % std::size(kSpecial)];
  }
  return convert(Tensor::from_vector(v, shape), dtype);
}

// Records a spec's recipes into a graph, one at a time.
class Builder {
 public:
  Builder(BuiltGraph* out, int64_t max_elements)
      : b_(*out), g_(out->graph), max_elements_(max_elements) {}

  void add_input(const InputSpec& in, int index) {
    std::string name = "p" + std::to_string(index);
    Tensor p = g_.placeholder(in.dtype, in.shape, name);
    b_.feeds.push_back({p, random_value(in.dtype, in.shape, in.seed)});
    b_.feed_names.push_back(name);
    b_.values.push_back(p);
  }

  void apply(const NodeSpec& n) {
    rng_.seed(n.seed);
    std::vector<Tensor> args;
    for (int a : n.args) args.push_back(b_.values.at(a));
    Tensor y = args.empty() ? Tensor() : make(n.recipe, args);
    b_.values.push_back(y);
  }

 private:
  int pick(int n) { return n <= 1 ? 0 : std::uniform_int_distribution<int>(0, n - 1)(rng_); }
  bool coin() { return pick(2) == 0; }

  Tensor constant(DType dtype, const Shape& shape, double lo = -2, double hi = 2) {
    return g_.constant(random_value(dtype, shape, static_cast<uint32_t>(rng_()), lo, hi, lo == -2));
  }
  Tensor scalar(double v, DType dtype) { return g_.constant(convert(Tensor::scalar(v), dtype)); }
  // A value fed at run time (a weight): the optimizer cannot fold it.
  Tensor parameter(DType dtype, const Shape& shape) {
    std::string name = "w" + std::to_string(b_.feeds.size());
    Tensor p = g_.placeholder(dtype, shape, name);
    b_.feeds.push_back({p, random_value(dtype, shape, static_cast<uint32_t>(rng_()))});
    b_.feed_names.push_back(name);
    return p;
  }

  // A shape that broadcasts against s: s itself, a scalar, some dimensions set to 1, or
  // leading dimensions dropped.
  Shape partner_shape(const Shape& s) {
    Shape r = s;
    switch (pick(4)) {
      case 0:
        return {};
      case 1:
        return r;
      case 2:
        for (int64_t& d : r)
          if (coin()) d = 1;
        return r;
      default:
        r.erase(r.begin(), r.begin() + pick(static_cast<int>(s.size()) + 1));
        return r;
    }
  }

  // The second operand of a binary op on x: `other` when it broadcasts with x (converted to
  // x's dtype), otherwise a constant (sometimes a fed parameter) of a partner shape.
  Tensor partner(const Tensor& x, const std::vector<Tensor>& args, size_t k) {
    if (args.size() > k && args[k].defined()) {
      Tensor y = args[k];
      if (broadcastable(x.shape(), y.shape()) &&
          num_elements(broadcast_shape(x.shape(), y.shape())) <= max_elements_ &&
          broadcast_shape(x.shape(), y.shape()).size() <= kMaxRank) {
        return y.dtype() == x.dtype() ? y : convert(y, x.dtype());
      }
    }
    Shape s = partner_shape(x.shape());
    return pick(4) == 0 ? parameter(x.dtype(), s) : constant(x.dtype(), s);
  }

  static Tensor as_numeric(const Tensor& x) { return x.dtype() == bool_ ? convert(x, f32) : x; }

  // Constant indices into a dimension of size `dim` (i32 or i64, rank 0-2, duplicates likely);
  // none (shape [0]) when the dimension is empty.
  Tensor indices(int64_t dim) {
    Shape shape(pick(3));
    for (int64_t& d : shape) d = pick(4);
    if (dim == 0) shape = {0};
    std::vector<int64_t> v(num_elements(shape));
    for (int64_t& i : v) i = pick(static_cast<int>(dim));
    return g_.constant(convert(Tensor::from_vector(v, shape), coin() ? i32 : i64));
  }

  // x.shape[:axis] + indices + x.shape[axis+1:], as gather and scatter_add take it.
  static Shape taken_shape(const Shape& x, int axis, const Shape& indices) {
    Shape out(x.begin(), x.begin() + axis);
    out.insert(out.end(), indices.begin(), indices.end());
    out.insert(out.end(), x.begin() + axis + 1, x.end());
    return out;
  }

  // A convolution of x seen as [batch, spatial..., channels] (rank < 2 reshaped to [1, n, 1],
  // rank 2 to [1, n, c]: the op accepts no spatial dimension, but its gradient ops do not):
  // per spatial dimension a kernel of 1-3 taps, stride 1-2, padding 0-1 per side, now and then a
  // kernel or input dilation of 2; groups divide the channels. Then sometimes a bias and a relu
  // (the compiler's fused_conv pattern), and a max pool (fused_conv_pool).
  Tensor make_conv(const Tensor& x) {
    Tensor v = is_floating(x.dtype()) ? x : convert(x, f32);
    if (v.rank() < 2) v = reshape(v, {1, num_elements(x.shape()), 1});
    if (v.rank() == 2) v = reshape(v, {1, v.shape()[0], v.shape()[1]});
    // Now and then a 1-d case as 2-d (NHWC with W = 1), where a 2-d max pool may follow; chosen
    // by the shape, not a draw, so that the graphs of every other seed stay as they were.
    if (v.rank() == 3 && (v.shape()[1] + v.shape()[2]) % 4 == 1) {
      v = reshape(v, {v.shape()[0], v.shape()[1], 1, v.shape()[2]});
    }
    const Shape& s = v.shape();
    const size_t d = s.size() - 2;
    const int64_t c_in = s.back();
    std::vector<int64_t> divisors;
    for (int64_t g = 1; g <= c_in; ++g)
      if (c_in % g == 0) divisors.push_back(g);
    ConvOptions o;
    o.groups = divisors.empty() ? 1 : divisors[pick(static_cast<int>(divisors.size()))];
    const int64_t c_out = o.groups * (1 + pick(2));
    Shape kernel, out = {s[0]};
    for (size_t i = 0; i < d; ++i) {
      const int64_t n = s[i + 1];
      int64_t taps = 1 + pick(3), dilation = pick(4) == 0 ? 2 : 1, lhs = pick(6) == 0 ? 2 : 1;
      const int64_t low = pick(2), high = pick(2), stride = 1 + pick(2);
      const int64_t padded = (n == 0 ? 0 : (n - 1) * lhs + 1) + low + high;
      if (padded < (taps - 1) * dilation + 1) taps = dilation = 1;  // padded is 0 or >= 1 here
      kernel.push_back(taps);
      out.push_back(padded == 0 ? 0 : (padded - (taps - 1) * dilation - 1) / stride + 1);
      o.strides.push_back(stride);
      o.padding_low.push_back(low);
      o.padding_high.push_back(high);
      o.dilation.push_back(dilation);
      o.lhs_dilation.push_back(lhs);
    }
    kernel.push_back(c_in / o.groups);
    kernel.push_back(c_out);
    out.push_back(c_out);
    if (num_elements(out) > max_elements_) return x;
    const DType t = v.dtype();
    Tensor w = coin() ? parameter(t, kernel) : constant(t, kernel);
    Tensor y = conv(v, w, o);
    if (coin()) y = y + (coin() ? parameter(t, {c_out}) : constant(t, {c_out}));
    if (coin()) y = relu(y);
    // Now and then Keras's 'valid' MaxPool2D of a 2-d convolution (the fused_conv_pool pattern),
    // again chosen by the shape.
    if (y.rank() == 4 && y.shape()[1] >= 2 && (y.shape()[1] + c_out) % 2 == 0) {
      y = max_pool2d(y, {2, y.shape()[2] >= 2 ? 1 + c_out % 2 : 1});
    }
    return y;
  }

  // A window reduction of x: Keras max or average pooling when x is a rank-4 float (NHWC),
  // otherwise reduce_window max or sum over every dimension, each with a window of 1-3,
  // stride 1-2 and padding smaller than the window (no window lies wholly on padding).
  Tensor make_pool(const Tensor& x) {
    Tensor v = x.dtype() == bool_ ? convert(x, f32) : x;
    if (v.rank() == 0) v = reshape(v, {1});
    const Shape& s = v.shape();
    if (s.size() == 4 && is_floating(v.dtype()) && coin()) {
      Axes pool = {1 + pick(3), 1 + pick(3)}, strides = {1 + pick(2), 1 + pick(2)};
      bool same = coin() || s[1] < pool[0] || s[2] < pool[1];
      const char* padding = same ? "same" : "valid";
      return coin() ? max_pool2d(v, pool, strides, padding) : avg_pool2d(v, pool, strides, padding);
    }
    WindowOptions w;
    for (int64_t n : s) {
      int64_t window = 1 + pick(3), low = pick(2), high = pick(2);
      if (n == 0) window = 1;
      if (n > 0 && n + low + high < window) window = n;
      w.window.push_back(window);
      w.strides.push_back(1 + pick(2));
      w.padding_low.push_back(std::min(low, window - 1));
      w.padding_high.push_back(std::min(high, window - 1));
    }
    return coin() ? reduce_window_max(v, w) : reduce_window_sum(v, w);
  }

  // gather(x, indices, axis): constant indices, or an integer partner clamped into range.
  Tensor make_gather(const Tensor& x, const std::vector<Tensor>& args) {
    Tensor v = x.rank() == 0 ? reshape(x, {1}) : x;
    const int r = static_cast<int>(v.rank());
    const int axis = pick(r);
    const int64_t dim = v.shape()[axis];
    Tensor idx;
    if (args.size() > 1 && is_integer(args[1].dtype()) && args[1].rank() <= 2 && dim > 0 &&
        coin()) {
      idx = clamp(convert(args[1], coin() ? i32 : i64), 0, static_cast<double>(dim - 1));
    } else {
      idx = indices(dim);
    }
    Shape out = taken_shape(v.shape(), axis, idx.shape());
    if (num_elements(out) > max_elements_ || out.size() > kMaxRank) return x;
    return gather(v, idx, coin() ? axis : axis - r);
  }

  // scatter_add(x, indices, updates, axis): updates are the partner when it has the right
  // shape, otherwise a constant or a fed parameter.
  Tensor make_scatter(const Tensor& x, const std::vector<Tensor>& args) {
    Tensor v = as_numeric(x);
    if (v.rank() == 0) v = reshape(v, {1});
    const int r = static_cast<int>(v.rank());
    const int axis = pick(r);
    Tensor idx = indices(v.shape()[axis]);
    Shape us = taken_shape(v.shape(), axis, idx.shape());
    if (num_elements(us) > max_elements_) return x;
    const DType t = v.dtype();
    Tensor updates;
    if (args.size() > 1 && args[1].shape() == us) {
      updates = args[1].dtype() == t ? args[1] : convert(args[1], t);
    } else {
      updates = pick(4) == 0 ? parameter(t, us) : constant(t, us);
    }
    // Bounded integer operands: sums of duplicates must not overflow.
    if (!is_floating(t)) updates = clamp(updates, -64, 64);
    return scatter_add(v, idx, updates, coin() ? axis : axis - r);
  }

  Tensor make(Recipe r, const std::vector<Tensor>& args) {
    const Tensor& x = args[0];
    const Shape& s = x.shape();
    const int rank = static_cast<int>(s.size());
    const DType t = x.dtype();
    const bool fp = is_floating(t);
    switch (r) {
      case Recipe::kIdentity:
      case Recipe::kCount:
        return x;
      case Recipe::kUnary: {
        if (t == bool_) return coin() ? logical_not(x) : logical_not(logical_not(x));
        if (!fp) {
          switch (pick(4)) {
            case 0:
              return neg(x);
            case 1:
              return abs(x);
            case 2:
              return sign(x);
            default:
              return neg(neg(x));
          }
        }
        switch (pick(20)) {
          case 0:
            return neg(x);
          case 1:
            return abs(x);
          case 2:
            return exp(clamp(x, -8, 8));
          case 3:
            return log(abs(x) + 0.5);
          case 4:
            return log1p(abs(x));
          case 5:
            return expm1(clamp(x, -8, 8));
          case 6:
            return sqrt(abs(x));
          case 7:
            return rsqrt(abs(x) + 0.5);
          case 8:
            return tanh(x);
          case 9:
            return logistic(x);
          case 10:
            return sin(x);
          case 11:
            return cos(x);
          case 12:
            return erf(x);
          case 13:
            return sign(x);
          case 14:
            return floor(x);
          case 15:
            return ceil(x);
          case 16:
            return round(x);
          case 17:
            return neg(neg(x));
          case 18:
            return is_finite(x);
          default:
            return mul(x, x);
        }
      }
      case Recipe::kBinary: {
        Tensor y = partner(x, args, 1);
        if (t == bool_) return coin() ? logical_and(x, y) : logical_or(x, y);
        if (!fp) {
          switch (pick(7)) {
            case 0:
              return add(x, y);
            case 1:
              return sub(x, y);
            // Bounded operands: a chain of products must not overflow (UB in the reference).
            case 2:
              return mul(clamp(x, -64, 64), clamp(y, -64, 64));
            case 3:
              return div(x, y);  // x / 0 is -1 in both modes
            case 4:
              return maximum(x, y);
            case 5:
              return minimum(x, y);
            default:
              return rem(x, y);
          }
        }
        switch (pick(10)) {
          case 0:
            return add(x, y);
          case 1:
            return sub(y, x);
          case 2:
            return mul(x, y);
          case 3:
            return div(x, abs(y) + 0.5);
          case 4:
            return pow(abs(x) + 0.5, clamp(y, -2, 2));
          case 5:
            return maximum(x, y);
          case 6:
            return minimum(y, x);
          case 7:
            return rem(x, abs(y) + 0.5);
          case 8:
            return atan2(x, y);
          default:
            return div(x, scalar(coin() ? 1.0 : 2.0, t));  // x / 1: a simplifier target
        }
      }
      case Recipe::kCompare: {
        Tensor y = partner(x, args, 1);
        int op = pick(t == bool_ ? 2 : 6);
        switch (op) {
          case 0:
            return equal(x, y);
          case 1:
            return not_equal(x, y);
          case 2:
            return less(x, y);
          case 3:
            return less_equal(x, y);
          case 4:
            return greater(x, y);
          default:
            return greater_equal(x, y);
        }
      }
      case Recipe::kSelect: {
        Tensor on_true = args.size() > 1 ? as_numeric(args[1]) : as_numeric(x);
        Tensor on_false = partner(on_true, args, 2);
        Tensor pred = x;
        if (t != bool_ || !broadcastable(s, broadcast_shape(on_true.shape(), on_false.shape())) ||
            num_elements(broadcast_shape(s, on_true.shape())) > max_elements_ ||
            broadcast_shape(s, on_true.shape()).size() > kMaxRank) {
          pred = greater(on_true, scalar(0, on_true.dtype()));
        }
        return where(pred, on_true, on_false);
      }
      case Recipe::kClamp: {
        Tensor v = as_numeric(x);
        // A plain number must fit v's dtype: whole bounds for integers (what 0.5 truncated to).
        if (coin()) return clamp(v, -1.0 - pick(2), (is_floating(v.dtype()) ? 0.5 : 0.0) + pick(2));
        Tensor lo = constant(v.dtype(), partner_shape(v.shape()), -2, 0);
        Tensor hi = constant(v.dtype(), partner_shape(v.shape()), 0, 2);
        return clamp(v, lo, hi);
      }
      case Recipe::kConvert: {
        static const DType kTo[] = {f32, i32, bool_, f64, i64};
        DType to = kTo[pick(5)];
        if (to == t) {
          DType wide = t == f32 ? f64 : t == i32 ? i64 : t;
          return coin() ? convert(convert(x, wide), t) : convert(x, t);
        }
        return convert(x, to);
      }
      case Recipe::kReshape: {
        const int64_t n = num_elements(s);
        Shape reversed(s.rbegin(), s.rend());
        if (rank == 0) return reshape(x, {1});
        switch (n == 0 ? 0 : pick(5)) {
          case 0:
            return reshape(x, reversed);
          case 1:
            return reshape(x, {n});
          case 2:
            return reshape(reshape(x, {n}), reversed);
          case 3: {  // a random factorization of n into at most kMaxRank dimensions
            Shape f;
            int64_t rest = n;
            for (int64_t p = 2; p <= rest && f.size() + 1 < kMaxRank; ++p) {
              while (rest % p == 0 && f.size() + 1 < kMaxRank && coin()) {
                f.push_back(p);
                rest /= p;
              }
            }
            f.push_back(rest);
            std::shuffle(f.begin(), f.end(), rng_);
            return reshape(x, f);
          }
          default: {
            if (s.size() >= kMaxRank) return reshape(x, {-1});
            Shape e = s;
            e.insert(e.begin() + pick(rank + 1), 1);
            return reshape(x, e);
          }
        }
      }
      case Recipe::kTranspose: {
        Axes p1(rank), p2(rank);
        for (int i = 0; i < rank; ++i) p1[i] = p2[i] = i;
        std::shuffle(p1.begin(), p1.end(), rng_);
        std::shuffle(p2.begin(), p2.end(), rng_);
        if (rank > 0 && coin()) p1[pick(rank)] -= rank;  // a negative axis
        return coin() ? transpose(transpose(x, p1), p2) : transpose(x, p1);
      }
      case Recipe::kSlice: {
        Axes start(rank), limit(rank), strides(rank);
        bool identity = pick(4) == 0;
        for (int d = 0; d < rank; ++d) {
          start[d] = identity || s[d] == 0 ? 0 : pick(static_cast<int>(s[d]));
          limit[d] = identity ? s[d] : start[d] + pick(static_cast<int>(s[d] - start[d]) + 1);
          strides[d] = identity ? 1 : 1 + pick(3);
        }
        return slice(x, start, limit, strides);
      }
      case Recipe::kPad: {
        Axes low(rank), high(rank), interior(rank);
        Shape out = s;
        for (int d = 0; d < rank; ++d) {
          low[d] = pick(3);
          high[d] = pick(3);
          interior[d] = pick(3) == 0 ? 1 : 0;
          out[d] = low[d] + high[d] + s[d] + (s[d] > 0 ? (s[d] - 1) * interior[d] : 0);
        }
        if (num_elements(out) > max_elements_) return x;
        return pad(x, low, high, t == bool_ || !fp ? pick(3) - 1 : 0.25 * (pick(9) - 4), interior);
      }
      case Recipe::kConcat: {
        Tensor v = rank == 0 ? reshape(x, {1}) : x;
        const Shape& vs = v.shape();
        int r = static_cast<int>(vs.size());
        int axis = pick(r);
        Tensor other;
        if (args.size() > 1 && args[1].dtype() == t && args[1].rank() == r) {
          other = args[1];
          for (int d = 0; d < r && other.defined(); ++d)
            if (d != axis && other.shape()[d] != vs[d]) other = Tensor();
        }
        if (!other.defined()) {
          Axes start(r, 0), limit = vs;
          limit[axis] = pick(static_cast<int>(vs[axis]) + 1);
          other = coin() ? slice(v, start, limit) : v;
        }
        Shape out = vs;
        out[axis] += other.shape()[axis];
        if (num_elements(out) > max_elements_) return v;
        return concatenate({v, other}, coin() ? axis : axis - r);
      }
      case Recipe::kBroadcast: {
        Shape out = s;
        Axes dims(rank);
        for (int d = 0; d < rank; ++d) dims[d] = d;
        std::vector<int> ones;
        for (int d = 0; d < rank; ++d)
          if (s[d] == 1) ones.push_back(d);
        if (!ones.empty() && coin()) {
          out[ones[pick(static_cast<int>(ones.size()))]] = 2 + pick(2);
        } else {
          if (s.size() >= kMaxRank) return x;
          int at = pick(rank + 1);
          out.insert(out.begin() + at, 1 + pick(3));
          for (int64_t& d : dims)
            if (d >= at) ++d;
        }
        if (num_elements(out) > max_elements_) return x;
        return broadcast_in_dim(x, out, dims);
      }
      case Recipe::kReverse: {
        Axes axes;
        for (int d = 0; d < rank; ++d)
          if (coin()) axes.push_back(coin() ? d : d - rank);
        return reverse(x, axes);
      }
      case Recipe::kReduce: {
        Axes axes;
        for (int d = 0; d < rank; ++d)
          if (coin()) axes.push_back(coin() ? d : d - rank);
        bool keep = coin();
        if (t == bool_) return coin() ? any(x, axes, keep) : all(x, axes, keep);
        if (rank > 0 && pick(6) == 0) {
          int axis = pick(rank);
          if (s[axis] == 0) return sum(x, axes, keep);  // no argmax over an empty axis
          return coin() ? argmax(x, axis, keep) : argmin(x, axis, keep);
        }
        switch (pick(fp ? 5 : 3)) {
          case 0:
            return sum(x, axes, keep);
          case 1:
            return max(x, axes, keep);
          case 2:
            return min(x, axes, keep);
          case 3:
            return mean(x, axes, keep);
          default:
            return prod(clamp(x, -1.5, 1.5), axes, keep);
        }
      }
      case Recipe::kDot: {
        Tensor a = as_numeric(x);
        DType at = a.dtype();
        // Bounded integer operands: sums of products must not overflow.
        if (!is_floating(at)) a = clamp(a, -64, 64);
        auto weight = [&](const Shape& ws) {
          Tensor w = coin() ? parameter(at, ws) : constant(at, ws);
          return is_floating(at) ? w : clamp(w, -64, 64);
        };
        int64_t k = 1 + pick(3);
        if (rank == 0) return mul(a, weight({}));
        if (rank == 1) return coin() ? matmul(a, weight({s[0]})) : matmul(a, weight({s[0], k}));
        if (rank == 3 && coin()) {
          // dot_general with a batch dimension: [b, m, n] x [b, n, k] -> [b, m, k]
          return dot(a, weight({s[0], s[2], k}), {2}, {1}, {0}, {0});
        }
        if (coin()) {  // contract the first dimension: [n, ...] x [n, k]
          return dot(a, weight({s[0], k}), {0}, {0});
        }
        return matmul(a, weight({s[rank - 1], k}));
      }
      case Recipe::kRandom: {
        Tensor seed = g_.constant(Tensor::scalar<int64_t>(pick(3)));
        if (t == bool_) return logical_or(x, random_bernoulli(s, seed, 0.5));
        if (!fp) return add(x, random_bernoulli(s, seed, 0.5, t));
        return coin() ? add(x, random_uniform(s, seed, -1, 1, t))
                      : add(x, random_normal(s, seed, 0, 1, t));
      }
      case Recipe::kDense: {
        // [.., n] x [n, k] + bias, then an activation; f32/f64 only (bools and ints converted).
        Tensor a = fp ? x : convert(x, f32);
        if (rank == 0) a = reshape(a, {1, 1});
        const int64_t n = a.shape().back(), k = 1 + pick(4);
        Tensor w = coin() ? parameter(a.dtype(), {n, k}) : constant(a.dtype(), {n, k});
        Tensor y = matmul(a, w);
        switch (pick(3)) {
          case 0:
            y = y + parameter(a.dtype(), {k});
            break;
          case 1:
            y = y + constant(a.dtype(), {k});
            break;
          default:
            break;
        }
        switch (pick(5)) {
          case 0:
            return relu(y);
          case 1:
            return tanh(y);
          case 2:
            return logistic(y);
          case 3:
            return maximum(y, scalar(0, a.dtype()));
          default:
            return y;
        }
      }
      case Recipe::kNetwork: {
        Tensor v = fp ? x : convert(x, f32);
        if (rank == 0) v = reshape(v, {1});
        int64_t axis = pick(static_cast<int>(v.rank())) - (coin() ? v.rank() : 0);
        switch (pick(6)) {
          case 0:
            return softmax(v, axis);
          case 1:
            return log_softmax(v, axis);
          case 2:
            return logsumexp(v, {axis}, coin());
          case 3:
            return variance(v, {axis}, coin());
          case 4:
            return gelu(v, coin());
          default: {  // layer normalisation over the last axis
            Tensor m = mean(v, {-1}, true);
            Tensor c = v - m;
            return c * rsqrt(mean(c * c, {-1}, true) + scalar(1e-3, v.dtype()));
          }
        }
      }
      case Recipe::kConv:
        return make_conv(x);
      case Recipe::kPool:
        return make_pool(x);
      case Recipe::kGather:
        return make_gather(x, args);
      case Recipe::kScatter:
        return make_scatter(x, args);
      case Recipe::kConstantSubgraph: {
        if (t == bool_) return logical_and(x, logical_not(constant(bool_, s)));
        Tensor a = constant(t, s), b = constant(t, s);
        return add(x, mul(a, neg(b)));
      }
    }
    return x;
  }

  BuiltGraph& b_;
  Graph& g_;
  int64_t max_elements_;
  std::mt19937 rng_;
};

}  // namespace random_graph_detail

// Records `spec` into a new graph.
inline BuiltGraph build(const GraphSpec& spec) {
  BuiltGraph out;
  random_graph_detail::Builder b(&out, spec.max_elements);
  for (size_t i = 0; i < spec.inputs.size(); ++i) b.add_input(spec.inputs[i], static_cast<int>(i));
  for (const NodeSpec& n : spec.nodes) b.apply(n);
  for (int o : spec.outputs) out.outputs.push_back(out.values.at(o));
  return out;
}

// Replaces b's outputs by the gradients of L = sum_i sum(y_i * c_i) over its floating-point
// outputs y_i (c_i: random f64 cotangents from `seed`) with respect to every floating-point feed;
// with order 2, by the gradients of sum_j sum(g_j * d_j) over those gradients g_j
// (Hessian-vector products: they reach the gradient ops' own gradient rules, e.g.
// reduce_window_max_select). Returns false, leaving b as it was, when there is nothing to
// differentiate (no floating-point output or feed).
inline bool differentiate(BuiltGraph* b, uint32_t seed, int order = 1) {
  std::vector<Tensor> xs, ys;
  for (const auto& feed : b->feeds)
    if (is_floating(feed.first.dtype())) xs.push_back(feed.first);
  for (const Tensor& y : b->outputs)
    if (is_floating(y.dtype())) ys.push_back(y);
  if (xs.empty() || ys.empty()) return false;
  std::mt19937 rng(seed);
  for (int i = 0; i < order; ++i) {
    Tensor loss;
    for (const Tensor& y : ys) {
      Tensor c = b->graph.constant(random_graph_detail::random_value(
          f64, y.shape(), static_cast<uint32_t>(rng()), -2, 2, /*special=*/false));
      Tensor term = sum(convert(y, f64) * c);
      loss = loss.defined() ? loss + term : term;
    }
    ys = gradients(loss, xs);
  }
  b->outputs = ys;
  return true;
}

struct GeneratorOptions {
  int min_nodes = 3;
  int max_nodes = 15;
  int max_inputs = 3;
  double duplicate_probability = 0.2;  // a node recorded twice: CSE's target
  int min_rank = 0;                    // input ranks are min_rank..3
  int max_dim = 4;                     // input dimensions are 1..max_dim (now and then 0 or more)
  int64_t max_elements = 512;          // see GraphSpec::max_elements
  bool kernel_ops = false;             // also convolution, pooling, gather and scatter recipes
};

// A random spec: 1..max_inputs placeholders (mostly f32, some i32 and bool; rank 0..3, now and
// then a zero-sized dimension) and min..max recipes, each on recent values, partners chosen
// among the values whose shapes broadcast with the first argument.
inline GraphSpec generate(uint32_t seed, const GeneratorOptions& opt = {}) {
  using namespace random_graph_detail;
  std::mt19937 rng(seed);
  auto pick = [&](int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng); };
  GraphSpec spec;
  spec.seed = seed;
  spec.max_elements = opt.max_elements;
  BuiltGraph built;
  Builder b(&built, spec.max_elements);
  int inputs = 1 + pick(opt.max_inputs);
  for (int i = 0; i < inputs; ++i) {
    InputSpec in;
    int d = pick(10);
    in.dtype = d < 7 ? f32 : d < 9 ? i32 : bool_;
    in.shape.resize(opt.min_rank + pick(4 - opt.min_rank));
    for (int64_t& dim : in.shape)
      dim = pick(16) == 0 ? 0 : pick(8) == 0 ? opt.max_dim + 1 + pick(4) : 1 + pick(opt.max_dim);
    while (num_elements(in.shape) > opt.max_elements) in.shape.back() = (in.shape.back() + 1) / 2;
    in.seed = static_cast<uint32_t>(rng());
    spec.inputs.push_back(in);
    b.add_input(in, i);
  }
  // Weights of the recipes (kIdentity never). Without kernel_ops the kernel-op recipes weigh
  // nothing, so the choices (and the graphs) are those of the generator before they existed.
  static const int kBaseWeights[] = {0, 6, 8, 2, 2, 1, 2, 2, 2, 2, 1, 1,
                                     2, 1, 3, 2, 1, 1, 2, 2, 0, 0, 0, 0};
  static const int kKernelWeights[] = {0, 6, 8, 2, 2, 1, 2, 2, 2, 2, 1, 1,
                                       2, 1, 3, 2, 1, 1, 2, 2, 4, 4, 3, 3};
  static_assert(std::size(kBaseWeights) == static_cast<size_t>(Recipe::kCount));
  static_assert(std::size(kKernelWeights) == static_cast<size_t>(Recipe::kCount));
  const int* weights = opt.kernel_ops ? kKernelWeights : kBaseWeights;
  int total = 0;
  for (int r = 0; r < static_cast<int>(Recipe::kCount); ++r) total += weights[r];
  int steps = opt.min_nodes + pick(opt.max_nodes - opt.min_nodes + 1);
  while (static_cast<int>(spec.nodes.size()) < steps) {
    NodeSpec n;
    int w = pick(total), r = 0;
    while (w >= weights[r]) w -= weights[r++];
    n.recipe = static_cast<Recipe>(r);
    int values = spec.num_values();
    // Mostly one of the last few values, so chains form (and fuse).
    int first = pick(2) == 0 ? std::max(0, values - 1 - pick(3)) : pick(values);
    n.args.push_back(first);
    const Shape& s0 = built.values[first].shape();
    for (int k = 0; k < 2; ++k) {
      for (int tries = 0; tries < 4; ++tries) {
        int v = pick(values);
        const Shape& sv = built.values[v].shape();
        if (sv == s0 || (pick(2) == 0 && broadcastable(s0, sv))) {
          n.args.push_back(v);
          break;
        }
      }
      if (static_cast<int>(n.args.size()) != k + 2) break;
    }
    n.seed = static_cast<uint32_t>(rng());
    spec.nodes.push_back(n);
    b.apply(n);
    if (std::uniform_real_distribution<double>(0, 1)(rng) < opt.duplicate_probability) {
      spec.nodes.push_back(n);
      b.apply(n);
    }
  }
  spec.outputs.push_back(spec.num_values() - 1);
  for (int i = pick(3); i > 0; --i) spec.outputs.push_back(pick(spec.num_values()));
  return spec;
}

// Drops what the outputs do not need and routes uses of identity nodes to their inputs.
inline GraphSpec prune(const GraphSpec& spec) {
  const int n_in = static_cast<int>(spec.inputs.size());
  const int n = spec.num_values();
  std::vector<int> alias(n);
  for (int v = 0; v < n; ++v) {
    alias[v] = v;
    if (v >= n_in) {
      const NodeSpec& node = spec.nodes[v - n_in];
      if (node.recipe == Recipe::kIdentity && !node.args.empty()) alias[v] = alias[node.args[0]];
    }
  }
  std::vector<char> live(n, 0);
  for (int o : spec.outputs) live[alias[o]] = 1;
  for (int v = n - 1; v >= n_in; --v)
    if (live[v])
      for (int a : spec.nodes[v - n_in].args) live[alias[a]] = 1;
  GraphSpec out;
  out.seed = spec.seed;
  out.max_elements = spec.max_elements;
  std::vector<int> renumber(n, -1);
  for (int v = 0; v < n_in; ++v) {
    if (!live[v]) continue;
    renumber[v] = static_cast<int>(out.inputs.size());
    out.inputs.push_back(spec.inputs[v]);
  }
  int next = static_cast<int>(out.inputs.size());
  for (int v = n_in; v < n; ++v) {
    if (!live[v]) continue;
    NodeSpec node = spec.nodes[v - n_in];
    for (int& a : node.args) a = renumber[alias[a]];
    renumber[v] = next++;
    out.nodes.push_back(std::move(node));
  }
  for (int o : spec.outputs) out.outputs.push_back(renumber[alias[o]]);
  return out;
}

// Greedily shrinks a spec for which `fails` holds: drops outputs, replaces nodes by one of their
// inputs, drops partner arguments (a constant takes their place), and shrinks or removes input
// dimensions, keeping each change after which `fails` still holds, until none does.
// `attempts` (optional) counts the candidates tried.
inline GraphSpec shrink(GraphSpec spec, const std::function<bool(const GraphSpec&)>& fails,
                        int* attempts = nullptr, int max_attempts = 2000) {
  spec = prune(spec);
  int tried = 0;
  bool changed = true;
  while (changed && tried < max_attempts) {
    changed = false;
    std::vector<GraphSpec> candidates;
    for (size_t o = 0; spec.outputs.size() > 1 && o < spec.outputs.size(); ++o) {
      GraphSpec c = spec;
      c.outputs.erase(c.outputs.begin() + o);
      candidates.push_back(c);
    }
    for (int i = static_cast<int>(spec.nodes.size()) - 1; i >= 0; --i) {
      for (size_t k = 0; k < spec.nodes[i].args.size(); ++k) {
        GraphSpec c = spec;
        c.nodes[i].recipe = Recipe::kIdentity;
        c.nodes[i].args = {spec.nodes[i].args[k]};
        candidates.push_back(c);
      }
      if (spec.nodes[i].args.size() > 1) {
        GraphSpec c = spec;
        c.nodes[i].args.resize(1);
        candidates.push_back(c);
      }
    }
    for (size_t i = 0; i < spec.inputs.size(); ++i) {
      const Shape& s = spec.inputs[i].shape;
      for (size_t d = 0; d < s.size(); ++d) {
        GraphSpec c = spec;
        c.inputs[i].shape.erase(c.inputs[i].shape.begin() + d);
        candidates.push_back(c);
        if (s[d] > 1) {
          c = spec;
          c.inputs[i].shape[d] = 1;
          candidates.push_back(c);
        }
        if (s[d] > 2) {
          c = spec;
          c.inputs[i].shape[d] = s[d] - 1;
          candidates.push_back(c);
        }
      }
    }
    for (GraphSpec& c : candidates) {
      c = prune(c);
      if (c == spec) continue;
      ++tried;
      if (fails(c)) {
        spec = std::move(c);
        changed = true;
        break;
      }
      if (tried >= max_attempts) break;
    }
  }
  if (attempts) *attempts = tried;
  return spec;
}

// ---- comparing results ----------------------------------------------------------------

// How close a compiled result must be to the interpreter's: |got - want| <= atol + rtol*|want|
// for floating point (NaN matches NaN, infinities match exactly); integers and bools exactly.
struct Tolerance {
  double rtol = 0;
  double atol = 0;
};

// "" when `got` matches `want`, else what differs (dtype, shape, or the first elements).
inline std::string mismatch(const Tensor& got, const Tensor& want, Tolerance tol) {
  if (got.dtype() != want.dtype() || got.shape() != want.shape())
    return "type " + TensorType{got.dtype(), got.shape()}.str() + ", want " +
           TensorType{want.dtype(), want.shape()}.str();
  std::vector<double> g = convert(got, f64).to_vector<double>();
  std::vector<double> w = convert(want, f64).to_vector<double>();
  bool fp = is_floating(want.dtype());
  std::string out;
  int shown = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    bool ok = g[i] == w[i] || (std::isnan(g[i]) && std::isnan(w[i])) ||
              (fp && std::isfinite(w[i]) &&
               std::abs(g[i] - w[i]) <= tol.atol + tol.rtol * std::abs(w[i]));
    if (ok) continue;
    if (shown++ < 4) {
      char buf[96];
      std::snprintf(buf, sizeof buf, "element %zu: %.9g, want %.9g", i, g[i], w[i]);
      out += (out.empty() ? "" : "; ") + std::string(buf);
    }
  }
  if (shown > 4) out += "; ... (" + std::to_string(shown) + " elements differ)";
  return out;
}

}  // namespace kiln::compiler::testing
