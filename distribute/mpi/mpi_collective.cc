// The MPI backend (OpenMPI): one communicator over MPI_COMM_WORLD. Every collective is
// non-blocking (MPI_Isend/Irecv, MPI_Iallreduce, ...) and polled with MPI_Testsome against its
// deadline, so a dead or stalled peer ends in an error instead of a hang.
#include <mpi.h>
#include <unistd.h>

#include <array>
#include <climits>
#include <cstring>
#include <functional>
#include <thread>

#include "distribute/collective_util.h"
#include "ops/max_min.h"

namespace kiln::distribute {
namespace {

using internal::Call;
using internal::Clock;

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

// A call as 16 integers on the wire: kind, op, dtype, root, step, rank count, then up to ten
// dimensions (a higher rank folds its last dimensions into the tenth).
constexpr int kWireDims = 10;
constexpr int kWireLength = 6 + kWireDims;
using Wire = std::array<int64_t, kWireLength>;

Wire encode(const Call& call) {
  Wire w{};
  w[0] = static_cast<int64_t>(call.kind);
  w[1] = static_cast<int64_t>(call.op);
  w[2] = static_cast<int64_t>(call.dtype);
  w[3] = call.root;
  w[4] = call.step;
  w[5] = std::min<int64_t>(call.shape.size(), kWireDims);
  for (size_t d = 0; d < call.shape.size(); ++d) {
    const size_t slot = std::min<size_t>(d, kWireDims - 1);
    w[6 + slot] = d <= slot ? call.shape[d] : w[6 + slot] * call.shape[d];
  }
  return w;
}

Call decode(const int64_t* w) {
  Call call;
  call.kind = static_cast<CollectiveKind>(w[0]);
  call.op = static_cast<ReduceOp>(w[1]);
  call.dtype = static_cast<DType>(w[2]);
  call.root = static_cast<int>(w[3]);
  call.step = w[4];
  call.shape.assign(w + 6, w + 6 + w[5]);
  return call;
}

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
  // Polls `requests` until all complete (true) or the deadline passes (false); a request that
  // completes is set to MPI_REQUEST_NULL. Throws kUnavailable when MPI reports an error.
  bool poll(std::vector<MPI_Request>& requests, Clock::time_point deadline,
            const std::function<std::string()>& where);
  [[noreturn]] void fail(Error error);
  std::vector<Call> exchange_calls(const Call& call, Clock::time_point deadline);

  MPI_Comm data_ = MPI_COMM_NULL;  // the collectives themselves
  MPI_Comm meta_ = MPI_COMM_NULL;  // the calls exchanged before each collective
  int rank_ = 0, size_ = 1, local_rank_ = 0;
  bool broken_ = false;
  std::string broken_why_;
  // Buffers MPI may still write after a failure are kept here, never freed while MPI runs.
  std::vector<int64_t> wire_in_;
  Wire wire_out_{};
  std::vector<int> counts_, displacements_;
  std::vector<Tensor> abandoned_;
};

MpiCollective::MpiCollective(const CollectiveOptions& options) : Collective(options) {
  MpiRuntime::get();
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  // Duplicating is collective too: do it without blocking, under the deadline.
  const Clock::time_point deadline = internal::deadline_after(timeout());
  std::vector<MPI_Request> requests(2, MPI_REQUEST_NULL);
  MPI_Comm_idup(MPI_COMM_WORLD, &data_, &requests[0]);
  MPI_Comm_idup(MPI_COMM_WORLD, &meta_, &requests[1]);
  auto where = [&] {
    return "make_mpi_collective (rank " + std::to_string(rank_) + " of " + std::to_string(size_) +
           ")";
  };
  if (!poll(requests, deadline, where)) {
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
  if (!poll(requests, deadline, where)) {
    MpiRuntime::get().mark_broken();
    throw Error(ErrorCode::kDeadlineExceeded,
                where() + ": the ranks did not exchange host names within " +
                    internal::seconds_str(timeout()) + " s");
  }
  for (int r = 0; r < rank_; ++r) local_rank_ += hosts[r] == mine;
}

MpiCollective::~MpiCollective() {
  if (broken_) return;  // requests may be pending on these communicators: leave them
  MPI_Comm_free(&data_);
  MPI_Comm_free(&meta_);
}

bool MpiCollective::poll(std::vector<MPI_Request>& requests, Clock::time_point deadline,
                         const std::function<std::string()>& where) {
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
    if (completed == MPI_UNDEFINED) return true;  // no active request is left
    if (Clock::now() >= deadline) return false;
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

void MpiCollective::fail(Error error) {
  broken_ = true;
  broken_why_ = error.what();
  MpiRuntime::get().mark_broken();
  throw error;
}

std::vector<Call> MpiCollective::exchange_calls(const Call& call, Clock::time_point deadline) {
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
  if (!poll(requests, deadline, where)) {
    std::vector<int> missing;
    for (int r = 0; r < size_; ++r) {
      if (requests[r] != MPI_REQUEST_NULL || requests[size_ + r] != MPI_REQUEST_NULL) {
        missing.push_back(r);
      }
    }
    fail(internal::missing_error(call, rank_, size_, backend(), missing, timeout(), false));
  }
  std::vector<Call> calls;
  for (int r = 0; r < size_; ++r) calls.push_back(decode(wire_in_.data() + r * kWireLength));
  return calls;
}

Tensor MpiCollective::run(const Call& call, const Tensor& x, Clock::time_point deadline) {
  auto where = [&] { return internal::where(call, rank_, size_, backend()); };
  if (broken_) {
    throw Error(ErrorCode::kUnavailable,
                where() + ": the communicator broke at an earlier collective: " + broken_why_);
  }
  const std::vector<Call> calls = exchange_calls(call, deadline);
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
  Tensor result;
  MPI_Request request = MPI_REQUEST_NULL;
  int rc = MPI_SUCCESS;
  switch (call.kind) {
    case CollectiveKind::kAllReduce:
      result = Tensor::empty(call.dtype, call.shape);
      rc = MPI_Iallreduce(x.raw_data(), result.raw_mutable_data(), static_cast<int>(n), type,
                          mpi_op(call.op, call.dtype), data_, &request);
      break;
    case CollectiveKind::kReduceScatter: {
      Shape shape = call.shape;
      shape[0] /= size_;
      result = Tensor::empty(call.dtype, shape);
      rc = MPI_Ireduce_scatter_block(x.raw_data(), result.raw_mutable_data(),
                                     static_cast<int>(n / size_), type, mpi_op(call.op, call.dtype),
                                     data_, &request);
      break;
    }
    case CollectiveKind::kAllGather: {
      Shape shape = call.shape;
      shape[0] = 0;
      counts_.assign(size_, 0);
      displacements_.assign(size_, 0);
      for (int r = 0; r < size_; ++r) {
        shape[0] += calls[r].shape[0];
        counts_[r] = static_cast<int>(num_elements(calls[r].shape));
        if (r > 0) displacements_[r] = displacements_[r - 1] + counts_[r - 1];
      }
      result = Tensor::empty(call.dtype, shape);
      rc = MPI_Iallgatherv(x.raw_data(), static_cast<int>(n), type, result.raw_mutable_data(),
                           counts_.data(), displacements_.data(), type, data_, &request);
      break;
    }
    case CollectiveKind::kBroadcast:
      // The root sends from its own tensor (MPI only reads it there); the others receive.
      result = rank_ == call.root ? x : Tensor::empty(call.dtype, call.shape);
      rc = MPI_Ibcast(
          rank_ == call.root ? const_cast<void*>(x.raw_data()) : result.raw_mutable_data(),
          static_cast<int>(n), type, call.root, data_, &request);
      break;
    case CollectiveKind::kBarrier:
      break;
  }
  if (rc != MPI_SUCCESS) {
    fail(Error(ErrorCode::kUnavailable,
               where() + ": MPI refused to start it: " + mpi_error_string(rc)));
  }
  std::vector<MPI_Request> requests{request};
  if (!poll(requests, deadline, where)) {
    abandoned_.push_back(result);
    abandoned_.push_back(x);
    fail(Error(ErrorCode::kDeadlineExceeded,
               where() + ": every rank arrived, but the transfer did not complete within " +
                   internal::seconds_str(timeout()) +
                   " s (a peer died or stalled during it); the deadline is "
                   "CollectiveOptions::timeout, or KILN_COLLECTIVE_TIMEOUT seconds"));
  }
  if (call.op == ReduceOp::kMean &&
      (call.kind == CollectiveKind::kAllReduce || call.kind == CollectiveKind::kReduceScatter)) {
    internal::finish_mean(call.dtype, result.raw_mutable_data(), 0, result.size(), size_);
  }
  return result;
}

}  // namespace

bool mpi_available() { return true; }

std::unique_ptr<Collective> make_mpi_collective(const CollectiveOptions& options) {
  return std::make_unique<MpiCollective>(options);
}

}  // namespace kiln::distribute
