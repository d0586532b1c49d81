// Buffer assignment: places values with known live ranges in one arena so that no two values
// live at the same program point overlap, reusing the memory of dead values (greedy by size,
// best fit, as XLA's heap simulator and TFLite's arena planner do) and letting a value take
// the buffer of an input that dies where it is defined (in place).
#pragma once

#include <cstdint>
#include <vector>

namespace kiln::compiler {

// One value to place. Program points are thunk indices; the value is live over [def, last_use]
// (inclusive: a thunk's inputs and outputs are live at the same point, so they never share
// memory unless the output is written in place).
struct LiveValue {
  int64_t bytes = 0;
  int def = 0;
  int last_use = 0;  // >= def (def when nothing reads it)
  // Values (indices) whose buffer this one may take in place, in order of preference: the
  // caller vouches that the op allows it (an elementwise kernel reading each input element
  // only where it writes the same output element). assign_buffers takes a candidate only when
  // it dies at `def`, has the same byte size and no other value took it.
  std::vector<int> in_place_candidates;
};

struct BufferAssignment {
  std::vector<int64_t> offsets;  // per value, a multiple of the alignment
  std::vector<int> in_place_of;  // per value: the value whose buffer it took, or -1
  std::vector<bool> reused;      // per value: placed over memory of a value dead by its def
  int64_t arena_bytes = 0;       // the planned peak: the arena's size
  int64_t live_min_bytes = 0;    // max over program points of the live (aligned) bytes
  int64_t total_bytes = 0;       // sum of aligned sizes: the arena without any reuse
  int num_in_place = 0;
  int num_reused = 0;
};

inline constexpr int64_t kBufferAlignment = 64;

inline int64_t align_bytes(int64_t bytes, int64_t alignment = kBufferAlignment) {
  return (bytes + alignment - 1) / alignment * alignment;
}

// Places `values`. In-place chains (a value taking an input's buffer, itself perhaps taken by
// a later value) become one buffer live over the union of their ranges; buffers are placed
// largest first, each in the smallest gap left by the already placed buffers it overlaps in
// time. Sizes are rounded up to `alignment`, which live_min_bytes also counts (no 64-byte
// aligned placement can do better). Throws kiln::Error for a negative size or a bad range.
BufferAssignment assign_buffers(const std::vector<LiveValue>& values,
                                int64_t alignment = kBufferAlignment);

}  // namespace kiln::compiler
