// Dynamic batching: concurrent requests merged into fewer runs with the same results as
// unbatched ones, padding to allowed batch sizes, a full queue rejected at once, and TF
// Serving's batching parameters file.
#include "serving/batcher.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>

#include "kiln/nn.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/values.h"

namespace kiln::serving {
namespace {

using test_values::error_of;
using ::testing::HasSubstr;

class BatcherTest : public testing_util::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    nn::Sequential model({nn::Dense(4, "tanh"), nn::Dense(2)});
    model.set_seed(3);
    model.build({3});
    io::save_model(model, path("m"), {3});
    ModelManager mm({{.name = "m", .base_path = path("m")}});
    mm.poll();
    servable_ = mm.get("m", std::nullopt);
  }
  std::map<std::string, Tensor> row(int i) {
    return {{"x", random_normal({1, 3}, static_cast<uint64_t>(i))}};
  }
  std::shared_ptr<const Servable> servable_;
};

TEST_F(BatcherTest, ConcurrentRequestsShareRunsAndGetTheirOwnRows) {
  Batcher batcher({.max_batch_size = 8, .batch_timeout_micros = 20000, .num_batch_threads = 1});
  constexpr int kClients = 16;
  std::vector<std::map<std::string, Tensor>> got(kClients);
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i)
    clients.emplace_back([&, i] { got[i] = batcher.run(servable_, "serving_default", row(i)); });
  for (std::thread& t : clients) t.join();
  for (int i = 0; i < kClients; ++i) {
    Tensor want = servable_->model_handle.run("serving_default", row(i)).at("output_0");
    EXPECT_TRUE(allclose(got[i].at("output_0"), want, 1e-6, 1e-6)) << "client " << i;
  }
  Batcher::Stats s = batcher.stats();
  EXPECT_EQ(s.requests, kClients);
  EXPECT_LT(s.batches, kClients);  // merged
  EXPECT_EQ(s.rows, kClients);
  EXPECT_EQ(s.queued_rows, 0);
}

TEST_F(BatcherTest, PadsToTheNextAllowedBatchSize) {
  Batcher batcher({.max_batch_size = 4, .batch_timeout_micros = 0, .allowed_batch_sizes = {2, 4}});
  std::map<std::string, Tensor> three = {{"x", random_normal({3, 3}, 9)}};
  Tensor y = batcher.run(servable_, "serving_default", three).at("output_0");
  EXPECT_EQ(y.shape(), (Shape{3, 2}));
  EXPECT_TRUE(allclose(y, servable_->model_handle.run("serving_default", three).at("output_0"),
                       1e-6, 1e-6));
  EXPECT_EQ(batcher.stats().padded_rows, 1);
}

TEST_F(BatcherTest, AFullQueueIsRejectedAtOnceAndTheQueuedRequestStillAnswers) {
  Batcher batcher({.max_batch_size = 4, .batch_timeout_micros = 300000, .max_enqueued_batches = 1});
  std::map<std::string, Tensor> three = {{"x", random_normal({3, 3}, 1)}};
  std::map<std::string, Tensor> first;
  std::thread waiting([&] { first = batcher.run(servable_, "serving_default", three); });
  while (batcher.stats().queued_rows < 3) std::this_thread::yield();
  Error e = test_values::thrown_error([&] {
    batcher.run(servable_, "serving_default", {{"x", random_normal({2, 3}, 2)}});
  });
  EXPECT_EQ(e.code(), ErrorCode::kUnavailable);
  EXPECT_THAT(e.what(), HasSubstr("the batching queue is full"));
  waiting.join();
  EXPECT_EQ(first.at("output_0").shape(), (Shape{3, 2}));
  EXPECT_EQ(batcher.stats().rejected, 1);
}

TEST_F(BatcherTest, ReadsTFServingsBatchingParameters) {
  BatchingOptions o = parse_batching_parameters(R"(
      max_batch_size { value: 128 }
      batch_timeout_micros { value: 0 }
      max_enqueued_batches { value: 1000000 }
      num_batch_threads { value: 8 }
      allowed_batch_sizes: 32
      allowed_batch_sizes: 128)",
                                                "test");
  EXPECT_EQ(o.max_batch_size, 128);
  EXPECT_EQ(o.batch_timeout_micros, 0);
  EXPECT_EQ(o.max_enqueued_batches, 1000000);
  EXPECT_EQ(o.num_batch_threads, 8);
  EXPECT_EQ(o.allowed_batch_sizes, (std::vector<int64_t>{32, 128}));
  EXPECT_THAT(error_of([] {
                parse_batching_parameters("max_batch_size { value: 64 } allowed_batch_sizes: 32",
                                          "f");
              }),
              HasSubstr("the last of allowed_batch_sizes (32) must equal max_batch_size (64)"));
  EXPECT_THAT(error_of([] { parse_batching_parameters("max_batch { value: 1 }", "f"); }),
              HasSubstr("batching parameters f: line 1"));
}

}  // namespace
}  // namespace kiln::serving
