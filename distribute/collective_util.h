// What every collective backend shares: the check that the replicas' calls agree, the words of
// its errors, and the reduction loops (in rank order, so results are reproducible).
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/distribute/collective.h"
#include "kiln/error.h"

namespace kiln::distribute::internal {

using Call = Collective::Call;
using Clock = std::chrono::steady_clock;

// "all_reduce(sum) f32[2,3]", "broadcast(root 1) i64[4]", "barrier".
std::string describe(const Call& call);
// "all_reduce step 3 (rank 0 of 4, in_process)": the start of every error a collective throws.
std::string where(const Call& call, int rank, int size, const std::string& backend);
// "2", "1 and 3", "0, 2 and 3".
std::string rank_list(const std::vector<int>& ranks);

// Throws kInvalidArgument (the same words on every replica) unless the replicas' calls agree and
// are valid together: same collective, dtype and op; a supported dtype; shapes as the collective
// requires; a root within range. `calls[r]` is replica r's call.
void check_agreement(const std::vector<Call>& calls, int rank, const std::string& backend);

// The error for replicas that did not arrive (kDeadlineExceeded), or, when `gone` is true, that
// are known to be gone (kUnavailable). When this process itself was not running for `stalled`
// (nonzero) during the wait, its peers may have given up waiting for it: the error says it
// cannot tell whether `missing` are late, instead of blaming them.
Error missing_error(const Call& call, int rank, int size, const std::string& backend,
                    const std::vector<int>& missing, Seconds timeout, bool gone,
                    Seconds stalled = Seconds(0));

// out[i] = op over inputs[0][i], inputs[1][i], ... (in that order), for i in [begin, end).
// kMean sums; finish_mean divides by the number of replicas afterwards.
void reduce_range(DType dtype, ReduceOp op, const std::vector<const void*>& inputs, void* out,
                  int64_t begin, int64_t end);
void finish_mean(DType dtype, void* data, int64_t begin, int64_t end, int replicas);

// "0.5", "300": a timeout as errors print it.
std::string seconds_str(Seconds seconds);

// The deadline of a collective starting now.
inline Clock::time_point deadline_after(Seconds timeout) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(timeout);
}

// A wait for the other replicas, by its deadline, that tells a late peer from a process that
// was not running itself: stopped (SIGSTOP, a debugger, a paused VM) or starved of CPU across
// its deadline, a process wakes to find the deadline passed before it has looked at what
// arrived meanwhile, and would blame peers that were there all along. The waiter calls
// expired(now) after each look that found replicas still missing, and looks again by
// next_look(now). A gap between two looks of min(1 s, timeout/2) or more (0.25 s at least, so
// that scheduling delays on a busy machine are none) across the deadline counts as a stall and
// earns a grace of min(1 s, timeout) of further looks; a gap that ended before the deadline does
// not, since the looks after it saw what arrived meanwhile.
class DeadlineWatch {
 public:
  DeadlineWatch(Clock::time_point deadline, Seconds timeout, Clock::time_point now = Clock::now());
  // Whether to give up at `now`.
  bool expired(Clock::time_point now);
  // When to look again at the latest: the deadline, or sooner, so that a stall is seen.
  Clock::time_point next_look(Clock::time_point now) const;
  // The longest stall across the deadline, or zero: with one, this process cannot tell who is
  // late.
  Seconds stalled() const { return longest_stall_; }

 private:
  Clock::time_point deadline_, last_look_;
  Clock::duration stall_, grace_;
  Seconds longest_stall_{0};
};

// A call as 16 integers on the wire: kind, op, dtype, root, step, rank count, then up to ten
// dimensions (a higher rank folds its last dimensions into the tenth).
constexpr int kWireDims = 10;
constexpr int kWireLength = 6 + kWireDims;
using Wire = std::array<int64_t, kWireLength>;

inline Wire encode(const Call& call) {
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

inline Call decode(const int64_t* w) {
  Call call;
  call.kind = static_cast<CollectiveKind>(w[0]);
  call.op = static_cast<ReduceOp>(w[1]);
  call.dtype = static_cast<DType>(w[2]);
  call.root = static_cast<int>(w[3]);
  call.step = w[4];
  call.shape.assign(w + 6, w + 6 + w[5]);
  return call;
}

// The timeout a communicator starts with: options, else KILN_COLLECTIVE_TIMEOUT, else 5 min.
Seconds initial_timeout(const CollectiveOptions& options);

}  // namespace kiln::distribute::internal
