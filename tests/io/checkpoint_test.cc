// Checkpoints: round trips of every dtype, the index's offsets and CRCs, corruption reported
// with file, tensor and offset (flipped bits, truncation, absurd offsets and shapes), atomic
// saves that survive a SIGKILL halfway, keep-last-N and the pointer file.
#include "kiln/io/checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "kiln/graph.h"
#include "kiln/io/tfrecord.h"
#include "kiln/ops.h"
#include "src/api/io/proto/checkpoint.pb.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/values.h"

namespace kiln::io {
namespace {

using test_values::thrown_error;

namespace fs = std::filesystem;
using testing::HasSubstr;

class CheckpointTest : public testing_util::TempDirTest {
 protected:
  // Replaces the index of `prefix` by `index` (framed as the one record of a TFRecord file).
  static void write_index(const std::string& prefix, const proto::CheckpointIndex& index) {
    RecordWriter w(prefix + ".index");
    w.write(index.SerializeAsString());
    w.close();
  }
  static proto::CheckpointIndex read_index_proto(const std::string& prefix) {
    proto::CheckpointIndex index;
    EXPECT_TRUE(index.ParseFromString(read_records(prefix + ".index").at(0)));
    return index;
  }
};

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && a.nbytes() == b.nbytes() &&
         (a.nbytes() == 0 || std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0);
}

TEST_F(CheckpointTest, RoundTripsEveryDtypeScalarsAndEmptyTensors) {
  std::map<std::string, Tensor> tensors = {
      {"f32", Tensor::from_vector<float>({1.5f, -2.25f, 3e-8f, 1e30f}, {2, 2})},
      {"f64", Tensor::from_vector<double>({3.141592653589793, -0.0})},
      {"f16", Tensor::from_vector<half>({half(1.0f), half(-0.5f), half(65504.0f)})},
      {"bf16", Tensor::from_vector<bfloat16>({bfloat16(2.0f), bfloat16(-3.0f)})},
      {"i8", Tensor::from_vector<int8_t>({-128, 0, 127})},
      {"u8", Tensor::from_vector<uint8_t>({0, 255})},
      {"i32", Tensor::from_vector<int32_t>({-7, 1 << 30}, {1, 2, 1})},
      {"i64", Tensor::scalar<int64_t>(int64_t{1} << 62)},
      {"bool", Tensor::from_vector(std::vector<bool>{true, false, true})},
      {"empty", Tensor::empty(f32, {0, 5})},
      {"dense/kernel/Adam/m", Tensor::from_vector<float>({0.25f})},
  };
  Metadata meta = {{"epoch", int64_t{3}}, {"model", std::string("mlp")}, {"neg", int64_t{-5}}};
  const std::string prefix = save_checkpoint(path("run/model"), tensors, meta);
  EXPECT_EQ(prefix, path("run/model"));
  EXPECT_TRUE(fs::exists(prefix + ".index"));

  Checkpoint loaded = load_checkpoint(prefix);
  ASSERT_EQ(loaded.tensors.size(), tensors.size());
  for (const auto& [name, t] : tensors) {
    ASSERT_TRUE(loaded.tensors.count(name)) << name;
    EXPECT_TRUE(same_bytes(loaded.tensors.at(name), t)) << name;
  }
  EXPECT_EQ(loaded.metadata, meta);
  EXPECT_EQ(loaded.get_int("epoch"), 3);
  EXPECT_EQ(loaded.get_string("model"), "mlp");
  EXPECT_THAT(thrown_error([&] { loaded.get_int("model"); }).what(), HasSubstr("'model'"));
  EXPECT_EQ(thrown_error([&] { loaded.get_string("missing"); }).code(), ErrorCode::kNotFound);
  // The .index path names the same checkpoint.
  EXPECT_EQ(load_checkpoint(prefix + ".index").tensors.size(), tensors.size());
}

TEST_F(CheckpointTest, IndexRecordsAlignedOffsetsLengthsAndCrc32c) {
  // "123456789" is CRC-32C's check string: its CRC is 0xE3069283.
  std::vector<uint8_t> digits = {'1', '2', '3', '4', '5', '6', '7', '8', '9'};
  const std::string prefix =
      save_checkpoint(path("c"), {{"a", Tensor::from_vector<uint8_t>(digits)},
                                  {"b", Tensor::from_vector<int32_t>({1, 2}, {2, 1})}});
  CheckpointIndex index = read_checkpoint_index(prefix);
  ASSERT_EQ(index.entries.size(), 2u);
  const CheckpointEntry& a = index.entries[0];
  EXPECT_EQ(a.name, "a");
  EXPECT_EQ(a.dtype, u8);
  EXPECT_EQ(a.shape, (Shape{9}));
  EXPECT_EQ(a.offset, 0u);
  EXPECT_EQ(a.length, 9u);
  EXPECT_EQ(a.crc32c, 0xE3069283u);
  const CheckpointEntry& b = index.entries[1];
  EXPECT_EQ(b.offset, 64u);  // 64-byte aligned
  EXPECT_EQ(b.length, 8u);
  EXPECT_EQ(b.shape, (Shape{2, 1}));
  EXPECT_EQ(index.data_size, 72u);
  // The data file holds the raw bytes at those offsets (little-endian), zero padding between.
  std::string data = read_file(index.data_path);
  ASSERT_EQ(data.size(), 72u);
  EXPECT_EQ(data.substr(0, 9), "123456789");
  EXPECT_EQ(data.substr(9, 55), std::string(55, '\0'));
  EXPECT_EQ(data.substr(64), std::string("\1\0\0\0\2\0\0\0", 8));
}

TEST_F(CheckpointTest, ADirectoryPathSavesAndLoadsCkpt) {
  EXPECT_EQ(save_checkpoint(dir_.string() + "/", {{"x", Tensor::scalar<float>(1)}}), path("ckpt"));
  EXPECT_EQ(save_checkpoint(path("sub/"), {{"x", Tensor::scalar<float>(2)}}), path("sub/ckpt"));
  EXPECT_EQ(load_checkpoint(path("sub")).tensors.at("x").item<float>(), 2.0f);
  EXPECT_EQ(load_checkpoint(dir_.string()).tensors.at("x").item<float>(), 1.0f);
}

TEST_F(CheckpointTest, SavingAgainReplacesTheCheckpointAndLeavesOneDataFile) {
  save_checkpoint(path("p"), {{"x", Tensor::scalar<float>(1)}});
  save_checkpoint(path("p"), {{"x", Tensor::scalar<float>(2)}, {"y", Tensor::scalar<int32_t>(3)}});
  Checkpoint c = load_checkpoint(path("p"));
  EXPECT_EQ(c.tensors.at("x").item<float>(), 2.0f);
  EXPECT_EQ(c.tensors.at("y").item<int32_t>(), 3);
  std::vector<std::string> names = files();
  ASSERT_EQ(names.size(), 2u);
  EXPECT_EQ(names[0].rfind("p.data-", 0), 0u);
  EXPECT_EQ(names[1], "p.index");
}

TEST_F(CheckpointTest, RejectsSymbolicUndefinedAndUnnamedTensors) {
  Graph g;
  Tensor p = g.placeholder(f32, {2}, "p");
  EXPECT_THAT(thrown_error([&] {
                save_checkpoint(path("x"), {{"w", p}});
              }).what(),
              HasSubstr("tensor 'w' is symbolic"));
  EXPECT_THAT(thrown_error([&] {
                save_checkpoint(path("x"), {{"w", Tensor()}});
              }).what(),
              HasSubstr("undefined"));
  EXPECT_EQ(thrown_error([&] {
              save_checkpoint(path("x"), {{"", Tensor::scalar<float>(1)}});
            }).code(),
            ErrorCode::kInvalidArgument);
  EXPECT_FALSE(fs::exists(path("x.index")));
}

// ---- corruption ----

TEST_F(CheckpointTest, AFlippedBitInTheDataIsDataLossNamingTheTensorAndOffset) {
  const std::string prefix =
      save_checkpoint(path("c"), {{"a", Tensor::from_vector<float>({1, 2, 3})},
                                  {"dense/bias", Tensor::from_vector<float>({4, 5})}});
  const std::string data_path = read_checkpoint_index(prefix).data_path;
  std::string data = read_file(data_path);
  // "a" is at 0 (12 bytes), "dense/bias" at 64: flip one bit of its second float.
  data[64 + 5] ^= 0x10;
  write_file(data_path, data);
  Error e = thrown_error([&] { load_checkpoint(prefix); });
  EXPECT_EQ(e.code(), ErrorCode::kDataLoss);
  EXPECT_THAT(e.what(), HasSubstr(data_path));
  EXPECT_THAT(e.what(), HasSubstr("tensor 'dense/bias' at offset 64"));
  EXPECT_THAT(e.what(), HasSubstr("CRC-32C mismatch"));
}

TEST_F(CheckpointTest, EveryFlippedBitOfTheIndexIsDetected) {
  const std::string prefix =
      save_checkpoint(path("c"), {{"w", Tensor::from_vector<float>({1})}}, {{"step", int64_t{7}}});
  const std::string original = read_file(prefix + ".index");
  for (size_t i = 0; i < original.size(); ++i) {
    std::string bytes = original;
    bytes[i] ^= static_cast<char>(1 << (i % 8));
    write_file(prefix + ".index", bytes);
    Error e = thrown_error([&] { load_checkpoint(prefix); });
    EXPECT_EQ(e.code(), ErrorCode::kDataLoss) << "byte " << i << ": " << e.what();
    EXPECT_THAT(e.what(), HasSubstr("c.index")) << "byte " << i;
  }
}

TEST_F(CheckpointTest, TruncatedFilesAreDataLoss) {
  const std::string prefix = save_checkpoint(path("c"), {{"a", Tensor::from_vector<float>({1, 2})},
                                                         {"b", Tensor::from_vector<float>({3})}});
  const std::string data_path = read_checkpoint_index(prefix).data_path;
  const std::string data = read_file(data_path), index = read_file(prefix + ".index");
  for (size_t n : {size_t{0}, size_t{10}, data.size() - 1}) {
    write_file(data_path, data.substr(0, n));
    Error e = thrown_error([&] { load_checkpoint(prefix); });
    EXPECT_EQ(e.code(), ErrorCode::kDataLoss);
    EXPECT_THAT(e.what(), HasSubstr("truncated"));
    EXPECT_THAT(e.what(), HasSubstr(data_path));
  }
  write_file(data_path, data);
  for (size_t n = 0; n < index.size(); ++n) {
    write_file(prefix + ".index", index.substr(0, n));
    EXPECT_EQ(thrown_error([&] { load_checkpoint(prefix); }).code(), ErrorCode::kDataLoss) << n;
  }
}

TEST_F(CheckpointTest, MissingFilesAreReported) {
  EXPECT_EQ(thrown_error([&] { load_checkpoint(path("nothing")); }).code(), ErrorCode::kNotFound);
  const std::string prefix = save_checkpoint(path("c"), {{"a", Tensor::scalar<float>(1)}});
  const std::string data_path = read_checkpoint_index(prefix).data_path;
  fs::remove(data_path);
  Error e = thrown_error([&] { load_checkpoint(prefix); });
  EXPECT_EQ(e.code(), ErrorCode::kDataLoss);
  EXPECT_THAT(e.what(), HasSubstr("cannot open the data file"));
}

TEST_F(CheckpointTest, AFileOfAnotherKindIsNamed) {
  RecordWriter w(path("data.tfrecord"));
  w.write("a record");
  w.close();
  Error e = thrown_error([&] { load_checkpoint(path("data.tfrecord")); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(e.what(), HasSubstr("load_checkpoint: " + path("data.tfrecord") +
                                  " is a TFRecord file whose first record (at offset 0) is not a "
                                  "checkpoint"));
}

TEST_F(CheckpointTest, AbsurdOffsetsLengthsAndShapesFailBeforeAnyRead) {
  const std::string prefix =
      save_checkpoint(path("c"), {{"w", Tensor::from_vector<float>({1, 2})}});
  const proto::CheckpointIndex good = read_index_proto(prefix);
  auto expect_data_loss = [&](const std::function<void(proto::CheckpointIndex&)>& edit,
                              const std::string& says) {
    proto::CheckpointIndex bad = good;
    edit(bad);
    write_index(prefix, bad);
    Error e = thrown_error([&] { load_checkpoint(prefix); });
    EXPECT_EQ(e.code(), ErrorCode::kDataLoss) << e.what();
    EXPECT_THAT(e.what(), HasSubstr(says));
    EXPECT_THAT(e.what(), HasSubstr(path("c")));
  };
  expect_data_loss([](auto& i) { i.mutable_tensors(0)->set_offset(uint64_t{1} << 63); },
                   "tensor 'w' at offset 9223372036854775808: bytes");
  expect_data_loss([](auto& i) { i.mutable_tensors(0)->set_offset(~uint64_t{0} - 3); },
                   "outside the data file");
  expect_data_loss([](auto& i) { i.mutable_tensors(0)->set_offset(4); }, "outside");
  // A shape of 2^61 x 2^61 elements would overflow; an honest-looking huge one would not fit.
  expect_data_loss(
      [](auto& i) {
        auto* t = i.mutable_tensors(0);
        t->clear_shape();
        t->add_shape(int64_t{1} << 61);
        t->add_shape(int64_t{1} << 61);
      },
      "invalid shape");
  expect_data_loss(
      [](auto& i) {
        auto* t = i.mutable_tensors(0);
        t->set_shape(0, int64_t{1} << 40);
        t->set_length(uint64_t{4} << 40);
      },
      "outside the data file");
  expect_data_loss([](auto& i) { i.mutable_tensors(0)->set_shape(0, -2); }, "invalid shape [?]");
  expect_data_loss([](auto& i) { i.mutable_tensors(0)->set_length(4); },
                   "length 4 does not match f32[2] (8 bytes)");
  expect_data_loss([](auto& i) { i.mutable_tensors(0)->set_dtype(proto::KilnDType(42)); },
                   "unknown dtype 42");
  expect_data_loss([](auto& i) { *i.add_tensors() = i.tensors(0); }, "appears twice");
  expect_data_loss([](auto& i) { i.set_data_file("../../etc/passwd"); }, "invalid data file name");
  expect_data_loss([](auto& i) { i.set_format_version(9); }, "unsupported format version 9");
  // The index's data_size itself is checked against the real file.
  expect_data_loss(
      [](auto& i) {
        i.set_data_size(uint64_t{1} << 50);
        i.mutable_tensors(0)->set_offset(uint64_t{1} << 49);
      },
      "the index says 1125899906842624");
}

TEST_F(CheckpointTest, BoolBytesOtherThanZeroOrOneAreDataLossEvenWithAGoodCrc) {
  const std::string prefix =
      save_checkpoint(path("c"), {{"m", Tensor::from_vector(std::vector<bool>{true, false})}});
  proto::CheckpointIndex index = read_index_proto(prefix);
  const std::string data_path = (dir_ / index.data_file()).string();
  const std::string bad = std::string("\x02\x00", 2);
  write_file(data_path, bad);
  // Recompute the CRC with the library's own writer: save the same bytes as u8.
  const std::string probe =
      save_checkpoint(path("probe"), {{"m", Tensor::from_vector<uint8_t>({2, 0})}});
  index.mutable_tensors(0)->set_crc32c(read_checkpoint_index(probe).entries[0].crc32c);
  write_index(prefix, index);
  Error e = thrown_error([&] { load_checkpoint(prefix); });
  EXPECT_EQ(e.code(), ErrorCode::kDataLoss);
  EXPECT_THAT(e.what(), HasSubstr("neither 0 nor 1"));
}

// ---- atomicity ----

// Runs `save` in a child process with KILN_FAULT_KILL_DURING_SAVE=`fault`; the child must die
// of SIGKILL.
void run_killed(const std::string& fault, const std::function<void()>& save) {
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    setenv("KILN_FAULT_KILL_DURING_SAVE", fault.c_str(), 1);
    try {
      save();
    } catch (...) {
    }
    _exit(0);  // not reached when the hook works
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status)) << "KILN_FAULT_KILL_DURING_SAVE=" << fault << ": not killed";
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
}

// Runs save_checkpoint in a child process with the fault hook armed for its first save.
void save_killed_halfway(const std::string& prefix, const std::map<std::string, Tensor>& t) {
  run_killed("1", [&] { save_checkpoint(prefix, t); });
}

TEST_F(CheckpointTest, ASaveKilledHalfwayLeavesThePreviousCheckpointIntact) {
  const std::string prefix = path("c");
  save_checkpoint(prefix, {{"w", Tensor::from_vector<float>({1, 2, 3, 4})}});
  const std::string index_before = read_file(prefix + ".index");
  save_killed_halfway(prefix, {{"w", Tensor::from_vector<float>(std::vector<float>(1000, 9))}});
  // The partial temp file is there, the index is untouched and the old values load.
  bool partial = false;
  for (const std::string& f : files()) partial |= f.find(".tmp-") != std::string::npos;
  EXPECT_TRUE(partial);
  EXPECT_EQ(read_file(prefix + ".index"), index_before);
  EXPECT_EQ(load_checkpoint(prefix).tensors.at("w").to_vector<float>(),
            (std::vector<float>{1, 2, 3, 4}));
  // The next save cleans up what the killed one left.
  save_checkpoint(prefix, {{"w", Tensor::from_vector<float>({5})}});
  EXPECT_EQ(files().size(), 2u);
  EXPECT_EQ(load_checkpoint(prefix).tensors.at("w").item<float>(), 5.0f);
}

TEST_F(CheckpointTest, AManagerSaveKilledHalfwayKeepsTheLatestPointer) {
  {
    CheckpointManager m(dir_.string(), 2);
    m.save({{"w", Tensor::scalar<float>(1)}}, 10);
  }
  save_killed_halfway(path("ckpt-20"), {{"w", Tensor::scalar<float>(2)}});
  EXPECT_EQ(latest_checkpoint(dir_.string()), path("ckpt-10"));
  EXPECT_EQ(load_checkpoint(dir_.string()).tensors.at("w").item<float>(), 1.0f);
  // remove_all also clears what the interrupted save left.
  CheckpointManager(dir_.string(), 2).remove_all();
  EXPECT_TRUE(files().empty());
}

// A CheckpointManager save (keeping 1) of step 2 over step 1, killed at one stage of the save:
// the checkpoint latest_checkpoint finds afterwards, whether each index exists, the file the
// killed save leaves behind and the file it would have become (regexes; empty for none).
struct KilledSave {
  std::string stage;
  int64_t latest;
  bool new_index;
  bool old_index;
  std::string leftover;
  std::string complete;
  friend void PrintTo(const KilledSave& k, std::ostream* os) { *os << "killed at " << k.stage; }
};

class CheckpointKillTest : public CheckpointTest, public testing::WithParamInterface<KilledSave> {
 protected:
  // The size of the one file whose name matches `regex`; nullopt if none does.
  std::optional<uintmax_t> size_of_match(const std::string& regex) const {
    if (regex.empty()) return std::nullopt;
    std::optional<uintmax_t> size;
    for (const std::string& f : files()) {
      if (!std::regex_match(f, std::regex(regex))) continue;
      EXPECT_FALSE(size) << "two files match " << regex;
      size = fs::file_size(path(f));
    }
    return size;
  }
};

std::map<std::string, Tensor> weights(float value) {
  return {{"w", Tensor::from_vector<float>(std::vector<float>(300, value))},
          {"b", Tensor::from_vector<float>({value, -value})}};
}

TEST_P(CheckpointKillTest, LeavesALoadableLatestCheckpointAndCommitsNoPartialFile) {
  const KilledSave& k = GetParam();
  CheckpointManager(dir_.string(), 1).save(weights(1), 1, {{"step", int64_t{1}}});
  run_killed("1:" + k.stage, [&] {
    CheckpointManager(dir_.string(), 1).save(weights(2), 2, {{"step", int64_t{2}}});
  });
  if (HasFatalFailure()) return;

  // The latest checkpoint loads, every CRC checked, with the values of its step.
  const std::string latest = path("ckpt-" + std::to_string(k.latest));
  EXPECT_EQ(latest_checkpoint(dir_.string()), latest);
  Checkpoint loaded = load_checkpoint(dir_.string());
  EXPECT_EQ(loaded.prefix, latest);
  EXPECT_EQ(loaded.get_int("step"), k.latest);
  EXPECT_TRUE(same_bytes(loaded.tensors.at("w"), weights(k.latest).at("w")));
  // No half-written file passes for a checkpoint: every index there is complete, and so is the
  // data it names.
  EXPECT_EQ(fs::exists(path("ckpt-2.index")), k.new_index);
  EXPECT_EQ(fs::exists(path("ckpt-1.index")), k.old_index);
  for (const std::string& f : files()) {
    if (f.size() < 6 || f.compare(f.size() - 6, 6, ".index") != 0) continue;
    const std::string prefix = path(f.substr(0, f.size() - 6));
    EXPECT_NO_THROW(load_checkpoint(prefix)) << f << " is not a complete checkpoint";
  }
  const std::optional<uintmax_t> left = size_of_match(k.leftover);
  EXPECT_EQ(left.has_value(), !k.leftover.empty()) << "files matching " << k.leftover;

  // The save made again succeeds; remove_all clears what the killed one left.
  CheckpointManager again(dir_.string(), 1);
  again.save(weights(2), 2, {{"step", int64_t{2}}});
  EXPECT_EQ(load_checkpoint(dir_.string()).get_int("step"), 2);
  if (left) {  // the killed save had written part of that file, or all of it
    const std::optional<uintmax_t> full = size_of_match(k.complete);
    ASSERT_TRUE(full) << k.complete;
    if (k.stage.find("_partial") != std::string::npos) {
      EXPECT_GT(*left, 0u) << k.leftover;
      EXPECT_LT(*left, *full) << k.leftover << " vs " << k.complete;
    } else {
      EXPECT_EQ(*left, *full) << k.leftover << " vs " << k.complete;
    }
  }
  EXPECT_FALSE(fs::exists(path("ckpt-1.index")));
  // The save made again also removed the killed one's temp files: a job killed again and again
  // does not pile them up.
  EXPECT_FALSE(size_of_match(R"(.*\.tmp-.*)")) << "a temp file is left after the next save";
  again.remove_all();
  EXPECT_TRUE(files().empty());
}

INSTANTIATE_TEST_SUITE_P(
    EveryStage, CheckpointKillTest,
    testing::Values(
        KilledSave{"data_partial", 1, false, true, R"(ckpt-2\.data-[0-9a-f]{16}\.tmp-.+)",
                   R"(ckpt-2\.data-[0-9a-f]{16})"},
        KilledSave{"data_written", 1, false, true, R"(ckpt-2\.data-[0-9a-f]{16}\.tmp-.+)",
                   R"(ckpt-2\.data-[0-9a-f]{16})"},
        KilledSave{"data_renamed", 1, false, true, R"(ckpt-2\.data-[0-9a-f]{16})",
                   R"(ckpt-2\.data-[0-9a-f]{16})"},
        KilledSave{"index_partial", 1, false, true, R"(ckpt-2\.index\.tmp-.+)", "ckpt-2.index"},
        KilledSave{"index_written", 1, false, true, R"(ckpt-2\.index\.tmp-.+)", "ckpt-2.index"},
        KilledSave{"index_renamed", 1, true, true, "", ""},  // committed; the pointer names 1
        KilledSave{"stale_removed", 1, true, true, "", ""},
        KilledSave{"pointer_partial", 1, true, true, R"(checkpoint\.tmp-.+)", "checkpoint"},
        KilledSave{"pointer_written", 1, true, true, R"(checkpoint\.tmp-.+)", "checkpoint"},
        KilledSave{"pointer_renamed", 2, true, true, "", ""},
        KilledSave{"old_removed", 2, true, false, "", ""}),
    [](const testing::TestParamInfo<KilledSave>& info) { return info.param.stage; });

TEST_F(CheckpointTest, AnUnknownFaultStageIsAnErrorNamingTheStages) {
  // An unknown stage would never fire, and a kill test would pass without its kill.
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    setenv("KILN_FAULT_KILL_DURING_SAVE", "1:index_writen", 1);
    try {
      save_checkpoint(path("c"), weights(1));
    } catch (const Error& e) {
      const std::string what = e.what();
      _exit(e.code() == ErrorCode::kInvalidArgument &&
                    what.find("unknown stage 'index_writen'") != std::string::npos &&
                    what.find("index_written") != std::string::npos
                ? 3
                : 4);
    }
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 3);
}

// ---- CheckpointManager and the pointer file ----

TEST_F(CheckpointTest, ManagerKeepsTheLastNAndWritesThePointerFile) {
  CheckpointManager m(dir_.string(), 2);
  EXPECT_EQ(m.latest(), std::nullopt);
  for (int64_t step : {1, 2, 3, 4, 5}) {
    m.save({{"w", Tensor::scalar<int64_t>(step)}}, step, {{"step", step}});
  }
  EXPECT_EQ(m.checkpoints(), (std::vector<std::string>{path("ckpt-4"), path("ckpt-5")}));
  EXPECT_EQ(m.latest(), path("ckpt-5"));
  std::vector<std::string> names = files();
  ASSERT_EQ(names.size(), 5u);  // checkpoint, 2 x (data, index)
  EXPECT_EQ(names[0], "checkpoint");
  EXPECT_EQ(names[1].rfind("ckpt-4.data-", 0), 0u);
  EXPECT_EQ(names[2], "ckpt-4.index");
  EXPECT_EQ(names[3].rfind("ckpt-5.data-", 0), 0u);
  EXPECT_EQ(names[4], "ckpt-5.index");
  EXPECT_EQ(read_file(path("checkpoint")),
            "model_checkpoint_path: \"ckpt-5\"\n"
            "all_model_checkpoint_paths: \"ckpt-4\"\n"
            "all_model_checkpoint_paths: \"ckpt-5\"\n");
  EXPECT_EQ(latest_checkpoint(dir_.string()), path("ckpt-5"));
  EXPECT_EQ(load_checkpoint(dir_.string()).get_int("step"), 5);

  // A new manager over the same directory picks them up and goes on pruning.
  CheckpointManager again(dir_.string(), 2);
  EXPECT_EQ(again.checkpoints().size(), 2u);
  again.save({{"w", Tensor::scalar<int64_t>(6)}}, 6);
  EXPECT_FALSE(fs::exists(path("ckpt-4.index")));
  EXPECT_EQ(again.checkpoints(), (std::vector<std::string>{path("ckpt-5"), path("ckpt-6")}));

  again.remove_all();
  EXPECT_TRUE(files().empty());
  EXPECT_EQ(latest_checkpoint(dir_.string()), std::nullopt);
}

TEST_F(CheckpointTest, ManagerWithoutALimitKeepsAllAndRejectsNegativeSteps) {
  CheckpointManager m(dir_.string(), 0);
  for (int64_t step = 0; step < 4; ++step) m.save({{"w", Tensor::scalar<float>(1)}}, step);
  EXPECT_EQ(m.checkpoints().size(), 4u);
  EXPECT_EQ(thrown_error([&] { m.save({}, -1); }).code(), ErrorCode::kInvalidArgument);
}

TEST_F(CheckpointTest, LatestCheckpointFallsBackToTheHighestStepAndRejectsACorruptPointer) {
  EXPECT_EQ(latest_checkpoint(dir_.string()), std::nullopt);
  EXPECT_EQ(latest_checkpoint(path("does-not-exist")), std::nullopt);
  save_checkpoint(path("ckpt-9"), {{"w", Tensor::scalar<float>(9)}});
  save_checkpoint(path("ckpt-10"), {{"w", Tensor::scalar<float>(10)}});
  EXPECT_EQ(latest_checkpoint(dir_.string()), path("ckpt-10"));  // no pointer file: by step
  write_file(path("checkpoint"), "model_checkpoint_path: \"ckpt-9\"\n");
  EXPECT_EQ(latest_checkpoint(dir_.string()), path("ckpt-9"));
  write_file(path("checkpoint"), "model_checkpoint_path: \"ckpt-77\"\n");  // names a missing one
  EXPECT_EQ(latest_checkpoint(dir_.string()), path("ckpt-10"));
  write_file(path("checkpoint"), "model_checkpoint_path: \"ckpt\n\xff{{");
  Error e = thrown_error([&] { latest_checkpoint(dir_.string()); });
  EXPECT_EQ(e.code(), ErrorCode::kDataLoss);
  EXPECT_THAT(e.what(), HasSubstr(path("checkpoint")));
}

}  // namespace
}  // namespace kiln::io
