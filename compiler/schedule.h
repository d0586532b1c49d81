// Scheduling: the order in which an Executable runs its thunks, chosen to lower the memory live
// at once (and so the arena buffer assignment plans over that order), in the spirit of XLA's
// DefaultMemoryScheduler: several heuristic orders are built and the one whose arena plan is
// smallest wins.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/graph.h"

namespace kiln::compiler {

// One unit of work to order (a thunk): the values it reads and the values it defines.
struct ScheduleUnit {
  std::vector<ValueRef> reads;
  std::vector<ValueRef> writes;
  // Units (indices) that must run before this one besides the producers of what it reads: a
  // donated feed's other readers before the unit that overwrites it.
  std::vector<int> after;
  // An asynchronous collective's start runs as soon as it is ready (kEarly); its done (kLate),
  // and everything that depends on it, only once no other unit is ready: the communication
  // then overlaps every unit that does not need its result.
  enum class Placement : uint8_t { kAny, kEarly, kLate };
  Placement placement = Placement::kAny;
};

enum class ScheduleKind {
  kGraphOrder,  // the graph's order: depth first from the earliest ready unit (no memory model)
  kMemory,      // the smallest planned arena among the graph order, a greedy list order and a
                // depth-first order by subtree size (the default; KILN_SCHEDULE=graph selects
                // kGraphOrder instead)
};

// The placement of a kernel thunk of `op`: kEarly for an asynchronous collective's start
// (all_reduce_start), kLate for its done (all_reduce_done), else kAny.
ScheduleUnit::Placement placement_of_op(const std::string& op);

// KILN_SCHEDULE=graph: kGraphOrder; unset or "memory": kMemory (anything else throws).
ScheduleKind default_schedule_kind();

// The arena bytes a value takes while live: 0 for the values listed in `outside` (fetched
// outputs) and for values no unit writes (placeholders, constants); else its size from `types`
// (indexed by node, then output).
struct ValueSizes {
  const std::vector<std::vector<TensorType>>& types;
  const std::vector<ValueRef>& outside;
};

// An order of the units (indices into `units`) in which each unit comes after every unit that
// writes a value it reads, and each unit's placement is honoured (for either kind). Throws
// kiln::Error (internal) if the units' dependencies have a cycle or two units write the same value.
std::vector<int> schedule_units(const std::vector<ScheduleUnit>& units, const ValueSizes& sizes,
                                ScheduleKind kind = default_schedule_kind());

// The arena the buffer assignment plans for `units` run in `order` (without in-place reuse):
// what kMemory minimises.
int64_t planned_arena_bytes(const std::vector<ScheduleUnit>& units, const ValueSizes& sizes,
                            const std::vector<int>& order);

}  // namespace kiln::compiler
