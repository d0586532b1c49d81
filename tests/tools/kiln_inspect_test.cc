// kiln-inspect run on a small saved model and a checkpoint: its output names the signatures,
// ops, variables, parameter counts, tensors and metadata; bad paths exit 1 with the error.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "kiln/io/checkpoint.h"
#include "kiln/io/saved_model.h"
#include "kiln/kiln.h"
#include "kiln/nn.h"
#include "tests/subprocess.h"
#include "tests/testing/temp_dir.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::HasSubstr;

class KilnInspect : public testing_util::TempDirTest {
 protected:
  testing_util::ProcessResult inspect(const std::string& target) {
    return testing_util::run_process({KILN_INSPECT, target}, path("log"));
  }
};

TEST_F(KilnInspect, DescribesASavedModel) {
  nn::Sequential model({nn::Dense(5, "relu"), nn::Dense(2)});
  model.build({3});
  io::save_model(model, path("model"), {3});
  testing_util::ProcessResult r = inspect(path("model"));
  ASSERT_TRUE(r.exited_ok()) << r.output;
  EXPECT_THAT(r.output, HasSubstr("version 1"));
  EXPECT_THAT(r.output, HasSubstr("signature 'serving_default'"));
  EXPECT_THAT(r.output, HasSubstr("input  x: f32[?,3]"));
  EXPECT_THAT(r.output, HasSubstr("output output_0: f32[?,2]"));
  EXPECT_THAT(r.output, testing::ContainsRegex("dot +2"));
  EXPECT_THAT(r.output, HasSubstr("dense/kernel"));
  EXPECT_THAT(r.output, HasSubstr("dense_1/bias"));
  EXPECT_THAT(r.output, HasSubstr("parameters: 32"));  // 3*5 + 5 + 5*2 + 2
}

TEST_F(KilnInspect, DescribesACheckpointAndVerifiesItsCrcs) {
  io::save_checkpoint(path("ck/ckpt-3"),
                      {{"dense/kernel", Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3})},
                       {"optimizer/iterations", Tensor::scalar<int64_t>(3)}},
                      {{"epoch", int64_t{2}}, {"model", std::string("mlp")}});
  testing_util::ProcessResult r = inspect(path("ck"));  // a directory: its latest checkpoint
  ASSERT_TRUE(r.exited_ok()) << r.output;
  EXPECT_THAT(r.output, HasSubstr("checkpoint: " + path("ck/ckpt-3")));
  EXPECT_THAT(r.output, HasSubstr("epoch = 2"));
  EXPECT_THAT(r.output, HasSubstr("model = \"mlp\""));
  EXPECT_THAT(r.output, testing::ContainsRegex("dense/kernel +f32\\[2,3\\] +crc32c="));
  EXPECT_THAT(r.output, testing::ContainsRegex("optimizer/iterations +i64\\[\\]"));
  EXPECT_THAT(r.output, HasSubstr("every CRC-32C verified"));
}

TEST_F(KilnInspect, DescribesAWholeModelLikeASummary) {
  nn::Sequential model({nn::Dense(5, "relu"), nn::Dropout(0.5), nn::Dense(2)}, "clf");
  model.build({3});
  model.layers()[2]->set_dtype_policy(nn::Policy("mixed_bfloat16"));
  model.compile(optim::Adam(0.005), nn::MeanSquaredError(), {"mse"});
  model.save(path("clf.kiln"));
  testing_util::ProcessResult r = inspect(path("clf.kiln"));
  ASSERT_TRUE(r.exited_ok()) << r.output;
  EXPECT_THAT(r.output, HasSubstr("model: " + path("clf.kiln")));
  EXPECT_THAT(r.output, HasSubstr("'clf' (Sequential"));
  // Each layer with its output type and parameter count; the policy where it is not float32.
  EXPECT_THAT(r.output, testing::ContainsRegex("dense \\(Dense\\) +f32\\[\\?,5\\] +20\n"));
  EXPECT_THAT(r.output, testing::ContainsRegex("dropout \\(Dropout\\) +f32\\[\\?,5\\] +0\n"));
  EXPECT_THAT(r.output,
              testing::ContainsRegex("dense_1 \\(Dense\\) +bf16\\[\\?,2\\] +12 +mixed_bfloat16\n"));
  EXPECT_THAT(r.output, HasSubstr("parameters: 32 (trainable 32, non-trainable 0)"));
  EXPECT_THAT(r.output, HasSubstr("input  x: f32[?,3]"));
  EXPECT_THAT(r.output, HasSubstr("output dense_1: f32[?,2]"));
  EXPECT_THAT(r.output, HasSubstr("optimizer: Adam (0 iterations)"));
  EXPECT_THAT(r.output, testing::ContainsRegex("learning_rate += constant\\(lr=0.005\\)\n"));
  EXPECT_THAT(r.output, HasSubstr("loss: mean_squared_error"));
  EXPECT_THAT(r.output, HasSubstr("metrics: mse"));
}

TEST_F(KilnInspect, DescribesAFunctionalModelsInputsAndOutputs) {
  Tensor a = nn::Input({2}, f32, "a"), b = nn::Input({3}, f32, "b");
  Tensor ha = nn::Dense(4)(nn::Dense(3)(a)), hb = nn::Dense(4)(b);
  nn::Model model({a, b}, {nn::Concatenate()({ha, hb}), nn::Dense(1)(hb)}, "two");
  model.save(path("two.kiln"));  // uncompiled
  testing_util::ProcessResult r = inspect(path("two.kiln"));
  ASSERT_TRUE(r.exited_ok()) << r.output;
  EXPECT_THAT(r.output, HasSubstr("'two' (functional"));
  EXPECT_THAT(r.output, HasSubstr("input  a: f32[?,2]"));
  EXPECT_THAT(r.output, HasSubstr("input  b: f32[?,3]"));
  EXPECT_THAT(r.output, testing::ContainsRegex("output concatenate: f32\\[\\?,8\\]"));
  EXPECT_THAT(r.output,
              testing::ContainsRegex("concatenate \\(Concatenate\\) +f32\\[\\?,8\\] +0\n"));
  EXPECT_THAT(r.output, HasSubstr("parameters: 46"));  // 2*3+3, 3*4+4 twice, 4*1+1
  EXPECT_THAT(r.output, HasSubstr("not compiled"));
  testing_util::ProcessResult missing = inspect(path("none.kiln"));
  EXPECT_EQ(WEXITSTATUS(missing.status), 1);
  EXPECT_THAT(missing.output, HasSubstr("none.kiln does not exist"));
}

TEST_F(KilnInspect, HelpPrintsUsageAndUnknownFlagsAreRejected) {
  testing_util::ProcessResult help =
      testing_util::run_process({KILN_INSPECT, "--help"}, path("log"));
  EXPECT_TRUE(help.exited_ok()) << help.output;
  EXPECT_THAT(help.output, HasSubstr("usage: kiln-inspect"));
  EXPECT_THAT(help.output, HasSubstr(".kiln"));
  testing_util::ProcessResult bad =
      testing_util::run_process({KILN_INSPECT, "--frobnicate"}, path("log"));
  EXPECT_EQ(WEXITSTATUS(bad.status), 2) << bad.output;
  EXPECT_THAT(bad.output, HasSubstr("kiln-inspect: error: unknown option '--frobnicate'"));
  testing_util::ProcessResult none = testing_util::run_process({KILN_INSPECT}, path("log"));
  EXPECT_EQ(WEXITSTATUS(none.status), 2);
  EXPECT_THAT(none.output, HasSubstr("usage: kiln-inspect"));
}

TEST_F(KilnInspect, ReportsMissingAndCorruptInputs) {
  testing_util::ProcessResult missing = inspect(path("nothing"));
  EXPECT_EQ(WEXITSTATUS(missing.status), 1);
  EXPECT_THAT(missing.output, HasSubstr("kiln-inspect: error: load_checkpoint: no checkpoint"));
  const std::string prefix = io::save_checkpoint(path("c"), {{"w", Tensor::scalar<float>(1)}});
  fs::resize_file(io::read_checkpoint_index(prefix).data_path, 2);
  testing_util::ProcessResult corrupt = inspect(prefix);
  EXPECT_EQ(WEXITSTATUS(corrupt.status), 1);
  EXPECT_THAT(corrupt.output, HasSubstr("truncated"));
}

}  // namespace
}  // namespace kiln
