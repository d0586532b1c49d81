// kiln::profiler: the public face of the compiler's process-wide profiler
// (compiler/executable.h), with per-run means and the thunks named.
#include "kiln/profiler.h"

#include "compiler/executable.h"

namespace kiln::profiler {

void start() { compiler::start_global_profiling(); }

std::vector<ProgramProfile> stop() {
  std::vector<ProgramProfile> out;
  for (const compiler::ProgramProfile& pp : compiler::stop_global_profiling()) {
    const compiler::StepProfile& p = pp.profile;
    if (p.runs == 0) continue;
    const double n = static_cast<double>(p.runs);
    ProgramProfile r{pp.name,
                     p.runs,
                     p.total_us / n,
                     p.gemm_conv_us / n,
                     p.fused_loops_us / n,
                     p.other_kernels_us / n,
                     p.host_us() / n,
                     {}};
    for (size_t i = 0; i < p.thunk_us.size() && i < pp.thunks.size(); ++i) {
      r.thunks.push_back({pp.thunks[i], p.thunk_us[i] / n});
    }
    out.push_back(std::move(r));
  }
  return out;
}

std::string format(const ProgramProfile& profile, int top) {
  compiler::StepProfile p;
  const double n = static_cast<double>(profile.runs);
  p.runs = profile.runs;
  p.total_us = profile.step_us * n;
  p.gemm_conv_us = profile.gemm_conv_us * n;
  p.fused_loops_us = profile.fused_loops_us * n;
  p.other_kernels_us = profile.other_kernels_us * n;
  std::vector<std::string> descriptions;
  for (const ThunkTime& t : profile.thunks) {
    p.thunk_us.push_back(t.us * n);
    descriptions.push_back(t.description);
  }
  return "profile of '" + profile.name + "':\n" + compiler::format_profile(p, descriptions, top);
}

}  // namespace kiln::profiler
