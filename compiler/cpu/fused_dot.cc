// The fused_dot kernel op (compiler/cpu/fused_dot.h): registration, shape function, and the CPU
// kernel, a GEMM cut across threads as dot's reference kernel cuts it (ops::gemm, so the same
// bits) with the bias and activation applied to each block of final rows as soon as it is done;
// bf16 as one oneDNN matmul with the epilogue in its kernel (ops/onednn_matmul.h);
// f16 as f32 GEMM blocks on the widened operands, the epilogue applied before the one rounding.
#include "compiler/cpu/fused_dot.h"

#include <algorithm>

#include "compiler/cpu/lowp_epilogue.h"
#include "kiln/op_registry.h"
#include "ops/dot_util.h"
#include "ops/kernel_util.h"
#include "ops/narrow.h"
#include "ops/onednn_matmul.h"
#include "runtime/execute.h"
#include "runtime/thread_pool.h"

namespace kiln::compiler {

using ops::concat;
using ops::free_dims;
using ops::ints_or_empty;
using ops::is_layout;
using ops::product;

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
  check_epilogue(ctx, out[0], 2, /*allow_full_bias=*/true);
  std::vector<int64_t> bf = free_dims(static_cast<int64_t>(ctx.input(1).shape.size()),
                                      ints_or_empty(ctx.attrs(), "rhs_batch"),
                                      ints_or_empty(ctx.attrs(), "rhs_contract"));
  if (bf.empty()) ctx.fail("b " + ctx.input(1).str() + " has no free dimension");
  return out;
}

template <class T>
void fused_gemm(const DotLayout& s, const T* pa_all, const T* pb_all, T* c,
                const Epilogue<T>& epilogue) {
  ops::gemm(pa_all, pb_all, c, s.batch, s.m, s.k, s.n, s.a_transposed, s.b_transposed,
            [&](int64_t bi, int64_t r0, int64_t rows) {
              epilogue.apply(c + (bi * s.m + r0) * s.n, bi * s.m + r0, rows, s.n);  // in cache
            });
}

// bf16's epilogue as oneDNN takes it: a row of n bias values (a scalar bias spread over *row)
// and the activation; or false for a full-size bias (oneDNN 2.6's bf16 matmul declines one) or
// a vector bias shorter than the GEMM's rows (b has several free dimensions).
bool onednn_epilogue(const Epilogue<bfloat16>& e, const DotLayout& l,
                     ops::onednn::BiasActivation* out, std::vector<bfloat16>* row) {
  out->activation = onednn_activation(e.act);
  if (e.bias == nullptr) return true;
  if (e.kind == BiasKind::kFull || (e.kind == BiasKind::kVector && e.bias_len != l.n)) return false;
  if (e.kind == BiasKind::kScalar) row->assign(l.n, e.bias[0]);
  out->bias = e.kind == BiasKind::kScalar ? row->data() : e.bias;
  return true;
}

// dot's kernel, then the epilogue with the reference kernels' roundings: the same bits as dot,
// add and the activation run apart (bf16 and f16).
template <class T>
void dot_then_rounded_epilogue(KernelContext& ctx, const Epilogue<T>& epilogue) {
  const Tensor d = runtime::run_kernel(OpRegistry::global().find("dot"), ctx.node_name(),
                                       {ctx.input(0), ctx.input(1)}, ctx.attrs())[0];
  apply_rounded_epilogue(epilogue, static_cast<const T*>(d.raw_data()),
                         ops::out_ptr<T>(ctx.allocate_output(0)), d.size());
}

// bf16: the GEMM and its epilogue as one oneDNN matmul where oneDNN takes them (the bias added
// and the activation applied to the f32 sum, which is rounded once); otherwise dot's kernel,
// then the epilogue with the reference kernels' roundings.
void fused_dot_bf16(KernelContext& ctx, const DotLayout& l) {
  const Tensor& ta = ctx.input(0);
  const Tensor& tb = ctx.input(1);
  const Epilogue<bfloat16> epilogue = epilogue_of<bfloat16>(ctx, 2, /*allow_full_bias=*/true);
  ops::onednn::BiasActivation onednn;
  std::vector<bfloat16> bias_row;
  if (l.refusal.empty() && ops::onednn::lowp_matmul_supported(bf16) &&
      onednn_epilogue(epilogue, l, &onednn, &bias_row)) {
    const ops::onednn::MatmulShape s{l.batch, l.m, l.k, l.n, l.a_transposed, l.b_transposed, bf16};
    if (ops::onednn::matmul(ctx, s, ta.raw_data(), tb.raw_data(),
                            ops::out_ptr<bfloat16>(ctx.allocate_output(0)), &onednn))
      return;
  }
  dot_then_rounded_epilogue(ctx, epilogue);
}

// f16 (no f16 matmul in oneDNN 2.6): dot's widening GEMM, f32 blocks of output rows on the
// widened operands in their layout, each block's bias and activation applied to its f32 sums
// before their one rounding to f16. Operands that need a copy: dot's kernel, then the epilogue
// with the reference roundings.
void fused_dot_f16(KernelContext& ctx, const DotLayout& l) {
  const Epilogue<half> epilogue = epilogue_of<half>(ctx, 2, /*allow_full_bias=*/true);
  if (!l.refusal.empty()) return dot_then_rounded_epilogue(ctx, epilogue);
  std::vector<float> bias;
  const Epilogue<float> wide =
      widened_epilogue(epilogue, ctx.num_inputs() > 2 ? ctx.input(2).size() : 0, &bias);
  auto widen = [](const Tensor& t) {
    std::vector<float> w(t.size());
    ops::parallel_widen_into(static_cast<const half*>(t.raw_data()), t.size(), w.data());
    return w;
  };
  const std::vector<float> a = widen(ctx.input(0)), b = widen(ctx.input(1));
  half* y = ops::out_ptr<half>(ctx.allocate_output(0));
  if (l.n == 0) return;
  // The f32 GEMM cut as fused_dot's f32 kernel cuts it (so the same sums), each block of final
  // rows taken through the epilogue and rounded while in cache.
  std::vector<float> c(l.batch * l.m * l.n);
  ops::gemm(a.data(), b.data(), c.data(), l.batch, l.m, l.k, l.n, l.a_transposed, l.b_transposed,
            [&](int64_t bi, int64_t r0, int64_t rows) {
              float* block = c.data() + (bi * l.m + r0) * l.n;
              wide.apply(block, bi * l.m + r0, rows, l.n);
              ops::round_into(block, rows * l.n, y + (bi * l.m + r0) * l.n);
            });
}

void fused_dot_kernel(KernelContext& ctx) {
  const Tensor& ta = ctx.input(0);
  const Tensor& tb = ctx.input(1);
  DotLayout l = dot_layout(ta.shape(), tb.shape(), ctx.attrs());
  auto run = [&](auto tag) {
    using T = decltype(tag);
    const Epilogue<T> epilogue = epilogue_of<T>(ctx, 2, /*allow_full_bias=*/true);
    if (!l.refusal.empty()) {  // operands need a copy: dot's kernel, then a second pass
      Tensor d = runtime::run_kernel(OpRegistry::global().find("dot"), ctx.node_name(), {ta, tb},
                                     ctx.attrs())[0];
      ctx.set_output(0, d);
      apply_epilogue_pass(epilogue, static_cast<T*>(d.raw_mutable_data()), d.size(),
                          epilogue.bias_len);
      return;
    }
    Tensor& out = ctx.allocate_output(0);
    fused_gemm<T>(l, static_cast<const T*>(ta.raw_data()), static_cast<const T*>(tb.raw_data()),
                  ops::out_ptr<T>(out), epilogue);
  };
  if (ta.dtype() == f32) {
    run(float{});
  } else if (ta.dtype() == f64) {
    run(double{});
  } else if (ta.dtype() == bf16) {
    fused_dot_bf16(ctx, l);
  } else if (ta.dtype() == f16) {
    fused_dot_f16(ctx, l);
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
KILN_REGISTER_KERNEL(fused_dot).dtypes({f32, f64, bf16, f16}).fn(fused_dot_kernel);

}  // namespace kiln::compiler
