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
    case DType::f32:
      return b.getFloatTy();
    case DType::f64:
      return b.getDoubleTy();
    case DType::i32:
      return b.getInt32Ty();
    case DType::i64:
      return b.getInt64Ty();
    default:
      throw Error(ErrorCode::kUnimplemented,
                  std::string("scatter_add loop: dtype ") + dtype_name(t) + " is not supported");
  }
}

}  // namespace

void emit_scatter_add_grid(const DeviceScatterAdd& s, llvm::Module& module,
                           const std::string& prefix) {
  if (!scatter_add_dtype(s.dtype))
    throw Error(ErrorCode::kUnimplemented, std::string("scatter_add loop: dtype ") +
                                               dtype_name(s.dtype) + " is not supported");
  llvm::LLVMContext& ctx = module.getContext();
  llvm::IRBuilder<> b(ctx);
  llvm::Type* ptr = b.getPtrTy();
  llvm::Type* i64 = b.getInt64Ty();
  llvm::Type* et = element_type(b, s.dtype);
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
  llvm::Value* acc = b.CreateAlloca(et);  // in the entry block: mem2reg makes it a register
  auto arg_ptr = [&](llvm::Value* array, int i) {
    return b.CreateLoad(ptr, b.CreateConstGEP1_64(ptr, array, i));
  };
  llvm::Value* updates = arg_ptr(fn->getArg(0), 0);
  llvm::Value* plan = arg_ptr(fn->getArg(0), 1);
  llvm::Value* y = arg_ptr(fn->getArg(1), 0);
  auto plan_at = [&](llvm::Value* i) {
    return b.CreateLoad(i64, b.CreateInBoundsGEP(i64, plan, i));
  };
  llvm::Value* rows = plan_at(b.getInt64(0));
  llvm::Value* first = b.CreateAdd(b.CreateMul(fn->getArg(2), fn->getArg(3)), fn->getArg(4));
  llvm::Value* stride = b.CreateMul(fn->getArg(3), fn->getArg(5));
  llvm::Value* inner = b.getInt64(s.inner);
  llvm::Value* per_o = b.CreateMul(rows, inner);
  llvm::Value* starts = b.CreateAdd(rows, b.getInt64(1));  // plan[1 + rows + r]
  llvm::Value* js = b.CreateAdd(b.CreateMul(rows, b.getInt64(2)), b.getInt64(2));  // the j list
  loop(first, b.CreateMul(b.getInt64(s.outer), per_o), stride, "item", [&](llvm::Value* c) {
    llvm::Value* o = b.CreateUDiv(c, per_o);
    llvm::Value* rest = b.CreateURem(c, per_o);
    llvm::Value* r = b.CreateUDiv(rest, inner);
    llvm::Value* k = b.CreateURem(rest, inner);
    llvm::Value* row = plan_at(b.CreateAdd(r, b.getInt64(1)));
    llvm::Value* lo = plan_at(b.CreateAdd(starts, r));
    llvm::Value* hi = plan_at(b.CreateAdd(b.CreateAdd(starts, r), b.getInt64(1)));
    llvm::Value* at =
        b.CreateAdd(b.CreateMul(b.CreateAdd(b.CreateMul(o, b.getInt64(s.dim)), row), inner), k);
    llvm::Value* target = b.CreateInBoundsGEP(et, y, at);
    llvm::Value* ubase = b.CreateAdd(b.CreateMul(o, b.getInt64(s.count * s.inner)), k);
    // The sum in a register (acc, promoted), in the kernel's order: y's value, then each update.
    b.CreateStore(b.CreateLoad(et, target), acc);
    loop(lo, hi, b.getInt64(1), "update", [&](llvm::Value* t) {
      llvm::Value* j = plan_at(b.CreateAdd(js, t));
      llvm::Value* u = b.CreateLoad(
          et, b.CreateInBoundsGEP(et, updates, b.CreateAdd(ubase, b.CreateMul(j, inner))));
      llvm::Value* sum = b.CreateLoad(et, acc);
      b.CreateStore(et->isFloatingPointTy() ? b.CreateFAdd(sum, u) : b.CreateAdd(sum, u), acc);
    });
    b.CreateStore(b.CreateLoad(et, acc), target);
  });
  b.CreateRetVoid();
}

}  // namespace kiln::compiler::llvm_ir
