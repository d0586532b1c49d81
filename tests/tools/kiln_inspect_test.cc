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
