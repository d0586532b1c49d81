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

// ---- C: convolution and pooling
Tensor conv(const Tensor&, const Tensor&, const ConvOptions&) { todo("conv"); }
Tensor conv2d(const Tensor&, const Tensor&, Axes, const std::string&) { todo("conv2d"); }
Tensor reduce_window_max(const Tensor&, const WindowOptions&) { todo("reduce_window_max"); }
Tensor reduce_window_sum(const Tensor&, const WindowOptions&) { todo("reduce_window_sum"); }
Tensor max_pool2d(const Tensor&, Axes, Axes, const std::string&) { todo("max_pool2d"); }
Tensor avg_pool2d(const Tensor&, Axes, Axes, const std::string&) { todo("avg_pool2d"); }

// ---- D: random, gather/scatter, nn functions, allclose
Tensor random_uniform(Shape, uint64_t, double, double, DType) { todo("random_uniform"); }
Tensor random_normal(Shape, uint64_t, double, double, DType) { todo("random_normal"); }
Tensor random_bernoulli(Shape, uint64_t, double, DType) { todo("random_bernoulli"); }
Tensor random_uniform(Shape, const Tensor&, double, double, DType) { todo("random_uniform"); }
Tensor random_normal(Shape, const Tensor&, double, double, DType) { todo("random_normal"); }
Tensor random_bernoulli(Shape, const Tensor&, double, DType) { todo("random_bernoulli"); }
Tensor gather(const Tensor&, const Tensor&, int64_t) { todo("gather"); }
Tensor scatter_add(const Tensor&, const Tensor&, const Tensor&, int64_t) { todo("scatter_add"); }
Tensor one_hot(const Tensor&, int64_t, DType) { todo("one_hot"); }
Tensor relu(const Tensor&) { todo("relu"); }
Tensor gelu(const Tensor&, bool) { todo("gelu"); }
Tensor sigmoid(const Tensor&) { todo("sigmoid"); }
Tensor softplus(const Tensor&) { todo("softplus"); }
Tensor swish(const Tensor&) { todo("swish"); }
Tensor softmax(const Tensor&, int64_t) { todo("softmax"); }
Tensor log_softmax(const Tensor&, int64_t) { todo("log_softmax"); }
Tensor logsumexp(const Tensor&, Axes, bool) { todo("logsumexp"); }
bool allclose(const Tensor&, const Tensor&, double, double) { todo("allclose"); }

}  // namespace kiln
