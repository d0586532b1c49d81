// The CPU code generator for loop and reduction (input) fusions: compile_elementwise emits a
// FusedSubgraph (compiler/fused_subgraph.h) with LLVM and JITs it into a FusedKernel that runs
// over the runtime's thread pool. No LLVM types appear here.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "compiler/fused_subgraph.h"
#include "kiln/tensor.h"

namespace kiln::compiler {
struct DeviceScatterAdd;  // compiler/device_backend.h
}  // namespace kiln::compiler

namespace kiln::compiler::cpu {

// The compiled function: computes output elements [begin, end) (row-major linear indices); for a
// reduction fusion, elements of the reduced shape, each folding its whole reduced range (and
// storing the iteration-shaped outputs it passes over).
using KernelFn = void (*)(void** inputs, void** outputs, int64_t begin, int64_t end);
// A grid kernel (compiler/llvm_ir/grid_kernel.h) compiled for the host: computes the items of
// one thread of a grid of grid_dim blocks of block_dim threads.
using GridFn = void (*)(void** inputs, void** outputs, int64_t block, int64_t block_dim,
                        int64_t thread, int64_t grid_dim);

// Calls grid kernel `fn` for `items` items over a host grid of fewer threads than items
// (37-thread blocks, up to 6 of them in parallel), as a GPU's grid-stride loop would run it.
void run_on_host_grid(GridFn fn, void** ins, void** outs, int64_t items);

// TEST ONLY: the random differential tests check the CUDA backend's grid mapping against the
// interpreter (CompiledRandomGraphs on a host grid, tests/compiler/cuda_codegen_test.cc) in a
// child process whose environment has KILN_TEST_ONLY_GRID_KERNELS=run-on-a-host-grid: every
// kernel compile_elementwise returns then runs its subgraph's grid kernel, the IR CUDA's entry
// kernels call, over a host grid of fewer threads than items (never the split reductions).
// Nothing in Kiln sets the variable. Read once per process.
bool grid_kernels_for_tests();

class FusedKernel final : public CompiledFusion {
 public:
  FusedKernel() = default;

  const FusedSubgraph& subgraph() const override { return subgraph_; }
  const Shape& shape() const override { return shape_; }  // the iteration shape
  int64_t num_elements() const { return num_elements_; }
  // The [begin, end) domain the kernel is called over: output elements of a loop fusion, of the
  // reduced shape for a reduction fusion (each folds the reduced axes).
  int64_t parallel_size() const { return parallel_size_; }
  const TensorType& output_type(int i) const { return output_types_.at(i); }
  // Whether an output may share its buffer with an input of the same size: true for loop
  // fusions (each iteration reads and writes only its own element), false with reductions (a
  // column reduction initialises its output row before reading the inputs).
  // (A mapped or piece input reads other elements than the one written: an output may share
  // the buffer of a plain input only.)
  bool in_place_safe() const override { return !subgraph_.has_reductions(); }
  KernelFn fn() const { return fn_; }
  double compile_ms() const { return compile_ms_; }  // emit + optimise + JIT
  const std::shared_ptr<void>& jit_owner() const { return jit_; }  // owns fn()'s code
  bool vectorizable_loop() const { return contiguous_; }  // the flat (non-broadcast) loop

  // Runs over the thread pool. Inputs must match the subgraph's dtypes and shapes. Outputs are
  // resized to subgraph().outputs; an output that is undefined or not of output_type(i) is
  // allocated, otherwise written in place.
  void run(const std::vector<Tensor>& inputs, std::vector<Tensor>* outputs) const override;
  std::vector<Tensor> run(const std::vector<Tensor>& inputs) const;

  // Reduction kernels: `kernel_part` folds only positions [lo, hi) of the outermost reduced
  // (collapsed) dimension, of size split_size(). run() splits a reduction with few outputs and
  // much work into chunks of it (by shape only, so results do not depend on the thread count),
  // folds each into a scratch copy of the reduced outputs, unrounded (`partial` nonzero: of
  // accumulator_dtype), and combines them in chunk order before rounding.
  using PartFn = void (*)(void** inputs, void** outputs, int64_t begin, int64_t end, int64_t lo,
                          int64_t hi, int64_t partial);
  PartFn part_fn() const { return part_fn_; }
  int64_t split_size() const { return split_size_; }
  // How many chunks run() splits the reduced range into (1: none).
  int64_t split_chunks() const;

  // Internal (compile_elementwise).
  FusedKernel(FusedSubgraph sg, Shape shape, KernelFn fn, std::shared_ptr<void> jit,
              bool contiguous, double compile_ms);
  void run_split(int64_t chunks, const std::vector<void*>& in_ptrs,
                 const std::vector<void*>& out_ptrs, std::vector<Tensor>* outputs) const;
  void set_split(PartFn fn, int64_t size) {
    part_fn_ = fn;
    split_size_ = size;
  }
  // TEST ONLY (grid_kernels_for_tests): run() calls this grid kernel over a host grid.
  void set_grid(GridFn fn) { grid_fn_ = fn; }
  bool runs_on_grid() const { return grid_fn_ != nullptr; }
  GridFn grid_fn() const { return grid_fn_; }

 private:
  FusedSubgraph subgraph_;
  Shape shape_;
  int64_t num_elements_ = 0;
  int64_t parallel_size_ = 0;
  int64_t work_per_item_ = 1;  // iteration points per parallel item
  int64_t min_grain_ = 1;      // column reductions: whole runs of columns per task
  PartFn part_fn_ = nullptr;
  int64_t split_size_ = 1;
  GridFn grid_fn_ = nullptr;
  void run_grid(void** ins, void** outs) const;
  std::vector<TensorType> output_types_;
  KernelFn fn_ = nullptr;
  std::shared_ptr<void> jit_;  // owns the JIT'd code
  bool contiguous_ = false;
  double compile_ms_ = 0;
};

// Emits the subgraph as LLVM IR (one loop, elemental style, its rows split where pieces of
// concatenate or pad begin and end; with reductions, a row reduction
// vectorised along the reduced axes or a column reduction vectorised across the kept inner
// axis), optimises it at O3 for the host CPU and JITs it. With KILN_DUMP=<dir>, writes
// <name>_<n>.ll (before optimisation), .opt.ll (after) and .s (the host assembly) into the
// compile's dump directory, or outside a compile a new one of its own (compiler/dump.h).
// Throws kiln::Error.
FusedKernel compile_elementwise(const FusedSubgraph& sg);
// Several subgraphs in one LLVM module: one optimisation pipeline and one JIT session for all
// of them (their code lives as long as any of the returned kernels). Each kernel's
// compile_ms() is its share of the total. Throws kiln::Error if any fails.
std::vector<FusedKernel> compile_elementwise(const std::vector<FusedSubgraph>& sgs);

// For testing the CUDA backend's grid mapping without a GPU: each subgraph's grid kernel
// (compiler/llvm_ir/grid_kernel.h, the IR CUDA's entry kernels call with the GPU's block and
// thread ids) compiled for the host CPU, to be called with ids from loops. Their code lives as
// long as `owner`. Throws kiln::Error.
struct HostGridKernels {
  std::vector<GridFn> fns;
  std::shared_ptr<void> owner;
};
HostGridKernels compile_grid_kernels_for_host(const std::vector<FusedSubgraph>& sgs);
// The same for the device's scatter_add loop (compiler/llvm_ir/scatter_kernel.h): one grid.
HostGridKernels compile_scatter_add_for_host(const DeviceScatterAdd& s);

}  // namespace kiln::compiler::cpu
