// Recurrent layers with Keras' semantics: SimpleRNN, LSTM and GRU (Keras' weight layouts and gate
// orders, so weights converted from Keras give the same outputs), the Bidirectional wrapper, and
// Masking. A recurrent layer runs its cell over the time axis of [batch, time, features] with
// kiln::scan: a traced step holds one loop node whatever the number of steps, and the compiler
// makes it one loop thunk whose body is compiled once.
//
//   nn::Sequential model({nn::LSTM(128), nn::Dense(10)});                  // last output only
//   nn::LSTM encoder(64, {.return_sequences = true, .return_state = true});
//   std::vector<Tensor> out = encoder.outputs({x}, ctx);                   // {sequence, h, c}
//
// Initial states are extra inputs: lstm({x, h0, c0}, ctx). Padded steps are skipped when the
// input carries a mask (CallContext::mask_of), as Embedding(mask_zero) and Masking give it:
// the states pass through a masked step unchanged.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/nn/initializers.h"
#include "kiln/nn/layer.h"

namespace kiln::nn {

// Keras' arguments of SimpleRNN, LSTM and GRU (each uses those that apply to it).
struct RecurrentOptions {
  std::string activation = "tanh";
  std::string recurrent_activation = "sigmoid";  // LSTM's and GRU's gates
  bool use_bias = true;
  Initializer kernel_initializer = glorot_uniform();
  Initializer recurrent_initializer = orthogonal_init();
  Initializer bias_initializer = zeros_init();
  bool unit_forget_bias = true;  // LSTM: the forget gate's bias starts at 1
  bool reset_after = true;       // GRU: the reset gate applies after the recurrent product
  // [batch, time, units] (one output per step) instead of the last step's [batch, units].
  bool return_sequences = false;
  // outputs() gives the output, then the final states (LSTM: h and c; the others: h).
  bool return_state = false;
  // Steps run last to first; with return_sequences the outputs come in that order too.
  bool go_backwards = false;
  // A masked step outputs zeros rather than repeating the previous output (return_sequences).
  bool zero_output_for_mask = false;
  int64_t unroll = 1;  // kiln::scan's unroll factor
};

// What SimpleRNN, LSTM and GRU share: the loop, masks, initial states and options. A cell gives
// its weights, the projection of all steps' inputs (one matrix product before the loop) and one
// step of its recurrence.
class RNN : public Layer {
 public:
  Tensor call(const std::vector<Tensor>& inputs, CallContext& ctx) override;
  std::vector<Tensor> call_outputs(const std::vector<Tensor>& inputs, CallContext& ctx) override;
  Tensor compute_mask(const std::vector<Tensor>& inputs, const Tensor& mask) const override;
  void build(const std::vector<Shape>& input_shapes) override;
  Attrs config() const override;

  int64_t units() const { return units_; }
  const RecurrentOptions& options() const { return options_; }
  // The states the cell carries (LSTM: 2, h then c; SimpleRNN and GRU: 1).
  virtual size_t num_states() const { return 1; }

 protected:
  RNN(std::string name, int64_t units, RecurrentOptions options);
  // Creates the weights for `input_dim` input features.
  virtual void build_cell(int64_t input_dim) = 0;
  // Every step's inputs [time, batch, input_dim] projected at once: [time, batch, width].
  virtual Tensor project(const Tensor& x, CallContext& ctx) = 0;
  // The weights a step reads, read once before the loop (in the compute dtype).
  virtual std::vector<Tensor> step_weights(CallContext& ctx) = 0;
  // One step: the projected input of this step [batch, width] and the states [batch, units]
  // before it -> the states after it; the step's output is the first state.
  virtual std::vector<Tensor> step(const Tensor& x, const std::vector<Tensor>& states,
                                   const std::vector<Tensor>& weights) const = 0;
  // Columns [k * units, (k + 1) * units) of a [batch, n * units] value: gate k.
  Tensor gate(const Tensor& z, int64_t k) const;
  Tensor act(const Tensor& x) const;            // options().activation
  Tensor recurrent_act(const Tensor& x) const;  // options().recurrent_activation

 private:
  int64_t units_;
  RecurrentOptions options_;
};

// h' = activation(x W + h U + b). Weights: kernel [in, units], recurrent_kernel [units, units],
// bias [units].
class SimpleRNN : public RNN {
 public:
  explicit SimpleRNN(int64_t units, RecurrentOptions options = {});
  std::string type_name() const override { return "SimpleRNN"; }
  std::shared_ptr<Layer> clone() const override { return std::make_shared<SimpleRNN>(*this); }

 protected:
  void build_cell(int64_t input_dim) override;
  Tensor project(const Tensor& x, CallContext& ctx) override;
  std::vector<Tensor> step_weights(CallContext& ctx) override;
  std::vector<Tensor> step(const Tensor& x, const std::vector<Tensor>& states,
                           const std::vector<Tensor>& weights) const override;

 private:
  Variable kernel_, recurrent_kernel_, bias_;
};

// Keras' LSTM, gates in the order i, f, c, o: z = x W + h U + b, i = σ(z_i), f = σ(z_f),
// c' = f c + i tanh(z_c), o = σ(z_o), h' = o tanh(c'). Weights: kernel [in, 4 units],
// recurrent_kernel [units, 4 units], bias [4 units]. States: h, c.
class LSTM : public RNN {
 public:
  explicit LSTM(int64_t units, RecurrentOptions options = {});
  std::string type_name() const override { return "LSTM"; }
  std::shared_ptr<Layer> clone() const override { return std::make_shared<LSTM>(*this); }
  size_t num_states() const override { return 2; }

 protected:
  void build_cell(int64_t input_dim) override;
  Tensor project(const Tensor& x, CallContext& ctx) override;
  std::vector<Tensor> step_weights(CallContext& ctx) override;
  std::vector<Tensor> step(const Tensor& x, const std::vector<Tensor>& states,
                           const std::vector<Tensor>& weights) const override;

 private:
  Variable kernel_, recurrent_kernel_, bias_;
};

// Keras' GRU, gates in the order z, r, h: z = σ(x W_z + h U_z), r = σ(x W_r + h U_r),
// h' = z h + (1 - z) tanh(x W_h + r (h U_h)) with reset_after (Keras' default; bias [2, 3 units],
// input and recurrent), or tanh(x W_h + (r h) U_h) without (bias [3 units]). Weights: kernel
// [in, 3 units], recurrent_kernel [units, 3 units].
class GRU : public RNN {
 public:
  explicit GRU(int64_t units, RecurrentOptions options = {});
  std::string type_name() const override { return "GRU"; }
  std::shared_ptr<Layer> clone() const override { return std::make_shared<GRU>(*this); }

 protected:
  void build_cell(int64_t input_dim) override;
  Tensor project(const Tensor& x, CallContext& ctx) override;
  std::vector<Tensor> step_weights(CallContext& ctx) override;
  std::vector<Tensor> step(const Tensor& x, const std::vector<Tensor>& states,
                           const std::vector<Tensor>& weights) const override;

 private:
  Variable kernel_, recurrent_kernel_, bias_;
};

// Runs a recurrent layer forwards and a copy of it (its own weights, go_backwards flipped)
// backwards over the same input, and merges their outputs: merge_mode "concat" (the default),
// "sum", "mul", "ave", or "" (none: outputs() gives both). With return_sequences the backward
// outputs are put back in time order first. The weights are named
// "bidirectional/forward_lstm/kernel", "bidirectional/backward_lstm/kernel", ... With
// return_state, outputs() gives the merged output, the forward states, then the backward ones;
// initial states are extra inputs in the same order.
class Bidirectional : public Layer {
 public:
  explicit Bidirectional(LayerRef layer, std::string merge_mode = "concat");
  std::string type_name() const override { return "Bidirectional"; }
  std::shared_ptr<Layer> clone() const override { return std::make_shared<Bidirectional>(*this); }
  // "layer": the wrapped layer's class, "layer.<key>": its config, "layer_name", "merge_mode".
  Attrs config() const override;
  void build(const std::vector<Shape>& input_shapes) override;
  Tensor call(const std::vector<Tensor>& inputs, CallContext& ctx) override;
  std::vector<Tensor> call_outputs(const std::vector<Tensor>& inputs, CallContext& ctx) override;
  Tensor compute_mask(const std::vector<Tensor>& inputs, const Tensor& mask) const override;
  const std::shared_ptr<RNN>& forward_layer() const { return forward_; }
  const std::shared_ptr<RNN>& backward_layer() const { return backward_; }

 private:
  std::shared_ptr<RNN> forward_, backward_;
  std::string layer_name_, merge_mode_;
};

// Marks the steps of [batch, time, features] whose features all equal mask_value as padding:
// the output is the input with those steps zeroed, carrying the mask of the other steps.
class Masking : public Layer {
 public:
  explicit Masking(double mask_value = 0.0);
  std::string type_name() const override { return "Masking"; }
  std::shared_ptr<Layer> clone() const override { return std::make_shared<Masking>(*this); }
  Attrs config() const override;
  Tensor call(const std::vector<Tensor>& inputs, CallContext& ctx) override;
  Tensor compute_mask(const std::vector<Tensor>& inputs, const Tensor& mask) const override;

 private:
  double mask_value_;
};

}  // namespace kiln::nn
