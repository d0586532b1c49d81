// TEST ONLY: a GPU emulated on the host, so that the device executable (compiler/run_device.cc)
// is tested without one. Its memory is host memory the program must still copy its values to
// and from (each allocation starts as a poison pattern, and so does a device program's host
// arena at each run, so a value read on the wrong side, or before its copy, gives wrong
// results); its kernels are the CUDA backend's grid kernels
// (compiler/llvm_ir/grid_kernel.h) JIT-compiled for the host and run over a host grid of
// fewer threads than items; its dot, convolutions and pooling are the CPU's kernels. Its fusion target is CUDA's (the
// loops alone). Used by compile_for_device in tests and by KILN_TEST_ONLY_DEVICE=emulated-gpu.
#pragma once

#include <cstdint>
#include <memory>

#include "compiler/device_backend.h"

namespace kiln::compiler::cpu {

std::shared_ptr<const DeviceBackend> emulated_gpu();

// What the emulated GPU has done in this process, for tests.
struct EmulatedGpuCounts {
  int64_t uploads = 0, downloads = 0;   // copies with bytes
  int64_t upload_bytes = 0, download_bytes = 0;
  int64_t copies = 0, copy_bytes = 0;   // within the device's memory
  int64_t launches = 0, dots = 0, convs = 0, pools = 0;
  int64_t live_allocations = 0;         // allocated and not yet freed
};
EmulatedGpuCounts emulated_gpu_counts();

}  // namespace kiln::compiler::cpu
