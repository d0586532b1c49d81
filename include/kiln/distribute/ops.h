// Collectives as graph ops: all_reduce, all_gather, reduce_scatter and broadcast run eagerly,
// record into graphs and traces, and run interpreted or compiled (as kernel thunks), on the
// communicator of the CollectiveScope of the thread that runs them. Each has a gradient rule.
#pragma once

#include "kiln/distribute/collective.h"
#include "kiln/tensor.h"

namespace kiln::distribute {

// Makes `comm` the communicator of the collective ops this thread runs, until destroyed (scopes
// nest; the previous one comes back). A collective op run with none throws kFailedPrecondition
// naming the op. The thread holding the scope is the one that runs a compiled step's kernels, so
// one scope per replica thread serves eager ops, Graph::run and kiln::function alike.
class CollectiveScope {
 public:
  explicit CollectiveScope(Collective& comm);
  ~CollectiveScope();
  CollectiveScope(const CollectiveScope&) = delete;
  CollectiveScope& operator=(const CollectiveScope&) = delete;

 private:
  Collective* previous_;
};

// This thread's communicator, or nullptr.
Collective* current_collective();

// The ops (graph node names "all_reduce", "all_gather", "reduce_scatter", "broadcast"). Their
// values are those of the Collective methods of the same names. Gradients, with L the sum over
// replicas of each replica's loss:
//   all_reduce sum:   dx = all_reduce(dy, sum)     all_reduce mean: dx = all_reduce(dy, mean)
//   all_reduce max/min: no gradient (building one is kUnimplemented)
//   all_gather:       dx = reduce_scatter(dy, sum) (so every replica must gather as many rows)
//   reduce_scatter sum: dx = all_gather(dy); mean: all_gather(dy) / size
//   broadcast:        dx = sum of every replica's dy on the root, zeros elsewhere
//                     (op "reduce_to_root", whose own gradient is broadcast)
Tensor all_reduce(const Tensor& x, ReduceOp op = ReduceOp::kSum);
Tensor broadcast(const Tensor& x, int root = 0);
// These two fix dimension 0 of their result by the number of replicas, so recording them needs
// a CollectiveScope too (or a graph made for one group size).
Tensor all_gather(const Tensor& x);
Tensor reduce_scatter(const Tensor& x, ReduceOp op = ReduceOp::kSum);

}  // namespace kiln::distribute
