// The thunk scheduler: a graph-order baseline, a greedy list scheduler (among ready units, the one
// that frees the most arena bytes net of what it allocates) and a depth-first scheduler (deepest
// subtree first, so big intermediates die early), judged by the buffer assignment's plan.
#include "compiler/schedule.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "compiler/buffer_assignment.h"
#include "kiln/error.h"

namespace kiln::compiler {
namespace {

[[noreturn]] void internal(const std::string& message) {
  throw Error(ErrorCode::kInternal, "schedule: " + message);
}

int64_t key(ValueRef v) { return (static_cast<int64_t>(v.node) << 32) | uint32_t(v.output); }

// The units' dependencies over the values they write (other values are free: always ready).
struct Problem {
  int n = 0;
  std::vector<std::vector<int>> deps, users;    // per unit, each other unit once, ascending users
  std::vector<std::vector<int>> reads, writes;  // per unit: indices of written values, each once
  std::vector<int64_t> bytes;                   // per written value: arena bytes (aligned)
  std::vector<int> num_readers;                 // per written value: units reading it

  Problem(const std::vector<ScheduleUnit>& units, const ValueSizes& sizes)
      : n(static_cast<int>(units.size())), deps(n), users(n), reads(n), writes(n) {
    std::unordered_map<int64_t, int> value_of;
    std::vector<int> producer;
    std::unordered_set<int64_t> outside;
    for (const ValueRef& v : sizes.outside) outside.insert(key(v));
    for (int u = 0; u < n; ++u) {
      for (const ValueRef& v : units[u].writes) {
        auto [it, fresh] = value_of.emplace(key(v), static_cast<int>(bytes.size()));
        if (!fresh) {
          internal("value %" + std::to_string(v.node) + ":" + std::to_string(v.output) +
                   " is written by two units");
        }
        int64_t b = 0;
        if (!outside.count(key(v))) {
          const TensorType& t = sizes.types.at(v.node).at(v.output);
          b = align_bytes(std::max<int64_t>(num_elements(t.shape), 0) *
                          static_cast<int64_t>(dtype_size(t.dtype)));
        }
        bytes.push_back(b);
        producer.push_back(u);
        writes[u].push_back(it->second);
      }
    }
    num_readers.assign(bytes.size(), 0);
    for (int u = 0; u < n; ++u) {
      for (const ValueRef& r : units[u].reads) {
        auto it = value_of.find(key(r));
        if (it == value_of.end()) continue;
        int v = it->second, p = producer[v];
        if (std::find(reads[u].begin(), reads[u].end(), v) == reads[u].end()) {
          reads[u].push_back(v);
          ++num_readers[v];
        }
        if (p != u && std::find(deps[u].begin(), deps[u].end(), p) == deps[u].end()) {
          deps[u].push_back(p);
          users[p].push_back(u);
        }
      }
      for (int a : units[u].after) {
        if (a < 0 || a >= n)
          internal("unit " + std::to_string(u) + " runs after no unit " + std::to_string(a));
        if (a != u && std::find(deps[u].begin(), deps[u].end(), a) == deps[u].end()) {
          deps[u].push_back(a);
          users[a].push_back(u);
        }
      }
    }
    for (std::vector<int>& us : users) std::sort(us.begin(), us.end());
  }
};

// Kahn's algorithm with a stack: the earliest ready unit first, then what it made ready (the
// order Executable used before scheduling existed).
std::vector<int> graph_order(const Problem& p) {
  std::vector<int> pending(p.n), ready, order;
  for (int u = 0; u < p.n; ++u) pending[u] = static_cast<int>(p.deps[u].size());
  for (int u = p.n - 1; u >= 0; --u)
    if (pending[u] == 0) ready.push_back(u);
  while (!ready.empty()) {
    int u = ready.back();
    ready.pop_back();
    order.push_back(u);
    for (int w : p.users[u])
      if (--pending[w] == 0) ready.push_back(w);
  }
  if (static_cast<int>(order.size()) != p.n) internal("the units' dependencies have a cycle");
  return order;
}

// Greedy list scheduling: repeatedly runs the ready unit with the largest (bytes it frees - bytes
// it allocates), ties going to the earlier unit of `base`.
std::vector<int> list_order(const Problem& p, const std::vector<int>& base) {
  std::vector<int> rank(p.n), pending(p.n), ready, order;
  for (int i = 0; i < p.n; ++i) rank[base[i]] = i;
  std::vector<int> readers_left = p.num_readers;
  for (int u = 0; u < p.n; ++u) {
    pending[u] = static_cast<int>(p.deps[u].size());
    if (pending[u] == 0) ready.push_back(u);
  }
  auto gain = [&](int u) {
    int64_t g = 0;
    for (int v : p.reads[u])
      if (readers_left[v] == 1) g += p.bytes[v];
    for (int v : p.writes[u])
      if (p.num_readers[v] > 0) g -= p.bytes[v];
    return g;
  };
  while (!ready.empty()) {
    size_t best = 0;
    int64_t best_gain = gain(ready[0]);
    for (size_t i = 1; i < ready.size(); ++i) {
      int64_t g = gain(ready[i]);
      if (g > best_gain || (g == best_gain && rank[ready[i]] < rank[ready[best]])) {
        best = i;
        best_gain = g;
      }
    }
    int u = ready[best];
    ready.erase(ready.begin() + static_cast<std::ptrdiff_t>(best));
    order.push_back(u);
    for (int v : p.reads[u]) --readers_left[v];
    for (int w : p.users[u])
      if (--pending[w] == 0) ready.push_back(w);
  }
  return order;
}

// Depth-first post-order from the units nothing reads, visiting a unit's producers largest
// subtree (the bytes written by it and everything it depends on, counted per path) first: the
// expensive branch runs and is consumed before the next one starts.
std::vector<int> dfs_order(const Problem& p, const std::vector<int>& base) {
  constexpr int64_t kCap = std::numeric_limits<int64_t>::max() / 4;
  std::vector<int> rank(p.n);
  for (int i = 0; i < p.n; ++i) rank[base[i]] = i;
  std::vector<int64_t> subtree(p.n, 0);
  for (int u : base) {  // producers before users
    int64_t s = 0;
    for (int v : p.writes[u]) s += p.bytes[v];
    for (int d : p.deps[u]) s = std::min(kCap, s + subtree[d]);
    subtree[u] = std::min(kCap, s);
  }
  std::vector<std::vector<int>> children = p.deps;
  for (auto& c : children) {
    std::sort(c.begin(), c.end(), [&](int a, int b) {
      return subtree[a] != subtree[b] ? subtree[a] > subtree[b] : rank[a] < rank[b];
    });
  }
  std::vector<char> done(p.n, 0);
  std::vector<int> order;
  std::vector<std::pair<int, size_t>> stack;  // unit, next child to visit
  for (int root : base) {
    if (!p.users[root].empty() || done[root]) continue;
    stack.push_back({root, 0});
    done[root] = 1;
    while (!stack.empty()) {
      const int u = stack.back().first;
      size_t& next = stack.back().second;
      if (next < children[u].size()) {
        const int c = children[u][next++];
        if (!done[c]) {
          done[c] = 1;
          stack.push_back({c, 0});
        }
        continue;
      }
      order.push_back(u);
      stack.pop_back();
    }
  }
  return order;
}

// `base` with the units' placements applied: among the ready units, an early one first, then
// one that does not depend on a late unit, then the rest; by their rank in `base` within each
// class. Without placements, `base` itself.
std::vector<int> place_async(const Problem& p, const std::vector<ScheduleUnit>& units,
                             const std::vector<int>& base) {
  using Placement = ScheduleUnit::Placement;
  std::vector<int> rank(p.n), pending(p.n), order;
  for (int i = 0; i < p.n; ++i) rank[base[i]] = i;
  std::vector<char> deferred(p.n, 0);  // late, or depends on a late unit
  for (int u : base) {
    deferred[u] = units[u].placement == Placement::kLate;
    for (int d : p.deps[u]) deferred[u] |= deferred[d];
  }
  auto by_rank = [&](int a, int b) { return rank[a] > rank[b]; };  // min-heaps by rank
  std::vector<int> ready[3];                                       // early, not deferred, deferred
  auto push = [&](int u) {
    std::vector<int>& r = ready[units[u].placement == Placement::kEarly ? 0 : deferred[u] ? 2 : 1];
    r.push_back(u);
    std::push_heap(r.begin(), r.end(), by_rank);
  };
  for (int u = 0; u < p.n; ++u) {
    pending[u] = static_cast<int>(p.deps[u].size());
    if (pending[u] == 0) push(u);
  }
  while (static_cast<int>(order.size()) < p.n) {
    std::vector<int>* r = &ready[0];
    while (r->empty()) ++r;
    std::pop_heap(r->begin(), r->end(), by_rank);
    const int u = r->back();
    r->pop_back();
    order.push_back(u);
    for (int w : p.users[u])
      if (--pending[w] == 0) push(w);
  }
  return order;
}

bool has_placements(const std::vector<ScheduleUnit>& units) {
  for (const ScheduleUnit& u : units)
    if (u.placement != ScheduleUnit::Placement::kAny) return true;
  return false;
}

int64_t arena_of(const Problem& p, const std::vector<int>& order) {
  std::vector<int> def(p.bytes.size(), 0), last(p.bytes.size(), 0);
  for (int k = 0; k < p.n; ++k) {
    int u = order[k];
    for (int v : p.writes[u]) def[v] = last[v] = k;
  }
  for (int k = 0; k < p.n; ++k)
    for (int v : p.reads[order[k]]) last[v] = std::max(last[v], k);
  std::vector<LiveValue> values;
  for (size_t v = 0; v < p.bytes.size(); ++v)
    if (p.bytes[v] > 0) values.push_back({p.bytes[v], def[v], last[v], {}});
  return assign_buffers(values).arena_bytes;
}

}  // namespace

ScheduleUnit::Placement placement_of_op(const std::string& op) {
  if (op == "all_reduce_start") return ScheduleUnit::Placement::kEarly;
  if (op == "all_reduce_done") return ScheduleUnit::Placement::kLate;
  return ScheduleUnit::Placement::kAny;
}

ScheduleKind default_schedule_kind() {
  const char* env = std::getenv("KILN_SCHEDULE");
  const std::string value = env ? env : "";
  if (value.empty() || value == "memory") return ScheduleKind::kMemory;
  if (value == "graph") return ScheduleKind::kGraphOrder;
  throw Error(ErrorCode::kInvalidArgument,
              "KILN_SCHEDULE='" + value + "': expected 'memory' or 'graph'");
}

std::vector<int> schedule_units(const std::vector<ScheduleUnit>& units, const ValueSizes& sizes,
                                ScheduleKind kind) {
  const Problem p(units, sizes);
  std::vector<int> best = graph_order(p);
  if (kind == ScheduleKind::kMemory) {
    int64_t best_bytes = arena_of(p, best);
    for (std::vector<int> order : {list_order(p, best), dfs_order(p, best)}) {
      int64_t bytes = arena_of(p, order);
      if (bytes < best_bytes) {
        best = std::move(order);
        best_bytes = bytes;
      }
    }
  }
  return has_placements(units) ? place_async(p, units, best) : best;
}

int64_t planned_arena_bytes(const std::vector<ScheduleUnit>& units, const ValueSizes& sizes,
                            const std::vector<int>& order) {
  const Problem p(units, sizes);
  if (static_cast<int>(order.size()) != p.n) internal("the order does not list every unit");
  return arena_of(p, order);
}

}  // namespace kiln::compiler
