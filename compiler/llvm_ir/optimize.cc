// Optimising a backend's module and dumping it (optimize.h).
#include "compiler/llvm_ir/optimize.h"

#include <llvm/IR/LegacyPassManager.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/Transforms/Utils/Cloning.h>

#include <atomic>
#include <cctype>
#include <fstream>

#include "compiler/dump.h"

namespace kiln::compiler::llvm_ir {
namespace {

void optimize(llvm::Module& m, llvm::TargetMachine& tm) {
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PipelineTuningOptions pto;
  pto.LoopVectorization = true;
  pto.SLPVectorization = true;
  llvm::PassBuilder pb(&tm, pto);
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3).run(m, mam);
}

std::string module_text(const llvm::Module& m) {
  std::string s;
  llvm::raw_string_ostream os(s);
  m.print(os, nullptr);
  return os.str();
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
}

}  // namespace

std::string assembly(const llvm::Module& m, llvm::TargetMachine& tm) {
  std::unique_ptr<llvm::Module> clone = llvm::CloneModule(m);
  llvm::SmallString<4096> buf;
  llvm::raw_svector_ostream os(buf);
  llvm::legacy::PassManager pm;
  if (tm.addPassesToEmitFile(pm, os, nullptr, llvm::CGFT_AssemblyFile)) return "; no assembly\n";
  pm.run(*clone);
  return std::string(buf.str());
}

void optimize_and_dump(const std::string& name, llvm::Module& module, llvm::TargetMachine& tm,
                       const std::string& assembly_suffix) {
  const std::string dump_dir = dump_dir_for(name);  // the compile's, or one of its own
  std::string dump_base;
  if (!dump_dir.empty()) {
    static std::atomic<int> counter{0};
    std::string file = name;
    for (char& c : file)
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') c = '_';
    dump_base = dump_dir + "/" + file + "_" + std::to_string(counter++);
    write_file(dump_base + ".ll", module_text(module));
  }
  optimize(module, tm);
  if (!dump_base.empty()) {
    write_file(dump_base + ".opt.ll", module_text(module));
    write_file(dump_base + assembly_suffix, assembly(module, tm));
  }
}

}  // namespace kiln::compiler::llvm_ir
