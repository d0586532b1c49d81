// The elemental emitter, target-independent (compiler/llvm_ir/elemental_emitter.h): emits a
// FusedSubgraph as one elemental loop `void kernel(void** inputs, void** outputs, i64 begin,
// i64 end)` in LLVM IR. A backend wraps it: the CPU (compiler/cpu/jit.cc) optimises it at O3 for
// the host and JITs it; CUDA (compiler/cuda/ptx.cc) calls it from a grid-stride kernel and
// lowers the module to PTX.
//
// Reductions (input fusion): [begin, end) ranges over reduced-output elements. A row reduction
// (no kept dimension inside the reduced run) folds each output in a loop over the innermost
// reduced dimension whose accumulator is a reassociable recurrence (fadd/fmul `reassoc`;
// maxnum/minnum `nnan nsz` plus an or-reduced NaN flag, so NaN still propagates), which the
// loop vectorizer widens into several vector accumulators. A column reduction (kept dimensions
// inside) accumulates straight into the output row, the innermost loop running across the
// kept inner dimension (vectorised like an elementwise loop).
//
// Transcendentals. f32 exp, log, tanh, logistic and erf are inline IR (no calls), so the loop
// vectorizer widens them: the approximations of ops/approximations.h, written once and
// instantiated here with IrMath, so that the reference kernels compute the same bits. exp is a
// Cody-Waite reduction with a magic-number rounding (no float-to-int conversion) and a degree-5
// polynomial; log is Cephes' logf; tanh is a clamped 11/6-degree rational; logistic is
// 1/(1+exp(-|x|)) mirrored for x < 0; erf is Eigen's 13/8 rational on [-4, 4]. Their divisions
// stay vdivps: on this host (Zen 4) the divider runs beside the FMA pipes, and `arcp ninf`
// (vrcp14ps + Newton step, 4 FMA-pipe instructions) measured slower. Their error bounds,
// measured over every f32 input: docs/numerics.md.
// sin, cos, pow, log1p and expm1 (and every f64 transcendental) call libm: exact, but scalar.
#include "compiler/llvm_ir/elemental_emitter.h"

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/PatternMatch.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <numbers>
#include <unordered_map>

#include "compiler/llvm_ir/loop_target.h"
#include "kiln/error.h"
#include "ops/approximations.h"

namespace kiln::compiler::llvm_ir {
namespace {

using llvm::Value;
using llvm::Type;

// TEST ONLY: the negative control of the random differential tests (RandomGraphNegativeControl
// in tests/compiler/compiled_random_test.cc) runs them in a child process whose environment has
// KILN_TEST_ONLY_MISCOMPILE=sub-swaps-operands; this emitter then emits sub(x, y) as y - x, and
// the tests must report it. Nothing in Kiln sets the variable, and the name and value are long so
// that nothing sets it by accident. It is read once per process, when the first sub is emitted;
// the kernels themselves are the same code with it unset.
bool miscompile_sub_for_tests() {
  static const bool on = [] {
    const char* v = std::getenv("KILN_TEST_ONLY_MISCOMPILE");
    return v != nullptr && std::string(v) == "sub-swaps-operands";
  }();
  return on;
}

// Reduced positions a column kernel folds per pass over a block (see `nest`).
constexpr int64_t kColumnJam = 4;

// ops/approximations.h's arithmetic as f32/i32 IR, one instruction an operation, with no
// fast-math flags: fma is llvm.fma (never llvm.fmuladd, which LLVM may split), and the
// target's standard FP-op fusion leaves separate fmul and fadd alone, so the JIT'd code rounds
// exactly as the reference kernels' ScalarMath does.
struct IrMath {
  using V = Value*;
  using I = Value*;
  using B = Value*;
  llvm::IRBuilder<>& b;
  V c(double v) { return llvm::ConstantFP::get(b.getFloatTy(), v); }
  I ci(uint32_t v) { return b.getInt32(v); }
  V fma(V x, V y, V z) { return b.CreateIntrinsic(llvm::Intrinsic::fma, {x->getType()}, {x, y, z}); }
  V add(V x, V y) { return b.CreateFAdd(x, y); }
  V sub(V x, V y) { return b.CreateFSub(x, y); }
  V mul(V x, V y) { return b.CreateFMul(x, y); }
  V div(V x, V y) { return b.CreateFDiv(x, y); }
  V neg(V x) { return b.CreateFNeg(x); }
  V abs(V x) { return b.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, x); }
  B lt(V x, V y) { return b.CreateFCmpOLT(x, y); }
  B gt(V x, V y) { return b.CreateFCmpOGT(x, y); }
  B ge(V x, V y) { return b.CreateFCmpOGE(x, y); }
  B eq(V x, V y) { return b.CreateFCmpOEQ(x, y); }
  B lt_or_nan(V x, V y) { return b.CreateFCmpULT(x, y); }
  Value* select(B c, Value* x, Value* y) { return b.CreateSelect(c, x, y); }
  I bits(V x) { return b.CreateBitCast(x, b.getInt32Ty()); }
  V from_bits(I x) { return b.CreateBitCast(x, b.getFloatTy()); }
  I shl(I x, int n) { return b.CreateShl(x, n); }
  I lshr(I x, int n) { return b.CreateLShr(x, n); }
  I and_(I x, I y) { return b.CreateAnd(x, y); }
  I or_(I x, I y) { return b.CreateOr(x, y); }
  I add_i(I x, I y) { return b.CreateAdd(x, y); }
  I sub_i(I x, I y) { return b.CreateSub(x, y); }
  V to_float(I x) { return b.CreateSIToFP(x, b.getFloatTy()); }
  V inf() { return llvm::ConstantFP::getInfinity(b.getFloatTy()); }
  V neg_inf() { return llvm::ConstantFP::getInfinity(b.getFloatTy(), /*Negative=*/true); }
  V nan() { return llvm::ConstantFP::getNaN(b.getFloatTy()); }
};

// Emits the IR of one kernel.
class Emitter {
 public:
  // `prefix` starts the names of the functions emitted (several kernels share a module).
  Emitter(const FusedSubgraph& sg, const Shape& shape, llvm::Module& m, std::string prefix,
          const LoopOptions& options)
      : sg_(sg), shape_(shape), m_(m), ctx_(m.getContext()), b_(ctx_), prefix_(std::move(prefix)),
        column_block_(options.column_block) {}

  // Emits `kernel`; with reductions also
  // `kernel_part(inputs, outputs, begin, end, lo, hi, partial)`, which folds only positions
  // [lo, hi) of the outermost reduced (collapsed) dimension and, when `partial` is nonzero,
  // stores reductions unrounded in their accumulator dtype (`kernel` calls it with the whole
  // range and 0).
  void emit_kernel(bool flat) {
    Type* ptr = b_.getPtrTy();
    Type* i64 = b_.getInt64Ty();
    bool part = sg_.has_reductions();
    std::vector<Type*> params = {ptr, ptr, i64, i64};
    if (part) params.insert(params.end(), {i64, i64, i64});
    auto* fty = llvm::FunctionType::get(b_.getVoidTy(), params, false);
    fn_ = llvm::Function::Create(fty, llvm::Function::ExternalLinkage,
                                 prefix_ + (part ? "kernel_part" : "kernel"), m_);
    fn_->addFnAttr(llvm::Attribute::NoUnwind);
    if (part) fn_->addFnAttr(llvm::Attribute::NoInline);  // `kernel` calls it: emit it once
    for (int i = 0; i < 2; ++i) fn_->addParamAttr(i, llvm::Attribute::NoAlias);
    Value* inputs = fn_->getArg(0);
    Value* outputs = fn_->getArg(1);
    Value* begin = fn_->getArg(2);
    Value* end = fn_->getArg(3);
    if (part) {
      red_lo_ = fn_->getArg(4);
      red_hi_ = fn_->getArg(5);
      partial_ = fn_->getArg(6);
    }

    auto* entry = llvm::BasicBlock::Create(ctx_, "entry", fn_);
    auto* exit = llvm::BasicBlock::Create(ctx_, "exit", fn_);
    b_.SetInsertPoint(entry);
    for (size_t i = 0; i < sg_.inputs.size(); ++i)
      in_ptrs_.push_back(b_.CreateLoad(ptr, b_.CreateConstGEP1_64(ptr, inputs, i), "in"));
    seeds_.assign(sg_.inputs.size(), nullptr);
    for (size_t i = 0; i < sg_.inputs.size(); ++i)
      if (sg_.inputs[i].generator) seeds_[i] = b_.CreateLoad(i64, in_ptrs_[i], "seed");
    for (size_t i = 0; i < sg_.outputs.size(); ++i)
      out_ptrs_.push_back(b_.CreateLoad(ptr, b_.CreateConstGEP1_64(ptr, outputs, i), "out"));
    auto* work = llvm::BasicBlock::Create(ctx_, "work", fn_);
    b_.CreateCondBr(b_.CreateICmpSLT(begin, end), work, exit);
    b_.SetInsertPoint(work);

    if (sg_.has_reductions()) {
      emit_reduce(begin, end, exit);
    } else if (flat) {
      emit_flat(begin, end, exit);
    } else {
      emit_rows(begin, end, exit);
    }
    b_.SetInsertPoint(exit);
    b_.CreateRetVoid();
    if (part) {
      auto* wty = llvm::FunctionType::get(b_.getVoidTy(), {ptr, ptr, i64, i64}, false);
      llvm::Function* w =
          llvm::Function::Create(wty, llvm::Function::ExternalLinkage, prefix_ + "kernel", m_);
      w->addFnAttr(llvm::Attribute::NoUnwind);
      b_.SetInsertPoint(llvm::BasicBlock::Create(ctx_, "entry", w));
      b_.CreateCall(fn_, {w->getArg(0), w->getArg(1), w->getArg(2), w->getArg(3),
                          b_.getInt64(0), b_.getInt64(split_size_), b_.getInt64(0)});
      b_.CreateRetVoid();
    }
  }

  // The size of the outermost reduced dimension kernel_part's [lo, hi) ranges over.
  int64_t split_size() const { return split_size_; }

 private:
  // ---- loops ----

  // for (i = lo; i < hi; ++i) body(i); lo < hi is known. Leaves the builder in `after`. An
  // innermost loop is marked llvm.loop.parallel_accesses (every iteration reads and writes only
  // its own elements), so the vectorizer needs no runtime alias checks, in place included.
  template <class Body>
  void emit_loop(Value* lo, Value* hi, llvm::BasicBlock* after, const char* name, bool innermost,
                 Body body) {
    llvm::BasicBlock* pre = b_.GetInsertBlock();
    auto* loop = llvm::BasicBlock::Create(ctx_, name, fn_);
    b_.CreateBr(loop);
    b_.SetInsertPoint(loop);
    llvm::PHINode* i = b_.CreatePHI(b_.getInt64Ty(), 2, "i");
    i->addIncoming(lo, pre);
    if (innermost) access_group_ = llvm::MDNode::getDistinct(ctx_, {});
    body(i);
    Value* next = b_.CreateAdd(i, b_.getInt64(1), "", /*HasNUW=*/true, /*HasNSW=*/true);
    i->addIncoming(next, b_.GetInsertBlock());
    llvm::Instruction* br = b_.CreateCondBr(b_.CreateICmpSLT(next, hi), loop, after);
    if (innermost) {
      llvm::Metadata* pa[] = {llvm::MDString::get(ctx_, "llvm.loop.parallel_accesses"),
                              access_group_};
      llvm::TempMDTuple self = llvm::MDNode::getTemporary(ctx_, {});
      llvm::Metadata* ops[] = {self.get(), llvm::MDNode::get(ctx_, pa)};
      llvm::MDNode* loop_id = llvm::MDNode::getDistinct(ctx_, ops);
      loop_id->replaceOperandWith(0, loop_id);
      br->setMetadata(llvm::LLVMContext::MD_loop, loop_id);
      access_group_ = nullptr;
    }
    b_.SetInsertPoint(after);
  }

  // Every input is full-shape or a single element: one flat loop over [begin, end). (A
  // gathered input takes it only in a loop of one element or none.)
  // (A mapped input takes this loop when it reads its elements in order, as a reshape does:
  // at its view's offset.)
  void emit_flat(Value* begin, Value* end, llvm::BasicBlock* exit) {
    std::vector<Value*> scalars(sg_.inputs.size(), nullptr);
    std::vector<Value*> offsets = input_offsets(sg_.inputs.size());
    int64_t n = num_elements(shape_);
    for (size_t k = 0; k < sg_.inputs.size(); ++k) {
      if (num_elements(sg_.inputs[k].shape) == 1 && n != 1)
        scalars[k] = load(static_cast<int>(k), offsets[k]);
    }
    emit_loop(begin, end, exit, "loop", /*innermost=*/true, [&](Value* i) {
      std::vector<Value*> in(sg_.inputs.size());
      for (size_t k = 0; k < in.size(); ++k) {
        Value* at = sg_.inputs[k].map ? b_.CreateAdd(i, offsets[k]) : i;
        in[k] = scalars[k]             ? scalars[k]
                : sg_.inputs[k].gather ? gathered(static_cast<int>(k), at, in)
                                       : load(static_cast<int>(k), at);
      }
      emit_body(in, i);
    });
  }

  // Per input, its element stride along each of the `out_rank` output dimensions (inputs are
  // right-aligned; 0 along the dimensions an input is broadcast over; a mapped input's own).
  std::vector<std::vector<int64_t>> input_strides(int out_rank) const {
    std::vector<std::vector<int64_t>> strides(sg_.inputs.size(),
                                              std::vector<int64_t>(out_rank, 0));
    for (size_t k = 0; k < sg_.inputs.size(); ++k) {
      const FusedSubgraph::Input& in = sg_.inputs[k];
      const Shape& s = in.shape;
      const int lead = out_rank - static_cast<int>(s.size());
      int64_t st = 1;
      for (int j = static_cast<int>(s.size()) - 1; j >= 0; --j) {
        const int64_t own = in.map ? in.map->strides[j] : st;
        strides[k][lead + j] = s[j] == 1 ? 0 : own;
        st *= s[j];
      }
    }
    return strides;
  }

  // Where input k's walk starts: a mapped input's view offset, else 0.
  Value* view_offset(size_t k) {
    return b_.getInt64(sg_.inputs[k].map ? sg_.inputs[k].map->offset : 0);
  }
  // The same for the first n accesses (inputs, then outputs, which start at 0).
  std::vector<Value*> input_offsets(size_t n) {
    std::vector<Value*> offs(n, b_.getInt64(0));
    for (size_t k = 0; k < sg_.inputs.size() && k < n; ++k) offs[k] = view_offset(k);
    return offs;
  }

  // Whether `piece` bounds output dimension d (does not cover it whole, one element apart).
  bool bounds(const Piece& piece, int d) const {
    return piece.lo[d] != 0 || piece.hi[d] != shape_[d] || piece.step[d] != 1;
  }

  // General broadcasting: rows of the last (collapsed) output dimension; each input's row
  // offset is index arithmetic on the row number (constant strides, 0 along broadcast
  // dimensions), its inner stride is 0 or 1. A piece input pins the dimensions its piece
  // bounds (they are not collapsed): its row offset then comes from the row's coordinates,
  // and the row is split at the pieces' bounds along the inner dimension, so that within each
  // run every piece is read consecutively or not at all.
  void emit_rows(Value* begin, Value* end, llvm::BasicBlock* exit) {
    int out_rank = static_cast<int>(shape_.size());
    size_t n_in = sg_.inputs.size();
    // strides[k][d]: input k's element stride along output dimension d.
    std::vector<std::vector<int64_t>> strides = input_strides(out_rank);
    std::vector<char> pinned(out_rank, 0);
    for (const FusedSubgraph::Input& in : sg_.inputs)
      if (in.piece)
        for (int d = 0; d < out_rank; ++d)
          pinned[d] |= bounds(*in.piece, d);
    // Collapse adjacent dimensions every input walks alike (broadcast along both, or
    // contiguous across both); drop size-1 dimensions. Built innermost first; orig[c] is the
    // output dimension of a pinned collapsed dimension c (-1 for a collapsed run).
    std::vector<int64_t> dims;
    std::vector<int> orig;
    std::vector<std::vector<int64_t>> cst(n_in);
    for (int d = out_rank - 1; d >= 0; --d) {
      if (shape_[d] == 1 && !pinned[d]) continue;
      bool merge = !dims.empty() && !pinned[d] && orig.back() < 0;
      for (size_t k = 0; merge && k < n_in; ++k)
        merge = strides[k][d] == cst[k].back() * dims.back();
      if (merge) {
        dims.back() *= shape_[d];
      } else {
        dims.push_back(shape_[d]);
        orig.push_back(pinned[d] ? d : -1);
        for (size_t k = 0; k < n_in; ++k) cst[k].push_back(strides[k][d]);
      }
    }
    if (dims.empty()) {  // one element
      dims.push_back(1);
      orig.push_back(-1);
      for (size_t k = 0; k < n_in; ++k) cst[k].push_back(0);
    }
    int rank = static_cast<int>(dims.size());
    int64_t inner = dims[0];
    Value* c_inner = b_.getInt64(inner);
    Value* r_lo = b_.CreateSDiv(begin, c_inner);
    Value* r_hi = b_.CreateSDiv(b_.CreateAdd(end, b_.getInt64(inner - 1)), c_inner);
    emit_loop(r_lo, r_hi, exit, "rows", /*innermost=*/false, [&](Value* r) {
      Value* base = b_.CreateMul(r, c_inner);
      Value* j_lo = smax(b_.CreateSub(begin, base), b_.getInt64(0));
      Value* j_hi = smin(b_.CreateSub(end, base), c_inner);
      // Row offsets: decompose r over the outer collapsed dimensions. A piece input reads its
      // piece's coordinate along a pinned dimension, and notes whether the row is in it.
      std::vector<Value*> offs = input_offsets(n_in);
      std::vector<Value*> row_in(n_in, b_.getTrue());
      Value* rest = r;
      for (int d = 1; d < rank; ++d) {
        Value* idx = d + 1 < rank ? b_.CreateURem(rest, b_.getInt64(dims[d])) : rest;
        if (d + 1 < rank) rest = b_.CreateUDiv(rest, b_.getInt64(dims[d]));
        for (size_t k = 0; k < n_in; ++k) {
          const std::optional<Piece>& piece = sg_.inputs[k].piece;
          if (piece && orig[d] >= 0) {
            auto [in, c] = piece_coordinate(*piece, orig[d], idx);
            row_in[k] = b_.CreateAnd(row_in[k], in);
            if (cst[k][d] != 0)
              offs[k] = b_.CreateAdd(offs[k], b_.CreateMul(c, b_.getInt64(cst[k][d])));
          } else if (cst[k][d] != 0) {
            offs[k] = b_.CreateAdd(offs[k], b_.CreateMul(idx, b_.getInt64(cst[k][d])));
          }
        }
      }
      // Outside its piece a row reads the piece's first row instead (never used; in bounds).
      for (size_t k = 0; k < n_in; ++k)
        if (sg_.inputs[k].piece) offs[k] = b_.CreateSelect(row_in[k], offs[k], view_offset(k));
      auto* row_end = llvm::BasicBlock::Create(ctx_, "row_end", fn_);
      for (const auto& [a, z] : inner_runs(orig[0])) {
        Value* lo = smax(j_lo, b_.getInt64(a));
        Value* hi = smin(j_hi, b_.getInt64(z));
        emit_guarded_loop(lo, hi, "inner", /*innermost=*/true, [&](Value* j) {
          std::vector<Value*> in(n_in);
          for (size_t k = 0; k < n_in; ++k) in[k] = read_row(static_cast<int>(k), orig[0], a,
                                                             cst[k][0], offs[k], row_in[k], j, in);
          emit_body(in, b_.CreateAdd(base, j));
        });
      }
      b_.CreateBr(row_end);
      b_.SetInsertPoint(row_end);
    });
  }

  // Whether index `idx` along output dimension `d` lies in `piece`, and its coordinate there.
  std::pair<Value*, Value*> piece_coordinate(const Piece& piece, int d, Value* idx) {
    Value* rel = b_.CreateSub(idx, b_.getInt64(piece.lo[d]));
    Value* in = b_.CreateAnd(b_.CreateICmpSGE(idx, b_.getInt64(piece.lo[d])),
                             b_.CreateICmpSLT(idx, b_.getInt64(piece.hi[d])));
    if (piece.step[d] == 1) return {in, rel};
    Value* step = b_.getInt64(piece.step[d]);
    in = b_.CreateAnd(in, b_.CreateICmpEQ(b_.CreateSRem(rel, step), b_.getInt64(0)));
    return {in, b_.CreateSDiv(rel, step)};
  }

  // The runs [a, z) the inner dimension (output dimension `d`, or -1 for a collapsed run) splits
  // into at the bounds of the pieces with step 1 along it: within a run each such piece is
  // read throughout or not at all.
  std::vector<std::pair<int64_t, int64_t>> inner_runs(int d) const {
    const int64_t n = d >= 0 ? shape_[d] : 0;
    std::vector<int64_t> cuts = {0};
    if (d >= 0) {
      for (const FusedSubgraph::Input& in : sg_.inputs)
        if (in.piece && in.piece->step[d] == 1)
          for (int64_t c : {in.piece->lo[d], in.piece->hi[d]})
            if (c > 0 && c < n) cuts.push_back(c);
    }
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    std::vector<std::pair<int64_t, int64_t>> runs;
    for (size_t i = 0; i < cuts.size(); ++i)
      runs.push_back({cuts[i], i + 1 < cuts.size() ? cuts[i + 1] : (d >= 0 ? n : INT64_MAX)});
    return runs;
  }

  // Input k at inner index j of a row, in the inner run starting at `run_start`: `off` is its
  // row offset, `row_in` whether the row lies in its piece (true for other inputs), `st` its
  // inner stride; `in` holds the earlier inputs' values (a piece falls back to one).
  Value* read_row(int k, int d, int64_t run_start, int64_t st, Value* off, Value* row_in,
                  Value* j, const std::vector<Value*>& in) {
    const FusedSubgraph::Input& input = sg_.inputs[k];
    auto at = [&](Value* idx) {
      return st == 0 ? off : st == 1 ? b_.CreateAdd(off, idx)
                                     : b_.CreateAdd(off, b_.CreateMul(idx, b_.getInt64(st)));
    };
    if (input.gather) return gathered(k, at(j), in);
    if (!input.piece) return load(k, at(j));
    Value* fallback = input.fallback >= 0
                          ? in[input.fallback]
                          : llvm::Constant::getNullValue(reg_type(input.dtype));
    Value* inside = row_in;
    Value* value;
    if (d < 0 || !bounds(*input.piece, d)) {
      value = load(k, at(j));
    } else if (input.piece->step[d] == 1) {
      if (run_start < input.piece->lo[d] || run_start >= input.piece->hi[d]) return fallback;
      value = load(k, at(b_.CreateSub(j, b_.getInt64(input.piece->lo[d]))));
    } else {  // interior padding: in or out per element
      auto [in_piece, c] = piece_coordinate(*input.piece, d, j);
      inside = b_.CreateAnd(inside, in_piece);
      value = load(k, b_.CreateSelect(inside, at(c), view_offset(k)));
    }
    if (input.fallback < 0) return value;
    return select_keeping_bits(inside, value, fallback, input.dtype);
  }

  Value* smax(Value* a, Value* b) { return b_.CreateSelect(b_.CreateICmpSGT(a, b), a, b); }
  Value* smin(Value* a, Value* b) { return b_.CreateSelect(b_.CreateICmpSLT(a, b), a, b); }

  // ---- memory ----

  Type* mem_type(DType t) {
    switch (t) {
      case DType::f32: return b_.getFloatTy();
      case DType::f64: return b_.getDoubleTy();
      case DType::i32: return b_.getInt32Ty();
      case DType::i64: return b_.getInt64Ty();
      case DType::bool_: return b_.getInt8Ty();
      case DType::u8: return b_.getInt8Ty();
      case DType::i8: return b_.getInt8Ty();
      case DType::bf16: return b_.getInt16Ty();
      case DType::f16: return b_.getInt16Ty();
      default: throw Error(ErrorCode::kUnimplemented, "codegen: unsupported dtype");
    }
  }
  // bool values live as i1, bf16 and f16 values as the f32 they widen to exactly.
  Type* reg_type(DType t) {
    return t == bool_ ? b_.getInt1Ty() : is_narrow(t) ? b_.getFloatTy() : mem_type(t);
  }
  static bool is_narrow(DType t) { return t == DType::bf16 || t == DType::f16; }
  // The dtype a value computes in: f32 for bf16 and f16.
  static DType compute_type(DType t) { return is_narrow(t) ? f32 : t; }

  // ---- bf16 and f16: the bits of ops' reference kernels (kiln/dtype.h's conversions) ----

  // A 16-bit pattern of dtype t as the f32 it denotes (exact).
  Value* widen(Value* bits, DType t) {
    Value* u = b_.CreateZExt(bits, b_.getInt32Ty());
    if (t == DType::bf16) return b_.CreateBitCast(b_.CreateShl(u, 16), b_.getFloatTy());
    // half::operator float: subnormals as man / 2^24, inf and NaN keep their payload.
    Value* sign = b_.CreateShl(b_.CreateAnd(u, 0x8000u), 16);
    Value* exp = b_.CreateAnd(b_.CreateLShr(u, 10), 0x1fu);
    Value* man = b_.CreateAnd(u, 0x3ffu);
    Value* man_hi = b_.CreateShl(man, 13);
    Value* normal = b_.CreateOr(sign, b_.CreateOr(b_.CreateShl(b_.CreateAdd(exp, b_.getInt32(112)), 23), man_hi));
    Value* special = b_.CreateOr(sign, b_.CreateOr(b_.getInt32(0x7f800000u), man_hi));
    Value* sub = b_.CreateFDiv(b_.CreateUIToFP(man, b_.getFloatTy()), fconst(b_.getFloatTy(), 16777216.0));
    sub = b_.CreateSelect(b_.CreateICmpNE(sign, b_.getInt32(0)), b_.CreateFNeg(sub), sub);
    Value* wide = b_.CreateBitCast(
        b_.CreateSelect(b_.CreateICmpEQ(exp, b_.getInt32(31)), special, normal), b_.getFloatTy());
    return b_.CreateSelect(b_.CreateICmpEQ(exp, b_.getInt32(0)), sub, wide);
  }

  // The bits of bf16/f16 value v: those it moved with, or v rounded.
  Value* bits_of(Value* v, DType t) {
    auto it = bits_.find(v);
    return it != bits_.end() ? it->second : narrow(v, t);
  }

  // f32 `v` as a value of dtype t: itself when it holds bits already (a load, a rounded result),
  // else rounded, with its bits kept for a store.
  Value* rounded(Value* v, DType t) {
    if (bits_.count(v)) return v;
    Value* bits = narrow(v, t);
    Value* w = widen(bits, t);
    bits_[w] = bits;
    return w;
  }

  // c ? x : y of dtype t, keeping the bits of bf16/f16 operands as the reference kernels do.
  Value* select_keeping_bits(Value* c, Value* x, Value* y, DType t) {
    Value* v = b_.CreateSelect(c, x, y);
    // A value in bits_ is exactly its bits widened: with excess precision an operand may be an
    // unrounded f32, and then the select's value is too (rounded where it is stored or read).
    auto holds_bits = [&](Value* a) {
      auto* k = llvm::dyn_cast<llvm::Constant>(a);
      return bits_.count(a) > 0 || (k != nullptr && k->isNullValue());  // +0.0: a pad's fill
    };
    bool exact = !sg_.excess_precision || (holds_bits(x) && holds_bits(y));
    if (is_narrow(t) && exact) bits_[v] = b_.CreateSelect(c, bits_of(x, t), bits_of(y, t));
    return v;
  }

  // f32 `v` rounded to dtype t, to nearest even, as its 16-bit pattern.
  Value* narrow(Value* v, DType t) {
    Type* i32 = b_.getInt32Ty();
    Value* x = b_.CreateBitCast(v, i32);
    auto c = [&](uint32_t k) { return b_.getInt32(k); };
    if (t == DType::bf16) {  // a NaN stays a quiet NaN
      Value* hi = b_.CreateLShr(x, 16);
      Value* nan = b_.CreateICmpUGT(b_.CreateAnd(x, c(0x7fffffffu)), c(0x7f800000u));
      Value* rounded = b_.CreateLShr(
          b_.CreateAdd(x, b_.CreateAdd(c(0x7fffu), b_.CreateAnd(hi, c(1)))), 16);
      return b_.CreateTrunc(b_.CreateSelect(nan, b_.CreateOr(hi, c(0x40)), rounded),
                            b_.getInt16Ty());
    }
    // half::half(float)
    Value* sign = b_.CreateAnd(b_.CreateLShr(x, 16), c(0x8000u));
    Value* mag = b_.CreateAnd(x, c(0x7fffffffu));
    Value* scaled = b_.CreateFMul(b_.CreateBitCast(mag, b_.getFloatTy()),
                                  fconst(b_.getFloatTy(), 16777216.0));
    Value* sub = b_.CreateIntrinsic(llvm::Intrinsic::fptoui_sat, {i32, b_.getFloatTy()},
                                    {unary_intrinsic(llvm::Intrinsic::nearbyint, scaled)});
    Value* rounded = b_.CreateAdd(mag, b_.CreateAdd(c(0xfffu), b_.CreateAnd(b_.CreateLShr(mag, 13), c(1))));
    Value* normal = b_.CreateLShr(b_.CreateSub(rounded, c(0x38000000u)), 13);
    Value* r = b_.CreateSelect(b_.CreateICmpULT(mag, c(0x38800000u)), sub, normal);
    r = b_.CreateSelect(b_.CreateICmpUGE(mag, c(0x477ff000u)), c(0x7c00u), r);
    r = b_.CreateSelect(b_.CreateICmpUGT(mag, c(0x7f800000u)), c(0x7e00u), r);
    return b_.CreateTrunc(b_.CreateOr(sign, r), b_.getInt16Ty());
  }

  Value* load(int k, Value* index) {
    if (sg_.inputs[k].generator) return generated(k, index);
    DType t = sg_.inputs[k].dtype;
    Type* mt = mem_type(t);
    llvm::LoadInst* v = b_.CreateLoad(mt, b_.CreateInBoundsGEP(mt, in_ptrs_[k], index));
    if (access_group_) v->setMetadata(llvm::LLVMContext::MD_access_group, access_group_);
    if (is_narrow(t)) {
      Value* w = widen(v, t);
      bits_[w] = v;
      return w;
    }
    return t == bool_ ? b_.CreateICmpNE(v, b_.getInt8(0)) : v;
  }

  // Gathered input k at `off` (its view's offset at this index): the element the value of
  // its indices input (in `in`, read before it) selects along the gathered axis, or 0 for a
  // value outside [0, dim), which reads nothing.
  Value* gathered(int k, Value* off, const std::vector<Value*>& in) {
    const FusedSubgraph::Input& input = sg_.inputs[k];
    const FusedSubgraph::Gather& g = *input.gather;
    Value* v = in[g.indices];
    if (v->getType() != b_.getInt64Ty()) v = b_.CreateSExt(v, b_.getInt64Ty());
    Value* ok = b_.CreateICmpULT(v, b_.getInt64(g.dim));  // a negative v is a large unsigned
    Value* row = b_.CreateSelect(ok, v, b_.getInt64(0));
    Value* value = load(k, b_.CreateAdd(off, b_.CreateMul(row, b_.getInt64(g.stride))));
    return select_keeping_bits(ok, value, llvm::Constant::getNullValue(reg_type(input.dtype)),
                               input.dtype);
  }

  // ---- generated inputs (compiler/generator.h): ops/random.cc's kernels, element by element ----

  // The 64-bit words r0:r1 and r2:r3 of Philox-4x32-10 (ops/philox.h) keyed by `seed` with
  // counter (index, 0): the bits element `index` of a random op draws from (the optimiser drops
  // the second where it is not read).
  void philox_words(Value* seed, Value* index, Value* words[2]) {
    Type* i32 = b_.getInt32Ty();
    Type* i64 = b_.getInt64Ty();
    auto lo = [&](Value* v) { return b_.CreateTrunc(v, i32); };
    auto hi = [&](Value* v) { return b_.CreateTrunc(b_.CreateLShr(v, 32), i32); };
    Value* c[4] = {lo(index), hi(index), b_.getInt32(0), b_.getInt32(0)};
    Value* key[2] = {lo(seed), hi(seed)};
    for (int round = 0; round < 10; ++round) {
      if (round > 0) {
        key[0] = b_.CreateAdd(key[0], b_.getInt32(0x9E3779B9u));
        key[1] = b_.CreateAdd(key[1], b_.getInt32(0xBB67AE85u));
      }
      Value* p0 = b_.CreateMul(b_.getInt64(0xD2511F53u), b_.CreateZExt(c[0], i64));
      Value* p1 = b_.CreateMul(b_.getInt64(0xCD9E8D57u), b_.CreateZExt(c[2], i64));
      Value* next[4] = {b_.CreateXor(b_.CreateXor(hi(p1), c[1]), key[0]), lo(p1),
                        b_.CreateXor(b_.CreateXor(hi(p0), c[3]), key[1]), lo(p0)};
      std::copy(next, next + 4, c);
    }
    // r0:r1, then r2:r3 (the second word only when asked).
    words[0] = b_.CreateOr(b_.CreateShl(b_.CreateZExt(c[0], i64), 32), b_.CreateZExt(c[1], i64));
    words[1] = b_.CreateOr(b_.CreateShl(b_.CreateZExt(c[2], i64), 32), b_.CreateZExt(c[3], i64));
  }

  // Element `index` of generated input k, as its op's kernel computes it.
  Value* generated(int k, Value* index) {
    const Generator& g = *sg_.inputs[k].generator;
    const DType t = sg_.inputs[k].dtype;
    Value* words[2];
    philox_words(seeds_[k], index, words);
    Value* word = words[0];
    Type* f64_ty = b_.getDoubleTy();
    if (g.kind == Generator::Kind::kNormal) {
      // Box-Muller as the kernel computes it in f64: u1 in (0, 1], each operation rounded.
      auto unit = [&](Value* w) {
        return b_.CreateFMul(b_.CreateUIToFP(b_.CreateLShr(w, 11), f64_ty),
                             fconst(f64_ty, std::ldexp(1.0, -53)));
      };
      Value* u1 = b_.CreateFSub(fconst(f64_ty, 1.0), unit(words[0]));
      Value* u2 = unit(words[1]);
      Value* r = unary_intrinsic(llvm::Intrinsic::sqrt,
                                 b_.CreateFMul(fconst(f64_ty, -2.0), libm("log", u1)));
      Value* n = b_.CreateFMul(
          r, unary_intrinsic(llvm::Intrinsic::cos,
                             b_.CreateFMul(fconst(f64_ty, 2.0 * std::numbers::pi), u2)));
      Value* d = b_.CreateFAdd(fconst(f64_ty, g.mean), b_.CreateFMul(fconst(f64_ty, g.stddev), n));
      return b_.CreateFPCast(d, reg_type(t));
    }
    if (g.kind == Generator::Kind::kBernoulli) {
      // The top 53 bits as an integer k: k / 2^53 < p exactly when k < ceil(p 2^53).
      Value* hit = b_.CreateICmpULT(b_.CreateLShr(word, 11), b_.getInt64(g.threshold));
      Value* v = convert(hit, bool_, compute_type(t));
      return is_narrow(t) ? rounded(v, t) : v;
    }
    // low + span * u in f64 (separate fmul and fadd, as the kernel rounds), rounded once to t;
    // a value that reaches `high` steps down to the largest t below it.
    Value* top = b_.CreateLShr(word, 64 - g.bits);
    Value* u = b_.CreateFMul(b_.CreateUIToFP(top, f64_ty), fconst(f64_ty, std::ldexp(1.0, -g.bits)));
    Value* d = b_.CreateFAdd(fconst(f64_ty, g.low), b_.CreateFMul(fconst(f64_ty, g.span), u));
    Type* rt = reg_type(t);
    Value* v = b_.CreateFPCast(d, rt);
    Value* reached = b_.CreateFCmpOGE(b_.CreateFPCast(v, f64_ty), fconst(f64_ty, g.high));
    return b_.CreateSelect(reached, fconst(rt, g.below_high), v);
  }

  // The values of every node at one point (nullptr for reductions).
  std::vector<Value*> compute(const std::vector<Value*>& in) {
    std::vector<Value*> vals(in);
    for (const FusedSubgraph::Node& n : sg_.nodes) {
      if (n.reduce) {
        vals.push_back(nullptr);
        continue;
      }
      // bf16 and f16 compute in f32 and round each result, as their reference kernels do; with
      // excess precision, only where the value leaves its dtype (a convert, a comparison) or is
      // stored.
      const bool round_args =
          sg_.excess_precision && (n.op == EltOp::kConvert || !is_narrow(n.dtype));
      const bool round_result = !sg_.excess_precision || n.op == EltOp::kConvert;
      std::vector<Value*> args;
      std::vector<DType> types;
      for (int a : n.args) {
        DType t = sg_.dtype(a);
        args.push_back(round_args && is_narrow(t) ? rounded(vals[a], t) : vals[a]);
        types.push_back(compute_type(t));
      }
      if (n.op == EltOp::kSelect && is_narrow(n.dtype)) {  // moves bits, as its kernel does
        vals.push_back(select_keeping_bits(args[0], args[1], args[2], n.dtype));
        continue;
      }
      Value* v = emit_prim(n.op, args, types, compute_type(n.dtype));
      if (is_narrow(n.dtype) && round_result) {  // the rounded bits, kept for a store, and
        Value* bits = narrow(v, n.dtype);         // their f32 value (always a new value: a
        v = widen(bits, n.dtype);                 // convert between 16-bit types returns its
        bits_[v] = bits;                          // operand, whose bits are the other type's)
      }
      vals.push_back(v);
    }
    return vals;
  }

  void store(int o, Value* v, Value* index) {
    DType t = sg_.dtype(sg_.outputs[o]);
    if (t == bool_) v = b_.CreateZExt(v, b_.getInt8Ty());
    if (is_narrow(t)) v = bits_of(v, t);
    Type* mt = mem_type(t);
    llvm::StoreInst* st = b_.CreateStore(v, b_.CreateInBoundsGEP(mt, out_ptrs_[o], index));
    if (access_group_) st->setMetadata(llvm::LLVMContext::MD_access_group, access_group_);
  }

  // ---- reductions ----

  // One collapsed dimension of the iteration space: its size, whether it is reduced, and the
  // element stride of every access along it (inputs, then iteration-shaped outputs).
  struct Dim {
    int64_t size;
    bool reduced;
    std::vector<int64_t> st;
  };

  template <class Body>
  void emit_guarded_loop(Value* lo, Value* hi, const char* name, bool innermost, Body body) {
    auto* enter = llvm::BasicBlock::Create(ctx_, std::string(name) + "_enter", fn_);
    auto* after = llvm::BasicBlock::Create(ctx_, std::string(name) + "_after", fn_);
    b_.CreateCondBr(b_.CreateICmpSLT(lo, hi), enter, after);
    b_.SetInsertPoint(enter);
    emit_loop(lo, hi, after, name, innermost, body);
  }

  Value* identity(ReduceKind k, DType t) {
    Type* ty = reg_type(t);
    bool fp = t == f32 || t == f64;
    switch (k) {
      case ReduceKind::kSum: return zero(t);
      case ReduceKind::kProd: return fp ? fconst(ty, 1) : llvm::ConstantInt::get(ty, 1);
      case ReduceKind::kMax:
        return fp ? llvm::ConstantFP::getInfinity(ty, /*Negative=*/true)
                  : llvm::ConstantInt::get(
                        ty, llvm::APInt::getSignedMinValue(ty->getIntegerBitWidth()));
      case ReduceKind::kMin:
        return fp ? llvm::ConstantFP::getInfinity(ty)
                  : llvm::ConstantInt::get(
                        ty, llvm::APInt::getSignedMaxValue(ty->getIntegerBitWidth()));
    }
    return zero(t);
  }

  // The vectorizable recurrence step of a row reduction (NaN handled by a separate flag).
  Value* fold_fast(ReduceKind k, DType t, Value* acc, Value* v) {
    bool fp = t == f32 || t == f64;
    llvm::FastMathFlags fmf;
    switch (k) {
      case ReduceKind::kSum:
      case ReduceKind::kProd: {
        if (!fp) return k == ReduceKind::kSum ? b_.CreateAdd(acc, v) : b_.CreateMul(acc, v);
        fmf.setAllowReassoc();
        Value* r = k == ReduceKind::kSum ? b_.CreateFAdd(acc, v) : b_.CreateFMul(acc, v);
        llvm::cast<llvm::Instruction>(r)->setFastMathFlags(fmf);
        return r;
      }
      case ReduceKind::kMax:
      case ReduceKind::kMin: {
        bool mx = k == ReduceKind::kMax;
        if (!fp)
          return b_.CreateBinaryIntrinsic(mx ? llvm::Intrinsic::smax : llvm::Intrinsic::smin,
                                          acc, v);
        fmf.setNoNaNs();
        fmf.setNoSignedZeros();
        Value* r = b_.CreateBinaryIntrinsic(
            mx ? llvm::Intrinsic::maxnum : llvm::Intrinsic::minnum, acc, v);
        llvm::cast<llvm::Instruction>(r)->setFastMathFlags(fmf);
        return r;
      }
    }
    return acc;
  }

  // The exact (NaN-propagating) step of a column reduction; an elementwise operation.
  Value* fold_exact(ReduceKind k, DType t, Value* acc, Value* v) {
    bool fp = t == f32 || t == f64;
    switch (k) {
      case ReduceKind::kSum: return fp ? b_.CreateFAdd(acc, v) : b_.CreateAdd(acc, v);
      case ReduceKind::kProd: return fp ? b_.CreateFMul(acc, v) : b_.CreateMul(acc, v);
      case ReduceKind::kMax: return max_min(acc, v, fp, true);
      case ReduceKind::kMin: return max_min(acc, v, fp, false);
    }
    return acc;
  }

  void emit_reduce(Value* begin, Value* end, llvm::BasicBlock* exit) {
    const int rank = static_cast<int>(shape_.size());
    const size_t n_in = sg_.inputs.size();
    std::vector<int> full_outs, red_outs;  // output indices
    for (size_t o = 0; o < sg_.outputs.size(); ++o)
      (sg_.is_reduction(sg_.outputs[o]) ? red_outs : full_outs).push_back(static_cast<int>(o));
    const size_t n_acc = n_in + full_outs.size();
    std::vector<std::vector<int64_t>> strides = input_strides(rank);
    strides.resize(n_acc, std::vector<int64_t>(rank, 0));
    for (size_t f = 0; f < full_outs.size(); ++f) {
      int64_t st = 1;
      for (int d = rank - 1; d >= 0; --d) {
        strides[n_in + f][d] = st;
        st *= shape_[d];
      }
    }
    // Collapse, outer to inner.
    std::vector<Dim> dims;
    for (int d = 0; d < rank; ++d) {
      if (shape_[d] == 1) continue;
      bool red = std::binary_search(sg_.reduce_axes.begin(), sg_.reduce_axes.end(),
                                    static_cast<int64_t>(d));
      std::vector<int64_t> st(n_acc);
      for (size_t k = 0; k < n_acc; ++k) st[k] = strides[k][d];
      bool merge = !dims.empty() && dims.back().reduced == red;
      for (size_t k = 0; merge && k < n_acc; ++k) merge = dims.back().st[k] == st[k] * shape_[d];
      if (merge) {
        dims.back().size *= shape_[d];
        dims.back().st = st;
      } else {
        dims.push_back({shape_[d], red, st});
      }
    }
    std::vector<Dim> kept_outer, red, kept_inner;
    for (const Dim& d : dims) {
      if (d.reduced) {
        red.push_back(d);
      } else {
        (red.empty() ? kept_outer : kept_inner).push_back(d);
      }
    }
    if (red.empty()) red.push_back({1, true, std::vector<int64_t>(n_acc, 0)});
    split_size_ = red[0].size;
    const bool column = !kept_inner.empty();
    std::vector<Dim> row_dims = kept_outer;
    int64_t cols = 1;
    Dim col_dim{1, false, std::vector<int64_t>(n_acc, 0)};
    if (column) {
      col_dim = kept_inner.back();
      cols = col_dim.size;
      row_dims.insert(row_dims.end(), kept_inner.begin(), kept_inner.end() - 1);
    }

    // Accumulators have each reduction's accumulator dtype (f64 for f32, bf16 and f16 sums and
    // products; f32 for bf16 and f16 max and min).
    // Row kernels keep theirs in allocas (promoted to registers by mem2reg); float max and min
    // fold with maxnum/minnum `nnan nsz`, beside an or-reduced NaN flag and a flag for whether
    // the preferred zero (+0 for max, -0 for min) was seen. Column kernels fold column_block_
    // columns at a time into stack arrays, then store them.
    auto red_kind = [&](int o) { return *sg_.nodes[sg_.outputs[o] - n_in].reduce; };
    auto red_type = [&](int o) { return sg_.dtype(sg_.outputs[o]); };
    auto acc_type = [&](int o) { return accumulator_dtype(red_kind(o), red_type(o)); };
    std::vector<llvm::AllocaInst*> acc(red_outs.size()), nan(red_outs.size()),
        zero(red_outs.size());
    {
      llvm::IRBuilder<> eb(&fn_->getEntryBlock(), fn_->getEntryBlock().begin());
      for (size_t q = 0; q < red_outs.size(); ++q) {
        Type* at = reg_type(acc_type(red_outs[q]));
        if (column) {
          acc[q] = eb.CreateAlloca(llvm::ArrayType::get(at, column_block_));
          acc[q]->setAlignment(llvm::Align(64));
        } else {
          acc[q] = eb.CreateAlloca(at);
          nan[q] = eb.CreateAlloca(b_.getInt1Ty());
          zero[q] = eb.CreateAlloca(b_.getInt1Ty());
        }
      }
    }
    bool wide = false;  // some reduction accumulates wider than its dtype
    for (int o : red_outs) wide = wide || acc_type(o) != red_type(o);

    Value* c_cols = b_.getInt64(cols);
    Value* r_lo = column ? b_.CreateSDiv(begin, c_cols) : begin;
    Value* r_hi = column ? b_.CreateSDiv(b_.CreateAdd(end, b_.getInt64(cols - 1)), c_cols) : end;
    emit_loop(r_lo, r_hi, exit, "rows", /*innermost=*/false, [&](Value* r) {
      // Offsets of every access at the start of row r.
      std::vector<Value*> offs = input_offsets(n_acc);
      Value* rest = r;
      for (int d = static_cast<int>(row_dims.size()) - 1; d >= 0; --d) {
        Value* idx = d > 0 ? b_.CreateURem(rest, b_.getInt64(row_dims[d].size)) : rest;
        if (d > 0) rest = b_.CreateUDiv(rest, b_.getInt64(row_dims[d].size));
        for (size_t k = 0; k < n_acc; ++k)
          if (row_dims[d].st[k] != 0)
            offs[k] = b_.CreateAdd(offs[k], b_.CreateMul(idx, b_.getInt64(row_dims[d].st[k])));
      }
      Value* base = b_.CreateMul(r, c_cols);
      auto eval_at = [&](const std::vector<Value*>& o) {
        std::vector<Value*> in(n_in);
        for (size_t k = 0; k < n_in; ++k)
          in[k] = sg_.inputs[k].gather ? gathered(static_cast<int>(k), o[k], in)
                                       : load(static_cast<int>(k), o[k]);
        std::vector<Value*> vals = compute(in);
        for (size_t f = 0; f < full_outs.size(); ++f)
          store(full_outs[f], vals[sg_.outputs[full_outs[f]]], o[n_in + f]);
        return vals;
      };
      // The value reduction output o folds, in its accumulator dtype.
      auto red_value = [&](const std::vector<Value*>& vals, int o) {
        Value* v = vals[sg_.nodes[sg_.outputs[o] - n_in].args[0]];
        Type* at = reg_type(acc_type(o));  // bf16/f16 values are f32 already
        return v->getType() == at ? v : b_.CreateFPExt(v, at);
      };
      auto add_offsets = [&](const std::vector<Value*>& o, const Dim& d, Value* i) {
        std::vector<Value*> out(o);
        for (size_t k = 0; k < n_acc; ++k)
          if (d.st[k] != 0)
            out[k] = d.st[k] == 1 ? b_.CreateAdd(o[k], i)
                                  : b_.CreateAdd(o[k], b_.CreateMul(i, b_.getInt64(d.st[k])));
        return out;
      };
      auto tag = [&](llvm::Instruction* inst) {
        if (access_group_) inst->setMetadata(llvm::LLVMContext::MD_access_group, access_group_);
        return inst;
      };
      // Stores accumulator `a` as element `index` of reduction output o: rounded to the output's
      // dtype, or with `raw` as it is (kernel_part's `partial`: into run()'s scratch).
      auto store_result = [&](int o, Value* a, Value* index, bool raw) {
        DType t = raw ? acc_type(o) : red_type(o);
        if (a->getType() != reg_type(t)) a = b_.CreateFPTrunc(a, reg_type(t));
        if (is_narrow(t)) a = narrow(a, t);  // f64 -> f32 -> 16 bits, as the reference rounds
        tag(b_.CreateStore(a, b_.CreateInBoundsGEP(mem_type(t), out_ptrs_[o], index)));
      };
      // Emits stores(raw) for raw = false, and with wide accumulators also for raw = true,
      // chosen by kernel_part's `partial` argument.
      auto store_all = [&](const std::function<void(bool)>& stores) {
        if (!wide) return stores(false);
        auto* raw = llvm::BasicBlock::Create(ctx_, "store_raw", fn_);
        auto* rounded = llvm::BasicBlock::Create(ctx_, "store_rounded", fn_);
        auto* done = llvm::BasicBlock::Create(ctx_, "stored", fn_);
        b_.CreateCondBr(b_.CreateICmpNE(partial_, b_.getInt64(0)), raw, rounded);
        for (auto [bb, is_raw] : {std::pair{raw, true}, std::pair{rounded, false}}) {
          b_.SetInsertPoint(bb);
          stores(is_raw);
          b_.CreateBr(done);
        }
        b_.SetInsertPoint(done);
      };
      // Column kernels: accumulator q of column col_lo + j.
      Value* col_lo = nullptr;
      Value* col_n = nullptr;
      auto slot = [&](size_t q, Value* j) {
        return b_.CreateInBoundsGEP(acc[q]->getAllocatedType(), acc[q], {b_.getInt64(0), j});
      };

      // Column kernels: folds the block's columns at each of `rows` (offsets of reduced
      // positions, in order) into its accumulators, loading and storing each accumulator once.
      auto fold_columns = [&](const std::vector<std::vector<Value*>>& rows) {
        emit_guarded_loop(b_.getInt64(0), col_n, "cols", true, [&](Value* j) {
          std::vector<Value*> a(red_outs.size());
          for (size_t q = 0; q < red_outs.size(); ++q)
            a[q] = tag(b_.CreateLoad(reg_type(acc_type(red_outs[q])), slot(q, j)));
          for (const std::vector<Value*>& o : rows) {
            std::vector<Value*> vals = eval_at(add_offsets(o, col_dim, b_.CreateAdd(col_lo, j)));
            for (size_t q = 0; q < red_outs.size(); ++q) {
              int oi = red_outs[q];
              a[q] = fold_exact(red_kind(oi), acc_type(oi), a[q], red_value(vals, oi));
            }
          }
          for (size_t q = 0; q < red_outs.size(); ++q) tag(b_.CreateStore(a[q], slot(q, j)));
        });
      };

      // The nest over the reduced dimensions; the innermost loop runs over the last reduced
      // dimension (row kernel) or across the block's columns (column kernel, kColumnJam
      // reduced positions at a time: unroll-and-jam, so the accumulators' loads and stores,
      // f64 for f32 sums, cost less than the adds).
      std::function<void(size_t, const std::vector<Value*>&)> nest =
          [&](size_t level, const std::vector<Value*>& o) {
            if (column && level + 1 == red.size()) {
              const Dim& d = red[level];
              Value* lo = lo_of(level);
              Value* hi = hi_of(level, d);
              Value* jam = b_.getInt64(kColumnJam);
              Value* groups = b_.CreateSDiv(b_.CreateSub(hi, lo), jam);
              emit_guarded_loop(b_.getInt64(0), groups, "red_jam", false, [&](Value* g) {
                Value* i0 = b_.CreateAdd(lo, b_.CreateMul(g, jam));
                std::vector<std::vector<Value*>> rows;
                for (int64_t u = 0; u < kColumnJam; ++u)
                  rows.push_back(add_offsets(o, d, b_.CreateAdd(i0, b_.getInt64(u))));
                fold_columns(rows);
              });
              emit_guarded_loop(b_.CreateAdd(lo, b_.CreateMul(groups, jam)), hi, "red", false,
                                [&](Value* i) { fold_columns({add_offsets(o, d, i)}); });
              return;
            }
            size_t outer_levels = column ? red.size() : red.size() - 1;
            if (level < outer_levels) {
              const Dim& d = red[level];
              emit_guarded_loop(lo_of(level), hi_of(level, d), "red", false,
                                [&](Value* i) { nest(level + 1, add_offsets(o, d, i)); });
              return;
            }
            const Dim& d = red.back();
            emit_guarded_loop(lo_of(level), hi_of(level, d), "fold", true, [&](Value* i) {
              std::vector<Value*> vals = eval_at(add_offsets(o, d, i));
              for (size_t q = 0; q < red_outs.size(); ++q) {
                int oi = red_outs[q];
                DType at = acc_type(oi);
                Value* v = red_value(vals, oi);
                Value* a = b_.CreateLoad(reg_type(at), acc[q]);
                b_.CreateStore(fold_fast(red_kind(oi), at, a, v), acc[q]);
                bool minmax = red_kind(oi) == ReduceKind::kMax || red_kind(oi) == ReduceKind::kMin;
                if (minmax && (at == f32 || at == f64)) {
                  Value* f = b_.CreateLoad(b_.getInt1Ty(), nan[q]);
                  b_.CreateStore(b_.CreateOr(f, is_nan(v)), nan[q]);
                  Value* z = b_.CreateLoad(b_.getInt1Ty(), zero[q]);
                  bool mx = red_kind(oi) == ReduceKind::kMax;
                  b_.CreateStore(b_.CreateOr(z, is_preferred_zero(v, mx)), zero[q]);
                }
              }
            });
          };

      if (column) {
        // This row's columns [j_lo, j_hi), a block at a time.
        Value* j_lo = smax(b_.CreateSub(begin, base), b_.getInt64(0));
        Value* j_hi = smin(b_.CreateSub(end, base), c_cols);
        Value* c_block = b_.getInt64(column_block_);
        Value* blocks = b_.CreateSDiv(
            b_.CreateAdd(b_.CreateSub(j_hi, j_lo), b_.getInt64(column_block_ - 1)), c_block);
        emit_guarded_loop(b_.getInt64(0), blocks, "col_blocks", false, [&](Value* kb) {
          col_lo = b_.CreateAdd(j_lo, b_.CreateMul(kb, c_block));
          col_n = smin(b_.CreateSub(j_hi, col_lo), c_block);
          emit_guarded_loop(b_.getInt64(0), col_n, "init", true, [&](Value* j) {
            for (size_t q = 0; q < red_outs.size(); ++q) {
              int oi = red_outs[q];
              tag(b_.CreateStore(identity(red_kind(oi), acc_type(oi)), slot(q, j)));
            }
          });
          nest(0, offs);
          store_all([&](bool raw) {
            emit_guarded_loop(b_.getInt64(0), col_n, "finish", true, [&](Value* j) {
              Value* index = b_.CreateAdd(base, b_.CreateAdd(col_lo, j));
              for (size_t q = 0; q < red_outs.size(); ++q) {
                int oi = red_outs[q];
                Value* a = tag(b_.CreateLoad(reg_type(acc_type(oi)), slot(q, j)));
                store_result(oi, a, index, raw);
              }
            });
          });
        });
        return;
      }

      for (size_t q = 0; q < red_outs.size(); ++q) {
        b_.CreateStore(identity(red_kind(red_outs[q]), acc_type(red_outs[q])), acc[q]);
        b_.CreateStore(b_.getFalse(), nan[q]);
        b_.CreateStore(b_.getFalse(), zero[q]);
      }
      nest(0, offs);
      std::vector<Value*> results;
      for (size_t q = 0; q < red_outs.size(); ++q) {
        int oi = red_outs[q];
        DType at = acc_type(oi);
        Value* a = b_.CreateLoad(reg_type(at), acc[q]);
        bool minmax = red_kind(oi) == ReduceKind::kMax || red_kind(oi) == ReduceKind::kMin;
        if (minmax && (at == f32 || at == f64)) {
          // maxnum/minnum `nsz` leave a zero extreme's sign open: +0 for max if any +0 was
          // folded, else -0; -0 for min if any -0 was, else +0.
          bool mx = red_kind(oi) == ReduceKind::kMax;
          Type* ty = a->getType();
          Value* seen = b_.CreateLoad(b_.getInt1Ty(), zero[q]);
          Value* preferred = fconst(ty, mx ? 0.0 : -0.0);
          Value* other = fconst(ty, mx ? -0.0 : 0.0);
          a = b_.CreateSelect(b_.CreateFCmpOEQ(a, fconst(ty, 0)),
                              b_.CreateSelect(seen, preferred, other), a);
          Value* f = b_.CreateLoad(b_.getInt1Ty(), nan[q]);
          a = b_.CreateSelect(f, llvm::ConstantFP::getNaN(ty), a);
        }
        results.push_back(a);
      }
      store_all([&](bool raw) {
        for (size_t q = 0; q < red_outs.size(); ++q) store_result(red_outs[q], results[q], r, raw);
      });
    });
  }

  // The range of reduced dimension `level` (the outermost one is kernel_part's [lo, hi)).
  Value* lo_of(size_t level) { return level == 0 ? red_lo_ : b_.getInt64(0); }
  Value* hi_of(size_t level, const Dim& d) {
    return level == 0 ? red_hi_ : b_.getInt64(d.size);
  }

  void emit_body(const std::vector<Value*>& in, Value* index) {
    std::vector<Value*> vals = compute(in);
    for (size_t o = 0; o < sg_.outputs.size(); ++o) store(static_cast<int>(o), vals[sg_.outputs[o]], index);
  }

  // ---- ops ----

  Value* emit_prim(EltOp op, const std::vector<Value*>& a, const std::vector<DType>& ts, DType out) {
    DType t = ts[0];
    bool fp = t == f32 || t == f64;
    Value* x = a[0];
    switch (op) {
      case EltOp::kNeg: return fp ? b_.CreateFNeg(x) : b_.CreateSub(zero(t), x);
      case EltOp::kAbs:
        return fp ? unary_intrinsic(llvm::Intrinsic::fabs, x)
                  : b_.CreateSelect(b_.CreateICmpSLT(x, zero(t)), b_.CreateSub(zero(t), x), x);
      case EltOp::kExp: return t == f32 ? exp_f32(x, non_positive(x)) : libm("exp", x);
      case EltOp::kLog: return t == f32 ? log_f32(x) : libm("log", x);
      case EltOp::kLog1p: return libm(t == f32 ? "log1pf" : "log1p", x);
      case EltOp::kExpm1: return libm(t == f32 ? "expm1f" : "expm1", x);
      case EltOp::kSqrt: return unary_intrinsic(llvm::Intrinsic::sqrt, x);
      case EltOp::kRsqrt:
        return b_.CreateFDiv(fconst(x->getType(), 1), unary_intrinsic(llvm::Intrinsic::sqrt, x));
      case EltOp::kTanh: return t == f32 ? tanh_f32(x) : libm("tanh", x);
      case EltOp::kLogistic: return logistic(x, t);
      case EltOp::kSin: return unary_intrinsic(llvm::Intrinsic::sin, x);
      case EltOp::kCos: return unary_intrinsic(llvm::Intrinsic::cos, x);
      case EltOp::kTan: return libm(t == f32 ? "tanf" : "tan", x);
      case EltOp::kIsFinite:
        return b_.CreateFCmpOLT(unary_intrinsic(llvm::Intrinsic::fabs, x),
                                fconst(x->getType(), std::numeric_limits<double>::infinity()));
      case EltOp::kNot: return b_.CreateNot(x);
      case EltOp::kErf: return t == f32 ? erf_f32(x) : libm("erf", x);
      case EltOp::kSign: return sign(x, t);
      case EltOp::kFloor: return unary_intrinsic(llvm::Intrinsic::floor, x);
      case EltOp::kCeil: return unary_intrinsic(llvm::Intrinsic::ceil, x);
      case EltOp::kRound: return unary_intrinsic(llvm::Intrinsic::roundeven, x);
      case EltOp::kConvert: return convert(x, t, out);
      case EltOp::kAdd: return fp ? b_.CreateFAdd(x, a[1]) : b_.CreateAdd(x, a[1]);
      case EltOp::kSub: {
        if (miscompile_sub_for_tests()) return fp ? b_.CreateFSub(a[1], x) : b_.CreateSub(a[1], x);
        return fp ? b_.CreateFSub(x, a[1]) : b_.CreateSub(x, a[1]);
      }
      case EltOp::kMul: return fp ? b_.CreateFMul(x, a[1]) : b_.CreateMul(x, a[1]);
      case EltOp::kDiv: return fp ? b_.CreateFDiv(x, a[1]) : int_div(x, a[1], t);
      case EltOp::kRem: return fp ? b_.CreateFRem(x, a[1]) : int_rem(x, a[1], t);
      case EltOp::kAtan2: return libm(t == f32 ? "atan2f" : "atan2", x, a[1]);
      case EltOp::kAnd: return b_.CreateAnd(x, a[1]);
      case EltOp::kOr: return b_.CreateOr(x, a[1]);
      case EltOp::kPow:
        return b_.CreateBinaryIntrinsic(llvm::Intrinsic::pow, x, a[1]);
      case EltOp::kMax: return max_min(x, a[1], fp, /*max=*/true);
      case EltOp::kMin: return max_min(x, a[1], fp, /*max=*/false);
      case EltOp::kEq: return fp ? b_.CreateFCmpOEQ(x, a[1]) : b_.CreateICmpEQ(x, a[1]);
      case EltOp::kNe: return fp ? b_.CreateFCmpUNE(x, a[1]) : b_.CreateICmpNE(x, a[1]);
      case EltOp::kLt: return fp ? b_.CreateFCmpOLT(x, a[1]) : b_.CreateICmpSLT(x, a[1]);
      case EltOp::kLe: return fp ? b_.CreateFCmpOLE(x, a[1]) : b_.CreateICmpSLE(x, a[1]);
      case EltOp::kGt: return fp ? b_.CreateFCmpOGT(x, a[1]) : b_.CreateICmpSGT(x, a[1]);
      case EltOp::kGe: return fp ? b_.CreateFCmpOGE(x, a[1]) : b_.CreateICmpSGE(x, a[1]);
      case EltOp::kSelect: return b_.CreateSelect(x, a[1], a[2]);
      case EltOp::kClamp:
        return max_min(max_min(x, a[1], fp, true), a[2], fp, false);
    }
    throw Error(ErrorCode::kInternal, "codegen: unhandled op");
  }

  Value* zero(DType t) { return llvm::Constant::getNullValue(reg_type(t)); }
  Value* fconst(Type* t, double v) { return llvm::ConstantFP::get(t, v); }
  Value* unary_intrinsic(llvm::Intrinsic::ID id, Value* x) {
    return b_.CreateUnaryIntrinsic(id, x);
  }
  Value* is_nan(Value* x) { return b_.CreateFCmpUNO(x, x); }
  // Whether x is -(a*a) or -|a|: never above 0 (e^(-x^2), as in a Gaussian, takes the cheaper exp).
  static bool non_positive(Value* x) {
    using namespace llvm::PatternMatch;
    Value* a = nullptr;
    return match(x, m_FNeg(m_FMul(m_Value(a), m_Deferred(a)))) ||
           match(x, m_FNeg(m_FAbs(m_Value(a))));
  }

  // A scalar libm function, declared in the module; resolved from the process by the JIT.
  // A call to the C library's `name` on x (and y): the reference kernels call the same
  // functions, so both give the same bits.
  Value* libm(const char* name, Value* x, Value* y = nullptr) {
    llvm::Function* fn = m_.getFunction(name);
    if (!fn) {
      std::vector<Type*> params(y ? 2 : 1, x->getType());
      auto* fty = llvm::FunctionType::get(x->getType(), params, false);
      fn = llvm::Function::Create(fty, llvm::Function::ExternalLinkage, name, m_);
      fn->setDoesNotThrow();
      fn->setWillReturn();
    }
    return y ? b_.CreateCall(fn, {x, y}) : b_.CreateCall(fn, {x});
  }

  // XLA's semantics, as ops/max_min.h: NaN if either operand is NaN; -0 below +0; otherwise
  // a > b ? a : b (max). Equal operands differ only as a -0/+0 pair, whose sign bits max ands
  // (+0) and min ors (-0).
  Value* max_min(Value* x, Value* y, bool fp, bool is_max) {
    if (!fp) return b_.CreateSelect(is_max ? b_.CreateICmpSGT(x, y) : b_.CreateICmpSLT(x, y), x, y);
    Value* pick = b_.CreateSelect(is_max ? b_.CreateFCmpOGT(x, y) : b_.CreateFCmpOLT(x, y), x, y);
    Type* ty = x->getType();
    Type* it = b_.getIntNTy(ty->getPrimitiveSizeInBits());
    Value* xi = b_.CreateBitCast(x, it);
    Value* yi = b_.CreateBitCast(y, it);
    Value* tie = b_.CreateBitCast(is_max ? b_.CreateAnd(xi, yi) : b_.CreateOr(xi, yi), ty);
    pick = b_.CreateSelect(b_.CreateFCmpOEQ(x, y), tie, pick);
    return b_.CreateSelect(b_.CreateFCmpUNO(x, y), llvm::ConstantFP::getNaN(ty), pick);
  }

  // Whether x is the zero a max (+0) or min (-0) reduction must return when its extreme is 0.
  Value* is_preferred_zero(Value* x, bool is_max) {
    const unsigned width = x->getType()->getPrimitiveSizeInBits();
    Value* bits = llvm::ConstantInt::get(
        ctx_, is_max ? llvm::APInt::getZero(width) : llvm::APInt::getSignMask(width));
    return b_.CreateICmpEQ(b_.CreateBitCast(x, b_.getIntNTy(width)), bits);
  }

  Value* sign(Value* x, DType t) {
    if (t == f32 || t == f64) {
      Type* ty = x->getType();
      Value* s = b_.CreateSelect(b_.CreateFCmpOGT(x, fconst(ty, 0)), fconst(ty, 1),
                                 b_.CreateSelect(b_.CreateFCmpOLT(x, fconst(ty, 0)),
                                                 fconst(ty, -1), fconst(ty, 0)));
      return b_.CreateSelect(is_nan(x), x, s);
    }
    Type* ty = x->getType();
    return b_.CreateSelect(
        b_.CreateICmpSGT(x, zero(t)), llvm::ConstantInt::get(ty, 1),
        b_.CreateSelect(b_.CreateICmpSLT(x, zero(t)), llvm::ConstantInt::getSigned(ty, -1),
                        zero(t)));
  }

  // Integer division never traps: x / 0 = -1 and MIN / -1 = MIN (XLA's, and the interpreter's).
  // As the reference kernel's safe_rem: x % 0 is x, x % -1 is 0 (INT_MIN % -1 would trap).
  Value* int_rem(Value* x, Value* y, DType t) {
    Type* ty = x->getType();
    Value* by_zero = b_.CreateICmpEQ(y, zero(t));
    Value* minus_one = b_.CreateICmpEQ(y, llvm::ConstantInt::getSigned(ty, -1));
    Value* safe_y = b_.CreateSelect(b_.CreateOr(by_zero, minus_one), llvm::ConstantInt::get(ty, 1), y);
    Value* r = b_.CreateSRem(x, safe_y);
    return b_.CreateSelect(by_zero, x, b_.CreateSelect(minus_one, zero(t), r));
  }

  Value* int_div(Value* x, Value* y, DType t) {
    Type* ty = x->getType();
    Value* by_zero = b_.CreateICmpEQ(y, zero(t));
    Value* overflow = b_.CreateAnd(
        b_.CreateICmpEQ(x, llvm::ConstantInt::get(
                               ty, llvm::APInt::getSignedMinValue(ty->getIntegerBitWidth()))),
        b_.CreateICmpEQ(y, llvm::ConstantInt::getSigned(ty, -1)));
    Value* safe_y = b_.CreateSelect(b_.CreateOr(by_zero, overflow), llvm::ConstantInt::get(ty, 1), y);
    Value* q = b_.CreateSDiv(x, safe_y);
    return b_.CreateSelect(by_zero, llvm::ConstantInt::getSigned(ty, -1), q);
  }

  // Float to integer truncates toward zero and saturates, NaN gives 0; anything non-zero is
  // true; integers wrap. u8 is the one unsigned dtype.
  Value* convert(Value* x, DType from, DType to) {
    if (from == to) return x;
    Type* rt = reg_type(to);
    bool ff = from == f32 || from == f64, tf = to == f32 || to == f64;
    if (to == bool_)
      return ff ? b_.CreateFCmpUNE(x, fconst(x->getType(), 0)) : b_.CreateICmpNE(x, zero(from));
    const bool unsigned_from = from == bool_ || from == u8;
    if (ff && tf) return b_.CreateFPCast(x, rt);
    if (!ff && tf) return unsigned_from ? b_.CreateUIToFP(x, rt) : b_.CreateSIToFP(x, rt);
    if (ff && !tf) {
      auto saturating = to == u8 ? llvm::Intrinsic::fptoui_sat : llvm::Intrinsic::fptosi_sat;
      return b_.CreateIntrinsic(saturating, {rt, x->getType()}, {x});
    }
    return unsigned_from ? b_.CreateZExtOrTrunc(x, rt) : b_.CreateSExtOrTrunc(x, rt);
  }

  // ---- f32 approximations: ops/approximations.h's, as IR (see the file comment) ----

  Value* exp_f32(Value* x, bool non_positive = false) {
    IrMath m{b_};
    return kiln::ops::exp_f32(m, x, non_positive);
  }

  Value* log_f32(Value* x) {
    IrMath m{b_};
    return kiln::ops::log_f32(m, x);
  }

  Value* tanh_f32(Value* x) {
    IrMath m{b_};
    return kiln::ops::tanh_f32(m, x);
  }

  // f64: 1/(1+e^-x) for x >= 0, e^x/(1+e^x) below, as ops::logistic_f32 with libm's exp.
  Value* logistic(Value* x, DType t) {
    IrMath m{b_};
    if (t == f32) return kiln::ops::logistic_f32(m, x);
    Type* ty = x->getType();
    // As the reference kernel (ops/elementwise.cc, logistic_of): 1 / (1 + e^-x) for x >= 0,
    // e^x / (1 + e^x) below, each rounded once.
    Value* e = libm("exp", b_.CreateFNeg(unary_intrinsic(llvm::Intrinsic::fabs, x)));
    Value* den = b_.CreateFAdd(fconst(ty, 1), e);
    Value* num = b_.CreateSelect(b_.CreateFCmpOGE(x, fconst(ty, 0)), fconst(ty, 1), e);
    return b_.CreateFDiv(num, den);
  }

  Value* erf_f32(Value* x) {
    IrMath m{b_};
    return kiln::ops::erf_f32(m, x);
  }

  const FusedSubgraph& sg_;
  const Shape& shape_;
  llvm::Module& m_;
  llvm::LLVMContext& ctx_;
  llvm::IRBuilder<> b_;
  std::string prefix_;  // of the emitted functions' names
  llvm::Function* fn_ = nullptr;
  // A bf16/f16 value -> its bits (a load's, a rounded result's, a select of such values), which a
  // store writes (NaN payloads included) instead of rounding the widened value again.
  std::unordered_map<Value*, Value*> bits_;
  std::vector<Value*> in_ptrs_, out_ptrs_;
  std::vector<Value*> seeds_;  // per input: a generated input's seed (loaded once), else null
  llvm::MDNode* access_group_ = nullptr;  // of the innermost loop being emitted
  Value* red_lo_ = nullptr;  // kernel_part's range of the outermost reduced dimension
  Value* red_hi_ = nullptr;
  Value* partial_ = nullptr;  // kernel_part's: store accumulators unrounded
  int64_t split_size_ = 1;
  const int64_t column_block_;  // columns a column kernel folds together (LoopOptions)
};


}  // namespace

int64_t emit_loop_kernel(const FusedSubgraph& sg, const Shape& shape, bool flat,
                         llvm::Module& module, const std::string& prefix,
                         const LoopOptions& options) {
  if (options.column_block < 1)
    throw Error(ErrorCode::kInvalidArgument,
                "emit_loop_kernel (" + sg.name + "): column_block must be at least 1");
  Emitter emitter(sg, shape, module, prefix, options);
  emitter.emit_kernel(flat);
  return emitter.split_size();
}

}  // namespace kiln::compiler::llvm_ir
