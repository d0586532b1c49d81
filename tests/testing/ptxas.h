// ptxas, the CUDA toolkit's PTX assembler, for checking generated PTX on a machine without a GPU.
#pragma once

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <string>

#include "tests/subprocess.h"

namespace kiln::testing_util {

// $KILN_PTXAS, else $CUDA_HOME/bin/ptxas, else /usr/local/cuda/bin/ptxas; "" when none runs.
inline std::string ptxas_path() {
  for (const char* var : {"KILN_PTXAS", "CUDA_HOME"}) {
    const char* v = std::getenv(var);
    if (v == nullptr || *v == '\0') continue;
    std::string p = std::string(v) + (std::string(var) == "CUDA_HOME" ? "/bin/ptxas" : "");
    if (access(p.c_str(), X_OK) == 0) return p;
  }
  const std::string p = "/usr/local/cuda/bin/ptxas";
  return access(p.c_str(), X_OK) == 0 ? p : "";
}

// What ptxas says about `ptx` for sm_<sm>: "" when it assembles it without a complaint.
inline std::string ptxas_errors(const std::string& ptxas, const std::string& ptx, int sm = 90) {
  const std::string dir = ::testing::TempDir();
  static std::atomic<int> counter{0};
  const std::string base =
      dir + "/kiln_ptxas_" + std::to_string(getpid()) + "_" + std::to_string(counter++);
  {
    std::ofstream f(base + ".ptx", std::ios::binary);
    f << ptx;
  }
  ProcessResult r = run_process({ptxas, "-arch=sm_" + std::to_string(sm),
                                 base + ".ptx", "-o", base + ".cubin"},
                                base + ".log");
  std::remove((base + ".ptx").c_str());
  std::remove((base + ".cubin").c_str());
  std::remove((base + ".log").c_str());
  if (r.exited_ok() && r.output.find("arning") == std::string::npos) return "";
  return r.output.empty() ? "ptxas failed without a message" : r.output;
}

}  // namespace kiln::testing_util
