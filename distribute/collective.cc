// The Collective base class (steps, deadlines, local argument checks) and the pieces every
// backend shares: agreement checks across replicas, error words and the reduction loops.
#include "kiln/distribute/collective.h"

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>
#include <type_traits>

#include "distribute/collective_util.h"
#include "ops/max_min.h"

namespace kiln::distribute {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kMean:
      return "mean";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kMin:
      return "min";
  }
  return "unknown";
}

const char* collective_name(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllReduce:
      return "all_reduce";
    case CollectiveKind::kAllGather:
      return "all_gather";
    case CollectiveKind::kReduceScatter:
      return "reduce_scatter";
    case CollectiveKind::kBroadcast:
      return "broadcast";
    case CollectiveKind::kBarrier:
      return "barrier";
  }
  return "unknown";
}

// The communication thread: runs the queued collectives in order, each by its own deadline, and
// keeps each outcome until its step is waited for.
struct Collective::Async {
  struct Job {
    Call call;
    Tensor x;
    internal::Clock::time_point deadline;
  };
  struct Outcome {
    Tensor result;
    std::exception_ptr error;
  };
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Job> queue;            // started, not yet running
  int64_t running = 0;              // the step running now, or 0
  std::map<int64_t, Outcome> done;  // finished, not yet waited for
  // Every step started and not yet waited for: its call and deadline.
  std::map<int64_t, std::pair<Call, internal::Clock::time_point>> started;
  bool stop = false;
  std::thread thread;

  bool idle() const { return queue.empty() && running == 0; }

  void loop(Collective& comm) {
    std::unique_lock lock(mu);
    for (;;) {
      cv.wait(lock, [&] { return stop || !queue.empty(); });
      if (queue.empty()) return;  // stopping, with nothing left to run
      Job job = std::move(queue.front());
      queue.pop_front();
      running = job.call.step;
      lock.unlock();
      Outcome outcome;
      try {
        outcome.result = comm.run(job.call, job.x, job.deadline);
      } catch (...) {
        outcome.error = std::current_exception();
      }
      job.x = Tensor();  // the input is free once the collective is done
      lock.lock();
      if (started.count(job.call.step)) done[job.call.step] = std::move(outcome);
      running = 0;
      cv.notify_all();
    }
  }
};

Collective::Collective(const CollectiveOptions& options)
    : timeout_(internal::initial_timeout(options)) {}

Collective::~Collective() { stop_async(); }

void Collective::stop_async() {
  if (!async_) return;
  {
    std::lock_guard lock(async_->mu);
    async_->stop = true;
  }
  async_->cv.notify_all();
  if (async_->thread.joinable()) async_->thread.join();
  async_.reset();
}

void Collective::set_timeout(Seconds timeout) {
  if (!(timeout.count() > 0) || !std::isfinite(timeout.count())) {
    throw Error(ErrorCode::kInvalidArgument,
                "Collective::set_timeout: the timeout must be a positive number of seconds, got " +
                    std::to_string(timeout.count()));
  }
  timeout_ = timeout;
}

Tensor Collective::all_reduce(const Tensor& x, ReduceOp op) {
  return start({.kind = CollectiveKind::kAllReduce, .op = op}, x);
}

Tensor Collective::all_gather(const Tensor& x) {
  return start({.kind = CollectiveKind::kAllGather}, x);
}

Tensor Collective::reduce_scatter(const Tensor& x, ReduceOp op) {
  return start({.kind = CollectiveKind::kReduceScatter, .op = op}, x);
}

Tensor Collective::broadcast(const Tensor& x, int root) {
  return start({.kind = CollectiveKind::kBroadcast, .root = root}, x);
}

void Collective::barrier() { start({.kind = CollectiveKind::kBarrier}, Tensor()); }

Collective::Call Collective::prepare(Call call, const Tensor& x) {
  // Only what the other replicas cannot see is checked here; everything else is checked on the
  // calls of all replicas together, so they all fail alike.
  if (call.kind != CollectiveKind::kBarrier) {
    if (!x.defined() || x.is_symbolic()) {
      throw Error(ErrorCode::kInvalidArgument,
                  std::string(collective_name(call.kind)) + " (rank " + std::to_string(rank()) +
                      "): the input must be a concrete tensor, got " +
                      (x.defined() ? "a symbolic one" : "an undefined one"));
    }
    call.dtype = x.dtype();
    call.shape = x.shape();
  }
  call.step = ++steps_;
  return call;
}

namespace {

struct BlockedTimer {
  explicit BlockedTimer(double& total) : total(total), t0(internal::Clock::now()) {}
  ~BlockedTimer() { total += std::chrono::duration<double>(internal::Clock::now() - t0).count(); }
  double& total;
  internal::Clock::time_point t0;
};

}  // namespace

Tensor Collective::start(Call call, const Tensor& x) {
  call = prepare(call, x);
  bool queued = false;
  if (async_) {
    std::lock_guard lock(async_->mu);
    queued = !async_->idle();
  }
  if (queued) return wait(enqueue(call, x));  // after the collectives in flight
  BlockedTimer timer(blocked_seconds_);
  return run(call, x, internal::deadline_after(timeout_));
}

int64_t Collective::enqueue(const Call& call, const Tensor& x) {
  if (!async_) {
    async_ = std::make_unique<Async>();
    async_->thread = std::thread([a = async_.get(), this] { a->loop(*this); });
  }
  const internal::Clock::time_point deadline = internal::deadline_after(timeout_);
  {
    std::lock_guard lock(async_->mu);
    async_->queue.push_back({call, x, deadline});
    async_->started[call.step] = {call, deadline};
  }
  async_->cv.notify_all();
  return call.step;
}

int64_t Collective::start_all_reduce(const Tensor& x, ReduceOp op) {
  return enqueue(prepare({.kind = CollectiveKind::kAllReduce, .op = op}, x), x);
}

Tensor Collective::wait(int64_t step) {
  BlockedTimer timer(blocked_seconds_);
  Async* a = async_.get();
  std::unique_lock<std::mutex> lock;
  if (a) lock = std::unique_lock(a->mu);
  const auto it = a ? a->started.find(step) : decltype(a->started)::iterator();
  if (!a || it == a->started.end()) {
    throw Error(ErrorCode::kInvalidArgument,
                "Collective::wait: step " + std::to_string(step) + " (rank " +
                    std::to_string(rank()) + " of " + std::to_string(size()) + ", " + backend() +
                    ") was not started with start_all_reduce, or was waited for already");
  }
  const auto [call, deadline] = it->second;
  // The backend ends the collective by its deadline; should it not, the wait gives up itself
  // as long again after it.
  const auto give_up = deadline + std::chrono::duration_cast<internal::Clock::duration>(
                                      std::max(timeout_, Seconds(1)));
  const bool done = a->cv.wait_until(lock, give_up, [&] { return a->done.count(step) > 0; });
  a->started.erase(step);  // an outcome that comes later is dropped
  if (!done) {
    throw Error(ErrorCode::kDeadlineExceeded,
                internal::where(call, rank(), size(), backend()) + ": did not complete within " +
                    internal::seconds_str(timeout_) +
                    " s, nor did the communicator report why; the deadline is "
                    "CollectiveOptions::timeout, or KILN_COLLECTIVE_TIMEOUT seconds");
  }
  Async::Outcome outcome = std::move(a->done.at(step));
  a->done.erase(step);
  if (outcome.error) {
    // The earliest failure not yet waited for is the cause of the later ones (the communicator
    // broke there): that is the error to report.
    for (auto& [earlier, other] : a->done) {
      if (earlier > step) break;
      if (other.error) {
        outcome.error = other.error;
        break;
      }
    }
  }
  lock.unlock();
  if (outcome.error) std::rethrow_exception(outcome.error);
  return outcome.result;
}

namespace internal {

std::string describe(const Call& call) {
  std::string s = collective_name(call.kind);
  if (call.kind == CollectiveKind::kBarrier) return s;
  if (call.kind == CollectiveKind::kAllReduce || call.kind == CollectiveKind::kReduceScatter) {
    s += std::string("(") + reduce_op_name(call.op) + ")";
  } else if (call.kind == CollectiveKind::kBroadcast) {
    s += "(root " + std::to_string(call.root) + ")";
  }
  return s + " " + dtype_name(call.dtype) + shape_str(call.shape);
}

std::string where(const Call& call, int rank, int size, const std::string& backend) {
  return std::string(collective_name(call.kind)) + " step " + std::to_string(call.step) +
         " (rank " + std::to_string(rank) + " of " + std::to_string(size) + ", " + backend + ")";
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) s += i + 1 == ranks.size() ? " and " : ", ";
    s += std::to_string(ranks[i]);
  }
  return s;
}

namespace {

bool supported(DType dtype) {
  return dtype == DType::f32 || dtype == DType::f64 || dtype == DType::i8 || dtype == DType::u8 ||
         dtype == DType::i32 || dtype == DType::i64;
}

std::string every_call(const std::vector<Call>& calls) {
  std::string s;
  for (size_t r = 0; r < calls.size(); ++r) {
    s += (r ? "; rank " : "rank ") + std::to_string(r) + ": " + describe(calls[r]);
  }
  return s;
}

}  // namespace

void check_agreement(const std::vector<Call>& calls, int rank, const std::string& backend) {
  const Call& first = calls[0];
  const int size = static_cast<int>(calls.size());
  auto fail = [&](const std::string& what) {
    throw Error(ErrorCode::kInvalidArgument, where(calls[rank], rank, size, backend) + ": " + what);
  };
  bool same = true;
  for (const Call& c : calls) {
    same = same && c.kind == first.kind && c.step == first.step;
    if (first.kind == CollectiveKind::kBarrier) continue;
    same = same && c.dtype == first.dtype;
    if (first.kind == CollectiveKind::kAllReduce || first.kind == CollectiveKind::kReduceScatter) {
      same = same && c.op == first.op;
    }
    if (first.kind == CollectiveKind::kBroadcast) same = same && c.root == first.root;
    if (first.kind == CollectiveKind::kAllGather) {
      same = same && !c.shape.empty() && c.shape.size() == first.shape.size() &&
             std::equal(c.shape.begin() + 1, c.shape.end(), first.shape.begin() + 1);
    } else {
      same = same && c.shape == first.shape;
    }
  }
  if (!same) {
    std::string rule = first.kind == CollectiveKind::kAllGather
                           ? "the same collective and dtype, and shapes equal but for dimension 0"
                           : "the same collective, arguments, dtype and shape";
    fail("the replicas' calls disagree (they must make " + rule + "): " + every_call(calls));
  }
  if (first.kind == CollectiveKind::kBarrier) return;
  if (!supported(first.dtype)) {
    fail(std::string("dtype ") + dtype_name(first.dtype) +
         " is not supported (f32, f64, i8, u8, i32 and i64 are; convert first)");
  }
  if (first.kind == CollectiveKind::kBroadcast && (first.root < 0 || first.root >= size)) {
    fail("root " + std::to_string(first.root) + " is not a rank of this group of " +
         std::to_string(size));
  }
  if (first.kind == CollectiveKind::kReduceScatter &&
      (first.shape.empty() || first.shape[0] % size != 0)) {
    fail("dimension 0 of the input " + shape_str(first.shape) +
         " must be a multiple of the group size " + std::to_string(size));
  }
}

std::string seconds_str(Seconds seconds) {
  std::ostringstream out;
  out << seconds.count();
  return out.str();
}

Error missing_error(const Call& call, int rank, int size, const std::string& backend,
                    const std::vector<int>& missing, Seconds timeout, bool gone, Seconds stalled) {
  const std::string at = where(call, rank, size, backend) + ": ";
  const std::string who =
      "rank" + std::string(missing.size() > 1 ? "s " : " ") + rank_list(missing);
  const std::string deadline =
      "; the deadline is CollectiveOptions::timeout, or KILN_COLLECTIVE_TIMEOUT seconds";
  if (gone && !missing.empty()) {
    return Error(ErrorCode::kUnavailable, at + who + " left the group before arriving");
  }
  if (stalled.count() > 0 || missing.empty()) {
    std::string why = stalled.count() > 0
                          ? "this rank was itself not running for " + seconds_str(stalled) +
                                " s (stopped, e.g. by SIGSTOP, or starved of CPU) while it waited"
                          : "no rank is known to be missing";
    std::string whom = missing.empty() ? "which rank is late"
                                       : "whether " + who + ", not heard from, " +
                                             (missing.size() > 1 ? "are" : "is") +
                                             " late or gave up waiting for it";
    return Error(ErrorCode::kDeadlineExceeded, at + "the " + seconds_str(timeout) +
                                                   " s deadline passed, but " + why +
                                                   ", so it cannot tell " + whom + deadline);
  }
  return Error(ErrorCode::kDeadlineExceeded, at + who + " did not arrive within " +
                                                 seconds_str(timeout) + " s (died or stalled?)" +
                                                 deadline);
}

DeadlineWatch::DeadlineWatch(Clock::time_point deadline, Seconds timeout, Clock::time_point now)
    : deadline_(deadline),
      last_look_(now),
      stall_(std::chrono::duration_cast<Clock::duration>(
          std::min(Seconds(1), std::max(Seconds(0.25), timeout / 2)))),
      grace_(std::chrono::duration_cast<Clock::duration>(std::min(Seconds(1), timeout))) {}

bool DeadlineWatch::expired(Clock::time_point now) {
  const Clock::duration gap = now - last_look_;
  const bool crossed = last_look_ < deadline_ && now >= deadline_;
  last_look_ = now;
  if (now < deadline_) return false;
  // Not running when the deadline passed: what the peers sent meanwhile may not have been seen.
  // A stall that ended before the deadline is no such doubt: the looks after it saw what came in
  // meanwhile (and counting it would make a busy machine's scheduling delays blur the blame).
  if (crossed && gap >= stall_) {
    longest_stall_ = std::max(longest_stall_, Seconds(gap));
    deadline_ = now + grace_;
    return false;
  }
  return true;
}

Clock::time_point DeadlineWatch::next_look(Clock::time_point now) const {
  return std::min(deadline_, now + stall_ / 4);
}

namespace {

template <class T>
T combine(ReduceOp op, T a, T b) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kMean:
      if constexpr (std::is_integral_v<T>) {  // wrap, as two's complement hardware does
        using U = std::make_unsigned_t<T>;
        return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
      } else {
        return a + b;
      }
    case ReduceOp::kMax:
      return ops::max_of(a, b);
    case ReduceOp::kMin:
      return ops::min_of(a, b);
  }
  return a;
}

template <class T>
void reduce_typed(ReduceOp op, const std::vector<const void*>& inputs, void* out_void,
                  int64_t begin, int64_t end) {
  T* out = static_cast<T*>(out_void);
  const T* in0 = static_cast<const T*>(inputs[0]);
  std::memcpy(out + begin, in0 + begin, (end - begin) * sizeof(T));
  for (size_t k = 1; k < inputs.size(); ++k) {
    const T* in = static_cast<const T*>(inputs[k]);
    for (int64_t i = begin; i < end; ++i) out[i] = combine(op, out[i], in[i]);
  }
}

template <class F>
void dispatch(DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32:
      return f(float{});
    case DType::f64:
      return f(double{});
    case DType::i8:
      return f(int8_t{});
    case DType::u8:
      return f(uint8_t{});
    case DType::i32:
      return f(int32_t{});
    case DType::i64:
      return f(int64_t{});
    default:
      throw Error(ErrorCode::kInternal,
                  std::string("collective reduction on unsupported dtype ") + dtype_name(dtype));
  }
}

}  // namespace

void reduce_range(DType dtype, ReduceOp op, const std::vector<const void*>& inputs, void* out,
                  int64_t begin, int64_t end) {
  if (begin >= end) return;
  dispatch(dtype, [&](auto zero) { reduce_typed<decltype(zero)>(op, inputs, out, begin, end); });
}

void finish_mean(DType dtype, void* data, int64_t begin, int64_t end, int replicas) {
  dispatch(dtype, [&](auto zero) {
    using T = decltype(zero);
    T* p = static_cast<T*>(data);
    using Divisor = std::conditional_t<std::is_floating_point_v<T>, T, int64_t>;
    const Divisor n = static_cast<Divisor>(replicas);
    for (int64_t i = begin; i < end; ++i) p[i] = static_cast<T>(p[i] / n);
  });
}

Seconds initial_timeout(const CollectiveOptions& options) {
  if (options.timeout) {
    if (!(options.timeout->count() > 0) || !std::isfinite(options.timeout->count())) {
      throw Error(ErrorCode::kInvalidArgument,
                  "CollectiveOptions::timeout must be a positive number of seconds, got " +
                      std::to_string(options.timeout->count()));
    }
    return *options.timeout;
  }
  const char* env = std::getenv("KILN_COLLECTIVE_TIMEOUT");
  if (env == nullptr || *env == '\0') return Seconds(300);
  char* end = nullptr;
  const double seconds = std::strtod(env, &end);
  if (end == env || *end != '\0' || !(seconds > 0) || !std::isfinite(seconds)) {
    throw Error(ErrorCode::kInvalidArgument,
                std::string("KILN_COLLECTIVE_TIMEOUT must be a positive number of seconds, got '") +
                    env + "'");
  }
  return Seconds(seconds);
}

}  // namespace internal
}  // namespace kiln::distribute
