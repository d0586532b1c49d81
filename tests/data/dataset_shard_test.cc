// Dividing a dataset between workers (Dataset::shard_for_worker, tf.data's auto-shard policies):
// by file when there are enough files, each worker then batching its part of the global batch;
// by element otherwise; FILE with too few files is an error; and fit under a multi-worker
// strategy trains on each worker's own files to one process's weights on the same global batches.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "kiln/data/dataset.h"
#include "kiln/distribute/collective.h"
#include "kiln/distribute/multi_worker_mirrored_strategy.h"
#include "kiln/error.h"
#include "kiln/io/tfrecord.h"
#include "tests/distribute/linear_regression.h"
#include "tests/testing/temp_dir.h"

namespace kiln::data {
namespace {

using ::testing::HasSubstr;

class DatasetShard : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing_util::per_test_dir("dataset_shard");
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // `files` TFRecord files of `records` records each, record r of file f reading "fFrRR".
  std::vector<std::string> write_files(int files, int records) {
    std::vector<std::string> paths;
    for (int f = 0; f < files; ++f) {
      paths.push_back((dir_ / ("part-" + std::to_string(f) + ".tfrecord")).string());
      io::RecordWriter writer(paths.back());
      for (int r = 0; r < records; ++r) {
        char name[8];
        std::snprintf(name, sizeof name, "f%dr%02d", f, r);
        writer.write(name);
      }
      writer.close();
    }
    return paths;
  }

  // Every batch of worker `index` of `workers`, as lists of the records' names.
  static std::vector<std::vector<std::string>> batches(const Dataset& ds) {
    std::vector<std::vector<std::string>> out;
    Iterator it = ds.begin_epoch(0);
    while (std::optional<Element> e = it.next()) {
      const Tensor& t = (*e)[0];  // u8 [rows, 5]
      std::vector<std::string> names;
      for (int64_t r = 0; r < t.dim(0); ++r) {
        names.emplace_back(static_cast<const char*>(t.raw_data()) + r * t.dim(1), t.dim(1));
      }
      out.push_back(names);
    }
    return out;
  }

  std::filesystem::path dir_;
};

TEST_F(DatasetShard, ByFileEachWorkerReadsItsOwnFilesInItsPartOfTheBatch) {
  const std::vector<std::string> files = write_files(5, 4);
  const Dataset ds = Dataset::tfrecord(files).shuffle(8, 3).batch(6).prefetch();
  for (int workers : {2, 3, 5}) {
    std::multiset<std::string> all;
    std::set<char> files_seen;
    for (int w = 0; w < workers; ++w) {
      const WorkerShard shard = ds.shard_for_worker(workers, w);
      EXPECT_EQ(shard.policy, AutoShardPolicy::kFile) << shard.reason;
      const int64_t part = 6 * (w + 1) / workers - 6 * w / workers;
      std::set<char> mine;
      for (const std::vector<std::string>& batch : batches(shard.dataset)) {
        EXPECT_LE(static_cast<int64_t>(batch.size()), part) << workers << " workers";
        for (const std::string& name : batch) {
          all.insert(name);
          mine.insert(name[1]);
          EXPECT_EQ((name[1] - '0') % workers, w) << name << " read by worker " << w;
        }
      }
      for (char f : mine) EXPECT_TRUE(files_seen.insert(f).second) << "file " << f << " twice";
    }
    // Together the workers read every record of every file once.
    EXPECT_EQ(all.size(), 20u) << workers << " workers";
    EXPECT_EQ(std::set<std::string>(all.begin(), all.end()).size(), 20u);
    EXPECT_EQ(files_seen.size(), 5u);
  }
}

TEST_F(DatasetShard, FewerFilesThanWorkersFallsBackToElementSharding) {
  const std::vector<std::string> files = write_files(2, 7);
  const Dataset ds = Dataset::tfrecord(files).batch(6);
  const std::vector<std::vector<std::string>> whole = batches(ds);
  std::vector<std::vector<std::string>> joined(whole.size());
  for (int w = 0; w < 3; ++w) {
    const WorkerShard shard = ds.shard_for_worker(3, w);
    EXPECT_EQ(shard.policy, AutoShardPolicy::kData);
    EXPECT_THAT(shard.reason, HasSubstr("2 files for 3 workers"));
    const std::vector<std::vector<std::string>> mine = batches(shard.dataset);
    ASSERT_EQ(mine.size(), whole.size());  // every worker reads every batch ...
    for (size_t b = 0; b < mine.size(); ++b) {
      // ... and keeps its consecutive part of it (a last batch of 2: parts of 0, 1 and 1).
      EXPECT_EQ(mine[b].size(), whole[b].size() * (w + 1) / 3 - whole[b].size() * w / 3);
      joined[b].insert(joined[b].end(), mine[b].begin(), mine[b].end());
    }
  }
  EXPECT_EQ(joined, whole);
  // In-memory data has no files: by element too.
  const Dataset tensors = Dataset::from_tensors({Tensor::from_vector<float>({1, 2, 3, 4}, {4})});
  EXPECT_EQ(tensors.batch(4).shard_for_worker(2, 1).policy, AutoShardPolicy::kData);
}

TEST_F(DatasetShard, FilePolicyWithTooFewFilesOrNoFilesIsAnError) {
  const Options by_file = {.distribute = {.auto_shard_policy = AutoShardPolicy::kFile}};
  const Dataset ds = Dataset::tfrecord(write_files(2, 3)).batch(4).with_options(by_file);
  try {
    ds.shard_for_worker(3, 0);
    FAIL() << "FILE sharding of 2 files between 3 workers did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_THAT(e.what(), HasSubstr("auto_shard_policy FILE cannot divide the dataset between 3 "
                                    "workers: it reads 2 files for 3 workers"));
  }
  // The options survive later transformations, as tf.data's do.
  EXPECT_THROW(ds.prefetch().shard_for_worker(3, 2), Error);
  EXPECT_EQ(ds.shard_for_worker(2, 1).policy, AutoShardPolicy::kFile);
  const Dataset tensors =
      Dataset::from_tensors({Tensor::from_vector<float>({1, 2, 3, 4}, {4})}).with_options(by_file);
  EXPECT_THROW(
      {
        try {
          tensors.batch(2).shard_for_worker(2, 0);
        } catch (const Error& e) {
          EXPECT_THAT(e.what(), HasSubstr("not read from a list of files"));
          throw;
        }
      },
      Error);
  EXPECT_THROW(ds.shard_for_worker(2, 2), Error);  // no worker 2 of 2
}

TEST_F(DatasetShard, OffLeavesTheDatasetWhole) {
  const Options off = {.distribute = {.auto_shard_policy = AutoShardPolicy::kOff}};
  const Dataset ds = Dataset::tfrecord(write_files(4, 3)).batch(4).with_options(off);
  const WorkerShard shard = ds.shard_for_worker(2, 1);
  EXPECT_EQ(shard.policy, AutoShardPolicy::kOff);
  EXPECT_EQ(batches(shard.dataset), batches(ds));
}

// fit under MultiWorkerMirroredStrategy (2 in-process workers) on 2 TFRecord files, each row a
// record of its floats. File 0 holds rows 0-4, 10-14, ...; file 1 rows 5-9, 15-19, ...: with a
// global batch of 10 split in parts of 5, worker w's file gives it exactly its part of each of
// one process's batches, so the workers reach one process's weights (to the reassociation bound).
TEST_F(DatasetShard, FitUnderAMultiWorkerStrategyTrainsEachWorkerOnItsOwnFiles) {
  using namespace testing_util;  // NOLINT: the shared linear-regression setup
  const Tensor x = uniform({kRows, kK}, 71), y = uniform({kRows, kM}, 72);
  std::vector<std::string> files = {(dir_ / "rows-0.tfrecord").string(),
                                    (dir_ / "rows-1.tfrecord").string()};
  {
    io::RecordWriter writers[2] = {io::RecordWriter(files[0]), io::RecordWriter(files[1])};
    for (int64_t r = 0; r < kRows; ++r) {
      std::string record(reinterpret_cast<const char*>(x.data<float>().data() + r * kK),
                         kK * sizeof(float));
      record.append(reinterpret_cast<const char*>(y.data<float>().data() + r * kM),
                    kM * sizeof(float));
      writers[(r / 5) % 2].write(record);
    }
    for (io::RecordWriter& w : writers) w.close();
  }
  const Dataset ds =
      Dataset::tfrecord(files, io::Compression::kNone, {.cycle_length = 1})
          .map([](Element e) -> Element {
            const char* bytes = static_cast<const char*>(e[0].raw_data());
            return {Tensor::from_bytes(f32, {kK}, bytes, kK * sizeof(float)),
                    Tensor::from_bytes(f32, {kM}, bytes + kK * sizeof(float), kM * sizeof(float))};
          })
          .batch(10);

  auto single = linear_model(nullptr);
  const std::vector<double> theta0 = parameters(*single);
  single->fit(x, y, {.epochs = 2, .batch_size = 10, .shuffle = false, .verbose = 0});
  const std::vector<double> want = parameters(*single);
  const std::vector<double> bound = equivalence_bound(values(x), values(y), theta0, 10, 2);

  std::vector<std::unique_ptr<distribute::Collective>> group =
      distribute::make_in_process_group(2, {.timeout = std::chrono::seconds(60)});
  std::vector<std::vector<double>> got(2);
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int w = 0; w < 2; ++w) {
    threads.emplace_back([&, w, comm = std::move(group[w])]() mutable {
      try {
        auto strategy = std::make_shared<distribute::MultiWorkerMirroredStrategy>(std::move(comm));
        auto model = linear_model(strategy);
        model->fit(ds, {.epochs = 2, .verbose = 0});
        got[w] = parameters(*model);
      } catch (const std::exception& e) {
        errors[w] = e.what();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  ASSERT_EQ(errors, (std::vector<std::string>{"", ""}));
  EXPECT_EQ(got[0], got[1]);
  for (size_t p = 0; p < want.size(); ++p) {
    EXPECT_LE(std::abs(got[0][p] - want[p]), bound[p]) << "parameter " << p;
  }
}

}  // namespace
}  // namespace kiln::data
