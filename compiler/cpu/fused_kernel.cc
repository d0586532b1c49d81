// The LLVM-free half of the CPU loop- and reduction-fusion codegen: running a compiled
// FusedKernel over the thread pool (the emitter is elemental_emitter.cc).
#include "compiler/cpu/fused_kernel.h"

#include <algorithm>
#include <limits>
#include <type_traits>
#include <utility>

#include "kiln/error.h"
#include "ops/max_min.h"
#include "runtime/thread_pool.h"

namespace kiln::compiler::cpu {
namespace {

[[noreturn]] void fail(const FusedSubgraph& sg, const std::string& msg,
                       ErrorCode code = ErrorCode::kInvalidArgument) {
  throw Error(code, "cpu codegen (" + sg.name + "): " + msg);
}

}  // namespace

bool compute_dtype(DType t) {
  return t == f32 || t == f64 || t == i32 || t == i64 || t == bool_ || t == bf16 || t == f16;
}

// 8-bit integers are loaded, stored and converted, not computed on: enough to fuse the u8
// pixels -> f32 conversion that starts most image pipelines into the arithmetic after it.
bool storage_dtype(DType t) { return compute_dtype(t) || t == u8 || t == i8; }

std::string reduction_layout_refusal(const Shape& shape, const std::vector<int64_t>& axes) {
  // Tags of the non-unit dimensions, outer to inner: the reduced ones must be one run.
  int runs = 0;
  bool prev_reduced = false;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool r = std::find(axes.begin(), axes.end(), static_cast<int64_t>(d)) != axes.end();
    if (r && !prev_reduced) ++runs;
    prev_reduced = r;
  }
  if (runs > 1)
    return "reduced axes " + shape_str(axes) + " of " + shape_str(shape) +
           " are not adjacent (kept dimensions between them)";
  return "";
}

bool is_flat_loop(const FusedSubgraph& sg, const Shape& out_shape) {
  int64_t n = num_elements(out_shape);
  for (const FusedSubgraph::Input& in : sg.inputs) {
    if (in.piece) return false;  // the row loop splits at the pieces' bounds
    // A view reading its elements in order (a reshape) keeps the flat loop, at its offset;
    // any other view needs the row loop's index arithmetic (one element: read at the offset).
    if (in.map && n > 1 && (num_elements(in.shape) != n ||
                            in.map->strides != row_major_view(in.shape).strides))
      return false;
    int64_t m = num_elements(in.shape);
    if (m != 1 && m != n) return false;
  }
  return true;
}

FusedKernel::FusedKernel(FusedSubgraph sg, Shape shape, KernelFn fn, std::shared_ptr<void> jit,
                         bool contiguous, double compile_ms)
    : subgraph_(std::move(sg)),
      shape_(std::move(shape)),
      num_elements_(kiln::num_elements(shape_)),
      fn_(fn),
      jit_(std::move(jit)),
      contiguous_(contiguous),
      compile_ms_(compile_ms) {
  for (size_t i = 0; i < subgraph_.outputs.size(); ++i)
    output_types_.push_back(subgraph_.output_type(static_cast<int>(i)));
  if (subgraph_.has_reductions()) {
    parallel_size_ = kiln::num_elements(subgraph_.reduced_shape());
    work_per_item_ = 1;
    for (int64_t a : subgraph_.reduce_axes) work_per_item_ *= shape_[a];
    // Kept dimensions inside the reduced run make a column kernel, vectorised across them:
    // give each task long runs of columns rather than a vector's worth.
    int64_t inner = 1;
    for (int64_t d = static_cast<int64_t>(shape_.size()) - 1; d >= 0; --d) {
      if (std::binary_search(subgraph_.reduce_axes.begin(), subgraph_.reduce_axes.end(), d) &&
          shape_[d] != 1)
        break;
      inner *= shape_[d];
    }
    min_grain_ = std::clamp<int64_t>(inner, 1, 512);
  } else {
    parallel_size_ = num_elements_;
  }
}

void FusedKernel::run(const std::vector<Tensor>& inputs, std::vector<Tensor>* outputs) const {
  const FusedSubgraph& sg = subgraph_;
  if (fn_ == nullptr) fail(sg, "run: the kernel is not compiled");
  if (inputs.size() != sg.inputs.size())
    fail(sg, "run: expected " + std::to_string(sg.inputs.size()) + " inputs, got " +
                 std::to_string(inputs.size()));
  std::vector<void*> in_ptrs(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    const FusedSubgraph::Input& want = sg.inputs[i];
    if (!t.defined() || t.is_symbolic())
      fail(sg, "run: input " + std::to_string(i) + " is not a concrete tensor");
    if (t.dtype() != want.dtype || t.shape() != want.buffer_shape())
      fail(sg, "run: input " + std::to_string(i) + " is " + dtype_name(t.dtype()) +
                   shape_str(t.shape()) + ", the kernel was compiled for " +
                   dtype_name(want.dtype) + shape_str(want.buffer_shape()));
    in_ptrs[i] = const_cast<void*>(t.raw_data());
  }
  outputs->resize(sg.outputs.size());
  std::vector<void*> out_ptrs(sg.outputs.size());
  for (size_t i = 0; i < sg.outputs.size(); ++i) {
    Tensor& t = (*outputs)[i];
    const TensorType& want = output_types_[i];
    if (!t.defined() || t.is_symbolic() || t.dtype() != want.dtype || t.shape() != want.shape)
      t = Tensor::empty(want.dtype, want.shape);
    out_ptrs[i] = t.raw_mutable_data();
  }
  if (parallel_size_ == 0) return;
  if (int64_t chunks = split_chunks(); chunks > 1) {
    run_split(chunks, in_ptrs, out_ptrs, outputs);
    return;
  }
  KernelFn fn = fn_;
  void** ins = in_ptrs.data();
  void** outs = out_ptrs.data();
  int64_t grain =
      std::max<int64_t>(min_grain_, (int64_t{1} << 14) / std::max<int64_t>(1, work_per_item_));
  runtime::parallel_for(parallel_size_, grain,
                        [fn, ins, outs](int64_t b, int64_t e) { fn(ins, outs, b, e); });
}

int64_t FusedKernel::split_chunks() const {
  constexpr int64_t kChunkWork = 1 << 15;  // iteration points per chunk
  constexpr int64_t kMaxChunks = 64;
  if (part_fn_ == nullptr || parallel_size_ >= 64 || split_size_ < 2) return 1;
  int64_t total = parallel_size_ * work_per_item_;
  return std::min({split_size_, kMaxChunks, total / kChunkWork});
}

namespace {

// Integers fold in their unsigned type, so that overflow wraps instead of being undefined.
template <class T, bool = std::is_integral_v<T>>
struct Wrapping {
  using type = T;
};
template <class T>
struct Wrapping<T, true> {
  using type = std::make_unsigned_t<T>;
};

// Folds chunk partials (chunk-major, n elements each, in the accumulator type T) into `out` in
// chunk order, then rounds each to Out.
template <class T, class Out>
void combine(ReduceKind kind, const T* partials, int64_t chunks, int64_t n, Out* out) {
  runtime::parallel_for(n, 1 << 12, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      T a = partials[i];
      for (int64_t c = 1; c < chunks; ++c) {
        T v = partials[c * n + i];
        using W = typename Wrapping<T>::type;
        switch (kind) {  // integers wrap, as in the kernel
          case ReduceKind::kSum: a = static_cast<T>(static_cast<W>(a) + static_cast<W>(v)); break;
          case ReduceKind::kProd: a = static_cast<T>(static_cast<W>(a) * static_cast<W>(v)); break;
          case ReduceKind::kMax: a = ops::max_of(a, v); break;
          case ReduceKind::kMin: a = ops::min_of(a, v); break;
        }
      }
      if constexpr (std::is_same_v<Out, half> || std::is_same_v<Out, bfloat16>) {
        out[i] = Out(static_cast<float>(a));  // as the reference rounds: to f32, then 16 bits
      } else {
        out[i] = static_cast<Out>(a);
      }
    }
  });
}

// bf16/f16 partials: f64 (sums, products) or f32 (max, min), into the 16-bit output.
void narrow_combine(ReduceKind kind, const Tensor& partials, int64_t chunks, int64_t n, DType out,
                    void* dst) {
  auto into = [&](auto* o) {
    if (partials.dtype() == f64) {
      combine(kind, static_cast<const double*>(partials.raw_data()), chunks, n, o);
    } else {
      combine(kind, static_cast<const float*>(partials.raw_data()), chunks, n, o);
    }
  };
  if (out == DType::bf16) {
    into(static_cast<bfloat16*>(dst));
  } else {
    into(static_cast<half*>(dst));
  }
}

}  // namespace

void FusedKernel::run_split(int64_t chunks, const std::vector<void*>& in_ptrs,
                            const std::vector<void*>& out_ptrs,
                            std::vector<Tensor>* outputs) const {
  const FusedSubgraph& sg = subgraph_;
  const size_t n_out = sg.outputs.size();
  // Per chunk: the output pointers, reduced outputs redirected into its slice of a scratch of
  // their accumulator dtype.
  auto kind_of = [&](size_t o) { return *sg.nodes[sg.outputs[o] - sg.inputs.size()].reduce; };
  std::vector<Tensor> scratch(n_out);
  for (size_t o = 0; o < n_out; ++o)
    if (sg.is_reduction(sg.outputs[o]))
      scratch[o] = Tensor::empty(accumulator_dtype(kind_of(o), output_types_[o].dtype),
                                 {chunks, parallel_size_});
  std::vector<std::vector<void*>> outs(chunks, out_ptrs);
  for (int64_t c = 0; c < chunks; ++c)
    for (size_t o = 0; o < n_out; ++o)
      if (scratch[o].defined())
        outs[c][o] = static_cast<char*>(scratch[o].raw_mutable_data()) +
                     c * parallel_size_ * dtype_size(scratch[o].dtype());
  PartFn fn = part_fn_;
  const int64_t per = (split_size_ + chunks - 1) / chunks, size = split_size_, n = parallel_size_;
  void** ins = const_cast<void**>(in_ptrs.data());
  runtime::parallel_for(chunks, 1, [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; ++c)
      fn(ins, outs[c].data(), 0, n, c * per, std::min(size, (c + 1) * per), /*partial=*/1);
  });
  for (size_t o = 0; o < n_out; ++o) {
    if (!scratch[o].defined()) continue;
    ReduceKind kind = kind_of(o);
    void* dst = (*outputs)[o].raw_mutable_data();
    const void* src = scratch[o].raw_data();
    switch (output_types_[o].dtype) {
      case DType::f32:
        if (scratch[o].dtype() == f64) {
          combine(kind, static_cast<const double*>(src), chunks, n, static_cast<float*>(dst));
        } else {
          combine(kind, static_cast<const float*>(src), chunks, n, static_cast<float*>(dst));
        }
        break;
      case DType::f64:
        combine(kind, static_cast<const double*>(src), chunks, n, static_cast<double*>(dst));
        break;
      case DType::bf16:
      case DType::f16:
        narrow_combine(kind, scratch[o], chunks, n, output_types_[o].dtype, dst);
        break;
      case DType::i32:
        combine(kind, static_cast<const int32_t*>(src), chunks, n, static_cast<int32_t*>(dst));
        break;
      case DType::i64:
        combine(kind, static_cast<const int64_t*>(src), chunks, n, static_cast<int64_t*>(dst));
        break;
      default:
        fail(sg, "run: unsupported reduction dtype", ErrorCode::kInternal);
    }
  }
}

std::vector<Tensor> FusedKernel::run(const std::vector<Tensor>& inputs) const {
  std::vector<Tensor> out;
  run(inputs, &out);
  return out;
}

}  // namespace kiln::compiler::cpu
