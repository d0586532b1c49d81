// LLVM's side of the CPU fused kernels: the host's target machine and the ORC LLJIT session.
// Internal to compiler/cpu (LLVM types); jit.cc also holds compile_elementwise (fused_kernel.h).
#pragma once

#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/Error.h>
#include <llvm/Target/TargetMachine.h>

#include <memory>
#include <string>

namespace kiln::compiler::cpu {

[[noreturn]] void internal_error(const std::string& what, llvm::Error err);

template <class T>
T unwrap(llvm::Expected<T> e, const std::string& what) {
  if (!e) internal_error(what, e.takeError());
  return std::move(*e);
}

// The host CPU's JIT target machine builder at the aggressive codegen level (initialises
// LLVM's native target once per process).
llvm::orc::JITTargetMachineBuilder host_target();

// Tunes every function of `module` for the host CPU (512-bit vectors where AVX-512 exists).
void tune_for_host(llvm::Module& module, llvm::TargetMachine& tm);

// A JIT session holding `module`, resolving other symbols (libm) from the process.
std::unique_ptr<llvm::orc::LLJIT> jit_module(llvm::orc::JITTargetMachineBuilder jtmb,
                                             std::unique_ptr<llvm::Module> module,
                                             std::unique_ptr<llvm::LLVMContext> ctx);

}  // namespace kiln::compiler::cpu
