// Where an Executable's values live: a slot per value, liveness over the thunk order, the
// arena plan from buffer assignment (with in-place writes), and fetched outputs' pooled blocks.
#include <algorithm>
#include <fstream>

#include "compiler/buffer_assignment.h"
#include "compiler/dump.h"
#include "compiler/executable_impl.h"

namespace kiln::compiler {

// Whether fused thunk `t` reads `slot` only at the element it writes, so an output of the
// slot's shape may overwrite it: a loop over elementwise primitives (no reductions) that does
// not read the slot through an index map (a transposed or sliced read).
bool overwrites_safely(const Thunk& t, const CompiledFusion& kernel, int slot) {
  if (!kernel.in_place_safe()) return false;  // reductions
  const std::vector<FusedSubgraph::Input>& inputs = kernel.subgraph().inputs;
  for (size_t k = 0; k < t.in.size() && k < inputs.size(); ++k)
    if (t.in[k] == slot && inputs[k].map) return false;
  return true;
}

// Gives every value a run ever holds a slot, and each thunk its input and output slots.
void assign_slots(Impl& im, const std::vector<int>& placeholders,
                  const std::vector<std::pair<int, std::vector<Tensor>>>& constants,
                  const std::vector<ValueRef>& fetched) {
  const int n = static_cast<int>(im.nodes.size());
  std::vector<int> first_slot(n, -1);
  auto add = [&](int node, int outputs, Where where) {
    first_slot[node] = static_cast<int>(im.slots.size());
    for (int k = 0; k < outputs; ++k) {
      const TensorType& type = im.types[node][k];
      im.slots.push_back({{node, k},
                          type,
                          num_elements(type.shape) * static_cast<int64_t>(dtype_size(type.dtype)),
                          where,
                          0});
    }
  };
  for (int id : placeholders) {
    add(id, 1, Where::kFed);
    im.placeholder_slots.push_back(first_slot[id]);
  }
  for (const auto& [id, values] : constants) {
    add(id, static_cast<int>(values.size()), Where::kConstant);
    for (size_t k = 0; k < values.size(); ++k)
      im.constants.push_back({first_slot[id] + static_cast<int>(k), values[k]});
  }
  for (Thunk& t : im.thunks) {
    if (t.fused >= 0) {
      for (int node : t.outputs) add(node, 1, Where::kArena);
      for (int node : t.outputs) t.out.push_back(first_slot[node]);
    } else {
      add(t.node, static_cast<int>(im.types[t.node].size()), Where::kArena);
      for (size_t k = 0; k < im.types[t.node].size(); ++k)
        t.out.push_back(first_slot[t.node] + static_cast<int>(k));
    }
  }
  auto slot_of = [&](ValueRef v) { return first_slot[v.node] + v.output; };
  for (Thunk& t : im.thunks)
    for (const ValueRef& in : t.inputs) t.in.push_back(slot_of(in));
  for (const ValueRef& f : fetched) {
    int s = slot_of(f);
    im.fetched.push_back(s);
    if (im.slots[s].where != Where::kArena) continue;
    im.slots[s].where = Where::kOutput;
    im.slots[s].offset = static_cast<int64_t>(im.outputs->free.size());
    im.outputs->free.emplace_back();
  }

  // Original placeholders -> slots, for binding feeds without a hash lookup.
  for (const auto& [original, current] : im.cg.placeholders_) {
    if (original >= static_cast<int>(im.feed_slot.size()))
      im.feed_slot.resize(original + 1, Impl::kNotFed);
    if (first_slot[current] >= 0) im.feed_slot[original] = first_slot[current];
  }
}

// Liveness over the thunk order, release points, and the arena plan.
void plan_memory(Impl& im) {
  const int num_slots = static_cast<int>(im.slots.size());
  std::vector<int> def(num_slots, -1), last_use(num_slots, -1);
  for (int k = 0; k < static_cast<int>(im.thunks.size()); ++k) {
    for (int s : im.thunks[k].out) def[s] = last_use[s] = k;
    for (int s : im.thunks[k].in) last_use[s] = k;
  }
  std::vector<int> fetch_count(num_slots, 0);
  for (int s : im.fetched) ++fetch_count[s];
  for (int s = 0; s < num_slots; ++s)
    if (fetch_count[s] == 0 && last_use[s] >= 0) im.thunks[last_use[s]].release.push_back(s);
  plan_donations(im, def, last_use, fetch_count);

  std::vector<int> arena_index(num_slots, -1), arena_slots;
  std::vector<LiveValue> values;
  for (int s = 0; s < num_slots; ++s) {
    if (im.slots[s].where != Where::kArena) continue;
    arena_index[s] = static_cast<int>(values.size());
    arena_slots.push_back(s);
    values.push_back({im.slots[s].bytes, def[s], last_use[s], {}});
  }
  // In place: a fused elementwise output over an arena input of its shape and size.
  for (const Thunk& t : im.thunks) {
    if (t.fused < 0 || !im.kernels[t.fused]->in_place_safe()) continue;
    const Shape& shape = im.kernels[t.fused]->shape();
    for (int o : t.out) {
      const Impl::Slot& out = im.slots[o];
      if (arena_index[o] < 0 || out.type.shape != shape) continue;
      for (int i : t.in) {
        const Impl::Slot& in = im.slots[i];
        if (arena_index[i] >= 0 && in.type.shape == shape && in.bytes == out.bytes &&
            overwrites_safely(t, *im.kernels[t.fused], i))
          values[arena_index[o]].in_place_candidates.push_back(arena_index[i]);
      }
    }
  }
  BufferAssignment plan = assign_buffers(values);
  for (size_t v = 0; v < values.size(); ++v) im.slots[arena_slots[v]].offset = plan.offsets[v];

  MemoryStats& st = im.stats;
  st.arena_bytes = plan.arena_bytes;
  st.live_min_bytes = plan.live_min_bytes;
  st.no_reuse_bytes = plan.total_bytes;
  st.num_buffers = static_cast<int>(values.size());
  st.num_reused = plan.num_reused;
  st.num_in_place = plan.num_in_place;
  for (const Impl::Slot& s : im.slots) {
    if (s.where == Where::kFed) st.fed_bytes += s.bytes;
    if (s.where == Where::kOutput) st.output_bytes += s.bytes;
    if (s.where == Where::kConstant) st.constant_bytes += s.bytes;
  }

  if (const std::string& dir = current_dump_dir(); !dir.empty()) {
    std::ofstream out(dir + "/buffers.txt");
    out << "arena " << st.arena_bytes << " bytes (live minimum " << st.live_min_bytes
        << ", without reuse " << st.no_reuse_bytes << "); " << st.num_buffers << " buffers, "
        << st.num_reused << " reused, " << st.num_in_place << " in place\n";
    for (const Impl::Alias& a : im.aliases) {
      static const char* kKinds[] = {"in place", "copied", "the feed itself", "never"};
      out << "donation: output " << a.output << " into feed '" << a.feed_name
          << "': " << kKinds[static_cast<int>(a.kind)];
      if (a.thunk >= 0) out << " (thunk " << a.thunk << ")";
      out << "\n";
    }
    for (size_t v = 0; v < values.size(); ++v) {
      const Impl::Slot& s = im.slots[arena_slots[v]];
      out << "%" << s.value.node << ":" << s.value.output << " " << s.type.str() << " " << s.bytes
          << " bytes live [" << values[v].def << ", " << values[v].last_use << "] at " << s.offset;
      if (plan.in_place_of[v] >= 0) {
        const Impl::Slot& in = im.slots[arena_slots[plan.in_place_of[v]]];
        out << " in place of %" << in.value.node << ":" << in.value.output;
      }
      out << "\n";
    }
  }
}

// A tensor for fetched slot `s`, over a recycled block when one is free.
Tensor output_tensor(const std::shared_ptr<OutputPool>& pool, const Impl::Slot& s) {
  const size_t k = static_cast<size_t>(s.offset);
  void* block = nullptr;
  {
    std::lock_guard lock(pool->mu);
    if (!pool->free[k].empty()) {
      block = pool->free[k].back();
      pool->free[k].pop_back();
    }
  }
  if (!block) {
    size_t n = static_cast<size_t>(align_bytes(std::max<int64_t>(s.bytes, 1)));
    block = ::operator new(n, std::align_val_t(detail::kAlignment), std::nothrow);
    if (!block) {
      throw Error(ErrorCode::kOutOfRange, "run: out of memory: cannot allocate " +
                                              std::to_string(s.bytes) + " bytes for an output");
    }
  }
  std::shared_ptr<void> owner(block, [weak = std::weak_ptr<OutputPool>(pool), k](void* p) {
    if (auto pool = weak.lock()) {
      std::lock_guard lock(pool->mu);
      if (pool->free[k].size() < OutputPool::kKeep) {
        pool->free[k].push_back(p);
        return;
      }
    }
    ::operator delete(p, std::align_val_t(detail::kAlignment));
  });
  auto impl = detail::make_pooled<detail::TensorImpl>();
  impl->dtype = s.type.dtype;
  impl->shape = s.type.shape;
  impl->storage = detail::make_pooled<detail::Storage>(std::move(owner), block, s.bytes);
  return Tensor(std::move(impl));
}

}  // namespace kiln::compiler
