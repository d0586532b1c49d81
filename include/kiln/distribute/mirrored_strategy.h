// kiln::distribute::MirroredStrategy: N replicas of one step on this machine's CPU, one thread
// each, joined by an in-process communicator: for Model::compile (fit splits each global batch
// across them) and for custom training loops (tf.distribute's strategy.run and strategy.reduce).
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "kiln/distribute/collective.h"
#include "kiln/distribute/strategy.h"
#include "kiln/tensor.h"

namespace kiln::distribute {

class MirroredStrategy : public Strategy {
 public:
  // A replica's step: its inputs in, its outputs out.
  using Step = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

  // `num_replicas` CPU replicas, 1 to max_replicas() (kInvalidArgument naming both otherwise);
  // `options` sets the collectives' deadline. Replicas 1..n-1 run on threads started here and
  // kept until the strategy is destroyed; replica 0 runs on the thread that calls run.
  explicit MirroredStrategy(int num_replicas, CollectiveOptions options = {});
  ~MirroredStrategy() override;
  MirroredStrategy(const MirroredStrategy&) = delete;
  MirroredStrategy& operator=(const MirroredStrategy&) = delete;

  // The most replicas one strategy takes: max(64, 4 x this machine's hardware threads).
  static int max_replicas();

  int num_replicas_in_sync() const override { return num_replicas_; }
  int num_local_replicas() const override { return num_replicas_; }
  int first_local_replica() const override { return 0; }
  std::string name() const override;
  // Each run_local has a fresh in-process group, so a failed one leaves the strategy usable.
  // Runs from several threads take turns; one from inside a replica of this strategy is
  // kFailedPrecondition (its threads are busy with the outer run).
  void run_local(const std::function<void(int local_replica)>& fn) override;
  bool overlaps_communication() const override { return false; }

  // Runs step(per_replica_inputs[r]) for every replica r at once, each on its thread under a
  // CollectiveScope of a communicator of the group, so the collective ops (kiln/distribute/ops.h)
  // in `step`, eager or inside a kiln::function, reach the other replicas.
  // Returns every replica's outputs, indexed [replica][output].
  //
  // If a replica throws, run throws its error once every replica has stopped, prefixed with the
  // replica ("replica 1 of 2: ..."); a replica that fails or returns makes the others' later
  // collectives fail at once (kUnavailable) instead of at their deadline. When several fail,
  // the first error by rank that is not such a consequence is thrown. Each run has a fresh group,
  // so a failed run leaves the strategy usable.
  std::vector<std::vector<Tensor>> run(const Step& step,
                                       const std::vector<std::vector<Tensor>>& per_replica_inputs);

  // Combines one concrete value per replica (e.g. one output of run, per replica) into one:
  // folded in rank order with add (kSum; kMean then divides by the number of replicas, as
  // kiln's operator/ does for the dtype), maximum (kMax) or minimum (kMin). Values must agree
  // in dtype and shape.
  Tensor reduce(ReduceOp op, const std::vector<Tensor>& per_replica) const;

  // Splits each tensor of a global batch along axis 0 into num_replicas equal consecutive
  // parts: result[r] holds replica r's part of every tensor. Dimension 0 must be a multiple of
  // num_replicas (kInvalidArgument naming both otherwise).
  std::vector<std::vector<Tensor>> split_batch(const std::vector<Tensor>& batch) const;

 private:
  class Workers;
  int num_replicas_;
  CollectiveOptions options_;
  std::unique_ptr<Workers> workers_;  // the threads of replicas 1..n-1
};

}  // namespace kiln::distribute
