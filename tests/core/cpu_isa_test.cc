// The x86-64 level Kiln's dispatched kernels run at (src/core/cpu_isa.h): the host's level, the
// environment's lower choice, a test's scoped choice, and dispatch running its body once.
#include "src/core/cpu_isa.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kiln/warning.h"

namespace kiln::cpu {
namespace {

// Captures the warnings issued while it lives.
struct Warnings {
  std::vector<std::string> seen;
  WarningHandler previous;
  Warnings() {
    previous = set_warning_handler([this](const std::string& m) { seen.push_back(m); });
  }
  ~Warnings() { set_warning_handler(previous); }
};

TEST(CpuIsa, ReportsTheHostLevelAndTheLevelInUse) {
  std::printf("host CPU level %s, dispatched kernels run at %s\n", isa_name(host_isa()),
              isa_name(active_isa()));
  EXPECT_LE(active_isa(), host_isa());
  // Under KILN_CPU_ISA (the dispatched_kernels_* ctests) the level asked for, where the host has
  // it.
  if (const char* env = std::getenv("KILN_CPU_ISA")) {
    EXPECT_EQ(active_isa(), detail::choose_isa(env, host_isa())) << "KILN_CPU_ISA=" << env;
  }
  EXPECT_STREQ(isa_name(Isa::kX86_64), "x86-64");
  EXPECT_STREQ(isa_name(Isa::kX86_64V3), "x86-64-v3");
  EXPECT_STREQ(isa_name(Isa::kX86_64V4), "x86-64-v4");
#if defined(__x86_64__)
  EXPECT_EQ(host_isa() >= Isa::kX86_64V3,
            __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"));
  EXPECT_EQ(host_isa() == Isa::kX86_64V4,
            __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"));
#endif
}

TEST(CpuIsa, TheEnvironmentMayLowerTheLevel) {
  Warnings w;
  EXPECT_EQ(detail::choose_isa(nullptr, Isa::kX86_64V4), Isa::kX86_64V4);
  EXPECT_EQ(detail::choose_isa("", Isa::kX86_64V3), Isa::kX86_64V3);
  EXPECT_EQ(detail::choose_isa("x86-64", Isa::kX86_64V4), Isa::kX86_64);
  EXPECT_EQ(detail::choose_isa("x86-64-v3", Isa::kX86_64V4), Isa::kX86_64V3);
  EXPECT_EQ(detail::choose_isa("x86-64-v4", Isa::kX86_64V4), Isa::kX86_64V4);
  EXPECT_TRUE(w.seen.empty());
}

TEST(CpuIsa, ALevelTheHostLacksOrAnUnknownNameIsClampedWithAWarning) {
  Warnings w;
  EXPECT_EQ(detail::choose_isa("x86-64-v4", Isa::kX86_64V3), Isa::kX86_64V3);
  ASSERT_EQ(w.seen.size(), 1u);
  EXPECT_EQ(w.seen[0],
            "KILN_CPU_ISA=x86-64-v4 asks for more than this CPU supports: running at x86-64-v3");
  EXPECT_EQ(detail::choose_isa("avx512", Isa::kX86_64), Isa::kX86_64);
  ASSERT_EQ(w.seen.size(), 2u);
  EXPECT_EQ(w.seen[1],
            "KILN_CPU_ISA=avx512 is not one of x86-64, x86-64-v3, x86-64-v4: running at x86-64");
}

TEST(CpuIsa, ScopedIsaSetsALevelUpToTheHostsAndRestoresThePrevious) {
  const Isa before = active_isa();
  {
    ScopedIsa baseline(Isa::kX86_64);
    EXPECT_EQ(active_isa(), Isa::kX86_64);
    {
      ScopedIsa top(Isa::kX86_64V4);
      EXPECT_EQ(top.isa(), host_isa());
      EXPECT_EQ(active_isa(), host_isa());
    }
    EXPECT_EQ(active_isa(), Isa::kX86_64);
  }
  EXPECT_EQ(active_isa(), before);
}

TEST(CpuIsa, DispatchRunsItsBodyOnceAtEveryLevel) {
  for (Isa isa : {Isa::kX86_64, Isa::kX86_64V3, Isa::kX86_64V4}) {
    ScopedIsa level(isa);
    int calls = 0;
    std::vector<float> v(100, 1.5f);
    dispatch([&] {
      ++calls;
      for (float& x : v) x = x * 2.0f + 1.0f;
    });
    EXPECT_EQ(calls, 1) << isa_name(level.isa());
    EXPECT_EQ(v[99], 4.0f) << isa_name(level.isa());
  }
}

}  // namespace
}  // namespace kiln::cpu
