// LLVM's side of the CPU fused kernels, after the emitter (elemental_emitter.cc): the host's
// target machine, the O3 pipeline, KILN_DUMP's .ll/.opt.ll/.s files and the ORC LLJIT session.
#include "compiler/cpu/jit.h"

#include <llvm/ADT/StringMap.h>
#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/ThreadSafeModule.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/TargetParser/Host.h>
#include <llvm/Transforms/Utils/Cloning.h>

#include <atomic>
#include <cctype>
#include <fstream>
#include <mutex>

#include "compiler/dump.h"
#include "kiln/error.h"

namespace kiln::compiler::cpu {
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

std::string assembly(const llvm::Module& m, llvm::TargetMachine& tm) {
  std::unique_ptr<llvm::Module> clone = llvm::CloneModule(m);
  llvm::SmallString<4096> buf;
  llvm::raw_svector_ostream os(buf);
  llvm::legacy::PassManager pm;
  if (tm.addPassesToEmitFile(pm, os, nullptr, llvm::CGFT_AssemblyFile)) return "; no assembly\n";
  pm.run(*clone);
  return std::string(buf.str());
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
}

}  // namespace

[[noreturn]] void internal_error(const std::string& what, llvm::Error err) {
  throw Error(ErrorCode::kInternal, "cpu codegen: " + what + ": " + llvm::toString(std::move(err)));
}

llvm::orc::JITTargetMachineBuilder host_target() {
  static std::once_flag init;
  std::call_once(init, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
  });

  auto jtmb = unwrap(llvm::orc::JITTargetMachineBuilder::detectHost(), "detecting the host");
  jtmb.setCodeGenOptLevel(llvm::CodeGenOpt::Aggressive);
  return jtmb;
}

void tune_for_host(llvm::Module& module, llvm::TargetMachine& tm) {
  llvm::StringMap<bool> features;
  bool avx512 = llvm::sys::getHostCPUFeatures(features) && features.lookup("avx512f");
  for (llvm::Function& fn : module) {
    if (fn.isDeclaration()) continue;
    fn.addFnAttr("target-cpu", tm.getTargetCPU());
    fn.addFnAttr("target-features", tm.getTargetFeatureString());
    if (avx512) fn.addFnAttr("prefer-vector-width", "512");
  }
}

void optimize_and_dump(const std::string& name, llvm::Module& module, llvm::TargetMachine& tm) {
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
    write_file(dump_base + ".s", assembly(module, tm));
  }
}

std::unique_ptr<llvm::orc::LLJIT> jit_module(llvm::orc::JITTargetMachineBuilder jtmb,
                                             std::unique_ptr<llvm::Module> module,
                                             std::unique_ptr<llvm::LLVMContext> ctx) {
  auto jit = unwrap(llvm::orc::LLJITBuilder().setJITTargetMachineBuilder(std::move(jtmb)).create(),
                    "creating the JIT");
  jit->getMainJITDylib().addGenerator(
      unwrap(llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(
                 jit->getDataLayout().getGlobalPrefix()),
             "resolving process symbols"));
  if (llvm::Error e =
          jit->addIRModule(llvm::orc::ThreadSafeModule(std::move(module), std::move(ctx))))
    internal_error("adding the module", std::move(e));
  return jit;
}

}  // namespace kiln::compiler::cpu
