// Where compiled programs spend their time: between start() and stop(), every run of every
// compiled program (kiln::function, Model::fit / evaluate / predict steps, compiler::compile)
// times each of its thunks, as tf.profiler.experimental.start / stop do for TensorFlow. Only the
// compiled path is profiled; the reference interpreter is not. A clock read per thunk is the
// whole cost, and nothing at all is paid while the profiler is stopped.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::profiler {

struct ThunkTime {
  std::string description;  // "kernel fused_conv", "fused(le,select,reduce_sum) -> 2 outputs"
  double us = 0;            // mean per run
};

// One compiled program's runs between start() and stop(). Times are means per run, in
// microseconds; host_us is the run's time outside its thunks (binding feeds, taking the arena,
// dispatch).
struct ProgramProfile {
  std::string name;  // the traced graph's name ("step" for a Model's training step)
  int64_t runs = 0;
  double step_us = 0, gemm_conv_us = 0, fused_loops_us = 0, other_kernels_us = 0, host_us = 0;
  std::vector<ThunkTime> thunks;  // in program order
};

// Starts profiling. Throws kiln::Error (kFailedPrecondition) when it is already started.
void start();
// Stops profiling and returns a profile per program that ran meanwhile, including programs
// destroyed since. Throws kiln::Error (kFailedPrecondition) when it was not started.
std::vector<ProgramProfile> stop();
// A readable report: the split of the mean run by kind, then the `top` costliest thunks.
std::string format(const ProgramProfile& profile, int top = 12);

}  // namespace kiln::profiler
