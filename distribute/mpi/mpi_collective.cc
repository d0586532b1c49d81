// The MPI backend (OpenMPI): one communicator over MPI_COMM_WORLD. Each collective's calls are
// exchanged non-blocking (MPI_Isend/Irecv polled against the deadline, naming a rank that does
// not arrive); the data then moves with the blocking call (MPI_Allreduce, ...) on a thread of
// the communicator's own while the caller waits for it with the deadline, so a dead or stalled
// peer ends in an error instead of a hang. Started asynchronously (Collective::start_all_reduce),
// the whole collective runs on the Collective's communication thread, which polls as the caller
// does (sleeping between polls, or yielding at once, measured no better on 2 cores:
// benchmarks/mlp_2workers_step_vs_1). MPI stays MPI_THREAD_SERIALIZED, since one
// communicator's MPI calls are made by one thread at a time (its caller's when nothing is in
// flight, else that thread's).
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <climits>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

#include "distribute/collective_util.h"
#include "ops/max_min.h"
#include "src/core/tensor_impl.h"

namespace kiln::distribute {
namespace {

using internal::Call;
using internal::Clock;
using internal::DeadlineWatch;

std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS)
    return "MPI error " + std::to_string(code);
  return std::string(text, length);
}

// max and min on floats with Kiln's rules (NaN wins, -0 below +0); MPI_MAX leaves NaN undefined.
template <bool kMax>
void float_extreme(void* in, void* inout, int* len, MPI_Datatype* type) {
  auto apply = [&](auto* a, auto* b) {
    for (int i = 0; i < *len; ++i) b[i] = kMax ? ops::max_of(a[i], b[i]) : ops::min_of(a[i], b[i]);
  };
  if (*type == MPI_FLOAT) {
    apply(static_cast<float*>(in), static_cast<float*>(inout));
  } else {
    apply(static_cast<double*>(in), static_cast<double*>(inout));
  }
}

// Initializes MPI once per process (unless the program did) and finalizes it at exit, unless a
// collective failed: MPI_Finalize could then wait forever on the requests a dead peer left.
class MpiRuntime {
 public:
  static MpiRuntime& get() {
    static MpiRuntime runtime;
    return runtime;
  }
  ~MpiRuntime() {
    int finalized = 1;
    MPI_Finalized(&finalized);
    if (we_initialized_ && !finalized && !broken_) MPI_Finalize();
  }
  void mark_broken() { broken_ = true; }
  MPI_Op max_op() const { return max_op_; }
  MPI_Op min_op() const { return min_op_; }

 private:
  MpiRuntime() {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
      if (rc != MPI_SUCCESS) {
        throw Error(ErrorCode::kUnavailable,
                    "make_mpi_collective: MPI_Init_thread failed: " + mpi_error_string(rc));
      }
      we_initialized_ = true;
    }
    MPI_Op_create(&float_extreme<true>, /*commute=*/1, &max_op_);
    MPI_Op_create(&float_extreme<false>, /*commute=*/1, &min_op_);
  }
  bool we_initialized_ = false;
  bool broken_ = false;
  MPI_Op max_op_ = MPI_OP_NULL, min_op_ = MPI_OP_NULL;
};

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return MPI_FLOAT;
    case DType::f64:
      return MPI_DOUBLE;
    case DType::i8:
      return MPI_INT8_T;
    case DType::u8:
      return MPI_UINT8_T;
    case DType::i32:
      return MPI_INT32_T;
    case DType::i64:
      return MPI_INT64_T;
    default:
      return MPI_DATATYPE_NULL;  // refused earlier by check_agreement
  }
}

MPI_Op mpi_op(ReduceOp op, DType dtype) {
  const bool floating = dtype == DType::f32 || dtype == DType::f64;
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kMean:
      return MPI_SUM;
    case ReduceOp::kMax:
      return floating ? MpiRuntime::get().max_op() : MPI_MAX;
    case ReduceOp::kMin:
      return floating ? MpiRuntime::get().min_op() : MPI_MIN;
  }
  return MPI_SUM;
}

using internal::decode;
using internal::encode;
using internal::kWireLength;
using internal::Wire;

// Runs blocking MPI calls, one at a time, on a thread of its own, so that the caller can wait
// for one with a deadline. OpenMPI's blocking collectives use its tuned algorithms and progress
// without being polled; the non-blocking ones (libnbc) ran 2-3 times slower on large buffers
// even when polled without pause. MPI is initialized MPI_THREAD_SERIALIZED: the caller makes no
// MPI call while a job runs (the mutex orders the two threads' calls).
class CommThread {
 public:
  CommThread() : state_(std::make_shared<State>()) {
    thread_ = std::thread([state = state_] { loop(*state); });
  }
  ~CommThread() {
    if (!thread_.joinable()) return;
    {
      std::lock_guard lock(state_->mu);
      state_->stop = true;
    }
    state_->cv.notify_all();
    thread_.join();
  }
  CommThread(const CommThread&) = delete;
  CommThread& operator=(const CommThread&) = delete;

  // `job`'s MPI return code, or nothing when it has not returned once `watch` expires: the
  // thread is then left to it (detached; the state it uses is shared, so it outlives this
  // object) and this CommThread takes no more jobs.
  std::optional<int> run(std::function<int()> job, DeadlineWatch& watch) {
    std::unique_lock lock(state_->mu);
    state_->job = std::move(job);
    state_->done = false;
    state_->cv.notify_all();
    while (
        !state_->cv.wait_until(lock, watch.next_look(Clock::now()), [&] { return state_->done; })) {
      if (watch.expired(Clock::now())) {
        lock.unlock();
        thread_.detach();
        return std::nullopt;
      }
    }
    return state_->rc;
  }

 private:
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    std::function<int()> job;
    bool done = false, stop = false;
    int rc = MPI_SUCCESS;
  };
  static void loop(State& state) {
    std::unique_lock lock(state.mu);
    for (;;) {
      state.cv.wait(lock, [&] { return state.stop || state.job; });
      if (state.stop) return;
      std::function<int()> job = std::move(state.job);
      state.job = nullptr;
      lock.unlock();
      const int rc = job();
      job = nullptr;  // its tensors: the caller gets the result unshared
      lock.lock();
      state.rc = rc;
      state.done = true;
      state.cv.notify_all();
    }
  }
  std::shared_ptr<State> state_;
  std::thread thread_;
};

// Up to this many bytes over all ranks, a collective's data moves with the non-blocking call
// polled on the caller's thread rather than the blocking one on the communicator's thread (a
// hand-over costs 10-20 us; measured by benchmarks/allreduce_vs_mpi.cc).
constexpr int64_t kPolledBytes = 64 << 10;
// The tag of the notice a rank sends its peers as its communicator closes (the calls' tags are
// below 30000): one per generation of communicators (the ranks create them in the same order).
// OpenMPI may give a later communicator a freed one's context id and hand it the messages that
// arrived for the old one meanwhile; a notice from an earlier generation then never matches.
int leave_tag(int64_t generation) { return 30001 + static_cast<int>(generation % 2000); }
std::atomic<int64_t> communicators_created{0};

class MpiCollective final : public Collective {
 public:
  explicit MpiCollective(const CollectiveOptions& options);
  ~MpiCollective() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  std::string backend() const override { return "mpi"; }

 protected:
  Tensor run(const Call& call, const Tensor& x, Clock::time_point deadline) override;

 private:
  // Polls `requests` until all complete (true, even past the deadline) or `watch` expires
  // (false); a request that completes is set to MPI_REQUEST_NULL. Throws kUnavailable when MPI
  // reports an error. Calls `between` (when set) between tests.
  bool poll(std::vector<MPI_Request>& requests, DeadlineWatch& watch,
            const std::function<std::string()>& where,
            const std::function<void()>& between = nullptr);
  // The first peer whose communicator closed (its leave notice came), or -1.
  int peer_left();
  [[noreturn]] void fail(Error error);
  std::vector<Call> exchange_calls(const Call& call, DeadlineWatch& watch);
  // A tensor for a result: a spare one that nothing else holds any more, else a new one.
  Tensor output(DType dtype, const Shape& shape);

  MPI_Comm data_ = MPI_COMM_NULL;  // the collectives themselves
  MPI_Comm meta_ = MPI_COMM_NULL;  // the calls exchanged before each collective
  int rank_ = 0, size_ = 1, local_rank_ = 0;
  bool broken_ = false;
  std::string broken_why_;
  MPI_Request leave_request_ = MPI_REQUEST_NULL;  // for a peer's leave notice
  int left_ = -1;
  const int leave_tag_ = leave_tag(communicators_created++);
  // Buffers MPI may still write after a failure are kept here, never freed while MPI runs.
  std::vector<int64_t> wire_in_;
  Wire wire_out_{};
  std::vector<std::function<int(MPI_Request*)>> abandoned_;
  // The last results, kept to be reused once their callers let go of them: writing into a new
  // buffer costs as much as the transfer itself for large ones (the pages are mapped and zeroed
  // as MPI first touches them: a 64 MB all_reduce on 2 ranks took 180 ms into a new buffer, 100
  // ms into a used one). At most kSpares, so up to that many results' memory stays held.
  static constexpr size_t kSpares = 2;
  std::vector<Tensor> spares_;
  // Last: destroyed (joined) first, before the communicators it may use are freed.
  std::unique_ptr<CommThread> comm_thread_ = std::make_unique<CommThread>();
};

MpiCollective::MpiCollective(const CollectiveOptions& options) : Collective(options) {
  MpiRuntime::get();
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  // Duplicating is collective too: do it without blocking, under the deadline.
  DeadlineWatch watch(internal::deadline_after(timeout()), timeout());
  std::vector<MPI_Request> requests(2, MPI_REQUEST_NULL);
  MPI_Comm_idup(MPI_COMM_WORLD, &data_, &requests[0]);
  MPI_Comm_idup(MPI_COMM_WORLD, &meta_, &requests[1]);
  auto where = [&] {
    return "make_mpi_collective (rank " + std::to_string(rank_) + " of " + std::to_string(size_) +
           ")";
  };
  if (!poll(requests, watch, where)) {
    MpiRuntime::get().mark_broken();
    throw Error(ErrorCode::kDeadlineExceeded, where() + ": not every rank joined within " +
                                                  internal::seconds_str(timeout()) + " s");
  }
  MPI_Comm_set_errhandler(data_, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(meta_, MPI_ERRORS_RETURN);
  // Local rank: how many lower ranks share this host's name.
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  MPI_Get_processor_name(name, &length);
  const uint64_t mine = std::hash<std::string>{}(std::string(name, length));
  std::vector<uint64_t> hosts(size_);
  requests.assign(1, MPI_REQUEST_NULL);
  MPI_Iallgather(&mine, 1, MPI_UINT64_T, hosts.data(), 1, MPI_UINT64_T, data_, &requests[0]);
  if (!poll(requests, watch, where)) {
    MpiRuntime::get().mark_broken();
    throw Error(ErrorCode::kDeadlineExceeded,
                where() + ": the ranks did not exchange host names within " +
                    internal::seconds_str(timeout()) + " s");
  }
  for (int r = 0; r < rank_; ++r) local_rank_ += hosts[r] == mine;
  MPI_Irecv(nullptr, 0, MPI_BYTE, MPI_ANY_SOURCE, leave_tag_, meta_, &leave_request_);
}

MpiCollective::~MpiCollective() {
  stop_async();
  // Requests (or a blocked call on the detached thread) may be pending on these
  // communicators: leave them.
  if (broken_) {
    comm_thread_.release();  // NOLINT: its thread may still run a job that uses its state
    return;
  }
  comm_thread_.reset();
  // Tells the peers this rank leaves: one still waiting for its call then fails at once rather
  // than at its deadline, while this process may wait in MPI_Finalize for it (a rank killed
  // outright is mpirun's to notice). Empty messages, freed: they complete by themselves.
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    MPI_Request notice = MPI_REQUEST_NULL;
    MPI_Isend(nullptr, 0, MPI_BYTE, r, leave_tag_, meta_, &notice);
    MPI_Request_free(&notice);
  }
  if (leave_request_ != MPI_REQUEST_NULL) {
    MPI_Cancel(&leave_request_);
    MPI_Wait(&leave_request_, MPI_STATUS_IGNORE);
  }
  MPI_Comm_free(&data_);
  MPI_Comm_free(&meta_);
}

bool MpiCollective::poll(std::vector<MPI_Request>& requests, DeadlineWatch& watch,
                         const std::function<std::string()>& where,
                         const std::function<void()>& between) {
  std::vector<int> indices(requests.size());
  const Clock::time_point started = Clock::now();
  for (int attempt = 0;; ++attempt) {
    int completed = 0;
    const int rc = MPI_Testsome(static_cast<int>(requests.size()), requests.data(), &completed,
                                indices.data(), MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) {
      fail(Error(ErrorCode::kUnavailable, where() +
                                              ": MPI reported an error (a peer is likely "
                                              "gone): " +
                                              mpi_error_string(rc)));
    }
    // Complete, also when the last requests completed in this very call, after a deadline that
    // passed while this process was stopped: the peers were there.
    if (std::all_of(requests.begin(), requests.end(),
                    [](MPI_Request r) { return r == MPI_REQUEST_NULL; })) {
      return true;
    }
    if (between) between();
    if (watch.expired(Clock::now())) return false;
    // OpenMPI's non-blocking collectives advance only inside MPI_Test*, so sleeping between
    // polls stalls a transfer: spin, then yield (ranks are often oversubscribed), and sleep
    // only once the wait is long enough that a peer is probably stalled.
    if (attempt < 200) continue;
    const auto waited = Clock::now() - started;
    if (waited < std::chrono::seconds(1)) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
}

int MpiCollective::peer_left() {
  if (left_ < 0 && leave_request_ != MPI_REQUEST_NULL) {
    int came = 0;
    MPI_Status status;
    MPI_Test(&leave_request_, &came, &status);
    if (came) left_ = status.MPI_SOURCE;
  }
  return left_;
}

void MpiCollective::fail(Error error) {
  broken_ = true;
  broken_why_ = error.what();
  MpiRuntime::get().mark_broken();
  throw error;
}

std::vector<Call> MpiCollective::exchange_calls(const Call& call, DeadlineWatch& watch) {
  // Every rank sends its call to every other: a barrier that also tells who has not arrived.
  wire_out_ = encode(call);
  wire_in_.assign(static_cast<size_t>(size_) * kWireLength, 0);
  std::copy(wire_out_.begin(), wire_out_.end(), wire_in_.begin() + rank_ * kWireLength);
  const int tag = static_cast<int>(call.step % 30000);
  std::vector<MPI_Request> requests(2 * size_, MPI_REQUEST_NULL);
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    MPI_Irecv(wire_in_.data() + r * kWireLength, kWireLength, MPI_INT64_T, r, tag, meta_,
              &requests[r]);
    MPI_Isend(wire_out_.data(), kWireLength, MPI_INT64_T, r, tag, meta_, &requests[size_ + r]);
  }
  auto where = [&] { return internal::where(call, rank_, size_, backend()); };
  // A peer that left before sending its call never will. Its call, had it sent one, came before
  // its notice (messages from one rank match in order), so test for it once more first.
  auto fail_if_left = [&] {
    const int left = peer_left();
    if (left < 0 || requests[left] == MPI_REQUEST_NULL) return;
    int came = 0;
    MPI_Test(&requests[left], &came, MPI_STATUS_IGNORE);
    if (came) return;
    fail(Error(ErrorCode::kUnavailable,
               where() + ": rank " + std::to_string(left) +
                   " left the job without joining it (its communicator or "
                   "MultiWorkerMirroredStrategy was destroyed: its process failed or ended; see "
                   "rank " +
                   std::to_string(left) + "'s output)"));
  };
  if (!poll(requests, watch, where, fail_if_left)) {
    // Not arrived: the ranks whose call has not come; should every call have come, those this
    // rank's own call has not reached yet.
    std::vector<int> missing;
    for (int first : {0, size_}) {  // the receives, then the sends
      if (!missing.empty()) break;
      for (int r = 0; r < size_; ++r) {
        if (requests[first + r] != MPI_REQUEST_NULL) missing.push_back(r);
      }
    }
    fail(internal::missing_error(call, rank_, size_, backend(), missing, timeout(), false,
                                 watch.stalled()));
  }
  std::vector<Call> calls;
  for (int r = 0; r < size_; ++r) calls.push_back(decode(wire_in_.data() + r * kWireLength));
  return calls;
}

Tensor MpiCollective::output(DType dtype, const Shape& shape) {
  for (size_t i = 0; i < spares_.size(); ++i) {
    const Tensor& t = spares_[i];
    const auto& impl = t.impl();
    const auto& storage = impl->storage;
    // Only this list holds it: no caller's handle, no view of its storage.
    if (t.dtype() != dtype || t.shape() != shape || impl.use_count() != 1 || !storage ||
        storage.use_count() != 1 || storage->owner) {
      continue;
    }
    Tensor reused = std::move(spares_[i]);
    spares_.erase(spares_.begin() + static_cast<std::ptrdiff_t>(i));
    return reused;
  }
  return Tensor::empty(dtype, shape);
}

Tensor MpiCollective::run(const Call& call, const Tensor& x, Clock::time_point deadline) {
  auto where = [&] { return internal::where(call, rank_, size_, backend()); };
  if (broken_) {
    throw Error(ErrorCode::kUnavailable,
                where() + ": the communicator broke at an earlier collective: " + broken_why_);
  }
  DeadlineWatch watch(deadline, timeout());  // one for the exchange and the transfer
  const std::vector<Call> calls = exchange_calls(call, watch);
  internal::check_agreement(calls, rank_, backend());
  if (call.kind == CollectiveKind::kBarrier) return Tensor();  // the exchange was the barrier

  const int64_t n = num_elements(call.shape);
  int64_t total = 0;
  for (const Call& c : calls) total += num_elements(c.shape);
  if (total > INT_MAX) {
    throw Error(ErrorCode::kInvalidArgument,
                where() + ": " + std::to_string(total) +
                    " elements exceed what one MPI call can move (2^31 - 1); split the tensor");
  }
  const MPI_Datatype type = mpi_type(call.dtype);
  const MPI_Op op =
      call.kind == CollectiveKind::kAllReduce || call.kind == CollectiveKind::kReduceScatter
          ? mpi_op(call.op, call.dtype)
          : MPI_OP_NULL;
  // The data moves with `move(nullptr)`, the blocking call, on the communicator's thread, or
  // for small buffers with `move(&request)`, the non-blocking one, polled here: a hand-over to
  // the thread costs more than such a transfer. The job captures copies (the tensors by
  // handle, so their buffers stay alive): after a timeout it may still start or run once this
  // frame is gone, and its buffers are never freed meanwhile. The pointers are captured before
  // the tensors (raw_mutable_data of a shared tensor would copy it).
  using Keep = std::pair<Tensor, Tensor>;
  Tensor result;
  std::function<int(MPI_Request*)> move;
  const MPI_Comm comm = data_;
  const int count = static_cast<int>(n);
  switch (call.kind) {
    case CollectiveKind::kAllReduce:
      result = output(call.dtype, call.shape);
      move = [in = x.raw_data(), out = result.raw_mutable_data(), keep = Keep{x, result}, count,
              type, op, comm](MPI_Request* request) {
        return request ? MPI_Iallreduce(in, out, count, type, op, comm, request)
                       : MPI_Allreduce(in, out, count, type, op, comm);
      };
      break;
    case CollectiveKind::kReduceScatter: {
      Shape shape = call.shape;
      shape[0] /= size_;
      result = output(call.dtype, shape);
      move = [in = x.raw_data(), out = result.raw_mutable_data(), keep = Keep{x, result},
              count = count / size_, type, op, comm](MPI_Request* request) {
        return request ? MPI_Ireduce_scatter_block(in, out, count, type, op, comm, request)
                       : MPI_Reduce_scatter_block(in, out, count, type, op, comm);
      };
      break;
    }
    case CollectiveKind::kAllGather: {
      Shape shape = call.shape;
      shape[0] = 0;
      std::vector<int> counts(size_, 0), displacements(size_, 0);
      for (int r = 0; r < size_; ++r) {
        shape[0] += calls[r].shape[0];
        counts[r] = static_cast<int>(num_elements(calls[r].shape));
        if (r > 0) displacements[r] = displacements[r - 1] + counts[r - 1];
      }
      result = output(call.dtype, shape);
      move = [in = x.raw_data(), out = result.raw_mutable_data(), keep = Keep{x, result}, count,
              type, comm, counts, displacements](MPI_Request* request) {
        return request ? MPI_Iallgatherv(in, count, type, out, counts.data(), displacements.data(),
                                         type, comm, request)
                       : MPI_Allgatherv(in, count, type, out, counts.data(), displacements.data(),
                                        type, comm);
      };
      break;
    }
    case CollectiveKind::kBroadcast: {
      // The root sends from its own tensor (MPI only reads it there); the others receive.
      const bool root = rank_ == call.root;
      result = root ? x : output(call.dtype, call.shape);
      void* data = root ? const_cast<void*>(x.raw_data()) : result.raw_mutable_data();
      move = [keep = Keep{x, result}, data, count, type, at = call.root,
              comm](MPI_Request* request) {
        return request ? MPI_Ibcast(data, count, type, at, comm, request)
                       : MPI_Bcast(data, count, type, at, comm);
      };
      break;
    }
    case CollectiveKind::kBarrier:
      break;
  }
  const auto timed_out = [&] {
    const std::string why =
        watch.stalled().count() > 0
            ? "; this rank was itself not running for " + internal::seconds_str(watch.stalled()) +
                  " s (stopped, e.g. by SIGSTOP, or starved of CPU) while it waited, so it "
                  "cannot tell whether a peer is late"
            : " (a peer died or stalled during it)";
    return Error(ErrorCode::kDeadlineExceeded,
                 where() + ": every rank arrived, but the transfer did not complete within " +
                     internal::seconds_str(timeout()) + " s" + why +
                     "; the deadline is CollectiveOptions::timeout, or KILN_COLLECTIVE_TIMEOUT "
                     "seconds");
  };
  int64_t bytes = 0;
  for (const Call& c : calls) bytes += num_elements(c.shape) * dtype_size(c.dtype);
  if (bytes <= kPolledBytes) {
    std::vector<MPI_Request> requests(1, MPI_REQUEST_NULL);
    const int rc = move(&requests[0]);
    if (rc != MPI_SUCCESS) {
      fail(Error(ErrorCode::kUnavailable,
                 where() + ": MPI refused to start it: " + mpi_error_string(rc)));
    }
    if (!poll(requests, watch, where)) {
      abandoned_.push_back(std::move(move));  // holds the buffers MPI may still write
      fail(timed_out());
    }
    move = nullptr;  // the result unshared again
  } else {
    const std::optional<int> rc =
        comm_thread_->run([move = std::move(move)] { return move(nullptr); }, watch);
    if (!rc) fail(timed_out());
    if (*rc != MPI_SUCCESS) {
      fail(Error(
          ErrorCode::kUnavailable,
          where() + ": MPI reported an error (a peer is likely gone): " + mpi_error_string(*rc)));
    }
  }
  if (call.op == ReduceOp::kMean &&
      (call.kind == CollectiveKind::kAllReduce || call.kind == CollectiveKind::kReduceScatter)) {
    internal::finish_mean(call.dtype, result.raw_mutable_data(), 0, result.size(), size_);
  }
  if (result.impl() != x.impl()) {  // not the root's own input of a broadcast
    spares_.push_back(result);
    if (spares_.size() > kSpares) spares_.erase(spares_.begin());
  }
  return result;
}

}  // namespace

bool mpi_available() { return true; }

std::unique_ptr<Collective> make_mpi_collective(const CollectiveOptions& options) {
  return std::make_unique<MpiCollective>(options);
}

}  // namespace kiln::distribute
