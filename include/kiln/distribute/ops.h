// Collectives as graph ops: all_reduce, all_gather, reduce_scatter and broadcast run eagerly,
// record into graphs and traces, and run interpreted or compiled (as kernel thunks), on the
// communicator of the CollectiveScope of the thread that runs them. Each has a gradient rule.
#pragma once

#include <cstdint>
#include <vector>

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

// Sums `values` over the replicas in buckets of at most `bucket_bytes` (0: one bucket): each
// value is flattened to the widest float dtype among them (f64 if any is, else f32); the flat
// values, last first (backward computes the last layers' gradients first), are cut into
// consecutive buckets of bucket_bytes / itemsize elements (at least one), a value spanning a
// boundary split across two; each bucket is one all_reduce (sum) of the concatenation of its
// pieces, which depends only on those values. Each is recorded as two ops: all_reduce_start
// (the collective starts on the communicator's own thread, Collective::start_all_reduce; its
// output is a token) and all_reduce_done (waits for it, Collective::wait). A compiled step runs
// each start as soon as its values exist and each done only where its result is first needed,
// so the communication overlaps the rest of the backward pass; interpreted or eager, they run
// in the graph's order. Each bucket's start also takes the previous one's token as an ordering
// input, so every replica starts them in the same order whatever its compiled schedule.
// Returns the sums in the values' shapes and dtypes (not differentiable: use all_reduce for
// that): ceil(total bytes / bucket bytes) all_reduces, each element summed as one all_reduce
// of everything would sum it. kInvalidArgument for a negative bucket_bytes. With the
// environment variable KILN_OVERLAP_COLLECTIVES=0 (read when called), or with `overlap` false,
// each bucket is one blocking all_reduce instead, taking the previous one's result as its
// ordering input: what benchmarks compare against, and what MirroredStrategy's steps record.
std::vector<Tensor> all_reduce_in_buckets(const std::vector<Tensor>& values, int64_t bucket_bytes,
                                          bool overlap = true);

}  // namespace kiln::distribute
