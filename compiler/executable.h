// The compiled execution path: optimize() + loop fusion + JIT'd fused kernels, run as a flat
// sequence of thunks (fused kernels, and the registered reference kernel for every other node)
// over one arena planned by buffer assignment. Compiled for concrete feed shapes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "compiler/pipeline.h"
#include "kiln/device.h"
#include "kiln/graph.h"

namespace kiln::compiler {

// The memory plan of an Executable, known before it runs. Values computed by thunks live in one
// arena (fused-kernel and kernel-op outputs alike); fed values, fetched outputs and constants live
// outside it (outputs are handed to the caller and must not alias memory a later run reuses).
struct MemoryStats {
  int64_t arena_bytes = 0;     // the planned peak: the arena each run takes
  int64_t live_min_bytes = 0;  // max over thunks of the bytes live in the arena: a lower bound
  int64_t no_reuse_bytes = 0;  // the arena without any reuse (the sum of its values' sizes)
  int num_buffers = 0;         // values planned in the arena
  int num_reused = 0;          // placed over the memory of a value already dead
  int num_in_place = 0;        // written over an input dying at their thunk
  int64_t fed_bytes = 0;       // fed values (the caller's tensors)
  int64_t output_bytes = 0;    // fetched outputs (blocks recycled once the caller drops them)
  int64_t constant_bytes = 0;  // constants the executable holds
  // Donations (input-output aliases, see Donation) and how the plan writes each one when a run
  // may overwrite its feed: in place (the producing thunk writes straight into the fed buffer,
  // or the output is that feed unchanged), copied (computed as usual, then copied into the fed
  // buffer once every reader of the old value has run), or never (the old value escapes: the
  // feed, or a view of it, is itself fetched, or the output is fetched twice).
  int num_donations = 0;
  int num_donated_in_place = 0;
  int num_donated_copied = 0;
  int num_donations_never = 0;
  // Bytes of fetched outputs a run_donating writes into fed buffers instead of output blocks
  // (in place); outside_bytes() counts them in output_bytes too.
  int64_t donated_output_bytes = 0;
  int64_t outside_bytes() const { return fed_bytes + output_bytes + constant_bytes; }
  int64_t outside_bytes_donating() const { return outside_bytes() - donated_output_bytes; }
  // The benchmark key arena_peak_vs_live_min (1 for an empty arena).
  double peak_vs_live_min() const {
    return live_min_bytes > 0 ? static_cast<double>(arena_bytes) / live_min_bytes : 1.0;
  }
};

// What runs did with their donations so far (counted over all run_donating calls).
struct DonationStats {
  int64_t written_in_place = 0;  // outputs written straight into a donated feed's buffer
  int64_t copied = 0;            // outputs copied into a donated feed's buffer
  int64_t refused = 0;           // donations not taken: the buffer was shared, or never donatable
};

// Where compiled runs spent their time, summed over the runs made while profiling was on
// (Executable::set_profiling): the thunks by kind, and the rest of each run (binding feeds,
// taking an arena, dispatch, releasing values) as host time. Microseconds.
struct StepProfile {
  int64_t runs = 0;
  double total_us = 0;
  double gemm_conv_us = 0;      // kernel thunks of dot, fused_dot, convolution and its passes
  double fused_loops_us = 0;    // the JIT'd loop and input fusions
  double other_kernels_us = 0;  // every other kernel thunk (gather, random, pooling, ...)
  std::vector<double> thunk_us;  // per thunk, in the order of Executable::thunk_descriptions()
  double host_us() const { return total_us - gemm_conv_us - fused_loops_us - other_kernels_us; }
};

// The process-wide profiler behind kiln/profiler.h: while it is on, every run of every
// executable is profiled into a second sum of its own (so Executable::set_profiling is
// unaffected). stop_global_profiling returns the executables that ran, destroyed ones included.
struct ProgramProfile {
  std::string name;
  StepProfile profile;
  std::vector<std::string> thunks;  // descriptions, aligned with profile.thunk_us
};
void start_global_profiling();  // throws kFailedPrecondition when already on
std::vector<ProgramProfile> stop_global_profiling();  // throws kFailedPrecondition when off
bool global_profiling();

// The profile as text: the runs, the mean step and its split by kind, then the `top` costliest
// thunks by mean time with their share of the step and their descriptions.
std::string format_profile(const StepProfile& profile, const std::vector<std::string>& thunks,
                           int top = 12);

// An input-output alias (buffer donation, like XLA's input_output_alias and JAX's
// donate_argnums): output `output` (an index into compile's outputs) may be written into the
// buffer of the tensor fed to placeholder `feed`, which must have the output's dtype and shape.
// Only run_donating overwrites fed buffers; run() never does.
struct Donation {
  Tensor feed;     // a placeholder of the compiled graph
  int output = 0;  // index into the outputs
};

class Executable {
 public:
  // Runs the compiled step. Feeds are keyed by the original graph's placeholders and must have
  // the dtypes and shapes compiled for; throws kiln::Error for missing or wrong feeds. Runs may
  // be concurrent (from several threads): each takes its own arena, and one block is kept for
  // the next run that finds it free.
  std::vector<Tensor> run(const FeedList& feeds) const;

  // Runs like run(), giving the executable the donated feeds' buffers (the entries of `feeds`
  // for placeholders compile() was told are donated are moved from). A donated buffer is
  // overwritten with its aliased output, which is then returned as that same Tensor, only when
  // nothing else shares it: no other handle to the Tensor (copies share a TensorImpl), no other
  // Tensor over its storage (views), not a view into memory owned elsewhere. Otherwise that
  // run refuses the donation (copy-on-write): the output is a fresh tensor and the fed tensor
  // is left unchanged, back in its entry of `feeds`, so a Tensor the caller kept is a snapshot.
  // A device program (compile_for_device) takes only its device's tensors, and refuses a host
  // one the same way. A value read after the
  // update still sees the old value (the plan copies only after the last reader). On an
  // exception the moved entries are put back into `feeds` (a donated buffer may already hold
  // its new value then).
  std::vector<Tensor> run_donating(FeedList&& feeds) const;
  DonationStats donation_stats() const;

  MemoryStats memory_stats() const;

  // Times every thunk of the runs from now on (a clock read per thunk) into profile(); off by
  // default. Turning it on clears the profile. With KILN_PROFILE=1 in the environment every
  // executable profiles from its first run and, when it is destroyed, writes format_profile's
  // report (headed by the graph's name) to stderr: how a training program finds its costly ops.
  void set_profiling(bool on) const;
  StepProfile profile() const;

  int num_thunks() const;
  int num_fused_thunks() const;
  // One line per thunk: "fused(add,mul,exp) -> 1 output" or "kernel dot".
  std::vector<std::string> thunk_descriptions() const;
  // The fusion plan's log (groups and refused fusions with reasons).
  const std::string& fusion_log() const;
  const CompiledGraph& optimized() const;

  struct Impl;
  explicit Executable(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

 private:
  std::shared_ptr<const Impl> impl_;
};

// Compiles the part of `graph` computing `outputs` for the dtypes and shapes of `feeds` (values
// keyed by `graph`'s placeholders; placeholders whose shape is fully known need not be fed at
// compile time). With KILN_DUMP=<dir>, the compile writes into a new subdirectory of <dir> named
// by the graph and the feeds (compiler/dump.h): the pass dumps, its kernels' IR and assembly,
// fusion.txt and buffers.txt (the memory plan: each value's bytes, live range and arena offset).
Executable compile(const Graph& graph, const std::vector<Tensor>& outputs, const FeedList& feeds);
// The same, with input-output aliases. Throws kiln::Error naming the feed when a feed is
// donated twice, an output is the target of two donations, an output index is out of range,
// the key is not a placeholder of `graph`, or the output's dtype or shape differ from the
// feed's.
Executable compile(const Graph& graph, const std::vector<Tensor>& outputs, const FeedList& feeds,
                   const std::vector<Donation>& donations);

// Where a compiled program runs.
struct CompileOptions {
  // cpu:0, the host; or a GPU, cuda:N: a device program, whose fused loops (as CUDA kernels)
  // and 2-d f32/f16/bf16 dots (cuBLASLt) run on the GPU, over a device arena with the host
  // arena's plan, and every other op on the host, its inputs copied down from the device and
  // its outputs up only when the other side reads them. Feeds and fetched outputs are host
  // tensors, unless outputs_on_device; a feed may also be a device tensor on this device
  // (Tensor::to(Device)), read there without a copy. A device program refuses donations
  // (run_donating runs it as run() does).
  Device device = Device::cpu();
  // A device program's fetched outputs stay on the device: device tensors (Tensor::device() is
  // `device`) that own their memory, never copied up; fed back to the program (a training
  // step's parameters), nothing crosses but the data. Needs a device other than the host.
  bool outputs_on_device = false;
  // Or output by output: one flag per fetched output, those set staying on the device as above
  // and the others coming back to the host (a step's new state kept there, its results read).
  // Empty: as outputs_on_device says.
  std::vector<bool> device_outputs;
};
// Throws kiln::Error: kInvalidArgument for a device this machine lacks, kUnavailable without a
// GPU or without the CUDA backend (saying which), as well as compile()'s errors.
Executable compile(const Graph& graph, const std::vector<Tensor>& outputs, const FeedList& feeds,
                   const std::vector<Donation>& donations, const CompileOptions& options);
// Whether programs can be compiled for `device`: throws compile()'s errors for it, else returns.
void check_device(const Device& device);

}  // namespace kiln::compiler
