// The CUDA device's memory: one BFC allocator (runtime/bfc_allocator.h) over cuMemAlloc
// regions, created on first use with the options of kiln/device.h's set_memory_growth and
// set_memory_limit (or KILN_GPU_MEMORY_LIMIT, KILN_GPU_ALLOW_GROWTH=false). Device 0 only
// (the driver's current context, runtime/cuda/driver.h).
#pragma once

#include "runtime/bfc_allocator.h"

namespace kiln::runtime::cuda {

// Device 0's allocator; throws kiln::Error (kUnavailable without a GPU, saying why).
BfcAllocator& device_allocator();

}  // namespace kiln::runtime::cuda
