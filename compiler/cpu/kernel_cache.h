// The process-wide cache of JIT'd fused kernels, keyed by a subgraph's structure. A flat-loop
// kernel (every input of the output's size or a single element) never depends on sizes, so one
// compiled function serves every size: the Adam update of each weight, a step recompiled for
// a short last batch, and eager ops all reuse it. Other kernels are keyed with their shapes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compiler/cpu/fused_kernel.h"

namespace kiln::compiler {

// The kernel for `sg`, compiled on a miss (cpu::compile_elementwise). Throws kiln::Error.
cpu::FusedKernel cached_kernel(const FusedSubgraph& sg);

// Kernels for several subgraphs; the misses are compiled together in one LLVM module (one
// optimisation pipeline and one JIT session, much cheaper than one each). Inside a compile that
// dumps (KILN_DUMP, compiler/dump.h), every kernel is compiled afresh into the compile's dump. A
// subgraph that cannot be compiled gets an empty kernel (fn() == nullptr) and its error in
// (*errors)[i].
std::vector<cpu::FusedKernel> cached_kernels(const std::vector<FusedSubgraph>& sgs,
                                             std::vector<std::string>* errors);

// The cache key of `sg`: its ops, dtypes and wiring, plus for each input whether it is a single
// element (flat kernels) or all shapes (other kernels).
std::string kernel_cache_key(const FusedSubgraph& sg);

struct KernelCacheStats {
  int64_t hits = 0;
  int64_t misses = 0;
  int64_t entries = 0;
  double compile_ms = 0;  // spent compiling the misses
};
KernelCacheStats kernel_cache_stats();

}  // namespace kiln::compiler
