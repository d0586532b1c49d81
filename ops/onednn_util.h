// What ops/onednn_conv.cc and ops/onednn_matmul.cc share (built only with oneDNN): the CPU
// engine, and the calling thread's OpenMP thread count for a scope.
#pragma once

#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>

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

}  // namespace kiln::ops::onednn
