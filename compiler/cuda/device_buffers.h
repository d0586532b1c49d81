// Internal to compiler/cuda: the driver or an error, and device buffers from the device's BFC
// allocator (runtime/cuda/device_memory.h) that free themselves (errors included), for the
// host-staged runs until device tensors exist.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "kiln/error.h"
#include "runtime/cuda/device_memory.h"
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
    for (runtime::cuda::CUdeviceptr p : ptrs)
      runtime::cuda::device_allocator().deallocate(reinterpret_cast<void*>(p));
  }
  // Throws kiln::Error: kResourceExhausted beyond the device's memory limit (naming `what`).
  runtime::cuda::CUdeviceptr alloc(size_t bytes, const std::string& what) {
    void* p = nullptr;
    try {
      p = runtime::cuda::device_allocator().allocate(bytes);
    } catch (const Error& e) {
      throw Error(e.code(), what + ": " + e.what());
    }
    ptrs.push_back(reinterpret_cast<runtime::cuda::CUdeviceptr>(p));
    return ptrs.back();
  }
  // A device copy of host tensor `t`.
  runtime::cuda::CUdeviceptr copy_in(const Tensor& t, const std::string& what) {
    runtime::cuda::CUdeviceptr p = alloc(t.nbytes(), what);
    if (t.nbytes() > 0) runtime::cuda::check(d, d.cuMemcpyHtoD(p, t.raw_data(), t.nbytes()), what);
    return p;
  }
};

}  // namespace kiln::compiler::cuda
