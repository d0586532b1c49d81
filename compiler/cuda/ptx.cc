// LLVM's side of the CUDA fused kernels (ptx.h): the NVPTX target machine, the entry kernels,
// libdevice, the PTX and its disk cache. One of the few files with LLVM headers
// (docs/architecture.md lists them).
#include "compiler/cuda/ptx.h"

#include <dlfcn.h>
#include <llvm/Bitcode/BitcodeReader.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/IR/DiagnosticInfo.h>
#include <llvm/IR/DiagnosticPrinter.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/IntrinsicsNVPTX.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Linker/Linker.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/Target/TargetOptions.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>

#include "compiler/dump.h"
#include "compiler/llvm_ir/grid_kernel.h"
#include "compiler/llvm_ir/loop_target.h"
#include "compiler/llvm_ir/optimize.h"
#include "compiler/llvm_ir/scatter_kernel.h"
#include "kiln/error.h"
#include "kiln/version.h"

extern "C" {
void LLVMInitializeNVPTXTargetInfo();
void LLVMInitializeNVPTXTarget();
void LLVMInitializeNVPTXTargetMC();
void LLVMInitializeNVPTXAsmPrinter();
}

namespace kiln::compiler::cuda {
namespace {

constexpr const char* kTriple = "nvptx64-nvidia-cuda";

[[noreturn]] void fail(const std::string& name, const std::string& msg,
                       ErrorCode code = ErrorCode::kInternal) {
  throw Error(code, "cuda codegen (" + name + "): " + msg);
}

std::unique_ptr<llvm::TargetMachine> nvptx_machine(int sm, const std::string& name) {
  static std::once_flag init;
  std::call_once(init, [] {
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
  });
  // LLVM 16's NVPTX reaches sm_90 and PTX ISA 7.8 (../TOOLCHAIN.md).
  if (sm < 52 || sm > 90)
    fail(name, "compute capability sm_" + std::to_string(sm) + " is outside sm_52..sm_90",
         ErrorCode::kInvalidArgument);
  std::string err;
  const llvm::Target* target = llvm::TargetRegistry::lookupTarget(kTriple, err);
  if (!target) fail(name, "no NVPTX target in this LLVM: " + err, ErrorCode::kUnavailable);
  // The default options keep a*b+c as mul.rn and add.rn (no contraction into an fma, which
  // ptxas may not do either with .rn), IEEE division and square root, and denormals: the
  // arithmetic of the CPU's kernels and the reference interpreter.
  llvm::TargetOptions options;
  std::unique_ptr<llvm::TargetMachine> tm(target->createTargetMachine(
      kTriple, "sm_" + std::to_string(sm), "+ptx78", options, std::nullopt, std::nullopt,
      llvm::CodeGenOpt::Aggressive));
  if (!tm) fail(name, "creating the NVPTX target machine for sm_" + std::to_string(sm));
  return tm;
}

// The bytes of libdevice, read once per process and path.
const std::string& libdevice_bytes(const std::string& path, const std::string& name) {
  static std::mutex mu;
  static std::map<std::string, std::string> files;
  std::lock_guard<std::mutex> lock(mu);
  auto it = files.find(path);
  if (it == files.end()) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    if (!f || ss.str().empty())
      fail(name, "cannot read libdevice from " + path, ErrorCode::kUnavailable);
    it = files.emplace(path, ss.str()).first;
  }
  return it->second;  // never replaced: the reference stays valid
}

// The C library's math functions the elemental emitter calls become libdevice's (__nv_sinf for
// sinf), and so do the intrinsics NVPTX has no instruction for (sin, cos, pow) and floating
// `frem` (which NVPTX would lower to x - trunc(x / y) * y: not fmod's exact result, nor its
// sign of zero). Returns whether any was found.
bool use_libdevice(llvm::Module& m) {
  bool any = false;
  std::vector<llvm::Instruction*> frems;
  for (llvm::Function& f : m)
    for (llvm::BasicBlock& bb : f)
      for (llvm::Instruction& inst : bb)
        if (inst.getOpcode() == llvm::Instruction::FRem) frems.push_back(&inst);
  for (llvm::Instruction* inst : frems) {
    llvm::Type* t = inst->getType();
    llvm::FunctionCallee fmod = m.getOrInsertFunction(
        t->isFloatTy() ? "__nv_fmodf" : "__nv_fmod", llvm::FunctionType::get(t, {t, t}, false));
    llvm::IRBuilder<> b(inst);
    llvm::Value* r = b.CreateCall(fmod, {inst->getOperand(0), inst->getOperand(1)});
    inst->replaceAllUsesWith(r);
    inst->eraseFromParent();
    any = true;
  }
  std::vector<llvm::Function*> decls;
  for (llvm::Function& f : m)
    if (f.isDeclaration()) decls.push_back(&f);
  for (llvm::Function* f : decls) {
    if (f->getName().startswith("__nv_")) {
      any = true;
      continue;
    }
    if (!f->isIntrinsic()) {
      f->setName("__nv_" + f->getName().str());
      any = true;
      continue;
    }
    const char* base = nullptr;
    switch (f->getIntrinsicID()) {
      case llvm::Intrinsic::sin: base = "sin"; break;
      case llvm::Intrinsic::cos: base = "cos"; break;
      case llvm::Intrinsic::pow: base = "pow"; break;
      default: break;
    }
    if (!base) continue;
    llvm::Type* t = f->getReturnType();
    std::string nv = std::string("__nv_") + base + (t->isFloatTy() ? "f" : "");
    llvm::FunctionCallee callee = m.getOrInsertFunction(nv, f->getFunctionType());
    std::vector<llvm::CallInst*> calls;
    for (llvm::User* u : f->users())
      if (auto* call = llvm::dyn_cast<llvm::CallInst>(u)) calls.push_back(call);
    for (llvm::CallInst* call : calls) {
      llvm::IRBuilder<> b(call);
      std::vector<llvm::Value*> args(call->arg_begin(), call->arg_end());
      llvm::CallInst* repl = b.CreateCall(callee, args);
      repl->copyFastMathFlags(call);
      call->replaceAllUsesWith(repl);
      call->eraseFromParent();
    }
    f->eraseFromParent();
    any = true;
  }
  return any;
}

void link_libdevice(llvm::Module& m, const std::string& path, const std::string& name,
                    const std::string& diagnostics) {
  const std::string& bytes = libdevice_bytes(path, name);
  llvm::MemoryBufferRef ref(bytes, path);
  auto lib = llvm::parseBitcodeFile(ref, m.getContext());
  if (!lib) fail(name, "parsing libdevice " + path + ": " + llvm::toString(lib.takeError()));
  (*lib)->setTargetTriple(m.getTargetTriple());
  (*lib)->setDataLayout(m.getDataLayout());
  if (llvm::Linker::linkModules(m, std::move(*lib), llvm::Linker::Flags::LinkOnlyNeeded))
    fail(name, "linking libdevice " + path + ": " + diagnostics);
  // libdevice asks __nvvm_reflect("__CUDA_FTZ"): no flush to zero, as on the CPU.
  m.addModuleFlag(llvm::Module::Override, "nvvm-reflect-ftz", uint32_t{0});
}

// `entry`(ptr in_0, ..., ptr out_0, ...): the kernel the driver launches, calling the grid
// loop with the block and thread ids of the GPU's special registers.
void emit_entry(llvm::Module& m, const std::string& entry, const std::string& prefix, int nin,
                int nout) {
  llvm::LLVMContext& ctx = m.getContext();
  llvm::IRBuilder<> b(ctx);
  llvm::Type* ptr = b.getPtrTy();
  std::vector<llvm::Type*> params(nin + nout, ptr);
  auto* fty = llvm::FunctionType::get(b.getVoidTy(), params, false);
  llvm::Function* fn = llvm::Function::Create(fty, llvm::Function::ExternalLinkage, entry, m);
  fn->setCallingConv(llvm::CallingConv::PTX_Kernel);
  fn->addFnAttr(llvm::Attribute::NoUnwind);
  b.SetInsertPoint(llvm::BasicBlock::Create(ctx, "entry", fn));
  auto array = [&](int first, int count) {
    llvm::Value* a = b.CreateAlloca(ptr, b.getInt32(std::max(count, 1)));
    for (int i = 0; i < count; ++i)
      b.CreateStore(fn->getArg(first + i), b.CreateConstGEP1_64(ptr, a, i));
    return a;
  };
  llvm::Value* ins = array(0, nin);
  llvm::Value* outs = array(nin, nout);
  auto sreg = [&](llvm::Intrinsic::ID id) {
    return b.CreateZExt(b.CreateIntrinsic(id, {}, {}), b.getInt64Ty());
  };
  llvm::Function* grid = m.getFunction(prefix + "grid");
  grid->setLinkage(llvm::Function::InternalLinkage);
  b.CreateCall(grid, {ins, outs, sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_x),
                      sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_ntid_x),
                      sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x),
                      sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_x)});
  b.CreateRetVoid();
  // LLVM 16's NVPTX also reads the kernel marker from nvvm.annotations.
  llvm::Metadata* md[] = {llvm::ValueAsMetadata::get(fn), llvm::MDString::get(ctx, "kernel"),
                          llvm::ValueAsMetadata::get(b.getInt32(1))};
  m.getOrInsertNamedMetadata("nvvm.annotations")->addOperand(llvm::MDNode::get(ctx, md));
}

// The PTX of a module `build` fills with kernels and their entries (emit_entry): libdevice
// linked in when a kernel calls it, the entries' callees internal, verified, optimised.
std::string module_ptx(const std::string& name, llvm::TargetMachine& tm, const PtxOptions& options,
                       const std::function<void(llvm::Module&)>& build) {
  llvm::LLVMContext ctx;
  // LLVM reports errors (the linker's, say) to the context, whose default handler exits the
  // process: collect them instead, and fail with them.
  std::string diagnostics;
  ctx.setDiagnosticHandlerCallBack(
      [](const llvm::DiagnosticInfo& info, void* sink) {
        if (info.getSeverity() != llvm::DS_Error) return;
        std::string text;
        llvm::raw_string_ostream os(text);
        llvm::DiagnosticPrinterRawOStream printer(os);
        info.print(printer);
        static_cast<std::string*>(sink)->append(os.str()).append("; ");
      },
      &diagnostics);
  auto module = std::make_unique<llvm::Module>(name, ctx);
  module->setDataLayout(tm.createDataLayout());
  module->setTargetTriple(kTriple);
  build(*module);
  if (use_libdevice(*module)) {
    std::string path = options.libdevice.empty() ? find_libdevice() : options.libdevice;
    if (path.empty())
      fail(name,
           "a kernel calls libdevice (a transcendental function), and no libdevice.10.bc was "
           "found: set KILN_LIBDEVICE or CUDA_HOME",
           ErrorCode::kUnavailable);
    link_libdevice(*module, path, name, diagnostics);
  }
  // Only the entries are seen from outside: the loops and libdevice's functions inline into
  // them and go.
  for (llvm::Function& f : *module)
    if (!f.isDeclaration() && f.getCallingConv() != llvm::CallingConv::PTX_Kernel)
      f.setLinkage(llvm::Function::InternalLinkage);

  std::string err;
  llvm::raw_string_ostream err_os(err);
  if (llvm::verifyModule(*module, &err_os)) fail(name, "invalid IR: " + err_os.str());
  llvm_ir::optimize_and_dump(name, *module, tm, ".ptx");
  std::string ptx = llvm_ir::assembly(*module, tm);
  if (!diagnostics.empty()) fail(name, "NVPTX: " + diagnostics);
  if (ptx.find(".entry") == std::string::npos) fail(name, "NVPTX emitted no kernel");
  return ptx;
}

// Kernel i's entry name, "k<i>". (Appended: GCC 12 warns, falsely, on "literal" + std::string.)
std::string kernel_entry(size_t i) { return std::string("k").append(std::to_string(i)); }

// ---- the on-disk cache ----

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

// This build of libkiln: its path, size and modification time, so that a rebuilt emitter never
// reads the PTX of the last one.
std::string library_identity() {
  static const std::string id = [] {
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&find_libdevice), &info) == 0 || !info.dli_fname)
      return std::string("unknown");
    std::error_code ec;
    const std::filesystem::path lib = std::filesystem::canonical(info.dli_fname, ec);
    const auto size = std::filesystem::file_size(lib, ec);
    const auto time = std::filesystem::last_write_time(lib, ec).time_since_epoch().count();
    return lib.string() + ":" + std::to_string(size) + ":" + std::to_string(time);
  }();
  return id;
}

std::string cache_key(const std::vector<FusedSubgraph>& sgs, const PtxOptions& options,
                      const std::string& libdevice) {
  std::string key = "kiln-ptx 2 kiln ";
  key += version();
  key += " ";
  key += library_identity();
  key += " llvm " LLVM_VERSION_STRING " sm_";
  key += std::to_string(options.sm);
  if (!libdevice.empty()) {
    std::error_code ec;
    key += " libdevice " + libdevice + ":" +
           std::to_string(std::filesystem::file_size(libdevice, ec));
  }
  for (const FusedSubgraph& sg : sgs)
    key.append("\n").append(llvm_ir::structural_key(sg, /*size_free_flat_loops=*/false));
  return key;
}

std::string cache_path(const std::string& dir, const std::string& key) {
  char name[32];
  std::snprintf(name, sizeof name, "%016llx.ptx", static_cast<unsigned long long>(fnv1a(key)));
  return dir + "/" + name;
}

// The PTX stored under `key`, or "" (absent, unreadable, another key, damaged). The file: a
// header line "<key length> <PTX length> <FNV-1a of the PTX, hex>", the key, then the PTX; a file
// cut short or altered anywhere fails the lengths or the checksum.
std::string cache_read(const std::string& path, const std::string& key) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return "";
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
  const size_t nl = text.find('\n');
  if (nl == std::string::npos) return "";
  unsigned long long key_size = 0, ptx_size = 0, sum = 0;
  int used = 0;
  if (std::sscanf(text.substr(0, nl).c_str(), "%llu %llu %llx%n", &key_size, &ptx_size, &sum,
                  &used) != 3 ||
      static_cast<size_t>(used) != nl)
    return "";
  if (text.size() != nl + 1 + key_size + ptx_size || text.compare(nl + 1, key_size, key) != 0)
    return "";
  std::string ptx = text.substr(nl + 1 + key_size);
  if (fnv1a(ptx) != sum) return "";
  return ptx;
}

void cache_write(const std::string& dir, const std::string& path, const std::string& key,
                 const std::string& ptx) {
  static std::atomic<uint64_t> counter{0};
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const std::string tmp =
      path + ".tmp" + std::to_string(getpid()) + "_" + std::to_string(counter++);
  {
    std::ofstream f(tmp, std::ios::binary);
    char header[64];
    std::snprintf(header, sizeof header, "%zu %zu %016llx\n", key.size(), ptx.size(),
                  static_cast<unsigned long long>(fnv1a(ptx)));
    f << header << key << ptx;
    if (!f.flush()) {
      f.close();
      std::filesystem::remove(tmp, ec);
      return;  // a cache that cannot be written is no cache
    }
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) std::filesystem::remove(tmp, ec);
}

}  // namespace

std::string default_ptx_cache_dir() {
  const char* dir = std::getenv("KILN_PTX_CACHE_DIR");
  return dir ? dir : "";
}

std::string find_libdevice() {
  std::vector<std::string> candidates;
  if (const char* p = std::getenv("KILN_LIBDEVICE"); p && *p) candidates.push_back(p);
  if (const char* home = std::getenv("CUDA_HOME"); home && *home)
    candidates.push_back(std::string(home) + "/nvvm/libdevice/libdevice.10.bc");
  candidates.push_back("/usr/local/cuda/nvvm/libdevice/libdevice.10.bc");
  for (const std::string& c : candidates)
    if (std::ifstream(c, std::ios::binary).good()) return c;
  return "";
}

LaunchDims launch_dims(int64_t items) {
  LaunchDims d;
  d.blocks = std::clamp<int64_t>((items + d.threads - 1) / d.threads, 1, 132 * 16);
  return d;
}

PtxModule compile_ptx(const std::vector<FusedSubgraph>& sgs, const PtxOptions& options) {
  auto t0 = std::chrono::steady_clock::now();
  PtxModule out;
  if (sgs.empty()) return out;
  out.name = sgs.size() == 1 ? sgs[0].name : sgs[0].name + "_batch";
  for (const FusedSubgraph& sg : sgs) sg.validate(fusion_target());
  std::unique_ptr<llvm::TargetMachine> tm = nvptx_machine(options.sm, out.name);
  for (size_t i = 0; i < sgs.size(); ++i) {
    PtxKernel k;
    k.entry = kernel_entry(i);
    k.items = llvm_ir::grid_items(sgs[i]);
    k.num_inputs = static_cast<int>(sgs[i].inputs.size());
    k.num_outputs = static_cast<int>(sgs[i].outputs.size());
    for (const FusedSubgraph::Input& in : sgs[i].inputs)
      k.inputs.push_back({in.buffer_dtype(), in.buffer_shape()});
    for (int o = 0; o < k.num_outputs; ++o) k.outputs.push_back(sgs[i].output_type(o));
    out.kernels.push_back(k);
  }
  auto elapsed_ms = [&] {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
        .count();
  };
  std::string key, path;
  // A compile that dumps writes its kernels afresh, as the CPU's kernel cache does.
  const char* dump_env = std::getenv("KILN_DUMP");
  const bool dumping = !current_dump_dir().empty() || (dump_env != nullptr && *dump_env != '\0');
  if (!options.cache_dir.empty() && !dumping) {
    std::string libdevice = options.libdevice.empty() ? find_libdevice() : options.libdevice;
    key = cache_key(sgs, options, libdevice);
    path = cache_path(options.cache_dir, key);
    out.ptx = cache_read(path, key);
    if (!out.ptx.empty()) {
      out.from_cache = true;
      out.compile_ms = elapsed_ms();
      return out;
    }
  }

  out.ptx = module_ptx(out.name, *tm, options, [&](llvm::Module& module) {
    for (size_t i = 0; i < sgs.size(); ++i) {
      const std::string prefix = kernel_entry(i) + "_";
      llvm_ir::emit_grid_kernel(sgs[i], module, prefix);
      const PtxKernel& k = out.kernels[i];
      emit_entry(module, k.entry, prefix, k.num_inputs, k.num_outputs);
    }
  });
  if (!path.empty()) cache_write(options.cache_dir, path, key, out.ptx);
  out.compile_ms = elapsed_ms();
  return out;
}

PtxModule compile_scatter_add_ptx(const DeviceScatterAdd& s, const PtxOptions& options) {
  auto t0 = std::chrono::steady_clock::now();
  PtxModule out;
  out.name = "scatter_add";
  std::unique_ptr<llvm::TargetMachine> tm = nvptx_machine(options.sm, out.name);
  PtxKernel k;
  k.entry = kernel_entry(0);
  k.items = llvm_ir::scatter_add_items(s);
  k.num_inputs = 2;
  k.num_outputs = 1;
  // The plan at its longest: every position naming a row of its own.
  const int64_t rows = std::min(s.dim, s.count);
  k.inputs = {{s.dtype, {s.outer, s.count, s.inner}}, {i64, {1 + rows + rows + 1 + s.count}}};
  k.outputs = {{s.dtype, {s.outer, s.dim, s.inner}}};
  out.kernels.push_back(k);
  out.ptx = module_ptx(out.name, *tm, options, [&](llvm::Module& module) {
    const std::string prefix = k.entry + "_";
    llvm_ir::emit_scatter_add_grid(s, module, prefix);
    emit_entry(module, k.entry, prefix, k.num_inputs, k.num_outputs);
  });
  out.compile_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace kiln::compiler::cuda
