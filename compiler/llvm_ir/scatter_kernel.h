// The device's scatter_add loop (compiler/device_backend.h's DeviceScatterAdd) as
// target-independent IR: a grid-stride loop over the (o, row, k) of a row plan whose block and
// thread ids are arguments, like a fused kernel's grid (grid_kernel.h). CUDA's entry kernel passes
// its special registers (compiler/cuda/ptx.cc); the emulated GPU passes loops. Internal to the
// compiler's backends (LLVM types).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "compiler/device_backend.h"

namespace llvm {
class Module;
}

namespace kiln::compiler::llvm_ir {

// The most items a scatter_add grid covers: one per (o, row, k) for as many rows as the indices
// can name (the plan's row count, read by the loop, says how many there are).
inline int64_t scatter_add_items(const DeviceScatterAdd& s) {
  return s.outer * std::min(s.dim, s.count) * s.inner;
}

// Emits
//   void <prefix>grid(void** inputs, void** outputs, i64 block, i64 block_dim, i64 thread,
//                     i64 grid_dim)
// for `s`: inputs updates and the row plan (scatter_add_plan, i64), output y holding x. Item
// c = (o * rows + r) * inner + k adds the updates of plan row r's positions, in order, into
// y[o, row, k]. Items block * block_dim + thread, then every block_dim * grid_dim after it,
// below outer * rows * inner. `s.dtype` must be a scatter_add_dtype; throws kiln::Error
// otherwise.
void emit_scatter_add_grid(const DeviceScatterAdd& s, llvm::Module& module,
                           const std::string& prefix);

}  // namespace kiln::compiler::llvm_ir
