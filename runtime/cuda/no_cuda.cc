// Built when Kiln is configured without CUDA: there are no CUDA devices.
#include "kiln/device.h"

namespace kiln {

int cuda_device_count() { return 0; }

}  // namespace kiln
