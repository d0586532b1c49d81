// Internals of compiler/executable.cc's Executable, shared by the files that build and run it:
// the compile driver (executable.cc), donations (donation.cc), slots and the arena plan
// (memory_plan.cc) and the run loop (run.cc). Not a public header.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "compiler/device_backend.h"
#include "compiler/device_control_flow.h"
#include "compiler/executable.h"
#include "compiler/fused_subgraph.h"
#include "compiler/lowering.h"
#include "compiler/schedule.h"
#include "kiln/op_registry.h"
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
    // A device loop's indices to check first: a fused loop's gathers, a scatter_add's (input:
    // the index in `in`).
    std::vector<IndexCheck> index_checks;
    std::string description;
    // What of a device program runs on the device: its fused loops, and the dots and
    // convolutions the device takes (their pointers, and the convolution's scratch, are filled
    // per run).
    enum class OnDevice : uint8_t { kNo, kFused, kDot, kConv, kPool, kControlFlow, kScatterAdd };
    OnDevice on_device = OnDevice::kNo;
    // kControlFlow: the node's loops over device tensors (compiler/device_control_flow.h).
    std::shared_ptr<const DeviceControlFlow> control;
    // kScatterAdd: the device's loop and its geometry (x, indices, updates -> y).
    std::shared_ptr<const DeviceLoop> loop;
    DeviceScatterAdd scatter;
    DeviceDot dot;
    DeviceConv conv;
    DevicePool pool;
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
  std::vector<std::shared_ptr<const CompiledFusion>> kernels;  // by the backend
  // A program compiled for a device (compile_for_device): its backend; kernels are then its
  // DeviceKernels, also held here with their type.
  std::shared_ptr<const DeviceBackend> device;
  // By fetched output: whether it comes back as a device tensor (CompileOptions::
  // outputs_on_device, device_outputs); by slot: whether it is computed into a device buffer the
  // result owns (a slot some such output fetches).
  std::vector<char> fetched_on_device, slot_on_device;
  std::vector<std::shared_ptr<const DeviceKernel>> device_kernels;  // parallel to kernels
  // A device program's constants on the device, uploaded by its first run and kept (by slot;
  // null where not a constant or empty); freed with the executable.
  struct DeviceConstants {
    std::shared_ptr<const DeviceBackend> device;
    std::mutex mu;
    bool uploaded = false;
    std::vector<void*> by_slot;
    ~DeviceConstants() {
      for (void* p : by_slot) {
        try {
          if (p != nullptr) device->deallocate(p);
        } catch (...) {
        }
      }
    }
  };
  std::unique_ptr<DeviceConstants> device_constants;  // set with `device`
  std::vector<std::unique_ptr<KernelDef>> control_flow_kernels;  // compiler/control_flow.h
  std::vector<Thunk> thunks;
  std::vector<Alias> aliases;
  std::vector<int> alias_of_slot;  // by slot: the donation whose feed it is, or -1
  MemoryStats stats;
  mutable std::atomic<int64_t> donated_in_place{0}, donated_copied{0}, donations_refused{0};
  mutable std::atomic<bool> profiling{false};
  mutable std::mutex profile_mu;
  mutable StepProfile step_profile;  // guarded by profile_mu
  mutable StepProfile global_profile;  // guarded by profile_mu: runs under the global profiler
  // KILN_PROFILE: profiling is on from the start, and the destructor reports it under `name`.
  bool report_profile = false;
  std::string name;
  ~Impl();
  std::string fusion_log;
  // One arena block kept for the next run that finds it free.
  mutable std::mutex arena_mu;
  mutable std::shared_ptr<detail::Storage> spare_arena;
  std::shared_ptr<OutputPool> outputs = std::make_shared<OutputPool>();

  static constexpr int kNotFed = -1;  // not a needed placeholder
};

using Impl = Executable::Impl;
using Thunk = Executable::Impl::Thunk;
using Where = Executable::Impl::Where;

// executable.cc: records that `im` ran under the global profiler (stop_global_profiling
// collects it). Takes the profiler's lock: never call it holding im.profile_mu.
void note_globally_profiled(const Impl& im);

// memory_plan.cc: slots, liveness and the arena plan.
bool overwrites_safely(const Thunk& t, const CompiledFusion& kernel, int slot);
void assign_slots(Impl& im, const std::vector<int>& placeholders,
                  const std::vector<std::pair<int, std::vector<Tensor>>>& constants,
                  const std::vector<ValueRef>& fetched);
void plan_memory(Impl& im);

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

Tensor output_tensor(const std::shared_ptr<OutputPool>& pool, const Impl::Slot& s);

// donation.cc: donations at compile time and at run time.
void order_donated_reads(std::vector<ScheduleUnit>& work, const CompiledGraph& cg,
                         const std::vector<Donation>& donations,
                         const std::vector<ValueRef>& fetched);
void resolve_donations(Impl& im, const Graph& graph, const std::vector<Donation>& donations);
void plan_donations(Impl& im, const std::vector<int>& def, const std::vector<int>& last_use,
                    const std::vector<int>& fetch_count);
bool exclusively_held(const Tensor& t, long handles, int64_t bytes,
                      const detail::DeviceMemory* memory = nullptr);
Tensor writer_of(const Tensor& buffer, const Impl::Slot& s);
bool copy_into(const Tensor& buffer, const Tensor& from, int64_t bytes);
void settle_donated(const Impl& im, const ArenaLease& arena, const std::vector<Tensor>& donated,
                    const Impl::Slot& slot, Tensor& out);

// run_device.cc: one run of a device program (im.device set). With `donor`, a donated feed
// that is this device's tensor, held by nobody else, whose new value is fetched as a device
// tensor, is written in place or copied into; other donations are refused (the fed tensor
// unchanged).
std::vector<Tensor> run_device_steps(const Impl& im, const FeedList& feeds, FeedList* donor,
                                     StepProfile* profile);

// run.cc: one run, and what run_device.cc shares with it.
using ProfileClock = std::chrono::steady_clock;
double us_since(ProfileClock::time_point t0);
// Adds thunk t's `us` to the profile, under its kind and its own entry.
void add_thunk_time(const Impl& im, const Thunk& t, double us, StepProfile& profile);
// Runs kernel thunk t's node on the host (its prepared kernel, else the lookup that reports
// why there is none) into `outs`.
void run_node_kernel(const Impl& im, const Thunk& t, const std::vector<Tensor>& ins,
                     std::vector<Tensor>& outs);
// The slot a feed key binds, or Impl::kNotFed.
int feed_slot_of(const Impl& im, const Tensor& key);
// The caller's feeds into `slots`; throws kiln::Error naming a wrong or missing feed.
void bind_feeds(const Impl& im, const FeedList& feeds, std::vector<Tensor>& slots);
// A kernel's output that views an arena value other than its own place is copied there (or,
// fetched, into a fresh tensor).
void settle_kernel_output(const ArenaLease& arena, const Impl::Slot& slot, Tensor& out);

std::vector<Tensor> run_impl(const Impl& im, const FeedList& feeds, FeedList* donor);
// run_impl's walk; with `profile`, each thunk's time is added to it by kind (compiler/run.cc).
std::vector<Tensor> run_steps(const Impl& im, const FeedList& feeds, FeedList* donor,
                              StepProfile* profile);

}  // namespace kiln::compiler
