// Greedy-by-size best-fit placement of live ranges in one arena, with in-place chains merged
// into one buffer first.
#include "compiler/buffer_assignment.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <string>

#include "kiln/tensor.h"

namespace kiln::compiler {
namespace {

struct Buffer {
  int root = 0;  // the first value of its in-place chain
  int64_t size = 0;
  int start = 0, end = 0;  // live over [start, end]
  int64_t offset = 0;
};

void check(const std::vector<LiveValue>& values, int64_t alignment) {
  auto fail = [](const std::string& what) {
    throw Error(ErrorCode::kInvalidArgument, "assign_buffers: " + what);
  };
  if (alignment <= 0) fail("alignment must be positive, got " + std::to_string(alignment));
  const int n = static_cast<int>(values.size());
  for (int i = 0; i < n; ++i) {
    const LiveValue& v = values[i];
    std::string where = "value " + std::to_string(i);
    if (v.bytes < 0) fail(where + " has a negative size (" + std::to_string(v.bytes) + ")");
    if (v.def < 0 || v.last_use < v.def) {
      fail(where + " has the live range [" + std::to_string(v.def) + ", " +
           std::to_string(v.last_use) + "]: expected 0 <= def <= last_use");
    }
    for (int c : v.in_place_candidates)
      if (c < 0 || c >= n) fail(where + " names in-place candidate " + std::to_string(c));
  }
}

// Joins each value to the chain of the candidate it takes in place.
std::vector<int> chain_in_place(const std::vector<LiveValue>& values, BufferAssignment& r) {
  const int n = static_cast<int>(values.size());
  std::vector<int> order(n), root(n);
  std::iota(order.begin(), order.end(), 0);
  std::iota(root.begin(), root.end(), 0);
  // By definition point, so a candidate's chain is final before anyone takes it.
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return values[a].def < values[b].def; });
  std::vector<bool> taken(n, false);
  for (int v : order) {
    const LiveValue& lv = values[v];
    for (int c : lv.in_place_candidates) {
      const LiveValue& cv = values[c];
      if (taken[c] || cv.def >= lv.def || cv.last_use != lv.def || cv.bytes != lv.bytes) continue;
      taken[c] = true;
      r.in_place_of[v] = c;
      root[v] = root[c];
      ++r.num_in_place;
      break;
    }
  }
  return root;
}

// The offset of the smallest gap among `busy` (placed buffers overlapping in time) that holds
// `size` bytes, or the end of the highest one.
int64_t best_fit(std::vector<const Buffer*>& busy, int64_t size) {
  std::sort(busy.begin(), busy.end(),
            [](const Buffer* a, const Buffer* b) { return a->offset < b->offset; });
  int64_t cursor = 0, best = -1, best_gap = std::numeric_limits<int64_t>::max();
  for (const Buffer* p : busy) {
    int64_t gap = p->offset - cursor;
    if (gap >= size && gap < best_gap) {
      best = cursor;
      best_gap = gap;
    }
    cursor = std::max(cursor, p->offset + p->size);
  }
  return best >= 0 ? best : cursor;
}

}  // namespace

BufferAssignment assign_buffers(const std::vector<LiveValue>& values, int64_t alignment) {
  check(values, alignment);
  const int n = static_cast<int>(values.size());
  BufferAssignment r;
  r.offsets.assign(n, 0);
  r.in_place_of.assign(n, -1);
  r.reused.assign(n, false);
  std::vector<int> root = chain_in_place(values, r);

  std::vector<Buffer> buffers;
  std::vector<int> buffer_of(n, -1);
  for (int v = 0; v < n; ++v) {
    r.total_bytes += align_bytes(values[v].bytes, alignment);
    if (root[v] != v) continue;
    buffer_of[v] = static_cast<int>(buffers.size());
    buffers.push_back(
        {v, align_bytes(values[v].bytes, alignment), values[v].def, values[v].last_use, 0});
  }
  for (int v = 0; v < n; ++v) {
    Buffer& b = buffers[buffer_of[root[v]]];
    b.end = std::max(b.end, values[v].last_use);
  }

  // Largest first; among equals, earliest first (deterministic).
  std::vector<int> order(buffers.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    const Buffer &x = buffers[a], &y = buffers[b];
    if (x.size != y.size) return x.size > y.size;
    if (x.start != y.start) return x.start < y.start;
    return a < b;
  });
  std::vector<const Buffer*> placed, busy;
  for (int i : order) {
    Buffer& b = buffers[i];
    if (b.size == 0) continue;  // occupies nothing; offset 0
    busy.clear();
    for (const Buffer* p : placed)
      if (p->start <= b.end && b.start <= p->end) busy.push_back(p);
    b.offset = best_fit(busy, b.size);
    r.arena_bytes = std::max(r.arena_bytes, b.offset + b.size);
    placed.push_back(&b);
  }

  // A buffer reuses memory when it overlaps one that died before it was defined.
  for (const Buffer& b : buffers) {
    for (const Buffer* p : placed) {
      if (p->end < b.start && p->offset < b.offset + b.size && b.offset < p->offset + p->size) {
        r.reused[b.root] = true;
        ++r.num_reused;
        break;
      }
    }
  }
  for (int v = 0; v < n; ++v) r.offsets[v] = buffers[buffer_of[root[v]]].offset;

  // The live minimum, over buffers (an in-place chain needs one buffer).
  int points = 0;
  for (const Buffer& b : buffers) points = std::max(points, b.end + 1);
  std::vector<int64_t> delta(points + 1, 0);
  for (const Buffer& b : buffers) {
    delta[b.start] += b.size;
    delta[b.end + 1] -= b.size;
  }
  int64_t live = 0;
  for (int t = 0; t < points; ++t) {
    live += delta[t];
    r.live_min_bytes = std::max(r.live_min_bytes, live);
  }
  return r;
}

}  // namespace kiln::compiler
