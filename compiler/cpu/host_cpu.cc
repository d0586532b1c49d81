// Host CPU detection through LLVM.
#include "compiler/cpu/host_cpu.h"

#include <llvm/ADT/StringMap.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/TargetParser/Host.h>

namespace kiln::compiler {

std::string llvm_version() { return LLVM_VERSION_STRING; }

std::string host_cpu_name() { return llvm::sys::getHostCPUName().str(); }

int host_vector_width_bits() {
  llvm::StringMap<bool> features;
  if (!llvm::sys::getHostCPUFeatures(features)) return 128;
  if (features.lookup("avx512f")) return 512;
  if (features.lookup("avx2") || features.lookup("avx")) return 256;
  return 128;
}

}  // namespace kiln::compiler
