// kiln::distribute::Strategy: what Model::compile takes to train data-parallel (the replicas of
// one step, where they run and how they reach each other). MirroredStrategy (threads of this
// process) and MultiWorkerMirroredStrategy (processes under mpirun) are the two kinds.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/tensor.h"

namespace kiln::distribute {

// Replicas are numbered 0..num_replicas_in_sync()-1 over the whole job; this process runs
// num_local_replicas() of them, starting at first_local_replica().
class Strategy {
 public:
  virtual ~Strategy();

  virtual int num_replicas_in_sync() const = 0;
  virtual int num_local_replicas() const = 0;
  virtual int first_local_replica() const = 0;
  // The process that writes checkpoints, logs and saved models (rank 0 of the job).
  virtual bool is_chief() const { return true; }
  // "MirroredStrategy(4 replicas)": how errors name it.
  virtual std::string name() const = 0;

  // Runs fn(r) for every local replica r = 0..num_local_replicas()-1 at once, each on a thread
  // of its own (r = 0 on the caller's) under a CollectiveScope of its communicator, so the
  // collective ops fn runs reach the other replicas. When fn throws on a replica, the others'
  // later collectives fail at once (kUnavailable) and run_local throws the first causing error
  // by replica, prefixed "replica r of n: ", once every local replica has stopped.
  virtual void run_local(const std::function<void(int local_replica)>& fn) = 0;

  // Across processes (the defaults do nothing: replicas of one process share its settings and
  // its variables). Throws kFailedPrecondition on every worker unless all of them were given
  // the same `facts` (name, value), naming each fact that differs with every worker's value.
  virtual void check_consistent(const std::vector<std::pair<std::string, std::string>>& facts) {}
  // Replaces `values` (the same dtypes and shapes everywhere) by the chief's.
  virtual void broadcast_from_chief(std::vector<Tensor>& values) {}

  // Gradient buckets (Horovod's tensor fusion, PyTorch DDP's buckets): the train step sums its
  // gradients over the replicas with one all_reduce per bucket of at most this many bytes
  // (all_reduce_in_buckets in kiln/distribute/ops.h), each depending only on its own gradients,
  // last layers first. 0 puts everything in one all_reduce. Read when the train step is traced
  // (at the first fit after compile), so set it before compile; every worker must set the same.
  static constexpr int64_t kDefaultBucketBytes = int64_t{4} << 20;
  int64_t bucket_bytes() const { return bucket_bytes_; }
  // kInvalidArgument for a negative size.
  void set_bucket_bytes(int64_t bytes);

  // Whether the train step overlaps its buckets' all_reduces with the rest of the backward
  // pass (all_reduce_start/done on the communicator's own thread) rather than blocking on each.
  // True across processes; MirroredStrategy says false: its replicas are threads of one process
  // that already fill the cores, and handing each bucket to another thread measured slower.
  virtual bool overlaps_communication() const { return true; }

 protected:
  Strategy() = default;

 private:
  int64_t bucket_bytes_ = kDefaultBucketBytes;
};

}  // namespace kiln::distribute
