// CUDA device discovery through the driver API, loaded at run time with dlopen so that the
// library starts on machines without a driver or a GPU.
#include <dlfcn.h>

#include <mutex>

#include "kiln/device.h"

namespace kiln {
namespace {

using CuInit = int (*)(unsigned int);
using CuDeviceGetCount = int (*)(int*);

int probe_devices() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) return 0;
  auto init = reinterpret_cast<CuInit>(dlsym(lib, "cuInit"));
  auto count = reinterpret_cast<CuDeviceGetCount>(dlsym(lib, "cuDeviceGetCount"));
  if (!init || !count) return 0;
  // Any error (34: stub driver, 100: no device, 35: driver too old) means "no GPU".
  if (init(0) != 0) return 0;
  int n = 0;
  if (count(&n) != 0) return 0;
  return n;
}

}  // namespace

int cuda_device_count() {
  static const int n = probe_devices();
  return n;
}

}  // namespace kiln
