// The deadline logic every backend shares (distribute/collective.cc): a wait on the peers tells a
// late peer from a process that was itself stopped across its deadline, and the error then says
// it cannot tell instead of blaming a peer. Time is given explicitly, so these run without
// signals or sleeps; tests/distribute/mpi_test.cc stops a real rank under mpirun.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "distribute/collective_util.h"

namespace kiln::distribute::internal {
namespace {

using std::chrono::milliseconds;

const Clock::time_point kT0 = Clock::now();
Clock::time_point at(double seconds) {
  return kT0 + std::chrono::duration_cast<Clock::duration>(Seconds(seconds));
}

TEST(DeadlineWatch, GivesUpAtTheDeadlineWhileThisProcessKeptLooking) {
  DeadlineWatch watch(at(2), Seconds(2), at(0));
  Clock::time_point t = at(0);
  while (t + milliseconds(1) < at(2)) {
    t += milliseconds(1);
    ASSERT_FALSE(watch.expired(t));
  }
  EXPECT_TRUE(watch.expired(at(2)));
  EXPECT_EQ(watch.stalled().count(), 0);  // the peers had the whole deadline: blame them
}

TEST(DeadlineWatch, AProcessStoppedAcrossItsDeadlineLooksAgainForAGraceBeforeGivingUp) {
  DeadlineWatch watch(at(2), Seconds(2), at(0));
  EXPECT_FALSE(watch.expired(at(0.1)));
  // Stopped at 0.1 s, resumed at 10 s: what the peers sent meanwhile has not been looked at.
  EXPECT_FALSE(watch.expired(at(10)));
  EXPECT_DOUBLE_EQ(watch.stalled().count(), 9.9);
  EXPECT_FALSE(watch.expired(at(10.5)));
  EXPECT_TRUE(watch.expired(at(11)));  // a grace of min(1 s, timeout)
  EXPECT_DOUBLE_EQ(watch.stalled().count(), 9.9);
}

TEST(DeadlineWatch, AStallThatEndedBeforeTheDeadlineLeavesTheBlame) {
  DeadlineWatch watch(at(2), Seconds(2), at(0));
  EXPECT_FALSE(watch.expired(at(0.2)));
  EXPECT_FALSE(watch.expired(at(1.5)));  // 1.3 s without a look, but the looks went on after it
  EXPECT_TRUE(watch.expired(at(2)));     // no grace: it looked when the deadline passed
  EXPECT_EQ(watch.stalled().count(), 0);  // what came in during the stall was seen since
}

TEST(DeadlineWatch, ShortGapsAreNoStallAndLooksComeOftenEnoughToSeeOne) {
  DeadlineWatch watch(at(0.4), Seconds(0.4), at(0));
  EXPECT_FALSE(watch.expired(at(0.22)));  // over timeout/2, under the 0.25 s floor
  EXPECT_EQ(watch.stalled().count(), 0);
  // A quarter of the 0.25 s a stall takes, and never past the deadline.
  EXPECT_EQ(watch.next_look(at(0.22)), at(0.22) + std::chrono::microseconds(62500));
  EXPECT_EQ(watch.next_look(at(0.39)), at(0.4));
}

TEST(MissingError, NamesTheRanksThatDidNotArriveWhileThisProcessKeptLooking) {
  const Call call{.kind = CollectiveKind::kBarrier, .step = 3};
  const Error e = missing_error(call, 1, 4, "mpi", {0, 2}, Seconds(2), false);
  EXPECT_EQ(e.code(), ErrorCode::kDeadlineExceeded);
  EXPECT_NE(std::string(e.what()).find(
                "barrier step 3 (rank 1 of 4, mpi): ranks 0 and 2 did not arrive within 2 s"),
            std::string::npos)
      << e.what();
}

TEST(MissingError, SaysItCannotTellWhenThisProcessWasNotRunningWhileItWaited) {
  const Call call{.kind = CollectiveKind::kBarrier, .step = 3};
  const Error e = missing_error(call, 1, 2, "mpi", {0}, Seconds(2), false, Seconds(9.5));
  EXPECT_EQ(e.code(), ErrorCode::kDeadlineExceeded);
  const std::string what = e.what();
  EXPECT_EQ(what.find("did not arrive"), std::string::npos) << what;
  EXPECT_NE(what.find("barrier step 3 (rank 1 of 2, mpi): the 2 s deadline passed, but this rank "
                      "was itself not running for 9.5 s (stopped, e.g. by SIGSTOP, or starved "
                      "of CPU) while it waited, so it cannot tell whether rank 0, not heard "
                      "from, is late or gave up waiting for it"),
            std::string::npos)
      << what;
}

TEST(MissingError, NeverPrintsAnEmptyRank) {
  const Call call{.kind = CollectiveKind::kBarrier, .step = 3};
  const std::string what = missing_error(call, 1, 2, "mpi", {}, Seconds(2), false).what();
  EXPECT_EQ(what.find("rank  "), std::string::npos) << what;
  EXPECT_NE(what.find("no rank is known to be missing, so it cannot tell which rank is late"),
            std::string::npos)
      << what;
}

}  // namespace
}  // namespace kiln::distribute::internal
