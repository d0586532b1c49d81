// A backend's module after emission: the O3 pipeline for its target machine, and KILN_DUMP's
// files. Internal to the compiler's backends (LLVM types).
#pragma once

#include <string>

namespace llvm {
class Module;
class TargetMachine;
}  // namespace llvm

namespace kiln::compiler::llvm_ir {

// Optimises `module` at O3 for `tm`; under KILN_DUMP also writes its IR before (<name>_<n>.ll)
// and after (.opt.ll), and its assembly (<name>_<n><assembly_suffix>: ".s" for the host, ".ptx"),
// into the compile's dump directory, or outside a compile a new one of its own
// (compiler/dump.h).
void optimize_and_dump(const std::string& name, llvm::Module& module, llvm::TargetMachine& tm,
                       const std::string& assembly_suffix);

// `module`'s assembly for `tm` (x86 assembly, PTX); the module is left as it was.
std::string assembly(const llvm::Module& module, llvm::TargetMachine& tm);

}  // namespace kiln::compiler::llvm_ir
