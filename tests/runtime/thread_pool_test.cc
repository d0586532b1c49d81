// The thread pool: every index covered exactly once, errors rethrown to the caller, nested
// calls inline, many callers at once, and calls both while workers spin and after they sleep.
#include "runtime/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <thread>
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

}  // namespace
}  // namespace kiln::runtime
