// The CUDA code generator for loop and reduction (input) fusions: the elemental emitter's loop
// (compiler/llvm_ir/elemental_emitter.h), called by a grid-stride kernel
// (compiler/llvm_ir/grid_kernel.h) whose block and thread ids are the GPU's, lowered through
// LLVM's NVPTX backend to PTX for the driver to load. Transcendentals the CPU takes from the C
// library come from CUDA's libdevice. Needs no GPU: PTX is text, and ptxas checks it here.
// No LLVM types appear here.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "compiler/device_backend.h"
#include "compiler/fused_subgraph.h"
#include "compiler/passes/fusion.h"

namespace kiln::compiler::cuda {

// What CUDA's generated loops compute (the elemental emitter's answers); it has no fused dot or
// convolution yet, so the epilogue fusion pass creates none for it.
const FusionTarget& fusion_target();

// $KILN_PTX_CACHE_DIR, or "" (no cache): the on-disk PTX cache is opt-in, as XLA's and JAX's
// persistent caches are.
std::string default_ptx_cache_dir();

struct PtxOptions {
  int sm = 90;             // the compute capability: sm_90 (Hopper)
  std::string libdevice;   // libdevice.10.bc; "": find_libdevice()
  // Where compiled modules are kept across processes, one file per module named by a hash of
  // its key (every subgraph's structural_key with shapes, the sm, LLVM's and Kiln's versions,
  // this libkiln's path, size and time, libdevice's path and size); a compile that dumps
  // (KILN_DUMP) neither reads it nor is served from it, but compiles afresh and writes it; the file holds the key, so a collision or a damaged file is a
  // miss, and a miss is written whole, then renamed into place. "": none. (The driver keeps
  // its own cache of the machine code it builds from PTX.)
  std::string cache_dir = default_ptx_cache_dir();
};

// One kernel of a module:
//   .entry <entry>(.param .u64 in_0, ..., .param .u64 in_<n-1>, .param .u64 out_0, ...)
// one global pointer per input, then per output (device addresses of row-major buffers of the
// subgraph's input buffer shapes and output types). Any grid covers all `items`; launch_dims
// gives a good one.
struct PtxKernel {
  std::string entry;
  int64_t items = 0;
  int num_inputs = 0;
  int num_outputs = 0;
  std::vector<TensorType> inputs;   // each input buffer's dtype and shape
  std::vector<TensorType> outputs;
};

struct PtxModule {
  std::string name;
  std::string ptx;  // PTX ISA 7.8 for sm_<options.sm>
  std::vector<PtxKernel> kernels;
  double compile_ms = 0;  // emit + link libdevice + optimise + PTX (or reading the cache)
  bool from_cache = false;
};

// Compiles `sgs` into one PTX module, one entry each. Each subgraph is validated against
// fusion_target(). With KILN_DUMP=<dir>, writes <name>_<n>.ll, .opt.ll and .ptx like the CPU's
// kernels. Throws kiln::Error: kInvalidArgument / kUnimplemented for a subgraph the target
// refuses, kUnavailable when a kernel needs libdevice and none is found.
PtxModule compile_ptx(const std::vector<FusedSubgraph>& sgs, const PtxOptions& options = {});

// The device's scatter_add loop for `s` (compiler/llvm_ir/scatter_kernel.h) as one kernel:
// inputs updates and the row plan (at its longest in PtxKernel's types), output y holding x;
// `items` covers the most rows a plan can name.
// Not cached: it is one small loop. Throws kiln::Error (kUnimplemented for a dtype the loop
// does not add in).
PtxModule compile_scatter_add_ptx(const DeviceScatterAdd& s, const PtxOptions& options = {});

// libdevice.10.bc: $KILN_LIBDEVICE, else under $CUDA_HOME or /usr/local/cuda (nvvm/libdevice/);
// "" when none exists.
std::string find_libdevice();

// A grid for `items`: 256 threads a block, and blocks enough for one item a thread up to 16
// per multiprocessor of a large GPU (132 SMs); beyond that the grid-stride loop takes the rest.
struct LaunchDims {
  int64_t blocks = 1;
  int64_t threads = 256;
};
LaunchDims launch_dims(int64_t items);

// A PtxModule loaded on device 0 by the driver (which JITs the PTX for the GPU). Until device
// tensors exist, run() stages host tensors through device buffers: copies the inputs in,
// launches the kernel on launch_dims(items) and waits, copies the outputs back.
class LoadedPtx {
 public:
  // Throws kiln::Error: kUnavailable without a driver or a GPU (saying which), kInternal with
  // the driver's JIT log when the PTX does not load.
  static std::shared_ptr<LoadedPtx> load(PtxModule module);
  ~LoadedPtx();
  LoadedPtx(const LoadedPtx&) = delete;
  LoadedPtx& operator=(const LoadedPtx&) = delete;

  const PtxModule& module() const { return module_; }
  // Kernel `k` on `inputs` (host tensors of its input types); throws kiln::Error
  // (kInvalidArgument naming the input and the types; kInternal for a driver error).
  std::vector<Tensor> run(size_t k, const std::vector<Tensor>& inputs) const;
  // Kernel `k` on device pointers (one per input buffer, then per output, of its types),
  // queued on the default stream. Throws kiln::Error (kInternal for a driver error).
  void launch_on_device(size_t k, void* const* inputs, void* const* outputs) const;
  // For benchmarks: kernel `k`'s seconds a run, the mean of `reps` launches on device-resident
  // copies of `inputs` after one warm-up (the copies are not timed).
  double seconds_per_run(size_t k, const std::vector<Tensor>& inputs, int reps) const;

 private:
  LoadedPtx() = default;
  // Checks kernel k's inputs, copies them into `buffers` (a DeviceBuffers, loaded_ptx.cc) with
  // space for the outputs after them, and returns the kernel's parameter values.
  std::vector<unsigned long long> stage(size_t k, const std::vector<Tensor>& inputs,  // NOLINT
                                        void* buffers) const;
  void launch(size_t k, std::vector<unsigned long long>& args) const;  // NOLINT: CUdeviceptr
  PtxModule module_;
  void* handle_ = nullptr;         // CUmodule
  std::vector<void*> functions_;   // CUfunction per kernel
};

// For benchmarks: seconds for a device-to-device copy of `bytes`, the mean of `reps` after one
// warm-up; the bandwidth a memory-bound kernel is measured against.
double device_copy_seconds(size_t bytes, int reps);

}  // namespace kiln::compiler::cuda
