// Buffer assignment (compiler/buffer_assignment.h): values live at the same time never overlap,
// dead buffers are reused, in place happens only where allowed, and the peak is bounded below
// by the live minimum.
#include "compiler/buffer_assignment.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "kiln/tensor.h"

namespace kiln::compiler {
namespace {

using ::testing::HasSubstr;

bool live_together(const LiveValue& a, const LiveValue& b) {
  return a.def <= b.last_use && b.def <= a.last_use;
}

bool memory_overlaps(const BufferAssignment& r, const std::vector<LiveValue>& v, int a, int b) {
  int64_t sa = align_bytes(v[a].bytes), sb = align_bytes(v[b].bytes);
  return sa > 0 && sb > 0 && r.offsets[a] < r.offsets[b] + sb && r.offsets[b] < r.offsets[a] + sa;
}

// Checks every property of an assignment, computing the live minimum independently.
void check_assignment(const std::vector<LiveValue>& v, const BufferAssignment& r) {
  const int n = static_cast<int>(v.size());
  ASSERT_EQ(r.offsets.size(), v.size());
  int64_t total = 0;
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(r.offsets[i] % kBufferAlignment, 0) << "value " << i;
    EXPECT_GE(r.offsets[i], 0);
    if (v[i].bytes > 0) EXPECT_LE(r.offsets[i] + align_bytes(v[i].bytes), r.arena_bytes);
    total += align_bytes(v[i].bytes);
  }
  EXPECT_EQ(r.total_bytes, total);

  // In place only when allowed: a listed candidate of the same size dying where the value is
  // defined, taken at most once, sharing the offset.
  std::vector<int> takers(n, 0);
  int in_place = 0;
  for (int i = 0; i < n; ++i) {
    int c = r.in_place_of[i];
    if (c < 0) continue;
    ++in_place;
    const auto& cands = v[i].in_place_candidates;
    EXPECT_NE(std::find(cands.begin(), cands.end(), c), cands.end()) << "value " << i;
    EXPECT_EQ(v[c].last_use, v[i].def) << "value " << i << " took a buffer still live";
    EXPECT_LT(v[c].def, v[i].def);
    EXPECT_EQ(v[c].bytes, v[i].bytes);
    EXPECT_EQ(r.offsets[c], r.offsets[i]);
    EXPECT_EQ(++takers[c], 1) << "value " << c << " taken twice";
  }
  EXPECT_EQ(r.num_in_place, in_place);

  // No two values live at the same time overlap, except a value and the input it overwrites.
  for (int a = 0; a < n; ++a) {
    for (int b = a + 1; b < n; ++b) {
      if (!live_together(v[a], v[b]) || !memory_overlaps(r, v, a, b)) continue;
      EXPECT_TRUE(r.in_place_of[a] == b || r.in_place_of[b] == a)
          << "values " << a << " [" << v[a].def << "," << v[a].last_use << "] and " << b << " ["
          << v[b].def << "," << v[b].last_use << "] overlap at offsets " << r.offsets[a] << ", "
          << r.offsets[b];
    }
  }

  // The live minimum: at each point, the live values' sizes, a value written in place counted
  // once with its input.
  int points = 0;
  for (const LiveValue& x : v) points = std::max(points, x.last_use + 1);
  int64_t live_min = 0;
  for (int t = 0; t < points; ++t) {
    int64_t live = 0;
    for (int i = 0; i < n; ++i) {
      if (v[i].def > t || v[i].last_use < t) continue;
      if (r.in_place_of[i] >= 0 && v[i].def == t) continue;  // shares its input's bytes
      live += align_bytes(v[i].bytes);
    }
    live_min = std::max(live_min, live);
  }
  EXPECT_EQ(r.live_min_bytes, live_min);
  EXPECT_GE(r.arena_bytes, r.live_min_bytes);
  EXPECT_LE(r.arena_bytes, r.total_bytes);

  // Reuse: counted for a value over the memory of one dead before it was defined.
  int reused = 0;
  for (int i = 0; i < n; ++i) {
    bool over_dead = false;
    for (int j = 0; j < n; ++j)
      over_dead |= j != i && v[j].last_use < v[i].def && memory_overlaps(r, v, i, j);
    if (r.reused[i]) {
      EXPECT_TRUE(over_dead) << "value " << i;
      ++reused;
    }
    if (over_dead && r.in_place_of[i] < 0) EXPECT_TRUE(r.reused[i]) << "value " << i;
  }
  EXPECT_EQ(r.num_reused, reused);
}

TEST(BufferAssignmentTest, RandomLiveRangesNeverOverlapWhileLive) {
  int64_t reused = 0, in_place = 0;
  for (int seed = 0; seed < 300; ++seed) {
    std::mt19937 rng(seed);
    const int n = 1 + static_cast<int>(rng() % 40), points = 1 + static_cast<int>(rng() % 30);
    std::vector<LiveValue> v(n);
    const int64_t sizes[] = {0, 4, 64, 100, 256, 1000, 4096, 4096, 12288};
    for (LiveValue& x : v) {
      x.bytes = sizes[rng() % 9];
      x.def = static_cast<int>(rng() % points);
      x.last_use = x.def + static_cast<int>(rng() % 4 == 0 ? rng() % points : rng() % 3);
    }
    // Candidates: some valid (dying at def, same size), most not.
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < n; ++j) {
        if (i == j) continue;
        bool valid = v[j].last_use == v[i].def && v[j].def < v[i].def && v[j].bytes == v[i].bytes;
        if (valid ? rng() % 2 == 0 : rng() % 10 == 0) v[i].in_place_candidates.push_back(j);
      }
    }
    BufferAssignment r = assign_buffers(v);
    SCOPED_TRACE("seed " + std::to_string(seed));
    check_assignment(v, r);
    if (HasFailure()) return;
    reused += r.num_reused;
    in_place += r.num_in_place;
  }
  EXPECT_GT(reused, 0);
  EXPECT_GT(in_place, 0);
}

TEST(BufferAssignmentTest, ChainOfTemporariesReusesDeadBuffers) {
  // a -> b -> c -> d, each read only by the next: two buffers suffice.
  std::vector<LiveValue> v = {
      {1000, 0, 1, {}}, {1000, 1, 2, {}}, {1000, 2, 3, {}}, {1000, 3, 3, {}}};
  BufferAssignment r = assign_buffers(v);
  check_assignment(v, r);
  EXPECT_EQ(r.arena_bytes, 2 * 1024);
  EXPECT_EQ(r.live_min_bytes, 2 * 1024);
  EXPECT_EQ(r.total_bytes, 4 * 1024);
  EXPECT_EQ(r.num_reused, 2);  // c over a, d over b
  EXPECT_EQ(r.offsets[0], r.offsets[2]);
  EXPECT_EQ(r.offsets[1], r.offsets[3]);
}

TEST(BufferAssignmentTest, ABufferStillLiveIsNeverReused) {
  // `long` is live from 0 to 5; every other value must stay clear of it.
  std::vector<LiveValue> v = {
      {512, 0, 5, {}}, {512, 1, 2, {0}}, {512, 2, 3, {1}}, {512, 3, 5, {2}}};
  BufferAssignment r = assign_buffers(v);
  check_assignment(v, r);
  for (int i = 1; i < 4; ++i) EXPECT_NE(r.offsets[i], r.offsets[0]) << i;
  EXPECT_EQ(r.in_place_of[1], -1);  // candidate 0 is still live after point 1
  EXPECT_EQ(r.in_place_of[2], 1);
  EXPECT_EQ(r.in_place_of[3], 2);
  EXPECT_EQ(r.num_in_place, 2);
  EXPECT_EQ(r.arena_bytes, 1024);  // long + one in-place chain
}

TEST(BufferAssignmentTest, InPlaceOnlyForSameSizeDyingCandidatesTakenOnce) {
  std::vector<LiveValue> v = {
      {256, 0, 1, {}},      // 0
      {128, 0, 1, {}},      // 1: dies at 1 but is smaller
      {256, 1, 2, {1, 0}},  // 2: takes 0 (1 has another size)
      {256, 1, 2, {0}},     // 3: 0 is taken
      {256, 2, 2, {2, 3}},  // 4: takes 2
  };
  BufferAssignment r = assign_buffers(v);
  check_assignment(v, r);
  EXPECT_EQ(r.in_place_of[2], 0);
  EXPECT_EQ(r.in_place_of[3], -1);
  EXPECT_EQ(r.in_place_of[4], 2);
  EXPECT_EQ(r.offsets[4], r.offsets[0]);
}

TEST(BufferAssignmentTest, AlignsEveryOffsetAndCountsAlignedSizes) {
  std::vector<LiveValue> v = {{4, 0, 0, {}}, {1, 0, 0, {}}, {65, 0, 0, {}}, {0, 0, 0, {}}};
  BufferAssignment r = assign_buffers(v);
  check_assignment(v, r);
  EXPECT_EQ(r.arena_bytes, 64 + 64 + 128);
  EXPECT_EQ(r.live_min_bytes, r.arena_bytes);
  EXPECT_EQ(assign_buffers({}).arena_bytes, 0);
}

TEST(BufferAssignmentTest, BestFitFillsTheSmallestHole) {
  // At point 2, b (4 KiB) and d (1 KiB) have died between long-lived a, c and e: f (1 KiB) takes
  // d's hole, not b's larger one.
  std::vector<LiveValue> v = {{8192, 0, 3, {}}, {4096, 0, 1, {}}, {2048, 0, 3, {}},
                              {1024, 0, 1, {}}, {1024, 0, 3, {}}, {1024, 2, 3, {}}};
  BufferAssignment r = assign_buffers(v);
  check_assignment(v, r);
  EXPECT_EQ(r.offsets[5], r.offsets[3]);
  EXPECT_EQ(r.arena_bytes, 8192 + 4096 + 2048 + 1024 + 1024);
  EXPECT_EQ(r.num_reused, 1);
}

TEST(BufferAssignmentTest, RejectsBadRangesWithClearErrors) {
  try {
    assign_buffers({{16, 3, 1, {}}});
    ADD_FAILURE() << "a range ending before it starts was accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("assign_buffers: value 0 has the live range [3, 1]"));
  }
  EXPECT_THROW(assign_buffers({{-1, 0, 0, {}}}), Error);
  try {
    assign_buffers({{16, 0, 0, {7}}});
    ADD_FAILURE() << "an unknown candidate was accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("in-place candidate 7"));
  }
}

}  // namespace
}  // namespace kiln::compiler
