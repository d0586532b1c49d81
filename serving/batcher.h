// Dynamic batching (TF Serving's --enable_batching): concurrent predict requests for the same
// version, signature and inner shapes are merged along the batch dimension into one run and
// split back. A batch runs when it reaches max_batch_size rows or its oldest request has
// waited batch_timeout_micros; with allowed_batch_sizes it is padded (zero rows) up to the next
// allowed size. A full queue answers at once (kiln::Error kUnavailable: HTTP 503, gRPC
// UNAVAILABLE): the queue is bounded, never unbounded.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "serving/model_manager.h"

namespace kiln::serving {

struct BatchingOptions {
  int64_t max_batch_size = 32;
  int64_t batch_timeout_micros = 1000;
  int64_t num_batch_threads = 2;
  int64_t max_enqueued_batches = 16;         // rows waiting: at most this many full batches
  std::vector<int64_t> allowed_batch_sizes;  // increasing, the last = max_batch_size
};

// TF Serving's BatchingParameters in text format; throws kiln::Error naming the file, the
// line and column, or the field that is out of range.
BatchingOptions parse_batching_parameters(const std::string& text, const std::string& where);
BatchingOptions read_batching_parameters_file(const std::string& path);

class Batcher {
 public:
  explicit Batcher(BatchingOptions options);
  ~Batcher();  // finishes the batches already queued
  Batcher(const Batcher&) = delete;
  Batcher& operator=(const Batcher&) = delete;

  // Runs `signature` of `servable` on `inputs` (each batched along dimension 0, the same number
  // of rows), merged with other requests: the same results as an unbatched run of these rows.
  std::map<std::string, Tensor> run(std::shared_ptr<const Servable> servable,
                                    const std::string& signature,
                                    std::map<std::string, Tensor> inputs);

  struct Stats {
    int64_t batches = 0, requests = 0, rows = 0, padded_rows = 0, rejected = 0;
    int64_t queued_rows = 0;  // now
  };
  Stats stats() const;
  const BatchingOptions& options() const { return options_; }

 private:
  struct Task;
  struct Queue;
  void work();
  void run_batch(Queue& q, std::vector<std::shared_ptr<Task>> tasks);

  BatchingOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::shared_ptr<Queue>> queues_;
  int64_t queued_rows_ = 0;
  Stats stats_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace kiln::serving
