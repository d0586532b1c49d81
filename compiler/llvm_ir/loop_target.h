// What the elemental emitter (compiler/llvm_ir/elemental_emitter.h) computes, whatever the
// target: its dtypes, the reduction layouts it folds, and the fusion pass's questions about
// elementwise ops, reductions and layout reads, answered once for every backend that emits its
// loops with it (the CPU's and CUDA's fusion targets derive from LoopFusionTarget and add their
// answers about fused dots and convolutions).
#pragma once

#include <string>
#include <vector>

#include "compiler/fused_subgraph.h"
#include "compiler/passes/fusion.h"

namespace kiln::compiler::llvm_ir {

// The emitter computes on f32, f64, i32, i64, bool, and bf16 and f16 in f32 (each result
// rounded to its dtype, as their reference kernels do); it also loads, stores and converts u8
// and i8.
bool compute_dtype(DType t);
bool storage_dtype(DType t);

// Why the emitter cannot reduce `shape` over `axes` (sorted, in range), or "": the reduced
// axes must form one run once size-1 dimensions are dropped.
std::string reduction_layout_refusal(const Shape& shape, const std::vector<int64_t>& axes);

// True when every input is either of the full output shape or a single element: the kernel
// is then one flat loop (which a CPU's vectorizer widens). Otherwise rows of the last dimension.
bool is_flat_loop(const FusedSubgraph& sg, const Shape& out_shape);
// The loop emit_loop_kernel takes for `sg` over `shape`: flat, or there are no elements.
bool flat_loop_for(const FusedSubgraph& sg, const Shape& shape);

// A text naming everything the emitted code depends on: the ops, dtypes and wiring, each input's
// shape (or with `size_free_flat_loops`, for a flat loop called over [begin, end), only whether
// it is a single element), views, pieces, reduced axes and outputs. Equal keys, equal code.
std::string structural_key(const FusedSubgraph& sg, bool size_free_flat_loops);

// The fusion target of a backend whose loops the elemental emitter writes: a node can be
// emitted when its elemental form builds into a FusedSubgraph for its concrete dtypes; a
// reduction when the emitter folds its dtype and axes. The fused ops (epilogue_dtype,
// fused_dot_layout_refusal, conv_pool_dtype) are the backend's.
class LoopFusionTarget : public FusionTarget {
 public:
  FusionDecision can_emit(const detail::Node& node, const std::vector<TensorType>& inputs,
                          const std::vector<TensorType>& outputs) const override;
  FusionDecision can_map(const detail::Node& node, const std::vector<TensorType>& inputs,
                         const std::vector<TensorType>& outputs) const override;
  FusionDecision can_piece(const detail::Node& node, const std::vector<TensorType>& inputs,
                           const std::vector<TensorType>& outputs) const override;
  FusionDecision can_reduce(const detail::Node& node,
                            const std::vector<TensorType>& inputs) const override;
  FusionDecision can_gather(const detail::Node& node, const std::vector<TensorType>& inputs,
                            const std::vector<TensorType>& outputs) const override;

  bool compute_dtype(DType t) const override { return llvm_ir::compute_dtype(t); }
  bool storage_dtype(DType t) const override { return llvm_ir::storage_dtype(t); }
  bool narrow_dtype(DType t) const override { return t == bf16 || t == f16; }
  bool reduce_dtype(DType t) const override {
    return t == f32 || t == f64 || t == i32 || t == i64 || narrow_dtype(t);
  }
  std::string reduction_layout_refusal(const Shape& shape,
                                       const std::vector<int64_t>& axes) const override {
    return llvm_ir::reduction_layout_refusal(shape, axes);
  }
};

// The fusion target of a device backend whose dots and convolutions are library calls (CUDA's,
// and the emulated GPU the device executable is tested on): the loops, and dots taking a bias
// (n elements along the output's last dimension) as their matmul's epilogue (cuBLASLt's bias
// epilogue), for the dots the device's matmul takes (device_dot_geometry); activations stay
// loops. Convolutions take no epilogue, and no max pool.
const FusionTarget& device_fusion_target();

}  // namespace kiln::compiler::llvm_ir
