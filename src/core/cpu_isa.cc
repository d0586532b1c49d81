// The x86-64 level of the host and the one the dispatched kernels run at (src/core/cpu_isa.h).
#include "src/core/cpu_isa.h"

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>

#include "kiln/warning.h"

namespace kiln::cpu {

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kX86_64:
      return "x86-64";
    case Isa::kX86_64V3:
      return "x86-64-v3";
    case Isa::kX86_64V4:
      return "x86-64-v4";
  }
  return "x86-64";
}

Isa host_isa() {
#ifdef KILN_CPU_DISPATCH_VARIANTS
  // libgcc's cpuid reading, which also checks that the OS saves the AVX and AVX-512 state.
  __builtin_cpu_init();
  if (__builtin_cpu_supports("x86-64-v4")) return Isa::kX86_64V4;
  if (__builtin_cpu_supports("x86-64-v3")) return Isa::kX86_64V3;
#endif
  return Isa::kX86_64;
}

namespace detail {

Isa choose_isa(const char* env, Isa host) {
  if (env == nullptr || *env == '\0') return host;
  const std::string want = env;
  for (Isa isa : {Isa::kX86_64, Isa::kX86_64V3, Isa::kX86_64V4}) {
    if (want != isa_name(isa)) continue;
    if (isa <= host) return isa;
    warn("KILN_CPU_ISA=" + want + " asks for more than this CPU supports: running at " +
         isa_name(host));
    return host;
  }
  warn("KILN_CPU_ISA=" + want + " is not one of x86-64, x86-64-v3, x86-64-v4: running at " +
       isa_name(host));
  return host;
}

}  // namespace detail

namespace {

std::atomic<int> active{-1};  // the level in use; -1 until the first call

}  // namespace

Isa active_isa() {
  const int v = active.load(std::memory_order_relaxed);
  if (v >= 0) return static_cast<Isa>(v);
  static std::once_flag once;
  std::call_once(once, [] {
    const Isa isa = detail::choose_isa(std::getenv("KILN_CPU_ISA"), host_isa());
    active.store(static_cast<int>(isa), std::memory_order_relaxed);
  });
  return static_cast<Isa>(active.load(std::memory_order_relaxed));
}

ScopedIsa::ScopedIsa(Isa isa) : previous_(active_isa()), isa_(isa > host_isa() ? host_isa() : isa) {
  active.store(static_cast<int>(isa_), std::memory_order_relaxed);
}

ScopedIsa::~ScopedIsa() { active.store(static_cast<int>(previous_), std::memory_order_relaxed); }

}  // namespace kiln::cpu
