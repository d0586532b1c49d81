// kiln::distribute::Collective: a communicator over the replicas of a job (threads of one
// process, or processes under mpirun) and the collectives on concrete tensors, each with a
// deadline.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/tensor.h"

namespace kiln::distribute {

enum class ReduceOp { kSum, kMean, kMax, kMin };
const char* reduce_op_name(ReduceOp op);  // "sum", "mean", "max", "min"

// The collectives, in the order a step counter counts them; names appear in errors.
enum class CollectiveKind { kAllReduce, kAllGather, kReduceScatter, kBroadcast, kBarrier };
const char* collective_name(CollectiveKind kind);  // "all_reduce", ...

using Seconds = std::chrono::duration<double>;

// Settings of one communicator. The deadline of every collective is `timeout` if set, else the
// environment variable KILN_COLLECTIVE_TIMEOUT (seconds), else 5 minutes.
struct CollectiveOptions {
  std::optional<Seconds> timeout;
};

// A communicator: `size()` replicas numbered 0..size-1, each calling the same collectives in
// the same order with tensors of the same dtype (and shapes as each collective states). Every
// replica must call every collective; a replica that has not arrived when the deadline passes
// makes the others throw kDeadlineExceeded naming it, the collective and its step (the n-th
// collective of this communicator, from 1); a replica known to be gone makes them throw
// kUnavailable. After such a failure the communicator is broken: every later collective throws
// kUnavailable at once. Calls disagreeing across replicas (dtype, shape, root, which collective)
// throw kInvalidArgument on every replica, naming each replica's arguments.
//
// Supported dtypes: f32, f64, i8, u8, i32, i64. Integer sums wrap; an integer mean truncates.
// max and min propagate NaN and order -0 below +0, as kiln::maximum and kiln::minimum do.
// A communicator is used by one thread at a time (its own communication thread aside).
//
// Asynchronous all_reduce (what a compiled step's all_reduce_start / all_reduce_done thunks
// call): start_all_reduce returns at once and the collective runs on the communicator's
// communication thread (started on first use), in the order started, while the caller goes on;
// wait(step) returns its result. Its deadline counts from the start, and wait throws the error
// the collective ended with: the same kiln::Error a blocking call would (naming the collective,
// its step and the ranks that did not arrive). A blocking collective called while some are in
// flight runs after them, on that thread. A started collective keeps its input (and, once done,
// its result) until waited for.
class Collective {
 public:
  virtual ~Collective();
  Collective(const Collective&) = delete;
  Collective& operator=(const Collective&) = delete;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int local_rank() const = 0;       // rank among the replicas on this machine
  virtual std::string backend() const = 0;  // "in_process", "mpi", ...

  // Elementwise reduction over the replicas; every replica gets the result. Shapes must agree.
  Tensor all_reduce(const Tensor& x, ReduceOp op = ReduceOp::kSum);
  // Concatenation along axis 0 in rank order; dimension 0 may differ, the others must agree.
  Tensor all_gather(const Tensor& x);
  // all_reduce, then replica r keeps rows [r*n/size, (r+1)*n/size) of axis 0 (n, the size of
  // axis 0, must be a multiple of size()). Shapes must agree.
  Tensor reduce_scatter(const Tensor& x, ReduceOp op = ReduceOp::kSum);
  // Every replica gets root's `x`; the others pass a tensor of the same dtype and shape.
  Tensor broadcast(const Tensor& x, int root = 0);
  // Returns once every replica has arrived.
  void barrier();

  // Starts all_reduce(x, op) and returns its step (the handle wait takes).
  int64_t start_all_reduce(const Tensor& x, ReduceOp op = ReduceOp::kSum);
  // The result of the collective started at `step`, once done; throws its error (or, when an
  // earlier collective not yet waited for failed too, that one's: the cause). Each started
  // step is waited for once (kInvalidArgument for a step not started or already waited for).
  Tensor wait(int64_t step);
  // Seconds the caller has spent blocked in this communicator: in blocking collectives and in
  // wait (what communication costs the step, overlapped time excluded).
  double blocked_seconds() const { return blocked_seconds_; }

  Seconds timeout() const { return timeout_; }
  void set_timeout(Seconds timeout);
  int64_t steps() const { return steps_; }  // collectives started so far

  // What one replica asked for at one step; backends exchange these and check they agree.
  struct Call {
    CollectiveKind kind = CollectiveKind::kBarrier;
    ReduceOp op = ReduceOp::kSum;
    DType dtype = DType::f32;
    int root = 0;
    int64_t step = 0;
    Shape shape = {};
  };

 protected:
  explicit Collective(const CollectiveOptions& options);
  // Runs `call` with this replica's input `x` (undefined for a barrier) and returns its output,
  // by `deadline`. The base class has counted the step and checked the local arguments.
  virtual Tensor run(const Call& call, const Tensor& x,
                     std::chrono::steady_clock::time_point deadline) = 0;
  // Runs the collectives still queued and stops the communication thread. A backend calls it
  // first in its destructor, since that thread calls run().
  void stop_async();

 private:
  struct Async;  // the communication thread and its queue (collective.cc)
  Call prepare(Call call, const Tensor& x);
  Tensor start(Call call, const Tensor& x);
  int64_t enqueue(const Call& call, const Tensor& x);

  Seconds timeout_;
  int64_t steps_ = 0;
  double blocked_seconds_ = 0;
  std::unique_ptr<Async> async_;
};

// `size` replicas of one process, one communicator each, meant to be driven by one thread each.
// Results are computed in rank order, so they are bit-identical on every replica and every run.
std::vector<std::unique_ptr<Collective>> make_in_process_group(
    int size, const CollectiveOptions& options = {});

// The processes of MPI_COMM_WORLD (started by mpirun), initializing MPI if nobody has.
// kUnimplemented when Kiln was built without MPI (mpi_available() says which).
std::unique_ptr<Collective> make_mpi_collective(const CollectiveOptions& options = {});
bool mpi_available();

// NCCL (one GPU per rank; the processes of MPI_COMM_WORLD, as make_mpi_collective, which
// bootstraps the group by broadcasting NCCL's unique id and then exchanges each call's
// arguments). Tensors stay in host memory: each collective stages through device buffers.
// nccl_available(): built with the backend (CUDA toolkit, NCCL and MPI found) and a GPU present.
// make_nccl_collective throws kUnavailable saying "no GPU" without one, and kUnimplemented in a
// build without the backend.
std::unique_ptr<Collective> make_nccl_collective(const CollectiveOptions& options = {});
// NCCL over `size` GPUs of this process (replica r on GPU r), bootstrapped and exchanging calls
// over an in-process group: one communicator per replica, each driven by one thread, as
// make_in_process_group's. kUnavailable with fewer GPUs than `size`; kUnimplemented without the
// backend.
std::vector<std::unique_ptr<Collective>> make_nccl_group(int size,
                                                         const CollectiveOptions& options = {});
bool nccl_available();

}  // namespace kiln::distribute
