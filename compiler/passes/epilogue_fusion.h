// Output (epilogue) fusion: dot or convolution -> add(bias) -> activation chains become one
// fused_dot or fused_conv kernel op (compiler/cpu/fused_dot.h, compiler/cpu/fused_conv.h) that applies the
// bias and activation to each block of the GEMM's output while it is in cache. Refuses, with a
// note, when an intermediate is used elsewhere (e.g. the pre-activation the backward pass needs:
// then only the bias is fused), when the bias does not broadcast as the kernel can add it, and
// for dtypes other than f32, f64, bf16 and f16. bf16 and f16 chains change bits: their bias and
// activation apply to the f32 sums before the one rounding (compiler/cpu/fused_dot.h).
#pragma once

#include "compiler/passes/pass.h"

namespace kiln::compiler {

class EpilogueFusion : public Pass {
 public:
  // fuse_narrow false: bf16 and f16 chains are left as they are, so the pass is exact (what
  // Rewrites::kExact pipelines run).
  explicit EpilogueFusion(bool fuse_narrow = true) : fuse_narrow_(fuse_narrow) {}
  std::string name() const override { return "epilogue_fusion"; }
  bool run(Module& module) override;
  bool exact() const override { return !fuse_narrow_; }

 private:
  bool fuse_narrow_;
};

}  // namespace kiln::compiler
