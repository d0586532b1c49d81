// kiln::distribute::MultiWorkerMirroredStrategy: one replica per worker process of an mpirun
// job (tf.distribute's MultiWorkerMirroredStrategy), for Model::compile and custom loops.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/distribute/collective.h"
#include "kiln/distribute/strategy.h"

namespace kiln::distribute {

// With Model::compile({.strategy = ...}) every worker runs the same program on the same data:
// fit starts by checking that the workers agree (model, dtype policies, world size, input dtypes,
// optimizer, and what they feed a step: the global batch, a Dataset's batch rows included, the
// steps per epoch and how the data is divided), then broadcasts the chief's (rank 0's) variables;
// each worker then takes its consecutive part of every global batch, and all_reduces inside the
// compiled step (one per gradient bucket, Strategy::bucket_bytes) combine the gradients (see
// CompileOptions). Only the chief prints progress and runs the callbacks that write files
// (ModelCheckpoint, TensorBoard, BackupAndRestore's backups); the others run the rest
// (EarlyStopping sees the same global logs everywhere, so every worker stops together). evaluate
// and predict run whole on every worker.
class MultiWorkerMirroredStrategy : public Strategy {
 public:
  // The processes of MPI_COMM_WORLD (make_mpi_collective; a program started without mpirun is
  // a world of one).
  explicit MultiWorkerMirroredStrategy(CollectiveOptions options = {});
  // Over any communicator, one worker per replica of it (tests use in-process groups).
  explicit MultiWorkerMirroredStrategy(std::unique_ptr<Collective> communicator);
  ~MultiWorkerMirroredStrategy() override;

  int num_replicas_in_sync() const override { return comm_->size(); }
  int num_local_replicas() const override { return 1; }
  int first_local_replica() const override { return comm_->rank(); }
  bool is_chief() const override { return comm_->rank() == 0; }
  std::string name() const override;
  // fn(0) on the caller's thread under a CollectiveScope of the communicator; an error is
  // rethrown prefixed "worker r of n: ".
  void run_local(const std::function<void(int local_replica)>& fn) override;
  void check_consistent(const std::vector<std::pair<std::string, std::string>>& facts) override;
  void broadcast_from_chief(std::vector<Tensor>& values) override;

  Collective& communicator() { return *comm_; }

 private:
  std::unique_ptr<Collective> comm_;
};

}  // namespace kiln::distribute
