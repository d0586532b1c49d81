// CUDA device discovery through the driver API (runtime/cuda/driver.h, loaded at run time with
// dlopen so that the library starts on machines without a driver or a GPU).
#include "kiln/device.h"
#include "runtime/cuda/driver.h"

namespace kiln {

int cuda_device_count() { return runtime::cuda::device_count(); }

}  // namespace kiln
