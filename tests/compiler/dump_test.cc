// KILN_DUMP=<dir>: each compile writes its pass dumps, fusion and memory plans and its kernels'
// IR and assembly into a subdirectory of its own, named by graph and signature, so no later
// compile overwrites an earlier one's dump.
#include "compiler/dump.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <regex>

#include "compiler/executable.h"
#include "kiln/ops.h"
#include "tests/testing/temp_dir.h"

namespace kiln::compiler {
namespace {

namespace fs = std::filesystem;
using testing::HasSubstr;
using testing::Not;
using testing_util::read_file;

// Sets KILN_DUMP to a fresh directory of the test's own for the fixture's lifetime.
class DumpTest : public testing_util::TempDirTest {
 protected:
  DumpTest() : TempDirTest(Dir::kAbsent) {}  // the first dump creates it
  void SetUp() override {
    TempDirTest::SetUp();
    setenv("KILN_DUMP", dir_.c_str(), 1);
  }
  void TearDown() override {
    unsetenv("KILN_DUMP");
    TempDirTest::TearDown();
  }
  // The subdirectories of the dump, by name.
  std::map<std::string, fs::path> subdirectories() const {
    std::map<std::string, fs::path> out;
    for (const auto& e : fs::directory_iterator(dir_))
      if (e.is_directory()) out[e.path().filename().string()] = e.path();
    return out;
  }
};

// The kernels whose IR (before optimisation) a dump holds: "define void @kernel(" or, several
// in one module, "@k0_kernel(".
int kernels_in(const fs::path& dir) {
  static const std::regex kDefine(R"(define void @(k[0-9]+_)?kernel\()");
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (!name.ends_with(".ll") || name.ends_with(".opt.ll")) continue;
    const std::string ir = read_file(e.path());
    EXPECT_TRUE(fs::exists(dir / (name.substr(0, name.size() - 3) + ".opt.ll"))) << name;
    EXPECT_TRUE(fs::exists(dir / (name.substr(0, name.size() - 3) + ".s"))) << name;
    n += static_cast<int>(
        std::distance(std::sregex_iterator(ir.begin(), ir.end(), kDefine), std::sregex_iterator()));
  }
  return n;
}

TEST_F(DumpTest, EachCompileHasItsOwnSubdirectoryNamedByGraphAndSignature) {
  // A "training step" (batch of features and labels) then a "predict step" compiled twice: the
  // second predict compile finds its kernels in the kernel cache, and still dumps them.
  Graph train("train/step 1");  // '/' and ' ' are not kept in the directory's name
  Tensor x = train.placeholder(f32, {kUnknownDim, 8}, "x");
  Tensor labels = train.placeholder(i32, {kUnknownDim}, "labels");
  Tensor w = train.placeholder(f32, {8}, "w");  // fully known: not part of the short signature
  Tensor loss = sum(tanh(x * w + 1.0)) + sum(convert(labels, f32));
  Executable trained =
      compile(train, {loss}, {{x, ones({16, 8})}, {labels, zeros({16}, i32)}, {w, ones({8})}});
  Graph predict("predict");
  Tensor px = predict.placeholder(f32, {kUnknownDim, 8}, "x");
  Tensor p = exp(px * 2.0) + 1.0;
  Executable first = compile(predict, {p}, {{px, ones({4, 8})}});
  Executable second = compile(predict, {p}, {{px, ones({4, 8})}});

  std::map<std::string, fs::path> dumps = subdirectories();
  ASSERT_EQ(dumps.size(), 3u) << dir_;
  std::vector<std::string> names;
  for (const auto& [name, path] : dumps) names.push_back(name);
  // Sorted: "predict_..._<n>" twice, then the training step. The counter keeps them apart.
  EXPECT_TRUE(std::regex_match(names[0], std::regex(R"(predict_f32\[4,8\]_[0-9]+)"))) << names[0];
  EXPECT_TRUE(std::regex_match(names[1], std::regex(R"(predict_f32\[4,8\]_[0-9]+)"))) << names[1];
  EXPECT_NE(names[0], names[1]);
  EXPECT_TRUE(
      std::regex_match(names[2], std::regex(R"(train_step_1_f32\[16,8\]_i32\[16\]_[0-9]+)")))
      << names[2];

  // Each holds its own compile's pass dumps, fusion and memory plans, and its kernels' IR.
  const fs::path& train_dump = dumps[names[2]];
  EXPECT_THAT(read_file(train_dump / "001_optimize.verify.txt"), HasSubstr("tanh"));
  EXPECT_TRUE(fs::exists(train_dump / "fusion.txt"));
  // The fusion pass's dump: the graph with each node's concrete types and fusion group.
  const std::string fused = read_file(train_dump / "001_lower.fusion.txt");
  EXPECT_THAT(fused, HasSubstr("tanh"));
  EXPECT_THAT(fused, HasSubstr(": f32[16,8]"));
  EXPECT_THAT(fused, HasSubstr("[fusion 0]"));
  EXPECT_THAT(read_file(train_dump / "001_lower.fusion.log"), HasSubstr("fusion: changed"));
  EXPECT_THAT(read_file(train_dump / "buffers.txt"), HasSubstr("arena"));
  EXPECT_EQ(kernels_in(train_dump), trained.num_fused_thunks());
  EXPECT_GE(trained.num_fused_thunks(), 1);
  for (int i : {0, 1}) {
    const fs::path& d = dumps[names[i]];
    const std::string graph = read_file(d / "001_optimize.verify.txt");
    EXPECT_THAT(graph, HasSubstr("exp"));
    EXPECT_THAT(graph, Not(HasSubstr("tanh")));
    EXPECT_TRUE(fs::exists(d / "fusion.txt"));
    EXPECT_EQ(kernels_in(d), first.num_fused_thunks()) << d;
  }
  EXPECT_GE(first.num_fused_thunks(), 1);
}

TEST_F(DumpTest, OptimizeAndKernelsCompiledOnTheirOwnGetTheirOwnDirectories) {
  Graph g("alone");
  Tensor x = g.placeholder(f32, {4}, "x");
  optimize(g, {neg(x)});
  optimize(g, {exp(x)});
  std::map<std::string, fs::path> dumps = subdirectories();
  ASSERT_EQ(dumps.size(), 2u);
  std::vector<std::string> texts;
  for (const auto& [name, path] : dumps) {
    EXPECT_TRUE(std::regex_match(name, std::regex(R"(alone_[0-9]+)"))) << name;
    texts.push_back(read_file(path / "001_optimize.verify.txt"));
  }
  EXPECT_NE(texts[0], texts[1]);  // neither overwrote the other
}

TEST(DumpSignatureTest, NamesTheFeedsTheGraphLeavesOpenOrElseAllAtMostFour) {
  Graph g;
  Tensor x = g.placeholder(f32, {kUnknownDim, 3}, "x");
  Tensor w = g.placeholder(f32, {3, 2}, "w");
  Tensor n = g.placeholder(i64, {}, "n");
  EXPECT_EQ(dump_signature({{x, zeros({5, 3})}, {w, zeros({3, 2})}}), "f32[5,3]");
  EXPECT_EQ(dump_signature({{w, zeros({3, 2})}, {n, Tensor::scalar<int64_t>(1)}}),
            "f32[3,2]_i64[]");
  FeedList many;
  for (int i = 0; i < 6; ++i) many.push_back({w, zeros({3, 2})});
  EXPECT_EQ(dump_signature(many), "f32[3,2]_f32[3,2]_f32[3,2]_f32[3,2]_+2");
  EXPECT_EQ(dump_signature({}), "");
}

}  // namespace
}  // namespace kiln::compiler
