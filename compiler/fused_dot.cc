// The fused_dot kernel op (compiler/fused_dot.h): registration, shape function, and the CPU
// kernel, an Eigen GEMM over blocks of output rows (the same blocks as dot's reference kernel,
// so the same bits) with the bias and activation applied to each block as soon as it is done.
#include "compiler/fused_dot.h"

#include <algorithm>
#include <cmath>
#include <limits>

#define EIGEN_DONT_PARALLELIZE  // parallelism comes from runtime::parallel_for, never Eigen
// GCC 12 reports a false -Wmaybe-uninitialized inside Eigen's AVX-512 GEMV kernels.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <Eigen/Core>

#include "kiln/op_registry.h"
#include "ops/kernel_util.h"
#include "ops/dot_util.h"
#include "runtime/execute.h"
#include "runtime/thread_pool.h"

namespace kiln::compiler {

using ops::concat;
using ops::free_dims;
using ops::ints_or_empty;
using ops::is_layout;
using ops::product;

const char* activation_name(Activation a) {
  switch (a) {
    case Activation::kNone: return "none";
    case Activation::kRelu: return "relu";
    case Activation::kTanh: return "tanh";
    case Activation::kLogistic: return "logistic";
  }
  return "none";
}

std::optional<Activation> activation_from_name(std::string_view name) {
  for (Activation a : {Activation::kNone, Activation::kRelu, Activation::kTanh,
                       Activation::kLogistic})
    if (name == activation_name(a)) return a;
  return std::nullopt;
}

std::optional<Activation> unary_activation(std::string_view op) {
  if (op == "tanh") return Activation::kTanh;
  if (op == "logistic") return Activation::kLogistic;
  return std::nullopt;
}

namespace {

enum class BiasKind { kScalar, kVector, kFull };

// The bias's role, or nullopt (with the reason in *why).
std::optional<BiasKind> bias_kind(const Shape& bias, const Shape& out, std::string* why) {
  if (bias.size() > out.size()) {
    *why = "its rank is above the output's";
    return std::nullopt;
  }
  int64_t n = num_elements(bias);
  if (n == 1 && is_fully_defined(bias)) return BiasKind::kScalar;
  if (bias == out) return BiasKind::kFull;
  bool vector = !bias.empty() && !out.empty() && bias.back() == out.back() && bias.back() >= 0;
  for (size_t i = 0; vector && i + 1 < bias.size(); ++i) vector = bias[i] == 1;
  if (vector) return BiasKind::kVector;
  *why = "it is neither one element, a vector along the last dimension, nor the output's shape";
  return std::nullopt;
}

}  // namespace

std::string fused_dot_bias_refusal(const TensorType& bias, const TensorType& out) {
  if (bias.dtype != out.dtype) return "bias dtype differs from the dot's";
  std::string why;
  if (!bias_kind(bias.shape, out.shape, &why)) return "bias " + bias.str() + ": " + why;
  return "";
}

namespace {

// A dot's operands as [B, M, K] / [B, K, N] matrices read in place (possibly transposed).
struct DotLayout {
  int64_t batch = 0, m = 0, k = 0, n = 0;
  bool a_transposed = false, b_transposed = false;
  std::string refusal;  // non-empty: an operand would need a copy
};

DotLayout dot_layout(const Shape& a, const Shape& b, const Attrs& attrs) {
  DotLayout l;
  const auto a_batch = ints_or_empty(attrs, "lhs_batch");
  const auto b_batch = ints_or_empty(attrs, "rhs_batch");
  const auto a_contract = ints_or_empty(attrs, "lhs_contract");
  const auto b_contract = ints_or_empty(attrs, "rhs_contract");
  const auto a_free = free_dims(static_cast<int64_t>(a.size()), a_batch, a_contract);
  const auto b_free = free_dims(static_cast<int64_t>(b.size()), b_batch, b_contract);
  if (b_free.empty()) {
    l.refusal = "b has no free dimension";
    return l;
  }
  l.batch = product(a, a_batch);
  l.m = product(a, a_free);
  l.k = product(a, a_contract);
  l.n = product(b, b_free);
  if (is_layout(a, concat({&a_batch, &a_free, &a_contract}))) {
  } else if (is_layout(a, concat({&a_batch, &a_contract, &a_free}))) {
    l.a_transposed = true;
  } else {
    l.refusal = "lhs " + shape_str(a) + " is in neither [batch, M, K] nor [batch, K, M] order";
  }
  if (is_layout(b, concat({&b_batch, &b_contract, &b_free}))) {
  } else if (is_layout(b, concat({&b_batch, &b_free, &b_contract}))) {
    l.b_transposed = true;
  } else if (l.refusal.empty()) {
    l.refusal = "rhs " + shape_str(b) + " is in neither [batch, K, N] nor [batch, N, K] order";
  }
  return l;
}

}  // namespace

std::string fused_dot_layout_refusal(const Shape& a, const Shape& b, const Attrs& attrs) {
  return dot_layout(a, b, attrs).refusal;
}

namespace {

std::vector<TensorType> fused_dot_shape(const InferContext& ctx) {
  const OpDef& dot = OpRegistry::global().find("dot");
  std::vector<TensorType> ab = {ctx.input(0), ctx.input(1)};
  std::vector<TensorType> out =
      dot.shape_fn(InferContext(ctx.op(), ctx.node_name(), ab, ctx.attrs()));
  const TensorType& t = out[0];
  if (t.dtype != f32 && t.dtype != f64) ctx.fail("needs f32 or f64 operands, got " + t.str());
  if (!ctx.attrs().has("activation") ||
      !activation_from_name(ctx.attrs().get_string("activation"))) {
    ctx.fail("attribute 'activation' must be one of none, relu, tanh, logistic");
  }
  if (ctx.num_inputs() > 2) {
    std::string why = fused_dot_bias_refusal(ctx.input(2), t);
    if (!why.empty()) ctx.fail(why + " (output " + t.str() + ")");
  }
  std::vector<int64_t> bf = free_dims(static_cast<int64_t>(ctx.input(1).shape.size()),
                                      ints_or_empty(ctx.attrs(), "rhs_batch"),
                                      ints_or_empty(ctx.attrs(), "rhs_contract"));
  if (bf.empty()) ctx.fail("b " + ctx.input(1).str() + " has no free dimension");
  return out;
}

template <class T>
T logistic_of(T x) {  // as the reference logistic kernel
  if (x >= 0) return T(1) / (T(1) + std::exp(-x));
  T e = std::exp(x);
  return e / (T(1) + e);
}

// Adds the bias to rows [row0, row0 + rows) (global row numbers over batch * M) of width n
// starting at `c`, then applies the activation: the reference kernels' formulas.
template <class T>
void epilogue(T* c, int64_t row0, int64_t rows, int64_t n, const T* bias, BiasKind kind,
              int64_t bias_len, Activation act) {
  for (int64_t i = 0; i < rows; ++i) {
    T* row = c + i * n;
    if (bias != nullptr) {
      switch (kind) {
        case BiasKind::kScalar: {
          const T s = bias[0];
          for (int64_t j = 0; j < n; ++j) row[j] = row[j] + s;
          break;
        }
        case BiasKind::kVector:
          if (bias_len == n) {
            for (int64_t j = 0; j < n; ++j) row[j] = row[j] + bias[j];
          } else {
            for (int64_t j = 0; j < n; ++j) row[j] = row[j] + bias[j % bias_len];
          }
          break;
        case BiasKind::kFull: {
          const T* b = bias + (row0 + i) * n;
          for (int64_t j = 0; j < n; ++j) row[j] = row[j] + b[j];
          break;
        }
      }
    }
    switch (act) {
      case Activation::kNone: break;
      case Activation::kRelu:
        for (int64_t j = 0; j < n; ++j) {
          T v = row[j];
          row[j] = std::isnan(v) ? std::numeric_limits<T>::quiet_NaN() : (v > T(0) ? v : T(0));
        }
        break;
      case Activation::kTanh:
        for (int64_t j = 0; j < n; ++j) row[j] = std::tanh(row[j]);
        break;
      case Activation::kLogistic:
        for (int64_t j = 0; j < n; ++j) row[j] = logistic_of(row[j]);
        break;
    }
  }
}

template <class T>
void fused_gemm(const DotLayout& s, const T* pa_all, const T* pb_all, T* c, const T* bias,
                BiasKind kind, int64_t bias_len, Activation act) {
  using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using ConstMap = Eigen::Map<const RowMat, Eigen::Unaligned, Eigen::OuterStride<>>;
  using OutMap = Eigen::Map<RowMat, Eigen::Unaligned, Eigen::OuterStride<>>;
  if (s.n == 0) return;
  ops::for_each_row_block(s.batch, s.m, s.k, s.n, [&](int64_t bi, int64_t r0, int64_t r1) {
    const int64_t rows = r1 - r0;
    T* block = c + bi * s.m * s.n + r0 * s.n;
    if (s.k == 0) {
      std::fill(block, block + rows * s.n, T(0));
    } else {
      const T* pa = pa_all + bi * s.m * s.k;
      const T* pb = pb_all + bi * s.k * s.n;
      OutMap out(block, rows, s.n, Eigen::OuterStride<>(s.n));
      auto multiply = [&](const auto& lhs, const auto& rhs) { out.noalias() = lhs * rhs; };
      ConstMap rhs(pb, s.k, s.n, Eigen::OuterStride<>(s.n));
      ConstMap rhs_t(pb, s.n, s.k, Eigen::OuterStride<>(s.k));
      if (!s.a_transposed) {
        ConstMap lhs(pa + r0 * s.k, rows, s.k, Eigen::OuterStride<>(s.k));
        s.b_transposed ? multiply(lhs, rhs_t.transpose()) : multiply(lhs, rhs);
      } else {
        ConstMap lhs_t(pa + r0, s.k, rows, Eigen::OuterStride<>(s.m));
        s.b_transposed ? multiply(lhs_t.transpose(), rhs_t.transpose())
                       : multiply(lhs_t.transpose(), rhs);
      }
    }
    epilogue(block, bi * s.m + r0, rows, s.n, bias, kind, bias_len, act);  // still in cache
  });
}

void fused_dot_kernel(KernelContext& ctx) {
  const Tensor& ta = ctx.input(0);
  const Tensor& tb = ctx.input(1);
  const Activation act = *activation_from_name(ctx.attrs().get_string("activation"));
  const Tensor* bias = ctx.num_inputs() > 2 ? &ctx.input(2) : nullptr;
  const Shape& out_shape = ctx.output_type(0).shape;
  BiasKind kind = BiasKind::kScalar;
  if (bias != nullptr) {
    std::string why;
    auto k = bias_kind(bias->shape(), out_shape, &why);
    if (!k) ctx.fail("bias " + shape_str(bias->shape()) + ": " + why);
    kind = *k;
  }
  const int64_t bias_len = out_shape.empty() ? 1 : out_shape.back();
  DotLayout l = dot_layout(ta.shape(), tb.shape(), ctx.attrs());
  auto run = [&](auto tag) {
    using T = decltype(tag);
    const T* pb = bias != nullptr ? static_cast<const T*>(bias->raw_data()) : nullptr;
    if (!l.refusal.empty()) {  // operands need a copy: dot's kernel, then a second pass
      Tensor d = runtime::run_kernel(OpRegistry::global().find("dot"), ctx.node_name(), {ta, tb},
                                     ctx.attrs())[0];
      ctx.set_output(0, d);
      T* y = static_cast<T*>(d.raw_mutable_data());
      const int64_t n = out_shape.empty() ? 1 : out_shape.back();
      const int64_t rows = n == 0 ? 0 : d.size() / n;
      runtime::parallel_for(rows, std::max<int64_t>(1, (1 << 14) / std::max<int64_t>(1, n)),
                            [&](int64_t b, int64_t e) {
                              epilogue(y + b * n, b, e - b, n, pb, kind, bias_len, act);
                            });
      return;
    }
    Tensor& out = ctx.allocate_output(0);
    fused_gemm<T>(l, static_cast<const T*>(ta.raw_data()), static_cast<const T*>(tb.raw_data()),
                  ops::out_ptr<T>(out), pb, kind, bias_len, act);
  };
  if (ta.dtype() == f32) {
    run(float{});
  } else if (ta.dtype() == f64) {
    run(double{});
  } else {
    ctx.fail(std::string("dtype ") + dtype_name(ta.dtype()) + " is not supported");
  }
}

}  // namespace

KILN_REGISTER_OP(fused_dot)
    .input("a")
    .input("b")
    .optional_input("bias")
    .kind(OpKind::kKernel)
    .non_differentiable()
    .shape_fn(fused_dot_shape);
KILN_REGISTER_KERNEL(fused_dot).dtypes({f32, f64}).fn(fused_dot_kernel);

}  // namespace kiln::compiler
