// Layer base: building on first call, weights, eager and functional calls; CallContext.
#include "kiln/nn/layer.h"

#include "kiln/graph.h"
#include "kiln/ops.h"
#include "src/api/nn/functional.h"

namespace kiln::nn {

// ---- CallContext ------------------------------------------------------------------------

CallContext::CallContext(bool training, uint64_t seed)
    : training_(training), seed_(Tensor::scalar<int64_t>(static_cast<int64_t>(seed))) {}

CallContext::CallContext(bool training, Tensor seed_tensor,
                         std::function<Tensor(const Variable&)> resolve)
    : training_(training), seed_(std::move(seed_tensor)), resolve_(std::move(resolve)) {}

namespace {
bool narrow(DType d) { return d == f16 || d == bf16; }
}  // namespace

Tensor CallContext::read(const Variable& v) {
  Tensor value = resolve_ ? resolve_(v) : v.value();
  if (v.dtype() == f32 && narrow(compute_dtype_)) return convert(value, compute_dtype_);
  return value;
}

Tensor CallContext::next_seed() {
  // Distinct, well-separated seeds per call: the random ops' Philox key differs per call.
  constexpr int64_t kStride = 0x9E3779B97F4A7C15LL >> 2;
  ++seed_calls_;
  return seed_ + Tensor::scalar<int64_t>(seed_calls_ * kStride);
}

Tensor CallContext::mask_of(const Tensor& value) const {
  if (!value.defined()) return Tensor();
  for (const auto& [v, mask] : masks_)
    if (v.impl() == value.impl()) return mask;
  return Tensor();
}

void CallContext::set_mask(const Tensor& value, const Tensor& mask) {
  for (auto& [v, m] : masks_) {
    if (v.impl() == value.impl()) {
      m = mask;
      return;
    }
  }
  masks_.emplace_back(value, mask);  // keeps `value` alive: its identity is the key
}

void CallContext::update(const Variable& v, const Tensor& new_value) {
  const bool recast =
      new_value.dtype() != v.dtype() && is_floating(new_value.dtype()) && is_floating(v.dtype());
  updates_.emplace_back(v, recast ? convert(new_value, v.dtype()) : new_value);
}

// ---- Layer ------------------------------------------------------------------------------

void Layer::build_once(const std::vector<Tensor>& xs) {
  if (built_) return;
  std::vector<Shape> shapes;
  for (const Tensor& x : xs) shapes.push_back(x.shape());
  build(shapes);
  built_ = true;
}

void Layer::set_options(const LayerOptions& options) {
  if (options.dtype_policy) policy_ = *options.dtype_policy;
}

// Keras' autocasting: floating inputs to the compute dtype, variables read in it. The first
// input's mask follows it through the cast, and the output's is recorded after the call.
std::vector<Tensor> Layer::call_in_policy(const std::vector<Tensor>& xs, CallContext& ctx) {
  const DType compute = policy_.compute_dtype();
  const Tensor mask = ctx.mask_of(xs[0]);
  std::vector<Tensor> cast = xs;
  for (Tensor& x : cast) {
    const DType d = x.defined() ? x.dtype() : compute;
    if (d != compute && (d == f32 || narrow(d))) x = convert(x, compute);
  }
  if (mask.defined() && cast[0].impl() != xs[0].impl()) ctx.set_mask(cast[0], mask);
  struct Restore {
    CallContext& ctx;
    DType previous;
    ~Restore() { ctx.set_compute_dtype(previous); }
  } restore{ctx, ctx.set_compute_dtype(compute)};
  std::vector<Tensor> out = call_outputs(cast, ctx);
  if (out.empty()) {
    throw Error(ErrorCode::kInternal, "layer '" + name_ + "' returned no outputs");
  }
  Tensor out_mask = compute_mask(cast, mask);
  if (out_mask.defined()) ctx.set_mask(out[0], out_mask);
  return out;
}

Tensor Layer::compute_mask(const std::vector<Tensor>&, const Tensor& mask) const {
  return supports_masking_ ? mask : Tensor();
}

std::vector<Tensor> Layer::outputs(const std::vector<Tensor>& xs, CallContext& ctx) {
  if (xs.empty()) {
    throw Error(ErrorCode::kInvalidArgument, "layer '" + name_ + "' called with no inputs");
  }
  build_once(xs);
  return call_in_policy(xs, ctx);
}

Tensor Layer::operator()(const std::vector<Tensor>& xs, CallContext& ctx) {
  return outputs(xs, ctx)[0];
}

Tensor Layer::operator()(const Tensor& x, CallContext& ctx) {
  return (*this)(std::vector<Tensor>{x}, ctx);
}

Tensor Layer::operator()(const Tensor& x) { return (*this)(std::vector<Tensor>{x}); }

Tensor Layer::operator()(const std::vector<Tensor>& xs) { return outputs(xs)[0]; }

std::vector<Tensor> Layer::outputs(const std::vector<Tensor>& xs) {
  bool symbolic = !xs.empty() && xs[0].defined() && xs[0].is_symbolic();
  if (!symbolic) {
    CallContext ctx(/*training=*/false);
    return outputs(xs, ctx);
  }
  Graph& fg = detail::functional_graph();
  for (const Tensor& x : xs) {
    if (!x.is_symbolic() || !(x.graph() == fg)) {
      throw Error(ErrorCode::kInvalidArgument,
                  "layer '" + name_ +
                      "': a symbolic input must come from nn::Input (functional models); "
                      "inside a traced step, call the layer with a CallContext");
    }
  }
  build_once(xs);
  // Record the call; the symbolic outputs give downstream layers their shapes.
  CallContext ctx(/*training=*/false, Tensor::scalar<int64_t>(0),
                  [](const Variable& v) { return v.value(); });
  std::vector<Tensor> out;
  {
    auto guard = fg.as_default();
    out = call_in_policy(xs, ctx);
  }
  detail::functional_calls().push_back({clone(), xs, out});
  return out;
}

std::vector<Variable> Layer::trainable_weights() const {
  std::vector<Variable> out;
  for (const Variable& v : weights_)
    if (v.trainable()) out.push_back(v);
  return out;
}

std::vector<Variable> Layer::non_trainable_weights() const {
  std::vector<Variable> out;
  for (const Variable& v : weights_)
    if (!v.trainable()) out.push_back(v);
  return out;
}

int64_t Layer::count_params() const {
  int64_t n = 0;
  for (const Variable& v : weights_) n += num_elements(v.shape());
  return n;
}

Variable Layer::add_weight(const std::string& name, const Shape& shape, const Initializer& init,
                           bool trainable, DType dtype) {
  for (int64_t d : shape) {
    if (d < 0) {
      throw Error(ErrorCode::kInvalidArgument,
                  "layer '" + name_ + "': weight '" + name + "' needs a known shape, got " +
                      shape_str(shape) + " (is the input's feature dimension unknown?)");
    }
  }
  // Each weight of a layer gets its own stream of random numbers.
  uint64_t seed = seed_ * 1000003u + static_cast<uint64_t>(weight_count_++) * 7919u + 17u;
  Variable v(init(shape, dtype, seed), name_ + "/" + name, trainable);
  weights_.push_back(v);
  return v;
}

void Layer::build_child(Layer& child, const std::vector<Shape>& input_shapes) {
  if (!child.built_) {
    // The child draws from the stream of this layer's next weight.
    child.set_seed(seed_ * 1000003u + static_cast<uint64_t>(weight_count_++) * 7919u + 17u);
    child.build(input_shapes);
    child.built_ = true;
  }
  weights_.insert(weights_.end(), child.weights_.begin(), child.weights_.end());
}

namespace detail {

Graph& functional_graph() {
  thread_local Graph graph("functional");
  return graph;
}

std::vector<FunctionalCall>& functional_calls() {
  thread_local std::vector<FunctionalCall> calls;
  return calls;
}

std::map<int, std::string>& input_names() {
  thread_local std::map<int, std::string> names;
  return names;
}

}  // namespace detail
}  // namespace kiln::nn
