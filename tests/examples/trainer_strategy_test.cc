// The bundled Fashion-MNIST trainers under --strategy=mirrored --replicas=2, briefly (one epoch of
// 512 examples): each trains on two CPU replicas that end with identical weights and reports its
// test accuracy; the CNN trainer's --profile=1; the MLP's result line. Skipped without the
// Fashion-MNIST data.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "kiln/data/fashion_mnist.h"
#include "tests/subprocess.h"
#include "tests/testing/temp_dir.h"

namespace kiln {
namespace {

using ::testing::HasSubstr;

#ifdef KILN_FASHION_MNIST_CNN
// Why the trainers cannot run here (no Fashion-MNIST data), or empty.
std::string missing_fashion_mnist() {
  const std::string dir = data::default_fashion_mnist_dir();
  if (std::filesystem::exists(dir + "/train-images-idx3-ubyte.gz") ||
      std::filesystem::exists(dir + "/train-images-idx3-ubyte")) {
    return "";
  }
  return "Fashion-MNIST not found in " + dir + " (install dataset-fashion-mnist)";
}

// Runs a trainer (argv) with its output in a per-test directory `name`, removed afterwards.
testing_util::ProcessResult run_trainer(const std::vector<std::string>& argv,
                                        const std::string& name) {
  const std::filesystem::path log = testing_util::per_test_dir(name);
  std::filesystem::create_directories(log);
  testing_util::ProcessResult r = testing_util::run_process(argv, (log / "out").string());
  std::filesystem::remove_all(log);
  return r;
}

void expect_trains_on_two_mirrored_replicas(const std::string& trainer) {
  if (const std::string missing = missing_fashion_mnist(); !missing.empty())
    GTEST_SKIP() << missing;
  const testing_util::ProcessResult r =
      run_trainer({trainer, "--strategy=mirrored", "--replicas=2", "--epochs=1",
                   "--train_limit=512", "--batch_size=64", "--verbose=0"},
                  "trainer_strategy");
  ASSERT_TRUE(r.exited_ok()) << trainer << ":\n" << r.output;
  EXPECT_THAT(r.output,
              HasSubstr("strategy: MirroredStrategy(2 replicas): 2 local replicas, weights "
                        "identical\n"));
  EXPECT_THAT(r.output, HasSubstr("result: test_accuracy="));
}

TEST(TrainerStrategy, TheCnnTrainsOnTwoMirroredReplicasThatStayIdentical) {
  expect_trains_on_two_mirrored_replicas(KILN_FASHION_MNIST_CNN);
}

TEST(TrainerStrategy, TheMlpTrainsOnTwoMirroredReplicasThatStayIdentical) {
  expect_trains_on_two_mirrored_replicas(KILN_FASHION_MNIST_MLP);
}

// --profile=1 prints the training step's profile: its runs (8 batches of 64) and its kinds.
TEST(TrainerProfile, TheCnnTrainerPrintsItsStepsProfile) {
  if (const std::string missing = missing_fashion_mnist(); !missing.empty())
    GTEST_SKIP() << missing;
  const testing_util::ProcessResult r =
      run_trainer({KILN_FASHION_MNIST_CNN, "--profile=1", "--epochs=1", "--train_limit=512",
                   "--batch_size=64", "--verbose=0"},
                  "trainer_profile");
  ASSERT_TRUE(r.exited_ok()) << r.output;
  EXPECT_THAT(r.output, HasSubstr("profile of 'step':\n  8 runs,"));
  EXPECT_THAT(r.output, HasSubstr("gemm/conv"));
  EXPECT_THAT(r.output, HasSubstr("kernel fused_conv"));
  EXPECT_THAT(r.output, HasSubstr("result: test_accuracy="));
}

// The result line ends with the training examples and each epoch's seconds, which
// benchmarks/measure.py reads (--trainer) for the whole-trainer figures.
TEST(TrainerResult, TheResultLineGivesTheExamplesAndEachEpochsSeconds) {
  if (const std::string missing = missing_fashion_mnist(); !missing.empty())
    GTEST_SKIP() << missing;
  const testing_util::ProcessResult r = run_trainer(
      {KILN_FASHION_MNIST_MLP, "--epochs=3", "--train_limit=320", "--batch_size=64", "--verbose=0"},
      "trainer_result");
  ASSERT_TRUE(r.exited_ok()) << r.output;
  const std::regex line(
      R"(result: test_accuracy=[0-9.]+ test_loss=[0-9.]+ train_seconds=[0-9.]+ examples=320 )"
      R"(epoch_seconds=([0-9]+\.[0-9]{3}),([0-9]+\.[0-9]{3}),([0-9]+\.[0-9]{3})\n)");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, line)) << r.output;
  for (int e = 1; e <= 3; ++e) EXPECT_GT(std::stod(m[e].str()), 0.0) << m[0];
}
#endif

}  // namespace
}  // namespace kiln
