// Library version and a description of the build (compilers, backends, host CPU).
#pragma once

#include <string>

namespace kiln {

inline constexpr int kVersionMajor = 0;
inline constexpr int kVersionMinor = 1;
inline constexpr int kVersionPatch = 0;

std::string version();     // "0.1.0"
std::string build_info();  // "Kiln 0.1.0 (LLVM 16.0.6, host CPU rocketlake, CUDA devices: 0)"

}  // namespace kiln
