// The example programs' flags, read by running the programs: a malformed or out-of-range value
// is a flag error (exit status 2, a message naming the flag, the value and what it accepts)
// reported before any data is loaded, and a valid value is read whole.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "kiln/distribute/mirrored_strategy.h"
#include "tests/subprocess.h"
#include "tests/testing/temp_dir.h"

namespace kiln {
namespace {

using ::testing::HasSubstr;

class ExampleFlags : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing_util::per_test_dir("example_flags");
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  testing_util::ProcessResult run(const std::string& program, std::vector<std::string> flags) {
    flags.insert(flags.begin(), program);
    return testing_util::run_process(flags, (dir_ / "log").string());
  }
  // `program` with `flags` exits 2 and says "error: <message>".
  void expect_flag_error(const std::string& program, const std::vector<std::string>& flags,
                         const std::string& message) {
    testing_util::ProcessResult r = run(program, flags);
    SCOPED_TRACE(program + " " + flags.back());
    ASSERT_TRUE(WIFEXITED(r.status))
        << "killed by signal " << WTERMSIG(r.status) << ": " << r.output;
    EXPECT_EQ(WEXITSTATUS(r.status), 2) << r.output;
    EXPECT_THAT(r.output, HasSubstr("error: " + message));
  }
  std::filesystem::path dir_;
};

const std::string kInts = "an integer in [1, 2147483647]";
const std::string kLearningRate = "a finite number > 0";

// The five reported wrong first (an abort, a prefix read as the whole value, a float truncated
// to an integer, an int64 narrowed to an int), then their neighbours.
const std::vector<std::pair<std::string, std::string>> kBadTrainerFlags = {
    {"--epochs=abc", "--epochs=abc is not " + kInts},
    {"--learning_rate=fast", "--learning_rate=fast is not " + kLearningRate},
    {"--epochs=2x", "--epochs=2x is not " + kInts},
    {"--batch_size=1e3", "--batch_size=1e3 is not " + kInts},
    {"--epochs=4294967297", "--epochs=4294967297 is not " + kInts},
    {"--epochs=2147483648", "--epochs=2147483648 is not " + kInts},
    {"--epochs=99999999999999999999", "--epochs=99999999999999999999 is not " + kInts},
    {"--epochs=0", "--epochs=0 is not " + kInts},
    {"--epochs=", "--epochs= is not " + kInts},
    {"--epochs= 3", "--epochs= 3 is not " + kInts},
    {"--batch_size=-32", "--batch_size=-32 is not " + kInts},
    {"--batch_size=4294967296", "--batch_size=4294967296 is not " + kInts},
    {"--learning_rate=nan", "--learning_rate=nan is not " + kLearningRate},
    {"--learning_rate=inf", "--learning_rate=inf is not " + kLearningRate},
    {"--learning_rate=1e999", "--learning_rate=1e999 is not " + kLearningRate},
    {"--learning_rate=0", "--learning_rate=0 is not " + kLearningRate},
    {"--learning_rate=-0.1", "--learning_rate=-0.1 is not " + kLearningRate},
    {"--learning_rate=0.1x", "--learning_rate=0.1x is not " + kLearningRate},
    {"--seed=-1", "--seed=-1 is not an integer in [0, 9223372036854775807]"},
    {"--verbose=3", "--verbose=3 is not an integer in [0, 2]"},
    {"--train_limit=1.5", "--train_limit=1.5 is not an integer in [0, 9223372036854775807]"},
    {"--checkpoint_every_steps=-1",
     "--checkpoint_every_steps=-1 is not an integer in [0, 9223372036854775807]"},
};

TEST_F(ExampleFlags, BadTrainerValuesAreFlagErrors) {
  for (const auto& [flag, message] : kBadTrainerFlags) {
    expect_flag_error(KILN_TRAINER_FLAGS_MAIN, {flag}, message);
  }
  expect_flag_error(KILN_TRAINER_FLAGS_MAIN, {"--epoch=3"}, "unknown flag --epoch (known");
}

TEST_F(ExampleFlags, ValidTrainerValuesAreReadWhole) {
  testing_util::ProcessResult r = run(KILN_TRAINER_FLAGS_MAIN, {});
  ASSERT_TRUE(r.exited_ok()) << r.output;
  EXPECT_THAT(r.output, HasSubstr("epochs=5 batch_size=64 learning_rate=0.001 seed=1 "
                                  "train_limit=0 verbose=1 checkpoint_every_steps=0\n"));
  r = run(KILN_TRAINER_FLAGS_MAIN,
          {"--epochs=12", "--batch_size=1000", "--learning_rate=2.5e-2", "--seed=9007199254740993",
           "--train_limit=600", "--verbose=2", "--checkpoint_every_steps=50"});
  ASSERT_TRUE(r.exited_ok()) << r.output;
  EXPECT_THAT(r.output, HasSubstr("epochs=12 batch_size=1000 learning_rate=0.025 "
                                  "seed=9007199254740993 train_limit=600 verbose=2 "
                                  "checkpoint_every_steps=50\n"));
  // The ends of the ranges.
  r = run(KILN_TRAINER_FLAGS_MAIN, {"--epochs=2147483647", "--batch_size=1", "--verbose=0"});
  ASSERT_TRUE(r.exited_ok()) << r.output;
  EXPECT_THAT(r.output, HasSubstr("epochs=2147483647 batch_size=1 "));
}

// --strategy and --replicas: a strategy that does not exist, a replica count past what the
// machine can run (once an abort: std::bad_alloc, std::system_error), and --replicas without
// --strategy=mirrored (once silently ignored) are flag errors.
TEST_F(ExampleFlags, StrategyAndReplicaFlagsAreChecked) {
  const std::string bound = std::to_string(distribute::MirroredStrategy::max_replicas());
  const std::string kReplicas = "an integer in [1, " + bound + "]";
  expect_flag_error(KILN_TRAINER_FLAGS_MAIN, {"--strategy=threads"},
                    "--strategy=threads is not none, mirrored or multi_worker");
  expect_flag_error(KILN_TRAINER_FLAGS_MAIN, {"--dtype_policy=f16"},
                    "--dtype_policy=f16 is not float32, mixed_bfloat16 or mixed_float16");
  expect_flag_error(KILN_TRAINER_FLAGS_MAIN, {"--device=cuda:0"},
                    "--device=cuda:0 is not cpu or gpu");
  expect_flag_error(KILN_TRAINER_FLAGS_MAIN, {"--device=gpu", "--strategy=mirrored"},
                    "--device=gpu with --strategy=mirrored: a strategy's replicas run on the host");
  for (const std::string count : {"2147483647", "100000", "0"}) {
    expect_flag_error(KILN_TRAINER_FLAGS_MAIN, {"--strategy=mirrored", "--replicas=" + count},
                      "--replicas=" + count + " is not " + kReplicas);
  }
  expect_flag_error(KILN_TRAINER_FLAGS_MAIN, {"--replicas=4"},
                    "--replicas=4 needs --strategy=mirrored (got --strategy=none)");
  expect_flag_error(KILN_TRAINER_FLAGS_MAIN, {"--strategy=multi_worker", "--replicas=4"},
                    "--replicas=4 needs --strategy=mirrored (got --strategy=multi_worker)");

  testing_util::ProcessResult r = run(KILN_TRAINER_FLAGS_MAIN, {});
  ASSERT_TRUE(r.exited_ok()) << r.output;
  EXPECT_THAT(r.output, HasSubstr("strategy=none replicas=2 dtype_policy=float32 device=cpu:0\n"));
  r = run(KILN_TRAINER_FLAGS_MAIN,
          {"--strategy=mirrored", "--replicas=" + bound, "--dtype_policy=mixed_bfloat16"});
  ASSERT_TRUE(r.exited_ok()) << r.output;
  EXPECT_THAT(r.output, HasSubstr("strategy=mirrored replicas=" + bound +
                                  " dtype_policy=mixed_bfloat16 device=cpu:0\n"));
  r = run(KILN_TRAINER_FLAGS_MAIN, {"--device=gpu"});
  ASSERT_TRUE(r.exited_ok()) << r.output;
  EXPECT_THAT(r.output, HasSubstr("strategy=none replicas=2 dtype_policy=float32 device=cuda:0\n"));
}

// Every example program that takes arguments: trainer_flags_main stands for the trainers'
// shared flags where the trainers are not built.
std::vector<std::string> example_programs() {
  std::vector<std::string> programs = {KILN_TRAINER_FLAGS_MAIN};
#ifdef KILN_KILN_DEMO
  programs.insert(programs.end(), {KILN_KILN_DEMO, KILN_CUSTOM_OP_EXAMPLE});
#endif
#ifdef KILN_FASHION_MNIST_MLP
  programs.insert(programs.end(),
                  {KILN_FASHION_MNIST_MLP, KILN_FASHION_MNIST_CNN, KILN_FASHION_MNIST_LSTM,
                   KILN_FASHION_MNIST_TFRECORD_MLP, KILN_FASHION_MNIST_TO_TFRECORD});
#endif
  return programs;
}

// --help lists the flags with their defaults and what they accept, and exits 0 (it was a
// malformed flag; kiln_demo and custom_op_example ignored it).
TEST_F(ExampleFlags, EveryProgramListsItsFlagsWithHelp) {
  for (const std::string& program : example_programs()) {
    SCOPED_TRACE(program);
    for (const char* help : {"--help", "-h"}) {
      testing_util::ProcessResult r = run(program, {help});
      EXPECT_TRUE(r.exited_ok()) << r.output;
      EXPECT_THAT(r.output, HasSubstr("usage: "));
      EXPECT_THAT(r.output, ::testing::Not(HasSubstr("error")));
    }
  }
  // Read after a bad value too: --help wins.
  testing_util::ProcessResult r = run(KILN_TRAINER_FLAGS_MAIN, {"--epochs=abc", "--help"});
  ASSERT_TRUE(r.exited_ok()) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--epochs=5  an integer in [1, 2147483647]\n"));
  EXPECT_THAT(r.output, HasSubstr("--strategy=none  none, mirrored or multi_worker\n"));
  EXPECT_THAT(r.output, HasSubstr("--learning_rate=0.001  a finite number > 0\n"));
#ifdef KILN_FASHION_MNIST_MLP
  r = run(KILN_FASHION_MNIST_CNN, {"--help"});
  EXPECT_THAT(r.output, HasSubstr("--replicas=2  an integer in [1, "));
  r = run(KILN_FASHION_MNIST_TO_TFRECORD, {"--help"});
  EXPECT_THAT(r.output, HasSubstr("--limit=0  an integer in [0, 9223372036854775807]\n"));
#endif
#ifdef KILN_KILN_DEMO
  r = run(KILN_KILN_DEMO, {"--help"});
  EXPECT_THAT(r.output, HasSubstr("takes no flags"));
#endif
}

// An argument a program does not know is an error (exit 2), not ignored.
TEST_F(ExampleFlags, EveryProgramRefusesArgumentsItDoesNotKnow) {
  for (const std::string& program : example_programs()) {
    expect_flag_error(program, {"--no_such_flag=1"}, "unknown flag --no_such_flag");
    expect_flag_error(program, {"stray"}, "unexpected argument 'stray'");
    expect_flag_error(program, {"--help=1"}, "unknown flag --help");
  }
}

// The example programs themselves, with the values reported wrong: a bad value stops them with
// status 2 before they read their data (here: a directory that does not exist), while valid
// flags take them on to the data.
#ifdef KILN_FASHION_MNIST_MLP
TEST_F(ExampleFlags, TrainersReportFlagErrorsBeforeLoadingData) {
  const std::string missing = "--data_dir=" + (dir_ / "no_data").string();
  for (const char* trainer :
       {KILN_FASHION_MNIST_MLP, KILN_FASHION_MNIST_CNN, KILN_FASHION_MNIST_TFRECORD_MLP}) {
    for (const auto& [flag, message] : std::vector<std::pair<std::string, std::string>>(
             kBadTrainerFlags.begin(), kBadTrainerFlags.begin() + 5)) {
      expect_flag_error(trainer, {missing, flag}, message);
    }
    testing_util::ProcessResult r =
        run(trainer, {missing, "--epochs=1", "--batch_size=8", "--learning_rate=0.01"});
    EXPECT_TRUE(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 1) << trainer << ": " << r.output;
    EXPECT_THAT(r.output, HasSubstr("no_data")) << trainer;
  }
  expect_flag_error(KILN_FASHION_MNIST_TFRECORD_MLP, {missing, "--min_accuracy=nan"},
                    "--min_accuracy=nan is not a finite number in [0, 1]");
}

TEST_F(ExampleFlags, ConverterReportsFlagErrorsBeforeLoadingData) {
  const std::string missing = "--data_dir=" + (dir_ / "no_data").string();
  const std::string out = "--out_dir=" + (dir_ / "out").string();
  expect_flag_error(KILN_FASHION_MNIST_TO_TFRECORD, {missing, out, "--limit=10k"},
                    "--limit=10k is not an integer in [0, 9223372036854775807]");
  testing_util::ProcessResult r = run(KILN_FASHION_MNIST_TO_TFRECORD, {missing, out, "--limit=10"});
  EXPECT_TRUE(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("no_data"));
}
#endif

}  // namespace
}  // namespace kiln
