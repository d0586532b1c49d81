// Eager dispatch through the compiler (compiler/cpu/eager.cc installs the runtime's eager runner).
#pragma once

#include <cstdint>

namespace kiln::compiler {

// Elementwise ops with at least this many output elements run as JIT'd kernels when eager.
inline constexpr int64_t kEagerCompileMinElements = int64_t{1} << 15;

bool eager_runner_installed();

}  // namespace kiln::compiler
