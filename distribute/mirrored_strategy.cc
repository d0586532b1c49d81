// MirroredStrategy: one thread per replica per run, each under a CollectiveScope of a fresh
// in-process group; errors gathered and rethrown once every replica has stopped.
#include "kiln/distribute/mirrored_strategy.h"

#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kiln/distribute/ops.h"
#include "kiln/error.h"
#include "kiln/graph.h"
#include "kiln/ops.h"

namespace kiln::distribute {
namespace {

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

}  // namespace

Strategy::~Strategy() = default;

MirroredStrategy::MirroredStrategy(int num_replicas, CollectiveOptions options)
    : num_replicas_(num_replicas), options_(options) {
  if (num_replicas < 1) {
    throw Error(
        ErrorCode::kInvalidArgument,
        "MirroredStrategy: num_replicas must be at least 1, got " + std::to_string(num_replicas));
  }
}

std::string MirroredStrategy::name() const {
  return "MirroredStrategy(" + std::to_string(num_replicas_) + " replicas)";
}

void MirroredStrategy::run_local(const std::function<void(int local_replica)>& fn) {
  const int n = num_replicas_;
  std::vector<std::unique_ptr<Collective>> group = make_in_process_group(n, options_);
  std::vector<std::exception_ptr> errors(n);
  auto replica = [&](int r) {
    try {
      CollectiveScope scope(*group[r]);
      fn(r);
    } catch (...) {
      errors[r] = std::current_exception();
    }
    // Gone: peers waiting on a collective this replica will never call fail now.
    group[r].reset();
  };
  std::vector<std::thread> threads;
  threads.reserve(n - 1);
  for (int r = 1; r < n; ++r) threads.emplace_back(replica, r);
  replica(0);  // the caller's thread is replica 0
  for (std::thread& t : threads) t.join();

  // The first error by rank that is a cause, not another replica's kUnavailable consequence.
  int chosen = -1;
  for (int r = 0; r < n; ++r) {
    if (!errors[r]) continue;
    if (chosen < 0 || (is_consequence(errors[chosen]) && !is_consequence(errors[r]))) chosen = r;
  }
  if (chosen < 0) return;
  try {
    std::rethrow_exception(errors[chosen]);
  } catch (const Error& e) {
    throw Error(e.code(), replica_prefix(chosen, n) + e.what());
  }
}

std::vector<std::vector<Tensor>> MirroredStrategy::run(
    const Step& step, const std::vector<std::vector<Tensor>>& per_replica_inputs) {
  const int n = num_replicas_;
  if (static_cast<int>(per_replica_inputs.size()) != n) {
    throw Error(ErrorCode::kInvalidArgument,
                "MirroredStrategy::run: " + std::to_string(per_replica_inputs.size()) +
                    " per-replica inputs for " + std::to_string(n) + " replicas");
  }
  std::vector<std::vector<Tensor>> outputs(n);
  run_local([&](int r) { outputs[r] = step(per_replica_inputs[r]); });
  return outputs;
}

Tensor MirroredStrategy::reduce(ReduceOp op, const std::vector<Tensor>& per_replica) const {
  if (static_cast<int>(per_replica.size()) != num_replicas_) {
    throw Error(ErrorCode::kInvalidArgument,
                std::string("MirroredStrategy::reduce(") + reduce_op_name(op) +
                    "): " + std::to_string(per_replica.size()) + " values for " +
                    std::to_string(num_replicas_) + " replicas");
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
                      std::to_string(n) + " replicas");
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
