// The built-in layers: compositions of kiln ops over weights read through the CallContext.
#include "kiln/nn/layers.h"

#include <cmath>
#include <map>

#include "kiln/autodiff.h"
#include "kiln/nn/layer_registry.h"
#include "kiln/ops.h"
#include "src/api/nn/layer_util.h"

namespace kiln::nn {
namespace {

const Tensor& single(const std::vector<Tensor>& inputs, const std::string& layer) {
  if (inputs.size() != 1) {
    throw Error(ErrorCode::kInvalidArgument, "layer '" + layer + "' takes one input, got " +
                                                 std::to_string(inputs.size()));
  }
  return inputs[0];
}

int64_t last_dim(const std::vector<Shape>& shapes, const std::string& layer) {
  if (shapes.empty() || shapes[0].empty() || shapes[0].back() == kUnknownDim) {
    throw Error(ErrorCode::kInvalidArgument,
                "layer '" + layer + "' needs inputs with a known last dimension, got " +
                    (shapes.empty() ? std::string("none") : shape_str(shapes[0])));
  }
  return shapes[0].back();
}

// Dropout-style mask with keep probability 1 - rate, scaled so the expectation is unchanged.
Tensor dropout(const Tensor& x, double rate, CallContext& ctx) {
  if (!ctx.training() || rate == 0) return x;
  Tensor keep = random_bernoulli_like(x, ctx.next_seed(), 1.0 - rate, bool_);
  return where(keep, x * (1.0 / (1.0 - rate)), zeros_like(x));
}

}  // namespace

std::function<Tensor(const Tensor&)> activation(const std::string& name) {
  static const std::map<std::string, std::function<Tensor(const Tensor&)>> table = {
      {"", [](const Tensor& x) { return x; }},
      {"linear", [](const Tensor& x) { return x; }},
      {"relu", [](const Tensor& x) { return relu(x); }},
      {"gelu", [](const Tensor& x) { return gelu(x); }},
      {"swish", [](const Tensor& x) { return swish(x); }},
      {"silu", [](const Tensor& x) { return swish(x); }},
      {"tanh", [](const Tensor& x) { return tanh(x); }},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }},
      {"softmax", [](const Tensor& x) { return softmax(x, -1); }},
      {"softplus", [](const Tensor& x) { return softplus(x); }},
  };
  auto it = table.find(name);
  if (it == table.end()) {
    std::string known;
    for (const auto& [k, v] : table)
      if (!k.empty()) known += (known.empty() ? "" : ", ") + k;
    throw Error(ErrorCode::kInvalidArgument,
                "unknown activation '" + name + "' (known: " + known + ")");
  }
  return it->second;
}

// ---- Dense ------------------------------------------------------------------------------

Dense::Dense(int64_t units, std::string act, bool use_bias, Initializer kernel_init,
             Initializer bias_init)
    : Layer("dense"), units_(units), activation_(std::move(act)), use_bias_(use_bias),
      kernel_init_(std::move(kernel_init)), bias_init_(std::move(bias_init)) {
  supports_masking_ = true;
  if (units <= 0) {
    throw Error(ErrorCode::kInvalidArgument,
                "Dense: units must be positive, got " + std::to_string(units));
  }
  activation(activation_);  // validates the name now
}

void Dense::build(const std::vector<Shape>& shapes) {
  kernel_ = add_weight("kernel", {last_dim(shapes, name()), units_}, kernel_init_);
  if (use_bias_) bias_ = add_weight("bias", {units_}, bias_init_);
}

Tensor Dense::call(const std::vector<Tensor>& inputs, CallContext& ctx) {
  Tensor y = matmul(single(inputs, name()), ctx.read(kernel_));
  if (use_bias_) y = y + ctx.read(bias_);
  return activation(activation_)(y);
}

// ---- Dropout, Activation, Flatten ---------------------------------------------------------

Dropout::Dropout(double rate) : Layer("dropout"), rate_(rate) {
  supports_masking_ = true;
  if (!(rate >= 0 && rate < 1)) {
    throw Error(ErrorCode::kInvalidArgument,
                "Dropout: rate must be in [0, 1), got " + std::to_string(rate));
  }
}

Tensor Dropout::call(const std::vector<Tensor>& inputs, CallContext& ctx) {
  return dropout(single(inputs, name()), rate_, ctx);
}

Activation::Activation(std::string act) : Layer("activation"), activation_(std::move(act)) {
  supports_masking_ = true;
  activation(activation_);
}

Tensor Activation::call(const std::vector<Tensor>& inputs, CallContext&) {
  return activation(activation_)(single(inputs, name()));
}

Flatten::Flatten() : Layer("flatten") {}

Tensor Flatten::call(const std::vector<Tensor>& inputs, CallContext&) {
  const Tensor& x = single(inputs, name());
  if (x.rank() <= 1) return x.rank() == 1 ? expand_dims(x, 1) : x;
  return flatten(x, 1, -1);
}

// ---- Conv2D and pooling -------------------------------------------------------------------

Conv2D::Conv2D(int64_t filters, std::vector<int64_t> kernel_size, std::string act,
               std::vector<int64_t> strides, std::string padding, bool use_bias,
               Initializer kernel_init, Initializer bias_init)
    : Layer("conv2d"), filters_(filters), kernel_size_(std::move(kernel_size)),
      strides_(std::move(strides)), activation_(std::move(act)), padding_(std::move(padding)),
      use_bias_(use_bias), kernel_init_(std::move(kernel_init)), bias_init_(std::move(bias_init)) {
  if (filters <= 0 || kernel_size_.size() != 2 || strides_.size() != 2) {
    throw Error(ErrorCode::kInvalidArgument,
                "Conv2D: filters must be positive and kernel_size/strides have two values");
  }
  if (padding_ != "same" && padding_ != "valid") {
    throw Error(ErrorCode::kInvalidArgument,
                "Conv2D: padding must be \"same\" or \"valid\", got \"" + padding_ + "\"");
  }
  activation(activation_);
}

void Conv2D::build(const std::vector<Shape>& shapes) {
  if (shapes.empty() || shapes[0].size() != 4) {
    throw Error(ErrorCode::kInvalidArgument,
                "Conv2D '" + name() + "' expects NHWC input of rank 4, got " +
                    (shapes.empty() ? std::string("none") : shape_str(shapes[0])));
  }
  int64_t channels = last_dim(shapes, name());
  kernel_ = add_weight("kernel", {kernel_size_[0], kernel_size_[1], channels, filters_},
                       kernel_init_);
  if (use_bias_) bias_ = add_weight("bias", {filters_}, bias_init_);
}

Tensor Conv2D::call(const std::vector<Tensor>& inputs, CallContext& ctx) {
  Tensor y = conv2d(single(inputs, name()), ctx.read(kernel_), strides_, padding_);
  if (use_bias_) y = y + ctx.read(bias_);
  return activation(activation_)(y);
}

MaxPool2D::MaxPool2D(std::vector<int64_t> pool, std::vector<int64_t> strides, std::string padding)
    : Layer("max_pooling2d"), pool_(std::move(pool)), strides_(std::move(strides)),
      padding_(std::move(padding)) {}

Tensor MaxPool2D::call(const std::vector<Tensor>& inputs, CallContext&) {
  return max_pool2d(single(inputs, name()), pool_, strides_, padding_);
}

AveragePool2D::AveragePool2D(std::vector<int64_t> pool, std::vector<int64_t> strides,
                             std::string padding)
    : Layer("average_pooling2d"), pool_(std::move(pool)), strides_(std::move(strides)),
      padding_(std::move(padding)) {}

Tensor AveragePool2D::call(const std::vector<Tensor>& inputs, CallContext&) {
  return avg_pool2d(single(inputs, name()), pool_, strides_, padding_);
}

// ---- Embedding ----------------------------------------------------------------------------

Embedding::Embedding(int64_t input_dim, int64_t output_dim, Initializer init, bool mask_zero)
    : Layer("embedding"), input_dim_(input_dim), output_dim_(output_dim), init_(std::move(init)),
      mask_zero_(mask_zero) {
  if (input_dim <= 0 || output_dim <= 0) {
    throw Error(ErrorCode::kInvalidArgument, "Embedding: input_dim and output_dim must be > 0");
  }
}

void Embedding::build(const std::vector<Shape>&) {
  table_ = add_weight("embeddings", {input_dim_, output_dim_}, init_);
}

Tensor Embedding::call(const std::vector<Tensor>& inputs, CallContext& ctx) {
  Tensor ids = single(inputs, name());
  if (!is_integer(ids.dtype())) ids = convert(ids, i64);
  return gather(ctx.read(table_), ids, 0);
}

Tensor Embedding::compute_mask(const std::vector<Tensor>& inputs, const Tensor&) const {
  if (!mask_zero_) return Tensor();
  return not_equal(inputs[0], zeros_like(inputs[0]));
}

// ---- normalization ------------------------------------------------------------------------

LayerNormalization::LayerNormalization(double epsilon)
    : Layer("layer_normalization"), epsilon_(epsilon) {
  supports_masking_ = true;
}

void LayerNormalization::build(const std::vector<Shape>& shapes) {
  int64_t d = last_dim(shapes, name());
  gamma_ = add_weight("gamma", {d}, ones_init());
  beta_ = add_weight("beta", {d}, zeros_init());
}

Tensor LayerNormalization::call(const std::vector<Tensor>& inputs, CallContext& ctx) {
  return detail::in_f32(single(inputs, name()), ctx, [&](const Tensor& x) {
    Tensor mu = mean(x, {-1}, true);
    Tensor centered = x - mu;
    Tensor var = mean(centered * centered, {-1}, true);
    return centered * rsqrt(var + epsilon_) * ctx.read(gamma_) + ctx.read(beta_);
  });
}

BatchNormalization::BatchNormalization(double momentum, double epsilon)
    : Layer("batch_normalization"), momentum_(momentum), epsilon_(epsilon) {
  supports_masking_ = true;
}

void BatchNormalization::build(const std::vector<Shape>& shapes) {
  int64_t d = last_dim(shapes, name());
  gamma_ = add_weight("gamma", {d}, ones_init());
  beta_ = add_weight("beta", {d}, zeros_init());
  moving_mean_ = add_weight("moving_mean", {d}, zeros_init(), /*trainable=*/false);
  moving_variance_ = add_weight("moving_variance", {d}, ones_init(), /*trainable=*/false);
}

Tensor BatchNormalization::call(const std::vector<Tensor>& inputs, CallContext& ctx) {
  return detail::in_f32(single(inputs, name()), ctx,
                        [&](const Tensor& x) { return normalize(x, ctx); });
}

Tensor BatchNormalization::normalize(const Tensor& x, CallContext& ctx) {
  Axes axes;
  for (int64_t a = 0; a + 1 < x.rank(); ++a) axes.push_back(a);
  Tensor mu, var;
  if (ctx.training()) {
    mu = mean(x, axes);
    Tensor centered = x - mu;
    var = mean(centered * centered, axes);
    Tensor mm = ctx.read(moving_mean_), mv = ctx.read(moving_variance_);
    ctx.update(moving_mean_, mm * momentum_ + stop_gradient(mu) * (1 - momentum_));
    ctx.update(moving_variance_, mv * momentum_ + stop_gradient(var) * (1 - momentum_));
  } else {
    mu = ctx.read(moving_mean_);
    var = ctx.read(moving_variance_);
  }
  return (x - mu) * rsqrt(var + epsilon_) * ctx.read(gamma_) + ctx.read(beta_);
}

// ---- MultiHeadAttention -------------------------------------------------------------------

MultiHeadAttention::MultiHeadAttention(int64_t num_heads, int64_t key_dim, double dropout_rate)
    : Layer("multi_head_attention"), num_heads_(num_heads), key_dim_(key_dim),
      dropout_(dropout_rate) {
  if (num_heads <= 0 || key_dim <= 0) {
    throw Error(ErrorCode::kInvalidArgument,
                "MultiHeadAttention: num_heads and key_dim must be positive");
  }
}

void MultiHeadAttention::build(const std::vector<Shape>& shapes) {
  for (const Shape& s : shapes) {
    if (s.size() != 3 || s.back() == kUnknownDim) {
      throw Error(ErrorCode::kInvalidArgument,
                  "MultiHeadAttention '" + name() +
                      "' expects inputs [batch, seq, features] with known features, got " +
                      shape_str(s));
    }
  }
  int64_t dq = shapes[0].back();
  int64_t dv = shapes.size() > 1 ? shapes[1].back() : dq;
  int64_t dk = shapes.size() > 2 ? shapes[2].back() : dv;
  int64_t hd = num_heads_ * key_dim_;
  wq_ = add_weight("query/kernel", {dq, hd}, glorot_uniform());
  bq_ = add_weight("query/bias", {hd}, zeros_init());
  wk_ = add_weight("key/kernel", {dk, hd}, glorot_uniform());
  bk_ = add_weight("key/bias", {hd}, zeros_init());
  wv_ = add_weight("value/kernel", {dv, hd}, glorot_uniform());
  bv_ = add_weight("value/bias", {hd}, zeros_init());
  wo_ = add_weight("attention_output/kernel", {hd, dq}, glorot_uniform());
  bo_ = add_weight("attention_output/bias", {dq}, zeros_init());
}

Tensor MultiHeadAttention::call(const std::vector<Tensor>& inputs, CallContext& ctx) {
  if (inputs.empty() || inputs.size() > 3) {
    throw Error(ErrorCode::kInvalidArgument,
                "MultiHeadAttention '" + name() + "' takes 1 to 3 inputs (query, value, key)");
  }
  const Tensor& q_in = inputs[0];
  const Tensor& v_in = inputs.size() > 1 ? inputs[1] : inputs[0];
  const Tensor& k_in = inputs.size() > 2 ? inputs[2] : v_in;
  // [batch, seq, heads*key_dim] -> [batch, heads, seq, key_dim]
  auto heads = [&](const Tensor& x, const Variable& w, const Variable& b) {
    Tensor p = matmul(x, ctx.read(w)) + ctx.read(b);
    Tensor r = reshape(p, {-1, x.dim(1), num_heads_, key_dim_});
    return transpose(r, {0, 2, 1, 3});
  };
  Tensor q = heads(q_in, wq_, bq_) * (1.0 / std::sqrt(static_cast<double>(key_dim_)));
  Tensor k = heads(k_in, wk_, bk_);
  Tensor v = heads(v_in, wv_, bv_);
  Tensor scores = matmul(q, transpose(k, {0, 1, 3, 2}));  // [b, h, sq, sk]
  Tensor weights = dropout(softmax(scores, -1), dropout_, ctx);
  Tensor attended = transpose(matmul(weights, v), {0, 2, 1, 3});  // [b, sq, h, d]
  Tensor merged = reshape(attended, {-1, q_in.dim(1), num_heads_ * key_dim_});
  return matmul(merged, ctx.read(wo_)) + ctx.read(bo_);
}

// ---- Add ------------------------------------------------------------------------------------

Add::Add() : Layer("add") {}

Tensor Add::call(const std::vector<Tensor>& inputs, CallContext&) {
  Tensor sum_value = inputs.at(0);
  for (size_t i = 1; i < inputs.size(); ++i) sum_value = sum_value + inputs[i];
  return sum_value;
}

// ---- configs and registration (for saved models) --------------------------------------------

Attrs Dense::config() const {
  Attrs c{{"units", units_}, {"activation", activation_}, {"use_bias", use_bias_}};
  put_initializer(c, "kernel_initializer", kernel_init_);
  put_initializer(c, "bias_initializer", bias_init_);
  return c;
}

Attrs Dropout::config() const { return {{"rate", rate_}}; }
Attrs Activation::config() const { return {{"activation", activation_}}; }

Attrs Conv2D::config() const {
  Attrs c{{"filters", filters_},    {"kernel_size", kernel_size_}, {"activation", activation_},
          {"strides", strides_},    {"padding", padding_},         {"use_bias", use_bias_}};
  put_initializer(c, "kernel_initializer", kernel_init_);
  put_initializer(c, "bias_initializer", bias_init_);
  return c;
}

Attrs MaxPool2D::config() const {
  return {{"pool_size", pool_}, {"strides", strides_}, {"padding", padding_}};
}
Attrs AveragePool2D::config() const {
  return {{"pool_size", pool_}, {"strides", strides_}, {"padding", padding_}};
}

Attrs Embedding::config() const {
  Attrs c{{"input_dim", input_dim_}, {"output_dim", output_dim_}, {"mask_zero", mask_zero_}};
  put_initializer(c, "embeddings_initializer", init_);
  return c;
}

Attrs LayerNormalization::config() const { return {{"epsilon", epsilon_}}; }
Attrs BatchNormalization::config() const {
  return {{"momentum", momentum_}, {"epsilon", epsilon_}};
}
Attrs MultiHeadAttention::config() const {
  return {{"num_heads", num_heads_}, {"key_dim", key_dim_}, {"dropout", dropout_}};
}

KILN_REGISTER_LAYER("Dense", [](const Attrs& c) {
  return std::make_shared<Dense>(c.get_int("units"), c.get_string("activation"),
                                 c.get_bool("use_bias"),
                                 get_initializer(c, "kernel_initializer", glorot_uniform()),
                                 get_initializer(c, "bias_initializer", zeros_init()));
});
KILN_REGISTER_LAYER("Dropout",
                    [](const Attrs& c) { return std::make_shared<Dropout>(c.get_float("rate")); });
KILN_REGISTER_LAYER("Activation", [](const Attrs& c) {
  return std::make_shared<Activation>(c.get_string("activation"));
});
KILN_REGISTER_LAYER("Flatten", [](const Attrs&) { return std::make_shared<Flatten>(); });
KILN_REGISTER_LAYER("Conv2D", [](const Attrs& c) {
  return std::make_shared<Conv2D>(c.get_int("filters"), c.get_ints("kernel_size"),
                                  c.get_string("activation"), c.get_ints("strides"),
                                  c.get_string("padding"), c.get_bool("use_bias"),
                                  get_initializer(c, "kernel_initializer", glorot_uniform()),
                                  get_initializer(c, "bias_initializer", zeros_init()));
});
KILN_REGISTER_LAYER("MaxPooling2D", [](const Attrs& c) {
  return std::make_shared<MaxPool2D>(c.get_ints("pool_size"), c.get_ints("strides"),
                                     c.get_string("padding"));
});
KILN_REGISTER_LAYER("AveragePooling2D", [](const Attrs& c) {
  return std::make_shared<AveragePool2D>(c.get_ints("pool_size"), c.get_ints("strides"),
                                         c.get_string("padding"));
});
KILN_REGISTER_LAYER("Embedding", [](const Attrs& c) {
  return std::make_shared<Embedding>(
      c.get_int("input_dim"), c.get_int("output_dim"),
      get_initializer(c, "embeddings_initializer", random_uniform_init(-0.05, 0.05)),
      c.get_bool("mask_zero", false));
});
KILN_REGISTER_LAYER("LayerNormalization", [](const Attrs& c) {
  return std::make_shared<LayerNormalization>(c.get_float("epsilon"));
});
KILN_REGISTER_LAYER("BatchNormalization", [](const Attrs& c) {
  return std::make_shared<BatchNormalization>(c.get_float("momentum"), c.get_float("epsilon"));
});
KILN_REGISTER_LAYER("MultiHeadAttention", [](const Attrs& c) {
  return std::make_shared<MultiHeadAttention>(c.get_int("num_heads"), c.get_int("key_dim"),
                                              c.get_float("dropout"));
});
KILN_REGISTER_LAYER("Add", [](const Attrs&) { return std::make_shared<Add>(); });

}  // namespace kiln::nn
