// The CUDA driver API through dlopen (driver.h).
#include "runtime/cuda/driver.h"

#include <dlfcn.h>

#include <mutex>

#include "kiln/error.h"

namespace kiln::runtime::cuda {
namespace {

struct Loaded {
  Driver d;
  bool ok = false;
  int count = 0;
  std::string why;
};

template <class F>
bool bind(void* lib, const char* name, F* fn, std::string* missing) {
  *fn = reinterpret_cast<F>(dlsym(lib, name));
  if (*fn == nullptr) *missing = name;
  return *fn != nullptr;
}

Loaded load() {
  Loaded l;
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    l.why = "no CUDA driver (libcuda.so.1 did not load)";
    return l;
  }
  Driver& d = l.d;
  std::string missing;
  bool all = bind(lib, "cuInit", &d.cuInit, &missing) &&
             bind(lib, "cuDeviceGetCount", &d.cuDeviceGetCount, &missing) &&
             bind(lib, "cuDeviceGet", &d.cuDeviceGet, &missing) &&
             bind(lib, "cuDevicePrimaryCtxRetain", &d.cuDevicePrimaryCtxRetain, &missing) &&
             bind(lib, "cuCtxSetCurrent", &d.cuCtxSetCurrent, &missing) &&
             bind(lib, "cuCtxSynchronize", &d.cuCtxSynchronize, &missing) &&
             bind(lib, "cuModuleLoadDataEx", &d.cuModuleLoadDataEx, &missing) &&
             bind(lib, "cuModuleUnload", &d.cuModuleUnload, &missing) &&
             bind(lib, "cuModuleGetFunction", &d.cuModuleGetFunction, &missing) &&
             bind(lib, "cuLaunchKernel", &d.cuLaunchKernel, &missing) &&
             bind(lib, "cuMemAlloc_v2", &d.cuMemAlloc, &missing) &&
             bind(lib, "cuMemFree_v2", &d.cuMemFree, &missing) &&
             bind(lib, "cuMemcpyHtoD_v2", &d.cuMemcpyHtoD, &missing) &&
             bind(lib, "cuMemcpyDtoH_v2", &d.cuMemcpyDtoH, &missing) &&
             bind(lib, "cuMemcpyDtoD_v2", &d.cuMemcpyDtoD, &missing) &&
             bind(lib, "cuMemGetInfo_v2", &d.cuMemGetInfo, &missing) &&
             bind(lib, "cuGetErrorString", &d.cuGetErrorString, &missing);
  if (!all) {
    l.why = "the CUDA driver has no " + missing;
    return l;
  }
  int count = 0;
  if (CUresult r = d.cuInit(0); r != 0) {
    l.why = "no GPU (cuInit: " + error_string(d, r) + ")";
    return l;
  }
  if (d.cuDeviceGetCount(&count) != 0 || count == 0) {
    l.why = "no GPU (the driver reports none)";
    return l;
  }
  l.ok = true;
  l.count = count;
  return l;
}

}  // namespace

std::string error_string(const Driver& d, CUresult r) {
  const char* text = nullptr;
  if (d.cuGetErrorString == nullptr || d.cuGetErrorString(r, &text) != 0 || text == nullptr)
    text = "unknown error";
  return std::string(text) + " (" + std::to_string(r) + ")";
}

void check(const Driver& d, CUresult r, const std::string& what) {
  if (r != 0) throw Error(ErrorCode::kInternal, what + ": " + error_string(d, r));
}

namespace {

const Loaded& loaded_driver() {
  static const Loaded loaded = load();
  return loaded;
}

}  // namespace

int device_count() { return loaded_driver().count; }

const Driver* driver(std::string* why) {
  const Loaded& loaded = loaded_driver();
  if (!loaded.ok) {
    if (why) *why = loaded.why;
    return nullptr;
  }
  // Each thread that calls in gets device 0's primary context (retained once per thread).
  thread_local bool current = [&loaded] {
    CUdevice dev = 0;
    CUcontext ctx = nullptr;
    check(loaded.d, loaded.d.cuDeviceGet(&dev, 0), "cuDeviceGet(0)");
    check(loaded.d, loaded.d.cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
    check(loaded.d, loaded.d.cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    return true;
  }();
  (void)current;
  return &loaded.d;
}

}  // namespace kiln::runtime::cuda
