// The thread pool: every index covered exactly once, errors rethrown to the caller, nested
// calls inline, many callers at once, and calls both while workers spin and after they sleep;
// idle work on idle workers, woken, never holding up parallel_for, and never after its end.
#include "runtime/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

namespace kiln::runtime {
namespace {

// Runs parallel_for over [0, n) and checks each index was visited exactly once.
void expect_each_index_once(ThreadPool& pool, int64_t n, int64_t grain) {
  std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
  pool.parallel_for(n, grain, [&](int64_t begin, int64_t end) {
    ASSERT_LE(0, begin);
    ASSERT_LE(begin, end);
    ASSERT_LE(end, n);
    for (int64_t i = begin; i < end; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
  });
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << i;
}

TEST(ThreadPool, CoversEveryIndexOnce) {
  ThreadPool pool(4);
  EXPECT_EQ(pool.num_threads(), 4);
  for (int64_t n : {0, 1, 2, 3, 7, 64, 1000, 100003})
    for (int64_t grain : {1, 5, 64, 1 << 20}) expect_each_index_once(pool, n, grain);
}

TEST(ThreadPool, RethrowsTheFirstErrorAndKeepsWorking) {
  ThreadPool pool(3);
  EXPECT_THROW(pool.parallel_for(300, 1,
                                 [](int64_t begin, int64_t) {
                                   if (begin > 0) throw std::runtime_error("task failed");
                                 }),
               std::runtime_error);
  expect_each_index_once(pool, 1000, 10);  // the pool survives a failed call
}

TEST(ThreadPool, NestedCallsRunInline) {
  ThreadPool& pool = ThreadPool::global();
  std::atomic<int64_t> sum{0};
  pool.parallel_for(8, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      parallel_for(100, 1, [&](int64_t b, int64_t e) {
        for (int64_t j = b; j < e; ++j) sum.fetch_add(i * 100 + j);
      });
    }
  });
  EXPECT_EQ(sum.load(), 800 * 799 / 2);
}

// Inside a SerialScope the whole range runs as one call on the calling thread; scopes nest,
// and the pool splits work again once the outermost ends.
TEST(ThreadPool, SerialScopeRunsInlineUntilItEnds) {
  ThreadPool pool(4);
  auto calls_and_threads = [&] {
    std::mutex mu;
    std::vector<std::thread::id> ids;
    pool.parallel_for(1000, 1, [&](int64_t, int64_t) {
      std::lock_guard lock(mu);
      ids.push_back(std::this_thread::get_id());
    });
    return ids;
  };
  {
    SerialScope outer;
    {
      SerialScope inner;
      EXPECT_EQ(calls_and_threads(), std::vector<std::thread::id>{std::this_thread::get_id()});
    }
    EXPECT_EQ(calls_and_threads(), std::vector<std::thread::id>{std::this_thread::get_id()});
    expect_each_index_once(pool, 1000, 1);
  }
  EXPECT_EQ(calls_and_threads().size(), 4u);
}

TEST(ThreadPool, ManyCallersBackToBackAndAfterSleeping) {
  ThreadPool pool(2);
  std::vector<std::thread> callers;
  std::atomic<int> failures{0};
  for (int c = 0; c < 3; ++c) {
    callers.emplace_back([&, c] {
      for (int round = 0; round < 200; ++round) {
        std::atomic<int64_t> sum{0};
        pool.parallel_for(1000, 10, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) sum.fetch_add(i);
        });
        if (sum.load() != 1000 * 999 / 2) failures.fetch_add(1);
        // Now and then idle past the workers' spin, so they go to sleep and must be woken.
        if (round % 50 == c) std::this_thread::sleep_for(std::chrono::milliseconds(3));
      }
    });
  }
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST(ThreadPool, DestroysWhileWorkersSpinOrSleep) {
  for (int wait_ms : {0, 5}) {
    auto pool = std::make_unique<ThreadPool>(3);
    expect_each_index_once(*pool, 100, 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(wait_ms));
    pool.reset();  // joins the workers: must not hang
  }
}

// Waits up to 10 s for `done()`; false if it never came (a hang, as the test would see it).
template <class Done>
bool eventually(Done done) {
  for (int i = 0; i < 10000; ++i) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return done();
}

// An idle work step that calls `body` the first time and does nothing after.
std::function<bool()> first_call_only(std::function<bool()> body) {
  auto called = std::make_shared<std::atomic<bool>>(false);
  return [called, body = std::move(body)] { return !called->exchange(true) && body(); };
}

TEST(IdleWork, RunsOnWorkersUntilNothingIsLeft) {
  ThreadPool pool(3);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));  // the workers fall asleep
  std::atomic<int> left{100}, off_worker{0};
  IdleWork work(
      [&] {
        if (!ThreadPool::on_worker()) off_worker.fetch_add(1);
        int n = left.load();
        while (n > 0 && !left.compare_exchange_weak(n, n - 1)) {
        }
        return n > 0;
      },
      pool);
  EXPECT_TRUE(eventually([&] { return left.load() == 0; }));  // registering woke a worker
  EXPECT_EQ(off_worker.load(), 0);
  EXPECT_FALSE(ThreadPool::on_worker());
}

TEST(IdleWork, WakeBringsASleepingWorkerBack) {
  ThreadPool pool(2);
  std::atomic<bool> has_work{false};
  std::atomic<int> done{0};
  IdleWork work(
      [&] {
        if (!has_work.exchange(false)) return false;
        done.fetch_add(1);
        return true;
      },
      pool);
  for (int round = 1; round <= 3; ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // past the spin: asleep
    has_work = true;
    work.wake();
    EXPECT_TRUE(eventually([&] { return done.load() == round; })) << "round " << round;
  }
}

// A worker held by a long piece of idle work holds up no parallel_for: its callers run the
// chunks that nobody took.
TEST(IdleWork, BusyWorkerHoldsUpNoParallelFor) {
  ThreadPool pool(2);
  std::atomic<bool> in_step{false}, released{false};
  IdleWork work(first_call_only([&] {
                  in_step = true;
                  const bool in_time = eventually([&] { return released.load(); });
                  in_step = false;
                  return in_time;
                }),
                pool);
  ASSERT_TRUE(eventually([&] { return in_step.load(); }));
  for (int i = 0; i < 50; ++i) expect_each_index_once(pool, 1000, 1);
  released = true;
  EXPECT_TRUE(eventually([&] { return !in_step.load(); }));
}

// Idle work that yields at its pause points runs the chunks queued meanwhile on its worker: the
// caller, held in its own chunk until the other is done, needs the busy worker to run it.
TEST(IdleWork, YieldingIdleWorkRunsQueuedChunks) {
  ThreadPool pool(2);
  std::atomic<bool> in_step{false}, released{false};
  IdleWork work(first_call_only([&] {
                  in_step = true;
                  while (!released) {
                    ThreadPool::yield_to_tasks();
                    std::this_thread::sleep_for(std::chrono::microseconds(100));
                  }
                  in_step = false;
                  return true;
                }),
                pool);
  ASSERT_TRUE(eventually([&] { return in_step.load(); }));
  std::atomic<bool> second_done{false}, second_on_worker{false}, first_saw_second{false};
  pool.parallel_for(2, 1, [&](int64_t begin, int64_t) {
    if (begin == 0) {
      first_saw_second = eventually([&] { return second_done.load(); });
    } else {
      second_on_worker = ThreadPool::on_worker();
      second_done = true;
    }
  });
  EXPECT_TRUE(first_saw_second.load());
  EXPECT_TRUE(second_on_worker.load());
  EXPECT_TRUE(in_step.load());  // the worker ran the chunk from inside its idle work
  released = true;
  EXPECT_TRUE(eventually([&] { return !in_step.load(); }));
  ThreadPool::yield_to_tasks();  // outside idle work: nothing to do, returns
}

// Inside idle work parallel_for runs on the worker in pieces (with a pause for queued tasks
// between them): each at least grain long, at most 16 of them, every index covered once.
TEST(IdleWork, ParallelForInsideRunsInPieces) {
  ThreadPool pool(2);
  std::atomic<bool> done{false};
  std::vector<std::pair<int64_t, int64_t>> pieces, many;
  std::vector<int> hits(1000, 0);
  IdleWork work(first_call_only([&] {
                  pool.parallel_for(100, 30, [&](int64_t begin, int64_t end) {
                    pieces.emplace_back(begin, end);
                  });
                  pool.parallel_for(1000, 10, [&](int64_t begin, int64_t end) {
                    many.emplace_back(begin, end);
                    for (int64_t i = begin; i < end; ++i) ++hits[static_cast<size_t>(i)];
                  });
                  done = true;
                  return true;
                }),
                pool);
  ASSERT_TRUE(eventually([&] { return done.load(); }));
  EXPECT_EQ(pieces,
            (std::vector<std::pair<int64_t, int64_t>>{{0, 30}, {30, 60}, {60, 90}, {90, 100}}));
  EXPECT_EQ(many.size(), 16u);  // 1000 / 10 grains would be 100 pieces
  EXPECT_EQ(hits, std::vector<int>(1000, 1));
}

TEST(IdleWork, EndsAfterTheRunningStepAndIsNeverCalledAgain) {
  ThreadPool pool(3);
  std::atomic<int> calls{0};
  std::atomic<bool> in_step{false};
  {
    IdleWork work(
        [&] {
          calls.fetch_add(1);
          in_step = true;
          std::this_thread::sleep_for(std::chrono::milliseconds(2));
          in_step = false;
          return true;  // always more: workers call it over and over
        },
        pool);
    ASSERT_TRUE(eventually([&] { return calls.load() >= 3; }));
  }
  EXPECT_FALSE(in_step.load());
  const int after = calls.load();
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(calls.load(), after);
  expect_each_index_once(pool, 1000, 1);  // the workers are back to tasks
}

TEST(IdleWork, OneThreadPoolHasNoWorkerToCallIt) {
  ThreadPool pool(1);
  std::atomic<int> calls{0};
  IdleWork work(
      [&] {
        calls.fetch_add(1);
        return false;
      },
      pool);
  work.wake();
  expect_each_index_once(pool, 100, 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(calls.load(), 0);
}

TEST(IdleWork, ManySourcesComeAndGoWhileCallersRun) {
  ThreadPool pool(3);
  std::atomic<bool> stop{false};
  std::thread caller([&] {
    while (!stop) expect_each_index_once(pool, 500, 1);
  });
  for (int round = 0; round < 200; ++round) {
    std::atomic<int> left{round % 7};
    auto step = [&] {
      int n = left.load();
      while (n > 0 && !left.compare_exchange_weak(n, n - 1)) {
      }
      return n > 0;
    };
    IdleWork a(step, pool), b(step, pool);
    if (round % 2 == 0) EXPECT_TRUE(eventually([&] { return left.load() == 0; }));
  }
  stop = true;
  caller.join();
}

}  // namespace
}  // namespace kiln::runtime
