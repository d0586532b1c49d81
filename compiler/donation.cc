// Buffer donation (input-output aliases): ordering the feed's readers before its writer,
// checking and binding each donation, planning how it is written (in place, copied, never),
// and the run-time helpers that take, write and settle donated buffers.
#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "compiler/executable_impl.h"
#include "runtime/feeds.h"

namespace kiln::compiler {

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
      if (!direct && eff == d && t.fused >= 0 && overwrites_safely(t, *im.kernels[t.fused], f)) {
        const Shape& shape = im.kernels[t.fused]->shape();
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

// Whether the run's `handles` are the only references to `t`'s buffer: no other Tensor shares
// its TensorImpl or storage, and the storage is not a view into memory owned elsewhere; and
// the buffer is in `memory` (null: host memory).
bool exclusively_held(const Tensor& t, long handles, int64_t bytes,
                      const detail::DeviceMemory* memory) {
  const auto& impl = t.impl();
  if (impl.use_count() != handles) return false;
  const auto& st = impl->storage;
  if (!st || st.use_count() != 1 || st->memory.get() != memory) return false;
  if (memory == nullptr && st->device != Device::cpu()) return false;
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

}  // namespace kiln::compiler
