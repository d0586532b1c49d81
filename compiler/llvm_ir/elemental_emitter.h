// The elemental emitter: a FusedSubgraph (compiler/fused_subgraph.h) as LLVM IR, the same for
// every target. It emits the loop a backend calls over a range of elements; the backend owns
// the target machine, the optimisation and what calls the loop (the CPU's thread pool through
// its JIT: compiler/cpu/jit.cc; a CUDA grid: compiler/cuda/ptx.cc). Internal to the compiler's
// backends (LLVM types).
#pragma once

#include <cstdint>
#include <string>

#include "compiler/fused_subgraph.h"

namespace llvm {
class Module;
}

namespace kiln::compiler::llvm_ir {

struct LoopOptions {
  // Columns a column reduction folds together, into stack arrays of their accumulators. The
  // CPU's 1024 (8 KiB of f64 each: inside L1 beside the input rows; 256, the reference
  // kernels' block, read rows in runs too short to stream and measured 3x slower than
  // accumulating in the output row). A GPU thread folds one column (1: its accumulators stay
  // in registers, and a warp's threads read adjacent columns).
  int64_t column_block = 1024;
};

// Emits `sg`, iterated over `shape` (its iteration shape), into `module` as
//   void <prefix>kernel(void** inputs, void** outputs, i64 begin, i64 end)
// computing output elements [begin, end) (row-major linear indices; for a reduction fusion,
// elements of the reduced shape, each folding its whole reduced range). With reductions also
//   void <prefix>kernel_part(inputs, outputs, begin, end, i64 lo, i64 hi, i64 partial)
// which folds only positions [lo, hi) of the outermost reduced (collapsed) dimension and, when
// `partial` is nonzero, stores the reductions unrounded in their accumulator dtype. `flat`: the
// one flat loop (is_flat_loop, or no elements); otherwise rows of the last dimension. Calls to
// the C library's math functions (sinf, log1p, ...) are left as declarations for the target to
// resolve. Returns the size of the dimension kernel_part's [lo, hi) ranges over (1 without
// reductions). `sg` must be valid for a loop target (compiler/llvm_ir/loop_target.h).
int64_t emit_loop_kernel(const FusedSubgraph& sg, const Shape& shape, bool flat,
                         llvm::Module& module, const std::string& prefix,
                         const LoopOptions& options = {});

}  // namespace kiln::compiler::llvm_ir
