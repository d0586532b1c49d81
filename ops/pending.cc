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
