// The CUDA GPU as a DeviceBackend (compiler/device_backend.h): memory from the device's BFC
// allocator (runtime/cuda/device_memory.h), the driver's copies, the fused loops as one PTX
// module (ptx.h) loaded by the driver, 2-d dots through cuBLASLt, convolutions and pooling
// through cuDNN (libkiln_cuda.so), all on the default stream. No CUDA types appear here.
#pragma once

#include <memory>

#include "compiler/device_backend.h"
#include "kiln/device.h"

namespace kiln::compiler::cuda {

// The backend of `device` (a kCuda device). Throws kiln::Error: kUnavailable without a GPU
// (saying why: no driver, no device, Kiln built without CUDA), kInvalidArgument for an index
// this machine lacks, kUnimplemented for a GPU other than cuda:0 (the only one used so far).
std::shared_ptr<const DeviceBackend> device_backend(const Device& device);

}  // namespace kiln::compiler::cuda
