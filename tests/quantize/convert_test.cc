// kiln::lite::convert: a float conversion runs as the model's own predict does; an int8 one
// stays close to it, reports every op, is a fraction of the float file's size; what the lite
// runtime cannot run is refused with the layers named.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>

#include "kiln/io/saved_model.h"
#include "kiln/lite.h"
#include "kiln/lite_convert.h"
#include "kiln/nn.h"
#include "kiln/ops.h"
#include "quantize/calibration.h"

namespace kiln::lite {
namespace {

using namespace kiln::nn;

// A small CNN with every layer kind the converter lowers.
std::unique_ptr<Sequential> small_cnn() {
  auto model = std::make_unique<Sequential>(std::vector<LayerRef>{
      Conv2D(8, {3, 3}, "relu", {1, 1}, "same"), MaxPool2D({2, 2}), Conv2D(12, {3, 3}, "", {2, 2}),
      Activation("relu"), AveragePool2D({2, 2}), Flatten(), Dropout(0.25), Dense(32, "relu"),
      Dense(5, "softmax")});
  model->set_seed(3);
  model->build({12, 12, 2});
  return model;
}

Tensor images(int64_t n, uint64_t seed) { return random_uniform({n, 12, 12, 2}, seed); }

std::string temp_path(const std::string& name) { return testing::TempDir() + "/" + name; }

// An int8 output against the float one: the largest error under `rel` of the largest output,
// plus `abs`.
void expect_close(const std::vector<float>& got, const std::vector<float>& want, double rel,
                  double abs) {
  ASSERT_EQ(got.size(), want.size());
  double max_err = 0, max_out = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    max_err = std::max<double>(max_err, std::abs(got[i] - want[i]));
    max_out = std::max<double>(max_out, std::abs(want[i]));
  }
  EXPECT_LT(max_err, rel * max_out + abs) << max_err << " of " << max_out;
}

// Gives the weights of every `type` layer of `model` random values, uniform in [0, 1) plus
// `shift` (a variance plus 0.5, so it stays positive): a batch or layer normalization starts as
// the identity, which would hide a wrong conversion.
void randomize_layers(Model& model, const std::string& type, uint64_t seed, double shift) {
  for (const LayerPtr& layer : model.layers()) {
    if (layer->type_name() != type) continue;
    for (const Variable& v : layer->weights()) {
      const bool variance = v.name().find("variance") != std::string::npos;
      const_cast<Variable&>(v).assign(random_uniform(v.shape(), seed++) + (variance ? 0.5 : shift));
    }
  }
}

// A functional model with a residual sum and a join, and a relu whose input has two readers.
std::unique_ptr<Model> residual_model(const std::string& name) {
  Tensor in = Input({8, 8, 2});
  Tensor a = Conv2D(4, {3, 3}, "relu", {1, 1}, "same")(in);
  Tensor b = Conv2D(4, {3, 3}, "", {1, 1}, "same")(a);
  Tensor sum = Add()({a, b});
  Tensor r = Activation("relu")(sum);
  Tensor joined = Concatenate()({r, a, sum});
  Tensor out = Dense(3)(Flatten()(MaxPool2D({2, 2})(joined)));
  auto model = std::make_unique<Model>(in, out, name);
  model->set_seed(9);
  return model;
}

TEST(LiteConvertTest, AFloatModelFileRunsAsPredictDoes) {
  std::unique_ptr<Sequential> cnn = small_cnn();
  Sequential& model = *cnn;
  const std::string path = temp_path("float_cnn.klite");
  ConvertOptions options;
  options.quantize = false;
  const ConversionReport report = convert(model, path, options);
  // Activation(relu) fuses into the conv before it, Dropout is gone, the last Dense adds a Softmax.
  ASSERT_EQ(report.layers.size(), 8u);
  EXPECT_EQ(report.layers[0].op, "Conv2D");
  EXPECT_EQ(report.layers.back().op, "Softmax");
  auto interp = Interpreter::load(path);
  const Tensor x = images(7, 1);
  const std::vector<float> want = model.predict(x).to_vector<float>();
  const std::vector<float> got = interp->run(x.to_vector<float>().data(), 7);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << i;
}

TEST(LiteConvertTest, AnInt8ModelStaysCloseToTheFloatOneAndReportsEveryOp) {
  std::unique_ptr<Sequential> cnn = small_cnn();
  Sequential& model = *cnn;
  const std::string path = temp_path("int8_cnn.klite");
  ConvertOptions options;
  options.representative = images(256, 2);
  const ConversionReport report = convert(model, path, options);
  EXPECT_EQ(report.calibration_examples, 256);
  for (const LayerReport& l : report.layers) {
    const bool float_op = l.op == "Softmax";
    EXPECT_EQ(l.int8, !float_op) << l.layer << " " << l.op;
    if (l.int8) {
      EXPECT_GT(l.scale, 0.f) << l.layer;
      EXPECT_LE(l.min, 0.f);
      EXPECT_GE(l.max, 0.f);
      // Within a few quantization steps of the float op's output on the calibration data.
      EXPECT_LT(l.rms_error, 4 * l.scale) << l.layer << " " << l.op;
    }
  }
  EXPECT_NE(report.str().find("conv2d"), std::string::npos) << report.str();

  auto int8 = Interpreter::load(path);
  const Tensor x = images(200, 9);  // not the calibration data
  const std::vector<float> want = model.predict(x).to_vector<float>();
  const std::vector<float> got = int8->run(x.to_vector<float>().data(), 200);
  int agree = 0;
  double max_err = 0;
  for (int i = 0; i < 200; ++i) {
    const auto* w = want.data() + i * 5;
    const auto* g = got.data() + i * 5;
    agree += std::max_element(w, w + 5) - w == std::max_element(g, g + 5) - g;
    for (int j = 0; j < 5; ++j) max_err = std::max<double>(max_err, std::abs(w[j] - g[j]));
  }
  EXPECT_GE(agree, 180) << "int8 and float agree on " << agree << " of 200";
  EXPECT_LT(max_err, 0.1);
}

TEST(LiteConvertTest, Int8WeightsMakeTheFileAboutAQuarterOfTheFloatOne) {
  Sequential model({Dense(256, "relu"), Dense(128, "relu"), Dense(10)});
  model.build({64});
  ConvertOptions f;
  f.quantize = false;
  const int64_t float_bytes = convert(model, temp_path("f.klite"), f).file_bytes;
  ConvertOptions q;
  q.representative = random_normal({64, 64}, 4);
  const int64_t int8_bytes = convert(model, temp_path("q.klite"), q).file_bytes;
  EXPECT_LE(int8_bytes, 0.3 * float_bytes) << int8_bytes << " vs " << float_bytes;
}

TEST(LiteConvertTest, AModelSavedWholeConvertsFromItsFile) {
  std::unique_ptr<Sequential> cnn = small_cnn();
  const std::string saved = temp_path("whole.kiln");
  cnn->save(saved);
  ConvertOptions options;
  options.quantize = false;
  convert(saved, temp_path("from_file.klite"), options);
  auto interp = Interpreter::load(temp_path("from_file.klite"));
  const Tensor x = images(3, 5);
  const std::vector<float> want = cnn->predict(x).to_vector<float>();
  const std::vector<float> got = interp->run(x.to_vector<float>().data(), 3);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << i;
}

// tanh, sigmoid, swish and softplus run in float between a Dequantize and a Quantize, and the
// report says so.
TEST(LiteConvertTest, OtherActivationsStayFloatBetweenInt8Ops) {
  Sequential model({Dense(16, "tanh"), Activation("sigmoid"), Dense(12, "swish"),
                    Dense(8, "softplus"), Dense(4)});
  model.set_seed(2);
  model.build({6});
  const Tensor x = random_normal({64, 6}, 3);
  const std::vector<float> want = model.predict(x).to_vector<float>();
  ConvertOptions f;
  f.quantize = false;
  convert(model, temp_path("act_f32.klite"), f);
  const std::vector<float> got_f32 =
      Interpreter::load(temp_path("act_f32.klite"))->run(x.to_vector<float>().data(), 64);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got_f32[i], want[i], 1e-5) << i;

  ConvertOptions q;
  q.representative = random_normal({256, 6}, 4);
  const ConversionReport report = convert(model, temp_path("act_int8.klite"), q);
  int float_ops = 0;
  for (const LayerReport& l : report.layers) {
    EXPECT_EQ(l.int8, l.op != "Activation") << l.layer << " " << l.op;
    float_ops += l.op == "Activation";
  }
  EXPECT_EQ(float_ops, 4);
  auto int8 = Interpreter::load(temp_path("act_int8.klite"));
  int quantizes = 0;
  for (const OpInfo& op : int8->ops()) quantizes += op.type == "Quantize";
  EXPECT_EQ(quantizes, 4);  // after the input and after each float activation
  const std::vector<float> got = int8->run(x.to_vector<float>().data(), 64);
  expect_close(got, want, 0.05, 0.02);
}

// A functional model with a residual sum and a join: the file reads values by index, int8 Add
// and Concatenate rescale their inputs, an unfused relu (its input has two readers) runs in
// float.
TEST(LiteConvertTest, AddAndConcatenateConvertInFunctionalModels) {
  std::unique_ptr<Model> residual = residual_model("residual");
  Model& model = *residual;
  const Tensor x = random_uniform({32, 8, 8, 2}, 6);
  const std::vector<float> want = model.predict(x).to_vector<float>();
  ConvertOptions f;
  f.quantize = false;
  const ConversionReport fr = convert(model, temp_path("residual_f32.klite"), f);
  auto float_file = Interpreter::load(temp_path("residual_f32.klite"));
  const std::vector<float> got_f32 = float_file->run(x.to_vector<float>().data(), 32);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got_f32[i], want[i], 1e-4) << i;
  int adds = 0, joins = 0;
  for (const LayerReport& l : fr.layers) {
    adds += l.op == "Add";
    joins += l.op == "Concatenate";
  }
  EXPECT_EQ(adds, 1);
  EXPECT_EQ(joins, 1);

  ConvertOptions q;
  q.representative = random_uniform({256, 8, 8, 2}, 7);
  convert(model, temp_path("residual_int8.klite"), q);
  const std::vector<float> got =
      Interpreter::load(temp_path("residual_int8.klite"))->run(x.to_vector<float>().data(), 32);
  expect_close(got, want, 0.05, 0.01);
  // QAT builds chains only.
  try {
    quantization_aware(model, q);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnimplemented);
    EXPECT_NE(std::string(e.what()).find("not a chain"), std::string::npos) << e.what();
  }
}

// A relu behind a Dropout still fuses into the Dense before them (Dropout is no reader); one
// whose input has another reader runs in float.
TEST(LiteConvertTest, ReluFusesThroughIdentityLayersButNotOverAnotherReader) {
  Sequential chain({Dense(8), Dropout(0.5), Activation("relu"), Dense(2)});
  chain.build({4});
  ConvertOptions f;
  f.quantize = false;
  int float_acts = 0;
  for (const LayerReport& l : convert(chain, temp_path("fuse.klite"), f).layers) {
    float_acts += l.op == "Activation";
  }
  EXPECT_EQ(float_acts, 0);
  const Tensor x = random_normal({5, 4}, 8);
  const std::vector<float> want = chain.predict(x).to_vector<float>();
  const std::vector<float> got =
      Interpreter::load(temp_path("fuse.klite"))->run(x.to_vector<float>().data(), 5);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << i;
  Tensor in = Input({4});
  Tensor d = Dense(8)(in);
  Model branchy(in, Dense(2)(Concatenate()({Activation("relu")(Dropout(0.5)(d)), d})), "branchy");
  float_acts = 0;
  for (const LayerReport& l : convert(branchy, temp_path("nofuse.klite"), f).layers) {
    float_acts += l.op == "Activation";
  }
  EXPECT_EQ(float_acts, 1);
}

TEST(LiteConvertTest, LayersWithoutALiteOpAreAllNamed) {
  Sequential model({Conv1D(3, 2, "", 1, "valid", /*dilation=*/2), Flatten(), Dense(8),
                    RepeatVector(2), Flatten(), Dense(4)});
  model.build({6, 3});
  try {
    convert(model, temp_path("never.klite"), {});
    FAIL() << "converted a model with RepeatVector and a dilated Conv1D";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnimplemented);
    const std::string m = e.what();
    EXPECT_NE(m.find("(RepeatVector): no lite op"), std::string::npos) << m;
    EXPECT_NE(m.find("(Conv1D): dilation"), std::string::npos) << m;
  }
}

TEST(LiteConvertTest, BadRequestsAreInvalidArguments) {
  Sequential unbuilt({Dense(4)});
  try {
    convert(unbuilt, temp_path("u.klite"), {});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("not built"), std::string::npos) << e.what();
  }
  std::unique_ptr<Sequential> cnn = small_cnn();
  Sequential& model = *cnn;
  ConvertOptions options;  // quantize without representative data
  EXPECT_THROW(convert(model, temp_path("n.klite"), options), Error);
  options.representative = random_uniform({4, 12, 12, 2}, 1);
  options.calibration = Calibration::kPercentile;
  options.percentile = 100.5;
  try {
    convert(model, temp_path("p.klite"), options);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("percentile"), std::string::npos) << e.what();
  }
  options.calibration = Calibration::kMinMax;
  options.representative = random_uniform({4, 12, 12, 3}, 1);
  try {
    convert(model, temp_path("s.klite"), options);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("[4,12,12,3]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[N,12,12,2]"), std::string::npos) << e.what();
  }
}

TEST(LiteConvertTest, RangesHoldZeroAndPercentilesClipOutliers) {
  const QuantParams relu = params_for_range(0.f, 2.55f);
  EXPECT_EQ(relu.zero_point, -128);
  EXPECT_FLOAT_EQ(relu.scale, 0.01f);
  const QuantParams positive = params_for_range(1.f, 3.f);  // widened to [0, 3]
  EXPECT_EQ(positive.zero_point, -128);
  RangeObserver minmax(Calibration::kMinMax, 99.9), pct(Calibration::kPercentile, 99.0);
  std::vector<float> v(1000);
  for (int i = 0; i < 1000; ++i) v[i] = static_cast<float>(i % 100) / 100.f;
  v[500] = 1000.f;  // one outlier
  minmax.observe(v);
  pct.observe(v);
  EXPECT_NEAR(minmax.params().scale, 1000.f / 255.f, 1e-3);
  EXPECT_LT(pct.params().scale, 1.f / 255.f * 1.01f);
}

TEST(LiteConvertTest, WeightsAreSymmetricPerChannelAndBiasesAtTheProductScale) {
  const QuantizedWeights q = quantize_weights({0.5f, -1.f, 0.25f, 0.f, 0.f, 0.f}, 2);
  EXPECT_FLOAT_EQ(q.scales[0], 1.f / 127.f);
  EXPECT_EQ(q.values[1], -127);
  EXPECT_EQ(q.values[0], 64);   // round(63.5) away from zero
  EXPECT_GT(q.scales[1], 0.f);  // an all-zero channel keeps a usable scale
  EXPECT_EQ(q.values[3], 0);
  const std::vector<int32_t> b = quantize_bias({1.f, -1e30f}, 0.5f, {0.01f, 0.01f});
  EXPECT_EQ(b[0], 200);
  EXPECT_EQ(b[1], std::numeric_limits<int32_t>::min());  // saturated
}

}  // namespace
}  // namespace kiln::lite

namespace kiln::lite {
namespace {

using namespace kiln::nn;

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// A saved model's directory, emptied first.
std::string saved_dir(const std::string& name) {
  const std::string dir = testing::TempDir() + "/" + name;
  std::filesystem::remove_all(dir);
  return dir;
}

// Converts `model` and its exported saved model, float and int8 (the same calibration data):
// the graph's patterns lower to the ops the layers do, so each pair of files is byte for byte
// the same, and the float file runs as predict does.
void expect_saved_model_converts_as_its_model(Model& model, const Shape& example, int64_t batch) {
  const std::string dir = saved_dir("lite_saved_" + model.name());
  io::save_model(model, dir);
  Shape calib{64}, shape{batch};
  calib.insert(calib.end(), example.begin(), example.end());
  shape.insert(shape.end(), example.begin(), example.end());
  for (bool quantize : {false, true}) {
    ConvertOptions options;
    options.quantize = quantize;
    options.representative = random_uniform(calib, 21);
    const std::string from_model = temp_path(model.name() + "_model.klite");
    const std::string from_saved = temp_path(model.name() + "_saved.klite");
    const ConversionReport want = convert(model, from_model, options);
    const ConversionReport got = convert(dir, from_saved, options);
    ASSERT_EQ(got.layers.size(), want.layers.size()) << got.str() << want.str();
    for (size_t i = 0; i < got.layers.size(); ++i) {
      EXPECT_EQ(got.layers[i].layer, want.layers[i].layer);
      EXPECT_EQ(got.layers[i].op, want.layers[i].op);
    }
    EXPECT_EQ(read_bytes(from_saved), read_bytes(from_model)) << "quantize " << quantize;
    if (quantize) continue;
    const Tensor x = random_uniform(shape, 22);
    const std::vector<float> expect = model.predict(x).to_vector<float>();
    const std::vector<float> out =
        Interpreter::load(from_saved)->run(x.to_vector<float>().data(), batch);
    ASSERT_EQ(out.size(), expect.size());
    for (size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(out[i], expect[i], 1e-4) << i;
  }
  std::filesystem::remove_all(dir);
}

TEST(LiteConvertSavedModelTest, ACnnConvertsAsItsModelDoes) {
  std::unique_ptr<Sequential> cnn = small_cnn();
  expect_saved_model_converts_as_its_model(*cnn, {12, 12, 2}, 5);
}

TEST(LiteConvertSavedModelTest, EveryFloatActivationAndLayerNormConvertAsTheirModelDoes) {
  Sequential model(
      {Dense(6, "tanh"), Dense(6, "sigmoid"), Dense(6, "swish"), Dense(6, "softplus"),
       Activation("relu"), Dense(6, "gelu"), LayerNormalization(), Dense(5), Activation("softmax")},
      "activations");
  model.set_seed(4);
  model.build({7});
  randomize_layers(model, "LayerNormalization", 30, -0.25);
  expect_saved_model_converts_as_its_model(model, {7}, 9);
}

TEST(LiteConvertSavedModelTest, AddAndConcatenateConvertAsTheirModelDoes) {
  expect_saved_model_converts_as_its_model(*residual_model("residual_saved"), {8, 8, 2}, 4);
}

TEST(LiteConvertSavedModelTest, AVersionDirectoryConvertsToo) {
  std::unique_ptr<Sequential> cnn = small_cnn();
  const std::string version = io::save_model(*cnn, saved_dir("lite_saved_version"));
  ConvertOptions options;
  options.quantize = false;
  EXPECT_EQ(convert(version, temp_path("version.klite"), options).layers.size(), 8u);
}

// A graph written by hand: dot against an [m, k] constant (rhs_contract 1), relu as max(v, 0)
// with no bias, then an add of two values.
TEST(LiteConvertSavedModelTest, AHandWrittenGraphLowersItsOtherForms) {
  Graph g("by_hand");
  Tensor x = g.placeholder(f32, {kUnknownDim, 3}, "x");
  Tensor y;
  {
    auto guard = g.as_default();
    const Tensor w = Tensor::from_list<float>({1, -2, 0.5f, 0, 3, -1}, {2, 3});
    Tensor h = maximum(dot(x, w, {1}, {1}), zeros({}));
    y = h + dot(x, w, {1}, {1});
  }
  const std::string dir = saved_dir("lite_saved_by_hand");
  io::save_graph({"by_hand", g, {{"x", x}}, {{"y", y}}, {}}, dir);
  ConvertOptions options;
  options.quantize = false;
  const ConversionReport report = convert(dir, temp_path("by_hand.klite"), options);
  ASSERT_EQ(report.layers.size(), 3u) << report.str();  // relu FC, FC, Add
  EXPECT_EQ(report.layers[2].op, "Add");
  const std::vector<float> in = {1, 2, 3, -1, 0, 2};
  const std::vector<float> out = Interpreter::load(temp_path("by_hand.klite"))->run(in.data(), 2);
  // Row 1: w x = (1 - 4 + 1.5, 0 + 6 - 3) = (-1.5, 3): relu + itself = (-1.5, 6).
  // Row 2: (-1 + 0 + 1, 0 + 0 - 2) = (0, -2): (0, -2).
  EXPECT_EQ(out, (std::vector<float>{-1.5f, 6.f, 0.f, -2.f}));
}

// Graphs that come close to a pattern but compute something else are refused, not lowered to
// the pattern's op: a normalization by mean(c * x) instead of mean(c * c), and a product over a
// value of the batch dimension alone (no channels for a ChannelAffine).
TEST(LiteConvertSavedModelTest, NearMissesOfAPatternAreRefused) {
  auto refused = [](const std::string& name, const std::function<Tensor(const Tensor&)>& body) {
    Graph g(name);
    Tensor x = g.placeholder(f32, {kUnknownDim, 4}, "x");
    Tensor y;
    {
      auto guard = g.as_default();
      y = body(x);
    }
    const std::string dir = saved_dir("lite_saved_" + name);
    io::save_graph({name, g, {{"x", x}}, {{"y", y}}, {}}, dir);
    ConvertOptions options;
    options.quantize = false;
    try {
      convert(dir, temp_path(name + ".klite"), options);
      ADD_FAILURE() << name << " converted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kUnimplemented) << e.what();
    }
  };
  refused("not_layer_norm", [](const Tensor& x) {
    Tensor c = x - mean(x, {-1}, true);
    return c * rsqrt(mean(c * x, {-1}, true) + 1e-3);
  });
  refused("rank_one_affine", [](const Tensor& x) { return reshape(x, {-1}) * 2.0; });
}

TEST(LiteConvertSavedModelTest, NodesWithoutALiteOpAreNamed) {
  Sequential model({Dense(8), RepeatVector(2), Flatten(), Dense(4)}, "unsupported");
  model.build({6});
  const std::string dir = saved_dir("lite_saved_unsupported");
  io::save_model(model, dir);
  try {
    convert(dir, temp_path("never.klite"), {});
    FAIL() << "converted a saved model with RepeatVector";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnimplemented);
    const std::string m = e.what();
    EXPECT_NE(m.find("saved model unsupported"), std::string::npos) << m;
    EXPECT_NE(m.find("repeat_vector/"), std::string::npos) << m;  // its node, by name and op
  }
  EXPECT_THROW(convert(saved_dir("lite_saved_missing") + "/nothing", temp_path("x.klite"), {}),
               Error);
}

}  // namespace
}  // namespace kiln::lite

namespace kiln::lite {
namespace {

using namespace kiln::nn;

// A CNN with batch normalizations (after a conv: folded into it, relu then fused; after a relu:
// a float ChannelAffine), gelu, SpatialDropout2D and global pools.
std::unique_ptr<Sequential> normalized_cnn(bool global_max) {
  auto model = std::make_unique<Sequential>(
      std::vector<LayerRef>{
          Conv2D(6, {3, 3}, "", {1, 1}, "same"), BatchNormalization(), Activation("relu"),
          SpatialDropout2D(0.1), Conv2D(8, {3, 3}, "relu"), BatchNormalization(),
          global_max ? LayerRef(GlobalMaxPooling2D()) : LayerRef(GlobalAveragePooling2D()),
          Dense(12, "gelu"), Dense(4)},
      global_max ? "normalized_max" : "normalized_avg");
  model->set_seed(5);
  model->build({9, 9, 3});
  randomize_layers(*model, "BatchNormalization", 40, -0.5);
  return model;
}

// LayerNormalization runs in float, in a float file and between Dequantize and Quantize in an
// int8 one.
TEST(LiteConvertTest, LayerNormalizationRunsInFloat) {
  Sequential model({Dense(16, "relu"), LayerNormalization(), Dense(3)}, "layer_norm");
  model.set_seed(12);
  model.build({5});
  randomize_layers(model, "LayerNormalization", 90, 0.25);
  const Tensor x = random_uniform({7, 5}, 13);
  const std::vector<float> want = model.predict(x).to_vector<float>();
  ConvertOptions f;
  f.quantize = false;
  const ConversionReport report = convert(model, temp_path("layer_norm.klite"), f);
  ASSERT_EQ(report.layers.size(), 3u) << report.str();
  EXPECT_EQ(report.layers[1].op, "LayerNorm");
  const std::vector<float> got =
      Interpreter::load(temp_path("layer_norm.klite"))->run(x.to_vector<float>().data(), 7);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << i;
  ConvertOptions q;
  q.representative = random_uniform({128, 5}, 14);
  const ConversionReport int8 = convert(model, temp_path("layer_norm_int8.klite"), q);
  EXPECT_TRUE(int8.layers[0].int8);
  EXPECT_FALSE(int8.layers[1].int8);
  expect_close(
      Interpreter::load(temp_path("layer_norm_int8.klite"))->run(x.to_vector<float>().data(), 7),
      want, 0.05, 0.01);
}

// 1-d layers run as their 2-d ops over an image of one column, between Reshapes.
TEST(LiteConvertTest, OneDimensionalLayersConvert) {
  for (bool global_max : {false, true}) {
    Sequential model(
        {Conv1D(6, 3, "relu", 1, "same"), MaxPool1D(2), Conv1D(4, 2, "tanh", 1, "causal"),
         AveragePool1D(2, 2, "same"),
         global_max ? LayerRef(GlobalMaxPooling1D()) : LayerRef(GlobalAveragePooling1D()),
         Dense(3)},
        global_max ? "series_max" : "series_avg");
    model.set_seed(17);
    model.build({20, 3});
    const Tensor x = random_uniform({6, 20, 3}, 18);
    const std::vector<float> want = model.predict(x).to_vector<float>();
    ConvertOptions f;
    f.quantize = false;
    const ConversionReport report = convert(model, temp_path("series.klite"), f);
    int convs = 0;
    for (const LayerReport& l : report.layers) convs += l.op == "Conv2D";
    EXPECT_EQ(convs, 2) << report.str();
    const std::vector<float> got =
        Interpreter::load(temp_path("series.klite"))->run(x.to_vector<float>().data(), 6);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << i;
    ConvertOptions q;
    q.representative = random_uniform({128, 20, 3}, 19);
    convert(model, temp_path("series_int8.klite"), q);
    expect_close(
        Interpreter::load(temp_path("series_int8.klite"))->run(x.to_vector<float>().data(), 6),
        want, 0.05, 0.01);
  }
}

// MobileNet's block: a depthwise convolution (multiplier 1 with "same" padding and stride 2,
// then multiplier 2), a batch normalization folded into it, relu fused.
TEST(LiteConvertTest, DepthwiseConvolutionsConvert) {
  Sequential model(
      {Conv2D(4, {3, 3}, "relu", {1, 1}, "same"), DepthwiseConv2D({3, 3}, "", {2, 2}, "same"),
       BatchNormalization(), Activation("relu"),
       DepthwiseConv2D({2, 2}, "relu", {1, 1}, "valid", 2), Flatten(), Dense(3)},
      "mobile");
  model.set_seed(21);
  model.build({10, 10, 2});
  randomize_layers(model, "BatchNormalization", 60, -0.5);
  const Tensor x = random_uniform({5, 10, 10, 2}, 22);
  const std::vector<float> want = model.predict(x).to_vector<float>();
  ConvertOptions f;
  f.quantize = false;
  const ConversionReport report = convert(model, temp_path("mobile.klite"), f);
  std::vector<std::string> ops;
  for (const LayerReport& l : report.layers) ops.push_back(l.op);
  EXPECT_EQ(ops, (std::vector<std::string>{"Conv2D", "DepthwiseConv2D", "DepthwiseConv2D",
                                           "Reshape", "FullyConnected"}))
      << report.str();
  const std::vector<float> got =
      Interpreter::load(temp_path("mobile.klite"))->run(x.to_vector<float>().data(), 5);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-4) << i;
  ConvertOptions q;
  q.representative = random_uniform({128, 10, 10, 2}, 23);
  const ConversionReport int8 = convert(model, temp_path("mobile_int8.klite"), q);
  for (const LayerReport& l : int8.layers) EXPECT_TRUE(l.int8) << l.layer;
  expect_close(
      Interpreter::load(temp_path("mobile_int8.klite"))->run(x.to_vector<float>().data(), 5), want,
      0.05, 0.01);
  EXPECT_THROW(quantization_aware(model, q),
               Error);  // its batch normalization: QAT does not fold it
}

TEST(LiteConvertTest, BatchNormalizationFoldsOrRunsInFloatAndGlobalPoolsAndGeluConvert) {
  for (bool global_max : {false, true}) {
    std::unique_ptr<Sequential> cnn = normalized_cnn(global_max);
    Sequential& model = *cnn;
    const Tensor x = random_uniform({6, 9, 9, 3}, 8);
    const std::vector<float> want = model.predict(x).to_vector<float>();
    ConvertOptions f;
    f.quantize = false;
    const ConversionReport report = convert(model, temp_path("normalized.klite"), f);
    std::vector<std::string> ops;
    for (const LayerReport& l : report.layers) ops.push_back(l.op);
    // conv+bn+relu as one Conv2D; the second bn after a relu stays a ChannelAffine; the global
    // pool is a pool and a reshape; gelu runs as an Activation after its Dense.
    EXPECT_EQ(ops, (std::vector<std::string>{"Conv2D", "Conv2D", "ChannelAffine",
                                             global_max ? "MaxPool2D" : "AvgPool2D", "Reshape",
                                             "FullyConnected", "Activation", "FullyConnected"}))
        << report.str();
    const std::vector<float> got =
        Interpreter::load(temp_path("normalized.klite"))->run(x.to_vector<float>().data(), 6);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-4) << i;

    ConvertOptions q;
    q.representative = random_uniform({128, 9, 9, 3}, 9);
    const ConversionReport int8 = convert(model, temp_path("normalized_int8.klite"), q);
    EXPECT_FALSE(int8.layers[2].int8) << "ChannelAffine runs in float";
    EXPECT_TRUE(int8.layers[0].int8);
    const std::vector<float> got8 =
        Interpreter::load(temp_path("normalized_int8.klite"))->run(x.to_vector<float>().data(), 6);
    expect_close(got8, want, 0.05, 0.01);
  }
}

// The same CNN from its saved model: the same ops (batch normalizations folded or a
// ChannelAffine, global pools, gelu), the same outputs within rounding.
TEST(LiteConvertSavedModelTest, NormalizationsGlobalPoolsAndGeluConvertAsTheirModelDoes) {
  for (bool global_max : {false, true}) {
    std::unique_ptr<Sequential> cnn = normalized_cnn(global_max);
    Sequential& model = *cnn;
    const std::string dir = saved_dir("lite_saved_normalized");
    io::save_model(model, dir);
    ConvertOptions f;
    f.quantize = false;
    const ConversionReport from_graph = convert(dir, temp_path("normalized_graph.klite"), f);
    const ConversionReport from_model = convert(model, temp_path("normalized_model.klite"), f);
    ASSERT_EQ(from_graph.layers.size(), from_model.layers.size()) << from_graph.str();
    for (size_t i = 0; i < from_graph.layers.size(); ++i) {
      EXPECT_EQ(from_graph.layers[i].op, from_model.layers[i].op) << from_graph.str();
    }
    const Tensor x = random_uniform({3, 9, 9, 3}, 31);
    const std::vector<float> want = model.predict(x).to_vector<float>();
    const std::vector<float> got =
        Interpreter::load(temp_path("normalized_graph.klite"))->run(x.to_vector<float>().data(), 3);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-4) << i;
    std::filesystem::remove_all(dir);
  }
}

// In a saved model a batch normalization is sub, mul, mul and add by constants (rsqrt of the
// variance computed at conversion): they fold into the conv before them, as in the model.
TEST(LiteConvertSavedModelTest, BatchNormalizationFoldsFromTheGraphToo) {
  Sequential model(
      {Conv2D(6, {3, 3}, "", {1, 1}, "same"), BatchNormalization(), Activation("relu"),
       MaxPool2D({2, 2}), Flatten(), Dense(5), BatchNormalization(), Activation("relu"), Dense(3)},
      "bn_saved");
  model.set_seed(6);
  model.build({8, 8, 2});
  randomize_layers(model, "BatchNormalization", 70, -0.5);
  const std::string dir = saved_dir("lite_saved_bn");
  io::save_model(model, dir);
  ConvertOptions f;
  f.quantize = false;
  const ConversionReport from_graph = convert(dir, temp_path("bn_graph.klite"), f);
  const ConversionReport from_model = convert(model, temp_path("bn_model.klite"), f);
  ASSERT_EQ(from_graph.layers.size(), from_model.layers.size()) << from_graph.str();
  for (size_t i = 0; i < from_graph.layers.size(); ++i) {
    EXPECT_EQ(from_graph.layers[i].op, from_model.layers[i].op) << from_graph.str();
  }
  const Tensor x = random_uniform({4, 8, 8, 2}, 10);
  const std::vector<float> want = model.predict(x).to_vector<float>();
  const std::vector<float> got =
      Interpreter::load(temp_path("bn_graph.klite"))->run(x.to_vector<float>().data(), 4);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-4) << i;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kiln::lite
