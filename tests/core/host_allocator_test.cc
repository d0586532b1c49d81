// The tensor host allocator: aligned blocks of every size class and beyond, no two live blocks
// overlapping, and blocks freed on another thread than the one that allocated them (a data
// pipeline's workers and consumer) reused safely.
#include "src/core/host_allocator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "kiln/ops.h"
#include "src/core/tensor_impl.h"

namespace kiln::detail {
namespace {

struct Block {
  uint8_t* data;
  size_t size;
};

TEST(HostAllocator, AlignedAndDisjointForEverySize) {
  std::vector<Block> live;
  for (size_t size : {size_t{1}, size_t{63}, size_t{64}, size_t{65}, size_t{1000}, size_t{4096},
                      size_t{100000}, size_t{1} << 20, (size_t{1} << 20) + 1, size_t{3} << 20}) {
    for (int k = 0; k < 3; ++k) {
      auto* p = static_cast<uint8_t*>(host_allocate(size));
      ASSERT_NE(p, nullptr);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kAlignment, 0u) << size;
      std::memset(p, static_cast<int>(live.size() & 0xff), size);
      live.push_back({p, size});
    }
  }
  std::vector<Block> sorted = live;
  std::sort(sorted.begin(), sorted.end(),
            [](const Block& a, const Block& b) { return a.data < b.data; });
  for (size_t i = 1; i < sorted.size(); ++i)
    EXPECT_LE(sorted[i - 1].data + sorted[i - 1].size, sorted[i].data);
  for (size_t i = 0; i < live.size(); ++i) {  // nothing overwrote another block's bytes
    for (size_t j = 0; j < live[i].size; j += 97) ASSERT_EQ(live[i].data[j], i & 0xff);
    host_free(live[i].data, live[i].size);
  }
}

TEST(HostAllocator, BlocksFreedOnAnotherThreadAreReusedSafely) {
  constexpr int kRounds = 20000;
  std::mutex mu;
  std::vector<Block> handed;
  bool done = false;
  std::thread producer([&] {
    for (int i = 0; i < kRounds; ++i) {
      size_t size = 64u << (i % 8);
      auto* p = static_cast<uint8_t*>(host_allocate(size));
      std::memset(p, i & 0xff, size);
      std::lock_guard lock(mu);
      handed.push_back({p, size});
    }
    std::lock_guard lock(mu);
    done = true;
  });
  int64_t freed = 0;
  for (;;) {
    std::vector<Block> mine;
    bool finished;
    {
      std::lock_guard lock(mu);
      mine.swap(handed);
      finished = done;
    }
    for (const Block& b : mine) {
      // Allocations of the consumer itself interleave with the producer's blocks.
      void* own = host_allocate(b.size);
      ASSERT_NE(own, b.data);
      host_free(own, b.size);
      ASSERT_EQ(b.data[b.size - 1], b.data[0]);
      host_free(b.data, b.size);
      ++freed;
    }
    if (finished && mine.empty()) break;
  }
  producer.join();
  EXPECT_EQ(freed, kRounds);
  EXPECT_LE(host_allocator_stats().cached_bytes, int64_t{15} * (8 << 20));  // bounded
}

// A thread_local constructed before the thread's first allocation is destroyed after the
// thread's cache (destruction runs in reverse order of construction), and may free a tensor
// then: the block goes to the system instead of into the destroyed cache. A static Tensor of
// the main thread freed at exit takes the same path. Run in a child process, so heap damage
// (which may not crash at once) aborts the child and shows as a failure here.
TEST(HostAllocator, FreeingAfterTheThreadCacheIsGoneIsSafe) {
  EXPECT_EXIT(
      {
        struct FreedLate {
          Tensor t;
          ~FreedLate() { t = Tensor(); }
        };
        std::thread([] {
          thread_local FreedLate late;  // constructed first: destroyed last
          late.t = kiln::zeros({100});
          Tensor other = kiln::zeros({100});  // from (and back to) the cache
        }).join();
        static FreedLate at_exit;
        at_exit.t = kiln::zeros({64});
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace kiln::detail
