// The device's scatter_add loop (scatter_kernel.h).
#include "compiler/llvm_ir/scatter_kernel.h"

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Module.h>

#include <functional>

#include "kiln/error.h"

namespace kiln::compiler::llvm_ir {
namespace {

llvm::Type* element_type(llvm::IRBuilder<>& b, DType t) {
  switch (t) {
    case DType::f32: return b.getFloatTy();
    case DType::f64: return b.getDoubleTy();
    case DType::i32: return b.getInt32Ty();
    case DType::i64: return b.getInt64Ty();
    default:
      throw Error(ErrorCode::kUnimplemented,
                  std::string("scatter_add loop: dtype ") + dtype_name(t) + " is not supported");
  }
}

}  // namespace

void emit_scatter_add_grid(const DeviceScatterAdd& s, llvm::Module& module,
                           const std::string& prefix) {
  if (!scatter_add_dtype(s.dtype) || (s.index_dtype != i32 && s.index_dtype != i64))
    throw Error(ErrorCode::kUnimplemented, std::string("scatter_add loop: dtype ") +
                                               dtype_name(s.dtype) + " with indices of " +
                                               dtype_name(s.index_dtype) + " is not supported");
  llvm::LLVMContext& ctx = module.getContext();
  llvm::IRBuilder<> b(ctx);
  llvm::Type* ptr = b.getPtrTy();
  llvm::Type* i64 = b.getInt64Ty();
  llvm::Type* et = element_type(b, s.dtype);
  llvm::Type* it = element_type(b, s.index_dtype);
  auto* fty = llvm::FunctionType::get(b.getVoidTy(), {ptr, ptr, i64, i64, i64, i64}, false);
  llvm::Function* fn =
      llvm::Function::Create(fty, llvm::Function::ExternalLinkage, prefix + "grid", module);
  fn->addFnAttr(llvm::Attribute::NoUnwind);

  // for (i = lo; i < hi; i += step) body(i); leaves the builder after the loop.
  auto loop = [&](llvm::Value* lo, llvm::Value* hi, llvm::Value* step, const char* name,
                  const std::function<void(llvm::Value*)>& body) {
    llvm::BasicBlock* pre = b.GetInsertBlock();
    auto* head = llvm::BasicBlock::Create(ctx, name, fn);
    auto* done = llvm::BasicBlock::Create(ctx, std::string(name) + "_done", fn);
    b.CreateCondBr(b.CreateICmpSLT(lo, hi), head, done);
    b.SetInsertPoint(head);
    llvm::PHINode* i = b.CreatePHI(i64, 2, name);
    i->addIncoming(lo, pre);
    body(i);
    llvm::Value* next = b.CreateAdd(i, step, "", /*HasNUW=*/false, /*HasNSW=*/true);
    i->addIncoming(next, b.GetInsertBlock());
    b.CreateCondBr(b.CreateICmpSLT(next, hi), head, done);
    b.SetInsertPoint(done);
  };

  b.SetInsertPoint(llvm::BasicBlock::Create(ctx, "entry", fn));
  auto arg_ptr = [&](llvm::Value* array, int i) {
    return b.CreateLoad(ptr, b.CreateConstGEP1_64(ptr, array, i));
  };
  llvm::Value* x = arg_ptr(fn->getArg(0), 0);
  llvm::Value* indices = arg_ptr(fn->getArg(0), 1);
  llvm::Value* updates = arg_ptr(fn->getArg(0), 2);
  llvm::Value* y = arg_ptr(fn->getArg(1), 0);
  llvm::Value* first = b.CreateAdd(b.CreateMul(fn->getArg(2), fn->getArg(3)), fn->getArg(4));
  llvm::Value* stride = b.CreateMul(fn->getArg(3), fn->getArg(5));
  llvm::Value* one = b.getInt64(1);
  llvm::Value* inner = b.getInt64(s.inner);
  loop(first, b.getInt64(s.outer * s.inner), stride, "column", [&](llvm::Value* c) {
    llvm::Value* o = b.CreateUDiv(c, inner);
    llvm::Value* k = b.CreateURem(c, inner);
    llvm::Value* base = b.CreateAdd(b.CreateMul(o, b.getInt64(s.dim * s.inner)), k);
    loop(b.getInt64(0), b.getInt64(s.dim), one, "copy", [&](llvm::Value* d) {
      llvm::Value* at = b.CreateAdd(base, b.CreateMul(d, inner));
      b.CreateStore(b.CreateLoad(et, b.CreateInBoundsGEP(et, x, at)),
                    b.CreateInBoundsGEP(et, y, at));
    });
    llvm::Value* ubase = b.CreateAdd(b.CreateMul(o, b.getInt64(s.count * s.inner)), k);
    loop(b.getInt64(0), b.getInt64(s.count), one, "index", [&](llvm::Value* j) {
      llvm::Value* v = b.CreateLoad(it, b.CreateInBoundsGEP(it, indices, j));
      if (it != i64) v = b.CreateSExt(v, i64);
      auto* add = llvm::BasicBlock::Create(ctx, "add", fn);
      auto* next = llvm::BasicBlock::Create(ctx, "next", fn);
      b.CreateCondBr(b.CreateICmpULT(v, b.getInt64(s.dim)), add, next);  // negative: large
      b.SetInsertPoint(add);
      llvm::Value* at = b.CreateGEP(et, y, b.CreateAdd(base, b.CreateMul(v, inner)));
      llvm::Value* u =
          b.CreateLoad(et, b.CreateInBoundsGEP(et, updates, b.CreateAdd(ubase, b.CreateMul(j, inner))));
      llvm::Value* old = b.CreateLoad(et, at);
      b.CreateStore(et->isFloatingPointTy() ? b.CreateFAdd(old, u) : b.CreateAdd(old, u), at);
      b.CreateBr(next);
      b.SetInsertPoint(next);
    });
  });
  b.CreateRetVoid();
}

}  // namespace kiln::compiler::llvm_ir
