// The compiled execution path: optimize, plan fusion for concrete shapes, JIT each group once,
// order fused-kernel and reference-kernel thunks into one flat sequence, and plan their values
// in one arena. Everything a run needs is precomputed here: a run only walks slots.
#include "compiler/executable.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <new>
#include <unordered_map>

#include "compiler/buffer_assignment.h"
#include "compiler/codegen/cpu/fusion_target.h"
#include "compiler/dump.h"
#include "compiler/kernel_cache.h"
#include "compiler/lowering.h"
#include "compiler/pipeline.h"
#include "compiler/schedule.h"
#include "runtime/execute.h"
#include "runtime/feeds.h"
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
    std::vector<int> out_alias;         // per output: the donation it writes directly, or -1
    std::vector<int> copies_after;      // donations copied into their feed after this thunk
    std::string description;
  };
  // A donation (input-output alias) and how the plan writes it.
  struct Alias {
    enum class Kind : uint8_t {
      kDirect,  // the producing thunk writes the output into the fed buffer
      kCopy,    // copied into the fed buffer after `thunk` (the old value's last reader)
      kSame,    // the output is the fed value itself: nothing to write
      kNever,   // the old value escapes (fetched, or viewed by a fetched value): never donated
    };
    int feed_slot = -1;  // -1: the placeholder is not read by the program
    int out_slot = -1;
    int output = 0;  // index into the results
    std::string feed_name;
    Kind kind = Kind::kNever;
    int thunk = -1;  // kDirect: the thunk writing it; kCopy: the thunk after which it is copied
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
  std::vector<Alias> aliases;
  std::vector<int> alias_of_slot;  // by slot: the donation whose feed it is, or -1
  MemoryStats stats;
  mutable std::atomic<int64_t> donated_in_place{0}, donated_copied{0}, donations_refused{0};
  std::string fusion_log;
  // One arena block kept for the next run that finds it free.
  mutable std::mutex arena_mu;
  mutable std::shared_ptr<detail::Storage> spare_arena;
  std::shared_ptr<OutputPool> outputs = std::make_shared<OutputPool>();

  static constexpr int kNotFed = -1;  // not a needed placeholder
};

namespace {

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
    runtime::check_feed(what, node.name, node.outputs[0], value);
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

// Whether fused thunk `t` reads `slot` only at the element it writes: not through an index map
// (a transposed or sliced read), so an output may overwrite the slot.
bool reads_pointwise(const Thunk& t, const cpu::FusedKernel& kernel, int slot) {
  const std::vector<cpu::FusedSubgraph::Input>& inputs = kernel.subgraph().inputs;
  for (size_t k = 0; k < t.in.size() && k < inputs.size(); ++k)
    if (t.in[k] == slot && inputs[k].map) return false;
  return true;
}

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

// For each donation, makes the feed's other readers run before the unit that writes its output,
// so that unit is the feed's last reader and can write into it in place instead of the output
// being copied in after the last reader. A reader that itself depends on that unit (reads the
// new value too) stays after it, and so does one whose ordering would close a cycle with an
// earlier donation's. Bad donations are left for resolve_donations to report.
void order_donated_reads(std::vector<ScheduleUnit>& work, const CompiledGraph& cg,
                         const std::vector<Donation>& donations,
                         const std::vector<ValueRef>& fetched) {
  if (donations.empty()) return;
  const int n = static_cast<int>(work.size());
  auto same = [](ValueRef a, ValueRef b) { return a.node == b.node && a.output == b.output; };
  // users[u]: the units reading something u writes.
  std::vector<std::vector<int>> users(n);
  std::unordered_map<int64_t, int> producer;
  auto key = [](ValueRef v) { return (static_cast<int64_t>(v.node) << 32) | uint32_t(v.output); };
  for (int u = 0; u < n; ++u)
    for (const ValueRef& v : work[u].writes) producer[key(v)] = u;
  for (int u = 0; u < n; ++u)
    for (const ValueRef& r : work[u].reads)
      if (auto it = producer.find(key(r)); it != producer.end() && it->second != u)
        users[it->second].push_back(u);
  for (const Donation& d : donations) {
    if (!d.feed.defined() || !d.feed.is_symbolic() || d.output < 0 ||
        d.output >= static_cast<int>(fetched.size())) {
      continue;
    }
    auto ph = cg.placeholders_.find(d.feed.impl()->node);
    auto out = producer.find(key(fetched[d.output]));
    if (ph == cg.placeholders_.end() || out == producer.end()) continue;
    const int writer = out->second;
    const ValueRef feed{ph->second, 0};
    std::vector<char> after_writer(n, 0);  // units depending on the writer
    std::vector<int> stack = {writer};
    while (!stack.empty()) {
      int u = stack.back();
      stack.pop_back();
      for (int w : users[u])
        if (!after_writer[w]) after_writer[w] = 1, stack.push_back(w);
    }
    for (int u = 0; u < n; ++u) {
      if (u == writer || after_writer[u]) continue;
      for (const ValueRef& r : work[u].reads) {
        if (same(r, feed)) {
          work[writer].after.push_back(u);
          users[u].push_back(writer);  // seen by the next donations' checks: no cycle
          break;
        }
      }
    }
  }
}

// Checks the donations and binds each to its feed and output slots (kinds come later, from
// liveness). Errors name the feed.
void resolve_donations(Impl& im, const Graph& graph, const std::vector<Donation>& donations) {
  const int num_outputs = static_cast<int>(im.fetched.size());
  im.alias_of_slot.assign(im.slots.size(), -1);
  std::vector<int> donated_output(num_outputs, -1);
  std::vector<int> donated_node;
  for (const Donation& d : donations) {
    const Tensor& key = d.feed;
    if (!key.defined() || !key.is_symbolic() || key.impl()->graph != graph.impl() ||
        graph.impl()->nodes[key.impl()->node].op != "placeholder") {
      throw Error(ErrorCode::kInvalidArgument,
                  "compile: a donation's feed (for output " + std::to_string(d.output) +
                      ") is not a placeholder of graph '" + graph.name() + "'");
    }
    const int node = key.impl()->node;
    const detail::Node& original = graph.impl()->nodes[node];
    const std::string what = "compile: donated feed '" + original.name + "'";
    if (d.output < 0 || d.output >= num_outputs) {
      throw Error(ErrorCode::kInvalidArgument, what + " names output " + std::to_string(d.output) +
                                                   ", but there are " +
                                                   std::to_string(num_outputs) + " outputs");
    }
    if (std::find(donated_node.begin(), donated_node.end(), node) != donated_node.end()) {
      throw Error(ErrorCode::kInvalidArgument,
                  what + " is donated twice (a buffer can hold one output)");
    }
    if (donated_output[d.output] >= 0) {
      throw Error(ErrorCode::kInvalidArgument,
                  what + ": output " + std::to_string(d.output) + " is already donated to feed '" +
                      im.aliases[donated_output[d.output]].feed_name + "'");
    }
    Impl::Alias a;
    a.feed_name = original.name;
    a.output = d.output;
    a.out_slot = im.fetched[d.output];
    if (node < static_cast<int>(im.feed_slot.size())) a.feed_slot = im.feed_slot[node];
    const TensorType& out = im.slots[a.out_slot].type;
    bool same = a.feed_slot >= 0 ? im.slots[a.feed_slot].type == out
                                 : original.outputs[0].dtype == out.dtype &&
                                       runtime::shape_matches(original.outputs[0].shape, out.shape);
    if (!same) {
      TensorType fed = a.feed_slot >= 0 ? im.slots[a.feed_slot].type : original.outputs[0];
      throw Error(ErrorCode::kInvalidArgument,
                  what + " is " + fed.str() + ", but output " + std::to_string(d.output) + " is " +
                      out.str() + ": a donated buffer needs the same dtype and shape");
    }
    donated_output[d.output] = static_cast<int>(im.aliases.size());
    donated_node.push_back(node);
    if (a.feed_slot >= 0) im.alias_of_slot[a.feed_slot] = static_cast<int>(im.aliases.size());
    im.aliases.push_back(std::move(a));
  }
}

// Decides how each donation is written, from liveness over the (final) thunk order. Only the
// thunks reading the feed read its old value: a kernel output viewing a donated buffer (a
// reshape returns a view of its input) is copied out when the run makes it (settle_donated).
void plan_donations(Impl& im, const std::vector<int>& def, const std::vector<int>& last_use,
                    const std::vector<int>& fetch_count) {
  using Kind = Impl::Alias::Kind;
  for (Thunk& t : im.thunks) t.out_alias.assign(t.out.size(), -1);
  for (int ai = 0; ai < static_cast<int>(im.aliases.size()); ++ai) {
    Impl::Alias& a = im.aliases[ai];
    const int f = a.feed_slot, o = a.out_slot;
    a.kind = Kind::kNever;
    if (f < 0) continue;
    if (o == f) {
      a.kind = Kind::kSame;
      continue;
    }
    // The caller would get the old value overwritten, or the buffer twice.
    if (fetch_count[f] > 0 || fetch_count[o] > 1) continue;
    const int eff = last_use[f];
    const int d = im.slots[o].where == Where::kOutput ? def[o] : -1;
    if (d >= 0) {
      Thunk& t = im.thunks[d];
      bool direct = eff < d;  // the old value is dead before the output is computed
      if (!direct && eff == d && t.fused >= 0 && writes_in_place_safely(im.kernels[t.fused]) &&
          reads_pointwise(t, im.kernels[t.fused], f)) {
        const Shape& shape = im.kernels[t.fused].shape();
        direct = im.slots[o].type.shape == shape && im.slots[f].type.shape == shape;
      }
      if (direct) {
        a.kind = Kind::kDirect;
        a.thunk = d;
        for (size_t k = 0; k < t.out.size(); ++k)
          if (t.out[k] == o) t.out_alias[k] = ai;
        continue;
      }
    }
    const int c = std::max(d, eff);
    if (c < 0) continue;  // nothing runs after the feed is read (cannot happen for a read feed)
    a.kind = Kind::kCopy;
    a.thunk = c;
    im.thunks[c].copies_after.push_back(ai);
  }
  MemoryStats& st = im.stats;
  st.num_donations = static_cast<int>(im.aliases.size());
  for (const Impl::Alias& a : im.aliases) {
    st.num_donated_in_place += a.kind == Kind::kDirect || a.kind == Kind::kSame;
    if (a.kind == Kind::kDirect) st.donated_output_bytes += im.slots[a.out_slot].bytes;
    st.num_donated_copied += a.kind == Kind::kCopy;
    st.num_donations_never += a.kind == Kind::kNever;
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
    if (t.fused < 0 || !writes_in_place_safely(im.kernels[t.fused])) continue;
    const Shape& shape = im.kernels[t.fused].shape();
    for (int o : t.out) {
      const Impl::Slot& out = im.slots[o];
      if (arena_index[o] < 0 || out.type.shape != shape) continue;
      for (int i : t.in) {
        const Impl::Slot& in = im.slots[i];
        if (arena_index[i] >= 0 && in.type.shape == shape && in.bytes == out.bytes &&
            reads_pointwise(t, im.kernels[t.fused], i))
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

// The slot a feed key binds, or kNotFed.
int feed_slot_of(const Impl& im, const Tensor& key) {
  if (key.defined() && key.impl()->graph == im.cg.original_) {
    int node = key.impl()->node;
    if (node >= 0 && node < static_cast<int>(im.feed_slot.size())) return im.feed_slot[node];
  }
  return Impl::kNotFed;
}

void bind_feeds(const Impl& im, const FeedList& feeds, std::vector<Tensor>& slots) {
  for (const auto& [key, value] : feeds) {
    int s = feed_slot_of(im, key);
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

// Whether the run's `handles` are the only references to `t`'s buffer: no other Tensor shares
// its TensorImpl or storage, and the storage is not a view into memory owned elsewhere.
bool exclusively_held(const Tensor& t, long handles, int64_t bytes) {
  const auto& impl = t.impl();
  if (impl.use_count() != handles) return false;
  const auto& st = impl->storage;
  if (!st || st.use_count() != 1 || st->device != Device::cpu()) return false;
  if (st->owner && st->owner.use_count() != 1) return false;
  return static_cast<int64_t>(st->nbytes) >= bytes;
}

// A tensor writing into `buffer`'s memory without sharing its TensorImpl (a kernel writing
// through a shared handle would copy on write).
Tensor writer_of(const Tensor& buffer, const Impl::Slot& s) {
  const auto& storage = buffer.impl()->storage;
  auto impl = detail::make_pooled<detail::TensorImpl>();
  impl->dtype = s.type.dtype;
  impl->shape = s.type.shape;
  impl->storage =
      detail::make_pooled<detail::Storage>(std::shared_ptr<void>(storage), storage->data, s.bytes);
  return Tensor(std::move(impl));
}

// Copies `from` into the donated `buffer` unless it is already there.
bool copy_into(const Tensor& buffer, const Tensor& from, int64_t bytes) {
  if (bytes == 0) return false;
  void* dst = buffer.impl()->storage->data;
  const void* src = from.raw_data();
  if (dst == src) return false;
  std::memmove(dst, src, static_cast<size_t>(bytes));
  return true;
}

// A kernel output viewing a buffer donated to this run (a reshape of a donated feed) would
// change when the buffer is overwritten: it is copied to where the plan put it (or to a fresh
// tensor for a fetched output).
void settle_donated(const Impl& im, const ArenaLease& arena, const std::vector<Tensor>& donated,
                    const Impl::Slot& slot, Tensor& out) {
  if (!out.defined() || out.nbytes() == 0) return;
  auto* p = static_cast<const char*>(out.raw_data());
  for (size_t a = 0; a < donated.size(); ++a) {
    const Tensor& d = donated[a];
    if (!d.defined() || d.nbytes() == 0 || im.aliases[a].kind == Impl::Alias::Kind::kSame) continue;
    auto* base = static_cast<const char*>(d.impl()->storage->data);
    if (p < base || p >= base + d.impl()->storage->nbytes) continue;
    Tensor copy = slot.where == Where::kArena ? arena.view(slot)
                                              : Tensor::empty(slot.type.dtype, slot.type.shape);
    std::memcpy(copy.raw_mutable_data(), p, slot.bytes);
    out = std::move(copy);
    return;
  }
}

// One run. With `donor` (the caller's feeds, as run_donating got them), donated feeds are
// taken from it and written in place when held by nobody else.
std::vector<Tensor> run_impl(const Impl& im, const FeedList& feeds, FeedList* donor) {
  using Kind = Impl::Alias::Kind;
  ArenaLease arena(im);  // declared first: it outlives every view below
  std::vector<Tensor> slots(im.slots.size());
  bind_feeds(im, feeds, slots);
  for (const auto& [s, value] : im.constants) slots[s] = value;

  // Donated buffers: taken from the caller's list (handed back on an exception).
  struct Taken {
    size_t entry;
    Tensor value;
  };
  std::vector<Taken> taken;
  std::vector<Tensor> donated;  // per alias: the buffer it writes this run
  std::vector<uint8_t> copied;  // per alias: written by a copy this run
  if (donor && !im.aliases.empty()) {
    donated.resize(im.aliases.size());
    copied.assign(im.aliases.size(), 0);
    for (size_t i = 0; i < donor->size(); ++i) {
      int s = feed_slot_of(im, (*donor)[i].first);
      if (s == Impl::kNotFed || im.alias_of_slot[s] < 0) continue;
      taken.push_back({i, std::move((*donor)[i].second)});
    }
    int64_t refused = static_cast<int64_t>(im.aliases.size());
    for (const Taken& t : taken) {
      int s = feed_slot_of(im, (*donor)[t.entry].first);
      int a = im.alias_of_slot[s];
      const Impl::Alias& alias = im.aliases[a];
      // Two handles: the slot and `taken`. A tensor fed twice, or kept by anyone, has more.
      if (alias.kind == Kind::kNever || donated[a].defined() ||
          !exclusively_held(t.value, 2, im.slots[s].bytes))
        continue;
      donated[a] = t.value;
      --refused;
    }
    im.donations_refused += refused;
  }
  auto give_back = [&] {
    for (Taken& t : taken) (*donor)[t.entry].second = std::move(t.value);
  };

  try {
    std::vector<Tensor> ins, outs;
    for (const Thunk& t : im.thunks) {
      ins.clear();
      for (int s : t.in) ins.push_back(slots[s]);
      outs.clear();
      outs.resize(t.out.size());
      for (size_t k = 0; k < t.out.size(); ++k) {
        const Impl::Slot& slot = im.slots[t.out[k]];
        if (!donated.empty() && t.out_alias[k] >= 0 && donated[t.out_alias[k]].defined()) {
          outs[k] = writer_of(donated[t.out_alias[k]], slot);
          continue;
        }
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
        for (size_t k = 0; k < t.out.size(); ++k) {
          settle_kernel_output(arena, im.slots[t.out[k]], outs[k]);
          if (!donated.empty() && t.out_alias[k] < 0)
            settle_donated(im, arena, donated, im.slots[t.out[k]], outs[k]);
        }
      }
      if (!donated.empty()) {
        for (size_t k = 0; k < t.out.size(); ++k) {
          int a = t.out_alias[k];
          if (a >= 0 && donated[a].defined())  // a kernel that returned another buffer
            copied[a] = copy_into(donated[a], outs[k], im.slots[t.out[k]].bytes);
        }
      }
      for (size_t k = 0; k < t.out.size(); ++k) slots[t.out[k]] = std::move(outs[k]);
      for (int a : t.copies_after) {
        if (donated.empty() || !donated[a].defined()) continue;
        const Impl::Alias& alias = im.aliases[a];
        copy_into(donated[a], slots[alias.out_slot], im.slots[alias.out_slot].bytes);
        copied[a] = 1;
      }
      for (int s : t.release) slots[s] = Tensor();
    }
  } catch (...) {
    slots.clear();
    give_back();
    throw;
  }
  std::vector<Tensor> result;
  result.reserve(im.fetched.size());
  for (int s : im.fetched) result.push_back(slots[s]);
  if (!donated.empty()) {
    int64_t in_place = 0, copies = 0;
    for (size_t a = 0; a < donated.size(); ++a) {
      if (!donated[a].defined()) continue;
      result[im.aliases[a].output] = donated[a];
      (copied[a] ? copies : in_place) += 1;
    }
    im.donated_in_place += in_place;
    im.donated_copied += copies;
  }
  return result;
}

}  // namespace

Executable compile(const Graph& graph, const std::vector<Tensor>& outputs, const FeedList& feeds) {
  return compile(graph, outputs, feeds, {});
}

namespace {

// Runs the fusion pass for the CPU over the optimized graph, now that its types are concrete;
// the pass's dump shows every node's group.
FusionPlan fuse(const CompiledGraph& cg, const std::vector<std::vector<TensorType>>& types,
                const std::vector<bool>& needed, const std::vector<ValueRef>& fetched) {
  Module module;
  module.graph = cg.graph;
  module.outputs = fetched;
  module.types = types;
  module.needed = needed;
  auto pass = std::make_unique<Fusion>(cpu::fusion_target());
  Fusion* fusion = pass.get();
  Pipeline pipeline("lower");
  pipeline.add(std::move(pass));
  pipeline.run(module);
  return fusion->plan();
}

}  // namespace

Executable compile(const Graph& graph, const std::vector<Tensor>& outputs, const FeedList& feeds,
                   const std::vector<Donation>& donations) {
  DumpScope dump(new_dump_dir(graph.name(), dump_signature(feeds)));
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

  FusionPlan plan = fuse(cg, im.types, needed, fetched);
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
  order_donated_reads(work, cg, donations, fetched);
  for (int k : schedule_units(work, {im.types, fetched})) im.thunks.push_back(std::move(units[k]));

  assign_slots(im, placeholders, constants, fetched);
  resolve_donations(im, graph, donations);
  plan_memory(im);
  if (const std::string& dir = current_dump_dir(); !dir.empty()) {
    std::ofstream(dir + "/fusion.txt") << im.fusion_log;
  }
  return Executable(std::move(impl));
}

std::vector<Tensor> Executable::run(const FeedList& feeds) const {
  return run_impl(*impl_, feeds, nullptr);
}

std::vector<Tensor> Executable::run_donating(FeedList&& feeds) const {
  return run_impl(*impl_, feeds, &feeds);
}

DonationStats Executable::donation_stats() const {
  return {impl_->donated_in_place.load(), impl_->donated_copied.load(),
          impl_->donations_refused.load()};
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
