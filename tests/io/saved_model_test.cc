// Model export: a trained model saved, loaded in another process (which has only kiln and the
// custom op) and in this one, bit-identical to model.predict; versions; what the file holds;
// corrupt, missing and inconsistent files reported as kiln::Error.
#include "kiln/io/saved_model.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <functional>
#include <thread>

#include "kiln/io/checkpoint.h"
#include "kiln/io/tfrecord.h"
#include "kiln/nn.h"
#include "src/api/io/proto/saved_model.pb.h"
#include "tests/io/export_test_op.h"
#include "tests/subprocess.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/values.h"

namespace kiln::io {
namespace {

using test_values::thrown_error;

namespace fs = std::filesystem;
namespace saved = proto::saved;
using testing::HasSubstr;

// A layer that calls the custom op (on the model's input): the loading program must have
// registered it.
class Affine : public nn::Layer {
 public:
  Affine() : Layer("affine") {}
  std::string type_name() const override { return "Affine"; }
  std::shared_ptr<Layer> clone() const override { return std::make_shared<Affine>(*this); }
  Tensor call(const std::vector<Tensor>& in, nn::CallContext&) override {
    return call_op("export_test_affine", {in[0]},
                   export_test::attrs(Tensor::from_vector<float>({0.5f, -1.f, 2.f, 0.f})))[0];
  }
};

std::unique_ptr<nn::Sequential> trained_model() {
  auto model = std::make_unique<nn::Sequential>(
      std::vector<nn::LayerRef>{Affine(), nn::Dense(8, "relu"), nn::Dropout(0.25), nn::Dense(3)});
  model->set_seed(7);
  model->compile(optim::Adam(0.01), nn::SparseCategoricalCrossentropy(true));
  Tensor x = random_normal({64, 4}, 1);
  Tensor y = convert(random_uniform({64}, 2, 0, 3), i32);
  model->fit(x, y, {.epochs = 2, .batch_size = 16, .seed = 3, .verbose = 0});
  return model;
}

// A dense layer whose kernel is the tanh of its weight: a computation on a weight alone, which a
// loaded model must compute as the model did, not fold into a constant with the interpreter.
class TanhKernel : public nn::Layer {
 public:
  explicit TanhKernel(int64_t units) : Layer("tanh_kernel"), units_(units) {}
  std::string type_name() const override { return "TanhKernel"; }
  std::shared_ptr<Layer> clone() const override { return std::make_shared<TanhKernel>(*this); }
  void build(const std::vector<Shape>& shapes) override {
    w_ = add_weight("w", {shapes[0].back(), units_}, nn::random_uniform_init(-1, 1));
  }
  Tensor call(const std::vector<Tensor>& in, nn::CallContext& ctx) override {
    return matmul(in[0], tanh(ctx.read(w_)));
  }

 private:
  int64_t units_;
  Variable w_;
};

// A model whose compiled predictions differ from the interpreter's in their last bits (compiled,
// tanh and softmax's exp are polynomial approximations).
std::unique_ptr<nn::Sequential> trained_tanh_model() {
  auto model = std::make_unique<nn::Sequential>(
      std::vector<nn::LayerRef>{nn::Dense(32, "tanh"), TanhKernel(16), nn::Dense(3, "softmax")});
  model->set_seed(5);
  model->compile(optim::Adam(0.01), nn::SparseCategoricalCrossentropy());
  Tensor x = random_normal({64, 4}, 6);
  Tensor y = convert(random_uniform({64}, 7, 0, 3), i32);
  model->fit(x, y, {.epochs = 1, .batch_size = 32, .seed = 8, .verbose = 0});
  return model;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

class SavedModelTest : public testing_util::TempDirTest {
 protected:
  static saved::SavedModel read_proto(const std::string& version_dir) {
    saved::SavedModel m;
    EXPECT_TRUE(m.ParseFromString(read_records(version_dir + "/saved_model.pb").at(0)));
    return m;
  }
  static void write_proto(const std::string& version_dir, const saved::SavedModel& m) {
    RecordWriter w(version_dir + "/saved_model.pb");
    w.write(m.SerializeAsString());
    w.close();
  }
};

TEST_F(SavedModelTest, ALoadedModelPredictsBitIdenticallyInAnotherProcess) {
  auto model = trained_model();
  const std::string version_dir = save_model(*model, path("export"), {4});
  EXPECT_EQ(version_dir, path("export/1"));
  Tensor x = random_normal({10, 4}, 99);
  Tensor expected = model->predict(x, 10);
  model.reset();  // nothing of the model remains in this process either

  save_checkpoint(path("in"), {{"x", x}});
  testing_util::ProcessResult r = testing_util::run_process(
      {KILN_LOAD_MODEL_MAIN, path("export"), path("in"), path("out")}, path("log"));
  ASSERT_TRUE(r.exited_ok()) << r.output;
  EXPECT_THAT(r.output, HasSubstr("serving_default input x f32[?,4]"));
  EXPECT_THAT(r.output, HasSubstr("serving_default output output_0 f32[?,3]"));
  EXPECT_TRUE(same_bytes(load_checkpoint(path("out")).tensors.at("y"), expected));

  LoadedModel loaded = load_model(path("export"));
  EXPECT_TRUE(same_bytes(loaded.predict(x), expected));
  EXPECT_TRUE(same_bytes(loaded.run("serving_default", {{"x", x}}).at("output_0"), expected));
}

// Loaded models run compiled, like the model they were saved from: the same program, so the
// same bits as its compiled predict, compiled once per input shapes.
// KILN_INTERPRET's switch, or the handle's own, selects the interpreter.
TEST_F(SavedModelTest, ALoadedModelRunsCompiledBitIdenticallyToTheModelsCompiledPredict) {
  if (default_execution_mode() != ExecutionMode::kCompiled) GTEST_SKIP() << "KILN_INTERPRET";
  auto model = trained_tanh_model();
  Tensor x = random_normal({32, 4}, 9), five = random_normal({5, 4}, 12);
  model->set_execution_mode(ExecutionMode::kCompiled);
  Tensor compiled = model->predict(x, 32), compiled_five = model->predict(five, 5);
  model->set_execution_mode(ExecutionMode::kInterpreted);
  Tensor interpreted = model->predict(x, 32);
  // One answer per op (docs/numerics.md): tanh's f32 approximation is the same in the reference
  // kernels and the code generator, so the modes agree; compile_stats below tell which ran.
  EXPECT_TRUE(same_bytes(compiled, interpreted)) << "compiled and interpreted tanh differ";
  LoadedModel loaded = load_model(save_model(*model, path("m"), {4}));
  model.reset();

  EXPECT_EQ(loaded.execution_mode(), ExecutionMode::kCompiled);
  EXPECT_TRUE(same_bytes(loaded.predict(x), compiled));
  EXPECT_TRUE(same_bytes(loaded.run("serving_default", {{"x", x}}).at("output_0"), compiled));
  EXPECT_EQ(loaded.compile_stats().compiles, 1);
  EXPECT_EQ(loaded.compile_stats().cache_hits, 1);
  EXPECT_TRUE(same_bytes(loaded.predict(five), compiled_five));  // a new batch size: a new program
  EXPECT_EQ(loaded.compile_stats().compiles, 2);

  const ExecutionMode before = default_execution_mode();
  set_default_execution_mode(ExecutionMode::kInterpreted);  // what KILN_INTERPRET=1 sets
  EXPECT_EQ(loaded.execution_mode(), ExecutionMode::kInterpreted);
  Tensor by_default = loaded.predict(x);
  set_default_execution_mode(before);
  EXPECT_TRUE(same_bytes(by_default, interpreted));
  LoadedModel copy = loaded;
  copy.set_execution_mode(ExecutionMode::kInterpreted);
  EXPECT_TRUE(same_bytes(copy.predict(x), interpreted));
  EXPECT_EQ(loaded.execution_mode(), ExecutionMode::kCompiled);
  EXPECT_EQ(loaded.compile_stats().compiles, 2);  // the interpreted runs compiled nothing
}

// Two threads running a loaded model's signature at once (its first compile included) each get
// their own, correct predictions.
TEST_F(SavedModelTest, ALoadedModelRunsConcurrently) {
  auto model = trained_tanh_model();
  const std::vector<Tensor> inputs = {random_normal({8, 4}, 10), random_normal({8, 4}, 11)};
  std::vector<Tensor> expected;
  for (const Tensor& x : inputs) expected.push_back(model->predict(x, 8));
  LoadedModel loaded = load_model(save_model(*model, path("m"), {4}));
  std::atomic<int> ready{0}, wrong{0}, errors{0};
  auto serve = [&](int t) {
    ++ready;
    while (ready.load() < 2) {
    }
    for (int i = 0; i < 20; ++i) {
      try {
        if (!same_bytes(loaded.predict(inputs[t]), expected[t])) ++wrong;
      } catch (const Error&) {
        ++errors;
      }
    }
  };
  std::thread a(serve, 0), b(serve, 1);
  a.join();
  b.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(errors.load(), 0);
  if (loaded.execution_mode() == ExecutionMode::kCompiled) {
    EXPECT_EQ(loaded.compile_stats().compiles, 1);  // one signature and shape: compiled once
    EXPECT_EQ(loaded.compile_stats().cache_hits, 39);
  }
}

TEST_F(SavedModelTest, TheFileHoldsTheNeededNodesAllAttrKindsSignaturesAndVariables) {
  auto model = trained_model();
  const std::string version_dir = save_model(*model, path("m"), {4});
  saved::SavedModel m = read_proto(version_dir);
  EXPECT_EQ(m.format_version(), 1u);
  EXPECT_EQ(m.model_name(), "sequential");
  ASSERT_EQ(m.signatures_size(), 1);
  const saved::SignatureDef& sig = m.signatures(0);
  EXPECT_EQ(sig.name(), "serving_default");
  ASSERT_EQ(sig.inputs_size(), 1);
  EXPECT_EQ(sig.inputs(0).name(), "x");
  EXPECT_EQ(m.nodes(sig.inputs(0).value().node()).op(), "placeholder");
  EXPECT_EQ(sig.inputs(0).type().shape(0), -1);
  EXPECT_EQ(sig.outputs(0).name(), "output_0");

  std::map<std::string, int> ops;
  for (int i = 0; i < m.nodes_size(); ++i) {
    ++ops[m.nodes(i).op()];
    for (const saved::NodeInput& in : m.nodes(i).inputs()) EXPECT_LT(in.node(), i);
  }
  EXPECT_EQ(ops["placeholder"], 5);  // x and the four variables: no seed, no optimizer slots
  EXPECT_EQ(ops["dot"], 2);
  EXPECT_EQ(ops["random_bernoulli_like"], 0);  // no dropout at inference
  const saved::NodeDef* found = nullptr;
  for (const saved::NodeDef& n : m.nodes())
    if (n.op() == "export_test_affine") found = &n;
  ASSERT_NE(found, nullptr);
  const saved::NodeDef& affine = *found;
  EXPECT_EQ(m.nodes(affine.inputs(0).node()).op(), "placeholder");
  std::map<std::string, saved::AttrDef::ValueCase> kinds;
  for (const saved::AttrDef& a : affine.attrs()) kinds[a.name()] = a.value_case();
  EXPECT_EQ(kinds["repeat"], saved::AttrDef::kI);
  EXPECT_EQ(kinds["scale"], saved::AttrDef::kF);
  EXPECT_EQ(kinds["negate"], saved::AttrDef::kB);
  EXPECT_EQ(kinds["mode"], saved::AttrDef::kS);
  EXPECT_EQ(kinds["out_dtype"], saved::AttrDef::kDtype);
  EXPECT_EQ(kinds["perm"], saved::AttrDef::kInts);
  EXPECT_EQ(kinds["empty"], saved::AttrDef::kInts);
  EXPECT_EQ(kinds["weights"], saved::AttrDef::kFloats);
  EXPECT_EQ(kinds["shift"], saved::AttrDef::kTensor);
  ASSERT_EQ(m.variables_size(), 4);

  SavedModelInfo info = describe_saved_model(path("m"));
  EXPECT_EQ(info.version, 1);
  EXPECT_EQ(info.num_parameters, 4 * 8 + 8 + 8 * 3 + 3);
  EXPECT_EQ(info.op_counts["export_test_affine"], 1);
  EXPECT_EQ(info.variables.size(), 4u);
  EXPECT_EQ(info.signatures.at("serving_default").inputs.at("x").str(), "f32[?,4]");
}

TEST_F(SavedModelTest, VersionsCountUpAndLoadPicksTheLatestOrTheOneAsked) {
  auto model = trained_model();
  Tensor x = random_normal({5, 4}, 4);
  Tensor first = model->predict(x, 5);
  fs::create_directories(path("m/.tmp-saved_model-stale"));  // a crashed save: not a version
  EXPECT_EQ(save_model(*model, path("m"), {4}), path("m/1"));
  for (const Variable& v : model->weights()) {
    Variable w = v;
    w.assign(v.value() * 2.0);
  }
  Tensor second = model->predict(x, 5);
  EXPECT_EQ(save_model(*model, path("m"), {4}), path("m/2"));
  fs::create_directories(path("m/notes"));

  EXPECT_EQ(load_model(path("m")).info().version, 2);
  EXPECT_TRUE(same_bytes(load_model(path("m")).predict(x), second));
  EXPECT_TRUE(same_bytes(load_model(path("m"), 1).predict(x), first));
  EXPECT_TRUE(same_bytes(load_model(path("m/1")).predict(x), first));
  Error e = thrown_error([&] { load_model(path("m"), 7); });
  EXPECT_EQ(e.code(), ErrorCode::kNotFound);
  EXPECT_THAT(e.what(), HasSubstr("has no version 7 (it has 1, 2)"));
}

TEST_F(SavedModelTest, RunChecksSignatureNamesAndInputs) {
  auto model = trained_model();
  LoadedModel loaded = load_model(save_model(*model, path("m"), {4}));
  EXPECT_THAT(thrown_error([&] { loaded.run("nope", {}); }).what(),
              HasSubstr("no signature 'nope' (it has: serving_default)"));
  EXPECT_THAT(thrown_error([&] { loaded.run("serving_default", {}); }).what(),
              HasSubstr("needs input 'x' (f32[?,4])"));
  Tensor x = random_normal({2, 4}, 1);
  EXPECT_THAT(thrown_error([&] {
                loaded.run("serving_default", {{"x", x}, {"z", x}});
              }).what(),
              HasSubstr("has no input 'z'"));
  EXPECT_THAT(thrown_error([&] {
                loaded.predict(random_normal({2, 5}, 1));
              }).what(),
              HasSubstr("signature 'serving_default', input 'x' is f32[?,4], got f32[2,5]"));
  EXPECT_THAT(thrown_error([&] { loaded.predict(convert(x, f64)); }).what(),
              HasSubstr("input 'x' is f32[?,4], got f64[2,4]"));
}

TEST_F(SavedModelTest, MissingModelsAreNotFound) {
  EXPECT_EQ(thrown_error([&] { load_model(path("nothing")); }).code(), ErrorCode::kNotFound);
  fs::create_directories(path("empty"));
  Error e = thrown_error([&] { load_model(path("empty")); });
  EXPECT_EQ(e.code(), ErrorCode::kNotFound);
  EXPECT_THAT(e.what(), HasSubstr("no saved model in"));
}

// Given a file, or a directory of something else, load_model says what it was given.
TEST_F(SavedModelTest, AWholeModelOrCheckpointIsNamedNotJustNotADirectory) {
  nn::Sequential model({nn::Dense(2)});
  model.build({3});
  model.save(path("m.kiln"));
  Error e = thrown_error([&] { load_model(path("m.kiln")); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(e.what(), HasSubstr("load_model: " + path("m.kiln") +
                                  " is a Kiln model (.kiln), not an exported model directory; "
                                  "load it with nn::load_model"));
  const std::string prefix = save_checkpoint(path("ck/ckpt-1"), model.state());
  e = thrown_error([&] { describe_saved_model(prefix + ".index"); });
  EXPECT_THAT(e.what(), HasSubstr(prefix + ".index is a checkpoint index, not an exported model"));
  e = thrown_error([&] { load_model(path("ck")); });
  EXPECT_THAT(e.what(), HasSubstr("no saved model in " + path("ck")));
  EXPECT_THAT(e.what(), HasSubstr("it is a checkpoint directory"));
}

TEST_F(SavedModelTest, CorruptAndMissingFilesAreErrorsNeverCrashes) {
  auto model = trained_model();
  const std::string v = save_model(*model, path("m"), {4});
  const std::string pb = v + "/saved_model.pb";
  const std::string original = read_file(pb);
  // Every byte of saved_model.pb, one flipped bit each; and every truncation.
  for (size_t i = 0; i < original.size(); ++i) {
    std::string bytes = original;
    bytes[i] ^= static_cast<char>(1 << (i % 8));
    write_file(pb, bytes);
    EXPECT_EQ(thrown_error([&] { load_model(path("m")); }).code(), ErrorCode::kDataLoss) << i;
  }
  for (size_t n : {size_t{0}, size_t{5}, original.size() / 2, original.size() - 1}) {
    write_file(pb, original.substr(0, n));
    EXPECT_EQ(thrown_error([&] { load_model(path("m")); }).code(), ErrorCode::kDataLoss) << n;
  }
  write_file(pb, original);
  // A flipped bit in the variables' data names the variable.
  CheckpointIndex vars = read_checkpoint_index(v + "/variables/variables");
  std::string data = read_file(vars.data_path);
  data[vars.entries[1].offset] ^= 1;
  write_file(vars.data_path, data);
  Error e = thrown_error([&] { load_model(path("m")); });
  EXPECT_EQ(e.code(), ErrorCode::kDataLoss);
  EXPECT_THAT(e.what(), HasSubstr("tensor '" + vars.entries[1].name + "'"));
  // A file of another kind over the variables' index (here the model's own graph) is the export
  // damaged, not a wrong file the user passed: kDataLoss from both readers, naming the index.
  const std::string index = read_file(v + "/variables/variables.index");
  write_file(v + "/variables/variables.index", original);
  for (const Error& damaged : {thrown_error([&] { load_model(path("m")); }),
                               thrown_error([&] { describe_saved_model(path("m")); })}) {
    EXPECT_EQ(damaged.code(), ErrorCode::kDataLoss) << damaged.what();
    EXPECT_THAT(damaged.what(), HasSubstr("variables.index"));
  }
  write_file(v + "/variables/variables.index", index);
  EXPECT_THAT(thrown_error([&] { load_model(path("m")); }).what(), HasSubstr("CRC-32C mismatch"));
  fs::remove(v + "/variables/variables.index");
  EXPECT_THAT(thrown_error([&] { load_model(path("m")); }).what(), HasSubstr("variables"));
  fs::remove(pb);
  EXPECT_EQ(thrown_error([&] { load_model(path("m")); }).code(), ErrorCode::kNotFound);
}

TEST_F(SavedModelTest, InconsistentGraphsAreReportedWithTheNode) {
  auto model = trained_model();
  const std::string v = save_model(*model, path("m"), {4});
  const saved::SavedModel good = read_proto(v);
  int aff = -1;  // the custom op's node
  for (int i = 0; i < good.nodes_size(); ++i)
    if (good.nodes(i).op() == "export_test_affine") aff = i;
  ASSERT_GE(aff, 0);
  auto expect_error = [&](const std::function<void(saved::SavedModel&)>& edit, ErrorCode code,
                          const std::string& says) {
    saved::SavedModel bad = good;
    edit(bad);
    write_proto(v, bad);
    Error e = thrown_error([&] { load_model(path("m")); });
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_THAT(e.what(), HasSubstr(says));
  };
  expect_error([&](auto& m) { m.mutable_nodes(aff)->mutable_inputs(0)->set_node(aff); },
               ErrorCode::kDataLoss, "refers to node");
  expect_error([&](auto& m) { m.mutable_nodes(aff)->mutable_inputs(0)->set_output(5); },
               ErrorCode::kDataLoss, "refers to output 5");
  expect_error([&](auto& m) { m.mutable_nodes(aff)->mutable_inputs(0)->set_node(-3); },
               ErrorCode::kDataLoss, "refers to node -3");
  expect_error([&](auto& m) { m.mutable_nodes(aff)->set_op("no_such_op"); }, ErrorCode::kNotFound,
               "op no_such_op");
  expect_error([&](auto& m) { m.mutable_nodes(aff)->mutable_outputs(0)->set_shape(1, 5); },
               ErrorCode::kDataLoss, "the op now gives (f32[?,4]), the file says (f32[?,5])");
  expect_error([&](auto& m) { m.mutable_variables(0)->set_key("nope"); }, ErrorCode::kDataLoss,
               "variable 'nope' is not in");
  expect_error([&](auto& m) { m.mutable_variables(0)->set_node(aff); }, ErrorCode::kDataLoss,
               "not a placeholder");
  expect_error(
      [&](auto& m) {
        for (auto& a : *m.mutable_nodes(aff)->mutable_attrs())
          if (a.name() == "shift") a.mutable_tensor()->set_data("abc");
      },
      ErrorCode::kDataLoss, "attribute 'shift': a f32[4] tensor needs 16 bytes, the file has 3");
  expect_error(
      [&](auto& m) {
        for (auto& a : *m.mutable_nodes(aff)->mutable_attrs())
          if (a.name() == "shift") a.mutable_tensor()->set_shape(0, int64_t{1} << 62);
      },
      ErrorCode::kDataLoss, "invalid tensor shape");
  expect_error([&](auto& m) { m.mutable_nodes(aff)->mutable_attrs(0)->clear_value(); },
               ErrorCode::kDataLoss, "has no value");
  expect_error(
      [&](auto& m) { m.mutable_nodes(aff)->mutable_attrs(0)->set_dtype(proto::KilnDType(77)); },
      ErrorCode::kDataLoss, "unknown dtype 77");
  expect_error(
      [&](auto& m) { m.mutable_signatures(0)->mutable_inputs(0)->mutable_value()->set_node(aff); },
      ErrorCode::kDataLoss, "is not a placeholder");
  expect_error([&](auto& m) { m.set_format_version(2); }, ErrorCode::kDataLoss,
               "unsupported format version 2");
  // A signature that says other than its graph, or that could not run on its inputs alone.
  expect_error(
      [&](auto& m) {
        m.mutable_signatures(0)->mutable_outputs(0)->mutable_type()->set_shape(1, 7);
      },
      ErrorCode::kDataLoss, "is declared f32[?,7], but output 0 of its node");
  expect_error([&](auto& m) { m.mutable_variables()->RemoveLast(); }, ErrorCode::kDataLoss,
               "which is neither its input nor a variable");
  expect_error(
      [&](auto& m) {
        m.mutable_signatures(0)->mutable_inputs(0)->mutable_value()->set_node(
            m.variables(0).node());
      },
      ErrorCode::kDataLoss, "is bound to a variable");
  // A custom op's own check of its attributes fails with the op's error, naming the node.
  expect_error(
      [&](auto& m) {
        for (auto& a : *m.mutable_nodes(aff)->mutable_attrs())
          if (a.name() == "repeat") a.set_i(4);
      },
      ErrorCode::kInvalidArgument, "export_test_affine: repeat must be 3");
}

TEST_F(SavedModelTest, AnUnregisteredCustomOpIsNotFound) {
  auto model = trained_model();
  const std::string v = save_model(*model, path("m"), {4});
  saved::SavedModel m = read_proto(v);
  for (auto& n : *m.mutable_nodes())
    if (n.op() == "export_test_affine") n.set_op("export_test_affine_unregistered");
  write_proto(v, m);
  Error e = thrown_error([&] { load_model(path("m")); });
  EXPECT_EQ(e.code(), ErrorCode::kNotFound);
  EXPECT_THAT(e.what(),  // nodes are scoped by layer
              HasSubstr("('affine/export_test_affine', op export_test_affine_unregistered)"));
  EXPECT_THAT(e.what(), HasSubstr("unknown op"));
}

}  // namespace
}  // namespace kiln::io
