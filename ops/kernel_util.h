// Helpers for writing reference CPU kernels and shape functions: dtype sets, broadcasting
// iteration, axis normalisation, the parallel loop, and f16/bf16 staging.
#pragma once

#include <algorithm>
#include <array>
#include <initializer_list>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/op_registry.h"
#include "ops/narrow.h"
#include "runtime/thread_pool.h"
#include "src/core/type_switch.h"

namespace kiln::ops {

// ---- dtype sets -------------------------------------------------------------------------
enum class TypeSet { kFloat, kNumeric, kInteger, kBool, kAll };

template <TypeSet S, class T>
constexpr bool in_set() {
  constexpr bool is_bool = std::is_same_v<T, bool>;
  if constexpr (S == TypeSet::kFloat) return kIsFloat<T>;
  if constexpr (S == TypeSet::kNumeric) return !is_bool;
  if constexpr (S == TypeSet::kInteger) return !is_bool && !kIsFloat<T>;
  if constexpr (S == TypeSet::kBool) return is_bool;
  return true;
}

std::vector<DType> dtypes_of(TypeSet set);
bool dtype_in(TypeSet set, DType dtype);
const char* type_set_name(TypeSet set);  // "floating-point", "numeric", ...

// Calls f(TypeTag<T>) for dtype when T is in S; otherwise ctx.fail names the dtype.
template <TypeSet S, class Ctx, class F>
void visit_in(const Ctx& ctx, DType dtype, F&& f) {
  visit_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (in_set<S, T>()) {
      f(tag);
    } else {
      ctx.fail(std::string("not defined for dtype ") + dtype_name(dtype));
    }
  });
}

// ---- shapes -----------------------------------------------------------------------------
// NumPy broadcasting of two shapes (kUnknownDim-aware); fails naming both shapes.
Shape broadcast_shapes(const InferContext& ctx, const Shape& a, const Shape& b);
// An axis in [-rank, rank) made non-negative; fails naming the axis and shape.
int64_t normalize_axis(const InferContext& ctx, int64_t axis, int64_t rank, const Shape& shape);
// Requires the same dtype on every input; fails listing them.
void require_same_dtype(const InferContext& ctx);
void require_dtype_in(const InferContext& ctx, int input, TypeSet set);
std::string types_str(const InferContext& ctx);  // "x: f32[2,3], y: f64[3]"

// "[4,-1]": attribute lists with their raw values (shape_str prints -1 as "?").
std::string ints_str(const std::vector<int64_t>& v);

// Whether two shapes have the same rank and agree in every dimension both know.
bool shapes_agree(const Shape& a, const Shape& b);

// gather's and scatter_add's check of their indices (i32 or i64) along `axis` of x (of type
// `x`): the error naming the first index outside [0, x.shape[axis]) and its position, or "".
// A device program runs it before a loop that gathers (compiler/lowering.h's IndexCheck).
std::string take_index_error(const Tensor& indices, int64_t axis, const TensorType& x);
// Indices (i32 or i64) widened to i64.
std::vector<int64_t> indices_as_i64(const Tensor& indices);

// Runs `shape_fn` as if the node had the inputs `types`, with its op, name and attributes: a
// gradient op checks its operands against what the forward op infers from them.
std::vector<TensorType> infer_with(const InferContext& ctx, const ShapeFn& shape_fn,
                                   const std::vector<TensorType>& types);

// Those of `names` that `attrs` sets: a gradient rule passes on its forward op's attributes.
Attrs copy_attrs(const Attrs& attrs, std::initializer_list<const char*> names);

// ---- broadcasting iteration -------------------------------------------------------------
// Strides of `in` (row-major) laid against the output's dimensions, 0 where broadcast.
std::vector<int64_t> broadcast_strides(const Shape& in, const Shape& out);

// Calls f(out_index, offsets) for every output element, where offsets[k] is the element
// offset into input k. Runs on the thread pool for large outputs.
template <size_t N, class F>
void for_each_broadcast(const Shape& out, const std::array<Shape, N>& ins, F&& f) {
  int64_t n = num_elements(out);
  if (n == 0) return;
  bool same = true;
  for (const Shape& s : ins) same = same && s == out;
  constexpr int64_t kGrain = 1 << 14;
  if (same) {
    runtime::parallel_for(n, kGrain, [&](int64_t begin, int64_t end) {
      std::array<int64_t, N> off;
      for (int64_t i = begin; i < end; ++i) {
        off.fill(i);
        f(i, off);
      }
    });
    return;
  }
  // Common case: every input is either the full shape or a single element (x * 2.0).
  bool full_or_scalar = true;
  std::array<int64_t, N> step{};
  for (size_t k = 0; k < N; ++k) {
    if (ins[k] == out)
      step[k] = 1;
    else if (num_elements(ins[k]) == 1)
      step[k] = 0;
    else
      full_or_scalar = false;
  }
  if (full_or_scalar) {
    if constexpr (N == 2) {
      // A tensor and a scalar (x * 2.0, x / 255): offsets the compiler sees are i and 0, so
      // the loop vectorises.
      if (step[0] != step[1]) {
        const bool scalar_second = step[1] == 0;
        runtime::parallel_for(n, kGrain, [&](int64_t begin, int64_t end) {
          if (scalar_second) {
            for (int64_t i = begin; i < end; ++i) f(i, std::array<int64_t, 2>{i, 0});
          } else {
            for (int64_t i = begin; i < end; ++i) f(i, std::array<int64_t, 2>{0, i});
          }
        });
        return;
      }
    }
    runtime::parallel_for(n, kGrain, [&](int64_t begin, int64_t end) {
      std::array<int64_t, N> off;
      for (int64_t i = begin; i < end; ++i) {
        for (size_t k = 0; k < N; ++k) off[k] = i * step[k];
        f(i, off);
      }
    });
    return;
  }
  std::array<std::vector<int64_t>, N> strides;
  for (size_t k = 0; k < N; ++k) strides[k] = broadcast_strides(ins[k], out);
  const int rank = static_cast<int>(out.size());
  runtime::parallel_for(n, kGrain, [&](int64_t begin, int64_t end) {
    std::vector<int64_t> idx(rank);
    std::array<int64_t, N> off{};
    int64_t rem = begin;
    for (int d = rank - 1; d >= 0; --d) {
      idx[d] = rem % out[d];
      rem /= out[d];
      for (size_t k = 0; k < N; ++k) off[k] += idx[d] * strides[k][d];
    }
    for (int64_t i = begin; i < end; ++i) {
      f(i, off);
      for (int d = rank - 1; d >= 0; --d) {  // increment the multi-index
        for (size_t k = 0; k < N; ++k) off[k] += strides[k][d];
        if (++idx[d] < out[d]) break;
        for (size_t k = 0; k < N; ++k) off[k] -= strides[k][d] * out[d];
        idx[d] = 0;
      }
    }
  });
}

template <class T>
const T* in_ptr(const KernelContext& ctx, int i) {
  return static_cast<const T*>(ctx.input(i).raw_data());
}
template <class T>
T* out_ptr(Tensor& t) {
  return static_cast<T*>(t.raw_mutable_data());
}

// A kernel for the dtypes of S, chosen by input 0's: calls kernel(TypeTag<T>, ctx).
template <TypeSet S>
KernelFn typed_kernel(auto kernel) {
  return [kernel](KernelContext& ctx) {
    visit_in<S>(ctx, ctx.input(0).dtype(), [&](auto tag) { kernel(tag, ctx); });
  };
}

// Registers the function template `kernel` (kernel<T>(ctx)) as op's kernel for the dtypes of S.
#define KILN_REGISTER_TYPED_KERNEL(op, S, kernel) \
  KILN_REGISTER_KERNEL(op)                        \
      .dtypes(dtypes_of(S))                       \
      .fn(typed_kernel<S>(                        \
          [](auto tag, KernelContext& ctx) { kernel<typename decltype(tag)::type>(ctx); }))

// ---- f16/bf16 staging -------------------------------------------------------------------
// Kernels compute in ComputeType<T> (float for f16 and bf16) and round once when storing.

// `n` values of T in its compute type: borrowed when T is its own compute type, otherwise
// converted into `storage`.
template <class T, class C = ComputeType<T>>
const C* as_compute(const T* src, int64_t n, std::vector<C>& storage) {
  if constexpr (std::is_same_v<T, C>) {
    return src;
  } else {  // bf16 or f16 into f32
    storage.resize(n);
    parallel_widen_into(src, n, storage.data());
    return storage.data();
  }
}

// Stores `n` values of T's compute type into T: rounded (f32 into bf16/f16, ops/narrow.h), or
// copied where T is its own compute type.
template <class T, class C = ComputeType<T>>
void store_rounded(const C* src, int64_t n, T* dst) {
  if constexpr (std::is_same_v<T, C>) {
    std::copy(src, src + n, dst);
  } else {
    round_into(src, n, dst);
  }
}

// An output written in its compute type: the tensor's own memory when T is its compute type,
// otherwise a staging buffer that store() rounds into the tensor (in parallel). Either way
// data() starts uninitialised, as a new tensor does: the kernel writes every element.
template <class T>
class ComputeOutput {
 public:
  using C = ComputeType<T>;
  explicit ComputeOutput(Tensor& out) : out_(out) {
    if constexpr (kStaged) staging_.reset(new C[out.size()]);  // default-initialised
  }
  C* data() {
    if constexpr (kStaged) {
      return staging_.get();
    } else {
      return out_ptr<T>(out_);
    }
  }
  void store() {
    if constexpr (kStaged) parallel_round_into(staging_.get(), out_.size(), out_ptr<T>(out_));
  }

 private:
  static constexpr bool kStaged = !std::is_same_v<T, C>;
  Tensor& out_;
  std::unique_ptr<C[]> staging_;
};

}  // namespace kiln::ops
