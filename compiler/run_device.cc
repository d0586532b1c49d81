// One run of a device program (compile_for_device): its fused loops, dots, convolutions and
// pooling run on the device over a device arena laid out by the same memory plan as the host's, every other
// thunk on the host over the host arena. Each value is copied between the two only when a thunk on the
// other side reads it (and a fetched value down at the end), so a chain of device thunks keeps
// its values on the device.
#include <algorithm>
#include <cstring>

#include "compiler/executable_impl.h"
#include "src/core/device_memory.h"

namespace kiln::compiler {
namespace {

class DeviceRun {
 public:
  DeviceRun(const Impl& im, const ArenaLease& arena, std::vector<Tensor>& slots)
      : im_(im), device_(*im.device), arena_(arena), slots_(slots),
        state_(im.slots.size()), owned_(*im.device) {
    if (im.stats.arena_bytes > 0) {
      device_arena_ =
          static_cast<char*>(owned_.take(im.stats.arena_bytes, "the program's arena"));
      if (device_.poisons_host_arena())
        std::memset(const_cast<char*>(arena.at(0)), 0xA5, im.stats.arena_bytes);
    }
    for (size_t s = 0; s < slots.size(); ++s) {
      if (!slots[s].defined()) continue;
      if (detail::memory_of(slots[s]) == nullptr) {
        state_[s].host = true;
        continue;
      }
      // A device tensor fed (bind_feeds checked it is this device's): read where it is.
      if (pointers_.empty()) pointers_.assign(im.slots.size(), nullptr);
      if (device_feeds_.empty()) device_feeds_.resize(im.slots.size());
      pointers_[s] = detail::device_pointer(slots[s]);
      device_feeds_[s] = slots[s];
      state_[s].device = true;
    }
    upload_constants();
  }
  DeviceRun(const DeviceRun&) = delete;
  DeviceRun& operator=(const DeviceRun&) = delete;

  void run_on_device(const Thunk& t) {
    check_indices(t);
    ins_.clear();
    outs_.clear();
    for (size_t k = 0; k < t.in.size(); ++k)  // a scatter_add's indices: read on the host
      ins_.push_back(t.on_device == Thunk::OnDevice::kScatterAdd && k == 1 ? nullptr
                                                                           : on_device(t.in[k]));
    for (int s : t.out) {
      outs_.push_back(device_pointer(s));
      state_[s] = {.host = false, .device = true};
      slots_[s] = Tensor();
    }
    switch (t.on_device) {
      case Thunk::OnDevice::kFused:
        im_.device_kernels[t.fused]->launch(ins_.data(), outs_.data());
        break;
      case Thunk::OnDevice::kDot: {
        DeviceDot dot = t.dot;
        dot.a = ins_[0];
        dot.b = ins_[1];
        dot.bias = ins_.size() > 2 ? ins_[2] : nullptr;  // a fused_dot's
        dot.c = outs_[0];
        device_.dot(dot);
        break;
      }
      case Thunk::OnDevice::kConv: {
        DeviceConv conv = t.conv;
        void** operands[3][3] = {{&conv.x, &conv.w, &conv.y},   // forward: x, w -> y
                                 {&conv.y, &conv.w, &conv.x},   // input grad: dy, w -> dx
                                 {&conv.x, &conv.y, &conv.w}};  // kernel grad: x, dy -> dw
        *operands[conv.pass][0] = ins_[0];
        *operands[conv.pass][1] = ins_[1];
        *operands[conv.pass][2] = outs_[0];
        DeviceScratch workspace(device_);  // freed once the op is queued
        conv.workspace =
            workspace.take(conv.workspace_bytes, "scratch of '" + im_.nodes[t.node].name + "'");
        device_.conv(conv);
        break;
      }
      case Thunk::OnDevice::kPool: {
        DevicePool pool = t.pool;
        void** operands[4][3] = {{&pool.x, nullptr, &pool.y},     // max: x -> y
                                 {&pool.x, nullptr, &pool.y},     // sum: x -> y
                                 {&pool.x, &pool.dy, &pool.dx},   // max grad: x, dy -> dx
                                 {&pool.dy, nullptr, &pool.dx}};  // sum grad: dy -> dx
        *operands[pool.kind][0] = ins_[0];
        if (operands[pool.kind][1] != nullptr) *operands[pool.kind][1] = ins_[1];
        *operands[pool.kind][2] = outs_[0];
        DeviceScratch workspace(device_);  // freed once the op is queued
        pool.workspace =
            workspace.take(pool.workspace_bytes, "scratch of '" + im_.nodes[t.node].name + "'");
        device_.pool(pool);
        break;
      }
      case Thunk::OnDevice::kControlFlow: {
        // Its inputs as views of their buffers here, its results copied into the outputs'.
        std::vector<Tensor> args;
        for (size_t k = 0; k < t.in.size(); ++k) {
          const TensorType& type = im_.slots[t.in[k]].type;
          args.push_back(detail::device_view(im_.device, ins_[k], type.dtype, type.shape));
        }
        std::vector<Tensor> results = t.control->run(args);
        for (size_t k = 0; k < t.out.size(); ++k) {
          const int64_t bytes = im_.slots[t.out[k]].bytes;
          if (bytes > 0) device_.copy(outs_[k], detail::device_pointer(results.at(k)), bytes);
        }
        break;
      }
      case Thunk::OnDevice::kScatterAdd: {
        // y = x, then the loop adds each named row's updates, in order, from the row plan
        // made here from the indices (on the host: they were checked there).
        const std::vector<int64_t> plan = scatter_add_plan(on_host(t.in[1]), t.scatter.dim);
        DeviceScratch scratch(device_);  // freed once the loop is queued
        const int64_t plan_bytes = static_cast<int64_t>(plan.size() * sizeof(int64_t));
        void* on_device_plan =
            scratch.take(plan_bytes, "row plan of '" + im_.nodes[t.node].name + "'");
        device_.upload(on_device_plan, plan.data(), plan_bytes);
        const int64_t bytes = im_.slots[t.out[0]].bytes;
        if (bytes > 0 && outs_[0] != ins_[0]) device_.copy(outs_[0], ins_[0], bytes);
        void* const loop_ins[] = {ins_[2], on_device_plan};
        if (plan[0] > 0) t.loop->launch(loop_ins, outs_.data());
        break;
      }
      case Thunk::OnDevice::kNo:
        break;
    }
  }

  // A loop that gathers reads 0 for an index out of range, and a scatter_add adds nothing: their
  // indices are checked first, on the host, as the ops' kernels check them. Indices fed from
  // the host cost nothing more; ones only the device holds come down (the run waits for them).
  void check_indices(const Thunk& t) {
    for (const IndexCheck& c : t.index_checks) compiler::check_indices(c, on_host(t.in[c.input]));
  }

  void run_on_host(const Thunk& t) {
    std::vector<Tensor> ins, outs(t.out.size());
    for (size_t k = 0; k < t.in.size(); ++k) {
      const int s = t.in[k];
      if (!state_[s].host && shape_only(t, k)) {  // its type is all the kernel reads
        ins.push_back(Tensor::empty(im_.slots[s].type.dtype, im_.slots[s].type.shape));
        continue;
      }
      ins.push_back(on_host(s));
    }
    for (size_t k = 0; k < t.out.size(); ++k) outs[k] = host_place(im_.slots[t.out[k]]);
    run_node_kernel(im_, t, ins, outs);
    for (size_t k = 0; k < t.out.size(); ++k) {
      const int s = t.out[k];
      settle_kernel_output(arena_, im_.slots[s], outs[k]);
      slots_[s] = std::move(outs[k]);
      state_[s] = {.host = true, .device = false};
    }
  }

  void release(int s) {
    slots_[s] = Tensor();
    state_[s] = {};
  }

  // Whether input k of host thunk t is read for its type alone (OpDef::shape_only_inputs).
  bool shape_only(const Thunk& t, size_t k) const {
    const OpDef* def = t.node >= 0 ? im_.nodes[t.node].def : nullptr;
    if (def == nullptr || def->shape_only_inputs.empty() || k >= def->inputs.size()) return false;
    const std::vector<std::string>& names = def->shape_only_inputs;
    return std::find(names.begin(), names.end(), def->inputs[k]) != names.end();
  }

  // Output slot s (fetched as a device tensor) is computed into `buffer`'s memory, a donated
  // feed's: the plan writes it only once the feed's old value is dead, or reading it element by
  // element at the same index.
  void compute_into(int s, const Tensor& buffer) {
    if (device_outputs_.empty()) device_outputs_.resize(im_.slots.size());
    device_outputs_[s] = buffer;
  }

  // Output slot s (fetched as a device tensor), computed, is copied into `buffer`, a donated
  // feed's, after the feed's last reader; the result is then that buffer.
  void copy_into(int s, const Tensor& buffer) {
    if (device_outputs_.empty()) device_outputs_.resize(im_.slots.size());
    void* src = on_device(s);
    const int64_t bytes = im_.slots[s].bytes;
    if (bytes > 0) device_.copy(detail::device_pointer(buffer), src, bytes);
    device_outputs_[s] = buffer;  // the buffer it was computed in is freed
  }

  // A fetched value as a device tensor (CompileOptions::outputs_on_device): an output in the
  // buffer it was computed in (uploaded there when a host thunk computed it), a device tensor
  // fed as itself, any other feed or constant as a copy.
  Tensor on_device_result(int s) {
    const Impl::Slot& slot = im_.slots[s];
    if (slot.where == Where::kFed && !device_feeds_.empty() && device_feeds_[s].defined())
      return device_feeds_[s];
    if (slot.where == Where::kOutput) {
      on_device(s);
      return device_outputs_[s];
    }
    return detail::to_device(im_.device, on_host(s));
  }

  // A value on the host, copied down from the device when only there.
  const Tensor& on_host(int s) {
    if (!state_[s].host) {
      const Impl::Slot& slot = im_.slots[s];
      Tensor host = host_place(slot);
      if (slot.bytes > 0) device_.download(host.raw_mutable_data(), device_pointer(s), slot.bytes);
      slots_[s] = std::move(host);
      state_[s].host = true;
    }
    return slots_[s];
  }

 private:
  struct State {
    bool host = false;    // slots_[s] holds the value
    bool device = false;  // device_pointer(s) holds it
  };

  // The program's constants, uploaded by its first run and kept on the device.
  void upload_constants() {
    Impl::DeviceConstants& dc = *im_.device_constants;
    std::lock_guard<std::mutex> lock(dc.mu);
    if (!dc.uploaded) {
      if (dc.by_slot.empty()) dc.by_slot.assign(im_.slots.size(), nullptr);
      for (const auto& [s, value] : im_.constants) {
        const Impl::Slot& slot = im_.slots[s];
        if (slot.bytes == 0) continue;
        if (dc.by_slot[s] == nullptr)
          dc.by_slot[s] = device_.allocate(slot.bytes, device_.name() + ": constant '" +
                                                           im_.nodes[slot.value.node].name + "'");
        device_.upload(dc.by_slot[s], value.raw_data(), slot.bytes);
      }
      dc.uploaded = true;  // after every upload: a failed one is tried again next run
    }
    for (const auto& [s, value] : im_.constants) state_[s].device = true;
  }

  // Where slot s lives on the device: its place in the device arena, a constant's kept buffer,
  // or a buffer of this run.
  void* device_pointer(int s) {
    const Impl::Slot& slot = im_.slots[s];
    if (slot.where == Where::kArena) return device_arena_ + slot.offset;
    if (slot.where == Where::kConstant) return im_.device_constants->by_slot[s];
    if (slot.where == Where::kOutput && im_.slot_on_device[s]) {
      // The result's own buffer: a device tensor that outlives the run.
      if (device_outputs_.empty()) device_outputs_.resize(im_.slots.size());
      if (!device_outputs_[s].defined()) {
        void* p = device_.allocate(slot.bytes, device_.name() + ": output '" +
                                                   im_.nodes[slot.value.node].name + "'");
        device_outputs_[s] =
            detail::device_tensor(im_.device, p, slot.type.dtype, slot.type.shape);
      }
      return slot.bytes > 0 ? detail::device_pointer(device_outputs_[s]) : nullptr;
    }
    if (pointers_.empty()) pointers_.assign(im_.slots.size(), nullptr);
    if (pointers_[s] == nullptr && slot.bytes > 0)
      pointers_[s] = owned_.take(slot.bytes, "value of '" + im_.nodes[slot.value.node].name + "'");
    return pointers_[s];
  }

  void* on_device(int s) {
    void* p = device_pointer(s);
    if (!state_[s].device) {
      const Impl::Slot& slot = im_.slots[s];
      if (slot.bytes > 0) device_.upload(p, slots_[s].raw_data(), slot.bytes);
      state_[s].device = true;
    }
    return p;
  }

  // The host buffer the plan gives a value a host thunk writes or a download fills.
  Tensor host_place(const Impl::Slot& slot) const {
    if (slot.where == Where::kArena) return arena_.view(slot);
    if (slot.where == Where::kOutput) return output_tensor(im_.outputs, slot);
    return Tensor::empty(slot.type.dtype, slot.type.shape);  // fed and constant values stay put
  }

  const Impl& im_;
  const DeviceBackend& device_;
  const ArenaLease& arena_;
  std::vector<Tensor>& slots_;
  std::vector<State> state_;
  DeviceScratch owned_;  // the run's device memory, freed when it ends
  std::vector<void*> pointers_;  // by slot, values outside the arena
  std::vector<Tensor> device_feeds_;    // by slot: device tensors fed
  std::vector<Tensor> device_outputs_;  // by slot: outputs kept on the device
  char* device_arena_ = nullptr;
  std::vector<void*> ins_, outs_;
};

}  // namespace

std::vector<Tensor> run_device_steps(const Impl& im, const FeedList& feeds, FeedList* donor,
                                     StepProfile* profile) {
  using Kind = Impl::Alias::Kind;
  ArenaLease arena(im);  // the host's arena: declared first, it outlives every view below
  std::vector<Tensor> slots(im.slots.size());
  bind_feeds(im, feeds, slots);
  for (const auto& [s, value] : im.constants) slots[s] = value;

  // Donated feeds, taken from the caller's list (handed back on an exception). One is written
  // in place when it is this device's tensor, held by nobody else (the slot and `taken` are
  // the two handles), and the plan writes the new value straight into it (or the new value is
  // the fed one), or copies it in after the old value's last read, and returns it as a device
  // tensor. Otherwise it is refused (a fed host tensor is read through its copy on the device)
  // and the caller's entry keeps its tensor.
  struct Taken {
    size_t entry;
    Tensor value;
  };
  std::vector<Taken> taken;
  std::vector<Tensor> donated;  // per alias: the device buffer it writes this run
  if (donor && !im.aliases.empty()) {
    donated.resize(im.aliases.size());
    for (size_t i = 0; i < donor->size(); ++i) {
      const int s = feed_slot_of(im, (*donor)[i].first);
      if (s == Impl::kNotFed || im.alias_of_slot[s] < 0) continue;
      taken.push_back({i, std::move((*donor)[i].second)});
    }
    int64_t refused = static_cast<int64_t>(im.aliases.size());
    for (const Taken& t : taken) {
      const int s = feed_slot_of(im, (*donor)[t.entry].first);
      const int a = im.alias_of_slot[s];
      const Impl::Alias& alias = im.aliases[a];
      // The new value in a buffer of its own (kOutput), or the fed value itself (kSame).
      const bool own = im.slots[alias.out_slot].where == Where::kOutput;
      if (alias.kind == Kind::kNever || (alias.kind != Kind::kSame && !own) ||
          donated[a].defined() || !im.fetched_on_device[alias.output] ||
          !im.slot_on_device[alias.out_slot] ||
          !exclusively_held(t.value, 2, im.slots[s].bytes, im.device.get()))
        continue;
      donated[a] = t.value;
      --refused;
    }
    im.donations_refused += refused;
  }

  std::vector<Tensor> result;
  try {
    DeviceRun run(im, arena, slots);
    for (size_t a = 0; a < donated.size(); ++a)
      if (donated[a].defined() && im.aliases[a].kind == Kind::kDirect)
        run.compute_into(im.aliases[a].out_slot, donated[a]);
    for (const Thunk& t : im.thunks) {
      const auto started = profile ? ProfileClock::now() : ProfileClock::time_point{};
      if (t.on_device != Thunk::OnDevice::kNo) {
        run.run_on_device(t);
        if (profile) im.device->synchronize();  // the thunk's own time
      } else {
        run.run_on_host(t);  // its downloads count as its time
      }
      if (profile) add_thunk_time(im, t, us_since(started), *profile);
      for (int a : t.copies_after)
        if (!donated.empty() && donated[a].defined())
          run.copy_into(im.aliases[a].out_slot, donated[a]);
      for (int s : t.release) run.release(s);
    }
    result.reserve(im.fetched.size());
    // A result for the host waits for the work before its copy; one kept on the device is
    // handed back while that work may still run (the next use is queued after it), as an
    // eager op on a GPU returns in PyTorch or JAX.
    for (size_t i = 0; i < im.fetched.size(); ++i) {
      const int s = im.fetched[i];
      result.push_back(im.fetched_on_device[i] ? run.on_device_result(s) : run.on_host(s));
    }
  } catch (...) {
    slots.clear();
    for (Taken& t : taken) (*donor)[t.entry].second = std::move(t.value);
    throw;
  }
  // A refused donation's tensor goes back to the caller's entry, unchanged.
  for (Taken& t : taken) {
    const int a = im.alias_of_slot[feed_slot_of(im, (*donor)[t.entry].first)];
    if (!donated[a].defined() || donated[a].impl() != t.value.impl())
      (*donor)[t.entry].second = std::move(t.value);
  }
  int64_t in_place = 0, copied = 0;
  for (size_t a = 0; a < donated.size(); ++a)
    if (donated[a].defined()) (im.aliases[a].kind == Kind::kCopy ? copied : in_place) += 1;
  im.donated_in_place += in_place;
  im.donated_copied += copied;
  return result;
}

}  // namespace kiln::compiler
