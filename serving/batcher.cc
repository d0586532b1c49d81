// Requests merged into batches and split back (serving/batcher.h).
#include "serving/batcher.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <future>

#include "kiln/error.h"
#include "kiln/ops.h"
#include "serving/proto/batching_parameters.pb.h"
#include "serving/text_proto.h"

namespace kiln::serving {
namespace {

using Clock = std::chrono::steady_clock;

int64_t rows_of(const std::map<std::string, Tensor>& inputs) {
  int64_t rows = -1;
  for (const auto& [name, t] : inputs) {
    const int64_t n = t.shape().empty() ? -1 : t.shape()[0];
    if (n < 0 || (rows >= 0 && n != rows)) return -1;
    rows = n;
  }
  return rows;
}

// Requests that may share a batch: the same servable, signature, and inputs alike but for
// their first dimension.
std::string key_of(const Servable* s, const std::string& signature,
                   const std::map<std::string, Tensor>& inputs) {
  std::string key = std::to_string(reinterpret_cast<uintptr_t>(s)) + "/" + signature;
  for (const auto& [name, t] : inputs) {
    key += "|" + name + ":" + dtype_name(t.dtype());
    for (size_t d = 1; d < t.shape().size(); ++d) key += "," + std::to_string(t.shape()[d]);
  }
  return key;
}

}  // namespace

struct Batcher::Task {
  std::map<std::string, Tensor> inputs;
  int64_t rows = 0;
  Clock::time_point enqueued;
  std::promise<std::map<std::string, Tensor>> result;
};

struct Batcher::Queue {
  std::shared_ptr<const Servable> servable;
  std::string signature;
  std::deque<std::shared_ptr<Task>> tasks;
  int64_t rows = 0;
};

BatchingOptions parse_batching_parameters(const std::string& text, const std::string& where) {
  tensorflow::serving::BatchingParameters p;
  parse_text_proto(text, &p, "batching parameters " + where);
  BatchingOptions o;
  if (p.has_max_batch_size()) o.max_batch_size = p.max_batch_size().value();
  if (p.has_batch_timeout_micros()) o.batch_timeout_micros = p.batch_timeout_micros().value();
  if (p.has_num_batch_threads()) o.num_batch_threads = p.num_batch_threads().value();
  if (p.has_max_enqueued_batches()) o.max_enqueued_batches = p.max_enqueued_batches().value();
  o.allowed_batch_sizes.assign(p.allowed_batch_sizes().begin(), p.allowed_batch_sizes().end());
  auto bad = [&](const std::string& why) {
    throw Error(ErrorCode::kInvalidArgument, "batching parameters " + where + ": " + why);
  };
  if (o.max_batch_size < 1) bad("max_batch_size must be >= 1");
  if (o.batch_timeout_micros < 0) bad("batch_timeout_micros must be >= 0");
  if (o.num_batch_threads < 1) bad("num_batch_threads must be >= 1");
  if (o.max_enqueued_batches < 1) bad("max_enqueued_batches must be >= 1");
  const auto& a = o.allowed_batch_sizes;
  if (!a.empty()) {
    if (!std::is_sorted(a.begin(), a.end()) || std::adjacent_find(a.begin(), a.end()) != a.end() ||
        a.front() < 1)
      bad("allowed_batch_sizes must be positive and increasing");
    if (a.back() != o.max_batch_size)
      bad("the last of allowed_batch_sizes (" + std::to_string(a.back()) +
          ") must equal max_batch_size (" + std::to_string(o.max_batch_size) + ")");
  }
  return o;
}

BatchingOptions read_batching_parameters_file(const std::string& path) {
  return parse_batching_parameters(read_config_file(path, "batching parameters file"),
                                   "'" + path + "'");
}

Batcher::Batcher(BatchingOptions options) : options_(std::move(options)) {
  for (int64_t i = 0; i < options_.num_batch_threads; ++i)
    threads_.emplace_back([this] { work(); });
}

Batcher::~Batcher() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

Batcher::Stats Batcher::stats() const {
  std::lock_guard lock(mu_);
  Stats s = stats_;
  s.queued_rows = queued_rows_;
  return s;
}

std::map<std::string, Tensor> Batcher::run(std::shared_ptr<const Servable> servable,
                                           const std::string& signature,
                                           std::map<std::string, Tensor> inputs) {
  const int64_t rows = rows_of(inputs);
  // Unbatched inputs, or more rows than a batch holds: run alone.
  if (rows < 1 || rows > options_.max_batch_size)
    return servable->model_handle.run(signature, inputs);
  auto task = std::make_shared<Task>();
  task->rows = rows;
  task->enqueued = Clock::now();
  const std::string key = key_of(servable.get(), signature, inputs);
  task->inputs = std::move(inputs);
  std::future<std::map<std::string, Tensor>> result = task->result.get_future();
  {
    std::lock_guard lock(mu_);
    if (queued_rows_ + rows > options_.max_enqueued_batches * options_.max_batch_size) {
      ++stats_.rejected;
      throw Error(ErrorCode::kUnavailable,
                  "the batching queue is full (" + std::to_string(queued_rows_) +
                      " rows waiting, max_enqueued_batches " +
                      std::to_string(options_.max_enqueued_batches) + " of " +
                      std::to_string(options_.max_batch_size) + "): try again later");
    }
    std::shared_ptr<Queue>& q = queues_[key];
    if (!q) {
      q = std::make_shared<Queue>();
      q->servable = std::move(servable);
      q->signature = signature;
    }
    q->tasks.push_back(task);
    q->rows += rows;
    queued_rows_ += rows;
  }
  cv_.notify_one();
  return result.get();
}

void Batcher::work() {
  std::unique_lock lock(mu_);
  while (true) {
    // The first queue whose batch is full or whose oldest request has waited long enough;
    // otherwise wait for the earliest deadline (or new work).
    const auto timeout = std::chrono::microseconds(options_.batch_timeout_micros);
    const auto now = Clock::now();
    std::shared_ptr<Queue> ready;
    std::string ready_key;
    Clock::time_point next = Clock::time_point::max();
    for (auto& [key, q] : queues_) {
      if (q->tasks.empty()) continue;
      const auto deadline = q->tasks.front()->enqueued + timeout;
      if (q->rows >= options_.max_batch_size || deadline <= now || stopping_) {
        ready = q;
        ready_key = key;
        break;
      }
      next = std::min(next, deadline);
    }
    if (!ready) {
      if (stopping_) return;
      if (next == Clock::time_point::max()) {
        cv_.wait(lock);
      } else {
        cv_.wait_until(lock, next);
      }
      continue;
    }
    std::vector<std::shared_ptr<Task>> batch;
    int64_t rows = 0;
    while (!ready->tasks.empty() && rows + ready->tasks.front()->rows <= options_.max_batch_size) {
      rows += ready->tasks.front()->rows;
      batch.push_back(std::move(ready->tasks.front()));
      ready->tasks.pop_front();
    }
    ready->rows -= rows;
    queued_rows_ -= rows;
    if (ready->tasks.empty()) queues_.erase(ready_key);  // drops its hold on the servable
    if (!ready->tasks.empty()) cv_.notify_one();         // more for another thread
    lock.unlock();
    run_batch(*ready, std::move(batch));
    lock.lock();
  }
}

void Batcher::run_batch(Queue& q, std::vector<std::shared_ptr<Task>> tasks) {
  int64_t rows = 0;
  for (const auto& t : tasks) rows += t->rows;
  int64_t padded = rows;
  for (int64_t a : options_.allowed_batch_sizes) {
    if (a >= rows) {
      padded = a;
      break;
    }
  }
  try {
    // Rows are copied as bytes (one memcpy per request and input), not through concatenate and
    // slice ops: at 64 single-row requests a batch, eager ops cost more than the model.
    std::map<std::string, Tensor> merged;
    for (const auto& [name, first] : tasks[0]->inputs) {
      if (tasks.size() == 1 && padded == rows) {
        merged[name] = first;
        continue;
      }
      Shape shape = first.shape();
      shape[0] = padded;
      Tensor batch = Tensor::empty(first.dtype(), shape);
      char* at = static_cast<char*>(batch.raw_mutable_data());
      for (const auto& t : tasks) {
        const Tensor& part = t->inputs.at(name);
        std::memcpy(at, part.raw_data(), part.nbytes());
        at += part.nbytes();
      }
      std::memset(at, 0, static_cast<size_t>(static_cast<char*>(batch.raw_mutable_data()) +
                                             batch.nbytes() - at));  // padding rows
      merged[name] = std::move(batch);
    }
    std::map<std::string, Tensor> out = q.servable->model_handle.run(q.signature, merged);
    std::vector<std::map<std::string, Tensor>> split(tasks.size());
    for (const auto& [name, y] : out) {
      if (y.shape().empty() || y.shape()[0] != padded) {
        throw Error(ErrorCode::kFailedPrecondition,
                    "batching: output '" + name + "' has no batch dimension of " +
                        std::to_string(padded) + " rows; serve this model without batching");
      }
      if (tasks.size() == 1 && padded == rows) {
        split[0][name] = y;
        continue;
      }
      const size_t row_bytes = y.nbytes() / static_cast<size_t>(padded);
      const char* from = static_cast<const char*>(y.raw_data());
      for (size_t i = 0; i < tasks.size(); ++i) {
        Shape shape = y.shape();
        shape[0] = tasks[i]->rows;
        const size_t n = row_bytes * static_cast<size_t>(tasks[i]->rows);
        split[i][name] = Tensor::from_bytes(y.dtype(), shape, from, n);
        from += n;
      }
    }
    {
      std::lock_guard lock(mu_);
      ++stats_.batches;
      stats_.requests += static_cast<int64_t>(tasks.size());
      stats_.rows += rows;
      stats_.padded_rows += padded - rows;
    }
    for (size_t i = 0; i < tasks.size(); ++i) tasks[i]->result.set_value(std::move(split[i]));
  } catch (...) {
    for (const auto& t : tasks) t->result.set_exception(std::current_exception());
  }
}

}  // namespace kiln::serving
