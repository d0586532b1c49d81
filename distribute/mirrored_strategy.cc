// MirroredStrategy: one kept thread per replica beyond the caller's, each run under a
// CollectiveScope of a fresh in-process group; errors gathered and rethrown once every replica
// has stopped.
#include "kiln/distribute/mirrored_strategy.h"

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "kiln/distribute/ops.h"
#include "kiln/error.h"
#include "kiln/graph.h"
#include "kiln/ops.h"

namespace kiln::distribute {
namespace {

// "1 replica", "4 replicas".
std::string replicas(int64_t n) { return std::to_string(n) + (n == 1 ? " replica" : " replicas"); }

std::string replica_prefix(int r, int n) {
  return "replica " + std::to_string(r) + " of " + std::to_string(n) + ": ";
}

// kUnavailable: this replica failed because a peer did (the group broke or a peer was gone).
bool is_consequence(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    return e.code() == ErrorCode::kUnavailable;
  } catch (...) {
    return false;
  }
}

// The Workers whose run this thread is in, as a replica (worker threads: always theirs).
thread_local const void* t_replica_of = nullptr;

}  // namespace

// The threads of replicas 1..n-1, started once and kept: each waits for the next run, runs its
// replica of it and reports back. (Starting n-1 threads every step cost a clone and a fresh
// thread's caches per replica per step.)
class MirroredStrategy::Workers {
 public:
  explicit Workers(int n) {
    threads_.reserve(n - 1);
    try {
      for (int r = 1; r < n; ++r) threads_.emplace_back([this, r] { loop(r); });
    } catch (...) {
      stop();
      throw;
    }
  }
  ~Workers() { stop(); }

  // Runs replica(r) on worker r, r = 1..n-1, and replica(0) on the caller; returns when every
  // one has returned. `replica` must not throw. Runs from several threads take turns.
  void run(const std::function<void(int)>& replica, const std::string& who) {
    if (t_replica_of == this) {
      throw Error(ErrorCode::kFailedPrecondition,
                  who +
                      ": run from inside one of its own replicas (its threads are busy with "
                      "the outer run); run the inner work directly instead");
    }
    std::lock_guard<std::mutex> turn(run_mu_);
    {
      std::lock_guard<std::mutex> lock(mu_);
      job_ = &replica;
      pending_ = threads_.size();
      ++generation_;
    }
    start_.notify_all();
    const void* outer = std::exchange(t_replica_of, this);
    replica(0);
    t_replica_of = outer;
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [&] { return pending_ == 0; });
    job_ = nullptr;
  }

 private:
  void loop(int r) {
    t_replica_of = this;
    uint64_t seen = 0;
    for (;;) {
      const std::function<void(int)>* job = nullptr;
      {
        std::unique_lock<std::mutex> lock(mu_);
        start_.wait(lock, [&] { return stopping_ || generation_ != seen; });
        if (stopping_) return;
        seen = generation_;
        job = job_;
      }
      (*job)(r);
      std::lock_guard<std::mutex> lock(mu_);
      if (--pending_ == 0) done_.notify_one();
    }
  }
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    start_.notify_all();
    for (std::thread& t : threads_) t.join();
    threads_.clear();
  }

  std::mutex run_mu_;  // held for a whole run
  std::mutex mu_;      // guards what follows
  std::condition_variable start_, done_;
  const std::function<void(int)>* job_ = nullptr;
  uint64_t generation_ = 0;  // runs started
  size_t pending_ = 0;       // workers still in the current run
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

Strategy::~Strategy() = default;

// Each replica is a thread holding its own copy of the model's variables, and every replica
// waits at each all_reduce for the slowest: past a few replicas per hardware thread they only
// contend, and a few thousand exhaust the process's threads or memory (std::system_error,
// std::bad_alloc). 64 leaves room to test many replicas on a small machine.
int MirroredStrategy::max_replicas() {
  const int hardware = static_cast<int>(std::thread::hardware_concurrency());
  return std::max(64, 4 * hardware);
}

MirroredStrategy::MirroredStrategy(int num_replicas, CollectiveOptions options)
    : num_replicas_(num_replicas), options_(options) {
  if (num_replicas < 1) {
    throw Error(
        ErrorCode::kInvalidArgument,
        "MirroredStrategy: num_replicas must be at least 1, got " + std::to_string(num_replicas));
  }
  if (num_replicas > max_replicas()) {
    throw Error(ErrorCode::kInvalidArgument,
                "MirroredStrategy: num_replicas must be at most " + std::to_string(max_replicas()) +
                    " (max(64, 4 x " + std::to_string(std::thread::hardware_concurrency()) +
                    " hardware threads): one thread and one copy of the model each), got " +
                    std::to_string(num_replicas));
  }
  try {
    workers_ = std::make_unique<Workers>(num_replicas);
  } catch (const std::system_error& e) {
    throw Error(ErrorCode::kResourceExhausted,
                name() + ": could not start the replicas' threads: " + e.what());
  } catch (const std::bad_alloc&) {
    throw Error(ErrorCode::kResourceExhausted, name() + ": out of memory starting the replicas");
  }
}

MirroredStrategy::~MirroredStrategy() = default;

std::string MirroredStrategy::name() const {
  return "MirroredStrategy(" + replicas(num_replicas_) + ")";
}

void MirroredStrategy::run_local(const std::function<void(int local_replica)>& fn) {
  const int n = num_replicas_;
  std::vector<std::unique_ptr<Collective>> group;
  std::vector<std::exception_ptr> errors;
  try {
    group = make_in_process_group(n, options_);
    errors.resize(n);
  } catch (const std::bad_alloc&) {
    throw Error(ErrorCode::kResourceExhausted, name() + ": out of memory making the group");
  }
  const std::function<void(int)> replica = [&](int r) {
    try {
      CollectiveScope scope(*group[r]);
      fn(r);
    } catch (...) {
      errors[r] = std::current_exception();
    }
    // Gone: peers waiting on a collective this replica will never call fail now.
    group[r].reset();
  };
  workers_->run(replica, name());

  // The first error by rank that is a cause, not another replica's kUnavailable consequence.
  int chosen = -1;
  for (int r = 0; r < n; ++r) {
    if (!errors[r]) continue;
    if (chosen < 0 || (is_consequence(errors[chosen]) && !is_consequence(errors[r]))) chosen = r;
  }
  if (chosen < 0) return;
  // Kiln's errors gain the replica; out of memory becomes one; the step's own exceptions pass.
  try {
    std::rethrow_exception(errors[chosen]);
  } catch (const Error& e) {
    throw Error(e.code(), replica_prefix(chosen, n) + e.what());
  } catch (const std::bad_alloc&) {
    throw Error(ErrorCode::kResourceExhausted, replica_prefix(chosen, n) + "out of memory");
  }
}

std::vector<std::vector<Tensor>> MirroredStrategy::run(
    const Step& step, const std::vector<std::vector<Tensor>>& per_replica_inputs) {
  const int n = num_replicas_;
  if (static_cast<int>(per_replica_inputs.size()) != n) {
    throw Error(ErrorCode::kInvalidArgument,
                "MirroredStrategy::run: " + std::to_string(per_replica_inputs.size()) +
                    " per-replica inputs for " + replicas(n));
  }
  std::vector<std::vector<Tensor>> outputs(n);
  run_local([&](int r) { outputs[r] = step(per_replica_inputs[r]); });
  return outputs;
}

Tensor MirroredStrategy::reduce(ReduceOp op, const std::vector<Tensor>& per_replica) const {
  if (static_cast<int>(per_replica.size()) != num_replicas_) {
    throw Error(ErrorCode::kInvalidArgument,
                std::string("MirroredStrategy::reduce(") + reduce_op_name(op) + "): " +
                    std::to_string(per_replica.size()) + " values for " + replicas(num_replicas_));
  }
  Tensor acc = per_replica[0];
  for (int r = 1; r < num_replicas_; ++r) {
    const Tensor& v = per_replica[r];
    if (v.dtype() != acc.dtype() || v.shape() != acc.shape()) {
      throw Error(ErrorCode::kInvalidArgument,
                  std::string("MirroredStrategy::reduce(") + reduce_op_name(op) + "): replica " +
                      std::to_string(r) + "'s value is " + TensorType{v.dtype(), v.shape()}.str() +
                      ", replica 0's " + TensorType{acc.dtype(), acc.shape()}.str());
    }
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kMean:
        acc = acc + v;
        break;
      case ReduceOp::kMax:
        acc = maximum(acc, v);
        break;
      case ReduceOp::kMin:
        acc = minimum(acc, v);
        break;
    }
  }
  if (op == ReduceOp::kMean) acc = acc / static_cast<double>(num_replicas_);
  return acc;
}

std::vector<std::vector<Tensor>> MirroredStrategy::split_batch(
    const std::vector<Tensor>& batch) const {
  const int n = num_replicas_;
  std::vector<std::vector<Tensor>> parts(n);
  for (size_t i = 0; i < batch.size(); ++i) {
    const Tensor& t = batch[i];
    if (t.shape().empty() || t.dim(0) % n != 0) {
      throw Error(ErrorCode::kInvalidArgument,
                  "MirroredStrategy::split_batch: tensor " + std::to_string(i) + " of shape " +
                      TensorType{t.dtype(), t.shape()}.str() + " has no dimension 0 divisible by " +
                      replicas(n));
    }
    const int64_t rows = t.dim(0) / n;
    Axes start(t.shape().size(), 0), limit = t.shape();
    for (int r = 0; r < n; ++r) {
      start[0] = r * rows;
      limit[0] = (r + 1) * rows;
      parts[r].push_back(slice(t, start, limit));
    }
  }
  return parts;
}

}  // namespace kiln::distribute
