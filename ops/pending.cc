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
