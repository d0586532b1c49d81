// The LLVM-free half of the CPU loop- and reduction-fusion codegen: running a compiled
// FusedKernel over the thread pool (compile_elementwise is in jit.cc, the emitter in
// compiler/llvm_ir/elemental_emitter.cc).
#include "compiler/cpu/fused_kernel.h"

#include <algorithm>
#include <cstdlib>
#include <string>
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
    if (t.dtype() != want.buffer_dtype() || t.shape() != want.buffer_shape())
      fail(sg, "run: input " + std::to_string(i) + " is " + dtype_name(t.dtype()) +
                   shape_str(t.shape()) + ", the kernel was compiled for " +
                   dtype_name(want.buffer_dtype()) + shape_str(want.buffer_shape()));
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
  if (grid_fn_ != nullptr) {
    run_grid(in_ptrs.data(), out_ptrs.data());
    return;
  }
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

bool grid_kernels_for_tests() {
  static const bool on = [] {
    const char* v = std::getenv("KILN_TEST_ONLY_GRID_KERNELS");
    return v != nullptr && std::string(v) == "run-on-a-host-grid";
  }();
  return on;
}

void run_on_host_grid(GridFn fn, void** ins, void** outs, int64_t items) {
  // A grid of fewer threads than items, with an odd block size: each thread takes several
  // items through the grid-stride loop, the last pass only some of them. Blocks run in
  // parallel (their items are disjoint), threads in order within a block.
  constexpr int64_t kThreads = 37;
  const int64_t blocks = std::clamp<int64_t>(items / (3 * kThreads), 1, 6);
  runtime::parallel_for(blocks, 1, [&](int64_t b, int64_t e) {
    for (int64_t block = b; block < e; ++block)
      for (int64_t t = 0; t < kThreads; ++t) fn(ins, outs, block, kThreads, t, blocks);
  });
}

void FusedKernel::run_grid(void** ins, void** outs) const {
  run_on_host_grid(grid_fn_, ins, outs, parallel_size_);
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
