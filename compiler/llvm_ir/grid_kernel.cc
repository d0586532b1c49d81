// The grid-stride loop over a fused kernel's items (grid_kernel.h).
#include "compiler/llvm_ir/grid_kernel.h"

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Module.h>

#include "compiler/llvm_ir/elemental_emitter.h"
#include "compiler/llvm_ir/loop_target.h"

namespace kiln::compiler::llvm_ir {

int64_t grid_items(const FusedSubgraph& sg) {
  return num_elements(sg.has_reductions() ? sg.reduced_shape() : sg.iteration_shape());
}

void emit_grid_kernel(const FusedSubgraph& sg, llvm::Module& module, const std::string& prefix) {
  const Shape shape = sg.iteration_shape();
  // One column a thread (a column reduction's item is a column of the reduced shape).
  emit_loop_kernel(sg, shape, flat_loop_for(sg, shape), module, prefix,
                   LoopOptions{.column_block = 1});
  // The loop is called for one item at a time: inlined into the grid loop, its own loop runs
  // once. (The CPU keeps kernel_part out of line, to emit it once; here it is called once.)
  llvm::Function* kernel = module.getFunction(prefix + "kernel");
  for (const char* name : {"kernel", "kernel_part"}) {
    if (llvm::Function* f = module.getFunction(prefix + name)) {
      f->setLinkage(llvm::Function::InternalLinkage);
      f->removeFnAttr(llvm::Attribute::NoInline);
      f->addFnAttr(llvm::Attribute::AlwaysInline);
    }
  }

  llvm::LLVMContext& ctx = module.getContext();
  llvm::IRBuilder<> b(ctx);
  llvm::Type* ptr = b.getPtrTy();
  llvm::Type* i64 = b.getInt64Ty();
  auto* fty = llvm::FunctionType::get(b.getVoidTy(), {ptr, ptr, i64, i64, i64, i64}, false);
  llvm::Function* grid =
      llvm::Function::Create(fty, llvm::Function::ExternalLinkage, prefix + "grid", module);
  grid->addFnAttr(llvm::Attribute::NoUnwind);
  llvm::Value* block = grid->getArg(2);
  llvm::Value* block_dim = grid->getArg(3);
  llvm::Value* thread = grid->getArg(4);
  llvm::Value* grid_dim = grid->getArg(5);

  auto* entry = llvm::BasicBlock::Create(ctx, "entry", grid);
  auto* loop = llvm::BasicBlock::Create(ctx, "loop", grid);
  auto* exit = llvm::BasicBlock::Create(ctx, "exit", grid);
  b.SetInsertPoint(entry);
  llvm::Value* n = b.getInt64(grid_items(sg));
  llvm::Value* first = b.CreateAdd(b.CreateMul(block, block_dim), thread, "first");
  llvm::Value* stride = b.CreateMul(block_dim, grid_dim, "stride");
  b.CreateCondBr(b.CreateICmpSLT(first, n), loop, exit);

  b.SetInsertPoint(loop);
  llvm::PHINode* i = b.CreatePHI(i64, 2, "item");
  i->addIncoming(first, entry);
  llvm::Value* next = b.CreateAdd(i, b.getInt64(1));
  b.CreateCall(kernel, {grid->getArg(0), grid->getArg(1), i, next});
  llvm::Value* after = b.CreateAdd(i, stride, "", /*HasNUW=*/false, /*HasNSW=*/true);
  i->addIncoming(after, loop);
  b.CreateCondBr(b.CreateICmpSLT(after, n), loop, exit);

  b.SetInsertPoint(exit);
  b.CreateRetVoid();
}

}  // namespace kiln::compiler::llvm_ir
