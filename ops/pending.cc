// TEMPORARY while the op families are written in parallel: public functions declared in
// kiln/ops.h that are not implemented yet throw kUnimplemented. Each family deletes its
// block when it lands; this file is removed once empty.
#include "kiln/ops.h"

namespace kiln {
namespace {
[[noreturn]] void todo(const char* f) {
  throw Error(ErrorCode::kUnimplemented, std::string(f) + ": not implemented yet");
}
}  // namespace

// ---- A: creation and layout
Tensor zeros(Shape, DType) { todo("zeros"); }
Tensor ones(Shape, DType) { todo("ones"); }
Tensor full(Shape, double, DType) { todo("full"); }
Tensor zeros_like(const Tensor&) { todo("zeros_like"); }
Tensor ones_like(const Tensor&) { todo("ones_like"); }
Tensor arange(double, double, double, DType) { todo("arange"); }
Tensor arange(int64_t, DType) { todo("arange"); }
Tensor iota(Shape, int64_t, DType) { todo("iota"); }
Tensor broadcast_in_dim(const Tensor&, Shape, Axes) { todo("broadcast_in_dim"); }
Tensor broadcast_to(const Tensor&, Shape) { todo("broadcast_to"); }
Tensor reshape(const Tensor&, Shape) { todo("reshape"); }
Tensor transpose(const Tensor&, Axes) { todo("transpose"); }
Tensor transpose(const Tensor&) { todo("transpose"); }
Tensor flatten(const Tensor&, int64_t, int64_t) { todo("flatten"); }
Tensor expand_dims(const Tensor&, int64_t) { todo("expand_dims"); }
Tensor squeeze(const Tensor&, Axes) { todo("squeeze"); }
Tensor slice(const Tensor&, Axes, Axes, Axes) { todo("slice"); }
Tensor concatenate(const std::vector<Tensor>&, int64_t) { todo("concatenate"); }
Tensor pad(const Tensor&, Axes, Axes, double, Axes) { todo("pad"); }
Tensor reverse(const Tensor&, Axes) { todo("reverse"); }

// ---- B: reductions and linear algebra
Tensor sum(const Tensor&, Axes, bool) { todo("sum"); }
Tensor mean(const Tensor&, Axes, bool) { todo("mean"); }
Tensor max(const Tensor&, Axes, bool) { todo("max"); }
Tensor min(const Tensor&, Axes, bool) { todo("min"); }
Tensor prod(const Tensor&, Axes, bool) { todo("prod"); }
Tensor any(const Tensor&, Axes, bool) { todo("any"); }
Tensor all(const Tensor&, Axes, bool) { todo("all"); }
Tensor variance(const Tensor&, Axes, bool) { todo("variance"); }
Tensor argmax(const Tensor&, int64_t, bool) { todo("argmax"); }
Tensor argmin(const Tensor&, int64_t, bool) { todo("argmin"); }
Tensor dot(const Tensor&, const Tensor&, Axes, Axes, Axes, Axes) { todo("dot"); }
Tensor matmul(const Tensor&, const Tensor&) { todo("matmul"); }


}  // namespace kiln
