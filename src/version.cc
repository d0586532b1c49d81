// kiln::version() and kiln::build_info().
#include "kiln/version.h"

#include "compiler/cpu/host_cpu.h"
#include "kiln/device.h"
#include "runtime/thread_pool.h"
#include "src/core/cpu_isa.h"

namespace kiln {

std::string version() { return KILN_VERSION_STRING; }

std::string build_info() {
  return "Kiln " + version() + " (LLVM " + compiler::llvm_version() + ", host CPU " +
         compiler::host_cpu_name() + " with " + std::to_string(compiler::host_vector_width_bits()) +
         "-bit vectors, kernels " + cpu::isa_name(cpu::active_isa()) + ", " + std::to_string(runtime::ThreadPool::global().num_threads()) +
         " threads, CUDA devices: " + std::to_string(cuda_device_count()) + ")";
}

}  // namespace kiln
