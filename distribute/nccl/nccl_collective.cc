// The NCCL backend (libkiln_nccl.so, loaded by nccl_loader.cc): one GPU per rank. Kiln tensors
// live in host memory, so each collective stages its input into a device buffer, runs the NCCL
// call and copies the result back, all on one stream (cudaMemcpyAsync), until device tensors
// exist. Calls are exchanged first over the control communicator (MPI), which checks that they
// agree and names a rank that does not arrive; the stream is then polled (cudaStreamQuery,
// ncclCommGetAsyncError) against the deadline, and on expiry the NCCL communicator is aborted
// (ncclCommAbort) and the collective throws kDeadlineExceeded.
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <thread>

#include "distribute/collective_util.h"
#include "distribute/nccl/nccl_plugin.h"

namespace kiln::distribute {
namespace {

using internal::Call;
using internal::Clock;

constexpr std::chrono::microseconds kPoll(20);

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return ncclFloat32;
    case DType::f64:
      return ncclFloat64;
    case DType::i8:
      return ncclInt8;
    case DType::u8:
      return ncclUint8;
    case DType::i32:
      return ncclInt32;
    default:
      return ncclInt64;  // i64; others were refused by check_agreement
  }
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kMin:
      return ncclMin;
    default:
      return ncclSum;  // mean: summed here, divided on the host as the other backends do
  }
}

// A device buffer that only grows.
class DeviceBuffer {
 public:
  ~DeviceBuffer() {
    if (data_) cudaFree(data_);
  }
  void* get(size_t bytes, const std::string& where) {
    if (bytes <= bytes_) return data_;
    if (data_) cudaFree(data_);
    data_ = nullptr;
    bytes_ = 0;
    if (cudaError_t e = cudaMalloc(&data_, std::max<size_t>(bytes, 256)); e != cudaSuccess) {
      throw Error(ErrorCode::kResourceExhausted, where + ": cudaMalloc of " +
                                                     std::to_string(bytes) +
                                                     " bytes failed: " + cudaGetErrorString(e));
    }
    bytes_ = std::max<size_t>(bytes, 256);
    return data_;
  }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

class NcclCollective final : public Collective {
 public:
  // Over `comm`, whose (non-blocking) initialization has been started, on GPU `device`.
  NcclCollective(ncclComm_t comm, int device, int rank, int size, int local_rank,
                 std::unique_ptr<Collective> control, const CollectiveOptions& options);
  ~NcclCollective() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  std::string backend() const override { return "nccl"; }

 protected:
  Tensor run(const Call& call, const Tensor& x, Clock::time_point deadline) override;

 private:
  [[noreturn]] void fail(Error error);
  void cuda(cudaError_t e, const std::function<std::string()>& where, const char* what);
  void nccl(ncclResult_t r, const std::function<std::string()>& where, const char* what,
            Clock::time_point deadline);
  std::vector<Call> exchange_calls(const Call& call);
  // Waits for the stream's work by the deadline; aborts the communicator at the deadline.
  void finish(const Call& call, Clock::time_point deadline);

  int rank_, size_, local_rank_, device_ = 0;
  std::unique_ptr<Collective> control_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  DeviceBuffer in_, out_;
  bool broken_ = false;
  std::string broken_why_;
};

NcclCollective::NcclCollective(ncclComm_t comm, int device, int rank, int size, int local_rank,
                               std::unique_ptr<Collective> control,
                               const CollectiveOptions& options)
    : Collective(options),
      rank_(rank),
      size_(size),
      local_rank_(local_rank),
      device_(device),
      control_(std::move(control)),
      comm_(comm) {
  auto where = [&] {
    return "make_nccl_collective (rank " + std::to_string(rank_) + " of " + std::to_string(size_) +
           ")";
  };
  cuda(cudaSetDevice(device_), where, "cudaSetDevice");
  cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), where, "cudaStreamCreate");
  // The communicator is non-blocking: its initialization is polled here, with the deadline.
  const Clock::time_point deadline = internal::deadline_after(timeout());
  for (;;) {
    ncclResult_t state = ncclInProgress;
    ncclCommGetAsyncError(comm_, &state);
    if (state == ncclSuccess) break;
    if (state != ncclInProgress) {
      ncclCommAbort(comm_);
      comm_ = nullptr;
      throw Error(ErrorCode::kUnavailable,
                  where() + ": NCCL initialization failed: " + ncclGetErrorString(state));
    }
    if (Clock::now() >= deadline) {
      ncclCommAbort(comm_);
      comm_ = nullptr;
      throw Error(ErrorCode::kDeadlineExceeded, where() + ": not every rank joined within " +
                                                    internal::seconds_str(timeout()) + " s");
    }
    std::this_thread::sleep_for(kPoll);
  }
}

NcclCollective::~NcclCollective() {
  stop_async();
  if (comm_) broken_ ? ncclCommAbort(comm_) : ncclCommDestroy(comm_);
  if (stream_) cudaStreamDestroy(stream_);
}

void NcclCollective::fail(Error error) {
  broken_ = true;
  broken_why_ = error.what();
  throw error;
}

void NcclCollective::cuda(cudaError_t e, const std::function<std::string()>& where,
                          const char* what) {
  if (e != cudaSuccess) {
    fail(Error(ErrorCode::kUnavailable,
               where() + ": " + what + " failed: " + cudaGetErrorString(e)));
  }
}

void NcclCollective::nccl(ncclResult_t r, const std::function<std::string()>& where,
                          const char* what, Clock::time_point deadline) {
  // A non-blocking communicator may still be enqueueing the call (ncclInProgress): it must have
  // finished before anything else goes on the stream or to NCCL.
  while (r == ncclInProgress) {
    if (Clock::now() >= deadline) {
      ncclCommAbort(comm_);
      comm_ = nullptr;
      fail(Error(ErrorCode::kDeadlineExceeded, where() + ": " + what + " was not enqueued within " +
                                                   internal::seconds_str(timeout()) +
                                                   " s; the NCCL communicator was aborted"));
    }
    std::this_thread::sleep_for(kPoll);
    ncclCommGetAsyncError(comm_, &r);
  }
  if (r != ncclSuccess) {
    fail(Error(ErrorCode::kUnavailable,
               where() + ": " + what + " failed: " + ncclGetErrorString(r)));
  }
}

std::vector<Call> NcclCollective::exchange_calls(const Call& call) {
  const internal::Wire wire = internal::encode(call);
  Tensor mine = Tensor::empty(DType::i64, {internal::kWireLength});
  std::memcpy(mine.raw_mutable_data(), wire.data(), sizeof wire);
  Tensor all;
  try {
    all = control_->all_gather(mine);
  } catch (const Error& e) {
    // Names the ranks that did not arrive, as the control communicator saw them.
    fail(Error(e.code(), internal::where(call, rank_, size_, backend()) +
                             ": exchanging the calls: " + e.what()));
  }
  std::vector<Call> calls;
  const auto* w = static_cast<const int64_t*>(all.raw_data());
  for (int r = 0; r < size_; ++r) calls.push_back(internal::decode(w + r * internal::kWireLength));
  return calls;
}

void NcclCollective::finish(const Call& call, Clock::time_point deadline) {
  auto where = [&] { return internal::where(call, rank_, size_, backend()); };
  for (;;) {
    const cudaError_t q = cudaStreamQuery(stream_);
    if (q == cudaSuccess) return;
    if (q != cudaErrorNotReady) cuda(q, where, "the stream");
    ncclResult_t state = ncclSuccess;
    ncclCommGetAsyncError(comm_, &state);
    if (state != ncclSuccess && state != ncclInProgress) {
      fail(Error(ErrorCode::kUnavailable,
                 where() + ": the NCCL communicator failed: " + ncclGetErrorString(state)));
    }
    if (Clock::now() >= deadline) {
      ncclCommAbort(comm_);
      comm_ = nullptr;
      fail(Error(ErrorCode::kDeadlineExceeded,
                 where() + ": every rank arrived, but the transfer did not complete within " +
                     internal::seconds_str(timeout()) +
                     " s (a peer died or stalled during it); the NCCL communicator was aborted; "
                     "the deadline is CollectiveOptions::timeout, or KILN_COLLECTIVE_TIMEOUT "
                     "seconds"));
    }
    std::this_thread::sleep_for(kPoll);
  }
}

Tensor NcclCollective::run(const Call& call, const Tensor& x, Clock::time_point deadline) {
  auto where = [&] { return internal::where(call, rank_, size_, backend()); };
  if (broken_) {
    throw Error(ErrorCode::kUnavailable,
                where() + ": the communicator broke at an earlier collective: " + broken_why_);
  }
  const std::vector<Call> calls = exchange_calls(call);
  internal::check_agreement(calls, rank_, backend());
  if (call.kind == CollectiveKind::kBarrier) return Tensor();  // the exchange was the barrier
  cuda(cudaSetDevice(device_), where, "cudaSetDevice");

  const size_t item = dtype_size(call.dtype);
  const int64_t n = num_elements(call.shape);
  const ncclDataType_t type = nccl_type(call.dtype);
  Tensor result;
  switch (call.kind) {
    case CollectiveKind::kAllReduce:
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kBroadcast: {
      Shape shape = call.shape;
      if (call.kind == CollectiveKind::kReduceScatter) shape[0] /= size_;
      result = Tensor::empty(call.dtype, shape);
      void* in = in_.get(n * item, where());
      void* out = out_.get(n * item, where());
      if (call.kind != CollectiveKind::kBroadcast || rank_ == call.root) {
        cuda(cudaMemcpyAsync(in, x.raw_data(), n * item, cudaMemcpyHostToDevice, stream_), where,
             "cudaMemcpyAsync to the GPU");
      }
      if (call.kind == CollectiveKind::kAllReduce) {
        nccl(ncclAllReduce(in, out, n, type, nccl_op(call.op), comm_, stream_), where,
             "ncclAllReduce", deadline);
      } else if (call.kind == CollectiveKind::kReduceScatter) {
        nccl(ncclReduceScatter(in, out, n / size_, type, nccl_op(call.op), comm_, stream_), where,
             "ncclReduceScatter", deadline);
      } else {
        nccl(ncclBroadcast(in, out, n, type, call.root, comm_, stream_), where, "ncclBroadcast",
             deadline);
      }
      cuda(cudaMemcpyAsync(result.raw_mutable_data(), out, result.nbytes(), cudaMemcpyDeviceToHost,
                           stream_),
           where, "cudaMemcpyAsync from the GPU");
      break;
    }
    case CollectiveKind::kAllGather: {
      // NCCL gathers equal counts: each rank's rows padded to the largest, then compacted.
      int64_t most = 0, rows = 0;
      for (const Call& c : calls) {
        most = std::max(most, num_elements(c.shape));
        rows += c.shape[0];
      }
      Shape shape = call.shape;
      shape[0] = rows;
      result = Tensor::empty(call.dtype, shape);
      void* in = in_.get(most * item, where());
      auto* out = static_cast<char*>(out_.get(most * size_ * item, where()));
      cuda(cudaMemcpyAsync(in, x.raw_data(), n * item, cudaMemcpyHostToDevice, stream_), where,
           "cudaMemcpyAsync to the GPU");
      nccl(ncclAllGather(in, out, most, type, comm_, stream_), where, "ncclAllGather", deadline);
      auto* host = static_cast<char*>(result.raw_mutable_data());
      for (int r = 0; r < size_; ++r) {
        const size_t bytes = num_elements(calls[r].shape) * item;
        cuda(cudaMemcpyAsync(host, out + r * most * item, bytes, cudaMemcpyDeviceToHost, stream_),
             where, "cudaMemcpyAsync from the GPU");
        host += bytes;
      }
      break;
    }
    case CollectiveKind::kBarrier:
      break;
  }
  finish(call, deadline);
  if (call.op == ReduceOp::kMean &&
      (call.kind == CollectiveKind::kAllReduce || call.kind == CollectiveKind::kReduceScatter)) {
    internal::finish_mean(call.dtype, result.raw_mutable_data(), 0, result.size(), size_);
  }
  return result;
}

}  // namespace
}  // namespace kiln::distribute

namespace kiln::distribute {
namespace {

// Non-blocking, so that initialization and calls return at once and deadlines can be kept.
ncclConfig_t non_blocking() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

void check_started(ncclResult_t r, const std::string& where) {
  if (r != ncclSuccess && r != ncclInProgress) {
    throw Error(ErrorCode::kUnavailable,
                where + ": ncclCommInitRankConfig failed: " + ncclGetErrorString(r));
  }
}

void set_device(int device, const std::string& where) {
  if (cudaError_t e = cudaSetDevice(device); e != cudaSuccess) {
    throw Error(ErrorCode::kUnavailable, where + ": cudaSetDevice(" + std::to_string(device) +
                                             ") failed: " + cudaGetErrorString(e));
  }
}

}  // namespace
}  // namespace kiln::distribute

extern "C" void kiln_nccl_get_unique_id(kiln::distribute::nccl_plugin::UniqueId* id) {
  ncclUniqueId nccl_id;
  if (ncclResult_t r = ncclGetUniqueId(&nccl_id); r != ncclSuccess) {
    throw kiln::Error(
        kiln::ErrorCode::kUnavailable,
        std::string("make_nccl_collective: ncclGetUniqueId failed: ") + ncclGetErrorString(r));
  }
  std::memcpy(id->bytes, &nccl_id, sizeof id->bytes);
}

extern "C" kiln::distribute::Collective* kiln_nccl_make_collective(
    const kiln::distribute::nccl_plugin::UniqueId& id, int rank, int size, int local_rank,
    std::unique_ptr<kiln::distribute::Collective>* control,
    const kiln::distribute::CollectiveOptions& options) {
  using namespace kiln::distribute;
  const std::string where =
      "make_nccl_collective (rank " + std::to_string(rank) + " of " + std::to_string(size) + ")";
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    throw kiln::Error(kiln::ErrorCode::kUnavailable, where + ": no GPU");
  }
  const int device = local_rank % devices;
  set_device(device, where);
  ncclUniqueId nccl_id;
  static_assert(sizeof nccl_id == sizeof id.bytes);
  std::memcpy(&nccl_id, id.bytes, sizeof id.bytes);
  ncclConfig_t config = non_blocking();
  ncclComm_t comm = nullptr;
  check_started(ncclCommInitRankConfig(&comm, size, nccl_id, rank, &config), where);
  return new NcclCollective(comm, device, rank, size, local_rank, std::move(*control), options);
}

extern "C" void kiln_nccl_make_group(
    std::vector<std::unique_ptr<kiln::distribute::Collective>>* controls,
    const kiln::distribute::CollectiveOptions& options,
    std::vector<std::unique_ptr<kiln::distribute::Collective>>* out) {
  using namespace kiln::distribute;
  const int size = static_cast<int>(controls->size());
  const std::string where = "make_nccl_group(" + std::to_string(size) + ")";
  ncclUniqueId id;
  if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) {
    throw kiln::Error(kiln::ErrorCode::kUnavailable,
                      where + ": ncclGetUniqueId failed: " + ncclGetErrorString(r));
  }
  // One thread initializes every GPU's rank inside one group call, as NCCL requires.
  std::vector<ncclComm_t> comms(size, nullptr);
  ncclConfig_t config = non_blocking();
  ncclGroupStart();
  for (int r = 0; r < size; ++r) {
    set_device(r, where);
    check_started(ncclCommInitRankConfig(&comms[r], size, id, r, &config), where);
  }
  check_started(ncclGroupEnd(), where);
  for (int r = 0; r < size; ++r) {
    out->push_back(std::make_unique<NcclCollective>(comms[r], r, r, size, r,
                                                    std::move((*controls)[r]), options));
  }
}
