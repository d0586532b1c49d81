// The in-process backend: N replicas as threads of one process meeting at a shared rendezvous.
// Each collective is a "round" keyed by its step; replicas deposit their inputs, and once all
// have arrived each computes its share of the result, reading the inputs in rank order.
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>

#include "distribute/collective_util.h"

namespace kiln::distribute {
namespace {

using internal::Call;

struct Round {
  explicit Round(int size) : calls(size), inputs(size), arrived(size, false) {}
  std::vector<Call> calls;
  std::vector<Tensor> inputs;  // held until the round ends, so every replica may read them
  std::vector<bool> arrived;
  int num_arrived = 0;
  std::optional<Error> disagreement;  // from check_agreement, the same for every replica
  Tensor output;                      // all_reduce, all_gather: shared by every replica
  void* output_data = nullptr;
  int shares_done = 0;  // replicas that have written their share of `output`
  int departed = 0;
};

// What the replicas of one group share.
struct Group {
  explicit Group(int size) : size(size), alive(size, true) {}
  const int size;
  std::mutex mu;
  std::condition_variable cv;
  std::map<int64_t, Round> rounds;
  std::vector<bool> alive;           // false once a replica's communicator is destroyed
  std::optional<std::string> abort;  // why the group broke; every later collective fails
};

class InProcessCollective final : public Collective {
 public:
  InProcessCollective(std::shared_ptr<Group> group, int rank, const CollectiveOptions& options)
      : Collective(options), group_(std::move(group)), rank_(rank) {}

  ~InProcessCollective() override {
    stop_async();
    std::lock_guard<std::mutex> lock(group_->mu);
    group_->alive[rank_] = false;
    group_->cv.notify_all();
  }

  int rank() const override { return rank_; }
  int size() const override { return group_->size; }
  int local_rank() const override { return rank_; }
  std::string backend() const override { return "in_process"; }

 protected:
  Tensor run(const Call& call, const Tensor& x, internal::Clock::time_point deadline) override;

 private:
  std::string where(const Call& call) const {
    return internal::where(call, rank_, group_->size, backend());
  }
  // Waits (holding `lock`) until `done()` or the deadline; throws when the group broke or when
  // replicas are missing from `round` at the deadline (or are gone).
  template <class Done>
  void wait(std::unique_lock<std::mutex>& lock, Round& round, const Call& call,
            internal::Clock::time_point deadline, Done done);
  void depart(Round& round, int64_t step);  // holding the lock

  std::shared_ptr<Group> group_;
  const int rank_;
};

template <class Done>
void InProcessCollective::wait(std::unique_lock<std::mutex>& lock, Round& round, const Call& call,
                               internal::Clock::time_point deadline, Done done) {
  Group& g = *group_;
  auto missing = [&] {
    std::vector<int> ranks;
    for (int r = 0; r < g.size; ++r) {
      if (!round.arrived[r]) ranks.push_back(r);
    }
    return ranks;
  };
  auto any_gone = [&] {
    for (int r : missing()) {
      if (!g.alive[r]) return true;
    }
    return false;
  };
  internal::DeadlineWatch watch(deadline, timeout());
  const auto ready = [&] { return done() || g.abort || any_gone(); };
  while (!g.cv.wait_until(lock, watch.next_look(internal::Clock::now()), ready)) {
    if (watch.expired(internal::Clock::now())) break;
  }
  if (done()) return;
  const std::vector<int> absent = missing();
  if (absent.empty()) {  // everyone arrived, but the group broke (or time ran out) meanwhile
    const std::string why = g.abort ? *g.abort : "a replica did not finish its share in time";
    if (!g.abort) g.abort = where(call) + ": " + why;
    g.cv.notify_all();
    throw Error(ErrorCode::kUnavailable, where(call) + ": the group broke: " + why);
  }
  Error error = internal::missing_error(call, rank_, g.size, backend(), absent, timeout(),
                                        any_gone(), watch.stalled());
  if (!g.abort) g.abort = error.what();
  g.cv.notify_all();
  throw error;
}

void InProcessCollective::depart(Round& round, int64_t step) {
  if (++round.departed == group_->size) group_->rounds.erase(step);
}

Tensor InProcessCollective::run(const Call& call, const Tensor& x,
                                internal::Clock::time_point deadline) {
  Group& g = *group_;
  std::unique_lock<std::mutex> lock(g.mu);
  if (g.abort) {
    throw Error(ErrorCode::kUnavailable,
                where(call) + ": the group broke at an earlier collective: " + *g.abort);
  }
  Round& round = g.rounds.try_emplace(call.step, g.size).first->second;
  round.calls[rank_] = call;
  round.inputs[rank_] = x;
  round.arrived[rank_] = true;
  if (++round.num_arrived == g.size) {
    // The last to arrive checks the calls and makes the shared output.
    try {
      internal::check_agreement(round.calls, 0, backend());
    } catch (const Error& e) {
      round.disagreement = e;
    }
    const Call& c = round.calls[0];
    if (!round.disagreement &&
        (c.kind == CollectiveKind::kAllReduce || c.kind == CollectiveKind::kAllGather)) {
      Shape shape = c.shape;
      if (c.kind == CollectiveKind::kAllGather) {
        shape[0] = 0;
        for (const Call& each : round.calls) shape[0] += each.shape[0];
      }
      round.output = Tensor::empty(c.dtype, shape);
      round.output_data = round.output.raw_mutable_data();
    }
    g.cv.notify_all();
  }
  wait(lock, round, call, deadline, [&] { return round.num_arrived == g.size; });
  if (round.disagreement) {
    // Reworded for this replica: the check ran on the last to arrive.
    try {
      internal::check_agreement(round.calls, rank_, backend());
    } catch (const Error& e) {
      depart(round, call.step);
      throw;
    }
  }

  const int64_t n = num_elements(call.shape);
  std::vector<const void*> inputs;
  for (const Tensor& t : round.inputs) inputs.push_back(t.defined() ? t.raw_data() : nullptr);
  Tensor result;
  switch (call.kind) {
    case CollectiveKind::kBarrier:
      break;
    case CollectiveKind::kBroadcast:
      result = round.inputs[call.root];
      break;
    case CollectiveKind::kReduceScatter: {
      Shape shape = call.shape;
      shape[0] /= g.size;
      const int64_t share = n / g.size;
      result = Tensor::empty(call.dtype, shape);
      lock.unlock();
      // Reduce this replica's rows into a buffer indexed like the inputs, shifted back.
      const size_t bytes = dtype_size(call.dtype);
      char* out = static_cast<char*>(result.raw_mutable_data()) - rank_ * share * bytes;
      internal::reduce_range(call.dtype, call.op, inputs, out, rank_ * share, (rank_ + 1) * share);
      if (call.op == ReduceOp::kMean) {
        internal::finish_mean(call.dtype, out, rank_ * share, (rank_ + 1) * share, g.size);
      }
      lock.lock();
      break;
    }
    case CollectiveKind::kAllReduce:
    case CollectiveKind::kAllGather: {
      lock.unlock();
      const size_t bytes = dtype_size(call.dtype);
      if (call.kind == CollectiveKind::kAllReduce) {
        const int64_t begin = n * rank_ / g.size, end = n * (rank_ + 1) / g.size;
        internal::reduce_range(call.dtype, call.op, inputs, round.output_data, begin, end);
        if (call.op == ReduceOp::kMean) {
          internal::finish_mean(call.dtype, round.output_data, begin, end, g.size);
        }
      } else {
        int64_t offset = 0;
        for (int r = 0; r < rank_; ++r) offset += num_elements(round.calls[r].shape);
        std::memcpy(static_cast<char*>(round.output_data) + offset * bytes, inputs[rank_],
                    n * bytes);
      }
      lock.lock();
      if (++round.shares_done == g.size) g.cv.notify_all();
      wait(lock, round, call, deadline, [&] { return round.shares_done == g.size; });
      result = round.output;
      break;
    }
  }
  depart(round, call.step);
  return result;
}

}  // namespace

std::vector<std::unique_ptr<Collective>> make_in_process_group(int size,
                                                               const CollectiveOptions& options) {
  if (size < 1) {
    throw Error(
        ErrorCode::kInvalidArgument,
        "make_in_process_group: the group needs at least one replica, got " + std::to_string(size));
  }
  auto group = std::make_shared<Group>(size);
  std::vector<std::unique_ptr<Collective>> replicas;
  for (int r = 0; r < size; ++r) {
    replicas.push_back(std::make_unique<InProcessCollective>(group, r, options));
  }
  return replicas;
}

}  // namespace kiln::distribute
