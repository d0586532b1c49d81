// What LLVM knows about the host: its CPU name and vector features, used to pick the JIT's
// target and reported by kiln::build_info().
#pragma once

#include <string>

namespace kiln::compiler {

std::string llvm_version();
std::string host_cpu_name();          // e.g. "rocketlake"
int host_vector_width_bits();         // 512 with AVX-512, 256 with AVX2, else 128

}  // namespace kiln::compiler
