// Linear algebra: the dot primitive (XLA's dot_general) with its reference kernel on Eigen and
// its gradient rule, and the public dot and matmul (numpy.matmul) functions.
#include <algorithm>
#include <memory>
#include <numeric>

#define EIGEN_DONT_PARALLELIZE  // parallelism comes from runtime::parallel_for, never Eigen
// GCC 12 reports a false -Wmaybe-uninitialized inside Eigen's AVX-512 GEMV kernels.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <Eigen/Core>

#include "kiln/ops.h"
#include "ops/kernel_util.h"
#include "ops/dot_util.h"
#include "ops/onednn_matmul.h"

namespace kiln {
namespace ops {
namespace {

// The dimension roles of one operand of a dot.
struct DotDims {
  std::vector<int64_t> batch, contract, free;
};

// Checks the axes of one operand and finds its free dimensions.
DotDims dot_dims(const InferContext& ctx, const char* which, const TensorType& t,
                 const std::vector<int64_t>& batch, const std::vector<int64_t>& contract) {
  const int64_t rank = static_cast<int64_t>(t.shape.size());
  std::vector<bool> used(rank, false);
  for (const auto* axes : {&batch, &contract}) {
    for (int64_t a : *axes) {
      if (a < 0 || a >= rank) {
        ctx.fail(std::string(which) + " axis " + std::to_string(a) + " is out of range for " +
                 t.str() + " (rank " + std::to_string(rank) + ")");
      }
      if (used[a]) {
        ctx.fail(std::string(which) + " dimension " + std::to_string(a) + " of " + t.str() +
                 " is used twice among its batch and contracting dimensions");
      }
      used[a] = true;
    }
  }
  return {batch, contract, free_dims(rank, batch, contract)};
}

std::vector<TensorType> dot_shape(const InferContext& ctx) {
  const TensorType& a = ctx.input(0);
  const TensorType& b = ctx.input(1);
  if (a.dtype != b.dtype) {
    ctx.fail("dtype mismatch: a is " + a.str() + ", b is " + b.str() + " (convert one of them)");
  }
  require_dtype_in(ctx, 0, TypeSet::kNumeric);
  const Attrs& attrs = ctx.attrs();
  DotDims da =
      dot_dims(ctx, "lhs", a, ints_or_empty(attrs, "lhs_batch"), attrs.get_ints("lhs_contract"));
  DotDims db =
      dot_dims(ctx, "rhs", b, ints_or_empty(attrs, "rhs_batch"), attrs.get_ints("rhs_contract"));
  if (da.contract.size() != db.contract.size() || da.batch.size() != db.batch.size()) {
    ctx.fail("a (" + a.str() + ") has " + std::to_string(da.batch.size()) + " batch and " +
             std::to_string(da.contract.size()) + " contracting dimensions, b (" + b.str() +
             ") has " + std::to_string(db.batch.size()) + " and " +
             std::to_string(db.contract.size()));
  }
  auto check_pairs = [&](const char* what, const std::vector<int64_t>& ia,
                         const std::vector<int64_t>& ib) {
    for (size_t i = 0; i < ia.size(); ++i) {
      int64_t sa = a.shape[ia[i]], sb = b.shape[ib[i]];
      if (sa != sb && sa != kUnknownDim && sb != kUnknownDim) {
        ctx.fail(std::string(what) + " dimensions differ: a is " + a.str() + " (dim " +
                 std::to_string(ia[i]) + " = " + std::to_string(sa) + "), b is " + b.str() +
                 " (dim " + std::to_string(ib[i]) + " = " + std::to_string(sb) + ")");
      }
    }
  };
  check_pairs("contracting", da.contract, db.contract);
  check_pairs("batch", da.batch, db.batch);
  Shape out;
  for (size_t i = 0; i < da.batch.size(); ++i) {
    int64_t s = a.shape[da.batch[i]];
    out.push_back(s != kUnknownDim ? s : b.shape[db.batch[i]]);
  }
  for (int64_t d : da.free) out.push_back(a.shape[d]);
  for (int64_t d : db.free) out.push_back(b.shape[d]);
  return {{a.dtype, out}};
}

// ---- kernel -----------------------------------------------------------------------------

// Copies `src` into `dst` with its dimensions read in `order`, converting each element.
template <class Dst, class Src>
void permute_copy(const Src* src, const Shape& shape, const std::vector<int64_t>& order, Dst* dst) {
  const int rank = static_cast<int>(order.size());
  std::vector<int64_t> strides = row_major_strides(shape);
  Shape sizes(rank);
  std::vector<int64_t> st(rank);
  for (int i = 0; i < rank; ++i) {
    sizes[i] = shape[order[i]];
    st[i] = strides[order[i]];
  }
  const int64_t n = num_elements(shape);
  if (n == 0) return;
  const int64_t row = rank ? sizes[rank - 1] : 1, row_stride = rank ? st[rank - 1] : 0;
  const int64_t rows = n / row;
  runtime::parallel_for(rows, std::max<int64_t>(1, (1 << 14) / row), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      int64_t off = 0, rem = r;
      for (int i = rank - 2; i >= 0; --i) {
        off += (rem % sizes[i]) * st[i];
        rem /= sizes[i];
      }
      Dst* out = dst + r * row;
      for (int64_t j = 0; j < row; ++j)
        out[j] = static_cast<Dst>(static_cast<ComputeType<Src>>(src[off + j * row_stride]));
    }
  });
}

// One operand as B matrices, each stored row-major either as the canonical layout (lhs
// [M, K], rhs [K, N]) or, when `transposed`, as its transpose; `data` may point into the
// input tensor (no copy) or into `owned`.
template <class T>
struct Matrices {
  const T* data = nullptr;
  bool transposed = false;
  std::vector<T> owned;
};

// canonical: batch, then the matrix rows, then its columns; swapped: batch, columns, rows.
template <class T, class Src>
Matrices<T> prepare(const Tensor& t, const std::vector<int64_t>& canonical,
                    const std::vector<int64_t>& swapped, bool allow_transposed) {
  Matrices<T> m;
  const Src* src = static_cast<const Src*>(t.raw_data());
  if constexpr (std::is_same_v<T, Src>) {
    if (is_layout(t.shape(), canonical)) {
      m.data = src;
      return m;
    }
    if (allow_transposed && is_layout(t.shape(), swapped)) {
      m.data = src;
      m.transposed = true;
      return m;
    }
  }
  m.owned.resize(t.size());
  permute_copy(src, t.shape(), canonical, m.owned.data());
  m.data = m.owned.data();
  return m;
}

struct GemmSizes {
  int64_t batch, m, k, n;
};

// Floating-point GEMM (gemm, ops/dot_util.h).
template <class T>
void gemm_eigen(const GemmSizes& s, const Matrices<T>& a, const Matrices<T>& b, T* c) {
  gemm(a.data, b.data, c, s.batch, s.m, s.k, s.n, a.transposed, b.transposed);
}

// Integer GEMM: a plain loop that wraps on overflow (uint64_t arithmetic, like XLA).
template <class T>
void gemm_integer(const GemmSizes& s, const Matrices<T>& a, const Matrices<T>& b, T* c) {
  if (s.n == 0) return;
  ops::for_each_row_block(s.batch, s.m, s.k, s.n, [&](int64_t bi, int64_t r0, int64_t r1) {
    std::vector<uint64_t> acc(s.n);
    const T* pb = b.data + bi * s.k * s.n;
    for (int64_t i = r0; i < r1; ++i) {
      std::fill(acc.begin(), acc.end(), 0);
      const T* pa = a.data + (bi * s.m + i) * s.k;
      for (int64_t k = 0; k < s.k; ++k) {
        const uint64_t av = static_cast<uint64_t>(static_cast<int64_t>(pa[k]));
        const T* row = pb + k * s.n;
        for (int64_t j = 0; j < s.n; ++j)
          acc[j] += av * static_cast<uint64_t>(static_cast<int64_t>(row[j]));
      }
      T* out = c + (bi * s.m + i) * s.n;
      for (int64_t j = 0; j < s.n; ++j) out[j] = static_cast<T>(acc[j]);
    }
  });
}

void dot_kernel(KernelContext& ctx) {
  const Tensor& ta = ctx.input(0);
  const Tensor& tb = ctx.input(1);
  const Attrs& attrs = ctx.attrs();
  const std::vector<int64_t> a_batch = ints_or_empty(attrs, "lhs_batch");
  const std::vector<int64_t> b_batch = ints_or_empty(attrs, "rhs_batch");
  const std::vector<int64_t>& a_contract = attrs.get_ints("lhs_contract");
  const std::vector<int64_t>& b_contract = attrs.get_ints("rhs_contract");
  const std::vector<int64_t> a_free = free_dims(ta.rank(), a_batch, a_contract);
  const std::vector<int64_t> b_free = free_dims(tb.rank(), b_batch, b_contract);
  const GemmSizes s{product(ta.shape(), a_batch), product(ta.shape(), a_free),
                    product(ta.shape(), a_contract), product(tb.shape(), b_free)};
  // Canonical layouts: a as [B, M, K], b as [B, K, N]; Eigen also reads their transposes.
  const auto a_mk = concat({&a_batch, &a_free, &a_contract});
  const auto a_km = concat({&a_batch, &a_contract, &a_free});
  const auto b_kn = concat({&b_batch, &b_contract, &b_free});
  const auto b_nk = concat({&b_batch, &b_free, &b_contract});
  Tensor& out = ctx.allocate_output(0);
  visit_in<TypeSet::kNumeric>(ctx, ta.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_floating_point_v<T>) {
      auto a = prepare<T, T>(ta, a_mk, a_km, true);
      auto b = prepare<T, T>(tb, b_kn, b_nk, true);
      gemm_eigen(s, a, b, out_ptr<T>(out));
    } else if constexpr (kIsFloat<T>) {  // f16, bf16: products summed in f32, rounded once
      // The CPU's bf16/f16 unit through oneDNN where there is one (ops/onednn_matmul.h), the
      // operands read in their own type; otherwise (or when oneDNN declines) widened to f32.
      if (onednn::lowp_matmul_supported(ta.dtype())) {
        auto a = prepare<T, T>(ta, a_mk, a_km, true);
        auto b = prepare<T, T>(tb, b_kn, b_nk, true);
        const onednn::MatmulShape ms{s.batch,     s.m,         s.k,        s.n,
                                     a.transposed, b.transposed, ta.dtype()};
        if (onednn::matmul(ctx, ms, a.data, b.data, out_ptr<T>(out))) return;
      }
      auto a = prepare<float, T>(ta, a_mk, a_km, true);
      auto b = prepare<float, T>(tb, b_kn, b_nk, true);
      std::vector<float> c(out.size());
      gemm_eigen(s, a, b, c.data());
      T* y = out_ptr<T>(out);
      runtime::parallel_for(out.size(), 1 << 14, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) y[i] = static_cast<T>(c[i]);
      });
    } else {
      auto a = prepare<T, T>(ta, a_mk, a_km, false);
      auto b = prepare<T, T>(tb, b_kn, b_nk, false);
      gemm_integer(s, a, b, out_ptr<T>(out));
    }
  });
}

// ---- gradient ---------------------------------------------------------------------------
// For an operand x of z = dot(a, b), the other operand being y: dz contracted with y over y's
// free dimensions (the batch dimensions stay batch) leaves x's batch dimensions, x's free ones
// and y's contracting ones (partners of x's), then a transpose puts them in x's order.
// dot(dz, y) and dot(y, dz) give the last two groups in either order; the one that needs no
// transpose is taken, so [B,M,K] x [K,N] differentiates into dot(dz, b) = [B,M,K] and
// dot(a, dz) = [K,N], each one GEMM that reads its operands in place.

DotDims operand_dims(const Attrs& attrs, const char* side, int64_t rank) {
  const std::string s = side;
  std::vector<int64_t> batch = ints_or_empty(attrs, s + "_batch");
  std::vector<int64_t> contract = attrs.get_ints(s + "_contract");
  std::vector<int64_t> free = free_dims(rank, batch, contract);
  return {std::move(batch), std::move(contract), std::move(free)};
}

bool is_identity(const std::vector<int64_t>& perm) {
  for (size_t i = 0; i < perm.size(); ++i)
    if (perm[i] != static_cast<int64_t>(i)) return false;
  return true;
}

Tensor operand_gradient(const Tensor& dz, const Tensor& y, bool x_is_lhs, int64_t x_rank,
                        const DotDims& x, const DotDims& yd) {
  const int64_t nb = static_cast<int64_t>(x.batch.size());
  const int64_t nfx = static_cast<int64_t>(x.free.size());
  const int64_t nfy = static_cast<int64_t>(yd.free.size());
  const int64_t nc = static_cast<int64_t>(x.contract.size());
  // dz's dimensions: the batch ones, then a's free ones, then b's.
  Axes dz_batch(nb), y_free_in_dz(nfy);
  std::iota(dz_batch.begin(), dz_batch.end(), 0);
  std::iota(y_free_in_dz.begin(), y_free_in_dz.end(), x_is_lhs ? nb + nfx : nb);
  // The remaining dimensions of y, its contracting ones, come out in increasing order.
  std::vector<int64_t> y_contract_sorted = yd.contract;
  std::sort(y_contract_sorted.begin(), y_contract_sorted.end());
  // Where each of x's dimensions lands in the result of dot(dz, y) (free_first) or dot(y, dz).
  auto placement = [&](bool free_first) {
    Axes perm(x_rank);
    for (int64_t i = 0; i < nb; ++i) perm[x.batch[i]] = i;
    for (int64_t j = 0; j < nfx; ++j) perm[x.free[j]] = nb + (free_first ? j : nc + j);
    for (int64_t k = 0; k < nc; ++k) {
      int64_t r = std::find(y_contract_sorted.begin(), y_contract_sorted.end(), yd.contract[k]) -
                  y_contract_sorted.begin();
      perm[x.contract[k]] = nb + (free_first ? nfx + r : r);
    }
    return perm;
  };
  const Axes dz_first = placement(true), y_first = placement(false);
  const bool use_dz_first = is_identity(dz_first) || (!is_identity(y_first) && x_is_lhs);
  Tensor g = use_dz_first ? dot(dz, y, y_free_in_dz, yd.free, dz_batch, yd.batch)
                          : dot(y, dz, yd.free, y_free_in_dz, yd.batch, dz_batch);
  const Axes& perm = use_dz_first ? dz_first : y_first;
  return is_identity(perm) ? g : transpose(g, perm);
}

std::vector<Tensor> dot_gradient(const GradContext& ctx) {
  const Tensor &a = ctx.inputs[0], &b = ctx.inputs[1], &dz = ctx.output_grads[0];
  const DotDims da = operand_dims(ctx.attrs(), "lhs", a.rank());
  const DotDims db = operand_dims(ctx.attrs(), "rhs", b.rank());
  return {operand_gradient(dz, b, /*x_is_lhs=*/true, a.rank(), da, db),
          operand_gradient(dz, a, /*x_is_lhs=*/false, b.rank(), db, da)};
}

}  // namespace

KILN_REGISTER_OP(dot)
    .input("a")
    .input("b")
    .kind(OpKind::kKernel)
    .shape_fn(dot_shape)
    .gradient(dot_gradient);
KILN_REGISTER_KERNEL(dot).dtypes(dtypes_of(TypeSet::kNumeric)).fn(dot_kernel);

template <class T>
void gemm_block(const T* a, int64_t lda, bool a_transposed, const T* b, int64_t ldb,
                bool b_transposed, T* c, int64_t ldc, int64_t rows, int64_t depth, int64_t cols) {
  if constexpr (std::is_same_v<T, float>) {
    if (onednn::sgemm_block(a, lda, b, ldb, c, ldc, rows, depth, cols, a_transposed, b_transposed))
      return;
  }
  using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using ConstMap = Eigen::Map<const RowMat, Eigen::Unaligned, Eigen::OuterStride<>>;
  using OutMap = Eigen::Map<RowMat, Eigen::Unaligned, Eigen::OuterStride<>>;
  OutMap out(c, rows, cols, Eigen::OuterStride<>(ldc));
  auto multiply = [&](const auto& lhs, const auto& rhs) { out.noalias() = lhs * rhs; };
  const ConstMap lhs(a, rows, depth, Eigen::OuterStride<>(lda));
  const ConstMap lhs_t(a, depth, rows, Eigen::OuterStride<>(lda));  // stored [depth, rows]
  const ConstMap rhs(b, depth, cols, Eigen::OuterStride<>(ldb));
  const ConstMap rhs_t(b, cols, depth, Eigen::OuterStride<>(ldb));  // stored [cols, depth]
  if (!a_transposed) {
    b_transposed ? multiply(lhs, rhs_t.transpose()) : multiply(lhs, rhs);
  } else {
    b_transposed ? multiply(lhs_t.transpose(), rhs_t.transpose())
                 : multiply(lhs_t.transpose(), rhs);
  }
}

template <class T>
void gemm(const T* a, const T* b, T* c, int64_t batch, int64_t m, int64_t k, int64_t n,
          bool a_transposed, bool b_transposed, const GemmRowsDone& rows_done) {
  if (batch == 0 || m == 0 || n == 0) return;
  const int64_t lda = a_transposed ? m : k, ldb = b_transposed ? k : n;
  const GemmSplit split = k == 0 ? GemmSplit{} : gemm_split(batch, m, k, n, b_transposed);
  if (split.kind == GemmSplit::kRows) {
    for_each_row_block(batch, m, k, n, [&](int64_t bi, int64_t r0, int64_t r1) {
      T* block = c + (bi * m + r0) * n;
      if (k == 0) {
        std::fill(block, block + (r1 - r0) * n, T(0));
      } else {
        const T* rows = a + bi * m * k + (a_transposed ? r0 : r0 * k);
        gemm_block(rows, lda, a_transposed, b + bi * k * n, ldb, b_transposed, block, n, r1 - r0,
                   k, n);
      }
      if (rows_done) rows_done(bi, r0, r1 - r0);
    });
    return;
  }
  // One product (batch 1), cut along B. A range's partial product for kDepth goes to c (the
  // first) or to its slot of `partial`.
  const int64_t size = m * n;
  std::unique_ptr<T[]> partial;
  if (split.kind == GemmSplit::kDepth) partial.reset(new T[(split.parts - 1) * size]);
  runtime::parallel_for(split.parts, 1, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const int64_t r0 = p * split.step;
      if (split.kind == GemmSplit::kColumns) {
        const int64_t cols = std::min(n, r0 + split.step) - r0;
        gemm_block(a, lda, a_transposed, b_transposed ? b + r0 * ldb : b + r0, ldb, b_transposed,
                   c + r0, n, m, k, cols);
      } else {
        const int64_t depth = std::min(k, r0 + split.step) - r0;
        T* out = p == 0 ? c : partial.get() + (p - 1) * size;
        gemm_block(a_transposed ? a + r0 * lda : a + r0, lda, a_transposed,
                   b_transposed ? b + r0 : b + r0 * ldb, ldb, b_transposed, out, n, m, depth, n);
      }
    }
  });
  if (split.kind == GemmSplit::kColumns && !rows_done) return;
  // Rows are final once the ranges' partial products are added, in the order of their ranges.
  runtime::parallel_for(m, std::max<int64_t>(1, (1 << 14) / n), [&](int64_t r0, int64_t r1) {
    if (split.kind == GemmSplit::kDepth) {
      T* __restrict out = c + r0 * n;
      const int64_t count = (r1 - r0) * n;
      for (int64_t p = 1; p < split.parts; ++p) {
        const T* __restrict add = partial.get() + (p - 1) * size + r0 * n;
        for (int64_t i = 0; i < count; ++i) out[i] += add[i];
      }
    }
    if (rows_done) rows_done(0, r0, r1 - r0);
  });
}

template void gemm_block<float>(const float*, int64_t, bool, const float*, int64_t, bool, float*,
                                int64_t, int64_t, int64_t, int64_t);
template void gemm_block<double>(const double*, int64_t, bool, const double*, int64_t, bool,
                                 double*, int64_t, int64_t, int64_t, int64_t);
template void gemm<float>(const float*, const float*, float*, int64_t, int64_t, int64_t, int64_t,
                          bool, bool, const GemmRowsDone&);
template void gemm<double>(const double*, const double*, double*, int64_t, int64_t, int64_t,
                           int64_t, bool, bool, const GemmRowsDone&);

}  // namespace ops

// ---- public functions -------------------------------------------------------------------
namespace {

std::string type_str(const Tensor& x) { return TensorType{x.dtype(), x.shape()}.str(); }

Axes normalized(const char* which, const Tensor& t, Axes axes) {
  for (int64_t& a : axes) {
    if (a < -t.rank() || a >= t.rank()) {
      throw Error(ErrorCode::kInvalidArgument,
                  "dot: axis " + std::to_string(a) + " is out of range for " + which + ": " +
                      type_str(t) + " (rank " + std::to_string(t.rank()) + ")");
    }
    if (a < 0) a += t.rank();
  }
  return axes;
}

[[noreturn]] void matmul_error(const std::string& what, const Tensor& a, const Tensor& b) {
  throw Error(ErrorCode::kInvalidArgument,
              "matmul: " + what + ": a is " + type_str(a) + ", b is " + type_str(b));
}

bool dims_differ(int64_t x, int64_t y) { return x != y && x != kUnknownDim && y != kUnknownDim; }

}  // namespace

Tensor dot(const Tensor& a, const Tensor& b, Axes a_contract, Axes b_contract, Axes a_batch,
           Axes b_batch) {
  DType t = promote_types(a.dtype(), b.dtype());
  Attrs attrs{{"lhs_contract", normalized("a", a, a_contract)},
              {"rhs_contract", normalized("b", b, b_contract)},
              {"lhs_batch", normalized("a", a, a_batch)},
              {"rhs_batch", normalized("b", b, b_batch)}};
  return call_op("dot", {convert(a, t), convert(b, t)}, attrs)[0];
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  const int64_t ra = a.rank(), rb = b.rank();
  if (ra == 0 || rb == 0) matmul_error("operands must have at least one dimension", a, b);
  const int64_t k_a = a.shape()[ra - 1];
  const int64_t k_b = b.shape()[rb == 1 ? 0 : rb - 2];
  if (dims_differ(k_a, k_b)) matmul_error("inner dimensions differ", a, b);
  // 1-d operands and a rank-2 b need no batch dimensions: a's leading dimensions are free and
  // come first in the result, which is numpy's order. [B, M, K] x [K, N] is one GEMM, no copy.
  if (ra == 1 || rb <= 2) return dot(a, b, {ra - 1}, {rb == 1 ? 0 : rb - 2});

  // Broadcast the batch dimensions (all but the last two; a 2-d a has none).
  const Shape ba(a.shape().begin(), a.shape().end() - 2);
  const Shape bb(b.shape().begin(), b.shape().end() - 2);
  Tensor x = a, y = b;
  if (ba != bb) {
    const size_t rank = std::max(ba.size(), bb.size());
    Shape batch(rank);
    for (size_t i = 0; i < rank; ++i) {
      int64_t da = i < rank - ba.size() ? 1 : ba[i - (rank - ba.size())];
      int64_t db = i < rank - bb.size() ? 1 : bb[i - (rank - bb.size())];
      if (da != db && da != 1 && db != 1 && da != kUnknownDim && db != kUnknownDim)
        matmul_error("batch dimensions cannot be broadcast", a, b);
      batch[i] = da == 1 ? db : db == 1 ? da : da != kUnknownDim ? da : db;
    }
    auto with_batch = [&](const Tensor& t) {
      Shape s = batch;
      s.push_back(t.dim(-2));
      s.push_back(t.dim(-1));
      return t.shape() == s ? t : broadcast_to(t, s);
    };
    x = with_batch(a);
    y = with_batch(b);
  }
  Axes batch_dims(x.rank() - 2);
  std::iota(batch_dims.begin(), batch_dims.end(), 0);
  return dot(x, y, {x.rank() - 1}, {y.rank() - 2}, batch_dims, batch_dims);
}

}  // namespace kiln
