// A GPU's loop over a fused kernel's items, as target-independent IR: a grid-stride loop whose
// block and thread ids are arguments. CUDA's entry kernel (compiler/cuda/ptx.cc) passes its
// special registers; the CPU can pass loops instead (cpu::compile_grid_kernels_for_host), which
// is how the mapping is tested without a GPU. Internal to the compiler's backends (LLVM types).
#pragma once

#include <cstdint>
#include <string>

#include "compiler/fused_subgraph.h"

namespace llvm {
class Module;
}

namespace kiln::compiler::llvm_ir {

// The items a grid covers: one per output element of a loop fusion, one per element of the
// reduced shape for a reduction fusion (each thread folds its whole reduced range).
int64_t grid_items(const FusedSubgraph& sg);

// Emits `sg`'s elemental loop (emit_loop_kernel, internal to the module) and
//   void <prefix>grid(void** inputs, void** outputs, i64 block, i64 block_dim, i64 thread,
//                     i64 grid_dim)
// which computes items block * block_dim + thread, then every block_dim * grid_dim after it,
// below grid_items(sg): every item once over a grid of grid_dim blocks of block_dim threads.
// `sg` must be valid for a loop target (compiler/llvm_ir/loop_target.h).
void emit_grid_kernel(const FusedSubgraph& sg, llvm::Module& module, const std::string& prefix);

}  // namespace kiln::compiler::llvm_ir
