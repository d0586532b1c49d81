// SimpleRNN, LSTM, GRU (one loop in RNN, a cell each), Bidirectional and Masking.
#include "kiln/nn/recurrent_layers.h"

#include "kiln/control_flow.h"
#include "kiln/graph.h"
#include "kiln/nn/layer_registry.h"
#include "kiln/nn/layers.h"
#include "kiln/ops.h"
#include "src/api/nn/layer_util.h"

namespace kiln::nn {
namespace {

[[noreturn]] void fail(const Layer& layer, const std::string& message) {
  throw Error(ErrorCode::kInvalidArgument,
              layer.type_name() + " '" + layer.name() + "': " + message);
}

// [batch, time, features] with time and features known (the loop's length is fixed when a
// step is traced).
void check_sequence(const Shape& s, const Layer& layer) {
  if (s.size() != 3 || s[2] == kUnknownDim) {
    fail(layer, "expects input [batch, time, features] with known features, got " + shape_str(s));
  }
  if (s[1] == kUnknownDim) {
    fail(layer, "needs a known number of time steps, got " + shape_str(s) +
                    " (give nn::Input the sequence length, or pad the sequences to one length)");
  }
}

// x [time, batch, in] times kernel [in, width] (+ bias [width]): [time, batch, width], as one
// matrix product over all steps.
Tensor project_all(const Tensor& x, const Tensor& kernel, const Tensor& bias) {
  Tensor rows = matmul(reshape(x, {-1, x.dim(2)}), kernel);
  if (bias.defined()) rows = rows + bias;
  return reshape(rows, {x.dim(0), -1, kernel.dim(1)});
}

// Row `r` of a [2, width] bias.
Tensor bias_row(const Tensor& bias, int64_t r) {
  return reshape(slice(bias, {r, 0}, {r + 1, bias.dim(1)}), {bias.dim(1)});
}

Attrs rnn_config(const RecurrentOptions& o) {
  Attrs c{{"activation", o.activation},
          {"recurrent_activation", o.recurrent_activation},
          {"use_bias", o.use_bias},
          {"unit_forget_bias", o.unit_forget_bias},
          {"reset_after", o.reset_after},
          {"return_sequences", o.return_sequences},
          {"return_state", o.return_state},
          {"go_backwards", o.go_backwards},
          {"zero_output_for_mask", o.zero_output_for_mask},
          {"unroll", o.unroll}};
  put_initializer(c, "kernel_initializer", o.kernel_initializer);
  put_initializer(c, "recurrent_initializer", o.recurrent_initializer);
  put_initializer(c, "bias_initializer", o.bias_initializer);
  return c;
}

RecurrentOptions options_from(const Attrs& c) {
  RecurrentOptions o;
  o.activation = c.get_string("activation");
  o.recurrent_activation = c.get_string("recurrent_activation");
  o.use_bias = c.get_bool("use_bias");
  o.kernel_initializer = get_initializer(c, "kernel_initializer", o.kernel_initializer);
  o.recurrent_initializer = get_initializer(c, "recurrent_initializer", o.recurrent_initializer);
  o.bias_initializer = get_initializer(c, "bias_initializer", o.bias_initializer);
  o.unit_forget_bias = c.get_bool("unit_forget_bias", o.unit_forget_bias);
  o.reset_after = c.get_bool("reset_after", o.reset_after);
  o.return_sequences = c.get_bool("return_sequences");
  o.return_state = c.get_bool("return_state");
  o.go_backwards = c.get_bool("go_backwards");
  o.zero_output_for_mask = c.get_bool("zero_output_for_mask", false);
  o.unroll = c.get_int("unroll", 1);
  return o;
}

}  // namespace

// ---- RNN: the loop --------------------------------------------------------------------------

RNN::RNN(std::string name, int64_t units, RecurrentOptions options)
    : Layer(std::move(name)), units_(units), options_(std::move(options)) {
  if (units <= 0) {
    throw Error(ErrorCode::kInvalidArgument,
                "recurrent layer: units must be positive, got " + std::to_string(units));
  }
  if (options_.unroll < 1) {
    throw Error(ErrorCode::kInvalidArgument,
                "recurrent layer: unroll must be >= 1, got " + std::to_string(options_.unroll));
  }
  activation(options_.activation);  // validates the names now
  activation(options_.recurrent_activation);
}

void RNN::build(const std::vector<Shape>& shapes) {
  check_sequence(shapes.at(0), *this);
  build_cell(shapes[0][2]);
}

Tensor RNN::gate(const Tensor& z, int64_t k) const {
  return slice(z, {0, k * units_}, {kUnknownDim, (k + 1) * units_});
}

Tensor RNN::act(const Tensor& x) const { return activation(options_.activation)(x); }

Tensor RNN::recurrent_act(const Tensor& x) const {
  return activation(options_.recurrent_activation)(x);
}

Tensor RNN::call(const std::vector<Tensor>& inputs, CallContext& ctx) {
  return call_outputs(inputs, ctx)[0];
}

std::vector<Tensor> RNN::call_outputs(const std::vector<Tensor>& inputs, CallContext& ctx) {
  const Tensor& x = inputs.at(0);
  check_sequence(x.shape(), *this);
  const size_t n = num_states();
  if (inputs.size() != 1 && inputs.size() != 1 + n) {
    fail(*this, "takes the input and, optionally, " + std::to_string(n) +
                    " initial state(s); got " + std::to_string(inputs.size()) + " inputs");
  }
  const int64_t steps = x.dim(1);
  const Tensor xp = project(transpose(x, {1, 0, 2}), ctx);  // [time, batch, width]
  const std::vector<Tensor> weights = step_weights(ctx);

  std::vector<Tensor> init;
  if (inputs.size() > 1) {
    for (size_t k = 0; k < n; ++k) {
      Tensor s = inputs[1 + k];
      if (s.rank() != 2 || s.dim(1) != units_) {
        fail(*this, "initial state " + std::to_string(k) + " must be [batch, " +
                        std::to_string(units_) + "], got " + shape_str(s.shape()));
      }
      init.push_back(s.dtype() == x.dtype() ? s : convert(s, x.dtype()));
    }
  } else {
    // Zeros shaped [batch, units], the batch taken from the input while the graph runs.
    Tensor zero = zeros_like(reshape(slice(xp, {0, 0, 0}, {1, kUnknownDim, units_}), {-1, units_}));
    init.assign(n, zero);
  }

  std::vector<Tensor> xs = {xp};
  const Tensor mask = ctx.mask_of(x);
  if (mask.defined()) {
    if (mask.rank() != 2 || mask.dim(1) != steps) {
      fail(*this, "the input's mask must be [batch, " + std::to_string(steps) + "], got " +
                      shape_str(mask.shape()));
    }
    Tensor m = mask.dtype() == bool_ ? mask : not_equal(mask, zeros_like(mask));
    xs.push_back(expand_dims(transpose(m, {1, 0}), -1));  // [time, batch, 1]
  }

  const bool sequences = options_.return_sequences;
  const bool zero_masked = options_.zero_output_for_mask;
  auto body = [&](const std::vector<Tensor>& carry, const std::vector<Tensor>& row) {
    std::vector<Tensor> next = step(row[0], carry, weights);
    Tensor out = next[0];
    if (row.size() > 1) {  // a masked step keeps the states
      for (size_t k = 0; k < next.size(); ++k) next[k] = where(row[1], next[k], carry[k]);
      out = zero_masked ? where(row[1], next[0], zeros_like(next[0])) : next[0];
    }
    return std::make_pair(next, sequences ? std::vector<Tensor>{out} : std::vector<Tensor>{});
  };
  ScanOptions so;
  so.reverse = options_.go_backwards;
  so.unroll = options_.unroll;
  so.name = name();
  ScanResult r = scan(body, init, xs, so);

  std::vector<Tensor> outs;
  if (sequences) {
    Tensor ys = r.ys[0];                                   // [time, batch, units] in input order
    if (options_.go_backwards) ys = reverse(ys, {0});      // in the order the steps ran
    outs.push_back(transpose(ys, {1, 0, 2}));
  } else {
    outs.push_back(r.carry[0]);
  }
  if (options_.return_state) outs.insert(outs.end(), r.carry.begin(), r.carry.end());
  return outs;
}

Tensor RNN::compute_mask(const std::vector<Tensor>&, const Tensor& mask) const {
  if (!options_.return_sequences || !mask.defined()) return Tensor();
  return options_.go_backwards ? reverse(mask, {1}) : mask;
}

Attrs RNN::config() const {
  Attrs c = rnn_config(options_);
  c.set("units", units_);
  return c;
}

// ---- the cells ------------------------------------------------------------------------------

SimpleRNN::SimpleRNN(int64_t units, RecurrentOptions options)
    : RNN("simple_rnn", units, std::move(options)) {}

void SimpleRNN::build_cell(int64_t input_dim) {
  kernel_ = add_weight("kernel", {input_dim, units()}, options().kernel_initializer);
  recurrent_kernel_ =
      add_weight("recurrent_kernel", {units(), units()}, options().recurrent_initializer);
  if (options().use_bias) bias_ = add_weight("bias", {units()}, options().bias_initializer);
}

Tensor SimpleRNN::project(const Tensor& x, CallContext& ctx) {
  return project_all(x, ctx.read(kernel_), options().use_bias ? ctx.read(bias_) : Tensor());
}

std::vector<Tensor> SimpleRNN::step_weights(CallContext& ctx) {
  return {ctx.read(recurrent_kernel_)};
}

std::vector<Tensor> SimpleRNN::step(const Tensor& x, const std::vector<Tensor>& states,
                                    const std::vector<Tensor>& w) const {
  return {act(x + matmul(states[0], w[0]))};
}

LSTM::LSTM(int64_t units, RecurrentOptions options) : RNN("lstm", units, std::move(options)) {}

void LSTM::build_cell(int64_t input_dim) {
  const int64_t u = units();
  kernel_ = add_weight("kernel", {input_dim, 4 * u}, options().kernel_initializer);
  recurrent_kernel_ = add_weight("recurrent_kernel", {u, 4 * u}, options().recurrent_initializer);
  if (!options().use_bias) return;
  Initializer bias_init = options().bias_initializer;
  if (options().unit_forget_bias) {
    // Keras: the bias initializer for i, c and o; ones for f.
    bias_init = Initializer([init = options().bias_initializer, u](const Shape&, DType dtype,
                                                                  uint64_t seed) {
      // Computed now, also while a step is being traced (as the built-in initializers are).
      Graph::DefaultGuard no_graph{Graph(std::shared_ptr<kiln::detail::GraphImpl>())};
      return concatenate({init({u}, dtype, seed), ones({u}, dtype), init({2 * u}, dtype, seed + 1)},
                         0);
    });
  }
  bias_ = add_weight("bias", {4 * u}, bias_init);
}

Tensor LSTM::project(const Tensor& x, CallContext& ctx) {
  return project_all(x, ctx.read(kernel_), options().use_bias ? ctx.read(bias_) : Tensor());
}

std::vector<Tensor> LSTM::step_weights(CallContext& ctx) { return {ctx.read(recurrent_kernel_)}; }

std::vector<Tensor> LSTM::step(const Tensor& x, const std::vector<Tensor>& states,
                               const std::vector<Tensor>& w) const {
  const Tensor z = x + matmul(states[0], w[0]);
  const Tensor i = recurrent_act(gate(z, 0)), f = recurrent_act(gate(z, 1));
  const Tensor c = f * states[1] + i * act(gate(z, 2));
  const Tensor o = recurrent_act(gate(z, 3));
  return {o * act(c), c};
}

GRU::GRU(int64_t units, RecurrentOptions options) : RNN("gru", units, std::move(options)) {}

void GRU::build_cell(int64_t input_dim) {
  const int64_t u = units();
  kernel_ = add_weight("kernel", {input_dim, 3 * u}, options().kernel_initializer);
  recurrent_kernel_ = add_weight("recurrent_kernel", {u, 3 * u}, options().recurrent_initializer);
  if (!options().use_bias) return;
  bias_ = options().reset_after ? add_weight("bias", {2, 3 * u}, options().bias_initializer)
                                : add_weight("bias", {3 * u}, options().bias_initializer);
}

Tensor GRU::project(const Tensor& x, CallContext& ctx) {
  Tensor bias;
  if (options().use_bias) {
    bias = ctx.read(bias_);
    if (options().reset_after) bias = bias_row(bias, 0);
  }
  return project_all(x, ctx.read(kernel_), bias);
}

std::vector<Tensor> GRU::step_weights(CallContext& ctx) {
  const Tensor u = ctx.read(recurrent_kernel_);
  const int64_t n = units();
  if (options().reset_after) {
    // The recurrent product with its own bias, whole: r scales its third part.
    if (options().use_bias) return {u, bias_row(ctx.read(bias_), 1)};
    return {u};
  }
  // Without reset_after, the candidate's product reads r * h: z's and r's columns first.
  return {slice(u, {0, 0}, {n, 2 * n}), slice(u, {0, 2 * n}, {n, 3 * n})};
}

std::vector<Tensor> GRU::step(const Tensor& x, const std::vector<Tensor>& states,
                              const std::vector<Tensor>& w) const {
  const Tensor& h = states[0];
  Tensor inner = matmul(h, w[0]);
  if (options().reset_after && w.size() > 1) inner = inner + w[1];
  const Tensor z = recurrent_act(gate(x, 0) + gate(inner, 0));
  const Tensor r = recurrent_act(gate(x, 1) + gate(inner, 1));
  const Tensor candidate = options().reset_after ? gate(x, 2) + r * gate(inner, 2)
                                                 : gate(x, 2) + matmul(r * h, w[1]);
  const Tensor hh = act(candidate);
  return {z * h + (1.0 - z) * hh};
}

// ---- Bidirectional --------------------------------------------------------------------------

namespace {

std::shared_ptr<RNN> as_rnn(const LayerPtr& layer, const std::string& what) {
  auto rnn = std::dynamic_pointer_cast<RNN>(layer);
  if (!rnn) {
    throw Error(ErrorCode::kInvalidArgument,
                "Bidirectional: " + what + " must be a recurrent layer (SimpleRNN, LSTM, GRU), got " +
                    (layer ? layer->type_name() + " '" + layer->name() + "'" : std::string("none")));
  }
  return rnn;
}

}  // namespace

Bidirectional::Bidirectional(LayerRef layer, std::string merge_mode)
    : Layer("bidirectional"), merge_mode_(std::move(merge_mode)) {
  forward_ = as_rnn(layer.get(), "the layer");
  if (merge_mode_ != "concat" && merge_mode_ != "sum" && merge_mode_ != "mul" &&
      merge_mode_ != "ave" && !merge_mode_.empty()) {
    throw Error(ErrorCode::kInvalidArgument,
                "Bidirectional: merge_mode must be \"concat\", \"sum\", \"mul\", \"ave\" or \"\" "
                "(none), got \"" + merge_mode_ + "\"");
  }
  layer_name_ = forward_->name();
  // The backward copy: the same class and configuration, its own weights, run the other way.
  Attrs config = forward_->config();
  config.set("go_backwards", !forward_->options().go_backwards);
  backward_ = as_rnn(layer_from_config(forward_->type_name(), config, layer_name_), "the copy");
}

void Bidirectional::build(const std::vector<Shape>& shapes) {
  check_sequence(shapes.at(0), *this);
  if (!forward_->built()) forward_->set_name(name() + "/forward_" + layer_name_);
  if (!backward_->built()) backward_->set_name(name() + "/backward_" + layer_name_);
  build_child(*forward_, {shapes[0]});
  build_child(*backward_, {shapes[0]});
}

Tensor Bidirectional::call(const std::vector<Tensor>& inputs, CallContext& ctx) {
  return call_outputs(inputs, ctx)[0];
}

std::vector<Tensor> Bidirectional::call_outputs(const std::vector<Tensor>& inputs,
                                                CallContext& ctx) {
  const Tensor& x = inputs.at(0);
  const size_t n = forward_->num_states();
  if (inputs.size() != 1 && inputs.size() != 1 + 2 * n) {
    fail(*this, "takes the input and, optionally, " + std::to_string(2 * n) +
                    " initial states (the forward layer's, then the backward one's); got " +
                    std::to_string(inputs.size()) + " inputs");
  }
  std::vector<Tensor> fw_in = {x}, bw_in = {x};
  if (inputs.size() > 1) {
    fw_in.insert(fw_in.end(), inputs.begin() + 1, inputs.begin() + 1 + n);
    bw_in.insert(bw_in.end(), inputs.begin() + 1 + n, inputs.end());
  }
  std::vector<Tensor> fw = forward_->outputs(fw_in, ctx);
  std::vector<Tensor> bw = backward_->outputs(bw_in, ctx);
  Tensor back = bw[0];
  if (forward_->options().return_sequences) back = reverse(back, {1});  // back in time order
  std::vector<Tensor> outs;
  if (merge_mode_ == "concat") {
    outs.push_back(concatenate({fw[0], back}, -1));
  } else if (merge_mode_ == "sum") {
    outs.push_back(fw[0] + back);
  } else if (merge_mode_ == "mul") {
    outs.push_back(fw[0] * back);
  } else if (merge_mode_ == "ave") {
    outs.push_back((fw[0] + back) * 0.5);
  } else {
    outs = {fw[0], back};
  }
  outs.insert(outs.end(), fw.begin() + 1, fw.end());
  outs.insert(outs.end(), bw.begin() + 1, bw.end());
  return outs;
}

Tensor Bidirectional::compute_mask(const std::vector<Tensor>&, const Tensor& mask) const {
  return forward_->options().return_sequences ? mask : Tensor();
}

Attrs Bidirectional::config() const {
  Attrs c{{"layer", forward_->type_name()},
          {"layer_name", layer_name_},
          {"merge_mode", merge_mode_}};
  const Attrs inner = forward_->config();
  for (const auto& [key, value] : inner.values()) c.set("layer." + key, value);
  return c;
}

// ---- Masking --------------------------------------------------------------------------------

Masking::Masking(double mask_value) : Layer("masking"), mask_value_(mask_value) {}

Tensor Masking::compute_mask(const std::vector<Tensor>& inputs, const Tensor&) const {
  const Tensor& x = inputs[0];
  return any(not_equal(x, full({}, mask_value_, x.dtype())), {-1});
}

Tensor Masking::call(const std::vector<Tensor>& inputs, CallContext&) {
  const Tensor& x = detail::single_input(inputs, *this);
  if (x.rank() < 2) fail(*this, "expects [batch, time, features], got " + shape_str(x.shape()));
  const Tensor keep = expand_dims(compute_mask(inputs, Tensor()), -1);
  return where(keep, x, zeros_like(x));
}

Attrs Masking::config() const { return {{"mask_value", mask_value_}}; }

// ---- registration (saved models) ------------------------------------------------------------

KILN_REGISTER_LAYER("SimpleRNN", [](const Attrs& c) {
  return std::make_shared<SimpleRNN>(c.get_int("units"), options_from(c));
});
KILN_REGISTER_LAYER("LSTM", [](const Attrs& c) {
  return std::make_shared<LSTM>(c.get_int("units"), options_from(c));
});
KILN_REGISTER_LAYER("GRU", [](const Attrs& c) {
  return std::make_shared<GRU>(c.get_int("units"), options_from(c));
});
KILN_REGISTER_LAYER("Bidirectional", [](const Attrs& c) {
  Attrs inner;
  for (const auto& [key, value] : c.values()) {
    if (key.rfind("layer.", 0) == 0) inner.set(key.substr(6), value);
  }
  return std::make_shared<Bidirectional>(
      layer_from_config(c.get_string("layer"), inner, c.get_string("layer_name")),
      c.get_string("merge_mode"));
});
KILN_REGISTER_LAYER("Masking", [](const Attrs& c) {
  return std::make_shared<Masking>(c.get_float("mask_value"));
});

}  // namespace kiln::nn
