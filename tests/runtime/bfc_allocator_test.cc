// The BFC allocator on host memory: rounding and alignment, best fit, splitting and coalescing
// (fragmentation back to 0), growth by doubling regions, the hard limit (a clear
// kResourceExhausted, after which it still serves), a device that runs out, bad frees, random
// sequences against a model of the live blocks, and threads.
#include "runtime/bfc_allocator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include "kiln/error.h"

namespace kiln::runtime {
namespace {

using ::testing::HasSubstr;
constexpr size_t kKiB = 1024, kMiB = 1024 * 1024;

BfcAllocator make(size_t limit, bool growth = true, size_t initial = 1 * kMiB) {
  return BfcAllocator(std::make_unique<HostRegionAllocator>(),
                      {.limit = limit, .allow_growth = growth, .initial_region = initial,
                       .name = "test"});
}

// A device with `budget` bytes: alloc fails beyond it.
class SmallDevice final : public RegionAllocator {
 public:
  explicit SmallDevice(size_t budget) : budget_(budget) {}
  void* alloc(size_t bytes) override {
    if (bytes > budget_) return nullptr;
    budget_ -= bytes;
    return host_.alloc(bytes);
  }
  void free(void* p, size_t bytes) override {
    budget_ += bytes;
    host_.free(p, bytes);
  }

 private:
  size_t budget_;
  HostRegionAllocator host_;
};

TEST(BfcAllocator, RoundsAlignsAndKeepsBlocksApart) {
  BfcAllocator a = make(16 * kMiB);
  void* p = a.allocate(1);
  void* q = a.allocate(0);
  void* r = a.allocate(257);
  for (void* x : {p, q, r}) EXPECT_EQ(reinterpret_cast<uintptr_t>(x) % 256, 0u);
  EXPECT_EQ(a.allocated_size(p), 256u);
  EXPECT_EQ(a.allocated_size(q), 256u);
  EXPECT_EQ(a.allocated_size(r), 512u);
  EXPECT_EQ(a.allocated_size(static_cast<char*>(r) + 256), 0u);  // not a block's start
  std::memset(p, 1, 256);
  std::memset(q, 2, 256);
  std::memset(r, 3, 512);
  EXPECT_EQ(static_cast<unsigned char*>(p)[255], 1);
  EXPECT_EQ(static_cast<unsigned char*>(q)[0], 2);
  BfcStats s = a.stats();
  EXPECT_EQ(s.bytes_in_use, 1024u);
  EXPECT_EQ(s.live_allocs, 3);
  EXPECT_EQ(s.num_allocs, 3);
  for (void* x : {p, q, r}) a.deallocate(x);
  EXPECT_EQ(a.stats().bytes_in_use, 0u);
  EXPECT_EQ(a.stats().peak_bytes_in_use, 1024u);
}

TEST(BfcAllocator, SplitsThenCoalescesBackToOneBlock) {
  BfcAllocator a = make(1 * kMiB, /*growth=*/false);
  EXPECT_EQ(a.stats().bytes_reserved, 1 * kMiB);  // taken up front
  void* x = a.allocate(1000);
  void* y = a.allocate(1000);
  void* z = a.allocate(1000);
  const size_t tail = 1 * kMiB - 3 * kKiB;
  EXPECT_EQ(a.stats().largest_free_block, tail);
  EXPECT_DOUBLE_EQ(a.stats().fragmentation, 0);
  a.deallocate(y);  // a hole between two live blocks
  BfcStats s = a.stats();
  EXPECT_EQ(s.largest_free_block, tail);
  EXPECT_NEAR(s.fragmentation, 1 - static_cast<double>(tail) / (tail + kKiB), 1e-12);
  a.deallocate(x);  // merges with the hole after it
  void* w = a.allocate(2000);  // best fit: the merged 2 KiB hole, not the tail
  EXPECT_EQ(w, x);
  a.deallocate(w);
  a.deallocate(z);  // everything merges: one block, the whole region
  s = a.stats();
  EXPECT_EQ(s.largest_free_block, 1 * kMiB);
  EXPECT_DOUBLE_EQ(s.fragmentation, 0);
  EXPECT_EQ(a.allocate(1 * kMiB), x);  // the whole region, from its start
}

TEST(BfcAllocator, BestFitTakesTheSmallestHoleThatHolds) {
  BfcAllocator a = make(1 * kMiB, false);
  // Holes of 4, 2 and 8 KiB between live separators, then the tail.
  std::vector<void*> hole, sep;
  for (size_t kb : {4, 2, 8}) {
    hole.push_back(a.allocate(kb * kKiB));
    sep.push_back(a.allocate(256));
  }
  for (void* h : hole) a.deallocate(h);
  EXPECT_EQ(a.allocate(2000), hole[1]);      // 2 KiB hole
  EXPECT_EQ(a.allocate(3 * kKiB), hole[0]);  // 4 KiB hole (split: 1 KiB stays free)
  EXPECT_EQ(a.allocate(1 * kKiB), static_cast<char*>(hole[0]) + 3 * kKiB);  // that 1 KiB
  EXPECT_EQ(a.allocate(5 * kKiB), hole[2]);  // 8 KiB hole
}

TEST(BfcAllocator, GrowsByDoublingRegionsUpToTheLimit) {
  BfcAllocator a = make(64 * kMiB, true, 1 * kMiB);
  EXPECT_EQ(a.stats().bytes_reserved, 0u);  // memory growth: nothing up front
  void* p = a.allocate(512 * kKiB);
  EXPECT_EQ(a.stats().bytes_reserved, 1 * kMiB);
  void* q = a.allocate(1 * kMiB);  // does not fit in what is left: a region twice the last
  BfcStats s = a.stats();
  EXPECT_EQ(s.num_regions, 2);
  EXPECT_EQ(s.bytes_reserved, 3 * kMiB);
  void* r = a.allocate(1 * kMiB);  // the second region's rest
  EXPECT_EQ(a.stats().num_regions, 2);
  EXPECT_EQ(r, static_cast<char*>(q) + 1 * kMiB);
  for (void* x : {p, q, r}) a.deallocate(x);
  EXPECT_EQ(a.stats().bytes_in_use, 0u);
  EXPECT_EQ(a.stats().largest_free_block, 2 * kMiB);  // regions never merge with each other
}

TEST(BfcAllocator, BeyondTheLimitIsAClearErrorAndItStillServes) {
  BfcAllocator a = make(4 * kMiB, true, 2 * kMiB);
  void* big = a.allocate(3 * kMiB);
  try {
    a.allocate(2 * kMiB);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted);
    EXPECT_THAT(e.what(), HasSubstr("BFC allocator 'test': out of memory allocating 2097152 "
                                    "bytes (2.00 MiB): limit 4194304 bytes (4.00 MiB), in use "
                                    "3145728 bytes (3.00 MiB) in 1 blocks"));
  }
  EXPECT_THROW(a.allocate(5 * kMiB), Error);  // over the limit by itself
  void* small = a.allocate(512 * kKiB);       // the limit's last MiB still serves
  EXPECT_EQ(a.stats().bytes_reserved, 4 * kMiB);
  a.deallocate(big);
  void* again = a.allocate(2 * kMiB);  // in the freed region
  EXPECT_EQ(again, big);
  a.deallocate(again);
  a.deallocate(small);
}

TEST(BfcAllocator, ADeviceThatRunsOutIsAClearErrorToo) {
  EXPECT_THROW(BfcAllocator(std::make_unique<SmallDevice>(1 * kMiB),
                            {.limit = 8 * kMiB, .allow_growth = false}),
               Error);
  BfcAllocator a(std::make_unique<SmallDevice>(3 * kMiB),
                 {.limit = 64 * kMiB, .initial_region = 2 * kMiB});
  void* p = a.allocate(2 * kMiB);
  // The next region would be 4 MiB; the device has 1: it takes just what the request needs.
  void* q = a.allocate(1 * kMiB);
  EXPECT_EQ(a.stats().bytes_reserved, 3 * kMiB);
  try {
    a.allocate(256);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted);
    EXPECT_THAT(e.what(), HasSubstr("largest free block 0 bytes"));
  }
  a.deallocate(p);
  a.deallocate(q);
}

TEST(BfcAllocator, BadFreesAreErrorsAndNothingChanges) {
  BfcAllocator a = make(1 * kMiB);
  void* p = a.allocate(100);
  int local = 0;
  EXPECT_THROW(a.deallocate(&local), Error);
  EXPECT_THROW(a.deallocate(static_cast<char*>(p) + 256), Error);
  a.deallocate(nullptr);
  a.deallocate(p);
  try {
    a.deallocate(p);  // twice
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_THAT(e.what(), HasSubstr("is not a live block of this allocator"));
  }
  EXPECT_EQ(a.stats().bytes_in_use, 0u);
  EXPECT_THROW(make(0), Error);
}

TEST(BfcAllocator, RandomSequencesKeepBlocksDisjointAndTheCountsRight) {
  for (uint32_t seed = 0; seed < 5; ++seed) {
    std::mt19937 rng(seed);
    BfcAllocator a = make(32 * kMiB, true, 256 * kKiB);
    std::map<char*, size_t> live;  // start -> size
    for (int step = 0; step < 3000; ++step) {
      if (live.empty() || rng() % 5 < 3) {
        const size_t bytes = rng() % 3 == 0 ? rng() % 200000 : rng() % 4000;
        char* p = static_cast<char*>(a.allocate(bytes));
        const size_t size = a.allocated_size(p);
        ASSERT_GE(size, bytes);
        auto next = live.lower_bound(p);
        if (next != live.end()) ASSERT_LE(p + size, next->first) << seed << " " << step;
        if (next != live.begin()) {
          auto prev = std::prev(next);
          ASSERT_LE(prev->first + prev->second, p) << seed << " " << step;
        }
        live[p] = size;
      } else {
        auto it = live.begin();
        std::advance(it, rng() % live.size());
        a.deallocate(it->first);
        live.erase(it);
      }
      size_t in_use = 0;
      for (const auto& [p, s] : live) in_use += s;
      ASSERT_EQ(a.stats().bytes_in_use, in_use);
    }
    for (const auto& [p, s] : live) a.deallocate(p);
    BfcStats s = a.stats();
    EXPECT_EQ(s.bytes_in_use, 0u);
    EXPECT_EQ(s.live_allocs, 0);
    EXPECT_LE(s.bytes_reserved, 32 * kMiB);
  }
}

TEST(BfcAllocator, ThreadsAllocateAndFreeConcurrently) {
  BfcAllocator a = make(256 * kMiB, true, 64 * kMiB);  // one region holds it all
  std::vector<std::thread> threads;
  std::atomic<int> corrupt{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&a, &corrupt, t] {
      std::mt19937 rng(t);
      std::vector<std::pair<unsigned char*, size_t>> mine;
      for (int i = 0; i < 4000; ++i) {
        if (mine.empty() || rng() % 2) {
          const size_t n = 1 + rng() % 5000;
          auto* p = static_cast<unsigned char*>(a.allocate(n));
          std::memset(p, t + 1, n);
          mine.emplace_back(p, n);
        } else {
          auto [p, n] = mine.back();
          mine.pop_back();
          for (size_t k = 0; k < n; k += 97) corrupt += p[k] != t + 1;
          a.deallocate(p);
        }
      }
      for (auto [p, n] : mine) a.deallocate(p);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(corrupt.load(), 0);
  BfcStats s = a.stats();
  EXPECT_EQ(s.bytes_in_use, 0u);
  EXPECT_EQ(s.num_regions, 1);
  EXPECT_EQ(s.largest_free_block, s.bytes_reserved);  // all coalesced again
  EXPECT_DOUBLE_EQ(s.fragmentation, 0);
}

TEST(BfcAllocator, ParsesMemorySizes) {
  EXPECT_EQ(parse_memory_size("8G", "x"), size_t{8} << 30);
  EXPECT_EQ(parse_memory_size("512M", "x"), size_t{512} << 20);
  EXPECT_EQ(parse_memory_size("1.5GiB", "x"), size_t{3} << 29);
  EXPECT_EQ(parse_memory_size("2kb", "x"), 2048u);
  EXPECT_EQ(parse_memory_size("1000000", "x"), 1000000u);
  for (const char* bad : {"", "abc", "-1", "5X", "1e400"}) {
    try {
      parse_memory_size(bad, "KILN_GPU_MEMORY_LIMIT");
      ADD_FAILURE() << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_THAT(e.what(), HasSubstr("KILN_GPU_MEMORY_LIMIT '" + std::string(bad) + "'"));
    }
  }
}

}  // namespace
}  // namespace kiln::runtime
