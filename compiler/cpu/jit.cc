// LLVM's side of the CPU fused kernels: compile_elementwise has the elemental emitter
// (compiler/llvm_ir/elemental_emitter.h) write a module, tunes it for the host's target machine,
// optimises it (compiler/llvm_ir/optimize.h) and JITs it with ORC LLJIT.
#include "compiler/cpu/jit.h"

#include <llvm/ADT/StringMap.h>
#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/ThreadSafeModule.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/TargetParser/Host.h>

#include <chrono>
#include <functional>
#include <mutex>

#include "compiler/cpu/fused_kernel.h"
#include "compiler/cpu/fusion_target.h"
#include "compiler/llvm_ir/elemental_emitter.h"
#include "compiler/llvm_ir/grid_kernel.h"
#include "compiler/llvm_ir/loop_target.h"
#include "compiler/llvm_ir/optimize.h"
#include "compiler/llvm_ir/scatter_kernel.h"
#include "kiln/error.h"

namespace kiln::compiler::cpu {

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

namespace {

// An empty module for the host's JIT, with its target machine.
struct HostModule {
  llvm::orc::JITTargetMachineBuilder jtmb;
  std::unique_ptr<llvm::TargetMachine> tm;
  std::unique_ptr<llvm::LLVMContext> ctx;
  std::unique_ptr<llvm::Module> module;
};

HostModule new_host_module(const std::string& name) {
  HostModule h{host_target(), nullptr, std::make_unique<llvm::LLVMContext>(), nullptr};
  h.tm = unwrap(h.jtmb.createTargetMachine(), "creating the target machine");
  h.module = std::make_unique<llvm::Module>(name, *h.ctx);
  h.module->setDataLayout(h.tm->createDataLayout());
  h.module->setTargetTriple(h.tm->getTargetTriple().str());
  return h;
}

// Tunes the emitted module for the host, verifies it, optimises it (and dumps it under
// KILN_DUMP) and JITs it.
std::unique_ptr<llvm::orc::LLJIT> optimize_and_jit(HostModule h, const std::string& name) {
  tune_for_host(*h.module, *h.tm);
  std::string err;
  llvm::raw_string_ostream err_os(err);
  if (llvm::verifyModule(*h.module, &err_os))
    throw Error(ErrorCode::kInternal, "cpu codegen (" + name + "): invalid IR: " + err_os.str());
  llvm_ir::optimize_and_dump(name, *h.module, *h.tm, ".s");
  return jit_module(std::move(h.jtmb), std::move(h.module), std::move(h.ctx));
}

}  // namespace

std::vector<FusedKernel> compile_elementwise(const std::vector<FusedSubgraph>& sgs) {
  auto t0 = std::chrono::steady_clock::now();
  if (sgs.empty()) return {};
  std::vector<Shape> shapes;
  std::vector<char> flats;
  for (const FusedSubgraph& sg : sgs) {
    sg.validate(fusion_target());
    shapes.push_back(sg.iteration_shape());
    const Shape& shape = shapes.back();
    flats.push_back(llvm_ir::flat_loop_for(sg, shape));
  }

  const std::string& name = sgs.size() == 1 ? sgs[0].name : sgs[0].name + "_batch";
  HostModule host = new_host_module(name);
  llvm::Module* module = host.module.get();

  // One module for every kernel: one optimisation pipeline and one JIT session in all.
  std::vector<int64_t> split_sizes;
  auto prefix = [&](size_t i) {
    std::string p;
    if (sgs.size() > 1) p.append("k").append(std::to_string(i)).append("_");
    return p;
  };
  for (size_t i = 0; i < sgs.size(); ++i)
    split_sizes.push_back(llvm_ir::emit_loop_kernel(sgs[i], shapes[i], flats[i], *module, prefix(i)));
  const bool grids = grid_kernels_for_tests();
  if (grids)
    for (size_t i = 0; i < sgs.size(); ++i)
      llvm_ir::emit_grid_kernel(sgs[i], *module, "grid" + std::to_string(i) + "_");
  auto jit = optimize_and_jit(std::move(host), name);
  std::vector<KernelFn> fns;
  std::vector<FusedKernel::PartFn> parts;
  for (size_t i = 0; i < sgs.size(); ++i) {
    fns.push_back(unwrap(jit->lookup(prefix(i) + "kernel"), "compiling the kernel").toPtr<KernelFn>());
    parts.push_back(sgs[i].has_reductions()
                        ? unwrap(jit->lookup(prefix(i) + "kernel_part"), "compiling the kernel")
                              .toPtr<FusedKernel::PartFn>()
                        : nullptr);
  }
  std::vector<GridFn> grid_fns;
  for (size_t i = 0; grids && i < sgs.size(); ++i)
    grid_fns.push_back(unwrap(jit->lookup("grid" + std::to_string(i) + "_grid"),
                              "compiling the grid kernel")
                           .toPtr<GridFn>());
  std::shared_ptr<void> owner(jit.release(), [](void* p) { delete static_cast<llvm::orc::LLJIT*>(p); });
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::vector<FusedKernel> kernels;
  for (size_t i = 0; i < sgs.size(); ++i) {
    kernels.emplace_back(sgs[i], shapes[i], fns[i], owner, flats[i],
                         ms / static_cast<double>(sgs.size()));
    kernels.back().set_split(parts[i], split_sizes[i]);
    if (grids) kernels.back().set_grid(grid_fns[i]);
  }
  return kernels;
}

namespace {

// `count` grids `emit` writes into one module (grid i as "k<i>_grid"), JIT'd for the host.
HostGridKernels jit_grids(
    const std::string& name, size_t count,
    const std::function<void(llvm::Module&, size_t, const std::string&)>& emit) {
  HostGridKernels out;
  HostModule host = new_host_module(name);
  for (size_t i = 0; i < count; ++i) emit(*host.module, i, "k" + std::to_string(i) + "_");
  auto jit = optimize_and_jit(std::move(host), name);
  for (size_t i = 0; i < count; ++i)
    out.fns.push_back(unwrap(jit->lookup("k" + std::to_string(i) + "_grid"), "compiling the kernel")
                          .toPtr<GridFn>());
  out.owner.reset(jit.release(), [](void* p) { delete static_cast<llvm::orc::LLJIT*>(p); });
  return out;
}

}  // namespace

HostGridKernels compile_grid_kernels_for_host(const std::vector<FusedSubgraph>& sgs) {
  if (sgs.empty()) return {};
  for (const FusedSubgraph& sg : sgs) sg.validate(fusion_target());
  return jit_grids(sgs[0].name + "_grid", sgs.size(),
                   [&](llvm::Module& m, size_t i, const std::string& prefix) {
                     llvm_ir::emit_grid_kernel(sgs[i], m, prefix);
                   });
}

HostGridKernels compile_scatter_add_for_host(const DeviceScatterAdd& s) {
  return jit_grids("scatter_add_grid", 1, [&](llvm::Module& m, size_t, const std::string& prefix) {
    llvm_ir::emit_scatter_add_grid(s, m, prefix);
  });
}

FusedKernel compile_elementwise(const FusedSubgraph& sg) {
  return std::move(compile_elementwise(std::vector<FusedSubgraph>{sg})[0]);
}

}  // namespace kiln::compiler::cpu
