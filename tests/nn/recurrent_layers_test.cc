// Recurrent layers: SimpleRNN, LSTM and GRU against a plain C++ transcription of Keras' cells
// (gate order, weight layouts), their options (sequences, states, initial states, backwards),
// masks from Embedding(mask_zero) and Masking, Bidirectional, gradients, compiled against
// interpreted, functional models of several outputs, configs and errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "kiln/kiln.h"
#include "kiln/nn.h"
#include "tests/nn/layer_zoo.h"
#include "tests/nn/trainable_layer_checks.h"
#include "tests/testing/values.h"

namespace kiln::nn {
namespace {

using test_values::expect_error;
using ::testing::HasSubstr;
using trainable_testing::doubles;
using trainable_testing::expect_gradients_match;

// ---- a plain transcription of Keras' cells --------------------------------------------------

double sigm(double v) { return 1 / (1 + std::exp(-v)); }

struct Weights {
  std::vector<double> kernel, recurrent, bias;  // row-major, Keras' layouts
};

Weights weights_of(const Layer& layer) {
  Weights w;
  w.kernel = doubles(layer.weights().at(0).value());
  w.recurrent = doubles(layer.weights().at(1).value());
  if (layer.weights().size() > 2) w.bias = doubles(layer.weights().at(2).value());
  return w;
}

// row [n] times m [n, cols] -> [cols].
std::vector<double> row_times(const std::vector<double>& row, const std::vector<double>& m,
                              int64_t cols, int64_t offset = 0) {
  std::vector<double> out(cols, 0);
  for (size_t i = 0; i < row.size(); ++i)
    for (int64_t j = 0; j < cols; ++j) out[j] += row[i] * m[offset + i * cols + j];
  return out;
}

enum class Cell { kSimple, kLstm, kGruAfter, kGruBefore };

// One example: x [time][in] -> the output of every step (in the order they ran) and the final
// states. mask[t] false skips step t (states kept, output repeated).
struct RefRun {
  std::vector<std::vector<double>> outputs;
  std::vector<std::vector<double>> states;
};

RefRun reference(Cell cell, const Weights& w, int64_t units,
                 const std::vector<std::vector<double>>& x, std::vector<std::vector<double>> states,
                 bool backwards = false, const std::vector<bool>& mask = {}) {
  const int64_t u = units;
  const int64_t gates = cell == Cell::kSimple ? 1 : cell == Cell::kLstm ? 4 : 3;
  RefRun run;
  const int64_t steps = static_cast<int64_t>(x.size());
  for (int64_t k = 0; k < steps; ++k) {
    const int64_t t = backwards ? steps - 1 - k : k;
    std::vector<double> zx = row_times(x[t], w.kernel, gates * u);
    if (!w.bias.empty())
      for (int64_t j = 0; j < gates * u; ++j) zx[j] += w.bias[j];
    const std::vector<double>& h = states[0];
    std::vector<std::vector<double>> next = states;
    if (cell == Cell::kSimple) {
      std::vector<double> zh = row_times(h, w.recurrent, u);
      for (int64_t j = 0; j < u; ++j) next[0][j] = std::tanh(zx[j] + zh[j]);
    } else if (cell == Cell::kLstm) {
      std::vector<double> zh = row_times(h, w.recurrent, 4 * u);
      for (int64_t j = 0; j < u; ++j) {
        const double i = sigm(zx[j] + zh[j]), f = sigm(zx[u + j] + zh[u + j]);
        const double c = f * states[1][j] + i * std::tanh(zx[2 * u + j] + zh[2 * u + j]);
        const double o = sigm(zx[3 * u + j] + zh[3 * u + j]);
        next[1][j] = c;
        next[0][j] = o * std::tanh(c);
      }
    } else if (cell == Cell::kGruAfter) {
      std::vector<double> zh = row_times(h, w.recurrent, 3 * u);
      if (!w.bias.empty())  // bias [2, 3u]: row 0 went into zx above, row 1 is recurrent
        for (int64_t j = 0; j < 3 * u; ++j) zh[j] += w.bias[3 * u + j];
      for (int64_t j = 0; j < u; ++j) {
        const double z = sigm(zx[j] + zh[j]), r = sigm(zx[u + j] + zh[u + j]);
        const double hh = std::tanh(zx[2 * u + j] + r * zh[2 * u + j]);
        next[0][j] = z * h[j] + (1 - z) * hh;
      }
    } else {
      // Without reset_after: z and r from h's product with U's first 2u columns, the candidate
      // from (r * h) times U's last u columns.
      std::vector<double> zr(2 * u, 0), rh(u);
      for (int64_t i = 0; i < u; ++i)
        for (int64_t j = 0; j < 2 * u; ++j) zr[j] += h[i] * w.recurrent[i * 3 * u + j];
      std::vector<double> z(u), r(u);
      for (int64_t j = 0; j < u; ++j) {
        z[j] = sigm(zx[j] + zr[j]);
        r[j] = sigm(zx[u + j] + zr[u + j]);
        rh[j] = r[j] * h[j];
      }
      std::vector<double> cand(u, 0);
      for (int64_t i = 0; i < u; ++i)
        for (int64_t j = 0; j < u; ++j) cand[j] += rh[i] * w.recurrent[i * 3 * u + 2 * u + j];
      for (int64_t j = 0; j < u; ++j)
        next[0][j] = z[j] * h[j] + (1 - z[j]) * std::tanh(zx[2 * u + j] + cand[j]);
    }
    if (mask.empty() || mask[t]) states = next;
    run.outputs.push_back(states[0]);
  }
  run.states = states;
  return run;
}

// x [batch, time, in] as one nested vector per example.
std::vector<std::vector<double>> example(const Tensor& x, int64_t b) {
  const std::vector<double> v = doubles(x);
  const int64_t steps = x.dim(1), in = x.dim(2);
  std::vector<std::vector<double>> rows(steps, std::vector<double>(in));
  for (int64_t t = 0; t < steps; ++t)
    for (int64_t i = 0; i < in; ++i) rows[t][i] = v[(b * steps + t) * in + i];
  return rows;
}

void expect_near_rows(const Tensor& got, int64_t b, const std::vector<double>& want,
                      double tol = 1e-5) {
  const std::vector<double> v = doubles(got);
  const int64_t width = static_cast<int64_t>(want.size());
  for (int64_t j = 0; j < width; ++j)
    EXPECT_NEAR(v[b * width + j], want[j], tol) << "example " << b << ", unit " << j;
}

// Random weights (not the initializers' values, which are small and structured).
void randomize(Layer& layer, uint64_t seed) {
  for (Variable v : layer.weights()) v.assign(random_normal(v.shape(), seed++, 0, 0.5, v.dtype()));
}

constexpr int64_t kBatch = 3, kSteps = 5, kIn = 4, kUnits = 6;

Tensor sequence(uint64_t seed) { return random_normal({kBatch, kSteps, kIn}, seed); }

std::vector<std::vector<double>> zero_states(size_t n) {
  return std::vector<std::vector<double>>(n, std::vector<double>(kUnits, 0));
}

// The layer's last output and final states for every example match the transcription.
void expect_matches_reference(RNN& layer, Cell cell) {
  CallContext ctx;
  const Tensor x = sequence(3);
  layer(x, ctx);  // builds
  randomize(layer, 100);
  const std::vector<Tensor> out = layer.outputs({x}, ctx);
  ASSERT_EQ(out.size(), 1 + layer.num_states());  // return_state
  const Weights w = weights_of(layer);
  for (int64_t b = 0; b < kBatch; ++b) {
    RefRun want = reference(cell, w, kUnits, example(x, b), zero_states(layer.num_states()));
    expect_near_rows(out[0], b, want.outputs.back());
    for (size_t s = 0; s < layer.num_states(); ++s) expect_near_rows(out[1 + s], b, want.states[s]);
  }
}

TEST(RecurrentLayers, SimpleRnnMatchesKerasCell) {
  SimpleRNN layer(kUnits, {.return_state = true});
  expect_matches_reference(layer, Cell::kSimple);
}

TEST(RecurrentLayers, LstmMatchesKerasCellAndGateOrder) {
  LSTM layer(kUnits, {.return_state = true});
  EXPECT_EQ(layer.num_states(), 2u);
  expect_matches_reference(layer, Cell::kLstm);
}

TEST(RecurrentLayers, GruMatchesKerasCellWithResetAfter) {
  GRU layer(kUnits, {.return_state = true});
  expect_matches_reference(layer, Cell::kGruAfter);
  EXPECT_EQ(layer.weights()[2].shape(), (Shape{2, 3 * kUnits}));
}

TEST(RecurrentLayers, GruMatchesKerasCellWithResetBefore) {
  GRU layer(kUnits, {.reset_after = false, .return_state = true});
  expect_matches_reference(layer, Cell::kGruBefore);
  EXPECT_EQ(layer.weights()[2].shape(), (Shape{3 * kUnits}));
}

TEST(RecurrentLayers, WeightsHaveKerasNamesShapesAndInitialValues) {
  LSTM lstm(kUnits);
  CallContext ctx;
  lstm(sequence(1), ctx);
  ASSERT_EQ(lstm.weights().size(), 3u);
  EXPECT_EQ(lstm.weights()[0].name(), "lstm/kernel");
  EXPECT_EQ(lstm.weights()[0].shape(), (Shape{kIn, 4 * kUnits}));
  EXPECT_EQ(lstm.weights()[1].name(), "lstm/recurrent_kernel");
  EXPECT_EQ(lstm.weights()[1].shape(), (Shape{kUnits, 4 * kUnits}));
  EXPECT_EQ(lstm.weights()[2].name(), "lstm/bias");
  // unit_forget_bias: ones for f, zeros for i, c and o.
  const std::vector<double> bias = doubles(lstm.weights()[2].value());
  for (int64_t j = 0; j < 4 * kUnits; ++j) EXPECT_EQ(bias[j], j / kUnits == 1 ? 1.0 : 0.0) << j;
  // The recurrent kernel is orthogonal: [units, 4 units] with orthonormal rows.
  const Tensor r = lstm.weights()[1].value();
  std::vector<float> identity(kUnits * kUnits, 0);
  for (int64_t i = 0; i < kUnits; ++i) identity[i * kUnits + i] = 1;
  EXPECT_TRUE(allclose(matmul(r, transpose(r)), Tensor::from_vector(identity, {kUnits, kUnits}),
                       1e-5, 1e-5));
  EXPECT_EQ(lstm.count_params(), kIn * 4 * kUnits + kUnits * 4 * kUnits + 4 * kUnits);
}

TEST(RecurrentLayers, ReturnSequencesGivesEveryStepAndTheLastIsTheFinalState) {
  for (bool backwards : {false, true}) {
    SCOPED_TRACE(backwards ? "go_backwards" : "forwards");
    LSTM layer(kUnits, {.return_sequences = true, .return_state = true, .go_backwards = backwards});
    CallContext ctx;
    const Tensor x = sequence(5);
    layer(x, ctx);
    randomize(layer, 7);
    const std::vector<Tensor> out = layer.outputs({x}, ctx);
    ASSERT_EQ(out[0].shape(), (Shape{kBatch, kSteps, kUnits}));
    const Weights w = weights_of(layer);
    for (int64_t b = 0; b < kBatch; ++b) {
      RefRun want = reference(Cell::kLstm, w, kUnits, example(x, b), zero_states(2), backwards);
      const std::vector<double> seq = doubles(out[0]);
      for (int64_t t = 0; t < kSteps; ++t)
        for (int64_t j = 0; j < kUnits; ++j)
          EXPECT_NEAR(seq[(b * kSteps + t) * kUnits + j], want.outputs[t][j], 1e-5)
              << "example " << b << ", step " << t;
      expect_near_rows(out[1], b, want.states[0]);
      expect_near_rows(out[2], b, want.states[1]);
    }
  }
}

TEST(RecurrentLayers, GoBackwardsIsTheForwardLayerOnTheReversedSequence) {
  GRU forward(kUnits), backward(kUnits, {.go_backwards = true});
  CallContext ctx;
  const Tensor x = sequence(9);
  forward(x, ctx);
  backward(x, ctx);
  randomize(forward, 3);
  for (size_t i = 0; i < 3; ++i) Variable(backward.weights()[i]).assign(forward.weights()[i].value());
  EXPECT_TRUE(allclose(backward(x, ctx), forward(reverse(x, {1}), ctx), 1e-6, 1e-6));
}

TEST(RecurrentLayers, InitialStatesAreExtraInputs) {
  LSTM layer(kUnits, {.return_state = true});
  CallContext ctx;
  const Tensor x = sequence(11);
  layer(x, ctx);
  randomize(layer, 13);
  const Tensor h0 = random_normal({kBatch, kUnits}, 14), c0 = random_normal({kBatch, kUnits}, 15);
  const std::vector<Tensor> out = layer.outputs({x, h0, c0}, ctx);
  const Weights w = weights_of(layer);
  for (int64_t b = 0; b < kBatch; ++b) {
    const std::vector<double> h = doubles(h0), c = doubles(c0);
    std::vector<std::vector<double>> init = {
        std::vector<double>(h.begin() + b * kUnits, h.begin() + (b + 1) * kUnits),
        std::vector<double>(c.begin() + b * kUnits, c.begin() + (b + 1) * kUnits)};
    RefRun want = reference(Cell::kLstm, w, kUnits, example(x, b), init);
    expect_near_rows(out[1], b, want.states[0]);
    expect_near_rows(out[2], b, want.states[1]);
  }
  expect_error([&] { layer.outputs({x, h0}, ctx); }, ErrorCode::kInvalidArgument,
               "LSTM 'lstm': takes the input and, optionally, 2 initial state(s); got 2 inputs");
  expect_error([&] { layer.outputs({x, h0, ones({kBatch, 3})}, ctx); },
               ErrorCode::kInvalidArgument, "initial state 1 must be [batch, 6], got [3,3]");
}

// ---- masks ----------------------------------------------------------------------------------

// Ids [batch, time] with zeros (padding) after each example's length.
Tensor padded_ids(const std::vector<int64_t>& lengths, int64_t steps) {
  std::vector<int32_t> ids;
  for (size_t b = 0; b < lengths.size(); ++b)
    for (int64_t t = 0; t < steps; ++t) ids.push_back(t < lengths[b] ? 1 + (b * 7 + t * 3) % 9 : 0);
  return Tensor::from_vector(ids, {static_cast<int64_t>(lengths.size()), steps});
}

TEST(RecurrentLayers, EmbeddingMaskZeroSkipsPaddedSteps) {
  Embedding embed(10, kIn, random_uniform_init(-1, 1), /*mask_zero=*/true);
  LSTM lstm(kUnits, {.return_sequences = true, .return_state = true});
  const std::vector<int64_t> lengths = {5, 3, 1};
  const Tensor ids = padded_ids(lengths, kSteps);
  CallContext ctx;
  const Tensor e = embed(ids, ctx);
  const Tensor mask = ctx.mask_of(e);
  ASSERT_TRUE(mask.defined());
  EXPECT_EQ(mask.dtype(), bool_);
  EXPECT_EQ(mask.to_vector<bool>(), not_equal(ids, zeros_like(ids)).to_vector<bool>());
  const std::vector<Tensor> out = lstm.outputs({e}, ctx);
  randomize(lstm, 21);
  const std::vector<Tensor> again = lstm.outputs({e}, ctx);
  // The output carries the mask on (return_sequences).
  EXPECT_TRUE(ctx.mask_of(again[0]).defined());
  const Weights w = weights_of(lstm);
  for (int64_t b = 0; b < 3; ++b) {
    std::vector<bool> m(kSteps);
    for (int64_t t = 0; t < kSteps; ++t) m[t] = t < lengths[b];
    RefRun want = reference(Cell::kLstm, w, kUnits, example(e, b), zero_states(2), false, m);
    expect_near_rows(again[1], b, want.states[0]);
    // The same as the unpadded sequence alone.
    std::vector<std::vector<double>> steps = example(e, b);
    steps.resize(lengths[b]);
    RefRun alone = reference(Cell::kLstm, w, kUnits, steps, zero_states(2));
    expect_near_rows(again[1], b, alone.states[0]);
    // Masked steps repeat the previous output.
    const std::vector<double> seq = doubles(again[0]);
    for (int64_t t = lengths[b]; t < kSteps; ++t)
      for (int64_t j = 0; j < kUnits; ++j)
        EXPECT_EQ(seq[(b * kSteps + t) * kUnits + j], seq[(b * kSteps + t - 1) * kUnits + j]);
  }
}

TEST(RecurrentLayers, ZeroOutputForMaskZeroesMaskedSteps) {
  Embedding embed(10, kIn, random_uniform_init(-1, 1), true);
  SimpleRNN rnn(kUnits, {.return_sequences = true, .zero_output_for_mask = true});
  CallContext ctx;
  const Tensor y = rnn(embed(padded_ids({2, 4, 5}, kSteps), ctx), ctx);
  const std::vector<double> seq = doubles(y);
  const int64_t lengths[] = {2, 4, 5};
  for (int64_t b = 0; b < 3; ++b)
    for (int64_t t = 0; t < kSteps; ++t) {
      double norm = 0;
      for (int64_t j = 0; j < kUnits; ++j) norm += std::abs(seq[(b * kSteps + t) * kUnits + j]);
      if (t < lengths[b]) EXPECT_GT(norm, 0) << b << " " << t;
      else EXPECT_EQ(norm, 0) << b << " " << t;
    }
}

TEST(RecurrentLayers, MaskingZeroesAndMasksStepsOfTheMaskValue) {
  Masking masking(-1.0);
  std::vector<float> v = {1, 2, -1, -1, 3, -1, -1, -1};  // [1, 4, 2]: steps 1 and 3 masked
  const Tensor x = Tensor::from_vector(v, {1, 4, 2});
  CallContext ctx;
  const Tensor y = masking(x, ctx);
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{1, 2, 0, 0, 3, -1, 0, 0}));
  EXPECT_EQ(ctx.mask_of(y).to_vector<bool>(), (std::vector<bool>{true, false, true, false}));
  // A Dense after it passes the mask on; the LSTM after that skips the masked steps.
  Dense dense(3);
  const Tensor d = dense(y, ctx);
  EXPECT_TRUE(ctx.mask_of(d).defined());
  LSTM lstm(kUnits, {.return_state = true});
  const std::vector<Tensor> out = lstm.outputs({d}, ctx);
  const Weights w = weights_of(lstm);
  RefRun want = reference(Cell::kLstm, w, kUnits, example(d, 0), zero_states(2), false,
                          {true, false, true, false});
  expect_near_rows(out[0], 0, want.states[0]);
  // Flatten does not keep the steps: the mask stops there.
  Flatten flatten;
  EXPECT_FALSE(ctx.mask_of(flatten(d, ctx)).defined());
}

TEST(RecurrentLayers, MasksFlowThroughSequentialModels) {
  // The padded and the unpadded batch give the same predictions.
  Sequential model({Embedding(10, 4, random_uniform_init(-1, 1), true), LSTM(5), Dense(2)});
  const Tensor padded = padded_ids({3, 3}, 6);
  const Tensor trimmed = slice(padded, {0, 0}, {2, 3});
  const Tensor a = model.predict(padded);
  // The model's layers called on the unpadded steps (no mask).
  CallContext ctx;
  Tensor b = trimmed;
  for (const LayerPtr& layer : model.layers()) b = (*layer)(b, ctx);
  EXPECT_TRUE(allclose(a, b, 1e-5, 1e-5)) << a.str() << "\n" << b.str();
  // Without the mask the padded steps count.
  Sequential unmasked({Embedding(10, 4), LSTM(5), Dense(2)});
  unmasked.predict(padded);
  for (size_t i = 0; i < 3; ++i)
    for (size_t w = 0; w < model.layers()[i]->weights().size(); ++w)
      Variable(unmasked.layers()[i]->weights()[w]).assign(model.layers()[i]->weights()[w].value());
  EXPECT_FALSE(allclose(unmasked.predict(padded), a, 1e-3, 1e-3));
}

// ---- Bidirectional ---------------------------------------------------------------------------

TEST(Bidirectional, ConcatenatesForwardAndTimeAlignedBackwardOutputs) {
  Bidirectional bi(LSTM(kUnits, {.return_sequences = true}));
  CallContext ctx;
  const Tensor x = sequence(31);
  const Tensor y = bi(x, ctx);
  ASSERT_EQ(y.shape(), (Shape{kBatch, kSteps, 2 * kUnits}));
  ASSERT_EQ(bi.weights().size(), 6u);
  EXPECT_EQ(bi.weights()[0].name(), "bidirectional/forward_lstm/kernel");
  EXPECT_EQ(bi.weights()[3].name(), "bidirectional/backward_lstm/kernel");
  randomize(bi, 40);
  const Tensor out = bi(x, ctx);
  const Weights fw = weights_of(*bi.forward_layer()), bw = weights_of(*bi.backward_layer());
  const std::vector<double> got = doubles(out);
  for (int64_t b = 0; b < kBatch; ++b) {
    RefRun f = reference(Cell::kLstm, fw, kUnits, example(x, b), zero_states(2));
    RefRun r = reference(Cell::kLstm, bw, kUnits, example(x, b), zero_states(2), true);
    for (int64_t t = 0; t < kSteps; ++t)
      for (int64_t j = 0; j < kUnits; ++j) {
        const int64_t at = (b * kSteps + t) * 2 * kUnits;
        EXPECT_NEAR(got[at + j], f.outputs[t][j], 1e-5);
        // The backward layer saw step t after the steps following it: its output number
        // (kSteps - 1 - t) in running order.
        EXPECT_NEAR(got[at + kUnits + j], r.outputs[kSteps - 1 - t][j], 1e-5);
      }
  }
}

TEST(Bidirectional, MergeModesAndStates) {
  const Tensor x = sequence(33);
  CallContext ctx;
  Bidirectional none(GRU(kUnits, {.return_state = true}), "");
  const std::vector<Tensor> parts = none.outputs({x}, ctx);
  ASSERT_EQ(parts.size(), 4u);  // forward, backward, forward h, backward h
  EXPECT_TRUE(allclose(parts[0], parts[2], 0, 0));
  EXPECT_TRUE(allclose(parts[1], parts[3], 0, 0));
  for (const std::string mode : {"sum", "mul", "ave", "concat"}) {
    Bidirectional bi(GRU(kUnits), mode);
    const Tensor y = bi(x, ctx);
    for (size_t i = 0; i < bi.weights().size(); ++i)
      Variable(bi.weights()[i]).assign(none.weights()[i].value());
    const Tensor merged = bi(x, ctx);
    const Tensor want = mode == "sum"   ? parts[0] + parts[1]
                        : mode == "mul" ? parts[0] * parts[1]
                        : mode == "ave" ? (parts[0] + parts[1]) * 0.5
                                        : concatenate({parts[0], parts[1]}, -1);
    EXPECT_TRUE(allclose(merged, want, 1e-6, 1e-6)) << mode;
  }
  expect_error([] { Bidirectional(Dense(3)); }, ErrorCode::kInvalidArgument,
               "must be a recurrent layer (SimpleRNN, LSTM, GRU), got Dense");
  expect_error([] { Bidirectional(LSTM(3), "max"); }, ErrorCode::kInvalidArgument,
               "merge_mode must be");
}

// ---- gradients, modes, models -----------------------------------------------------------------

TEST(RecurrentLayers, GradientsMatchCentralDifferences) {
  const Tensor x = random_normal({2, 3, 2}, 50, 0, 1, f64);
  {
    SCOPED_TRACE("LSTM");
    LSTM layer(3, {.return_sequences = true});
    expect_gradients_match(layer, x);
  }
  {
    SCOPED_TRACE("GRU");
    GRU layer(3);
    expect_gradients_match(layer, x);
  }
  {
    SCOPED_TRACE("GRU without reset_after");
    GRU layer(3, {.reset_after = false, .return_sequences = true});
    expect_gradients_match(layer, x);
  }
  {
    SCOPED_TRACE("SimpleRNN, backwards");
    SimpleRNN layer(3, {.go_backwards = true});
    expect_gradients_match(layer, x);
  }
  {
    SCOPED_TRACE("Bidirectional LSTM");
    Bidirectional layer(LSTM(2, {.return_sequences = true}));
    expect_gradients_match(layer, x);
  }
}

TEST(RecurrentLayers, CompiledAgreesWithInterpretedAndTrains) {
  Sequential model({Bidirectional(LSTM(8, {.return_sequences = true})), GRU(6), Dense(1)});
  const Tensor x = random_normal({32, 7, 3}, 60);
  const Tensor y = sum(x, {1, 2}) * 0.1;
  trainable_testing::expect_modes_agree(model, x);
  model.compile(optim::Adam(0.01), MeanSquaredError());
  const History h = model.fit(x, reshape(y, {32, 1}), {.epochs = 8, .batch_size = 8, .verbose = 0});
  EXPECT_LT(h.history.at("loss").back(), h.history.at("loss").front() * 0.8);
  trainable_testing::expect_modes_agree(model, x);
  EXPECT_THAT(model.summary(), HasSubstr("bidirectional (Bidirectional)  (None, 7, 16)"));
}

TEST(RecurrentLayers, FunctionalModelWithReturnStateOutputs) {
  const Tensor in = Input({kSteps, kIn});
  LSTM encoder(kUnits, {.return_state = true});
  const std::vector<Tensor> enc = encoder.outputs({in});
  ASSERT_EQ(enc.size(), 3u);
  EXPECT_EQ(enc[2].shape(), (Shape{kUnknownDim, kUnits}));
  // A decoder starts from the encoder's states.
  const Tensor seq = LSTM(kUnits, {.return_sequences = true})({in, enc[1], enc[2]});
  const Tensor out = Dense(1)(seq);
  Model model({in}, {out, enc[2]}, "seq2seq");
  const Tensor x = sequence(70);
  const std::vector<Tensor> pred = model.predict(std::vector<Tensor>{x});
  ASSERT_EQ(pred.size(), 2u);
  EXPECT_EQ(pred[0].shape(), (Shape{kBatch, kSteps, 1}));
  EXPECT_EQ(pred[1].shape(), (Shape{kBatch, kUnits}));
  // The second output is the encoder's c, as calling the layer directly gives it.
  CallContext ctx;
  EXPECT_TRUE(allclose(pred[1], encoder.outputs({x}, ctx)[2], 1e-5, 1e-5));
}

TEST(RecurrentLayers, RebuildFromConfig) {
  const Tensor x = sequence(80);
  for (LayerPtr layer : std::vector<LayerPtr>{
           std::make_shared<SimpleRNN>(3, RecurrentOptions{.activation = "relu"}),
           std::make_shared<LSTM>(3, RecurrentOptions{.return_sequences = true}),
           std::make_shared<GRU>(3, RecurrentOptions{.reset_after = false, .go_backwards = true}),
           std::make_shared<Bidirectional>(LSTM(2), "sum"),
           std::make_shared<Masking>(0.5)}) {
    SCOPED_TRACE(layer->type_name());
    CallContext ctx;
    (*layer)(x, ctx);
    randomize(*layer, 90);
    trainable_testing::expect_rebuilt_from_config(*layer, x);
  }
}

TEST(RecurrentLayers, BadInputsAreErrors) {
  LSTM lstm(4);
  expect_error([&] { lstm(ones({2, 3})); }, ErrorCode::kInvalidArgument,
               "LSTM 'lstm': expects input [batch, time, features] with known features, got [2,3]");
  const Tensor unknown_steps = Input({kUnknownDim, 3});
  expect_error([&] { LSTM(4)(unknown_steps); }, ErrorCode::kInvalidArgument,
               "needs a known number of time steps, got [?,?,3]");
  expect_error([] { LSTM(0); }, ErrorCode::kInvalidArgument, "units must be positive, got 0");
  expect_error([] { GRU(3, {.recurrent_activation = "nope"}); }, ErrorCode::kInvalidArgument,
               "unknown activation 'nope'");
}

// ---- the layer zoo: trained, saved, loaded in another process, trained on -------------------

Tensor zoo_sequences(uint64_t seed) { return random_normal({48, 6, 3}, seed); }
Tensor zoo_targets(const Tensor& x) { return reshape(tanh(sum(x, {1, 2}) * 0.3), {48, 1}); }

KILN_ZOO_CASE("lstm",
              [] { return std::make_unique<Sequential>(std::vector<LayerRef>{LSTM(8), Dense(1)}); },
              [] {
                Tensor x = zoo_sequences(101);
                return std::pair{x, zoo_targets(x)};
              });

KILN_ZOO_CASE(
    "gru_sequences",
    [] {
      return std::make_unique<Sequential>(std::vector<LayerRef>{
          GRU(6, {.return_sequences = true}), SimpleRNN(4, {.go_backwards = true}), Dense(1)});
    },
    [] {
      Tensor x = zoo_sequences(103);
      return std::pair{x, zoo_targets(x)};
    });

KILN_ZOO_CASE(
    "bidirectional_masked",
    [] {
      return std::make_unique<Sequential>(
          std::vector<LayerRef>{Masking(0.0), Bidirectional(LSTM(4), "concat"), Dense(1)});
    },
    [] {
      // The last two steps of every other example are padding.
      std::vector<float> keep(48 * 6, 1);
      for (int64_t b = 1; b < 48; b += 2) keep[b * 6 + 4] = keep[b * 6 + 5] = 0;
      Tensor x = zoo_sequences(105) * reshape(Tensor::from_vector(keep), {48, 6, 1});
      return std::pair{x, zoo_targets(x)};
    });

}  // namespace
}  // namespace kiln::nn
