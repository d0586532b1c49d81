// One run of an Executable: bind the feeds, take donated buffers, walk the thunks over the
// run's arena, release dead values and settle outputs that view other buffers.
#include <chrono>
#include <cstring>

#include "compiler/executable_impl.h"
#include "runtime/execute.h"

namespace kiln::compiler {

// A kernel may return a view of one of its inputs (reshape) instead of writing the buffer
// handed to it: the input's memory is reused once it dies.
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
    if (const detail::DeviceMemory* m = detail::memory_of(value);
        m != nullptr && m != static_cast<const detail::DeviceMemory*>(im.device.get())) {
      throw Error(ErrorCode::kInvalidArgument,
                  "run: the value fed to placeholder '" + im.nodes[slot.value.node].name +
                      "' is on " + value.device().str() + ", but the program runs on " +
                      (im.device ? im.device->name() : std::string("the host")) +
                      " (feed it .to(Device::cpu()), or compile for its device)");
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

// One run. With `donor` (the caller's feeds, as run_donating got them), donated feeds are
// taken from it and written in place when held by nobody else.
double us_since(ProfileClock::time_point t0) {
  return std::chrono::duration<double, std::micro>(ProfileClock::now() - t0).count();
}

namespace {

bool is_gemm_or_conv(const std::string& op) {
  return op == "dot" || op == "fused_dot" || op.rfind("convolution", 0) == 0 ||
         op.rfind("fused_conv", 0) == 0;
}

}  // namespace

void add_thunk_time(const Impl& im, const Thunk& t, double us, StepProfile& profile) {
  if (t.fused >= 0)
    profile.fused_loops_us += us;
  else
    (is_gemm_or_conv(im.nodes[t.node].op) ? profile.gemm_conv_us : profile.other_kernels_us) += us;
  profile.thunk_us[&t - im.thunks.data()] += us;
}

void run_node_kernel(const Impl& im, const Thunk& t, const std::vector<Tensor>& ins,
                     std::vector<Tensor>& outs) {
  const detail::Node& node = im.nodes[t.node];
  if (t.kernel) {
    runtime::run_prepared_kernel(*t.kernel, *node.def, node.name, ins, node.attrs,
                                 im.types[t.node], &outs);
  } else {
    outs = runtime::run_kernel(*node.def, node.name, ins, node.attrs);
  }
}

void add_run(StepProfile& sum, const StepProfile& p) {
  sum.runs += 1;
  sum.total_us += p.total_us;
  sum.gemm_conv_us += p.gemm_conv_us;
  sum.fused_loops_us += p.fused_loops_us;
  sum.other_kernels_us += p.other_kernels_us;
  sum.thunk_us.resize(p.thunk_us.size(), 0.0);
  for (size_t i = 0; i < p.thunk_us.size(); ++i) sum.thunk_us[i] += p.thunk_us[i];
}

std::vector<Tensor> run_impl(const Impl& im, const FeedList& feeds, FeedList* donor) {
  auto steps = [&](StepProfile* profile) {
    return im.device ? run_device_steps(im, feeds, donor, profile)
                     : run_steps(im, feeds, donor, profile);
  };
  const bool own = im.profiling.load(std::memory_order_relaxed), global = global_profiling();
  if (!own && !global) return steps(nullptr);
  StepProfile p;
  p.thunk_us.assign(im.thunks.size(), 0.0);
  const auto t0 = ProfileClock::now();
  std::vector<Tensor> result = steps(&p);
  p.total_us = us_since(t0);
  if (global) note_globally_profiled(im);
  std::lock_guard<std::mutex> lock(im.profile_mu);
  if (own) add_run(im.step_profile, p);
  if (global) add_run(im.global_profile, p);
  return result;
}

std::vector<Tensor> run_steps(const Impl& im, const FeedList& feeds, FeedList* donor,
                              StepProfile* profile) {
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
      const auto started = profile ? ProfileClock::now() : ProfileClock::time_point{};
      if (t.fused >= 0) {
        // A loop reading gathers reads 0 at an index out of range: the kernel's check first.
        for (const IndexCheck& c : t.index_checks) check_indices(c, ins[c.input]);
        im.kernels[t.fused]->run(ins, &outs);
        if (profile) add_thunk_time(im, t, us_since(started), *profile);
      } else {
        run_node_kernel(im, t, ins, outs);
        if (profile) add_thunk_time(im, t, us_since(started), *profile);
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
    // A refused donation's tensor goes back to the caller's entry, unchanged.
    for (Taken& t : taken) {
      const int a = im.alias_of_slot[feed_slot_of(im, (*donor)[t.entry].first)];
      if (!donated[a].defined() || donated[a].impl() != t.value.impl())
        (*donor)[t.entry].second = std::move(t.value);
    }
  }
  return result;
}

}  // namespace kiln::compiler
