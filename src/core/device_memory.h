// The memory of a device other than the host, as device tensors need it (Tensor::to(Device),
// Tensor::device()): allocation, copies each way. The compiler's device backends implement it
// (compiler/device_backend.h); device_memory() is defined by compiler/executable.cc, the one file
// that names a backend. No CUDA types appear here.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "kiln/device.h"
#include "kiln/dtype.h"
#include "kiln/shape.h"
#include "kiln/tensor.h"

namespace kiln::detail {

class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  virtual Device device() const = 0;
  // As DeviceBackend's (compiler/device_backend.h): allocate throws kiln::Error
  // (kResourceExhausted beyond the device's limit, naming `what`); copies are ordered after the
  // device's queued work, and download returns when the bytes are on the host.
  virtual void* allocate(int64_t bytes, const std::string& what) const = 0;
  virtual void deallocate(void* p) const = 0;
  virtual void upload(void* device, const void* host, int64_t bytes) const = 0;
  virtual void download(void* host, const void* device, int64_t bytes) const = 0;
};

// The memory of `device` (not the host). Throws kiln::Error as compile() does for a device this
// machine lacks: kUnavailable without a GPU (saying why), kInvalidArgument for a missing index,
// kUnimplemented beyond cuda:0.
std::shared_ptr<const DeviceMemory> device_memory(const Device& device);

// A tensor of `dtype` and `shape` whose bytes are `p`, memory of `memory` that the tensor owns:
// freed through it when the last reference goes.
Tensor device_tensor(std::shared_ptr<const DeviceMemory> memory, void* p, DType dtype,
                     Shape shape);

// A device tensor over `p` in `memory` that memory owned elsewhere keeps alive (not freed with
// it; never donated to a program).
Tensor device_view(std::shared_ptr<const DeviceMemory> memory, void* p, DType dtype, Shape shape);

// Where a device tensor's bytes are on its device (t.device() is not the host).
void* device_pointer(const Tensor& t);

// The memory a device tensor's bytes are in; null for a host (or symbolic, or undefined) tensor.
const DeviceMemory* memory_of(const Tensor& t);

// Whether a program running on `device` reads `t` through a host copy: t is on another device
// (a GPU's tensor fed to a host program). A program reads host tensors and its own device's.
inline bool needs_host_copy(const Tensor& t, const Device& device) {
  if (!t.defined() || t.is_symbolic()) return false;
  const Device d = t.device();
  return d.type != DeviceType::kCpu && d != device;
}

// What a program running on `device` reads for `t`: t itself, or its host copy.
inline Tensor readable_on(const Tensor& t, const Device& device) {
  return needs_host_copy(t, device) ? t.to(Device::cpu()) : t;
}

// A host tensor's copy in `memory` (a device tensor owning its bytes), and a device tensor's
// copy on the host.
Tensor to_device(const std::shared_ptr<const DeviceMemory>& memory, const Tensor& host);
Tensor to_host(const Tensor& t);

}  // namespace kiln::detail
