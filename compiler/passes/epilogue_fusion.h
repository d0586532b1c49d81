// Output (epilogue) fusion: dot or convolution -> add(bias) -> activation chains become one
// fused_dot or fused_conv kernel op (compiler/fused_ops.h; the CPU's kernels: compiler/cpu/
// fused_dot.h, fused_conv.h) that applies the bias and activation to each block of the GEMM's
// output while it is in cache. Refuses, with a note, when an intermediate is used elsewhere (e.g.
// the pre-activation the backward pass needs: then only the bias is fused), when the bias does
// not broadcast as the kernel can add it, and for dtypes the backend's fused kernels do not take
// (its FusionTarget says; the CPU's take f32, f64, bf16 and f16). bf16 and f16 chains change
// bits: their bias and activation apply to the f32 sums before the one rounding.
#pragma once

#include "compiler/passes/fusion.h"
#include "compiler/passes/pass.h"

namespace kiln::compiler {

class EpilogueFusion : public Pass {
 public:
  // fuse_narrow false: bf16 and f16 chains are left as they are, so the pass is exact (what
  // Rewrites::kExact pipelines run). `target`: the backend whose fused ops it creates (null:
  // the host's, host_fusion_target()).
  explicit EpilogueFusion(bool fuse_narrow = true, const FusionTarget* target = nullptr)
      : fuse_narrow_(fuse_narrow), target_(target ? target : &host_fusion_target()) {}
  std::string name() const override { return "epilogue_fusion"; }
  bool run(Module& module) override;
  bool exact() const override { return !fuse_narrow_; }

 private:
  bool fuse_narrow_;
  const FusionTarget* target_;
};

}  // namespace kiln::compiler
