// Internal to compiler/cuda: the driver or an error, and device buffers that free themselves
// (errors included), for the host-staged runs until device tensors exist.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "kiln/error.h"
#include "runtime/cuda/driver.h"

namespace kiln::compiler::cuda {

// The driver, with device 0's context current; kUnavailable from `what` without one.
inline const runtime::cuda::Driver& need_driver(const std::string& what) {
  std::string why;
  const runtime::cuda::Driver* d = runtime::cuda::driver(&why);
  if (d == nullptr) throw Error(ErrorCode::kUnavailable, what + ": " + why);
  return *d;
}

struct DeviceBuffers {
  const runtime::cuda::Driver& d;
  std::vector<runtime::cuda::CUdeviceptr> ptrs;
  explicit DeviceBuffers(const runtime::cuda::Driver& driver) : d(driver) {}
  DeviceBuffers(const DeviceBuffers&) = delete;
  DeviceBuffers& operator=(const DeviceBuffers&) = delete;
  ~DeviceBuffers() {
    for (runtime::cuda::CUdeviceptr p : ptrs) d.cuMemFree(p);
  }
  runtime::cuda::CUdeviceptr alloc(size_t bytes, const std::string& what) {
    runtime::cuda::CUdeviceptr p = 0;
    runtime::cuda::check(d, d.cuMemAlloc(&p, std::max<size_t>(bytes, 1)), what);
    ptrs.push_back(p);
    return p;
  }
  // A device copy of host tensor `t`.
  runtime::cuda::CUdeviceptr copy_in(const Tensor& t, const std::string& what) {
    runtime::cuda::CUdeviceptr p = alloc(t.nbytes(), what);
    if (t.nbytes() > 0) runtime::cuda::check(d, d.cuMemcpyHtoD(p, t.raw_data(), t.nbytes()), what);
    return p;
  }
};

}  // namespace kiln::compiler::cuda
