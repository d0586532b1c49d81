// Run-time dispatch of Kiln's own C++ kernels over the x86-64 levels: libkiln is built for the
// baseline x86-64 (unless KILN_NATIVE), and a hot kernel's body is compiled twice more, for
// x86-64-v3 (AVX2, FMA) and x86-64-v4 (AVX-512), with cpu::dispatch choosing a copy at run time.
#pragma once

namespace kiln::cpu {

enum class Isa { kX86_64 = 0, kX86_64V3 = 1, kX86_64V4 = 2 };

const char* isa_name(Isa isa);  // "x86-64", "x86-64-v3", "x86-64-v4"

// The highest level this CPU and its OS support (cpuid and xgetbv; x86-64 off x86).
Isa host_isa();

namespace detail {
// The level KILN_CPU_ISA=`env` (null: unset) selects on a host at `host`, warning when it
// cannot be honoured.
Isa choose_isa(const char* env, Isa host);
}  // namespace detail

// The level the dispatched kernels run at: the host's, or a lower one named by the environment
// variable KILN_CPU_ISA (x86-64, x86-64-v3 or x86-64-v4). A level the host lacks, or a name
// that is none of these, is clamped to the host's level with a warning. Read at the first call.
Isa active_isa();

// For tests: dispatched kernels run at min(isa, host_isa()) on every thread while it lives.
class ScopedIsa {
 public:
  explicit ScopedIsa(Isa isa);
  ~ScopedIsa();
  ScopedIsa(const ScopedIsa&) = delete;
  ScopedIsa& operator=(const ScopedIsa&) = delete;
  Isa isa() const { return isa_; }  // the level it set (after clamping)

 private:
  Isa previous_, isa_;
};

// The copies: f inlined with everything it calls that the compiler sees ([[gnu::flatten]]), each
// compiled for one level. Only inlined code takes a copy's level, so the inline functions of
// std and Eigen keep one out-of-line body, compiled for the baseline, whoever calls them (no
// AVX-512 code can leak to the baseline callers through the linker's choice of a COMDAT).
// Call dispatch inside parallel_for's chunks, not around parallel_for: the chunks run in a
// std::function the copies cannot inline.
namespace detail {
#if defined(__x86_64__) && defined(__GNUC__)
template <class F>
[[gnu::target("arch=x86-64-v4"), gnu::flatten]] void run_v4(const F& f) {
  f();
}
template <class F>
[[gnu::target("arch=x86-64-v3"), gnu::flatten]] void run_v3(const F& f) {
  f();
}
#define KILN_CPU_DISPATCH_VARIANTS 1
#endif
template <class F>
[[gnu::flatten]] void run_baseline(const F& f) {
  f();
}
}  // namespace detail

// Runs f() compiled for active_isa(). Variants of one body give the same bits when the body's
// translation unit is compiled with -ffp-contract=off (KILN_DISPATCHED_SOURCES in
// CMakeLists.txt): then no copy contracts a*b+c into an fma that the baseline rounds twice.
template <class F>
void dispatch(const F& f) {
#ifdef KILN_CPU_DISPATCH_VARIANTS
  switch (active_isa()) {
    case Isa::kX86_64V4:
      return detail::run_v4(f);
    case Isa::kX86_64V3:
      return detail::run_v3(f);
    case Isa::kX86_64:
      break;
  }
#endif
  detail::run_baseline(f);
}

}  // namespace kiln::cpu
