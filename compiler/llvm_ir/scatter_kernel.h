// The device's scatter_add loop (compiler/device_backend.h's DeviceScatterAdd) as
// target-independent IR: a grid-stride loop over (o, k) columns whose block and thread ids are
// arguments, like a fused kernel's grid (grid_kernel.h). CUDA's entry kernel passes its
// special registers (compiler/cuda/ptx.cc); the emulated GPU passes loops. Internal to the
// compiler's backends (LLVM types).
#pragma once

#include <cstdint>
#include <string>

#include "compiler/device_backend.h"

namespace llvm {
class Module;
}

namespace kiln::compiler::llvm_ir {

// The items a scatter_add grid covers: one (o, k) column each.
inline int64_t scatter_add_items(const DeviceScatterAdd& s) { return s.outer * s.inner; }

// Emits
//   void <prefix>grid(void** inputs, void** outputs, i64 block, i64 block_dim, i64 thread,
//                     i64 grid_dim)
// for `s` (inputs x, indices, updates; output y): item c = o * inner + k copies x's column
// (o, :, k) into y, then walks j = 0 .. count-1 in order, adding updates[o, j, k] into
// y[o, indices[j], k] when the index lies in [0, dim). Items block * block_dim + thread, then
// every block_dim * grid_dim after it, below scatter_add_items(s). `s.dtype` must be a
// scatter_add_dtype; throws kiln::Error otherwise.
void emit_scatter_add_grid(const DeviceScatterAdd& s, llvm::Module& module,
                           const std::string& prefix);

}  // namespace kiln::compiler::llvm_ir
