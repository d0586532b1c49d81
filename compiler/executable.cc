// The compiled execution path: optimize, plan fusion for concrete shapes, JIT each group once,
// order fused-kernel and reference-kernel thunks into one flat sequence, and plan their values
// in one arena. Everything a run needs is precomputed here: a run only walks slots.
#include "compiler/executable.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <new>
#include <unordered_map>

#include "compiler/buffer_assignment.h"
#include "compiler/kernel_cache.h"
#include "compiler/lowering.h"
#include "compiler/schedule.h"
#include "runtime/execute.h"
#include "src/core/host_allocator.h"
#include "src/core/tensor_impl.h"

namespace kiln::compiler {

// Blocks for fetched outputs, per output: a block comes back when the caller has dropped every
// tensor viewing it, so the next run writes its outputs without fresh pages (and page faults)
// yet never over memory the caller still holds.
struct OutputPool {
  static constexpr size_t kKeep = 2;  // blocks kept per output
  std::mutex mu;
  std::vector<std::vector<void*>> free;
  ~OutputPool() {
    for (auto& blocks : free)
      for (void* p : blocks) ::operator delete(p, std::align_val_t(detail::kAlignment));
  }
};

struct Executable::Impl {
  // Where a value lives during a run.
  enum class Where : uint8_t {
    kFed,       // the caller's tensor
    kConstant,  // computed at compile time, held here
    kArena,     // a view of the run's arena at `offset`
    kOutput,    // fetched: a block of `outputs`, handed to the caller
  };
  struct Slot {
    ValueRef value;  // in the optimized graph
    TensorType type;
    int64_t bytes = 0;
    Where where = Where::kArena;
    int64_t offset = 0;  // kArena: the offset; kOutput: the index in `outputs`
  };
  struct Thunk {
    int node = -1;                      // kernel thunk: the node it runs
    int fused = -1;                     // fused thunk: index into kernels
    const KernelDef* kernel = nullptr;  // kernel thunk (null: looked up, and refused, per run)
    std::vector<ValueRef> inputs;       // (compile time) the values it reads
    std::vector<int> outputs;           // (compile time, fused) the nodes its outputs stand for
    std::vector<int> in, out;           // slots read and written
    std::vector<int> release;           // slots no later thunk reads
    std::string description;
  };
  CompiledGraph cg;
  std::vector<detail::Node> nodes;
  std::vector<std::vector<TensorType>> types;
  std::vector<Slot> slots;
  std::vector<int> placeholder_slots;             // needed placeholders
  std::vector<int> feed_slot;                     // by original node id (kNotFed: none)
  std::vector<std::pair<int, Tensor>> constants;  // slot, value
  std::vector<int> fetched;                       // slot of each requested output
  std::vector<cpu::FusedKernel> kernels;
  std::vector<Thunk> thunks;
  MemoryStats stats;
  std::string fusion_log;
  // One arena block kept for the next run that finds it free.
  mutable std::mutex arena_mu;
  mutable std::shared_ptr<detail::Storage> spare_arena;
  std::shared_ptr<OutputPool> outputs = std::make_shared<OutputPool>();

  static constexpr int kNotFed = -1;  // not a needed placeholder
};

namespace {

bool shape_matches(const Shape& want, const Shape& got) {
  if (want.size() != got.size()) return false;
  for (size_t i = 0; i < want.size(); ++i)
    if (want[i] != kUnknownDim && want[i] != got[i]) return false;
  return true;
}

bool fully_known(const Shape& s) {
  for (int64_t d : s)
    if (d < 0) return false;
  return true;
}

// Maps feeds keyed by the original graph onto the optimized graph's node ids, checking each.
std::unordered_map<int, Tensor> map_feeds(const CompiledGraph& cg,
                                          const std::vector<detail::Node>& nodes,
                                          const FeedList& feeds, const char* what) {
  std::unordered_map<int, Tensor> fed;
  for (const auto& [key, value] : feeds) {
    int id = cg.placeholder(key).impl()->node;
    const detail::Node& node = nodes[id];
    if (!value.defined() || value.is_symbolic()) {
      throw Error(ErrorCode::kInvalidArgument, std::string(what) +
                                                   ": the value fed to placeholder '" + node.name +
                                                   "' must be concrete");
    }
    const TensorType& want = node.outputs[0];
    if (value.dtype() != want.dtype || !shape_matches(want.shape, value.shape())) {
      throw Error(ErrorCode::kInvalidArgument,
                  std::string(what) + ": feed for placeholder '" + node.name + "' is " +
                      TensorType{value.dtype(), value.shape()}.str() + ", expected " + want.str());
    }
    fed[id] = value;
  }
  return fed;
}

// Whether a fused kernel reads each input element only where it writes the same output
// element (the flat or row loop over elementwise ops): an output may then overwrite an input
// of the output's shape.
bool writes_in_place_safely(const cpu::FusedKernel& kernel) {
  if (!kernel.in_place_safe()) return false;  // reductions
  for (const cpu::FusedSubgraph::Node& node : kernel.subgraph().nodes)
    if (node.op > cpu::EltOp::kClamp) return false;
  return true;
}

using Impl = Executable::Impl;
using Thunk = Executable::Impl::Thunk;
using Where = Executable::Impl::Where;

// Concrete types of every needed node; records the needed placeholders' node ids.
void infer_node_types(Impl& im, const std::vector<bool>& needed,
                      const std::unordered_map<int, Tensor>& fed, std::vector<int>& placeholders) {
  const auto& nodes = im.nodes;
  im.types.resize(nodes.size());
  for (size_t id = 0; id < nodes.size(); ++id) {
    if (!needed[id]) continue;
    const detail::Node& node = nodes[id];
    if (node.op == "placeholder") {
      placeholders.push_back(static_cast<int>(id));
      if (auto it = fed.find(static_cast<int>(id)); it != fed.end()) {
        im.types[id] = {TensorType{it->second.dtype(), it->second.shape()}};
      } else if (fully_known(node.outputs[0].shape)) {
        im.types[id] = node.outputs;
      } else {
        throw Error(ErrorCode::kInvalidArgument,
                    "compile: placeholder '" + node.name + "' (" + node.outputs[0].str() +
                        ") has unknown dimensions: feed an example value to compile for");
      }
      continue;
    }
    if (node.inputs.empty()) {
      im.types[id] = node.outputs;
      continue;
    }
    std::vector<TensorType> in_types;
    for (const ValueRef& in : node.inputs) in_types.push_back(im.types[in.node][in.output]);
    im.types[id] = runtime::infer_types(*node.def, node.name, in_types, node.attrs);
  }
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
  std::vector<bool> is_fetched(num_slots, false);
  for (int s : im.fetched) is_fetched[s] = true;
  for (int s = 0; s < num_slots; ++s)
    if (!is_fetched[s] && last_use[s] >= 0) im.thunks[last_use[s]].release.push_back(s);

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
    if (t.fused < 0 || !writes_in_place_safely(im.kernels[t.fused])) continue;
    const Shape& shape = im.kernels[t.fused].shape();
    for (int o : t.out) {
      const Impl::Slot& out = im.slots[o];
      if (arena_index[o] < 0 || out.type.shape != shape) continue;
      for (int i : t.in) {
        const Impl::Slot& in = im.slots[i];
        if (arena_index[i] >= 0 && in.type.shape == shape && in.bytes == out.bytes)
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

  if (const char* dir = std::getenv("KILN_DUMP"); dir && *dir) {
    std::ofstream out(std::string(dir) + "/buffers.txt");
    out << "arena " << st.arena_bytes << " bytes (live minimum " << st.live_min_bytes
        << ", without reuse " << st.no_reuse_bytes << "); " << st.num_buffers << " buffers, "
        << st.num_reused << " reused, " << st.num_in_place << " in place\n";
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

// One run's arena: the executable's spare block when free, else a new one. Views keep the
// block alive; it goes back for the next run only when no view outlived this one.
class ArenaLease {
 public:
  explicit ArenaLease(const Impl& im) : im_(im) {
    {
      std::lock_guard lock(im.arena_mu);
      block_ = std::move(im.spare_arena);
    }
    if (!block_) block_ = detail::make_pooled<detail::Storage>(im.stats.arena_bytes);
    base_ = static_cast<char*>(block_->data);
  }
  ~ArenaLease() {
    if (block_.use_count() != 1) return;
    std::lock_guard lock(im_.arena_mu);
    if (!im_.spare_arena) im_.spare_arena = std::move(block_);
  }
  ArenaLease(const ArenaLease&) = delete;
  ArenaLease& operator=(const ArenaLease&) = delete;

  Tensor view(const Impl::Slot& s) const {
    auto impl = detail::make_pooled<detail::TensorImpl>();
    impl->dtype = s.type.dtype;
    impl->shape = s.type.shape;
    impl->storage = detail::make_pooled<detail::Storage>(block_, base_ + s.offset, s.bytes);
    return Tensor(std::move(impl));
  }
  bool contains(const void* p) const {
    auto* c = static_cast<const char*>(p);
    return c >= base_ && c < base_ + im_.stats.arena_bytes;
  }
  const char* at(int64_t offset) const { return base_ + offset; }

 private:
  const Impl& im_;
  std::shared_ptr<detail::Storage> block_;
  char* base_ = nullptr;
};

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

// A kernel may return a view of one of its inputs (reshape) instead of writing the buffer
// handed to it. An arena value viewed that way is copied to where the plan put this output
// (or, for a fetched output, to a fresh tensor): the input's memory is reused once it dies.
void settle_kernel_output(const ArenaLease& arena, const Impl::Slot& slot, Tensor& out) {
  if (out.nbytes() == 0) return;
  const void* p = out.raw_data();
  if (!arena.contains(p)) return;
  if (slot.where == Where::kArena && p == arena.at(slot.offset)) return;
  Tensor copy = slot.where == Where::kArena ? arena.view(slot)
                                            : Tensor::empty(slot.type.dtype, slot.type.shape);
  std::memcpy(copy.raw_mutable_data(), p, slot.bytes);
  out = std::move(copy);
}

void bind_feeds(const Impl& im, const FeedList& feeds, std::vector<Tensor>& slots) {
  for (const auto& [key, value] : feeds) {
    int s = Impl::kNotFed;
    if (key.defined() && key.impl()->graph == im.cg.original_) {
      int node = key.impl()->node;
      if (node >= 0 && node < static_cast<int>(im.feed_slot.size())) s = im.feed_slot[node];
    }
    if (s == Impl::kNotFed) {
      im.cg.placeholder(key);  // throws unless `key` is a placeholder the outputs do not need
      continue;
    }
    const Impl::Slot& slot = im.slots[s];
    if (!value.defined() || value.is_symbolic()) {
      throw Error(ErrorCode::kInvalidArgument, "run: the value fed to placeholder '" +
                                                   im.nodes[slot.value.node].name +
                                                   "' must be concrete");
    }
    if (value.dtype() != slot.type.dtype || value.shape() != slot.type.shape) {
      throw Error(ErrorCode::kInvalidArgument,
                  "run: feed for placeholder '" + im.nodes[slot.value.node].name + "' is " +
                      TensorType{value.dtype(), value.shape()}.str() +
                      ", but the executable was compiled for " + slot.type.str() +
                      " (compile again for this shape)");
    }
    slots[s] = value;
  }
  for (int s : im.placeholder_slots) {
    if (slots[s].defined()) continue;
    const detail::Node& node = im.nodes[im.slots[s].value.node];
    throw Error(ErrorCode::kFailedPrecondition, "run: missing feed for placeholder '" + node.name +
                                                    "' (" + node.outputs[0].str() + ") in graph '" +
                                                    im.cg.graph.name() + "'");
  }
}

}  // namespace

Executable compile(const Graph& graph, const std::vector<Tensor>& outputs, const FeedList& feeds) {
  auto impl = std::make_shared<Executable::Impl>();
  Impl& im = *impl;
  im.cg = optimize(graph, outputs);
  const CompiledGraph& cg = im.cg;
  im.nodes = nodes_of(cg.graph);
  const auto& nodes = im.nodes;
  const int n = static_cast<int>(nodes.size());
  std::unordered_map<int, Tensor> fed = map_feeds(cg, nodes, feeds, "compile");

  std::vector<ValueRef> fetched;
  std::vector<bool> needed(n, false);
  std::vector<int> stack;
  for (const Tensor& t : cg.outputs) {
    fetched.push_back({t.impl()->node, t.impl()->output});
    stack.push_back(t.impl()->node);
  }
  while (!stack.empty()) {
    int id = stack.back();
    stack.pop_back();
    if (needed[id]) continue;
    needed[id] = true;
    for (const ValueRef& in : nodes[id].inputs) stack.push_back(in.node);
  }
  std::vector<int> placeholders;
  infer_node_types(im, needed, fed, placeholders);

  FusionPlan plan = plan_fusion(nodes, im.types, needed, fetched);
  im.fusion_log = plan.log();

  // One unit per group and per other needed non-placeholder node; JIT each group. Nodes without
  // inputs (constants) are computed here, once.
  std::vector<int> unit_of(n, -1);
  std::vector<Thunk> units;
  // Lower every group, then JIT all of them together (one LLVM module; cached kernels reused).
  std::vector<LoweredFusion> lowered(plan.groups.size());
  std::vector<cpu::FusedSubgraph> subgraphs;
  std::vector<int> lowered_groups;
  for (int gi = 0; gi < static_cast<int>(plan.groups.size()); ++gi) {
    try {
      lowered[gi] = lower_fusion_group(gi, plan, nodes, im.types);
      lowered[gi].subgraph.name = "fused_" + std::to_string(subgraphs.size());
      subgraphs.push_back(lowered[gi].subgraph);
      lowered_groups.push_back(gi);
    } catch (const Error& e) {
      im.fusion_log += "group of %" + std::to_string(plan.groups[gi].nodes[0]) +
                       " left to the reference kernels: " + e.what() + "\n";
    }
  }
  std::vector<std::string> errors;
  std::vector<cpu::FusedKernel> compiled = cached_kernels(subgraphs, &errors);
  for (size_t k = 0; k < lowered_groups.size(); ++k) {
    const int gi = lowered_groups[k];
    if (!errors[k].empty()) {
      im.fusion_log += "group of %" + std::to_string(plan.groups[gi].nodes[0]) +
                       " left to the reference kernels: " + errors[k] + "\n";
      continue;  // its nodes get kernel thunks below
    }
    Thunk t;
    im.kernels.push_back(std::move(compiled[k]));
    t.fused = static_cast<int>(im.kernels.size()) - 1;
    t.inputs = std::move(lowered[gi].inputs);
    t.outputs = std::move(lowered[gi].outputs);
    t.description = "fused(" + lowered[gi].ops + ") -> " + std::to_string(t.outputs.size()) +
                    " output" + (t.outputs.size() == 1 ? "" : "s");
    for (int m : plan.groups[gi].nodes) unit_of[m] = static_cast<int>(units.size());
    units.push_back(std::move(t));
  }
  std::vector<std::pair<int, std::vector<Tensor>>> constants;
  for (int id = 0; id < n; ++id) {
    const detail::Node& node = nodes[id];
    if (!needed[id] || node.op == "placeholder" || unit_of[id] >= 0) continue;
    if (node.inputs.empty() && !node.def->stateful) {
      try {
        constants.push_back({id, runtime::run_kernel(*node.def, node.name, {}, node.attrs)});
        continue;
      } catch (const Error&) {
        // left to a thunk, which reports the error when the executable runs
      }
    }
    Thunk t;
    t.node = id;
    t.description = "kernel " + node.op;
    for (const ValueRef& in : node.inputs) t.inputs.push_back(in);
    std::vector<TensorType> in_types;
    for (const ValueRef& in : node.inputs) in_types.push_back(im.types[in.node][in.output]);
    try {
      t.kernel = &runtime::find_cpu_kernel(*node.def, in_types, im.types[id]);
    } catch (const Error&) {
      // no kernel for these dtypes: the run reports it
    }
    unit_of[id] = static_cast<int>(units.size());
    units.push_back(std::move(t));
  }
  // The thunk order (compiler/schedule.h) sets what buffer assignment can reuse.
  std::vector<ScheduleUnit> work(units.size());
  for (size_t k = 0; k < units.size(); ++k) {
    const Thunk& t = units[k];
    work[k].reads = t.inputs;
    for (int m : t.outputs) work[k].writes.push_back({m, 0});
    for (size_t o = 0; t.fused < 0 && o < im.types[t.node].size(); ++o)
      work[k].writes.push_back({t.node, static_cast<int>(o)});
  }
  for (int k : schedule_units(work, {im.types, fetched})) im.thunks.push_back(std::move(units[k]));

  assign_slots(im, placeholders, constants, fetched);
  plan_memory(im);
  if (const char* dir = std::getenv("KILN_DUMP"); dir && *dir) {
    std::ofstream(std::string(dir) + "/fusion.txt") << im.fusion_log;
  }
  return Executable(std::move(impl));
}

std::vector<Tensor> Executable::run(const FeedList& feeds) const {
  const Impl& im = *impl_;
  ArenaLease arena(im);  // declared first: it outlives every view below
  std::vector<Tensor> slots(im.slots.size());
  bind_feeds(im, feeds, slots);
  for (const auto& [s, value] : im.constants) slots[s] = value;
  std::vector<Tensor> ins, outs;
  for (const Thunk& t : im.thunks) {
    ins.clear();
    for (int s : t.in) ins.push_back(slots[s]);
    outs.clear();
    outs.resize(t.out.size());
    for (size_t k = 0; k < t.out.size(); ++k) {
      const Impl::Slot& slot = im.slots[t.out[k]];
      if (slot.where == Where::kArena) outs[k] = arena.view(slot);
      if (slot.where == Where::kOutput) outs[k] = output_tensor(im.outputs, slot);
    }
    if (t.fused >= 0) {
      im.kernels[t.fused].run(ins, &outs);
    } else {
      const detail::Node& node = im.nodes[t.node];
      if (t.kernel) {
        runtime::run_prepared_kernel(*t.kernel, *node.def, node.name, ins, node.attrs,
                                     im.types[t.node], &outs);
      } else {
        outs = runtime::run_kernel(*node.def, node.name, ins, node.attrs);
      }
      for (size_t k = 0; k < t.out.size(); ++k)
        settle_kernel_output(arena, im.slots[t.out[k]], outs[k]);
    }
    for (size_t k = 0; k < t.out.size(); ++k) slots[t.out[k]] = std::move(outs[k]);
    for (int s : t.release) slots[s] = Tensor();
  }
  std::vector<Tensor> result;
  result.reserve(im.fetched.size());
  for (int s : im.fetched) result.push_back(slots[s]);
  return result;
}

MemoryStats Executable::memory_stats() const { return impl_->stats; }

int Executable::num_thunks() const { return static_cast<int>(impl_->thunks.size()); }

int Executable::num_fused_thunks() const {
  int k = 0;
  for (const auto& t : impl_->thunks) k += t.fused >= 0;
  return k;
}

std::vector<std::string> Executable::thunk_descriptions() const {
  std::vector<std::string> d;
  for (const auto& t : impl_->thunks) d.push_back(t.description);
  return d;
}

const std::string& Executable::fusion_log() const { return impl_->fusion_log; }
const CompiledGraph& Executable::optimized() const { return impl_->cg; }

}  // namespace kiln::compiler
