// kiln::onnx::export_model: Kiln models (an MLP and a CNN built from nn layers, and a graph of the
// layout, indexing and comparison ops) exported to ONNX pass ONNX's own checker, import back with
// import_model and compute what the original graph computes; ops without an ONNX form are
// listed at once by node name, and a failed export leaves no file behind.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "kiln/error.h"
#include "kiln/function.h"
#include "kiln/io/saved_model.h"
#include "kiln/nn.h"
#include "kiln/onnx.h"
#include "kiln/ops.h"
#include "onnx/onnx_pb.h"
#include "tests/nn/layer_zoo.h"
#include "tests/subprocess.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/values.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using test_values::thrown_error;
using testing::HasSubstr;

class OnnxExport : public testing_util::TempDirTest {
 protected:
  // ONNX's checker (Debian python3-onnx) on the file, with full_check's shape inference: "" when
  // it passes, else its output. Skips the test when /usr/bin/python3 cannot import onnx.
  std::string checker_says(const std::string& model_path) {
    const std::string log = path("checker.log");
    const auto probe = testing_util::run_process({"/usr/bin/python3", "-c", "import onnx"}, log);
    if (!probe.exited_ok()) return "skip";
    const auto r = testing_util::run_process(
        {"/usr/bin/python3", "-c",
         "import onnx,sys; m=onnx.load(sys.argv[1]); onnx.checker.check_model(m, full_check=True)",
         model_path},
        log);
    return r.exited_ok() ? "" : r.output;
  }
};

#define EXPECT_CHECKER_PASSES(path)                                            \
  do {                                                                         \
    const std::string says = checker_says(path);                               \
    if (says == "skip") GTEST_SKIP() << "/usr/bin/python3 cannot import onnx"; \
    EXPECT_EQ(says, "") << "onnx.checker.check_model(full_check=True)";        \
  } while (0)

io::ExportedGraph exported(nn::Model& model, const Shape& input_shape) {
  nn::Model::InferenceGraph ig = model.inference_graph(input_shape);
  io::ExportedGraph g{model.name(), ig.graph, {}, {}, ig.variables};
  for (size_t i = 0; i < ig.inputs.size(); ++i)
    g.inputs.emplace_back(ig.input_names[i], ig.inputs[i]);
  for (size_t o = 0; o < ig.outputs.size(); ++o)
    g.outputs.emplace_back(ig.output_names[o], ig.outputs[o]);
  return g;
}

// The original graph's outputs for `x` (its one input), run by the reference interpreter with
// the variables' current values.
std::vector<Tensor> run_original(const io::ExportedGraph& g, const Tensor& x) {
  FeedList feeds{{g.inputs[0].second, x}};
  for (const auto& [var, placeholder] : g.variables) feeds.emplace_back(placeholder, var.value());
  std::vector<Tensor> fetches;
  for (const auto& [name, t] : g.outputs) fetches.push_back(t);
  return g.graph.run(feeds, fetches);
}

// Within 1e-5 of each other, element by element (relative to the larger magnitude past 1).
void expect_close(const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.dtype(), want.dtype());
  ASSERT_EQ(got.shape(), want.shape());
  const Tensor a = convert(got, f64), b = convert(want, f64);
  const std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>();
  for (size_t i = 0; i < av.size(); ++i) {
    EXPECT_NEAR(av[i], bv[i], 1e-5 * std::max(1.0, std::abs(bv[i]))) << "element " << i;
  }
}

// Imports `file` and compares its outputs with the graph's at two batch sizes, interpreted and
// compiled. With fix_batch the batch size is given at import (ImportOptions::input_shapes), as
// the importer needs for ops whose shapes it computes with (Conv, Slice, Gather, Expand);
// otherwise one import runs at both.
void expect_round_trip(const io::ExportedGraph& g, const std::string& file, const Shape& item,
                       bool fix_batch) {
  for (int64_t batch : {5, 2}) {
    Shape s = {batch};
    s.insert(s.end(), item.begin(), item.end());
    onnx::ImportOptions options;
    if (fix_batch) options.input_shapes = {{g.inputs[0].first, s}};
    onnx::Model m = onnx::import_model(file, options);
    ASSERT_EQ(m.input_names(), std::vector<std::string>{g.inputs[0].first});
    ASSERT_EQ(m.output_names().size(), g.outputs.size());
    const Tensor x = random_normal(s, static_cast<uint64_t>(batch));
    const std::vector<Tensor> want = run_original(g, x);
    for (ExecutionMode mode : {ExecutionMode::kInterpreted, ExecutionMode::kCompiled}) {
      SCOPED_TRACE("batch " + std::to_string(batch) +
                   (mode == ExecutionMode::kCompiled ? ", compiled" : ", interpreted"));
      m.set_execution_mode(mode);
      const std::vector<Tensor> got = m.run({x});
      ASSERT_EQ(got.size(), want.size());
      for (size_t o = 0; o < got.size(); ++o) expect_close(got[o], want[o]);
    }
  }
}

// ---- models from nn layers ------------------------------------------------------------------

TEST_F(OnnxExport, MlpPassesTheCheckerAndComputesTheSameAfterImport) {
  nn::Sequential model(
      {nn::Dense(16, "relu"), nn::Dropout(0.5), nn::Dense(8, "tanh"), nn::Dense(4, "softmax")});
  model.set_seed(3);
  model.build({12});
  const io::ExportedGraph g = exported(model, {12});
  const std::string file = path("mlp.onnx");
  onnx::export_model(g, file);

  ::onnx::ModelProto proto;
  ASSERT_TRUE(proto.ParseFromString(read_file(file)));
  EXPECT_EQ(proto.producer_name(), "kiln");
  EXPECT_EQ(proto.opset_import(0).version(), 17);
  // The weights are initializers (3 kernels, 3 biases) with their values; the batch is symbolic.
  EXPECT_GE(proto.graph().initializer_size(), 6);
  EXPECT_EQ(proto.graph().input(0).type().tensor_type().shape().dim(0).dim_param(), "batch");
  EXPECT_EQ(proto.graph().input(0).type().tensor_type().shape().dim(1).dim_value(), 12);
  int matmuls = 0;
  for (const auto& n : proto.graph().node()) matmuls += n.op_type() == "MatMul";
  EXPECT_EQ(matmuls, 3);

  EXPECT_CHECKER_PASSES(file);
  expect_round_trip(g, file, {12}, /*fix_batch=*/false);
}

TEST_F(OnnxExport, CnnPassesTheCheckerAndComputesTheSameAfterImport) {
  nn::Sequential model({nn::Conv2D(4, {3, 3}, "relu"), nn::MaxPool2D({2, 2}),
                        nn::Conv2D(6, {3, 3}, "relu", {1, 1}, "same"), nn::AveragePool2D({2, 2}),
                        nn::Flatten(), nn::Dense(10)});
  model.set_seed(5);
  model.build({10, 10, 2});
  const io::ExportedGraph g = exported(model, {10, 10, 2});
  const std::string file = path("cnn.onnx");
  onnx::export_model(g, file);

  ::onnx::ModelProto proto;
  ASSERT_TRUE(proto.ParseFromString(read_file(file)));
  std::vector<std::string> ops;
  for (const auto& n : proto.graph().node()) ops.push_back(n.op_type());
  EXPECT_EQ(std::count(ops.begin(), ops.end(), "Conv"), 2);
  EXPECT_EQ(std::count(ops.begin(), ops.end(), "MaxPool"), 1);
  EXPECT_EQ(std::count(ops.begin(), ops.end(), "AveragePool"), 1);
  // The HWIO kernels are exported as OIHW initializers (no Transpose of a weight at run time).
  for (const auto& n : proto.graph().node()) {
    if (n.op_type() != "Conv") continue;
    bool found = false;
    for (const auto& t : proto.graph().initializer()) {
      if (t.name() != n.input(1)) continue;
      found = true;
      EXPECT_EQ(t.dims(2), 3);
      EXPECT_EQ(t.dims(3), 3);
    }
    EXPECT_TRUE(found) << n.name() << "'s kernel is not an initializer";
  }

  EXPECT_CHECKER_PASSES(file);
  expect_round_trip(g, file, {10, 10, 2}, /*fix_batch=*/true);
}

// ---- the primitive ops -----------------------------------------------------------------------

// A graph of the layout, indexing, comparison and reduction ops nn layers do not all use.
io::ExportedGraph op_zoo() {
  Graph graph("op_zoo");
  Tensor x = graph.placeholder(f32, {kUnknownDim, 6}, "x");
  Tensor t = transpose(reshape(x, {-1, 2, 3}), {0, 2, 1});             // [b,3,2]
  Tensor s = slice(t, {0, 1, 0}, {kUnknownDim, 3, 2}, {1, 1, 1});      // [b,2,2]
  Tensor c = concatenate({s, reverse(s, {1})}, 2);                     // [b,2,4]
  Tensor p = pad(c, {0, 1, 0}, {0, 0, 1}, 0.5);                        // [b,3,5]
  Tensor g = gather(p, Tensor::from_vector<int32_t>({2, 0}, {2}), 1);  // [b,2,5]
  Tensor b = broadcast_in_dim(Tensor::from_vector<float>({1, -1, 2, 0, 3}, {5}), {2, 5}, {1});
  Tensor w = where(greater(g, b), g * b, clamp(g - b, -1.0, 1.0));  // [b,2,5]
  Tensor q = log_softmax(w, -1) + convert(argmax(w, 2, /*keepdims=*/true), f32) +
             convert(not_equal(w, scalar_like(0, w)), f32) + exp(w) / (1.0 + abs(w));
  Tensor r = sum(q, {2}) + max(q, {2}) +
             slice(reshape(rsqrt(1.0 + q * q), {-1, 10}), {0, 0}, {kUnknownDim, 2});  // [b,2]
  io::ExportedGraph out{"op_zoo", graph, {{"x", x}}, {{"y", r}, {"x_again", x}}, {}};
  return out;
}

TEST_F(OnnxExport, LayoutIndexingAndComparisonOpsComputeTheSameAfterImport) {
  const io::ExportedGraph g = op_zoo();
  const std::string file = path("zoo.onnx");
  onnx::export_model(g, file);
  EXPECT_CHECKER_PASSES(file);
  expect_round_trip(g, file, {6}, /*fix_batch=*/true);
}

// A traced kiln::function: its trace (weights captured as constants) exports like a model.
TEST_F(OnnxExport, TracedFunctionExportsThroughItsTrace) {
  const Tensor w = random_normal({6, 3}, 11);
  const Tensor b = random_normal({3}, 12);
  auto f = kiln::function([w, b](const Tensor& x) { return softmax(relu(matmul(x, w) + b), -1); });
  const Tensor x = random_normal({4, 6}, 13);
  const Function::Trace t = f.trace({x});
  const io::ExportedGraph g{"traced", t.graph, {{"x", t.arguments[0]}}, {{"y", t.outputs[0]}}, {}};
  const std::string file = path("traced.onnx");
  onnx::export_model(g, file);
  EXPECT_CHECKER_PASSES(file);
  onnx::Model m = onnx::import_model(file);
  expect_close(m.run({x})[0], f(x));
}

// ---- every layer ----------------------------------------------------------------------------

// The layer zoo's models that have no ONNX form yet, and the op that stops them.
const std::map<std::string, std::string> kZooWithoutOnnxForm = {
    {"lstm", "(scan)"}, {"gru_sequences", "(scan)"}, {"bidirectional_masked", "(scan)"}};

// Every layer of the zoo (tests/nn/layer_zoo.h: convolutions, transposed convolutions, pooling,
// merging, normalization, reshaping, wrappers...) in a model of its own: exported, checked by
// ONNX in one run, imported back and run interpreted, equal to the original within 1e-5 (most
// bit for bit; AveragePool times the window's size is not a sum to the bit).
TEST_F(OnnxExport, EveryZooLayerExportsAndComputesTheSameOrIsListed) {
  std::vector<std::string> files;
  for (const nn::testing::ZooCase& c : nn::testing::zoo()) {
    SCOPED_TRACE(c.name);
    std::unique_ptr<nn::Model> model = c.make();
    auto [x, y] = c.data();
    Shape features(x.shape().begin() + 1, x.shape().end());
    if (!model->input_type()) model->build(features, x.dtype());
    nn::Model::InferenceGraph ig = model->inference_graph();
    ASSERT_EQ(ig.inputs.size(), 1u);
    io::ExportedGraph g{c.name, ig.graph, {{ig.input_names[0], ig.inputs[0]}}, {}, ig.variables};
    for (size_t o = 0; o < ig.outputs.size(); ++o)
      g.outputs.emplace_back(ig.output_names[o], ig.outputs[o]);
    const std::string file = path(c.name + ".onnx");
    auto missing = kZooWithoutOnnxForm.find(c.name);
    if (missing != kZooWithoutOnnxForm.end()) {
      const Error e = thrown_error([&] { onnx::export_model(g, file); });
      EXPECT_EQ(e.code(), ErrorCode::kUnimplemented);
      EXPECT_THAT(e.what(), HasSubstr(missing->second));
      continue;
    }
    ASSERT_NO_THROW(onnx::export_model(g, file));
    files.push_back(file);
    Shape four = x.shape();
    four[0] = 4;
    const Tensor xb = slice(x, Axes(x.rank(), 0), four);
    onnx::ImportOptions options;
    options.input_shapes = {{g.inputs[0].first, four}};
    onnx::Model m = onnx::import_model(file, options);
    m.set_execution_mode(ExecutionMode::kInterpreted);
    const std::vector<Tensor> got = m.run({xb}), want = run_original(g, xb);
    ASSERT_EQ(got.size(), want.size());
    for (size_t o = 0; o < got.size(); ++o) expect_close(got[o], want[o]);
  }
  std::vector<std::string> argv = {
      "/usr/bin/python3", "-c",
      "import onnx,sys\n"
      "for f in sys.argv[1:]:\n"
      "  try: onnx.checker.check_model(onnx.load(f), full_check=True)\n"
      "  except Exception as e: print(f, e)\n"};
  argv.insert(argv.end(), files.begin(), files.end());
  if (checker_says(files.at(0)) == "skip") GTEST_SKIP() << "/usr/bin/python3 cannot import onnx";
  EXPECT_EQ(testing_util::run_process(argv, path("zoo_checker.log")).output, "");
}

// ---- errors ------------------------------------------------------------------------------

io::ExportedGraph unsupported_model() {
  Graph graph("odd");
  Tensor x = graph.placeholder(f32, {4, 3}, "x");
  Tensor y;
  {
    auto scope = graph.name_scope("angle");
    y = atan2(x, x + 1.0);
  }
  Tensor z = pad(y, {0, 0}, {0, 0}, 0, {1, 0});  // interior padding
  io::ExportedGraph out{"odd", graph, {{"x", x}}, {{"y", tanh(z)}}, {}};
  return out;
}

TEST_F(OnnxExport, ListsEveryNodeWithoutAnOnnxFormAtOnce) {
  const std::string file = path("odd.onnx");
  const Error e = thrown_error([&] { onnx::export_model(unsupported_model(), file); });
  EXPECT_EQ(e.code(), ErrorCode::kUnimplemented);
  EXPECT_THAT(e.what(), HasSubstr("Kiln cannot export 2 nodes to ONNX"));
  EXPECT_THAT(e.what(), HasSubstr("node 'angle/atan2' (atan2)"));
  EXPECT_THAT(e.what(), HasSubstr("(pad): interior padding [1,0]"));
  EXPECT_FALSE(fs::exists(file));
  EXPECT_EQ(files(), std::vector<std::string>{});
}

TEST_F(OnnxExport, AFailedExportLeavesNoFileAndKeepsAnOldOne) {
  nn::Sequential model({nn::Dense(3)});
  model.build({2});
  const io::ExportedGraph g = exported(model, {2});
  // A directory that does not exist.
  const std::string missing = path("no/such/dir/m.onnx");
  EXPECT_THROW(onnx::export_model(g, missing), Error);
  EXPECT_FALSE(fs::exists(missing));
  // A path that is a directory: the rename fails and the temporary file goes.
  fs::create_directories(path("taken.onnx"));
  const Error e = thrown_error([&] { onnx::export_model(g, path("taken.onnx")); });
  EXPECT_THAT(e.what(), HasSubstr("taken.onnx"));
  EXPECT_TRUE(fs::is_directory(path("taken.onnx")));
  // A model that fails to export does not touch the file it would have replaced.
  write_file("old.onnx", "old bytes");
  EXPECT_THROW(onnx::export_model(unsupported_model(), path("old.onnx")), Error);
  EXPECT_EQ(read_file(path("old.onnx")), "old bytes");
  EXPECT_EQ(files(), (std::vector<std::string>{"old.onnx", "taken.onnx"}));
}

TEST_F(OnnxExport, OptionsSetTheOpsetProducerAndDimensionNames) {
  nn::Sequential model({nn::Dense(3, "sigmoid")});
  model.build({2});
  const io::ExportedGraph g = exported(model, {2});
  onnx::ExportOptions options;
  options.opset = 13;
  options.producer_version = "test-1";
  options.dim_names = {{"x", {"n"}}, {"output_0", {"n"}}};
  ::onnx::ModelProto proto;
  ASSERT_TRUE(proto.ParseFromString(onnx::export_model_to_string(g, options)));
  EXPECT_EQ(proto.opset_import(0).version(), 13);
  EXPECT_EQ(proto.ir_version(), 7);
  EXPECT_EQ(proto.producer_version(), "test-1");
  EXPECT_EQ(proto.graph().input(0).type().tensor_type().shape().dim(0).dim_param(), "n");
  EXPECT_EQ(proto.graph().output(0).type().tensor_type().shape().dim(0).dim_param(), "n");
  const std::string file = write_file("opset13.onnx", onnx::export_model_to_string(g, options));
  EXPECT_CHECKER_PASSES(file);

  options.opset = 18;
  test_values::expect_error([&] { onnx::export_model_to_string(g, options); },
                            ErrorCode::kInvalidArgument, "opset 18 is out of range");
}

}  // namespace
}  // namespace kiln
