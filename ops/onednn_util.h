// What ops/onednn_conv.cc and ops/onednn_matmul.cc share (built only with oneDNN): the CPU
// engine, the calling thread's OpenMP thread count for a scope, the ISA test, and the fused
// kernels' epilogue as oneDNN takes it (a bias argument and an eltwise post-op) with Kiln's relu.
#pragma once

#include <omp.h>

#include <cstdint>
#include <oneapi/dnnl/dnnl.hpp>

#include "ops/narrow.h"
#include "ops/onednn_conv.h"

namespace kiln::ops::onednn {

inline const dnnl::engine& cpu_engine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// The calling thread's OpenMP thread count for a scope. oneDNN sizes a primitive's parallel
// regions by it when the primitive is created and runs a one-thread primitive (or sgemm call)
// inline on the calling pool thread; the caller's own setting comes back afterwards.
class OmpThreads {
 public:
  explicit OmpThreads(int n) : saved_(omp_get_max_threads()) {
    if (n != saved_) omp_set_num_threads(n);
  }
  ~OmpThreads() {
    if (omp_get_max_threads() != saved_) omp_set_num_threads(saved_);
  }
  OmpThreads(const OmpThreads&) = delete;
  OmpThreads& operator=(const OmpThreads&) = delete;

 private:
  int saved_;
};

// Whether oneDNN dispatches to an ISA holding `isa` (its values are bit sets, each holding the
// bits of the ISAs it extends; ONEDNN_MAX_CPU_ISA lowers what it dispatches to).
inline bool isa_has(dnnl::cpu_isa isa) {
  const auto have = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  const auto want = static_cast<unsigned>(isa);
  return (have & want) == want;
}

// A bf16 unit: AVX512-BF16 (vdpbf16ps) or AMX. Below it oneDNN emulates bf16 with f32 FMAs,
// which buys nothing over widening.
inline bool has_bf16_unit() { return isa_has(dnnl::cpu_isa::avx512_core_bf16); }

// A BiasActivation's activation as an eltwise post-op on the f32 result, before its rounding:
// tanh and logistic. Not relu: oneDNN's (a max with 0) turns NaN into 0, where Kiln's relu
// (select(x <= 0, 0, x)) keeps it; relu_keeping_nan (ops/narrow.h) runs on the
// rounded result instead.
inline void add_post_op(Activation act, dnnl::primitive_attr& attr) {
  if (act != Activation::kTanh && act != Activation::kLogistic) return;
  dnnl::post_ops ops;
  ops.append_eltwise(
      1.0f,
      act == Activation::kTanh ? dnnl::algorithm::eltwise_tanh : dnnl::algorithm::eltwise_logistic,
      0.0f, 0.0f);
  attr.set_post_ops(ops);
}

}  // namespace kiln::ops::onednn
