// kiln::onnx::import_model on models built here with ONNX's own protobuf classes: an imported
// model runs compiled and interpreted, batch sizes the file leaves symbolic, saves as a Kiln
// model, fine-tunes through variables; bad files and models get kiln::Error naming what is
// wrong, every unsupported node at once. (The op-by-op conformance is onnx_conformance_main.cc.)
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "kiln/autodiff.h"
#include "kiln/error.h"
#include "kiln/hub.h"
#include "kiln/io/saved_model.h"
#include "kiln/nn.h"
#include "kiln/onnx.h"
#include "kiln/ops.h"
#include "onnx/onnx_pb.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/values.h"

namespace kiln {
namespace {

using testing::HasSubstr;
using testing::Not;

// ---- building models ----------------------------------------------------------------------

void set_type(::onnx::ValueInfoProto* v, const std::string& name, int32_t elem,
              const std::vector<std::string>& dims) {
  v->set_name(name);
  auto* tt = v->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(elem);
  auto* shape = tt->mutable_shape();
  for (const std::string& d : dims) {
    auto* dim = shape->add_dim();
    if (!d.empty() && std::isdigit(static_cast<unsigned char>(d[0]))) dim->set_dim_value(std::stoll(d));
    else dim->set_dim_param(d);
  }
}

::onnx::TensorProto float_tensor(const std::string& name, const std::vector<int64_t>& dims,
                                 const std::vector<float>& values) {
  ::onnx::TensorProto t;
  t.set_name(name);
  t.set_data_type(::onnx::TensorProto::FLOAT);
  for (int64_t d : dims) t.add_dims(d);
  for (float v : values) t.add_float_data(v);
  return t;
}

::onnx::NodeProto* add_node(::onnx::GraphProto* g, const std::string& op, const std::string& name,
                            const std::vector<std::string>& inputs,
                            const std::vector<std::string>& outputs) {
  ::onnx::NodeProto* n = g->add_node();
  n->set_op_type(op);
  n->set_name(name);
  for (const auto& i : inputs) n->add_input(i);
  for (const auto& o : outputs) n->add_output(o);
  return n;
}

void add_int_attr(::onnx::NodeProto* n, const std::string& name, int64_t v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::INT);
  a->set_i(v);
}

::onnx::ModelProto new_model(int64_t opset = 13) {
  ::onnx::ModelProto m;
  m.set_ir_version(8);
  m.set_producer_name("kiln-test");
  m.set_producer_version("1");
  auto* o = m.add_opset_import();
  o->set_domain("");
  o->set_version(opset);
  m.mutable_graph()->set_name("test_graph");
  return m;
}

const std::vector<float> kW = {0.5f, -1.0f, 0.25f, 2.0f, 0.0f, -0.5f,
                               1.5f, 0.75f, -2.0f, -0.25f, 1.0f, 0.5f};  // [4, 3]
const std::vector<float> kB = {0.1f, -0.2f, 0.3f};

// x [batch, 4] -> Gemm(W [4, 3], B [3]) -> Relu -> Softmax(axis 1) -> y [batch, 3]
std::string mlp_model() {
  ::onnx::ModelProto m = new_model();
  ::onnx::GraphProto* g = m.mutable_graph();
  set_type(g->add_input(), "x", ::onnx::TensorProto::FLOAT, {"batch", "4"});
  set_type(g->add_output(), "y", ::onnx::TensorProto::FLOAT, {"batch", "3"});
  *g->add_initializer() = float_tensor("W", {4, 3}, kW);
  *g->add_initializer() = float_tensor("B", {3}, kB);
  add_node(g, "Gemm", "dense", {"x", "W", "B"}, {"h"});
  add_node(g, "Relu", "relu", {"h"}, {"r"});
  add_int_attr(add_node(g, "Softmax", "softmax", {"r"}, {"y"}), "axis", 1);
  return m.SerializeAsString();
}

// The same model's numbers, by hand.
std::vector<float> mlp_reference(const std::vector<float>& x, int64_t batch,
                                 const std::vector<float>& w = kW) {
  std::vector<float> y;
  for (int64_t b = 0; b < batch; ++b) {
    float r[3], total = 0;
    for (int j = 0; j < 3; ++j) {
      float h = kB[j];
      for (int k = 0; k < 4; ++k) h += x[b * 4 + k] * w[k * 3 + j];
      r[j] = std::exp(std::max(h, 0.0f));
      total += r[j];
    }
    for (int j = 0; j < 3; ++j) y.push_back(r[j] / total);
  }
  return y;
}

std::vector<float> batch_of(int64_t batch) {
  std::vector<float> x;
  for (int64_t i = 0; i < batch * 4; ++i) x.push_back(0.3f * static_cast<float>(i % 7) - 0.8f);
  return x;
}

void expect_near(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << "element " << i;
}

using test_values::thrown_error;

// ---- tests --------------------------------------------------------------------------------

TEST(OnnxImport, RunsCompiledAndInterpretedAtAnyBatchSize) {
  const onnx::Model model = onnx::import_model_from_string(mlp_model());
  EXPECT_EQ(model.input_names(), std::vector<std::string>{"x"});
  EXPECT_EQ(model.output_names(), std::vector<std::string>{"y"});
  EXPECT_EQ(model.opset(), 13);
  EXPECT_EQ(model.producer(), "kiln-test 1");
  for (ExecutionMode mode : {ExecutionMode::kCompiled, ExecutionMode::kInterpreted}) {
    onnx::Model m = model;
    m.set_execution_mode(mode);
    for (int64_t batch : {1, 2, 5}) {
      const std::vector<float> x = batch_of(batch);
      const std::vector<Tensor> y = m.run({Tensor::from_vector(x, {batch, 4})});
      ASSERT_EQ(y.size(), 1u);
      EXPECT_EQ(y[0].shape(), (Shape{batch, 3}));
      expect_near(y[0].to_vector<float>(), mlp_reference(x, batch));
    }
  }
}

TEST(OnnxImport, NamesNodesAsScopesAndFoldsWeightsAsConstants) {
  const onnx::Model model = onnx::import_model_from_string(mlp_model());
  EXPECT_TRUE(model.graph().variables.empty());
  bool dense = false, softmax = false;
  const Graph& graph = model.graph().graph;
  for (int id = 0; id < graph.num_nodes(); ++id) {
    const std::string name = graph.node(id).name;
    dense = dense || name.rfind("dense/", 0) == 0;
    softmax = softmax || name.rfind("softmax/", 0) == 0;
  }
  EXPECT_TRUE(dense && softmax);
}

TEST(OnnxImport, RunsByNameAndChecksInputs) {
  const onnx::Model model = onnx::import_model_from_string(mlp_model());
  const std::vector<float> x = batch_of(2);
  const auto y = model.run(std::map<std::string, Tensor>{{"x", Tensor::from_vector(x, {2, 4})}});
  expect_near(y.at("y").to_vector<float>(), mlp_reference(x, 2));

  Error e = thrown_error([&] { model.run({Tensor::from_vector(batch_of(1), {1, 2, 2})}); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(e.what(), HasSubstr("input 'x'"));
  e = thrown_error([&] { model.run({Tensor::from_vector(std::vector<int32_t>(4, 1), {1, 4})}); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  e = thrown_error([&] { model.run(std::vector<Tensor>{}); });
  EXPECT_THAT(e.what(), HasSubstr("takes 1 inputs, got 0"));
  e = thrown_error([&] {
    model.run(std::map<std::string, Tensor>{{"x", Tensor::from_vector(x, {2, 4})},
                                            {"z", Tensor::from_vector(x, {2, 4})}});
  });
  EXPECT_THAT(e.what(), HasSubstr("no input 'z'"));
}

TEST(OnnxImport, ListsEveryUnsupportedNodeAtOnce) {
  ::onnx::ModelProto m = new_model();
  ::onnx::GraphProto* g = m.mutable_graph();
  auto* o = m.add_opset_import();
  o->set_domain("com.example");
  o->set_version(2);
  set_type(g->add_input(), "x", ::onnx::TensorProto::FLOAT, {"3"});
  set_type(g->add_output(), "y", ::onnx::TensorProto::FLOAT, {"3"});
  add_node(g, "FrobnicateOp", "frob", {"x"}, {"a"});
  add_node(g, "Custom", "custom", {"x"}, {"b"})->set_domain("com.example");
  add_int_attr(add_node(g, "Relu", "relu_with_extra", {"x"}, {"c"}), "alpha_beta", 1);
  add_node(g, "Add", "uses_failed", {"a", "b"}, {"d"});  // depends on failed nodes only
  add_node(g, "Add", "sum", {"d", "c"}, {"y"});
  const Error e = thrown_error([&] { onnx::import_model_from_string(m.SerializeAsString(), {}, "m"); });
  EXPECT_EQ(e.code(), ErrorCode::kUnimplemented);
  const std::string msg = e.what();
  EXPECT_THAT(msg, HasSubstr("cannot import 3 nodes"));
  EXPECT_THAT(msg, HasSubstr("'frob' (FrobnicateOp, domain ai.onnx, opset 13): the op is not"));
  EXPECT_THAT(msg, HasSubstr("'custom' (Custom, domain com.example, opset 2)"));
  EXPECT_THAT(msg, HasSubstr("'relu_with_extra' (Relu"));
  EXPECT_THAT(msg, HasSubstr("alpha_beta"));
  EXPECT_THAT(msg, Not(HasSubstr("uses_failed")));
}

TEST(OnnxImport, ReportsMissingCorruptAndMalformedModels) {
  Error e = thrown_error([] { onnx::import_model("/nonexistent/dir/model.onnx"); });
  EXPECT_EQ(e.code(), ErrorCode::kNotFound);
  EXPECT_THAT(e.what(), HasSubstr("/nonexistent/dir/model.onnx"));

  e = thrown_error([] { onnx::import_model_from_string("\xff\xff\xff garbage", {}, "junk.onnx"); });
  EXPECT_EQ(e.code(), ErrorCode::kDataLoss);
  EXPECT_THAT(e.what(), HasSubstr("junk.onnx"));

  const std::string good = mlp_model();
  e = thrown_error([&] { onnx::import_model_from_string(good.substr(0, good.size() / 2)); });
  EXPECT_EQ(e.code(), ErrorCode::kDataLoss);

  ::onnx::ModelProto m = new_model();
  set_type(m.mutable_graph()->add_input(), "x", ::onnx::TensorProto::FLOAT, {"3"});
  set_type(m.mutable_graph()->add_output(), "y", ::onnx::TensorProto::FLOAT, {"3"});
  add_node(m.mutable_graph(), "Add", "early", {"x", "later"}, {"y"});
  add_node(m.mutable_graph(), "Relu", "late", {"x"}, {"later"});
  e = thrown_error([&] { onnx::import_model_from_string(m.SerializeAsString()); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(e.what(), HasSubstr("uses 'later' before it is produced"));

  // Weights whose float_data does not fill their dims.
  m = new_model();
  set_type(m.mutable_graph()->add_input(), "x", ::onnx::TensorProto::FLOAT, {"3"});
  set_type(m.mutable_graph()->add_output(), "y", ::onnx::TensorProto::FLOAT, {"3"});
  *m.mutable_graph()->add_initializer() = float_tensor("w", {3}, {1, 2});
  add_node(m.mutable_graph(), "Mul", "scale", {"x", "w"}, {"y"});
  e = thrown_error([&] { onnx::import_model_from_string(m.SerializeAsString()); });
  EXPECT_EQ(e.code(), ErrorCode::kDataLoss);
  EXPECT_THAT(e.what(), HasSubstr("initializer 'w'"));

  // Shapes that do not fit: Add of [3] and [2].
  m = new_model();
  set_type(m.mutable_graph()->add_input(), "x", ::onnx::TensorProto::FLOAT, {"3"});
  set_type(m.mutable_graph()->add_output(), "y", ::onnx::TensorProto::FLOAT, {"3"});
  *m.mutable_graph()->add_initializer() = float_tensor("w", {2}, {1, 2});
  add_node(m.mutable_graph(), "Add", "bad_add", {"x", "w"}, {"y"});
  e = thrown_error([&] { onnx::import_model_from_string(m.SerializeAsString()); });
  EXPECT_THAT(e.what(), HasSubstr("'bad_add' (Add"));

  // An output declared with another dtype than the graph computes.
  m = new_model();
  set_type(m.mutable_graph()->add_input(), "x", ::onnx::TensorProto::FLOAT, {"3"});
  set_type(m.mutable_graph()->add_output(), "y", ::onnx::TensorProto::INT64, {"3"});
  add_node(m.mutable_graph(), "Relu", "relu", {"x"}, {"y"});
  e = thrown_error([&] { onnx::import_model_from_string(m.SerializeAsString()); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(e.what(), HasSubstr("output 'y' is f32, the model declares INT64"));
}

// Every single-bit flip of a model: an import, or a kiln::Error of the kinds import_model
// documents, never a crash; a model that still imports runs or refuses its input cleanly.
TEST(OnnxImport, BitFlippedModelsImportOrFailCleanly) {
  const std::string good = mlp_model();
  int imported = 0, refused = 0;
  for (size_t i = 0; i < good.size(); ++i) {
    for (int bit = 0; bit < 8; bit += 3) {
      std::string bad = good;
      bad[i] = static_cast<char>(bad[i] ^ (1 << bit));
      try {
        const onnx::Model m = onnx::import_model_from_string(bad, {}, "flipped");
        ++imported;
        try {
          m.run(std::vector<Tensor>(m.input_names().size(),
                                    Tensor::from_vector(batch_of(2), {2, 4})));
        } catch (const Error& e) {
          EXPECT_NE(e.code(), ErrorCode::kInternal) << "byte " << i << ": " << e.what();
        }
      } catch (const Error& e) {
        ++refused;
        EXPECT_TRUE(e.code() == ErrorCode::kDataLoss || e.code() == ErrorCode::kUnimplemented ||
                    e.code() == ErrorCode::kInvalidArgument)
            << "byte " << i << " bit " << bit << ": " << e.what();
      }
    }
  }
  EXPECT_GT(imported, 0);  // flips in names and values still make a model
  EXPECT_GT(refused, 0);
}

// A Reshape whose target shape is a graph input: importing needs its value, so it is a static
// input (like jax.jit's static_argnums); left symbolic, the import says how to fix it.
TEST(OnnxImport, StaticInputsFixValuesTheImportNeeds) {
  ::onnx::ModelProto m = new_model();
  ::onnx::GraphProto* g = m.mutable_graph();
  set_type(g->add_input(), "x", ::onnx::TensorProto::FLOAT, {"2", "3"});
  set_type(g->add_input(), "shape", ::onnx::TensorProto::INT64, {"2"});
  set_type(g->add_output(), "y", ::onnx::TensorProto::FLOAT, {"3", "2"});
  add_node(g, "Reshape", "reshape", {"x", "shape"}, {"y"});
  const std::string bytes = m.SerializeAsString();

  const Error e = thrown_error([&] { onnx::import_model_from_string(bytes); });
  EXPECT_EQ(e.code(), ErrorCode::kUnimplemented);
  EXPECT_THAT(e.what(), HasSubstr("static_inputs"));

  onnx::ImportOptions options;
  options.static_inputs["shape"] = Tensor::from_vector(std::vector<int64_t>{3, 2}, {2});
  const onnx::Model model = onnx::import_model_from_string(bytes, options);
  EXPECT_EQ(model.input_names(), std::vector<std::string>{"x"});
  const Tensor y = model.run({Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3})})[0];
  EXPECT_EQ(y.shape(), (Shape{3, 2}));
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6}));

  options.static_inputs["nope"] = Tensor::scalar<int64_t>(1);
  EXPECT_EQ(thrown_error([&] { onnx::import_model_from_string(bytes, options); }).code(),
            ErrorCode::kInvalidArgument);
  options.static_inputs.erase("nope");
  options.static_inputs["shape"] = Tensor::from_vector(std::vector<int32_t>{3, 2}, {2});
  EXPECT_THAT(thrown_error([&] { onnx::import_model_from_string(bytes, options); }).what(),
              HasSubstr("must be a concrete i64"));
}

TEST(OnnxImport, InputShapesReplaceSymbolicDimensions) {
  onnx::ImportOptions options;
  options.input_shapes["x"] = {2, 4};
  const onnx::Model model = onnx::import_model_from_string(mlp_model(), options);
  EXPECT_EQ(model.graph().inputs[0].second.shape(), (Shape{2, 4}));
  options.input_shapes["x"] = {2, 5};  // the file says 4
  const Error e = thrown_error([&] { onnx::import_model_from_string(mlp_model(), options); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(e.what(), HasSubstr("does not fit the model's"));
}

// Initializers as variables: the weights can change (fine-tuning) and gradients reach them.
TEST(OnnxImport, InitializersAsVariablesTrainAndFeedEachRun) {
  onnx::ImportOptions options;
  options.initializers_as_variables = true;
  const onnx::Model model = onnx::import_model_from_string(mlp_model(), options);
  ASSERT_EQ(model.graph().variables.size(), 2u);
  const std::vector<float> x = batch_of(3);
  expect_near(model.run({Tensor::from_vector(x, {3, 4})})[0].to_vector<float>(),
              mlp_reference(x, 3));

  Variable w = model.graph().variables[0].first;
  EXPECT_EQ(w.value().shape(), (Shape{4, 3}));
  std::vector<float> w2 = kW;
  for (float& v : w2) v *= -0.5f;
  w.assign(Tensor::from_vector(w2, {4, 3}));
  expect_near(model.run({Tensor::from_vector(x, {3, 4})})[0].to_vector<float>(),
              mlp_reference(x, 3, w2));

  const Tensor y = model.graph().outputs[0].second;
  const Tensor loss = sum(mul(y, y));
  const std::vector<Tensor> grads = gradients(loss, {model.graph().variables[0].second});
  ASSERT_EQ(grads.size(), 1u);
  EXPECT_EQ(grads[0].shape(), (Shape{4, 3}));
}

TEST(OnnxImportSave, ImportedModelSavesAndLoadsAsAKilnModel) {
  const std::string dir = testing_util::per_test_dir("kiln_onnx_save").string();
  std::filesystem::remove_all(dir);
  onnx::ImportOptions options;
  options.input_shapes["x"] = {2, 4};
  const onnx::Model model = onnx::import_model_from_string(mlp_model(), options);
  io::save_graph(model.graph(), dir);
  const io::LoadedModel loaded = io::load_model(dir);
  const std::vector<float> x = batch_of(2);
  const auto y = loaded.run("serving_default", {{"x", Tensor::from_vector(x, {2, 4})}});
  expect_near(y.at("y").to_vector<float>(), mlp_reference(x, 2));
  std::filesystem::remove_all(dir);
}

// Weights stored beside the model (external data), and locations that try to leave its folder.
TEST(OnnxImportExternal, ReadsExternalDataInsideTheModelDirectoryOnly) {
  const std::filesystem::path dir = testing_util::per_test_dir("kiln_onnx_external");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::vector<float> w = {1.5f, -2.0f, 4.0f};
  testing_util::write_file(dir / "weights.bin",
                           std::string("PAD!") + std::string(reinterpret_cast<const char*>(w.data()),
                                                             w.size() * sizeof(float)));
  auto model_with = [&](const std::string& location, const std::string& length) {
    ::onnx::ModelProto m = new_model();
    ::onnx::GraphProto* g = m.mutable_graph();
    set_type(g->add_input(), "x", ::onnx::TensorProto::FLOAT, {"3"});
    set_type(g->add_output(), "y", ::onnx::TensorProto::FLOAT, {"3"});
    ::onnx::TensorProto* t = g->add_initializer();
    t->set_name("w");
    t->set_data_type(::onnx::TensorProto::FLOAT);
    t->add_dims(3);
    t->set_data_location(::onnx::TensorProto::EXTERNAL);
    for (auto [k, v] : std::vector<std::pair<std::string, std::string>>{
             {"location", location}, {"offset", "4"}, {"length", length}}) {
      auto* e = t->add_external_data();
      e->set_key(k);
      e->set_value(v);
    }
    add_node(g, "Mul", "scale", {"x", "w"}, {"y"});
    const std::string path = (dir / "model.onnx").string();
    testing_util::write_file(path, m.SerializeAsString());
    return path;
  };
  const onnx::Model model = onnx::import_model(model_with("weights.bin", "12"));
  const Tensor y = model.run({Tensor::from_vector(std::vector<float>{1, 2, 3}, {3})})[0];
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{1.5f, -4.0f, 12.0f}));

  Error e = thrown_error([&] { onnx::import_model(model_with("../weights.bin", "12")); });
  EXPECT_EQ(e.code(), ErrorCode::kDataLoss);
  EXPECT_THAT(e.what(), HasSubstr("leaves the model's directory"));
  e = thrown_error([&] { onnx::import_model(model_with("missing.bin", "12")); });
  EXPECT_EQ(e.code(), ErrorCode::kDataLoss);
  EXPECT_THAT(e.what(), HasSubstr("missing.bin"));
  e = thrown_error([&] { onnx::import_model(model_with("weights.bin", "8")); });
  EXPECT_EQ(e.code(), ErrorCode::kDataLoss);
  EXPECT_THAT(e.what(), HasSubstr("initializer 'w'"));
  std::filesystem::remove_all(dir);
}

TEST(OnnxTensorProto, ReadsTestDataAndRejectsBadFiles) {
  const std::filesystem::path dir = testing_util::per_test_dir("kiln_onnx_tensor");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  ::onnx::TensorProto t;
  t.set_data_type(::onnx::TensorProto::INT64);
  t.add_dims(2);
  t.add_dims(2);
  for (int64_t v : {int64_t{1}, int64_t{-2}, int64_t{3}, int64_t{1} << 40}) t.add_int64_data(v);
  testing_util::write_file(dir / "t.pb", t.SerializeAsString());
  const Tensor x = onnx::read_tensor_proto((dir / "t.pb").string());
  EXPECT_EQ(x.dtype(), i64);
  EXPECT_EQ(x.shape(), (Shape{2, 2}));
  EXPECT_EQ(x.to_vector<int64_t>(), (std::vector<int64_t>{1, -2, 3, 1LL << 40}));

  ::onnx::TensorProto raw;  // raw_data, little-endian bytes
  raw.set_data_type(::onnx::TensorProto::FLOAT);
  raw.add_dims(2);
  const float values[2] = {0.25f, -8.0f};
  raw.set_raw_data(std::string(reinterpret_cast<const char*>(values), sizeof(values)));
  testing_util::write_file(dir / "raw.pb", raw.SerializeAsString());
  EXPECT_EQ(onnx::read_tensor_proto((dir / "raw.pb").string()).to_vector<float>(),
            (std::vector<float>{0.25f, -8.0f}));
  raw.set_raw_data(std::string(reinterpret_cast<const char*>(values), 6));  // short
  testing_util::write_file(dir / "short.pb", raw.SerializeAsString());
  EXPECT_EQ(thrown_error([&] { onnx::read_tensor_proto((dir / "short.pb").string()); }).code(),
            ErrorCode::kDataLoss);

  ::onnx::TensorProto strings;
  strings.set_data_type(::onnx::TensorProto::STRING);
  strings.add_dims(1);
  strings.add_string_data("a");
  testing_util::write_file(dir / "s.pb", strings.SerializeAsString());
  EXPECT_THAT(thrown_error([&] { onnx::read_tensor_proto((dir / "s.pb").string()); }).what(),
              HasSubstr("STRING"));
  std::filesystem::remove_all(dir);
}


// ---- kiln::hub ------------------------------------------------------------------------------

class Hub : public testing_util::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    const char* old = std::getenv("KILN_HUB_CACHE");
    saved_cache_ = old ? std::optional<std::string>(old) : std::nullopt;
    setenv("KILN_HUB_CACHE", path("cache").c_str(), 1);
  }
  void TearDown() override {
    if (saved_cache_) setenv("KILN_HUB_CACHE", saved_cache_->c_str(), 1);
    else unsetenv("KILN_HUB_CACHE");
    TempDirTest::TearDown();
  }
  std::optional<std::string> saved_cache_;
};

TEST_F(Hub, ResolvesPathsFileUrlsAndTheCache) {
  const std::string file = write_file("mlp.onnx", mlp_model());
  EXPECT_EQ(hub::cache_dir(), path("cache"));
  EXPECT_EQ(hub::resolve(file), file);
  EXPECT_EQ(hub::resolve("file://" + file), file);
  std::filesystem::create_directories(path("cache/vision/extractor/1"));
  EXPECT_EQ(hub::resolve("vision/extractor/1"), path("cache/vision/extractor/1"));

  // http(s): the cached copy when there is one; otherwise no download, and where to put it.
  Error e = thrown_error([] { hub::resolve("https://models.example/vision/mlp.onnx"); });
  EXPECT_EQ(e.code(), ErrorCode::kUnimplemented);
  EXPECT_THAT(e.what(), HasSubstr(path("cache/models.example/vision/mlp.onnx")));
  std::filesystem::create_directories(path("cache/models.example/vision"));
  testing_util::write_file(path("cache/models.example/vision/mlp.onnx"), mlp_model());
  EXPECT_EQ(hub::resolve("https://models.example/vision/mlp.onnx?download=1"),
            path("cache/models.example/vision/mlp.onnx"));

  EXPECT_EQ(thrown_error([] { hub::resolve("no/such/model"); }).code(), ErrorCode::kNotFound);
  EXPECT_EQ(thrown_error([] { hub::resolve("https://host/../../etc/passwd"); }).code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(thrown_error([] { hub::resolve("s3://bucket/model"); }).code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(thrown_error([] { hub::resolve(""); }).code(), ErrorCode::kInvalidArgument);
}

// An ONNX model as the frozen base of a new Kiln model: the base computes what the file says,
// fit trains only the head; trainable, the base's weights move too.
TEST_F(Hub, OnnxModelBecomesALayerFrozenOrFineTuned) {
  const std::string file = write_file("mlp.onnx", mlp_model());
  for (bool trainable : {false, true}) {
    SCOPED_TRACE(trainable ? "trainable" : "frozen");
    std::shared_ptr<nn::GraphLayer> base = hub::layer("file://" + file, trainable);
    EXPECT_EQ(base->name(), "mlp");
    const std::vector<float> xs = batch_of(4);
    expect_near((*base)(Tensor::from_vector(xs, {4, 4})).to_vector<float>(),
                mlp_reference(xs, 4));
    nn::Sequential model({base, nn::Dense(2)});
    model.compile(optim::Adam(0.05), nn::SparseCategoricalCrossentropy(true));
    model.build({4});
    ASSERT_EQ(base->weights().size(), 2u);
    const std::vector<float> w_before = base->weights()[0].value().to_vector<float>();
    const Tensor x = random_uniform({32, 4}, 1, -1, 1);
    const Tensor y = convert(random_uniform({32}, 2, 0, 2), i32);
    model.fit(x, y, {.epochs = 3, .batch_size = 8, .seed = 1, .verbose = 0});
    EXPECT_EQ(base->weights()[0].value().to_vector<float>() != w_before, trainable);
    EXPECT_EQ(model.trainable_weights().size(), trainable ? 4u : 2u);
  }
}

TEST_F(Hub, LoadsSavedModelDirectories) {
  nn::Sequential base({nn::Dense(3, "relu")});
  base.build({4});
  const std::string version = io::save_model(base, path("cache/kiln/dense/"), {4});
  const io::ExportedGraph g = hub::load("kiln/dense");
  EXPECT_EQ(g.variables.size(), 2u);
  std::shared_ptr<nn::GraphLayer> layer = hub::layer(version);
  EXPECT_EQ(layer->name(), "dense");  // the model's folder, not its version number
  const Tensor x = random_uniform({2, 4}, 3);
  EXPECT_EQ((*layer)(x).to_vector<float>(), base.predict(x).to_vector<float>());
}

}  // namespace
}  // namespace kiln
